//! What the runtime writes next to state: input positions on changelog
//! records, and changelog offsets in the state store.
//!
//! **The position rule** (DESIGN §9). Each changelog record carries, in the
//! header `streamfold.pos`, the task's input position (next offset to read,
//! per input partition) when the record was produced. A committed
//! transaction's records carry positions no further than the offsets it
//! committed; a transaction that did not commit leaves the committed offsets
//! where they were, so once it has consumed input its records carry a
//! position beyond them. Restore skips records whose position is beyond the
//! committed offsets, which keeps state right even on a broker that delivers
//! aborted records to read_committed consumers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Header with the task's input positions on every changelog record.
pub const POSITION_HEADER: &str = "streamfold.pos";
/// Optional header `<run id>:<sequence>` naming the transaction of every
/// produced record (a testing aid: `streamfold run --txn-header`).
pub const TXN_HEADER: &str = "streamfold.txn";
/// Meta key of the changelog offsets in a task's state store.
pub const CHANGELOG_OFFSETS: &str = "changelog_offsets";
/// Meta key of the task's event time at its last commit.
pub const EVENT_TIME: &str = "event_time";

/// An input partition: topic and partition.
pub type InputPartition = (String, i32);

/// Next offset to read per input partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Positions(pub BTreeMap<InputPartition, i64>);

#[derive(Serialize, Deserialize)]
struct Entry(String, i32, i64);

impl Positions {
    pub fn encode(&self) -> Vec<u8> {
        let entries: Vec<Entry> = self
            .0
            .iter()
            .map(|((t, p), o)| Entry(t.clone(), *p, *o))
            .collect();
        serde_json::to_vec(&entries).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Option<Positions> {
        let entries: Vec<Entry> = serde_json::from_slice(bytes).ok()?;
        Some(Positions(
            entries
                .into_iter()
                .map(|Entry(t, p, o)| ((t, p), o))
                .collect(),
        ))
    }

    /// Whether a record stamped with `self` belongs to a transaction that
    /// committed, given the group's committed offsets. A partition with no
    /// committed offset means no transaction that consumed it committed.
    pub fn committed_under(&self, committed: &Positions) -> bool {
        self.0
            .iter()
            .all(|(partition, position)| committed.0.get(partition).is_some_and(|c| position <= c))
    }
}

/// Next changelog offset to restore from, per changelog topic (the
/// partition is the task's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogOffsets(pub BTreeMap<String, i64>);

impl ChangelogOffsets {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Option<ChangelogOffsets> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(entries: &[(&str, i32, i64)]) -> Positions {
        Positions(
            entries
                .iter()
                .map(|(t, p, o)| ((t.to_string(), *p), *o))
                .collect(),
        )
    }

    #[test]
    fn positions_round_trip() {
        let p = positions(&[("posts", 3, 120), ("app-fold-repartition", 3, 7)]);
        assert_eq!(Positions::decode(&p.encode()), Some(p));
        assert_eq!(Positions::decode(b"not json"), None);
    }

    #[test]
    fn the_position_rule_keeps_committed_records_and_skips_the_rest() {
        let committed = positions(&[("posts", 0, 100), ("rep", 0, 10)]);
        // Produced by a transaction that committed these offsets or earlier.
        assert!(positions(&[("posts", 0, 100), ("rep", 0, 10)]).committed_under(&committed));
        assert!(positions(&[("posts", 0, 90)]).committed_under(&committed));
        // Produced after consuming input the group never committed.
        assert!(!positions(&[("posts", 0, 101), ("rep", 0, 10)]).committed_under(&committed));
        assert!(!positions(&[("other", 0, 1)]).committed_under(&committed));
        // A transaction that consumed nothing cannot be told apart.
        assert!(positions(&[]).committed_under(&committed));
    }
}
