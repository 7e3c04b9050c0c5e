//! The repartition format: how a record re-keyed by `key_by` travels
//! through its node's repartition topic to the task its new key hashes to.
//! A repartition record is the record's key, its value as JSON, its
//! headers, and two of ours:
//!
//! - `streamfold.input`: which input of the receiving node it is for;
//! - `streamfold.src`: `<topic>/<partition>/<offset>/<seq>`, the source
//!   record it came from and its position among that record's outputs, so
//!   the receiving task can drop a copy re-sent after a failure
//!   ([`Upstream`]).

use crate::formats::CodecError;
use crate::record::json;
use crate::record::{Origin, Record, Timestamp};

/// Header naming which input of a node a repartition record is for.
const INPUT_HEADER: &str = "streamfold.input";
/// Header naming where a repartition record came from:
/// `<topic>/<partition>/<offset>/<seq>`.
const SOURCE_HEADER: &str = "streamfold.src";

/// Where a repartition record came from: the source partition (as
/// `topic/partition`), its offset, and its index among the records that
/// offset produced for the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Upstream {
    pub(crate) source: String,
    pub(crate) offset: i64,
    pub(crate) seq: u32,
}

/// A record read back from a repartition topic.
pub(crate) struct Repartitioned {
    /// The input of the receiving node it is for.
    pub(crate) input: usize,
    /// The source record it came from, when the writer said.
    pub(crate) upstream: Option<Upstream>,
    /// The record, or why it cannot be read (not written by streamfold, or
    /// damaged).
    pub(crate) record: Result<Record, String>,
}

/// Reads a repartition record: our headers are taken off, the others stay
/// with the record.
pub(crate) fn read(
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    timestamp: Timestamp,
    headers: &[(String, Vec<u8>)],
) -> Repartitioned {
    let mut input = 0;
    let mut upstream = None;
    let mut record_headers = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        match name.as_str() {
            INPUT_HEADER => {
                input = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
            SOURCE_HEADER => upstream = parse_upstream(value),
            _ => record_headers.push((name.clone(), value.clone())),
        }
    }
    let record = match payload {
        Some(bytes) => json::decode(bytes).map(|value| Record {
            key: key.map(Box::from),
            value,
            timestamp,
            headers: record_headers,
        }),
        None => Err(CodecError::no_value().reason),
    };
    Repartitioned {
        input,
        upstream,
        record,
    }
}

/// Prepares `record` for node input `input` on a repartition topic: its
/// payload, and our headers added to its own. `origin` and `seq` (the
/// record's position among the source record's outputs) name where it came
/// from; punctuation outputs have no origin.
pub(crate) fn write(
    record: &mut Record,
    input: usize,
    origin: Option<&Origin<'_>>,
    seq: u32,
) -> Vec<u8> {
    record
        .headers
        .push((INPUT_HEADER.into(), input.to_string().into_bytes()));
    if let Some(o) = origin {
        let src = format!("{}/{}/{}/{seq}", o.topic, o.partition, o.offset);
        record
            .headers
            .push((SOURCE_HEADER.into(), src.into_bytes()));
    }
    json::encode(&record.value)
}

/// Parses `topic/partition/offset/seq`.
fn parse_upstream(value: &[u8]) -> Option<Upstream> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.rsplitn(3, '/');
    let seq = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    let source = parts.next()?.to_string();
    Some(Upstream {
        source,
        offset,
        seq,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn upstream_headers_parse_from_the_right() {
        let parsed = parse_upstream(b"post-metric-updated/3/1042/0").unwrap();
        assert_eq!(parsed.source, "post-metric-updated/3");
        assert_eq!(parsed.offset, 1042);
        assert_eq!(parsed.seq, 0);
        assert_eq!(parse_upstream(b"garbage"), None);
    }

    #[test]
    fn a_repartition_record_reads_back_as_written() {
        let mut record = Record::new(Some(Box::from(&b"acct-7"[..])), json!({"n": 1}), 42);
        record.headers.push(("trace".into(), b"abc".to_vec()));
        let headers_in = vec![("h".to_string(), b"v".to_vec())];
        let origin = Origin {
            topic: "in",
            partition: 2,
            offset: 9,
            key: None,
            payload: None,
            headers: &headers_in,
        };
        let payload = write(&mut record, 1, Some(&origin), 3);
        let read = read(record.key.as_deref(), Some(&payload), 42, &record.headers);
        assert_eq!(read.input, 1);
        assert_eq!(
            read.upstream,
            Some(Upstream {
                source: "in/2".into(),
                offset: 9,
                seq: 3
            })
        );
        let back = read.record.unwrap();
        assert_eq!(back.value, json!({"n": 1}));
        assert_eq!(back.key.as_deref(), Some(&b"acct-7"[..]));
        assert_eq!(back.headers, vec![("trace".to_string(), b"abc".to_vec())]);
    }

    #[test]
    fn a_repartition_record_without_a_value_or_json_is_unreadable() {
        assert!(read(None, None, 0, &[]).record.is_err());
        assert!(read(None, Some(b"{"), 0, &[]).record.is_err());
    }
}
