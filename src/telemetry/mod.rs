//! Metric names and the per-node counters operators update.
//!
//! Operators never talk to the metrics registry: they bump plain array
//! slots in [`NodeStats`] (no locking, no label lookup per record) and the
//! runtime publishes the deltas once per commit. Names follow
//! `streamfold_<subsystem>_<name>_<unit>`; labels are limited to
//! `topology`, `node`, `store` and `partition`, so cardinality stays
//! bounded (never a record key as a label).

pub mod logging;
pub mod metrics;

/// Records a node received.
pub const NODE_RECORDS_IN: &str = "streamfold_node_records_in_total";
/// Records a node emitted.
pub const NODE_RECORDS_OUT: &str = "streamfold_node_records_out_total";
/// Records sent to the dead-letter topic, by the node that rejected them.
pub const DEAD_LETTERS: &str = "streamfold_node_dead_letters_total";
/// Records the engine dropped on purpose (counted, never silent).
pub const NODE_DROPPED: &str = "streamfold_node_dropped_records_total";
/// Repartition records dropped because their upstream record was already
/// seen (re-delivered after an aborted transaction).
pub const REPARTITION_DUPLICATES: &str = "streamfold_node_repartition_duplicates_total";
/// Events that reached a fold (the denominator of the folding ratio).
pub const FOLD_ELIGIBLE: &str = "streamfold_fold_eligible_events_total";
/// Events merged into an already-open fold (the numerator).
pub const FOLD_FOLDED: &str = "streamfold_fold_folded_events_total";
/// Folding ratio `folded / eligible` since start, 0..1.
pub const FOLD_RATIO: &str = "streamfold_fold_folding_ratio";
/// Folds currently open.
pub const FOLD_OPEN: &str = "streamfold_fold_open_folds";
/// Folds closed because the key went quiet.
pub const FOLD_CLOSED_QUIET: &str = "streamfold_fold_closed_quiet_total";
/// Folds closed by the `max_wait` cap.
pub const FOLD_CLOSED_MAX_WAIT: &str = "streamfold_fold_closed_max_wait_total";
/// Folds closed by `max_events`.
pub const FOLD_CLOSED_MAX_EVENTS: &str = "streamfold_fold_closed_max_events_total";
/// Folds closed early because the next event would have made them larger
/// than `max_bytes`.
pub const FOLD_CLOSED_MAX_BYTES: &str = "streamfold_fold_closed_max_bytes_total";
/// Records whose id a `dedup` node had already seen within its retention.
pub const DEDUP_DUPLICATES: &str = "streamfold_dedup_duplicates_total";
/// Records a `dedup` node let through again because they were re-deliveries
/// of the very record (same topic and offset) that was first seen.
pub const DEDUP_REDELIVERIES: &str = "streamfold_dedup_redeliveries_total";
/// Ids a `dedup` node forgot because their retention ended.
pub const DEDUP_EXPIRED: &str = "streamfold_dedup_expired_ids_total";
/// Updates an `ordered` node did not apply because they were not newer
/// than its state.
pub const ORDERED_STALE: &str = "streamfold_ordered_stale_updates_total";
/// Events a `projection` node ignored because their id was already applied.
pub const PROJECTION_DUPLICATES: &str = "streamfold_projection_duplicate_events_total";
/// Events that arrived after a later one and made a `projection` node
/// re-fold the entity.
pub const PROJECTION_REFOLDS: &str = "streamfold_projection_refolds_total";
/// Events whose name has no rule in a `projection` node.
pub const PROJECTION_UNKNOWN: &str = "streamfold_projection_unknown_events_total";
/// Counter events a `rollup` node ignored because an event with the same
/// idempotency token and time was already kept (a retried write).
pub const ROLLUP_DUPLICATES: &str = "streamfold_rollup_duplicate_events_total";
/// Counter events older than their counter's last rollup (outside the
/// accept limit).
pub const ROLLUP_LATE: &str = "streamfold_rollup_late_events_total";
/// Rollups performed (each emits a checkpoint).
pub const ROLLUP_ROLLUPS: &str = "streamfold_rollup_rollups_total";
/// Read triggers for counters the node has never seen.
pub const ROLLUP_UNKNOWN_READS: &str = "streamfold_rollup_unknown_counter_reads_total";
/// Counters waiting for a rollup (in circulation).
pub const ROLLUP_QUEUED: &str = "streamfold_rollup_queued_counters";
/// Records a `filter` node did not keep.
pub const FILTER_REJECTED: &str = "streamfold_filter_rejected_records_total";
/// Records for which a `map` expression produced no value.
pub const MAP_EMPTY: &str = "streamfold_map_empty_results_total";
/// Records that matched no route of a `route` node (they leave on its
/// default output).
pub const ROUTE_UNMATCHED: &str = "streamfold_route_unmatched_records_total";

/// Something an operator counts, one slot per variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum NodeCounter {
    RecordsIn,
    RecordsOut,
    DeadLetters,
    Dropped,
    RepartitionDuplicates,
    FoldEligible,
    FoldFolded,
    FoldClosedQuiet,
    FoldClosedMaxWait,
    FoldClosedMaxEvents,
    FoldClosedMaxBytes,
    DedupDuplicates,
    DedupRedeliveries,
    DedupExpired,
    OrderedStale,
    ProjectionDuplicates,
    ProjectionRefolds,
    ProjectionUnknown,
    RollupDuplicates,
    RollupLate,
    RollupRollups,
    RollupUnknownReads,
    FilterRejected,
    MapEmpty,
    RouteUnmatched,
}

impl NodeCounter {
    pub const ALL: [NodeCounter; 25] = [
        NodeCounter::RecordsIn,
        NodeCounter::RecordsOut,
        NodeCounter::DeadLetters,
        NodeCounter::Dropped,
        NodeCounter::RepartitionDuplicates,
        NodeCounter::FoldEligible,
        NodeCounter::FoldFolded,
        NodeCounter::FoldClosedQuiet,
        NodeCounter::FoldClosedMaxWait,
        NodeCounter::FoldClosedMaxEvents,
        NodeCounter::FoldClosedMaxBytes,
        NodeCounter::DedupDuplicates,
        NodeCounter::DedupRedeliveries,
        NodeCounter::DedupExpired,
        NodeCounter::OrderedStale,
        NodeCounter::ProjectionDuplicates,
        NodeCounter::ProjectionRefolds,
        NodeCounter::ProjectionUnknown,
        NodeCounter::RollupDuplicates,
        NodeCounter::RollupLate,
        NodeCounter::RollupRollups,
        NodeCounter::RollupUnknownReads,
        NodeCounter::FilterRejected,
        NodeCounter::MapEmpty,
        NodeCounter::RouteUnmatched,
    ];

    pub fn metric(self) -> &'static str {
        match self {
            NodeCounter::RecordsIn => NODE_RECORDS_IN,
            NodeCounter::RecordsOut => NODE_RECORDS_OUT,
            NodeCounter::DeadLetters => DEAD_LETTERS,
            NodeCounter::Dropped => NODE_DROPPED,
            NodeCounter::RepartitionDuplicates => REPARTITION_DUPLICATES,
            NodeCounter::FoldEligible => FOLD_ELIGIBLE,
            NodeCounter::FoldFolded => FOLD_FOLDED,
            NodeCounter::FoldClosedQuiet => FOLD_CLOSED_QUIET,
            NodeCounter::FoldClosedMaxWait => FOLD_CLOSED_MAX_WAIT,
            NodeCounter::FoldClosedMaxEvents => FOLD_CLOSED_MAX_EVENTS,
            NodeCounter::FoldClosedMaxBytes => FOLD_CLOSED_MAX_BYTES,
            NodeCounter::DedupDuplicates => DEDUP_DUPLICATES,
            NodeCounter::DedupRedeliveries => DEDUP_REDELIVERIES,
            NodeCounter::DedupExpired => DEDUP_EXPIRED,
            NodeCounter::OrderedStale => ORDERED_STALE,
            NodeCounter::ProjectionDuplicates => PROJECTION_DUPLICATES,
            NodeCounter::ProjectionRefolds => PROJECTION_REFOLDS,
            NodeCounter::ProjectionUnknown => PROJECTION_UNKNOWN,
            NodeCounter::RollupDuplicates => ROLLUP_DUPLICATES,
            NodeCounter::RollupLate => ROLLUP_LATE,
            NodeCounter::RollupRollups => ROLLUP_ROLLUPS,
            NodeCounter::RollupUnknownReads => ROLLUP_UNKNOWN_READS,
            NodeCounter::FilterRejected => FILTER_REJECTED,
            NodeCounter::MapEmpty => MAP_EMPTY,
            NodeCounter::RouteUnmatched => ROUTE_UNMATCHED,
        }
    }
}

/// A level an operator tracks (up and down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum NodeGauge {
    FoldsOpen,
    RollupQueued,
}

impl NodeGauge {
    pub const ALL: [NodeGauge; 2] = [NodeGauge::FoldsOpen, NodeGauge::RollupQueued];

    pub fn metric(self) -> &'static str {
        match self {
            NodeGauge::FoldsOpen => FOLD_OPEN,
            NodeGauge::RollupQueued => ROLLUP_QUEUED,
        }
    }
}

/// Counters and gauges of one node in one task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    counters: [u64; NodeCounter::ALL.len()],
    gauges: [i64; NodeGauge::ALL.len()],
}

impl NodeStats {
    pub fn add(&mut self, counter: NodeCounter, n: u64) {
        self.counters[counter as usize] += n;
    }

    pub fn get(&self, counter: NodeCounter) -> u64 {
        self.counters[counter as usize]
    }

    pub fn gauge_add(&mut self, gauge: NodeGauge, delta: i64) {
        self.gauges[gauge as usize] += delta;
    }

    pub fn gauge(&self, gauge: NodeGauge) -> i64 {
        self.gauges[gauge as usize]
    }

    /// Adds `other` into `self` (summing tasks of one node).
    pub fn merge(&mut self, other: &NodeStats) {
        for (a, b) in self.counters.iter_mut().zip(other.counters) {
            *a += b;
        }
        for (a, b) in self.gauges.iter_mut().zip(other.gauges) {
            *a += b;
        }
    }

    /// `folded / eligible`, the article's folding ratio, if anything was
    /// eligible.
    pub fn folding_ratio(&self) -> Option<f64> {
        let eligible = self.get(NodeCounter::FoldEligible);
        (eligible > 0).then(|| self.get(NodeCounter::FoldFolded) as f64 / eligible as f64)
    }
}

/// Duration of each commit (changelogs, offsets, transaction commit).
pub const COMMIT_DURATION: &str = "streamfold_commit_duration_seconds";
/// Transactions committed (commits, under at_least_once).
pub const TRANSACTIONS_COMMITTED: &str = "streamfold_transactions_committed_total";
/// Transactions aborted.
pub const TRANSACTIONS_ABORTED: &str = "streamfold_transactions_aborted_total";
/// Duration of each abort (purge, drain, abort request).
pub const ABORT_DURATION: &str = "streamfold_transaction_abort_duration_seconds";
/// Changelog records applied while restoring state.
pub const RESTORE_RECORDS: &str = "streamfold_restore_records_restored_total";
/// Changelog records skipped while restoring (written by transactions that
/// did not commit).
pub const RESTORE_SKIPPED: &str = "streamfold_restore_records_skipped_total";
/// Changelog records left to restore.
/// Changelog records applied during restore although the position rule
/// could not verify their transaction (an input without committed offset).
pub const RESTORE_UNVERIFIED: &str = "streamfold_restore_records_unverified_total";
pub const RESTORE_REMAINING: &str = "streamfold_restore_records_remaining";
/// Consumer lag per input partition, from librdkafka statistics.
pub const CONSUMER_LAG: &str = "streamfold_consumer_lag_records";
/// Input records consumed.
pub const RECORDS_CONSUMED: &str = "streamfold_runtime_records_consumed_total";
/// Input records whose offsets were committed (with their outputs, under
/// exactly-once).
pub const RECORDS_COMMITTED: &str = "streamfold_runtime_records_committed_total";
/// Records streamfold did not produce because they are larger than their
/// topic accepts (`max.message.bytes`, or the producer's
/// `message.max.bytes`); each became a dead letter (a changelog record:
/// its key's state was dropped). By the sink, node or store.
pub const RECORDS_TOO_LARGE: &str = "streamfold_runtime_records_too_large_total";
/// Tasks currently running (restored and processing).
pub const TASKS_RUNNING: &str = "streamfold_runtime_tasks_running";
/// Source topics `run` is waiting for at startup (0 once they all exist).
pub const MISSING_SOURCE_TOPICS: &str = "streamfold_runtime_missing_source_topics";
