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
/// Header on every changelog record: the task's event time (epoch
/// milliseconds) when the record was produced, so a task restored on
/// another host resumes its event clock (and `idle_advance`) from the
/// changelog, not only from local metadata.
pub const EVENT_TIME_HEADER: &str = "streamfold.event_time";
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

    /// What the group's committed offsets say of a record stamped with
    /// `self`, for a task whose current inputs are `inputs` (topics).
    ///
    /// Our committed offsets only move forward, so a transaction that
    /// committed left every input it consumed at or beyond its stamp:
    ///
    /// - a stamp beyond a committed offset proves the transaction did not
    ///   commit;
    /// - a stamp naming a current input that has no committed offset means
    ///   no transaction that consumed it ever committed (a crash before the
    ///   first commit) — or that the group's offsets expired
    ///   (`offsets.retention.minutes`), which offsets alone cannot tell
    ///   apart; both are counted apart from other skips so a restore can
    ///   warn about the second;
    /// - a stamp naming a topic that is no longer an input (a `key_by` or a
    ///   source removed from the topology) proves nothing about that topic:
    ///   the record is applied, and counted, rather than dropped.
    pub fn verdict(&self, committed: &Positions, inputs: &[String]) -> Verdict {
        let mut verdict = Verdict::Committed;
        for (partition, position) in &self.0 {
            match committed.0.get(partition) {
                Some(c) if position > c => return Verdict::Uncommitted,
                Some(_) => {}
                None if inputs.contains(&partition.0) => verdict = Verdict::NeverCommitted,
                None => {
                    if verdict == Verdict::Committed {
                        verdict = Verdict::Unknown;
                    }
                }
            }
        }
        verdict
    }
}

/// Whether a changelog record's transaction committed, by the position
/// rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every input it consumed is committed at or beyond its stamp.
    Committed,
    /// An input's committed offset is below its stamp: it did not commit.
    Uncommitted,
    /// A current input it consumed has no committed offset.
    NeverCommitted,
    /// It names a topic that is no longer an input: cannot be decided.
    Unknown,
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
    fn the_position_rule_skips_only_what_is_proven_uncommitted() {
        let inputs = ["posts".to_string(), "rep".to_string()];
        let committed = positions(&[("posts", 0, 100), ("rep", 0, 10)]);
        let verdict = |p: &[(&str, i32, i64)]| positions(p).verdict(&committed, &inputs);
        // Produced by a transaction that committed these offsets or earlier.
        assert_eq!(
            verdict(&[("posts", 0, 100), ("rep", 0, 10)]),
            Verdict::Committed
        );
        assert_eq!(verdict(&[("posts", 0, 90)]), Verdict::Committed);
        // Produced after consuming input the group never committed.
        assert_eq!(
            verdict(&[("posts", 0, 101), ("rep", 0, 10)]),
            Verdict::Uncommitted
        );
        assert_eq!(
            verdict(&[("posts", 0, 101), ("gone", 0, 5)]),
            Verdict::Uncommitted
        );
        assert_eq!(verdict(&[("posts", 1, 1)]), Verdict::NeverCommitted);
        // A topic that left the topology (a removed `key_by`) proves
        // nothing.
        assert_eq!(verdict(&[("gone", 0, 1)]), Verdict::Unknown);
        assert_eq!(
            verdict(&[("posts", 0, 50), ("gone", 0, 1)]),
            Verdict::Unknown
        );
        assert_eq!(
            verdict(&[("posts", 1, 1), ("gone", 0, 1)]),
            Verdict::NeverCommitted
        );
        // A transaction that consumed nothing cannot be told apart.
        assert_eq!(verdict(&[]), Verdict::Committed);
    }
}
