//! Dead letters: the record a node, a source or a sink could not handle,
//! with why and where it came from in headers ([`dlq_headers`]), bound for
//! the topology's dead-letter topic.

use crate::record::Origin;
use crate::record::Record;
use crate::telemetry::DeadLetterReason;

/// Dead-letter header names. Values are UTF-8 text.
pub(crate) mod dlq_headers {
    pub(crate) const TOPIC: &str = "streamfold.dlq.topic";
    pub(crate) const PARTITION: &str = "streamfold.dlq.partition";
    pub(crate) const OFFSET: &str = "streamfold.dlq.offset";
    pub(crate) const NODE: &str = "streamfold.dlq.node";
    pub(crate) const CLASS: &str = "streamfold.dlq.class";
    /// A [`DeadLetterReason`](crate::telemetry::DeadLetterReason) code, the
    /// `reason` label of the dead-letter counter.
    pub(crate) const REASON_CODE: &str = "streamfold.dlq.reason_code";
    pub(crate) const REASON: &str = "streamfold.dlq.reason";
    pub(crate) const ATTEMPTS: &str = "streamfold.dlq.attempts";
    /// The payload was cut to fit the dead-letter topic; its original
    /// length ([`crate::task::limits::TRUNCATED_HEADER`]).
    pub(crate) const TRUNCATED: &str = crate::task::limits::TRUNCATED_HEADER;
    /// All of them, to strip before a replay.
    pub(crate) const ALL: &[&str] = &[
        TOPIC,
        PARTITION,
        OFFSET,
        NODE,
        CLASS,
        REASON_CODE,
        REASON,
        ATTEMPTS,
        TRUNCATED,
    ];
}

/// A record that could not be processed, with why and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadLetter {
    /// The original key and payload as read, when there was an input.
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
    /// The original headers followed by the `streamfold.dlq.*` headers.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) node: String,
}

impl DeadLetter {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// Where a dead letter made outside the task is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeadLetterAt {
    /// The `n`-th sink.
    Sink(usize),
    /// The `n`-th node.
    Node(usize),
}

/// A dead letter for the record at `origin` (if any), rejected by `node`
/// (a source, node or sink name) for `code`, with `reason` in words.
pub(crate) fn dead_letter(
    origin: Option<&Origin<'_>>,
    node: &str,
    code: DeadLetterReason,
    reason: &str,
    attempts: u32,
) -> DeadLetter {
    let mut headers: Vec<(String, Vec<u8>)> =
        origin.map(|o| o.headers.to_vec()).unwrap_or_default();
    headers.retain(|(name, _)| !dlq_headers::ALL.contains(&name.as_str()));
    if let Some(o) = origin {
        headers.push((dlq_headers::TOPIC.into(), o.topic.as_bytes().to_vec()));
        headers.push((
            dlq_headers::PARTITION.into(),
            o.partition.to_string().into_bytes(),
        ));
        headers.push((
            dlq_headers::OFFSET.into(),
            o.offset.to_string().into_bytes(),
        ));
    }
    headers.push((dlq_headers::NODE.into(), node.as_bytes().to_vec()));
    headers.push((
        dlq_headers::CLASS.into(),
        code.class().name().as_bytes().to_vec(),
    ));
    headers.push((
        dlq_headers::REASON_CODE.into(),
        code.code().as_bytes().to_vec(),
    ));
    // A reason quoting another library's error could quote a credential.
    let reason = crate::secrets::scrub(reason);
    headers.push((dlq_headers::REASON.into(), reason.as_bytes().to_vec()));
    headers.push((
        dlq_headers::ATTEMPTS.into(),
        attempts.to_string().into_bytes(),
    ));
    DeadLetter {
        key: origin.and_then(|o| o.key).map(<[u8]>::to_vec),
        payload: origin.and_then(|o| o.payload).map(<[u8]>::to_vec),
        headers,
        node: node.to_string(),
    }
}

/// A dead letter for a value that a sink could not write (it does not fit
/// the sink's schema): the letter carries that value as JSON and its key,
/// so nothing is lost, with the origin of the input being processed, if
/// any, as context. Count it with [`super::Task::count_dead_letter`].
pub(crate) fn sink_dead_letter(
    origin: Option<&Origin<'_>>,
    sink: &str,
    code: DeadLetterReason,
    reason: &str,
    record: &Record,
) -> DeadLetter {
    let mut letter = dead_letter(origin, sink, code, reason, 1);
    letter.key = record.key.as_deref().map(<[u8]>::to_vec);
    letter.payload = Some(crate::record::json::encode(&record.value));
    letter
}
