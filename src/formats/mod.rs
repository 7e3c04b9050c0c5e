//! Record encodings: how bytes on a topic become [`Record`](crate::record::Record)
//! values and back.
//!
//! [`Codecs`] is built once per topology and used by the runtime and the
//! offline driver alike: [`Codecs::decode_record`] per source record,
//! [`Codecs::encode_record`] per sink record. A value
//! that cannot be decoded, or that does not fit a sink's encoding, is the
//! record's fault: the caller sends it to the dead-letter topic with the
//! returned reason.
//!
//! Formats: `json` ([`json`]) and `avro` in the Confluent wire format
//! ([`avro`]) through a schema registry ([`registry`]). For Avro, building
//! the codecs connects to the registry: each Avro sink's schema is
//! registered under `<topic>-value` (or the subject's latest version is
//! looked up with `register: false`), so a registry problem stops startup
//! rather than the first record. Avro sources decode by the schema id each
//! record carries; schemas are fetched once and cached. Offline
//! ([`Codecs::offline`], `streamfold test`) the schemas are the topology's
//! own files, numbered in memory ([`registry::SchemaSource::Local`]).

pub(crate) mod registry;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use self::registry::{
    Backoff, LocalSchemas, RECORD_RETRY, RegistryClient, SETUP_RETRY, SchemaSource, subject,
};
use crate::record::avro::{self, AvroSchema};
use crate::record::json;
use crate::record::{ErrorClass, Record, Timestamp};
use crate::telemetry::DeadLetterReason;
use crate::topology::Topology;
use crate::topology::model::{Format, KeyFormat};

/// Why one record could not be decoded: the record's fault (bad bytes, an
/// unknown schema) or the outside world's (a schema registry that did not
/// answer after the configured retries). Either way it goes to the
/// dead-letter topic, with the class and the attempts in its headers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct CodecError {
    /// [`ErrorClass::Record`] or [`ErrorClass::External`].
    pub class: ErrorClass,
    pub reason: String,
    pub attempts: u32,
    /// What could not be read.
    pub(crate) what: Unreadable,
}

/// The part of a record that could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// The value's bytes.
    #[default]
    Value,
    /// The key's bytes.
    Key,
    /// There is no value at all (a tombstone).
    NoValue,
}

impl CodecError {
    pub(crate) fn record(reason: impl Into<String>) -> CodecError {
        CodecError {
            class: ErrorClass::Record,
            reason: reason.into(),
            attempts: 1,
            what: Unreadable::Value,
        }
    }

    pub(crate) fn external(reason: impl Into<String>, attempts: u32) -> CodecError {
        CodecError {
            class: ErrorClass::External,
            reason: reason.into(),
            attempts,
            what: Unreadable::Value,
        }
    }

    /// A record without a value (a tombstone) where a value is needed.
    pub(crate) fn no_value() -> CodecError {
        CodecError {
            what: Unreadable::NoValue,
            ..CodecError::record("record has no value (a tombstone)")
        }
    }

    /// The reason code its dead letter carries.
    pub(crate) fn dead_letter_reason(&self) -> DeadLetterReason {
        match (self.class, self.what) {
            (ErrorClass::External, _) => DeadLetterReason::ExternalFailure,
            (_, Unreadable::Value) => DeadLetterReason::UndecodableValue,
            (_, Unreadable::Key) => DeadLetterReason::UndecodableKey,
            (_, Unreadable::NoValue) => DeadLetterReason::MissingValue,
        }
    }
}

impl From<String> for CodecError {
    fn from(reason: String) -> Self {
        CodecError::record(reason)
    }
}

/// Why codecs could not be prepared (at startup, before any record).
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A source or sink format cannot be set up.
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

/// How a source's values (or keys) are read.
enum Decoder {
    Json,
    /// By the schema id each record carries, then resolved to the reader
    /// schema when the source names one.
    Avro {
        reader: Option<Box<AvroSchema>>,
        /// How to retry a registry that does not answer.
        retry: Backoff,
    },
}

/// How a sink's values (or keys) are written.
enum Encoder {
    Json,
    /// With `schema`, registered as `id`.
    Avro {
        id: u32,
        schema: Box<AvroSchema>,
    },
}

struct SourceCodec {
    topic: String,
    value: Decoder,
    /// Keys are Confluent Avro (otherwise they pass through as bytes).
    avro_key: bool,
    /// `key_format: none`: the key on the wire is ignored.
    keyless: bool,
    /// `kind: table`: a record without a value is a tombstone (read as
    /// `null`), not an error.
    table: bool,
}

/// A record's key and value bytes on the wire: what a consumer reads, or
/// what the producer is to write. No payload is a tombstone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wire {
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
}

struct SinkCodec {
    value: Encoder,
    /// `Some` when keys are Confluent Avro.
    key: Option<Encoder>,
}

/// Value (and Avro key) codecs of every source and sink of a topology.
pub struct Codecs {
    sources: Vec<SourceCodec>,
    sinks: Vec<SinkCodec>,
    schemas: Option<SchemaSource>,
    /// Ids of source key and value schemas registered by
    /// [`Codecs::encode_as_producer`] and [`Codecs::encode_key_as_producer`].
    producer_ids: Mutex<HashMap<(usize, bool), u32>>,
}

/// Whether any source or sink of `topology` reads or writes Avro.
pub(crate) fn uses_avro(topology: &Topology) -> bool {
    let sources = topology
        .sources
        .iter()
        .map(|s| (s.config.format, s.config.key_format));
    let sinks = topology
        .sinks
        .iter()
        .map(|s| (s.config.format, s.config.key_format));
    sources
        .chain(sinks)
        .any(|(value, key)| value == Format::Avro || key == KeyFormat::Avro)
}

impl Codecs {
    /// Prepares every codec; for Avro, connects to the schema registry and
    /// registers (or looks up) the sinks' schemas, retrying an unreachable
    /// registry with backoff.
    pub fn new(topology: &Topology) -> Result<Codecs, FormatError> {
        let schemas = if uses_avro(topology) {
            let config = topology
                .schema_registry
                .as_ref()
                .ok_or_else(|| FormatError::Setup {
                    what: "schema_registry".into(),
                    message: "Avro sources and sinks need a schema registry".into(),
                })?;
            let client = RegistryClient::connect(config).map_err(|e| FormatError::Setup {
                what: "schema_registry".into(),
                message: e.to_string(),
            })?;
            Some(SchemaSource::Registry(client))
        } else {
            None
        };
        Codecs::with_schemas(topology, schemas)
    }

    /// The codecs `streamfold test` runs with: Avro schemas come from the
    /// topology's own files, kept in memory and numbered as a registry
    /// would; no registry is needed or contacted.
    pub fn offline(topology: &Topology) -> Result<Codecs, FormatError> {
        let schemas = uses_avro(topology).then(|| SchemaSource::Local(LocalSchemas::default()));
        Codecs::with_schemas(topology, schemas)
    }

    fn with_schemas(
        topology: &Topology,
        schemas: Option<SchemaSource>,
    ) -> Result<Codecs, FormatError> {
        let mut sources = Vec::with_capacity(topology.sources.len());
        for source in &topology.sources {
            let config = &source.config;
            let setup = |message: String| FormatError::Setup {
                what: format!("source `{}`", source.name),
                message,
            };
            let value = match config.format {
                Format::Json => Decoder::Json,
                Format::Avro => Decoder::Avro {
                    retry: Backoff::from_config(
                        config.retry.as_ref().unwrap_or(&topology.processing.retry),
                    ),
                    reader: config
                        .schema
                        .as_deref()
                        .map(|file| avro::read_schema_file(file).map(Box::new))
                        .transpose()
                        .map_err(setup)?,
                },
            };
            sources.push(SourceCodec {
                topic: config.topic.clone(),
                value,
                avro_key: config.key_format == KeyFormat::Avro,
                keyless: config.key_format == KeyFormat::None,
                table: config.kind.is_table(),
            });
        }
        let mut sinks = Vec::with_capacity(topology.sinks.len());
        for sink in &topology.sinks {
            let config = &sink.config;
            let setup = |message: String| FormatError::Setup {
                what: format!("sink `{}`", sink.name),
                message,
            };
            let register = config.register.unwrap_or(true);
            let encoder = |avro: bool, file: Option<&Path>, key: bool| match (avro, file) {
                (false, _) => Ok(Encoder::Json),
                (true, Some(file)) => match &schemas {
                    Some(schemas) => sink_encoder(schemas, &config.topic, key, file, register),
                    None => Err("Avro needs a schema registry".to_string()),
                },
                (true, None) => Err(format!(
                    "Avro {} need a schema file",
                    if key { "keys" } else { "values" }
                )),
            };
            let value = encoder(
                config.format == Format::Avro,
                config.schema.as_deref(),
                false,
            )
            .map_err(setup)?;
            let key = match config.key_format {
                KeyFormat::Avro => {
                    Some(encoder(true, config.key_schema.as_deref(), true).map_err(setup)?)
                }
                _ => None,
            };
            sinks.push(SinkCodec { value, key });
        }
        Ok(Codecs {
            sources,
            sinks,
            schemas,
            producer_ids: Mutex::new(HashMap::new()),
        })
    }

    /// The record source `source` reads from `key` and `payload`: the key
    /// by the source's key format (ignored with `key_format: none`), the
    /// value by its format. A record without a value (a tombstone) has
    /// nothing to process and is unreadable. The runtime and the offline
    /// driver both read records through this, so `streamfold test` shows
    /// what `run` does with them.
    pub(crate) fn decode_record(
        &self,
        source: usize,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        timestamp: Timestamp,
        headers: Vec<(String, Vec<u8>)>,
    ) -> Result<Record, CodecError> {
        let codec = self.sources.get(source);
        let keyless = codec.is_some_and(|s| s.keyless);
        let key = match key {
            Some(key) if !keyless => Some(self.decode_key(source, key)?),
            _ => None,
        };
        let value = match payload {
            Some(payload) => self.decode(source, payload)?,
            None if codec.is_some_and(|s| s.table) => Value::Null,
            None => return Err(CodecError::no_value()),
        };
        Ok(Record {
            key,
            value,
            timestamp,
            headers,
        })
    }

    /// A table's change read from a record of table source `source`: its
    /// key and its new value (`None` for a tombstone). The global tables'
    /// readers and the offline driver both read table records through this.
    pub(crate) fn decode_table_change(
        &self,
        source: usize,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
    ) -> Result<(Box<[u8]>, Option<Value>), CodecError> {
        let record = self.decode_record(source, key, payload, Timestamp::default(), Vec::new())?;
        let Some(key) = record.key else {
            return Err(CodecError::record(
                "a table record needs a key: the table holds one value per key",
            ));
        };
        Ok((key, Some(record.value).filter(|v| !v.is_null())))
    }

    /// The key and payload sink `sink` writes for `record`: a null value is
    /// a tombstone (no payload), so a compacted topic forgets the key.
    /// Shared by the runtime and the offline driver, like
    /// [`Codecs::decode_record`].
    pub(crate) fn encode_record(&self, sink: usize, record: &Record) -> Result<Wire, String> {
        let payload = match &record.value {
            Value::Null => None,
            value => Some(self.encode(sink, value)?),
        };
        let key = match record.key.as_deref() {
            Some(key) => Some(self.encode_key(sink, key)?),
            None => None,
        };
        Ok(Wire { key, payload })
    }

    /// How source `source` reads a record's key, when its value is plain
    /// JSON and its key bytes pass through as they are (the key is no
    /// Avro): `Some(true)` when the key is ignored (`key_format: none`),
    /// `Some(false)` when it is kept. `None` for any other source. Such a
    /// record's key needs no decoding, and its value may be read a field
    /// at a time (`Records::process_source_bytes`).
    pub(crate) fn plain_json_keyless(&self, source: usize) -> Option<bool> {
        match self.sources.get(source) {
            Some(s) if matches!(s.value, Decoder::Json) && !s.avro_key => Some(s.keyless),
            _ => None,
        }
    }

    /// Decodes a value read by source `source`.
    pub fn decode(&self, source: usize, payload: &[u8]) -> Result<Value, CodecError> {
        match self.sources.get(source).map(|s| &s.value) {
            Some(Decoder::Json) => Ok(json::decode(payload)?),
            Some(Decoder::Avro { reader, retry }) => {
                self.decode_avro(payload, reader.as_deref(), *retry)
            }
            None => Err(CodecError::record(format!("no source #{source}"))),
        }
    }

    /// Encodes a value for sink `sink`.
    pub fn encode(&self, sink: usize, value: &Value) -> Result<Vec<u8>, String> {
        match self.sinks.get(sink).map(|s| &s.value) {
            Some(encoder) => encoder.encode(value),
            None => Err(format!("no sink #{sink}")),
        }
    }

    /// The grouping key of a record read by source `source`: Avro keys are
    /// decoded to text when they are strings and to compact JSON otherwise
    /// (as keys taken from a field with `key_by` are); other key formats
    /// pass through.
    pub fn decode_key(&self, source: usize, key: &[u8]) -> Result<Box<[u8]>, CodecError> {
        match self.sources.get(source) {
            Some(s) if s.avro_key => {
                let retry = match &s.value {
                    Decoder::Avro { retry, .. } => *retry,
                    Decoder::Json => RECORD_RETRY,
                };
                let value = self.decode_avro(key, None, retry).map_err(|e| CodecError {
                    reason: format!("key: {}", e.reason),
                    what: Unreadable::Key,
                    ..e
                })?;
                Ok(match value {
                    Value::String(text) => text.into_bytes().into_boxed_slice(),
                    other => json::encode(&other).into_boxed_slice(),
                })
            }
            Some(_) => Ok(key.into()),
            None => Err(CodecError::record(format!("no source #{source}"))),
        }
    }

    /// The key bytes to write to sink `sink`: with `key_format: avro` the
    /// key (text, or JSON for keys that are not strings) is written with the
    /// sink's key schema; other key formats pass through.
    pub fn encode_key(&self, sink: usize, key: &[u8]) -> Result<Vec<u8>, String> {
        match self.sinks.get(sink) {
            Some(SinkCodec {
                key: Some(encoder), ..
            }) => {
                let text = std::str::from_utf8(key)
                    .map_err(|_| "key: not UTF-8 text, so not an Avro key".to_string())?;
                encoder
                    .encode(&Value::String(text.to_string()))
                    .or_else(|as_text| match serde_json::from_str::<Value>(text) {
                        Ok(parsed) if !parsed.is_string() => encoder.encode(&parsed),
                        _ => Err(as_text),
                    })
                    .map_err(|e| format!("key: {e}"))
            }
            Some(_) => Ok(key.to_vec()),
            None => Err(format!("no sink #{sink}")),
        }
    }

    /// Encodes `value` as a producer writing to source `source` would: JSON
    /// text, or Avro with the source's `schema` (registered under
    /// `<topic>-value` on first use) in the Confluent wire format. For the
    /// offline driver and tests.
    pub fn encode_as_producer(&self, source: usize, value: &Value) -> Result<Vec<u8>, String> {
        let codec = self
            .sources
            .get(source)
            .ok_or_else(|| format!("no source #{source}"))?;
        let reader = match &codec.value {
            Decoder::Json => return Ok(json::encode(value)),
            Decoder::Avro {
                reader: Some(reader),
                ..
            } => reader,
            Decoder::Avro { reader: None, .. } => {
                return Err(format!(
                    "the Avro source reading `{}` names no `schema` to write records with",
                    codec.topic
                ));
            }
        };
        let id = self.producer_id(source, false, reader)?;
        Ok(avro::frame(id, &reader.encode(value)?))
    }

    /// The id of `schema`, registered for source `source`'s keys or values
    /// on first use.
    fn producer_id(&self, source: usize, key: bool, schema: &AvroSchema) -> Result<u32, String> {
        let known = self
            .producer_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(source, key))
            .copied();
        if let Some(id) = known {
            return Ok(id);
        }
        let topic = &self.sources[source].topic;
        let id = self
            .schemas()?
            .register(&subject(topic, key), schema, RECORD_RETRY)
            .map_err(|e| e.to_string())?;
        self.producer_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((source, key), id);
        Ok(id)
    }

    /// Encodes the text key `key` as a producer writing to source `source`
    /// would: with `key_format: avro`, an Avro string (schema `"string"`,
    /// registered under `<topic>-key`) in the Confluent wire format; other
    /// key formats take the bytes as they are. For the offline driver.
    pub fn encode_key_as_producer(&self, source: usize, key: &str) -> Result<Vec<u8>, String> {
        let codec = self
            .sources
            .get(source)
            .ok_or_else(|| format!("no source #{source}"))?;
        if !codec.avro_key {
            return Ok(key.as_bytes().to_vec());
        }
        let schema = AvroSchema::parse(r#""string""#)?;
        let id = self.producer_id(source, true, &schema)?;
        Ok(avro::frame(id, &schema.encode(&Value::String(key.into()))?))
    }

    /// Decodes bytes `encode(sink, ..)` wrote, as a consumer of the sink's
    /// topic would: JSON, or Avro by the schema id they carry. For the
    /// offline driver and tests.
    pub fn decode_as_consumer(&self, sink: usize, bytes: &[u8]) -> Result<Value, String> {
        match self.sinks.get(sink).map(|s| &s.value) {
            Some(Encoder::Json) => json::decode(bytes),
            Some(Encoder::Avro { .. }) => self
                .decode_avro(bytes, None, RECORD_RETRY)
                .map_err(|e| e.reason),
            None => Err(format!("no sink #{sink}")),
        }
    }

    fn schemas(&self) -> Result<&SchemaSource, String> {
        self.schemas
            .as_ref()
            .ok_or_else(|| "Avro needs a schema registry".to_string())
    }

    fn decode_avro(
        &self,
        bytes: &[u8],
        reader: Option<&AvroSchema>,
        retry: Backoff,
    ) -> Result<Value, CodecError> {
        let (id, body) = avro::unframe(bytes)?;
        let writer = self.schemas()?.schema_by_id(id, retry)?;
        Ok(match reader {
            Some(reader) => writer.decode_as(body, reader),
            None => writer.decode(body),
        }
        .map_err(|e| format!("schema id {id}: {e}"))?)
    }
}

impl Encoder {
    fn encode(&self, value: &Value) -> Result<Vec<u8>, String> {
        match self {
            Encoder::Json => Ok(json::encode(value)),
            Encoder::Avro { id, schema } => Ok(avro::frame(*id, &schema.encode(value)?)),
        }
    }
}

/// The writer for a sink's values (or keys): the schema file registered
/// under the topic's subject, or the subject's latest version.
fn sink_encoder(
    schemas: &SchemaSource,
    topic: &str,
    key: bool,
    file: &Path,
    register: bool,
) -> Result<Encoder, String> {
    let local = avro::read_schema_file(file)?;
    let subject = subject(topic, key);
    if register || schemas.is_local() {
        let id = schemas
            .register(&subject, &local, SETUP_RETRY)
            .map_err(|e| format!("cannot register `{}` as `{subject}`: {e}", file.display()))?;
        tracing::info!(subject, id, schema = %file.display(), "Avro schema registered.");
        return Ok(Encoder::Avro {
            id,
            schema: Box::new(local),
        });
    }
    let (id, latest) = schemas.latest(&subject, SETUP_RETRY).map_err(|e| {
        if e.is_not_found() {
            format!(
                "subject `{subject}` has no registered version to write with (`register: false`): register `{}` first, or set `register: true`",
                file.display()
            )
        } else {
            e.to_string()
        }
    })?;
    if latest.canonical_form() == local.canonical_form() {
        tracing::info!(subject, id, "Avro schema found registered.");
    } else {
        tracing::warn!(
            subject,
            id,
            schema = %file.display(),
            "The latest registered schema differs from the schema file; writing with the registered one."
        );
    }
    Ok(Encoder::Avro {
        id,
        schema: Box::new(latest),
    })
}
