//! Kafka messages ↔ records: what the processing loop reads from a
//! message before a task sees it: its origin and its timestamp
//! ([`crate::runtime::fetch`] reads its headers). Source records are then
//! decoded by the topology's codecs ([`crate::formats::Codecs::decode_record`],
//! shared with the offline driver); records of streamfold's own
//! repartition topics by [`crate::task::repartition`].

use super::fetch::Fetched;

use crate::record::{Origin, Timestamp};

/// Where `message` came from, with its bytes as read. `topic` is the
/// message's topic as the input names it: the same name, without asking
/// librdkafka, whose answer is a C string measured and checked as UTF-8 at
/// every call.
pub(crate) fn origin<'a>(
    message: &'a Fetched<'_>,
    topic: &'a str,
    headers: &'a [(String, Vec<u8>)],
) -> Origin<'a> {
    Origin {
        topic,
        partition: message.partition(),
        offset: message.offset(),
        key: message.key(),
        payload: message.payload(),
        headers,
    }
}

/// The message's timestamp, or `now` when it has none.
pub(crate) fn timestamp(message: &Fetched<'_>, now: Timestamp) -> Timestamp {
    message.timestamp().to_millis().unwrap_or(now)
}
