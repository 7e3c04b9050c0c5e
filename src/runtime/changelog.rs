//! What the runtime writes next to state: the stamps on changelog records
//! that let a restore tell committed records from those of transactions
//! that did not commit, and changelog offsets in the state store.
//!
//! On Apache Kafka a read_committed restore never sees an aborted record.
//! On a broker that shows them (nisshi 0.7.0, DESIGN §9) the restore must
//! decide for itself, and it may skip a record only when that record is
//! *proven* not to have committed. Two rules prove it.
//!
//! **The writer chain.** Every changelog record carries its transaction
//! (`streamfold.txn`), and a transaction's first record in each changelog
//! partition carries, in `streamfold.base`, where the last committed
//! writer of each changelog partition of its task ended (the offset after
//! that writer's last record) when the transaction produced it. A task's
//! transactions run one after another, and a transaction's changelog
//! records all go out at its commit, so every record at or beyond `base`
//! that precedes the transaction's own records belongs to a transaction
//! that began after the last commit and ended before this one: one that
//! did not commit. Every record before `base` was decided the same way by
//! the transactions before. The chain covers every transaction but the
//! last writer of each partition, for which the group's committed offsets
//! speak: each commit also commits, for every changelog partition of the
//! task, the offset after its last committed writer's records (the
//! consumer group holds an offset for the changelog partition it never
//! consumes). A restore therefore holds back the records of the newest
//! transaction of each partition until a later record's `base`, or the
//! committed changelog offset at the end, decides them. Where the group
//! has no offsets (deleted, or expired), a base another store's record
//! names still proves everything before it committed: a transaction
//! knows what had committed when it began, whether or not it committed
//! itself.
//!
//! **The position rule**, for what the chain cannot decide (records
//! written before it existed, a group whose offsets expired): each record
//! also carries, in `streamfold.pos`, the task's input positions (next
//! offset to read, per input partition) when it was produced. A committed
//! transaction's records carry positions no further than the offsets it
//! committed; a transaction that did not commit leaves the committed
//! offsets where they were, so once it has consumed input its records
//! carry a position beyond them. An older transaction that did not commit
//! can carry positions below the committed offsets (its retry committed
//! further), which is why the chain comes first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Header with the task's input positions on every changelog record.
pub(crate) const POSITION_HEADER: &str = "streamfold.pos";
/// Header `<run id>:<sequence>` naming the transaction of a record: on
/// every changelog record, and on every record of a run with the testing
/// aid `streamfold run --txn-header`.
pub(crate) const TXN_HEADER: &str = "streamfold.txn";
/// Header on the first changelog record of a transaction in each changelog
/// partition: per changelog topic of the task, the offset after the last
/// record of the last committed transaction that wrote it (the writer
/// chain above), as a [`ChangelogOffsets`] map.
pub(crate) const BASE_HEADER: &str = "streamfold.base";
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

/// An input partition: topic and partition.
pub(crate) type InputPartition = (String, i32);

/// Next offset to read per input partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Positions(pub BTreeMap<InputPartition, i64>);

#[derive(Serialize, Deserialize)]
struct Entry(String, i32, i64);

impl Positions {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let entries: Vec<Entry> = self
            .0
            .iter()
            .map(|((t, p), o)| Entry(t.clone(), *p, *o))
            .collect();
        serde_json::to_vec(&entries).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Positions> {
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
    pub(crate) fn verdict(&self, committed: &Positions, inputs: &[String]) -> Verdict {
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
pub(crate) enum Verdict {
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
