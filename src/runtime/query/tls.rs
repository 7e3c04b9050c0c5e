//! HTTPS for the query server (`queries.tls`): the server's identity and
//! the listener that completes TLS handshakes, and the trust the client
//! forwarding queries to other instances checks their certificates with.
//!
//! native-tls is the system's OpenSSL here, the library librdkafka's TLS
//! links. A handshake runs in its own task, not in the accept loop, so a
//! client that connects and stays silent holds up no one; it gets
//! [`HANDSHAKE_TIMEOUT`].

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use openssl::pkey::PKey;
use openssl::x509::X509;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_native_tls::{TlsAcceptor, TlsConnector, TlsStream};

use crate::topology::model::QueryTlsConfig;

/// How long a client may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes completed and not yet taken by the server.
const READY_CONNECTIONS: usize = 64;

/// `queries.tls`, loaded: what the server presents, what the client trusts.
#[derive(Clone)]
pub(crate) struct Tls {
    acceptor: TlsAcceptor,
    pub(crate) connector: TlsConnector,
}

impl Tls {
    /// Reads the files `config` names; the error says which one failed and
    /// why.
    pub(crate) fn load(config: &QueryTlsConfig) -> Result<Tls, String> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path)
                .map_err(|e| format!("queries.tls.{what}: cannot read {}: {e}", path.display()))
        };
        let certificate = read("certificate", &config.certificate)?;
        let leaf = X509::from_pem(&certificate).map_err(|e| {
            format!(
                "queries.tls.certificate: {} holds no PEM certificate: {e}",
                config.certificate.display()
            )
        })?;
        let key = PKey::private_key_from_pem(&read("key", &config.key)?).map_err(|e| {
            format!(
                "queries.tls.key: {} holds no unencrypted PEM private key: {e}",
                config.key.display()
            )
        })?;
        // Caught here, not at the first handshake.
        if !leaf.public_key().is_ok_and(|public| public.public_eq(&key)) {
            return Err(format!(
                "queries.tls.key: {} is not the key of the certificate {}",
                config.key.display(),
                config.certificate.display()
            ));
        }
        // native-tls takes PKCS#8 only; a PKCS#1 (`BEGIN RSA PRIVATE KEY`)
        // or SEC1 (`BEGIN EC PRIVATE KEY`) key is what many tools write.
        let key = key
            .private_key_to_pem_pkcs8()
            .map_err(|e| format!("queries.tls.key: {e}"))?;
        let identity = native_tls::Identity::from_pkcs8(&certificate, &key).map_err(|e| {
            format!(
                "queries.tls: the certificate {} and the key {} do not make an identity: {e}",
                config.certificate.display(),
                config.key.display()
            )
        })?;
        let acceptor = native_tls::TlsAcceptor::new(identity)
            .map_err(|e| format!("queries.tls: cannot serve with this certificate: {e}"))?;
        let mut connector = native_tls::TlsConnector::builder();
        if let Some(ca) = &config.ca {
            let authorities = X509::stack_from_pem(&read("ca", ca)?)
                .ok()
                .filter(|authorities| !authorities.is_empty())
                .ok_or_else(|| {
                    format!("queries.tls.ca: {} holds no PEM certificate", ca.display())
                })?;
            for authority in authorities {
                let der = authority
                    .to_der()
                    .map_err(|e| format!("queries.tls.ca: {e}"))?;
                let authority = native_tls::Certificate::from_der(&der)
                    .map_err(|e| format!("queries.tls.ca: {e}"))?;
                connector.add_root_certificate(authority);
            }
        }
        let connector = connector
            .build()
            .map_err(|e| format!("queries.tls: cannot make the forwarding client: {e}"))?;
        Ok(Tls {
            acceptor: acceptor.into(),
            connector: connector.into(),
        })
    }
}

/// A listener for `axum::serve` that hands over connections once their
/// TLS handshake is complete. Must be made inside the Tokio runtime that
/// serves it.
pub(crate) struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    pub(crate) fn new(listener: TcpListener, tls: &Tls) -> std::io::Result<TlsListener> {
        let addr = listener.local_addr()?;
        let (done, ready) = mpsc::channel(READY_CONNECTIONS);
        let acceptor = tls.acceptor.clone();
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors, most likely: wait, as
                        // axum's own listener does.
                        tracing::warn!(%error, "The query server cannot accept a connection.");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = done.send((stream, peer)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "A TLS handshake failed.");
                        }
                        Err(_) => tracing::debug!(%peer, "A TLS handshake timed out."),
                    }
                });
            }
        });
        Ok(TlsListener { addr, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop runs as long as the runtime: never here
            // before the server stops.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

#[cfg(test)]
mod tests {
    use openssl::asn1::Asn1Time;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::{PKey, Private};
    use openssl::rsa::Rsa;
    use openssl::x509::{X509, X509NameBuilder};

    use super::*;

    /// A self-signed certificate for `key`, as PEM.
    fn certificate(key: &PKey<Private>) -> Vec<u8> {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_nid(Nid::COMMONNAME, "localhost")
            .unwrap();
        let name = name.build();
        let mut builder = X509::builder().unwrap();
        builder.set_version(2).unwrap();
        builder.set_subject_name(&name).unwrap();
        builder.set_issuer_name(&name).unwrap();
        builder.set_pubkey(key).unwrap();
        builder
            .set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        builder
            .set_not_after(&Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        builder.sign(key, MessageDigest::sha256()).unwrap();
        builder.build().to_pem().unwrap()
    }

    fn config(dir: &Path, certificate: &[u8], key: &[u8], ca: Option<&[u8]>) -> QueryTlsConfig {
        let write = |name: &str, pem: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        QueryTlsConfig {
            certificate: write("tls.crt", certificate),
            key: write("tls.key", key),
            ca: ca.map(|pem| write("ca.crt", pem)),
        }
    }

    #[test]
    fn keys_in_each_pem_format_load() {
        let dir = tempfile::tempdir().unwrap();
        let rsa = Rsa::generate(2048).unwrap();
        let pkcs1 = rsa.private_key_to_pem().unwrap();
        assert!(pkcs1.starts_with(b"-----BEGIN RSA PRIVATE KEY-----"));
        let rsa = PKey::from_rsa(rsa).unwrap();
        let ec =
            EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap();
        let sec1 = ec.private_key_to_pem().unwrap();
        assert!(sec1.starts_with(b"-----BEGIN EC PRIVATE KEY-----"));
        let ec = PKey::from_ec_key(ec).unwrap();
        let pkcs8 = ec.private_key_to_pem_pkcs8().unwrap();
        for (key, pem) in [(&rsa, &pkcs1), (&ec, &sec1), (&ec, &pkcs8)] {
            let certificate = certificate(key);
            let loaded = Tls::load(&config(dir.path(), &certificate, pem, Some(&certificate)));
            assert!(loaded.is_ok(), "{}", loaded.err().unwrap_or_default());
        }
    }

    #[test]
    fn a_missing_or_wrong_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = PKey::from_ec_key(
            EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
        )
        .unwrap();
        let certificate = certificate(&key);
        let pem = key.private_key_to_pem_pkcs8().unwrap();
        let error = |config: &QueryTlsConfig| Tls::load(config).err().unwrap();

        let mut missing = config(dir.path(), &certificate, &pem, None);
        missing.certificate = dir.path().join("absent.crt");
        let message = error(&missing);
        assert!(
            message.starts_with("queries.tls.certificate: cannot read ")
                && message.contains("absent.crt"),
            "{message}"
        );
        let not_a_key = config(dir.path(), &certificate, &certificate, None);
        assert!(
            error(&not_a_key).starts_with("queries.tls.key: "),
            "{}",
            error(&not_a_key)
        );
        let no_authority = config(dir.path(), &certificate, &pem, Some(b"not PEM"));
        assert!(
            error(&no_authority).contains("holds no PEM certificate"),
            "{}",
            error(&no_authority)
        );
        // A key that is not the certificate's.
        let other = PKey::from_ec_key(
            EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
        )
        .unwrap();
        let mismatched = config(
            dir.path(),
            &certificate,
            &other.private_key_to_pem_pkcs8().unwrap(),
            None,
        );
        assert!(
            error(&mismatched).contains("is not the key of the certificate"),
            "{}",
            error(&mismatched)
        );
    }
}
