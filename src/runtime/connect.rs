//! The first contact with Kafka: connect, authenticate, read the cluster
//! metadata — and when that fails, say why.
//!
//! librdkafka retries a failed connection forever and tells the cause only
//! to its error and log callbacks; the request that needed the connection
//! merely times out. A wrong password or an untrusted certificate would
//! then look like an unreachable broker, or like a process that waits for
//! nothing. [`verify`] runs before any other client of `run`, `dlq replay`
//! and the load generator: it asks for metadata in short steps while
//! watching the callbacks, and stops at the first failure that retrying
//! cannot fix — the broker refused the credentials
//! ([`RuntimeError::Authentication`]) or the TLS handshake failed
//! ([`RuntimeError::Tls`]). A broker that does not answer at all is
//! [`RuntimeError::Unreachable`] after [`CONNECT_TIMEOUT`], with the last
//! connection problem librdkafka reported.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::{ClientContext, message::DeliveryResult};

use super::RuntimeError;

/// How long a broker that does not answer gets before `run` gives up.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One metadata request; the callbacks are looked at between two.
const STEP: Duration = Duration::from_millis(500);

/// A failure retrying cannot fix.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fatal {
    Authentication(String),
    Tls(String),
}

/// What the callbacks of the verifying client saw.
#[derive(Default)]
struct Seen {
    fatal: Option<Fatal>,
    /// The last connection problem (librdkafka's `FAIL` log lines).
    last_problem: Option<String>,
}

#[derive(Default)]
struct Watch(Mutex<Seen>);

impl Watch {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether a librdkafka error is one retrying cannot fix. SASL failures
/// come as `Authentication`; TLS failures as `SSL`, or as a transport
/// failure whose text names the handshake or the certificate.
fn classify(code: Option<RDKafkaErrorCode>, reason: &str) -> Option<Fatal> {
    let lower = reason.to_ascii_lowercase();
    match code {
        Some(RDKafkaErrorCode::Authentication) => Some(Fatal::Authentication(reason.into())),
        Some(RDKafkaErrorCode::SSL) => Some(Fatal::Tls(reason.into())),
        _ if lower.contains("sasl authentication error") => {
            Some(Fatal::Authentication(reason.into()))
        }
        // The broker's TLS alerts: under TLS 1.3 a listener that requires
        // a client certificate refuses after the client's side of the
        // handshake is done, so the alert arrives with the first receive.
        _ if lower.contains("certificate verify failed")
            || lower.contains("ssl handshake failed")
            || lower.contains("alert bad certificate")
            || lower.contains("alert certificate required")
            || lower.contains("alert unknown ca") =>
        {
            Some(Fatal::Tls(reason.into()))
        }
        _ => None,
    }
}

impl ClientContext for Watch {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if fac == "FAIL" {
            // Reported in the error `verify` returns; here only for debugging.
            tracing::debug!(target: "librdkafka", fac, "{message}");
            let message = without_thread(message);
            let mut seen = self.seen();
            if seen.fatal.is_none() {
                seen.fatal = classify(None, message);
            }
            seen.last_problem = Some(message.to_string());
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, "{message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, reason, "Client error while connecting.");
        let mut seen = self.seen();
        if seen.fatal.is_none() {
            seen.fatal = classify(error.rdkafka_error_code(), reason);
        }
    }
}

impl ProducerContext for Watch {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Connects with `config` and reads the cluster metadata; see the module
/// docs for the errors.
pub fn verify(config: &ClientConfig) -> Result<(), RuntimeError> {
    let servers = config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string();
    // librdkafka logs a closed connection at Info, below the level most
    // runs log at; the watch needs those lines whatever the log filter.
    let mut watched = config.clone();
    if (watched.log_level as i32) < RDKafkaLogLevel::Info as i32 {
        watched.set_log_level(RDKafkaLogLevel::Info);
    }
    let client: BaseProducer<Watch> = watched
        .create_with_context(Watch::default())
        .map_err(|e| RuntimeError::Settings(format!("cannot create a Kafka client: {e}")))?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let attempt = client.client().fetch_metadata(None, STEP);
        // Runs the error and log callbacks of what happened meanwhile.
        client.poll(Duration::from_millis(50));
        if attempt.is_ok() {
            return Ok(());
        }
        let seen = client.context().seen();
        match seen.fatal.clone() {
            Some(Fatal::Authentication(reason)) => {
                return Err(RuntimeError::Authentication {
                    servers,
                    login: login(config),
                    reason,
                });
            }
            Some(Fatal::Tls(reason)) => {
                return Err(RuntimeError::Tls {
                    servers,
                    hint: tls_hint(config, &reason),
                    reason,
                });
            }
            None => {}
        }
        if Instant::now() >= deadline {
            let error = match (&seen.last_problem, attempt) {
                (Some(problem), _) => format!(
                    "{problem}{}",
                    closed_hint(config, problem).unwrap_or_default()
                ),
                (None, Err(e)) => e.to_string(),
                (None, Ok(_)) => String::new(),
            };
            return Err(RuntimeError::Unreachable { servers, error });
        }
    }
}

/// A log line without librdkafka's `[thrd:...]: ` prefix.
fn without_thread(message: &str) -> &str {
    message
        .strip_prefix("[thrd:")
        .and_then(|rest| rest.split_once("]: "))
        .map_or(message, |(_, text)| text)
}

/// `SCRAM-SHA-512 as user `alice``, from the client's properties.
fn login(config: &ClientConfig) -> String {
    let mechanism = config.get("sasl.mechanisms").unwrap_or("GSSAPI");
    match config.get("sasl.username") {
        Some(user) => format!("{mechanism} as user `{user}`"),
        None => mechanism.to_string(),
    }
}

fn tls_hint(config: &ClientConfig, reason: &str) -> String {
    let lower = reason.to_ascii_lowercase();
    if [
        "alert bad certificate",
        "alert certificate required",
        "alert unknown ca",
    ]
    .iter()
    .any(|alert| lower.contains(alert))
    {
        return match config.get("ssl.certificate.location") {
            Some(certificate) => format!(
                "; the broker refused this client's certificate `{certificate}` (kafka.security.tls.certificate): is it signed by a CA the broker trusts?"
            ),
            None => "; the broker wants a client certificate (mutual TLS): set kafka.security.tls.certificate and key".into(),
        };
    }
    if !reason
        .to_ascii_lowercase()
        .contains("certificate verify failed")
    {
        return String::new();
    }
    match config.get("ssl.ca.location") {
        Some(ca) => format!(
            "; the broker's certificate is not signed by the CA in `{ca}` (kafka.security.tls.ca), or does not name the host connected to"
        ),
        None => "; the broker's certificate is not signed by a CA this system trusts: set kafka.security.tls.ca to the CA that signed it".into(),
    }
}

/// A hint when the broker closes connections at once: a listener that
/// expects TLS or SASL does that to a client that uses neither.
fn closed_hint(config: &ClientConfig, problem: &str) -> Option<String> {
    let closed = [
        "Disconnected",
        "closed by peer",
        "reset by peer",
        "Broken pipe",
    ]
    .iter()
    .any(|sign| problem.contains(sign));
    if !closed {
        return None;
    }
    let protocol = config.get("security.protocol").unwrap_or("plaintext");
    Some(format!(
        " (the broker closes the connections of this client, which uses security.protocol `{protocol}`: does its listener expect TLS or SASL? See kafka.security)"
    ))
}

/// Whether `code` says the broker did not answer now (down, restarting,
/// unreachable for a moment, a coordinator or controller moving or
/// loading) rather than what it refuses.
pub(crate) fn unanswered(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::NetworkException
            | RDKafkaErrorCode::NotController
            | RDKafkaErrorCode::LeaderNotAvailable
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::CoordinatorLoadInProgress
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_librdkafka_reports_is_classified() {
        // As librdkafka 2.12 reports a wrong SCRAM password and a broker
        // certificate signed by an unknown CA.
        let wrong_password = "sasl_ssl://127.0.0.1:29303/bootstrap: SASL authentication error: SASL SCRAM authentication failed: broker responded with invalid-proof (after 27ms in state AUTH_REQ)";
        assert_eq!(
            classify(Some(RDKafkaErrorCode::Authentication), wrong_password),
            Some(Fatal::Authentication(wrong_password.into()))
        );
        assert_eq!(
            classify(None, wrong_password),
            Some(Fatal::Authentication(wrong_password.into()))
        );
        let untrusted = "sasl_ssl://127.0.0.1:29303/bootstrap: error:0A000086:SSL routines::certificate verify failed (after 5ms in state SSL_HANDSHAKE)";
        assert_eq!(
            classify(Some(RDKafkaErrorCode::BrokerTransportFailure), untrusted),
            Some(Fatal::Tls(untrusted.into()))
        );
        assert_eq!(
            classify(Some(RDKafkaErrorCode::SSL), "SSL handshake failed"),
            Some(Fatal::Tls("SSL handshake failed".into()))
        );
        // A listener that requires a client certificate, to a client
        // without one (Apache Kafka 4, TLS 1.3).
        let no_certificate = "ssl://127.0.0.1:41567/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate: SSL alert number 42 (after 15ms in state APIVERSION_QUERY)";
        assert_eq!(
            classify(None, no_certificate),
            Some(Fatal::Tls(no_certificate.into()))
        );
        assert!(
            tls_hint(&ClientConfig::new(), no_certificate).contains("wants a client certificate")
        );
        // Retrying may fix these.
        assert_eq!(
            classify(
                Some(RDKafkaErrorCode::AllBrokersDown),
                "1/1 brokers are down"
            ),
            None
        );
        assert_eq!(
            classify(
                Some(RDKafkaErrorCode::BrokerTransportFailure),
                "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
            ),
            None
        );
    }

    #[test]
    fn log_lines_lose_their_thread_prefix() {
        assert_eq!(
            without_thread(
                "[thrd:sasl_ssl://h:1/bootstrap]: sasl_ssl://h:1/bootstrap: SASL authentication error"
            ),
            "sasl_ssl://h:1/bootstrap: SASL authentication error"
        );
        assert_eq!(without_thread("no prefix"), "no prefix");
    }

    #[test]
    fn a_closed_connection_hints_at_the_protocol() {
        let mut config = ClientConfig::new();
        let problem = "127.0.0.1:29303/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 0ms in state APIVERSION_QUERY)";
        let hint = closed_hint(&config, problem).unwrap();
        assert!(hint.contains("security.protocol `plaintext`"), "{hint}");
        config.set("security.protocol", "ssl");
        assert!(closed_hint(&config, problem).unwrap().contains("`ssl`"));
        assert!(
            closed_hint(
                &config,
                "ssl://h:1/bootstrap: Send failed: SSL transport error: Broken pipe (after 0ms in state UP)"
            )
            .is_some()
        );
        assert_eq!(closed_hint(&config, "Connection refused"), None);
    }
}
