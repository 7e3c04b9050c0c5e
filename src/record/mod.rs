//! The record that flows between operators.

pub mod avro;
pub mod json;

use serde_json::Value;

/// librdkafka's default `message.max.bytes`: the largest record a producer
/// sends unless the topology says otherwise.
pub(crate) const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Milliseconds since the Unix epoch, the unit of every clock.
pub(crate) type Timestamp = i64;

/// A decoded record. Keys stay bytes (they are what Kafka partitions and
/// groups by); values are JSON values whatever their wire format.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub(crate) key: Option<Box<[u8]>>,
    pub(crate) value: Value,
    pub(crate) timestamp: Timestamp,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    pub fn new(key: Option<Box<[u8]>>, value: Value, timestamp: Timestamp) -> Record {
        Record {
            key,
            value,
            timestamp,
            headers: Vec::new(),
        }
    }

    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Where the record being processed came from, with its bytes as read,
/// so a dead letter can carry the original and be replayed.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    pub headers: &'a [(String, Vec<u8>)],
}

/// Whose fault a failure to handle a record is, which decides what happens
/// next. Operators ([`crate::operators::OpError`]), codecs
/// ([`crate::formats::CodecError`]) and dead letters
/// ([`crate::telemetry::DeadLetterReason`]) all classify by it, and a dead
/// letter's `streamfold.dlq.class` header is its [`ErrorClass::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The record's (bad bytes, a missing field, a wrong type): it goes to
    /// the dead-letter topic and processing continues.
    Record,
    /// The outside world's, after the configured retries (a schema
    /// registry that does not answer): dead-lettered with the attempts.
    External,
    /// Ours (a bug, unusable state): the task stops; nothing is
    /// dead-lettered.
    Internal,
}

impl ErrorClass {
    /// The name written in dead-letter headers.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ErrorClass::Record => "record",
            ErrorClass::External => "external",
            ErrorClass::Internal => "internal",
        }
    }
}

/// Renders a key for messages and JSON output: text when it is UTF-8.
pub(crate) fn key_text(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
