//! Record size limits: what the producer and each topic accept, and how
//! large a record is on the wire.
//!
//! A record larger than its topic accepts must never reach the producer:
//! librdkafka refuses one over its `message.max.bytes` at once, and a
//! broker refuses one over the topic's `max.message.bytes` in the delivery
//! report, which fails the whole transaction. Either way the transaction
//! aborts, the tasks rewind, and the replay produces the same record
//! again: the process would abort and rewind forever. So every record is measured against [`Limits`] before it is sent,
//! and one that does not fit becomes a dead letter instead (see
//! `docs/exactly-once.md`, "Records too large for their topic").
//!
//! The size is an upper bound of both librdkafka's check and the broker's
//! (a record batch holding only this record), and it depends only on the
//! record: the same record takes the same path on every attempt. Space for
//! the test-mode `streamfold.txn` stamp is always reserved, so test runs
//! and production decide alike.
//!
//! Where a topic's limit comes from: its `max.message.bytes`, read at
//! startup with DescribeConfigs (Apache Kafka reports it for every
//! topic); otherwise only the producer's `message.max.bytes` applies. Should a
//! broker still refuse a record as too large (its limit was not reported,
//! or changed since startup), the transaction aborts once and the topic's
//! limit is lowered below that record, so the replay dead-letters it.

use std::collections::HashMap;

use super::dlq_headers;
use crate::topology::model::DEFAULT_MESSAGE_MAX_BYTES;

/// Reason prefix of every dead letter written because a record did not
/// fit its topic.
pub(crate) const TOO_LARGE: &str = "record_too_large";

/// Header on a dead letter whose payload was cut to fit the dead-letter
/// topic: the payload's original length in bytes.
pub(crate) const TRUNCATED_HEADER: &str = "streamfold.dlq.truncated";

/// A v2 record batch header.
const BATCH_OVERHEAD: usize = 61;
/// A record's framing at its largest (length, attributes, timestamp and
/// offset deltas, key and value lengths, header count: librdkafka's
/// `RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`).
const RECORD_OVERHEAD: usize = 36;
/// One header's framing at its largest (two varint lengths).
const HEADER_OVERHEAD: usize = 10;
/// Room for the `streamfold.txn` stamp (`<16 hex>:<sequence>`), reserved
/// whether or not the run stamps records.
const STAMP_RESERVE: usize = 64;

/// The most bytes `key`, `payload` and `headers` take as a record batch of
/// their own.
pub(crate) fn record_size(
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: &[(String, Vec<u8>)],
) -> usize {
    BATCH_OVERHEAD
        + RECORD_OVERHEAD
        + STAMP_RESERVE
        + key.map_or(0, <[u8]>::len)
        + payload.map_or(0, <[u8]>::len)
        + headers
            .iter()
            .map(|(k, v)| HEADER_OVERHEAD + k.len() + v.len())
            .sum::<usize>()
}

/// Where a limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitSource {
    /// The producer's `message.max.bytes`.
    Producer,
    /// The topic's `max.message.bytes`.
    Topic,
    /// The broker refused a record this large or larger.
    Refused,
}

/// A record that does not fit its topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TooLarge {
    pub(crate) topic: String,
    pub(crate) size: usize,
    pub(crate) limit: usize,
    pub(crate) source: LimitSource,
}

impl TooLarge {
    /// The dead-letter reason: `record_too_large: <what> is N bytes, ...`.
    pub(crate) fn reason(&self, what: &str) -> String {
        let why = match self.source {
            LimitSource::Producer => "the producer's message.max.bytes".to_string(),
            LimitSource::Topic => format!("max.message.bytes of topic `{}`", self.topic),
            LimitSource::Refused => format!(
                "the broker refused a record this large for topic `{}`",
                self.topic
            ),
        };
        format!(
            "{TOO_LARGE}: {what} for topic `{}` is {} bytes, over the limit of {} bytes ({why})",
            self.topic, self.size, self.limit
        )
    }

    /// How many bytes must go for the record to fit.
    pub(crate) fn excess(&self) -> usize {
        self.size - self.limit
    }
}

/// What a topic accepts besides size, from its configuration: the broker
/// refuses, for good, a keyless record for a compacted topic
/// (`INVALID_RECORD`) and, for a topic that keeps the producer's
/// timestamps, one too far behind or ahead of the broker's clock
/// (`INVALID_TIMESTAMP`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acceptance {
    /// `cleanup.policy` includes `compact`.
    pub(crate) compacted: bool,
    /// `message.timestamp.before.max.ms`, when timestamps are the
    /// producer's (`message.timestamp.type=CreateTime`).
    pub(crate) before_max_ms: Option<i64>,
    /// `message.timestamp.after.max.ms`, likewise.
    pub(crate) after_max_ms: Option<i64>,
}

impl Acceptance {
    /// From a topic's configuration entries, as DescribeConfigs reports
    /// them.
    pub(crate) fn from_configs(configs: &HashMap<String, String>) -> Acceptance {
        let create_time = configs
            .get("message.timestamp.type")
            .is_none_or(|t| t.trim() == "CreateTime");
        let millis = |name: &str| {
            configs
                .get(name)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|_| create_time)
                // Long.MAX_VALUE, the default, is no limit.
                .filter(|ms| *ms < i64::MAX)
        };
        Acceptance {
            compacted: configs
                .get("cleanup.policy")
                .is_some_and(|p| p.split(',').any(|p| p.trim() == "compact")),
            before_max_ms: millis("message.timestamp.before.max.ms"),
            after_max_ms: millis("message.timestamp.after.max.ms"),
        }
    }

    /// Why the broker would refuse a record (`keyed` or not, with
    /// `timestamp`) for `topic` at `now`, if it would.
    pub(crate) fn refusal(
        &self,
        topic: &str,
        keyed: bool,
        timestamp: Option<i64>,
        now: i64,
    ) -> Option<String> {
        if self.compacted && !keyed {
            return Some(format!(
                "topic `{topic}` is compacted and takes no record without a key (the broker refuses it as INVALID_RECORD)"
            ));
        }
        let timestamp = timestamp?;
        if let Some(after) = self.after_max_ms
            && timestamp > now.saturating_add(after)
        {
            return Some(format!(
                "the record's timestamp {timestamp} is {} ms ahead of now, more than topic `{topic}` accepts (message.timestamp.after.max.ms={after}; the broker refuses it as INVALID_TIMESTAMP)",
                timestamp - now
            ));
        }
        if let Some(before) = self.before_max_ms
            && timestamp < now.saturating_sub(before)
        {
            return Some(format!(
                "the record's timestamp {timestamp} is {} ms behind now, more than topic `{topic}` accepts (message.timestamp.before.max.ms={before}; the broker refuses it as INVALID_TIMESTAMP)",
                now - timestamp
            ));
        }
        None
    }
}

/// What the cluster reported of the topics a topology writes.
#[derive(Clone, Debug, Default)]
pub(crate) struct TopicLimits {
    /// `max.message.bytes` per topic.
    pub(crate) max_message_bytes: HashMap<String, usize>,
    /// What else each topic accepts.
    pub(crate) acceptance: HashMap<String, Acceptance>,
}

/// What the producer and each topic accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    producer: usize,
    topics: HashMap<String, usize>,
    /// Topics whose limit was lowered after a broker refusal.
    refused: HashMap<String, usize>,
    /// The smallest limit of all: a record no larger fits anywhere, with
    /// no lookup (the common case, on the hot path).
    floor: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::new(DEFAULT_MESSAGE_MAX_BYTES)
    }
}

impl Limits {
    /// Limits of a producer whose `message.max.bytes` is `producer`, with
    /// no topic limit known yet.
    pub(crate) fn new(producer: usize) -> Limits {
        Limits {
            producer,
            topics: HashMap::new(),
            refused: HashMap::new(),
            floor: producer,
        }
    }

    /// The topics' `max.message.bytes`, as the cluster reported them.
    pub(crate) fn set_topics(&mut self, topics: HashMap<String, usize>) {
        self.topics = topics;
        self.floor = self
            .floor
            .min(self.topics.values().copied().min().unwrap_or(usize::MAX));
    }

    /// The limit in force for `topic`, and where it comes from.
    pub(crate) fn limit(&self, topic: &str) -> (usize, LimitSource) {
        let mut limit = (self.producer, LimitSource::Producer);
        if let Some(&bytes) = self.topics.get(topic)
            && bytes < limit.0
        {
            limit = (bytes, LimitSource::Topic);
        }
        if let Some(&bytes) = self.refused.get(topic)
            && bytes < limit.0
        {
            limit = (bytes, LimitSource::Refused);
        }
        limit
    }

    /// Whether a record of `size` bytes ([`record_size`]) fits `topic`.
    pub(crate) fn check(&self, topic: &str, size: usize) -> Result<(), TooLarge> {
        if size <= self.floor {
            return Ok(());
        }
        let (limit, source) = self.limit(topic);
        if size <= limit {
            return Ok(());
        }
        Err(TooLarge {
            topic: topic.to_string(),
            size,
            limit,
            source,
        })
    }

    /// The broker refused a record of `size` bytes on `topic` as too
    /// large: from now on only smaller ones are sent there. Returns
    /// whether the limit went down.
    pub(crate) fn refused(&mut self, topic: &str, size: usize) -> bool {
        let lowered = size.saturating_sub(1);
        if lowered >= self.limit(topic).0 {
            return false;
        }
        self.refused.insert(topic.to_string(), lowered);
        self.floor = self.floor.min(lowered);
        true
    }

    /// The smallest limit of a topic below the producer's, if any: no
    /// batch of several records may be larger (librdkafka's `batch.size`).
    /// Cuts a dead letter's record to fit `topic` with [`shrink`], keeping
    /// the `streamfold.dlq.*` headers; returns how it was too large, when
    /// it was. The runtime and the offline driver cut alike.
    pub(crate) fn fit_dead_letter(
        &self,
        topic: &str,
        key: &mut Option<Vec<u8>>,
        payload: &mut Option<Vec<u8>>,
        headers: &mut Vec<(String, Vec<u8>)>,
    ) -> Option<TooLarge> {
        let size = record_size(key.as_deref(), payload.as_deref(), headers);
        let too_large = self.check(topic, size).err()?;
        shrink(key, payload, headers, dlq_headers::ALL, too_large.excess());
        Some(too_large)
    }

    pub(crate) fn smallest_topic_limit(&self) -> Option<usize> {
        self.topics
            .values()
            .copied()
            .filter(|&bytes| bytes < self.producer)
            .min()
    }
}

/// Cuts `payload` (then `headers` other than `keep`, then `key`) until
/// the record is `excess` bytes smaller, recording the payload's original
/// length in [`TRUNCATED_HEADER`]. The cut payload keeps its first bytes.
pub(crate) fn shrink(
    key: &mut Option<Vec<u8>>,
    payload: &mut Option<Vec<u8>>,
    headers: &mut Vec<(String, Vec<u8>)>,
    keep: &[&str],
    excess: usize,
) {
    // The header announcing the cut costs room too.
    let original = payload.as_ref().map_or(0, Vec::len);
    let note = (
        TRUNCATED_HEADER.to_string(),
        original.to_string().into_bytes(),
    );
    let mut excess = excess + HEADER_OVERHEAD + note.0.len() + note.1.len();
    if let Some(bytes) = payload.as_mut() {
        let cut = excess.min(bytes.len());
        bytes.truncate(bytes.len() - cut);
        excess -= cut;
    }
    headers.push(note);
    if excess > 0 {
        let mut dropped = 0;
        headers.retain(|(name, value)| {
            if dropped >= excess || keep.contains(&name.as_str()) || name == TRUNCATED_HEADER {
                return true;
            }
            dropped += HEADER_OVERHEAD + name.len() + value.len();
            false
        });
        excess = excess.saturating_sub(dropped);
    }
    if excess > 0
        && let Some(bytes) = key.as_mut()
    {
        let cut = excess.min(bytes.len());
        bytes.truncate(bytes.len() - cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A compacted topic refuses a keyless record; a topic that keeps the
    /// producer's timestamps refuses one past its limits, one that sets
    /// its own (LogAppendTime) refuses none; Kafka's default of
    /// Long.MAX_VALUE is no limit.
    #[test]
    fn what_a_topic_accepts_follows_its_configuration() {
        let now = 1_700_000_000_000;
        let compacted = Acceptance::from_configs(&configs(&[("cleanup.policy", "compact,delete")]));
        assert!(compacted.refusal("t", false, None, now).is_some());
        assert!(compacted.refusal("t", true, Some(0), now).is_none());
        let deleted = Acceptance::from_configs(&configs(&[("cleanup.policy", "delete")]));
        assert!(deleted.refusal("t", false, None, now).is_none());
        let limited = Acceptance::from_configs(&configs(&[
            ("message.timestamp.after.max.ms", "3600000"),
            ("message.timestamp.before.max.ms", "9223372036854775807"),
        ]));
        assert!(
            limited
                .refusal("t", true, Some(now + 3_600_000), now)
                .is_none()
        );
        let ahead = limited
            .refusal("t", true, Some(now + 3_600_001), now)
            .unwrap();
        assert!(ahead.contains("INVALID_TIMESTAMP"), "{ahead}");
        assert!(
            limited.refusal("t", true, Some(0), now).is_none(),
            "no limit behind"
        );
        let appended = Acceptance::from_configs(&configs(&[
            ("message.timestamp.type", "LogAppendTime"),
            ("message.timestamp.after.max.ms", "1000"),
        ]));
        assert!(
            appended
                .refusal("t", true, Some(now + 86_400_000), now)
                .is_none()
        );
    }

    #[test]
    fn the_size_bounds_librdkafkas_check_and_a_one_record_batch() {
        let headers = vec![("h".to_string(), b"v".to_vec())];
        // librdkafka: 36 + key + value + (varint + name + varint + value).
        let client = 36 + 3 + 100 + (1 + 1 + 1 + 1);
        let size = record_size(Some(b"key"), Some(&[0; 100]), &headers);
        assert!(size >= client + 61, "{size}");
        assert_eq!(
            size,
            61 + 36 + 64 + 3 + 100 + 12,
            "the reserve for the stamp is always counted"
        );
    }

    #[test]
    fn the_smallest_limit_applies_and_says_where_it_comes_from() {
        let mut limits = Limits::new(1_000_000);
        limits.set_topics(HashMap::from([
            ("small".to_string(), 65_536),
            ("large".to_string(), 5_000_000),
        ]));
        assert_eq!(limits.limit("small"), (65_536, LimitSource::Topic));
        assert_eq!(limits.limit("large"), (1_000_000, LimitSource::Producer));
        assert_eq!(limits.limit("unknown"), (1_000_000, LimitSource::Producer));
        assert_eq!(limits.smallest_topic_limit(), Some(65_536));
        let too_large = limits.check("small", 70_000).unwrap_err();
        assert_eq!(too_large.excess(), 70_000 - 65_536);
        assert_eq!(
            too_large.reason("the folded event"),
            "record_too_large: the folded event for topic `small` is 70000 bytes, over the limit \
             of 65536 bytes (max.message.bytes of topic `small`)"
        );
        assert!(limits.check("small", 65_536).is_ok());
    }

    #[test]
    fn a_refusal_lowers_the_limit_below_the_refused_record_only() {
        let mut limits = Limits::new(1_000_000);
        assert!(limits.refused("t", 300_000));
        assert_eq!(limits.limit("t"), (299_999, LimitSource::Refused));
        assert!(limits.check("t", 300_000).is_err());
        // A larger refusal (several records in one batch) changes nothing.
        assert!(!limits.refused("t", 400_000));
        assert_eq!(limits.limit("other"), (1_000_000, LimitSource::Producer));
    }

    #[test]
    fn shrinking_cuts_the_payload_first_and_notes_its_length() {
        let mut key = Some(b"key".to_vec());
        let mut payload = Some(vec![b'x'; 10_000]);
        let mut headers = vec![
            ("streamfold.dlq.reason".to_string(), b"why".to_vec()),
            ("original".to_string(), vec![b'h'; 100]),
        ];
        let before = record_size(key.as_deref(), payload.as_deref(), &headers);
        shrink(
            &mut key,
            &mut payload,
            &mut headers,
            &["streamfold.dlq.reason"],
            4_000,
        );
        let after = record_size(key.as_deref(), payload.as_deref(), &headers);
        assert!(after <= before - 4_000, "{after} > {before} - 4000");
        assert_eq!(key.as_deref(), Some(&b"key"[..]));
        assert_eq!(headers.len(), 3);
        assert_eq!(
            headers.last(),
            Some(&(TRUNCATED_HEADER.to_string(), b"10000".to_vec()))
        );

        // Not enough payload: other headers go, then the key is cut; the
        // kept headers stay.
        let mut key = Some(vec![b'k'; 500]);
        let mut payload = Some(vec![b'x'; 10]);
        let mut headers = vec![
            ("streamfold.dlq.reason".to_string(), b"why".to_vec()),
            ("original".to_string(), vec![b'h'; 100]),
        ];
        let before = record_size(key.as_deref(), payload.as_deref(), &headers);
        shrink(
            &mut key,
            &mut payload,
            &mut headers,
            &["streamfold.dlq.reason"],
            300,
        );
        let after = record_size(key.as_deref(), payload.as_deref(), &headers);
        assert!(after <= before - 300, "{after} > {before} - 300");
        assert_eq!(payload.as_deref(), Some(&b""[..]));
        assert!(headers.iter().any(|(n, _)| n == "streamfold.dlq.reason"));
        assert!(headers.iter().all(|(n, _)| n != "original"));
        assert!(key.unwrap().len() < 500);
    }
}
