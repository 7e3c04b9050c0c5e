//! The topics of a case as the offline driver fills them: the outlet of
//! the one output path ([`crate::task::output`]) that keeps each record as
//! a consumer of its topic would read it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Received;
use crate::formats::Codecs;
use crate::record::json;
use crate::task::DeadLetter;
use crate::task::DeadLetterAt;
use crate::task::limits::{Limits, record_size};
use crate::task::output::{Outlet, Refusal, Written};
use crate::topology::Topology;

/// The topics of a case, as where a task's outputs go: each record through
/// the wire format and back, as a consumer sees it.
pub(super) struct Collected<'a> {
    pub(super) topology: &'a Topology,
    pub(super) codecs: &'a Codecs,
    pub(super) limits: &'a Limits,
    pub(super) received: &'a mut BTreeMap<String, Vec<Received>>,
}

impl Outlet for Collected<'_> {
    type Error = std::convert::Infallible;

    /// The producer's size limit (the topic limits `run` reads from the
    /// broker are not known here).
    fn check(&mut self, record: &Written<'_>) -> Result<(), Refusal> {
        let size = record_size(record.key, record.payload, &record.from.headers);
        self.limits
            .check(record.topic, size)
            .map_err(Refusal::TooLarge)
    }

    fn send(&mut self, record: Written<'_>) -> Result<(), Self::Error> {
        // The driver runs with `Routing::Direct`: re-keyed records go
        // straight to their node, and only sinks are written.
        let DeadLetterAt::Sink(sink) = record.at else {
            return Ok(());
        };
        let value = match record.payload {
            // A tombstone: no payload on the wire.
            None => Ok(Value::Null),
            Some(bytes) => self
                .codecs
                .decode_as_consumer(sink, bytes)
                .map_err(|_| String::from_utf8_lossy(bytes).into_owned()),
        };
        self.received
            .entry(record.topic.to_string())
            .or_default()
            .push(Received {
                // As the task emitted it, which a consumer reading it with
                // the sink's key format sees.
                key: record.from.key.as_deref().map(crate::record::key_text),
                value,
                headers: text_headers(&record.from.headers),
                timestamp: Some(record.from.timestamp),
            });
        Ok(())
    }

    fn send_dead_letter(&mut self, letter: &DeadLetter) -> Result<(), Self::Error> {
        let topic = &self.topology.dead_letter_topic;
        let mut letter = letter.clone();
        self.limits.fit_dead_letter(
            topic,
            &mut letter.key,
            &mut letter.payload,
            &mut letter.headers,
        );
        let value = match &letter.payload {
            Some(bytes) => {
                json::decode(bytes).map_err(|_| String::from_utf8_lossy(bytes).into_owned())
            }
            None => Ok(Value::Null),
        };
        self.received
            .entry(topic.clone())
            .or_default()
            .push(Received {
                key: letter.key.as_deref().map(crate::record::key_text),
                value,
                headers: text_headers(&letter.headers),
                timestamp: None,
            });
        Ok(())
    }
}

fn text_headers(headers: &[(String, Vec<u8>)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}
