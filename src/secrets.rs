//! Credentials, and keeping them out of everything streamfold prints.
//!
//! Two layers:
//!
//! 1. **By name.** [`is_secret_property`] is the one place that knows which
//!    librdkafka properties hold credentials; [`shown`] masks their values
//!    as `***` wherever streamfold shows a configuration (`describe`,
//!    `check`). Topology fields that hold credentials are [`Secret`]s, whose
//!    `Debug` and `Serialize` print `***`.
//! 2. **By value.** Text streamfold did not write itself — librdkafka's log
//!    lines and error strings, errors of other libraries — could still
//!    quote a credential. The credentials of a run are [`register`]ed at
//!    startup and [`scrub`] replaces each of them with `***`: every log
//!    line goes through it ([`ScrubbedStderr`]), and so do the final error
//!    message and the reason header of dead letters.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};
use std::sync::RwLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a credential is shown as.
pub(crate) const MASK: &str = "***";

/// librdkafka properties whose values authenticate a client (librdkafka
/// marks the same ones sensitive, except user names, file paths and public
/// certificates, which are worth seeing). Any other property whose name
/// says `password`, `secret`, `passphrase` or `jaas` counts too, so the
/// Java client's names (`ssl.truststore.password`, `sasl.jaas.config`) and
/// future librdkafka properties are masked as well.
const SECRET_PROPERTIES: &[&str] = &[
    "sasl.password",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl_key",
    "ssl.keystore.password",
];

/// Whether the librdkafka property `key` holds a credential.
pub(crate) fn is_secret_property(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    SECRET_PROPERTIES.contains(&key.as_str())
        || ["password", "secret", "passphrase", "jaas"]
            .iter()
            .any(|word| key.contains(word))
}

/// `value` as it may be shown: [`MASK`] when `key` holds a credential.
pub(crate) fn shown<'v>(key: &str, value: &'v str) -> &'v str {
    if is_secret_property(key) { MASK } else { value }
}

/// A password or other credential. Shown as `***`; masked in logs and
/// errors.
//
// The value is reached only through `expose`; `Debug` and `Serialize`
// print the mask, so no dump of a configuration can carry it.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The credential itself, for the client that needs it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(MASK)
    }
}

/// The credentials of this process, as [`scrub`] looks for them: each
/// value as written, and as it appears escaped in JSON or `Debug` output.
static REGISTERED: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Credentials shorter than this are not searched for in text: masking
/// every `b` of a log line would make it unreadable, and a password that
/// short is no secret anyway. They are still masked by name.
pub(crate) const MIN_SCRUBBED_LEN: usize = 4;

/// Remembers `value` as a credential for [`scrub`]. Values shorter than
/// [`MIN_SCRUBBED_LEN`] characters are ignored.
pub fn register(value: &str) {
    if value.chars().count() < MIN_SCRUBBED_LEN {
        return;
    }
    let json = serde_json::to_string(value).unwrap_or_default();
    let debug = format!("{value:?}");
    let forms = [
        value.to_string(),
        json.trim_matches('"').to_string(),
        debug.trim_matches('"').to_string(),
    ];
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    for form in forms {
        if !form.is_empty() && !registered.contains(&form) {
            registered.push(form);
        }
    }
    // Longest first, so a credential that contains another is masked whole.
    registered.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Registers the values of the credential properties among `properties`.
pub fn register_properties<'a>(properties: impl IntoIterator<Item = (&'a str, &'a str)>) {
    for (key, value) in properties {
        if is_secret_property(key) {
            register(value);
        }
    }
}

/// `text` with every registered credential replaced by [`MASK`].
pub fn scrub(text: &str) -> Cow<'_, str> {
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    let mut out = Cow::Borrowed(text);
    for secret in registered.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), MASK));
        }
    }
    out
}

/// Standard error with registered credentials masked: the writer of the
/// log subscriber. Each log event arrives as one `write` call, so a
/// credential is never split between two.
pub(crate) struct ScrubbedStderr;

/// A [`ScrubbedStderr`], as a `tracing_subscriber` `MakeWriter`.
pub(crate) fn scrubbed_stderr() -> ScrubbedStderr {
    ScrubbedStderr
}

impl Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        match scrub(&text) {
            // Nothing to mask: the bytes as they came (even invalid UTF-8).
            Cow::Borrowed(_) => io::stderr().write_all(buf)?,
            Cow::Owned(masked) => io::stderr().write_all(masked.as_bytes())?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_properties_are_known_by_name() {
        for key in [
            "sasl.password",
            "SASL.PASSWORD",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
            "ssl.truststore.password",
            "sasl.jaas.config",
        ] {
            assert!(is_secret_property(key), "{key}");
            assert_eq!(shown(key, "hunter2"), MASK);
        }
        for key in [
            "sasl.username",
            "sasl.mechanisms",
            "security.protocol",
            "ssl.ca.location",
            "ssl.key.location",
            "bootstrap.servers",
        ] {
            assert!(!is_secret_property(key), "{key}");
            assert_eq!(shown(key, "x"), "x");
        }
    }

    #[test]
    fn a_secret_prints_as_a_mask() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), MASK);
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"***\"");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn registered_credentials_are_scrubbed_in_every_form() {
        register("pa\"ss-7f3c9e");
        register("pa\"ss-7f3c9e-longer");
        register("");
        register("b");
        assert_eq!(
            scrub("login with pa\"ss-7f3c9e failed"),
            "login with *** failed"
        );
        // JSON log lines escape the quote.
        assert_eq!(scrub(r#"{"error":"pa\"ss-7f3c9e"}"#), r#"{"error":"***"}"#);
        // The longer credential is masked whole, not as `***-longer`.
        assert_eq!(scrub("x pa\"ss-7f3c9e-longer y"), "x *** y");
        assert!(matches!(scrub("nothing here"), Cow::Borrowed(_)));
        // Too short to search for: the text stays readable.
        assert_eq!(scrub("bootstrap broker"), "bootstrap broker");
    }
}
