//! Record encodings: how bytes on a topic become [`Record`](crate::record::Record)
//! values and back.
//!
//! [`Codecs`] is built once per topology and used by the runtime and the
//! offline driver alike: `decode` per source, `encode` per sink. A value
//! that cannot be decoded, or that does not fit a sink's encoding, is the
//! record's fault: the caller sends it to the dead-letter topic with the
//! returned reason.

pub mod json;

use serde_json::Value;

use crate::topology::Topology;
use crate::topology::model::Format;

/// Why codecs could not be prepared (at startup, before any record).
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A source or sink format cannot be set up.
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

enum Codec {
    Json,
}

impl Codec {
    fn for_format(format: Format) -> Codec {
        match format {
            Format::Json => Codec::Json,
        }
    }
}

/// Value codecs of every source and sink of a topology.
pub struct Codecs {
    sources: Vec<Codec>,
    sinks: Vec<Codec>,
}

impl Codecs {
    pub fn new(topology: &Topology) -> Result<Codecs, FormatError> {
        Ok(Codecs {
            sources: topology
                .sources
                .iter()
                .map(|s| Codec::for_format(s.config.format))
                .collect(),
            sinks: topology
                .sinks
                .iter()
                .map(|s| Codec::for_format(s.config.format))
                .collect(),
        })
    }

    /// Decodes a value read by source `source`.
    pub fn decode(&self, source: usize, payload: &[u8]) -> Result<Value, String> {
        match self.sources.get(source) {
            Some(Codec::Json) => json::decode(payload),
            None => Err(format!("no source #{source}")),
        }
    }

    /// Encodes a value for sink `sink`.
    pub fn encode(&self, sink: usize, value: &Value) -> Result<Vec<u8>, String> {
        match self.sinks.get(sink) {
            Some(Codec::Json) => Ok(json::encode(value)),
            None => Err(format!("no sink #{sink}")),
        }
    }
}
