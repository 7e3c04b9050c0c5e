//! What the runtime writes next to state: the stamps on changelog records
//! and the metadata a task's store keeps beside its data.
//!
//! A restore reads changelogs under read_committed, so it sees only the
//! records of committed transactions (Apache Kafka hides the others, and
//! compacts below the last stable offset only) and applies every one. The
//! store keeps, with its data, the changelog offset it reached, so a
//! restart replays only the tail.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Header `<run id>:<sequence>` naming the transaction of a record, on
/// every record of a run with the testing aid `streamfold run
/// --txn-header`.
pub(crate) const TXN_HEADER: &str = "streamfold.txn";
/// Header on every changelog record: the task's event time (epoch
/// milliseconds) when the record was produced, so a task restored on
/// another host resumes its event clock (and `idle_advance`) from the
/// changelog, not only from local metadata.
pub(crate) const EVENT_TIME_HEADER: &str = "streamfold.event_time";
/// Meta key of the changelog offsets in a task's state store.
pub(crate) const CHANGELOG_OFFSETS: &str = "changelog_offsets";
/// Meta key of the task's event time at its last commit.
pub(crate) const EVENT_TIME: &str = "event_time";
/// Meta key of the nodes' gauges at the task's last commit
/// ([`crate::task::Task::gauges_meta`]); emptied when a restore replays
/// records, so the next start counts the stores instead.
pub(crate) const GAUGES: &str = "gauges";

/// Next changelog offset per changelog topic, as stored with a task's
/// state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChangelogOffsets(pub BTreeMap<String, i64>);

impl ChangelogOffsets {
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<ChangelogOffsets> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changelog_offsets_round_trip() {
        let offsets = ChangelogOffsets([("a-changelog".to_string(), 42)].into());
        assert_eq!(ChangelogOffsets::decode(&offsets.encode()), Some(offsets));
    }
}
