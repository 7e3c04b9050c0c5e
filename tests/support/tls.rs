//! A secured Kafka for the security tests, its certificates and its ACLs.
//!
//! The broker authorizes with KRaft's `StandardAuthorizer` and has two
//! listeners for clients besides PLAINTEXT:
//!
//! - `SECURE`: SASL/SCRAM-SHA-512 over TLS, with a certificate for
//!   `127.0.0.1` and `localhost` signed by a CA made at test time. It
//!   listens on every address and advertises `127.0.0.1`, so a client can
//!   reach it through `127.0.0.2`, an address its certificate does not name;
//! - `MTLS`: TLS that requires a client certificate signed by the same CA;
//!   the principal is the certificate's subject (`User:CN=...`).
//!
//! Neither principal is a super user: a test grants each what it needs
//! ([`SecureAccess::grant`], [`application_acls`]). The PLAINTEXT listener
//! (inter-broker and controller traffic) stays the tests' own
//! administrative door: its principal, `User:ANONYMOUS`, is the one super
//! user.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::broker::{Broker, BrokerOptions};
use super::{repo, temp_dir, unique};

/// How to reach a secured cluster, with which credentials, and how to grant
/// its principals ACLs.
pub struct SecureAccess {
    /// `127.0.0.1:<port>` of each node's `SECURE` listener (SASL_SSL): the
    /// broker's certificate names `127.0.0.1` and `localhost`.
    pub bootstrap: String,
    /// The first node's `SECURE` listener through `127.0.0.2`, which its
    /// certificate does not name.
    pub unnamed_bootstrap: String,
    /// `127.0.0.1:<port>` of each node's `MTLS` listener (TLS with a client
    /// certificate).
    pub mtls_bootstrap: String,
    pub username: String,
    /// Distinctive, so a test can look for it anywhere.
    pub password: String,
    /// PEM of the CA that signed the broker's certificate.
    pub ca: PathBuf,
    /// PEM of another CA, which signed nothing the broker shows.
    pub other_ca: PathBuf,
    /// PEM of a client certificate the CA signed, and of its key.
    pub client_certificate: PathBuf,
    pub client_key: PathBuf,
    /// The principal the broker makes of that certificate on `MTLS`.
    pub client_principal: String,
    /// The PLAINTEXT listeners, where `User:ANONYMOUS` is a super user.
    admin_bootstrap: String,
    dir: tempfile::TempDir,
}

/// A one-node Kafka whose clients authenticate (see the module docs).
pub struct SecureBroker {
    pub access: SecureAccess,
    /// The cluster, whose PLAINTEXT listener is for the tests' own admin
    /// requests.
    pub kafka: Broker,
}

impl std::ops::Deref for SecureBroker {
    type Target = SecureAccess;
    fn deref(&self) -> &SecureAccess {
        &self.access
    }
}

static SECURE_BROKER: OnceLock<SecureBroker> = OnceLock::new();

/// The secured broker of this test binary, started on first use.
pub fn secure_broker() -> &'static SecureBroker {
    SECURE_BROKER.get_or_init(|| {
        let (access, kafka) = SecureAccess::start(BrokerOptions::default());
        SecureBroker { access, kafka }
    })
}

/// One ACL binding: ALLOW `operation` on a resource to a principal, from
/// any host (the arguments of `tests/support/Acls.java`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    /// `TOPIC`, `GROUP`, `TRANSACTIONAL_ID` or `CLUSTER`.
    pub resource: &'static str,
    pub name: String,
    /// `LITERAL` or `PREFIXED`.
    pub pattern: &'static str,
    pub operation: &'static str,
}

impl Acl {
    pub fn literal(resource: &'static str, name: &str, operation: &'static str) -> Acl {
        Acl {
            resource,
            name: name.to_string(),
            pattern: "LITERAL",
            operation,
        }
    }

    pub fn prefixed(resource: &'static str, prefix: &str, operation: &'static str) -> Acl {
        Acl {
            resource,
            name: prefix.to_string(),
            pattern: "PREFIXED",
            operation,
        }
    }
}

/// The ACLs docs/security.md lists for `streamfold run` of application
/// `app` (its topology's `name`) that reads `sources` and writes `outputs`
/// (its sinks and its dead-letter topic), creating those that do not exist.
pub fn application_acls(app: &str, sources: &[&str], outputs: &[&str]) -> Vec<Acl> {
    let internal = format!("{app}-");
    let mut acls: Vec<Acl> = sources
        .iter()
        .map(|s| Acl::literal("TOPIC", s, "READ"))
        .collect();
    for operation in ["READ", "WRITE", "CREATE", "DESCRIBE_CONFIGS"] {
        acls.push(Acl::prefixed("TOPIC", &internal, operation));
    }
    for output in outputs {
        for operation in ["WRITE", "CREATE", "DESCRIBE_CONFIGS"] {
            acls.push(Acl::literal("TOPIC", output, operation));
        }
    }
    acls.push(Acl::literal("GROUP", app, "READ"));
    acls.push(Acl::literal("GROUP", &format!("{app}-restore"), "DESCRIBE"));
    acls.push(Acl::prefixed("TRANSACTIONAL_ID", &internal, "WRITE"));
    acls
}

/// The ACLs docs/security.md lists for `streamfold dlq replay`, besides
/// the transactional id `<app>-dlq-replay`, which [`application_acls`]'
/// prefix covers.
pub fn replay_acls(app: &str, dead_letter_topic: &str, sources: &[&str]) -> Vec<Acl> {
    let mut acls = vec![
        Acl::literal("TOPIC", dead_letter_topic, "READ"),
        Acl::literal("GROUP", &format!("{app}-dlq-replay"), "READ"),
    ];
    acls.extend(sources.iter().map(|s| Acl::literal("TOPIC", s, "WRITE")));
    acls
}

impl SecureAccess {
    /// Starts the cluster `options` describes with the secured listeners and
    /// the authorizer added, and a SCRAM user made for it; returns once its
    /// `SECURE` listener answers that user.
    pub fn start(mut options: BrokerOptions) -> (SecureAccess, Broker) {
        let dir = temp_dir();
        let certificates = TestCertificates::new();
        let write = |name: &str, pem: &[&[u8]]| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem.concat()).unwrap();
            path
        };
        let ca = write("ca.pem", &[&certificates.ca]);
        let other_ca = write("other-ca.pem", &[&certificates.other_ca]);
        let client_certificate = write("client.pem", &[&certificates.client]);
        let client_key = write("client-key.pem", &[&certificates.client_key]);
        // Kafka's PEM key store: the private key (PKCS#8) and its certificate.
        let keystore = write(
            "broker-keystore.pem",
            &[&certificates.broker_key, &certificates.broker],
        );
        let username = unique("streamfold");
        let password = format!(
            "pw-{}-{}",
            unique("x").trim_start_matches("x-"),
            unique("y").trim_start_matches("y-")
        );
        options.listeners.extend(["SECURE".into(), "MTLS".into()]);
        options.listener_bind = Some("0.0.0.0".into());
        options.configs.extend([
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SECURE:SASL_SSL,MTLS:SSL"
                .into(),
            "sasl.enabled.mechanisms=SCRAM-SHA-512".into(),
            "listener.name.secure.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;".into(),
            "ssl.keystore.type=PEM".into(),
            format!("ssl.keystore.location={}", keystore.display()),
            "ssl.truststore.type=PEM".into(),
            format!("ssl.truststore.location={}", ca.display()),
            "listener.name.mtls.ssl.client.auth=required".into(),
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            "super.users=User:ANONYMOUS".into(),
        ]);
        options.format_args.extend([
            "--add-scram".into(),
            format!("SCRAM-SHA-512=[name={username},password={password}]"),
        ]);
        let extra = options.listeners.len();
        let kafka = Broker::start(options);
        let ports = |index: usize, host: &str| {
            kafka
                .nodes
                .iter()
                .map(|n| format!("{host}:{}", n.listener_ports[extra - 2 + index]))
                .collect::<Vec<_>>()
                .join(",")
        };
        let access = SecureAccess {
            bootstrap: ports(0, "127.0.0.1"),
            unnamed_bootstrap: format!("127.0.0.2:{}", kafka.nodes[0].listener_ports[extra - 2]),
            mtls_bootstrap: ports(1, "127.0.0.1"),
            username,
            password,
            ca,
            other_ca,
            client_certificate,
            client_key,
            client_principal: format!("User:CN={CLIENT_NAME}"),
            admin_bootstrap: kafka.bootstrap.clone(),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let consumer: BaseConsumer = access.client().create().unwrap();
            if consumer
                .fetch_metadata(None, Duration::from_secs(2))
                .is_ok()
            {
                return (access, kafka);
            }
            assert!(
                Instant::now() < deadline,
                "the secured broker at {} did not answer within 60s; its log:\n{}",
                access.bootstrap,
                kafka.nodes[0].log_tail(60)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

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

    /// Client settings for the PLAINTEXT listener, whose principal is a
    /// super user: the tests' own set-up and reading.
    pub fn admin_client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.admin_bootstrap);
        config
    }

    /// The SCRAM user's principal.
    pub fn principal(&self) -> String {
        format!("User:{}", self.username)
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

    /// A directory that lives as long as the cluster.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Grants `acls` to `principal` through the PLAINTEXT listener with
    /// Kafka's own Admin client (`tests/support/Acls.java`); returns once
    /// the broker lists them.
    pub fn grant(&self, principal: &str, acls: &[Acl]) {
        self.change_acls(false, principal, acls);
    }

    /// Deletes `acls` of `principal`; returns once the broker no longer
    /// lists them.
    pub fn revoke(&self, principal: &str, acls: &[Acl]) {
        self.change_acls(true, principal, acls);
    }

    fn change_acls(&self, revoke: bool, principal: &str, acls: &[Acl]) {
        let kafka = Command::new(repo().join("scripts/install-kafka.sh"))
            .output()
            .expect("scripts/install-kafka.sh runs");
        assert!(kafka.status.success(), "{kafka:?}");
        let kafka = String::from_utf8(kafka.stdout).unwrap();
        let mut command = Command::new("java");
        command
            .arg("-cp")
            .arg(format!("{}/libs/*", kafka.trim()))
            .arg(repo().join("tests/support/Acls.java"));
        if revoke {
            command.arg("--revoke");
        }
        command.arg(&self.admin_bootstrap).arg(principal);
        for acl in acls {
            command.args([acl.resource, &acl.name, acl.pattern, acl.operation]);
        }
        let output = command.output().expect("java runs");
        assert!(
            output.status.success(),
            "changing {acls:?} of {principal} (revoke: {revoke}) failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The text of `topology` (a file under the repository) with a
/// `kafka.security` section that takes its credentials from
/// `${KAFKA_USERNAME}`, `${KAFKA_PASSWORD}` and `${KAFKA_CA}`, written to
/// `dir`; returns its path.
pub fn secured_topology(topology: &str, dir: &Path) -> PathBuf {
    with_security(
        topology,
        dir,
        "kafka:
  security:
    protocol: sasl_ssl
    sasl:
      mechanism: SCRAM-SHA-512
      username: ${KAFKA_USERNAME}
      password: ${KAFKA_PASSWORD}
    tls:
      ca: ${KAFKA_CA}
",
    )
}

/// The text of `topology` with a `kafka.security` section for mutual TLS:
/// the CA `${KAFKA_CA}`, the client certificate `${KAFKA_CERTIFICATE}` and
/// its key `${KAFKA_KEY}`.
pub fn mutual_tls_topology(topology: &str, dir: &Path) -> PathBuf {
    with_security(
        topology,
        dir,
        "kafka:
  security:
    tls:
      ca: ${KAFKA_CA}
      certificate: ${KAFKA_CERTIFICATE}
      key: ${KAFKA_KEY}
",
    )
}

fn with_security(topology: &str, dir: &Path, security: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo().join(topology)).unwrap();
    assert!(
        text.contains("\nkafka:\n"),
        "{topology} has a kafka section"
    );
    let secured = text.replacen("\nkafka:\n", &format!("\n{security}"), 1);
    let path = dir.join(format!(
        "{}-{}",
        unique("secured"),
        Path::new(topology).file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, secured).unwrap();
    path
}

/// The subject of the client certificate.
const CLIENT_NAME: &str = "streamfold-client";

/// PEM files in `dir` for a TLS server on loopback: a CA, a certificate
/// it signed for `127.0.0.1` and `localhost`, its key (PKCS#8), and an
/// unrelated CA.
pub struct ServerCertificates {
    pub ca: PathBuf,
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub other_ca: PathBuf,
}

impl ServerCertificates {
    pub fn write(dir: &Path) -> ServerCertificates {
        let made = TestCertificates::new();
        let write = |name: &str, pem: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        ServerCertificates {
            ca: write("ca.pem", &made.ca),
            certificate: write("server.pem", &made.broker),
            key: write("server-key.pem", &made.broker_key),
            other_ca: write("other-ca.pem", &made.other_ca),
        }
    }
}

/// PEM texts: a CA, a broker certificate it signed for `127.0.0.1` and
/// `localhost` with the broker's key (PKCS#8), a client certificate it
/// signed for [`CLIENT_NAME`] with its key, and an unrelated CA.
struct TestCertificates {
    ca: Vec<u8>,
    broker: Vec<u8>,
    broker_key: Vec<u8>,
    client: Vec<u8>,
    client_key: Vec<u8>,
    other_ca: Vec<u8>,
}

/// What a test certificate is for.
enum Role<'a> {
    Ca,
    Server(&'a X509, &'a PKey<Private>),
    Client(&'a X509, &'a PKey<Private>),
}

use openssl::pkey::{PKey, Private};
use openssl::x509::X509;

impl TestCertificates {
    fn new() -> TestCertificates {
        use openssl::asn1::Asn1Time;
        use openssl::bn::{BigNum, MsbOption};
        use openssl::ec::{EcGroup, EcKey};
        use openssl::hash::MessageDigest;
        use openssl::nid::Nid;
        use openssl::x509::X509NameBuilder;
        use openssl::x509::extension::{
            BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
        };

        fn key() -> PKey<Private> {
            let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
            PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
        }
        fn certificate(name: &str, key: &PKey<Private>, role: Role<'_>) -> X509 {
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
            let (ca, ca_key, server) = match role {
                Role::Ca => {
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
                    return builder.build();
                }
                Role::Server(ca, ca_key) => (ca, ca_key, true),
                Role::Client(ca, ca_key) => (ca, ca_key, false),
            };
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
            if server {
                builder
                    .append_extension(ExtendedKeyUsage::new().server_auth().build().unwrap())
                    .unwrap();
                let san = SubjectAlternativeName::new()
                    .dns("localhost")
                    .ip("127.0.0.1")
                    .build(&builder.x509v3_context(Some(ca), None))
                    .unwrap();
                builder.append_extension(san).unwrap();
            } else {
                builder
                    .append_extension(ExtendedKeyUsage::new().client_auth().build().unwrap())
                    .unwrap();
            }
            builder.sign(ca_key, MessageDigest::sha256()).unwrap();
            builder.build()
        }

        let ca_key = key();
        let ca = certificate("streamfold test CA", &ca_key, Role::Ca);
        let broker_key = key();
        let broker = certificate("localhost", &broker_key, Role::Server(&ca, &ca_key));
        let client_key = key();
        let client = certificate(CLIENT_NAME, &client_key, Role::Client(&ca, &ca_key));
        let other_key = key();
        let other_ca = certificate("streamfold other CA", &other_key, Role::Ca);
        TestCertificates {
            ca: ca.to_pem().unwrap(),
            broker: broker.to_pem().unwrap(),
            broker_key: broker_key.private_key_to_pem_pkcs8().unwrap(),
            client: client.to_pem().unwrap(),
            client_key: client_key.private_key_to_pem_pkcs8().unwrap(),
            other_ca: other_ca.to_pem().unwrap(),
        }
    }
}
