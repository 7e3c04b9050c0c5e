//! The schema registry client behind Avro sources and sinks: schema ids to
//! schemas (fetched once, then cached), and schema files to ids (registered,
//! or the subject's latest version).
//!
//! HTTP goes through `schema_registry_converter`'s blocking API, so the
//! single processing thread calls it directly. Blocking calls must not run
//! inside an async runtime (reqwest's blocking client panics there): build
//! and use [`Codecs`](super::Codecs) from plain threads, as the runtime and
//! `#[test]` functions do.
//!
//! A registry that cannot be reached, or answers 5xx or 429, is retried with
//! exponential backoff ([`SETUP_RETRY`] at startup, [`RECORD_RETRY`] while
//! processing); other answers (404, 401, 409, ...) are final at once.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schema_registry_converter::blocking::schema_registry::{
    SrSettings, get_schema_by_id, perform_sr_call, post_schema,
};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{
    RawError, SchemaType, SrCall, SuppliedSchema,
};

use super::CodecError;
use crate::record::avro::AvroSchema;
use crate::topology::model::{RetryConfig, SchemaRegistryConfig};

/// How often, and how patiently, to try a registry that does not answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Backoff {
    /// Tries in all, the first included.
    pub(crate) attempts: u32,
    /// Wait before the second try.
    pub(crate) initial: Duration,
    /// Longest wait between two tries.
    pub(crate) max: Duration,
    /// Factor applied to the wait after each try.
    pub(crate) multiplier: f64,
    /// Random share of each wait added or removed (0 to 1).
    pub(crate) jitter: f64,
}

impl Backoff {
    /// The policy a topology's `retry` settings describe.
    pub(crate) fn from_config(config: &RetryConfig) -> Backoff {
        Backoff {
            attempts: config.max_attempts.get(),
            initial: config.initial_backoff.0,
            max: config.max_backoff.0,
            multiplier: config.multiplier.max(1.0),
            jitter: config.jitter.clamp(0.0, 1.0),
        }
    }

    /// The waits between tries.
    fn delays(self) -> impl Iterator<Item = Duration> {
        let mut next = self.initial.as_secs_f64();
        (1..self.attempts).map(move |_| {
            let capped = next.min(self.max.as_secs_f64());
            next *= self.multiplier;
            // `check` keeps the worst case well below the transaction
            // timeout; a wait past `Duration::MAX` becomes the cap.
            Duration::try_from_secs_f64((capped * (1.0 + self.jitter * random_unit())).max(0.0))
                .unwrap_or(self.max)
        })
    }
}

/// A random number in [-1, 1), from the standard library's per-process
/// random hash keys: enough to keep instances from retrying in step.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// At startup (registering and looking up sink schemas): about 6 seconds,
/// long enough for a registry that starts alongside streamfold.
pub(crate) const SETUP_RETRY: Backoff = Backoff {
    attempts: 6,
    initial: Duration::from_millis(200),
    max: Duration::from_secs(2),
    multiplier: 2.0,
    jitter: 0.0,
};

/// While processing (a record carrying a schema id not seen yet): under a
/// second, well within a transaction.
pub(crate) const RECORD_RETRY: Backoff = Backoff {
    attempts: 4,
    initial: Duration::from_millis(100),
    max: Duration::from_millis(400),
    multiplier: 2.0,
    jitter: 0.0,
};

/// How long one HTTP call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the registry did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    /// The registry could not be reached, or kept failing, on every try.
    #[error("schema registry {url} unreachable after {attempts} attempts: {last}")]
    Unreachable {
        url: String,
        attempts: u32,
        last: String,
    },
    /// The registry answered with an error that retrying does not change.
    #[error("schema registry {url}: {message}")]
    Refused {
        url: String,
        message: String,
        /// The HTTP status, when known.
        status: Option<u16>,
    },
    /// The registry's answer is unusable.
    #[error("schema registry {url}: {message}")]
    Invalid { url: String, message: String },
    /// The client could not be set up.
    #[error("schema registry {url}: cannot set up the HTTP client: {message}")]
    Client { url: String, message: String },
}

impl RegistryError {
    /// Whether the registry said the schema, subject or version does not
    /// exist.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(
            self,
            RegistryError::Refused {
                status: Some(404),
                ..
            }
        )
    }
}

/// Where Avro schemas come from: a schema registry (`run`), or the
/// topology's own schema files kept in memory (`streamfold test`, offline:
/// no server, no network).
#[derive(Debug)]
pub(crate) enum SchemaSource {
    Registry(RegistryClient),
    Local(LocalSchemas),
}

impl SchemaSource {
    /// The schema with `id`.
    pub(crate) fn schema_by_id(
        &self,
        id: u32,
        retry: Backoff,
    ) -> Result<Arc<AvroSchema>, CodecError> {
        match self {
            SchemaSource::Registry(registry) => registry.schema_by_id(id, retry),
            SchemaSource::Local(local) => local.schema_by_id(id),
        }
    }

    /// Registers `schema` under `subject` (or finds it registered) and
    /// returns its id.
    pub(crate) fn register(
        &self,
        subject: &str,
        schema: &AvroSchema,
        retry: Backoff,
    ) -> Result<u32, RegistryError> {
        match self {
            SchemaSource::Registry(registry) => registry.register(subject, schema, retry),
            SchemaSource::Local(local) => local.register(subject, schema),
        }
    }

    /// The latest version registered under `subject`: its id and schema.
    pub(crate) fn latest(
        &self,
        subject: &str,
        retry: Backoff,
    ) -> Result<(u32, AvroSchema), RegistryError> {
        match self {
            SchemaSource::Registry(registry) => registry.latest(subject, retry),
            SchemaSource::Local(local) => local.latest(subject),
        }
    }

    /// Offline schemas know only what the topology registers itself, so
    /// sinks register their schema files even with `register: false`.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, SchemaSource::Local(_))
    }
}

/// Schemas in memory, numbered as a registry numbers them: one schema (by
/// its Parsing Canonical Form) has one id under every subject.
#[derive(Debug, Default)]
pub(crate) struct LocalSchemas {
    state: Mutex<LocalState>,
}

#[derive(Debug, Default)]
struct LocalState {
    /// Id `n` is at index `n - 1`.
    schemas: Vec<Arc<AvroSchema>>,
    /// Subject → the ids of its versions, oldest first.
    subjects: HashMap<String, Vec<u32>>,
}

impl LocalSchemas {
    fn lock(&self) -> std::sync::MutexGuard<'_, LocalState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, subject: &str, schema: &AvroSchema) -> Result<u32, RegistryError> {
        let mut state = self.lock();
        let canonical = schema.canonical_form();
        let known = state
            .schemas
            .iter()
            .position(|s| s.canonical_form() == canonical);
        let index = match known {
            Some(index) => index,
            None => {
                let copy =
                    AvroSchema::parse(schema.text()).map_err(|message| RegistryError::Invalid {
                        url: "offline".into(),
                        message,
                    })?;
                state.schemas.push(Arc::new(copy));
                state.schemas.len() - 1
            }
        };
        let id = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let versions = state.subjects.entry(subject.to_string()).or_default();
        if versions.last() != Some(&id) {
            versions.push(id);
        }
        Ok(id)
    }

    fn schema_by_id(&self, id: u32) -> Result<Arc<AvroSchema>, CodecError> {
        let index = usize::try_from(id).ok().and_then(|id| id.checked_sub(1));
        index
            .and_then(|index| self.lock().schemas.get(index).cloned())
            .ok_or_else(|| {
                CodecError::record(format!(
                    "schema id {id} is not one of the topology's schemas (offline, the schemas are the topology's own files)"
                ))
            })
    }

    fn latest(&self, subject: &str) -> Result<(u32, AvroSchema), RegistryError> {
        let state = self.lock();
        let found = state
            .subjects
            .get(subject)
            .and_then(|ids| ids.last())
            .and_then(|&id| Some((id, state.schemas.get(usize::try_from(id).ok()? - 1)?)));
        match found {
            Some((id, schema)) => AvroSchema::parse(schema.text())
                .map(|schema| (id, schema))
                .map_err(|message| RegistryError::Invalid {
                    url: "offline".into(),
                    message,
                }),
            None => Err(RegistryError::Refused {
                url: "offline".into(),
                message: format!("subject `{subject}` not found"),
                status: Some(404),
            }),
        }
    }
}

/// A registry connection with its schema cache.
pub(crate) struct RegistryClient {
    settings: SrSettings,
    /// The configured URL(s), for messages.
    url: String,
    /// Schemas by id; ids the registry does not know are remembered too,
    /// since an id never comes to exist later for the same bytes.
    by_id: Mutex<HashMap<u32, Result<Arc<AvroSchema>, String>>>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// `<topic>-value` or `<topic>-key`: the Confluent topic name strategy.
pub(crate) fn subject(topic: &str, key: bool) -> String {
    format!("{topic}-{}", if key { "key" } else { "value" })
}

impl RegistryClient {
    pub(crate) fn connect(config: &SchemaRegistryConfig) -> Result<RegistryClient, RegistryError> {
        let urls: Vec<String> = config
            .url
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        let shown = urls.join(",");
        let Some((first, rest)) = urls.split_first() else {
            return Err(RegistryError::Client {
                url: config.url.clone(),
                message: "no URL".into(),
            });
        };
        let mut builder = SrSettings::new_builder(first.clone());
        for url in rest {
            builder.add_url(url.clone());
        }
        if let Some(username) = config.username.as_deref().filter(|u| !u.is_empty()) {
            let password = config
                .password
                .as_ref()
                .map(|p| p.expose())
                .filter(|p| !p.is_empty());
            builder.set_basic_authorization(username, password);
        }
        builder.set_timeout(CALL_TIMEOUT);
        let settings = builder.build().map_err(|e| RegistryError::Client {
            url: shown.clone(),
            message: render(&e),
        })?;
        Ok(RegistryClient {
            settings,
            url: shown,
            by_id: Mutex::new(HashMap::new()),
        })
    }

    /// The schema with `id`, from the cache or the registry. A registry
    /// that cannot be reached (or refuses our credentials) is the outside
    /// world's failure, not the record's.
    pub(crate) fn schema_by_id(
        &self,
        id: u32,
        retry: Backoff,
    ) -> Result<Arc<AvroSchema>, CodecError> {
        if let Some(known) = self.cache().get(&id) {
            return known.clone().map_err(CodecError::record);
        }
        let fetched = self.call(retry, || get_schema_by_id(id, &self.settings));
        let result = match fetched {
            Ok(registered) if registered.schema_type != SchemaType::Avro => Err(format!(
                "schema {id} is a {:?} schema, not Avro",
                registered.schema_type
            )),
            Ok(registered) if !registered.references.is_empty() => Err(format!(
                "schema {id} refers to other registered schemas, which streamfold does not read"
            )),
            Ok(registered) => AvroSchema::parse(&registered.schema)
                .map(Arc::new)
                .map_err(|e| format!("schema {id} from {} is {e}", self.url)),
            Err(e) if e.is_not_found() => Err(format!(
                "schema id {id} is not in the schema registry {}",
                self.url
            )),
            // Not cached: the next record tries again.
            Err(e @ RegistryError::Unreachable { .. }) => {
                let attempts = match &e {
                    RegistryError::Unreachable { attempts, .. } => *attempts,
                    _ => 1,
                };
                return Err(CodecError::external(
                    format!("schema id {id}: {e}"),
                    attempts,
                ));
            }
            Err(
                e @ RegistryError::Refused {
                    status: Some(401 | 403),
                    ..
                },
            ) => {
                return Err(CodecError::external(e.to_string(), 1));
            }
            Err(e) => return Err(CodecError::record(e.to_string())),
        };
        self.cache().insert(id, result.clone());
        result.map_err(CodecError::record)
    }

    /// Registers `schema` under `subject` (or finds it registered) and
    /// returns its id.
    pub(crate) fn register(
        &self,
        subject: &str,
        schema: &AvroSchema,
        retry: Backoff,
    ) -> Result<u32, RegistryError> {
        let supplied = SuppliedSchema::new(None, SchemaType::Avro, schema.text().to_string());
        self.call(retry, || {
            post_schema(&self.settings, subject.to_string(), supplied.clone())
        })
        .map(|registered| registered.id)
    }

    /// The latest version registered under `subject`: its id and schema.
    pub(crate) fn latest(
        &self,
        subject: &str,
        retry: Backoff,
    ) -> Result<(u32, AvroSchema), RegistryError> {
        let raw = self.call(retry, || {
            perform_sr_call(&self.settings, SrCall::GetLatest(subject))
        })?;
        let invalid = |message: String| RegistryError::Invalid {
            url: self.url.clone(),
            message,
        };
        let id = raw
            .id
            .ok_or_else(|| invalid(format!("the latest version of `{subject}` has no id")))?;
        if raw.schema_type.as_deref().is_some_and(|t| t != "AVRO") {
            return Err(invalid(format!(
                "the latest version of `{subject}` is not an Avro schema"
            )));
        }
        let text = raw
            .schema
            .ok_or_else(|| invalid(format!("the latest version of `{subject}` has no schema")))?;
        let schema = AvroSchema::parse(&text)
            .map_err(|e| invalid(format!("the latest version of `{subject}` is {e}")))?;
        Ok((id, schema))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Result<Arc<AvroSchema>, String>>> {
        // A panic elsewhere while holding the lock leaves a map that is
        // still whole (inserts are single calls), so poisoning is ignored.
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `call`, retrying what a retry may fix.
    fn call<T>(
        &self,
        retry: Backoff,
        mut call: impl FnMut() -> Result<T, SRCError>,
    ) -> Result<T, RegistryError> {
        let mut delays = retry.delays();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let e = match call() {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            let status = status(&e);
            let transient = e.retriable || status.is_some_and(|s| s >= 500 || s == 429 || s == 408);
            if !transient {
                return Err(RegistryError::Refused {
                    url: self.url.clone(),
                    message: render(&e),
                    status,
                });
            }
            match delays.next() {
                Some(delay) => {
                    tracing::warn!(
                        url = %self.url,
                        attempt = attempts,
                        retry_in = ?delay,
                        error = %render(&e),
                        "Schema registry call failed; retrying."
                    );
                    std::thread::sleep(delay);
                }
                None => {
                    return Err(RegistryError::Unreachable {
                        url: self.url.clone(),
                        attempts,
                        last: render(&e),
                    });
                }
            }
        }
    }
}

/// The HTTP status of a registry error answer: Confluent error codes are
/// the status (`409`) or the status followed by two digits (`40403`).
fn status(e: &SRCError) -> Option<u16> {
    let from_code = e
        .source()
        .and_then(|s| s.downcast_ref::<RawError>())
        .map(|raw| raw.error_code)
        .filter(|&code| code > 0)
        .map(|code| if code >= 10_000 { code / 100 } else { code });
    // The library words the status into the message when the body is not
    // a registry error ("... failed with status 404 Not Found").
    let from_text = || {
        let (_, rest) = e.error.split_once("status ")?;
        rest.get(..3)?.parse::<u32>().ok()
    };
    from_code
        .or_else(from_text)
        .and_then(|s| u16::try_from(s).ok())
}

/// The registry's own message when it sent one, else the error with its
/// causes.
fn render(e: &SRCError) -> String {
    if let Some(raw) = e.source().and_then(|s| s.downcast_ref::<RawError>())
        && raw.error_code > 0
    {
        return format!("{} (error code {})", raw.message, raw.error_code);
    }
    let mut text = e.error.clone();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_stops() {
        let delays: Vec<Duration> = RECORD_RETRY.delays().collect();
        assert_eq!(
            delays,
            vec![
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(400)
            ]
        );
        let setup: Duration = SETUP_RETRY.delays().sum();
        assert!(setup >= Duration::from_secs(5) && setup <= Duration::from_secs(10));
    }

    #[test]
    fn subjects_follow_the_topic_name_strategy() {
        assert_eq!(subject("orders", false), "orders-value");
        assert_eq!(subject("orders", true), "orders-key");
    }

    #[test]
    fn statuses_come_from_error_codes_or_the_message() {
        let raw = |code: u32| {
            let body: RawError =
                serde_json::from_str(&format!(r#"{{"error_code": {code}, "message": "m"}}"#))
                    .unwrap();
            SRCError::non_retryable_with_cause(
                body,
                "HTTP request to schema registry failed with status 404 Not Found",
            )
        };
        assert_eq!(status(&raw(40403)), Some(404));
        assert_eq!(status(&raw(409)), Some(409));
        assert_eq!(status(&raw(0)), Some(404));
        assert_eq!(render(&raw(40403)), "m (error code 40403)");
        assert_eq!(
            status(&SRCError::non_retryable_without_cause("no status here")),
            None
        );
    }
}
