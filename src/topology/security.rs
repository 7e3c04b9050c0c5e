//! `kafka.security`: how streamfold authenticates to Kafka and encrypts the
//! connection — SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and TLS.
//!
//! The section is a typed front for the librdkafka properties users of
//! other clients know; [`SecurityConfig::properties`] is the translation,
//! and anything it does not cover (OAUTHBEARER, Kerberos, PEM strings)
//! stays available through `kafka.properties`. A property set both here and
//! in `kafka.properties`, `kafka.consumer` or `kafka.producer` is an error,
//! so each setting has one place. `-X key=value` on the command line still
//! wins over both.
//!
//! ```yaml
//! kafka:
//!   bootstrap_servers: ${KAFKA_BOOTSTRAP_SERVERS}
//!   security:
//!     protocol: sasl_ssl            # inferred from sasl/tls when omitted
//!     sasl:
//!       mechanism: SCRAM-SHA-512
//!       username: ${KAFKA_USERNAME}
//!       password: ${KAFKA_PASSWORD}
//!     tls:
//!       ca: /etc/streamfold/kafka-ca.pem
//! ```
//!
//! Passwords are [`Secret`]s: `describe` and `check` show them as `***`,
//! and their values are masked in logs and errors ([`crate::secrets`]).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Topology;
use super::model::KafkaConfig;
use crate::secrets::{self, Secret};

/// Authentication and encryption of the connection to Kafka.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct SecurityConfig {
    /// librdkafka `security.protocol`. When omitted it follows from the
    /// other settings: `sasl` and `tls` give `sasl_ssl`, `sasl` alone
    /// `sasl_plaintext`, `tls` alone `ssl`.
    #[serde(default)]
    pub(crate) protocol: Option<SecurityProtocol>,
    /// SASL authentication with a user name and password.
    #[serde(default)]
    pub(crate) sasl: Option<SaslConfig>,
    /// TLS: which certificate authority to trust, and the client's own
    /// certificate for mutual TLS.
    #[serde(default)]
    pub(crate) tls: Option<TlsConfig>,
}

/// librdkafka `security.protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SecurityProtocol {
    /// No TLS, no SASL.
    #[serde(alias = "PLAINTEXT")]
    Plaintext,
    /// TLS, no SASL (the client may authenticate with a certificate).
    #[serde(alias = "SSL")]
    Ssl,
    /// SASL without TLS: the password protocol runs in the clear.
    #[serde(alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
    /// SASL over TLS.
    #[serde(alias = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    /// The librdkafka value.
    pub(crate) fn as_librdkafka(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// SASL with a user name and password.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct SaslConfig {
    /// librdkafka `sasl.mechanisms`.
    pub(crate) mechanism: SaslMechanism,
    /// librdkafka `sasl.username`.
    pub(crate) username: String,
    /// librdkafka `sasl.password`. Write `${VAR}` rather than the password
    /// itself; it is shown as `***` and masked in logs and errors.
    pub(crate) password: Secret,
}

/// A SASL mechanism that authenticates with a user name and password.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub(crate) enum SaslMechanism {
    /// The password itself is sent: use it only over TLS (`sasl_ssl`).
    #[serde(rename = "PLAIN", alias = "plain")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256", alias = "scram-sha-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512", alias = "scram-sha-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The librdkafka (and IANA) name.
    pub(crate) fn as_librdkafka(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// TLS settings. Paths are relative to the directory streamfold runs in.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct TlsConfig {
    /// PEM file of the certificate authorities that signed the brokers'
    /// certificates (librdkafka `ssl.ca.location`). Defaults to the
    /// system's trusted authorities.
    #[serde(default)]
    pub(crate) ca: Option<PathBuf>,
    /// PEM file of this client's certificate, for mutual TLS (librdkafka
    /// `ssl.certificate.location`). Requires `key`.
    #[serde(default)]
    pub(crate) certificate: Option<PathBuf>,
    /// PEM file of this client's private key (librdkafka
    /// `ssl.key.location`). Requires `certificate`.
    #[serde(default)]
    pub(crate) key: Option<PathBuf>,
    /// Password of an encrypted `key` (librdkafka `ssl.key.password`).
    #[serde(default)]
    pub(crate) key_password: Option<Secret>,
    /// Check that a broker's certificate names the host connected to
    /// (librdkafka `ssl.endpoint.identification.algorithm`: `https`, or
    /// `none` when false).
    #[serde(default = "default_true")]
    pub(crate) verify_hostname: bool,
    /// Verify brokers' certificates at all (librdkafka
    /// `enable.ssl.certificate.verification`). `false` accepts any
    /// certificate, so anyone in the middle can read the traffic: for
    /// local experiments only.
    #[serde(default = "default_true")]
    pub(crate) verify_certificate: bool,
}

fn default_true() -> bool {
    true
}

impl SecurityConfig {
    /// The protocol given, or the one the settings imply.
    pub(crate) fn effective_protocol(&self) -> SecurityProtocol {
        self.protocol
            .unwrap_or(match (self.sasl.is_some(), self.tls.is_some()) {
                (true, true) => SecurityProtocol::SaslSsl,
                (true, false) => SecurityProtocol::SaslPlaintext,
                (false, true) => SecurityProtocol::Ssl,
                (false, false) => SecurityProtocol::Plaintext,
            })
    }

    /// The librdkafka properties these settings stand for.
    pub(crate) fn properties(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![(
            "security.protocol",
            self.effective_protocol().as_librdkafka().to_string(),
        )];
        if let Some(sasl) = &self.sasl {
            out.push(("sasl.mechanisms", sasl.mechanism.as_librdkafka().into()));
            out.push(("sasl.username", sasl.username.clone()));
            out.push(("sasl.password", sasl.password.expose().to_string()));
        }
        if let Some(tls) = &self.tls {
            let path = |p: &PathBuf| p.display().to_string();
            if let Some(ca) = &tls.ca {
                out.push(("ssl.ca.location", path(ca)));
            }
            if let Some(certificate) = &tls.certificate {
                out.push(("ssl.certificate.location", path(certificate)));
            }
            if let Some(key) = &tls.key {
                out.push(("ssl.key.location", path(key)));
            }
            if let Some(password) = &tls.key_password {
                out.push(("ssl.key.password", password.expose().to_string()));
            }
            let algorithm = if tls.verify_hostname { "https" } else { "none" };
            out.push(("ssl.endpoint.identification.algorithm", algorithm.into()));
            out.push((
                "enable.ssl.certificate.verification",
                tls.verify_certificate.to_string(),
            ));
        }
        out
    }

    /// What is wrong with these settings, as (path below
    /// `kafka.security`, message).
    pub(crate) fn problems(&self) -> Vec<(Vec<&'static str>, String)> {
        let mut out = Vec::new();
        if let Some(given) = self.protocol {
            let name = given.as_librdkafka();
            match (&self.sasl, given.uses_sasl()) {
                (None, true) => out.push((
                    vec!["protocol"],
                    format!("`{name}` needs a `sasl` section with the mechanism, username and password"),
                )),
                (Some(_), false) => out.push((
                    vec!["sasl"],
                    format!("`protocol: {name}` does not use SASL; use `sasl_ssl` (or `sasl_plaintext`), or remove `sasl`"),
                )),
                _ => {}
            }
            if self.tls.is_some() && !given.uses_tls() {
                out.push((
                    vec!["tls"],
                    format!("`protocol: {name}` does not use TLS; use `ssl` or `sasl_ssl`, or remove `tls`"),
                ));
            }
        }
        if let Some(sasl) = &self.sasl {
            if sasl.username.is_empty() {
                out.push((vec!["sasl", "username"], "must not be empty".into()));
            }
            if sasl.password.is_empty() {
                out.push((
                    vec!["sasl", "password"],
                    "must not be empty (is the environment variable it names set?)".into(),
                ));
            }
        }
        if let Some(tls) = &self.tls {
            match (&tls.certificate, &tls.key) {
                (Some(_), None) => out.push((
                    vec!["tls", "certificate"],
                    "a client certificate needs its `key`".into(),
                )),
                (None, Some(_)) => out.push((
                    vec!["tls", "key"],
                    "a client key needs its `certificate`".into(),
                )),
                _ => {}
            }
            if tls.key_password.is_some() && tls.key.is_none() {
                out.push((
                    vec!["tls", "key_password"],
                    "`key_password` needs `key`".into(),
                ));
            }
        }
        out
    }

    /// One line for `describe` and `check`: `sasl_ssl, SCRAM-SHA-512 as
    /// user `alice` (password ***), CA certs/ca.pem`.
    pub fn summary(&self) -> String {
        let mut parts = vec![self.effective_protocol().as_librdkafka().to_string()];
        if let Some(sasl) = &self.sasl {
            parts.push(format!(
                "{} as user `{}` (password {})",
                sasl.mechanism.as_librdkafka(),
                sasl.username,
                secrets::MASK
            ));
        }
        if let Some(tls) = &self.tls {
            parts.push(match &tls.ca {
                Some(ca) => format!("CA {}", ca.display()),
                None => "the system's CAs".into(),
            });
            if let Some(certificate) = &tls.certificate {
                parts.push(format!("client certificate {}", certificate.display()));
            }
            if !tls.verify_certificate {
                parts.push("certificates NOT verified".into());
            } else if !tls.verify_hostname {
                parts.push("host names not verified".into());
            }
        }
        parts.join(", ")
    }
}

impl KafkaConfig {
    /// Problems of `security`, and properties set both by `security` and
    /// by `properties`, `consumer` or `producer`, as (path below `kafka`,
    /// message).
    pub(crate) fn security_problems(&self) -> Vec<(Vec<String>, String)> {
        let Some(security) = &self.security else {
            return Vec::new();
        };
        let mut out: Vec<(Vec<String>, String)> = security
            .problems()
            .into_iter()
            .map(|(path, message)| {
                let mut at = vec!["security".to_string()];
                at.extend(path.into_iter().map(str::to_string));
                (at, message)
            })
            .collect();
        let set: Vec<&str> = security.properties().iter().map(|(k, _)| *k).collect();
        for (section, properties) in [
            ("properties", &self.properties),
            ("consumer", &self.consumer),
            ("producer", &self.producer),
        ] {
            for key in properties.keys() {
                // librdkafka takes `sasl.mechanism` for `sasl.mechanisms`.
                let canonical = match key.as_str() {
                    "sasl.mechanism" => "sasl.mechanisms",
                    other => other,
                };
                if set.contains(&canonical) {
                    out.push((
                        vec![section.to_string(), key.clone()],
                        format!("`{key}` is already set by `kafka.security`; set it in one place"),
                    ));
                }
            }
        }
        out
    }
}

impl Topology {
    /// Every credential this topology holds: `kafka.security` passwords,
    /// credential properties, the schema registry password. For
    /// [`secrets::register`].
    pub fn credentials(&self) -> Vec<&str> {
        let kafka = &self.kafka;
        let mut out: Vec<&str> = Vec::new();
        if let Some(security) = &kafka.security {
            if let Some(sasl) = &security.sasl {
                out.push(sasl.password.expose());
            }
            if let Some(password) = security.tls.as_ref().and_then(|t| t.key_password.as_ref()) {
                out.push(password.expose());
            }
        }
        for properties in [&kafka.properties, &kafka.consumer, &kafka.producer] {
            out.extend(
                properties
                    .iter()
                    .filter(|(k, _)| secrets::is_secret_property(k))
                    .map(|(_, v)| v.as_str()),
            );
        }
        if let Some(password) = self
            .schema_registry
            .as_ref()
            .and_then(|r| r.password.as_ref())
            .map(Secret::expose)
        {
            out.push(password);
        }
        if let Some(token) = &self.queries.token {
            out.push(token.expose());
        }
        out.retain(|s| !s.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl(mechanism: SaslMechanism) -> SaslConfig {
        SaslConfig {
            mechanism,
            username: "alice".into(),
            password: Secret::new("s3cret"),
        }
    }

    fn tls() -> TlsConfig {
        TlsConfig {
            ca: Some("ca.pem".into()),
            certificate: None,
            key: None,
            key_password: None,
            verify_hostname: true,
            verify_certificate: true,
        }
    }

    #[test]
    fn the_protocol_follows_from_the_sections_when_omitted() {
        let mut security = SecurityConfig {
            sasl: Some(sasl(SaslMechanism::ScramSha512)),
            tls: Some(tls()),
            ..SecurityConfig::default()
        };
        assert_eq!(security.effective_protocol(), SecurityProtocol::SaslSsl);
        security.tls = None;
        assert_eq!(
            security.effective_protocol(),
            SecurityProtocol::SaslPlaintext
        );
        security.sasl = None;
        security.tls = Some(tls());
        assert_eq!(security.effective_protocol(), SecurityProtocol::Ssl);
    }

    #[test]
    fn sasl_over_tls_becomes_librdkafka_properties() {
        let security = SecurityConfig {
            protocol: Some(SecurityProtocol::SaslSsl),
            sasl: Some(sasl(SaslMechanism::ScramSha512)),
            tls: Some(tls()),
        };
        let properties = security.properties();
        let get = |k: &str| {
            properties
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("alice"));
        assert_eq!(get("sasl.password"), Some("s3cret"));
        assert_eq!(get("ssl.ca.location"), Some("ca.pem"));
        assert_eq!(get("ssl.endpoint.identification.algorithm"), Some("https"));
        assert!(security.problems().is_empty(), "{:?}", security.problems());
        let summary = security.summary();
        assert_eq!(
            summary,
            "sasl_ssl, SCRAM-SHA-512 as user `alice` (password ***), CA ca.pem"
        );
        assert!(!format!("{security:?}").contains("s3cret"));
    }

    #[test]
    fn contradictions_are_reported_where_they_are() {
        let security = SecurityConfig {
            protocol: Some(SecurityProtocol::Plaintext),
            sasl: Some(SaslConfig {
                password: Secret::new(""),
                ..sasl(SaslMechanism::Plain)
            }),
            tls: Some(TlsConfig {
                certificate: Some("client.pem".into()),
                ..tls()
            }),
        };
        let problems: Vec<String> = security
            .problems()
            .into_iter()
            .map(|(path, message)| format!("{}: {message}", path.join(".")))
            .collect();
        assert_eq!(
            problems,
            [
                "sasl: `protocol: plaintext` does not use SASL; use `sasl_ssl` (or `sasl_plaintext`), or remove `sasl`",
                "tls: `protocol: plaintext` does not use TLS; use `ssl` or `sasl_ssl`, or remove `tls`",
                "sasl.password: must not be empty (is the environment variable it names set?)",
                "tls.certificate: a client certificate needs its `key`",
            ]
        );
    }
}
