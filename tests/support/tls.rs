//! A secured Kafka for the security tests, and its certificates.
//!
//! The broker has a `SECURE` listener that takes only SASL/SCRAM-SHA-512
//! over TLS, with a certificate for `127.0.0.1` and `localhost` signed by a
//! CA made at test time, and authorizes with KRaft's `StandardAuthorizer`.
//! Its PLAINTEXT listener (inter-broker and controller traffic) stays the
//! tests' own administrative door: its principal, `User:ANONYMOUS`, is a
//! super user.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::broker::{Broker, BrokerOptions};
use super::{repo, temp_dir, unique};

/// A Kafka that accepts clients only over SASL/SCRAM-SHA-512 and TLS.
pub struct SecureBroker {
    /// `127.0.0.1:<port>` of the `SECURE` listener: the broker's
    /// certificate names `127.0.0.1` and `localhost`.
    pub bootstrap: String,
    pub username: String,
    /// Distinctive, so a test can look for it anywhere.
    pub password: String,
    /// PEM of the CA that signed the broker's certificate.
    pub ca: PathBuf,
    /// PEM of another CA, which signed nothing the broker shows.
    pub other_ca: PathBuf,
    /// The cluster, whose PLAINTEXT listener is for the tests' own admin
    /// requests.
    pub kafka: Broker,
    _dir: tempfile::TempDir,
}

static SECURE_BROKER: OnceLock<SecureBroker> = OnceLock::new();

/// The secured broker of this test binary, started on first use.
pub fn secure_broker() -> &'static SecureBroker {
    SECURE_BROKER.get_or_init(start_secure_broker)
}

impl SecureBroker {
    /// Client settings that pass: SASL_SSL, SCRAM-SHA-512, the right CA.
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap)
            .set("security.protocol", "sasl_ssl")
            .set("sasl.mechanisms", "SCRAM-SHA-512")
            .set("sasl.username", &self.username)
            .set("sasl.password", &self.password)
            .set("ssl.ca.location", self.ca.display().to_string());
        config
    }

    /// The environment a secured topology (see [`secured_topology`]) reads
    /// its servers and credentials from.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("KAFKA_BOOTSTRAP_SERVERS".into(), self.bootstrap.clone()),
            ("KAFKA_USERNAME".into(), self.username.clone()),
            ("KAFKA_PASSWORD".into(), self.password.clone()),
            ("KAFKA_CA".into(), self.ca.display().to_string()),
        ]
    }
}

/// The text of `topology` (a file under the repository) with a
/// `kafka.security` section that takes its credentials from
/// `${KAFKA_USERNAME}`, `${KAFKA_PASSWORD}` and `${KAFKA_CA}`, written to
/// `dir`; returns its path.
pub fn secured_topology(topology: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join(topology)).unwrap();
    let security = "kafka:
  security:
    protocol: sasl_ssl
    sasl:
      mechanism: SCRAM-SHA-512
      username: ${KAFKA_USERNAME}
      password: ${KAFKA_PASSWORD}
    tls:
      ca: ${KAFKA_CA}
";
    assert!(
        text.contains("\nkafka:\n"),
        "{topology} has a kafka section"
    );
    let secured = text.replacen("\nkafka:\n", &format!("\n{security}"), 1);
    let path = dir.join(format!(
        "secured-{}",
        Path::new(topology).file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, secured).unwrap();
    path
}

fn start_secure_broker() -> SecureBroker {
    let dir = temp_dir();
    let certificates = TestCertificates::new();
    let ca = dir.path().join("ca.pem");
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&ca, &certificates.ca).unwrap();
    std::fs::write(&other_ca, &certificates.other_ca).unwrap();
    // Kafka's PEM key store: the private key (PKCS#8) and its certificate.
    let keystore = dir.path().join("broker-keystore.pem");
    let mut pem = certificates.broker_key.clone();
    pem.extend_from_slice(&certificates.broker);
    std::fs::write(&keystore, pem).unwrap();
    let username = unique("streamfold");
    let password = format!(
        "pw-{}-{}",
        unique("x").trim_start_matches("x-"),
        unique("y").trim_start_matches("y-")
    );
    let kafka = Broker::start(BrokerOptions {
        nodes: 1,
        listeners: vec!["SECURE".into()],
        configs: vec![
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SECURE:SASL_SSL"
                .into(),
            "sasl.enabled.mechanisms=SCRAM-SHA-512".into(),
            "listener.name.secure.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;".into(),
            "ssl.keystore.type=PEM".into(),
            format!("ssl.keystore.location={}", keystore.display()),
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            format!("super.users=User:ANONYMOUS;User:{username}"),
        ],
        format_args: vec![
            "--add-scram".into(),
            format!("SCRAM-SHA-512=[name={username},password={password}]"),
        ],
        ..BrokerOptions::default()
    });
    let bootstrap = format!("127.0.0.1:{}", kafka.nodes[0].listener_ports[0]);
    let broker = SecureBroker {
        bootstrap,
        username,
        password,
        ca,
        other_ca,
        kafka,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let consumer: BaseConsumer = broker.client().create().unwrap();
        if consumer
            .fetch_metadata(None, Duration::from_secs(2))
            .is_ok()
        {
            return broker;
        }
        assert!(
            Instant::now() < deadline,
            "the secured broker at {} did not answer within 60s; its log:\n{}",
            broker.bootstrap,
            broker.kafka.nodes[0].log_tail(60)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// PEM texts: a CA, a broker certificate it signed for `127.0.0.1` and
/// `localhost` with the broker's key (PKCS#8), and an unrelated CA.
struct TestCertificates {
    ca: Vec<u8>,
    broker: Vec<u8>,
    broker_key: Vec<u8>,
    other_ca: Vec<u8>,
}

impl TestCertificates {
    fn new() -> TestCertificates {
        use openssl::asn1::Asn1Time;
        use openssl::bn::{BigNum, MsbOption};
        use openssl::ec::{EcGroup, EcKey};
        use openssl::hash::MessageDigest;
        use openssl::nid::Nid;
        use openssl::pkey::{PKey, Private};
        use openssl::x509::extension::{
            BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
        };
        use openssl::x509::{X509, X509NameBuilder};

        fn key() -> PKey<Private> {
            let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
            PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
        }
        fn certificate(
            name: &str,
            key: &PKey<Private>,
            issuer: Option<(&X509, &PKey<Private>)>,
        ) -> X509 {
            let mut subject = X509NameBuilder::new().unwrap();
            subject.append_entry_by_nid(Nid::COMMONNAME, name).unwrap();
            let subject = subject.build();
            let mut builder = X509::builder().unwrap();
            builder.set_version(2).unwrap();
            let mut serial = BigNum::new().unwrap();
            serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
            builder
                .set_serial_number(&serial.to_asn1_integer().unwrap())
                .unwrap();
            builder.set_subject_name(&subject).unwrap();
            builder.set_pubkey(key).unwrap();
            builder
                .set_not_before(&Asn1Time::days_from_now(0).unwrap())
                .unwrap();
            builder
                .set_not_after(&Asn1Time::days_from_now(2).unwrap())
                .unwrap();
            match issuer {
                None => {
                    builder.set_issuer_name(&subject).unwrap();
                    builder
                        .append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                        .unwrap();
                    builder
                        .append_extension(
                            KeyUsage::new()
                                .critical()
                                .key_cert_sign()
                                .crl_sign()
                                .build()
                                .unwrap(),
                        )
                        .unwrap();
                    builder.sign(key, MessageDigest::sha256()).unwrap();
                }
                Some((ca, ca_key)) => {
                    builder.set_issuer_name(ca.subject_name()).unwrap();
                    builder
                        .append_extension(BasicConstraints::new().build().unwrap())
                        .unwrap();
                    builder
                        .append_extension(
                            KeyUsage::new()
                                .critical()
                                .digital_signature()
                                .key_agreement()
                                .build()
                                .unwrap(),
                        )
                        .unwrap();
                    builder
                        .append_extension(ExtendedKeyUsage::new().server_auth().build().unwrap())
                        .unwrap();
                    let san = SubjectAlternativeName::new()
                        .dns("localhost")
                        .ip("127.0.0.1")
                        .build(&builder.x509v3_context(Some(ca), None))
                        .unwrap();
                    builder.append_extension(san).unwrap();
                    builder.sign(ca_key, MessageDigest::sha256()).unwrap();
                }
            }
            builder.build()
        }

        let ca_key = key();
        let ca = certificate("streamfold test CA", &ca_key, None);
        let broker_key = key();
        let broker = certificate("localhost", &broker_key, Some((&ca, &ca_key)));
        let other_key = key();
        let other_ca = certificate("streamfold other CA", &other_key, None);
        TestCertificates {
            ca: ca.to_pem().unwrap(),
            broker: broker.to_pem().unwrap(),
            broker_key: broker_key.private_key_to_pem_pkcs8().unwrap(),
            other_ca: other_ca.to_pem().unwrap(),
        }
    }
}
