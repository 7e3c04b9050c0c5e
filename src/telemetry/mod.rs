//! Metric names and the per-node counters operators update.
//!
//! Operators never talk to the metrics registry: they bump plain array
//! slots in [`NodeStats`] (no locking, no label lookup per record) and the
//! runtime publishes the deltas of committed work. Names follow
//! `streamfold_<subsystem>_<name>_<unit>`; labels are limited to
//! `topology`, `node`, `store`, `partition` and words from short fixed
//! lists (a dead letter's `reason`, a fold close's `cause`, a rebalance's
//! `event`, a commit's `phase`, a query's `route` and `status`), so
//! cardinality stays bounded (never a record key as a label).
//!
//! Every counter exists from startup, at 0, for every label set it can
//! carry (`runtime::metrics::register_topology`): a dashboard tells "nothing
//! happened" from "not running".

pub mod logging;

use crate::record::ErrorClass;

/// Records a node received.
pub(crate) const NODE_RECORDS_IN: &str = "streamfold_node_records_in_total";
/// Records a node emitted.
pub(crate) const NODE_RECORDS_OUT: &str = "streamfold_node_records_out_total";
/// Records sent to the dead-letter topic, labelled with where they were
/// rejected (`node`: the source, node or sink, as in the letter's
/// `streamfold.dlq.node` header) and why (`reason`: a
/// [`DeadLetterReason`] code, as in its `streamfold.dlq.reason_code`
/// header).
pub(crate) const DEAD_LETTERS: &str = "streamfold_node_dead_letters_total";
/// Records the engine dropped on purpose (counted, never silent).
pub(crate) const NODE_DROPPED: &str = "streamfold_node_dropped_records_total";
/// Repartition records dropped because their upstream record was already
/// seen (re-delivered after an aborted transaction).
pub(crate) const REPARTITION_DUPLICATES: &str = "streamfold_node_repartition_duplicates_total";
/// Events that reached a fold (the denominator of the folding ratio).
pub(crate) const FOLD_ELIGIBLE: &str = "streamfold_fold_eligible_events_total";
/// Events merged into an already-open fold (the numerator).
pub(crate) const FOLD_FOLDED: &str = "streamfold_fold_folded_events_total";
/// Folding ratio `folded / eligible` since start, 0..1.
pub(crate) const FOLD_RATIO: &str = "streamfold_fold_folding_ratio";
/// Folds currently open.
pub(crate) const FOLD_OPEN: &str = "streamfold_fold_open_folds";
/// Folds closed, labelled `cause`: `quiet` (the key went quiet),
/// `max_wait` (the cap on a fold's age), `max_events`, or `max_bytes`
/// (closed early because the next event would have made the fold larger).
pub(crate) const FOLD_CLOSED: &str = "streamfold_fold_closed_total";
/// Records whose id a `dedup` node had already seen within its retention.
pub(crate) const DEDUP_DUPLICATES: &str = "streamfold_dedup_duplicates_total";
/// Records a `dedup` node let through again because they were re-deliveries
/// of the very record (same topic and offset) that was first seen.
pub(crate) const DEDUP_REDELIVERIES: &str = "streamfold_dedup_redeliveries_total";
/// Ids a `dedup` node forgot because their retention ended.
pub(crate) const DEDUP_EXPIRED: &str = "streamfold_dedup_expired_ids_total";
/// Updates an `ordered` node did not apply because they were not newer
/// than its state.
pub(crate) const ORDERED_STALE: &str = "streamfold_ordered_stale_updates_total";
/// Events a `projection` node ignored because their id was already applied.
pub(crate) const PROJECTION_DUPLICATES: &str = "streamfold_projection_duplicate_events_total";
/// Events that arrived after a later one and made a `projection` node
/// re-fold the entity.
pub(crate) const PROJECTION_REFOLDS: &str = "streamfold_projection_refolds_total";
/// Events whose name has no rule in a `projection` node.
pub(crate) const PROJECTION_UNKNOWN: &str = "streamfold_projection_unknown_events_total";
/// Counter events a `rollup` node ignored because an event with the same
/// idempotency token and time was already kept (a retried write).
pub(crate) const ROLLUP_DUPLICATES: &str = "streamfold_rollup_duplicate_events_total";
/// Counter events older than their counter's last rollup (outside the
/// accept limit).
pub(crate) const ROLLUP_LATE: &str = "streamfold_rollup_late_events_total";
/// Rollups performed (each emits a checkpoint).
pub(crate) const ROLLUP_ROLLUPS: &str = "streamfold_rollup_rollups_total";
/// Read triggers for counters the node has never seen.
pub(crate) const ROLLUP_UNKNOWN_READS: &str = "streamfold_rollup_unknown_counter_reads_total";
/// Counters waiting for a rollup (in circulation).
pub(crate) const ROLLUP_QUEUED: &str = "streamfold_rollup_queued_counters";
/// Records a `window` node refused because a window they belong to had
/// closed (later than the grace period).
pub(crate) const WINDOW_LATE: &str = "streamfold_window_late_records_total";
/// Windows a `window` node closed and emitted as final results.
pub(crate) const WINDOW_CLOSED: &str = "streamfold_window_closed_windows_total";
/// Windows (or sliding-window buckets) whose state a `window` node deleted
/// once their retention ended.
pub(crate) const WINDOW_EXPIRED: &str = "streamfold_window_expired_windows_total";
/// Sessions merged into another by a record filling the gap between them.
pub(crate) const WINDOW_SESSION_MERGES: &str = "streamfold_window_session_merges_total";
/// Records a `join` node found no partner for: dropped by an inner join,
/// or emitted with `null` for the other side.
pub(crate) const JOIN_UNMATCHED: &str = "streamfold_join_unmatched_records_total";
/// Stream records a `join` node refused because their join window had
/// closed (later than the grace period).
pub(crate) const JOIN_LATE: &str = "streamfold_join_late_records_total";
/// Stream records a `join` node deleted from its buffer once their join
/// window and grace period had passed.
pub(crate) const JOIN_EXPIRED: &str = "streamfold_join_expired_records_total";
/// Records a `filter` node did not keep.
pub(crate) const FILTER_REJECTED: &str = "streamfold_filter_rejected_records_total";
/// Records for which a `map` expression produced no value.
pub(crate) const MAP_EMPTY: &str = "streamfold_map_empty_results_total";
/// Records that matched no route of a `route` node (they leave on its
/// default output).
pub(crate) const ROUTE_UNMATCHED: &str = "streamfold_route_unmatched_records_total";

/// Declares a fieldless enum whose variants index array slots, with `ALL`
/// (every variant, in order), `COUNT` and the value each variant stands
/// for: the list is written once, so a new variant cannot be left out of
/// `ALL` and index past the end of an array.
macro_rules! slots {
    (
        $(#[$meta:meta])*
        pub(crate) enum $name:ident -> $value:ident {
            $($(#[$vmeta:meta])* $variant:ident => $text:expr,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(usize)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub(crate) const ALL: &'static [$name] = &[$($name::$variant,)+];
            pub(crate) const COUNT: usize = Self::ALL.len();

            pub(crate) fn $value(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }
    };
}

slots! {
    /// Something an operator counts, one slot per variant.
    pub(crate) enum NodeCounter -> metric {
        RecordsIn => NODE_RECORDS_IN,
        RecordsOut => NODE_RECORDS_OUT,
        Dropped => NODE_DROPPED,
        RepartitionDuplicates => REPARTITION_DUPLICATES,
        FoldEligible => FOLD_ELIGIBLE,
        FoldFolded => FOLD_FOLDED,
        FoldClosedQuiet => FOLD_CLOSED,
        FoldClosedMaxWait => FOLD_CLOSED,
        FoldClosedMaxEvents => FOLD_CLOSED,
        FoldClosedMaxBytes => FOLD_CLOSED,
        DedupDuplicates => DEDUP_DUPLICATES,
        DedupRedeliveries => DEDUP_REDELIVERIES,
        DedupExpired => DEDUP_EXPIRED,
        OrderedStale => ORDERED_STALE,
        ProjectionDuplicates => PROJECTION_DUPLICATES,
        ProjectionRefolds => PROJECTION_REFOLDS,
        ProjectionUnknown => PROJECTION_UNKNOWN,
        RollupDuplicates => ROLLUP_DUPLICATES,
        RollupLate => ROLLUP_LATE,
        RollupRollups => ROLLUP_ROLLUPS,
        RollupUnknownReads => ROLLUP_UNKNOWN_READS,
        WindowLate => WINDOW_LATE,
        WindowClosed => WINDOW_CLOSED,
        WindowExpired => WINDOW_EXPIRED,
        WindowSessionMerges => WINDOW_SESSION_MERGES,
        JoinUnmatched => JOIN_UNMATCHED,
        JoinLate => JOIN_LATE,
        JoinExpired => JOIN_EXPIRED,
        FilterRejected => FILTER_REJECTED,
        MapEmpty => MAP_EMPTY,
        RouteUnmatched => ROUTE_UNMATCHED,
    }
}

slots! {
    /// A level an operator tracks (up and down).
    pub(crate) enum NodeGauge -> metric {
        FoldsOpen => FOLD_OPEN,
        RollupQueued => ROLLUP_QUEUED,
    }
}

slots! {
    /// Why a record went to the dead-letter topic: a short, bounded code,
    /// written in the letter's `streamfold.dlq.reason_code` header and
    /// used as the `reason` label of [`DEAD_LETTERS`] (the free-text
    /// `streamfold.dlq.reason` header says more).
    pub(crate) enum DeadLetterReason -> code {
        /// A source could not decode the value's bytes (or a repartition
        /// record could not be read back).
        UndecodableValue => "undecodable_value",
        /// A source could not decode the key's bytes (Avro keys).
        UndecodableKey => "undecodable_key",
        /// A source record without a value (a tombstone).
        MissingValue => "missing_value",
        /// The source's `timestamp` field is missing or not a time.
        BadTimestamp => "bad_timestamp",
        /// A `key_by` field is missing or null.
        MissingKeyField => "missing_key_field",
        /// A node rejected the record (a missing field, a wrong type, an
        /// expression error, a duplicate or stale update when configured).
        Rejected => "rejected",
        /// A sink could not write the value (or key): it does not fit the
        /// sink's schema.
        Unencodable => "unencodable",
        /// The outside world (a schema registry) kept failing after the
        /// configured retries.
        ExternalFailure => "external_failure",
        /// Too large for its topic (`message.max.bytes`,
        /// `max.message.bytes`): a sink or repartition record, or a state
        /// value for its changelog.
        TooLarge => "record_too_large",
        /// The broker refused the record for good (a keyless record for a
        /// compacted topic, a timestamp outside the topic's limits): its
        /// transaction was redone without it.
        RefusedByBroker => "refused_by_broker",
    }
}

impl DeadLetterReason {
    /// The error class written beside it: [`ErrorClass::External`] for
    /// [`DeadLetterReason::ExternalFailure`], [`ErrorClass::Record`] (the
    /// record's fault) otherwise. Internal errors stop the task and are
    /// never dead-lettered.
    pub(crate) fn class(self) -> ErrorClass {
        match self {
            DeadLetterReason::ExternalFailure => ErrorClass::External,
            _ => ErrorClass::Record,
        }
    }
}

/// Counters and gauges of one source, node or sink in one task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    counters: [u64; NodeCounter::COUNT],
    dead_letters: [u64; DeadLetterReason::COUNT],
    gauges: [i64; NodeGauge::COUNT],
}

impl NodeStats {
    pub(crate) fn add(&mut self, counter: NodeCounter, n: u64) {
        self.counters[counter as usize] += n;
    }

    pub fn get(&self, counter: NodeCounter) -> u64 {
        self.counters[counter as usize]
    }

    /// Counts one record sent to the dead-letter topic.
    pub(crate) fn dead_letter(&mut self, reason: DeadLetterReason) {
        self.dead_letters[reason as usize] += 1;
    }

    pub fn dead_letters(&self, reason: DeadLetterReason) -> u64 {
        self.dead_letters[reason as usize]
    }

    /// Dead letters for every reason.
    pub fn dead_letters_total(&self) -> u64 {
        self.dead_letters.iter().sum()
    }

    pub(crate) fn gauge_add(&mut self, gauge: NodeGauge, delta: i64) {
        self.gauges[gauge as usize] += delta;
    }

    pub fn gauge(&self, gauge: NodeGauge) -> i64 {
        self.gauges[gauge as usize]
    }

    /// Every gauge, in [`NodeGauge`] order.
    pub(crate) fn gauges(&self) -> &[i64] {
        &self.gauges
    }

    /// Sets every gauge, in [`NodeGauge`] order (from saved values).
    pub(crate) fn set_gauges(&mut self, gauges: &[i64]) {
        self.gauges.copy_from_slice(gauges);
    }

    /// `folded / eligible`, the article's folding ratio, if anything was
    /// eligible.
    pub(crate) fn folding_ratio(&self) -> Option<f64> {
        let eligible = self.get(NodeCounter::FoldEligible);
        (eligible > 0).then(|| self.get(NodeCounter::FoldFolded) as f64 / eligible as f64)
    }
}

impl NodeCounter {
    /// The `cause` label of a counter that shares its metric with others
    /// ([`FOLD_CLOSED`]), the same word as the fold's `closed_by`.
    pub(crate) fn cause(self) -> Option<&'static str> {
        match self {
            NodeCounter::FoldClosedQuiet => Some("quiet"),
            NodeCounter::FoldClosedMaxWait => Some("max_wait"),
            NodeCounter::FoldClosedMaxEvents => Some("max_events"),
            NodeCounter::FoldClosedMaxBytes => Some("max_bytes"),
            _ => None,
        }
    }
}

/// The counter `counter` of `node` (a source, node or sink name).
pub(crate) fn node_counter(topology: &str, node: &str, counter: NodeCounter) -> ::metrics::Counter {
    let (topology, node) = (topology.to_string(), node.to_string());
    match counter.cause() {
        Some(cause) => {
            ::metrics::counter!(counter.metric(), "topology" => topology, "node" => node, "cause" => cause)
        }
        None => ::metrics::counter!(counter.metric(), "topology" => topology, "node" => node),
    }
}

/// The dead-letter counter of `node` (a source, node or sink name) for
/// `reason`.
pub(crate) fn dead_letter_counter(
    topology: &str,
    node: &str,
    reason: DeadLetterReason,
) -> ::metrics::Counter {
    ::metrics::counter!(DEAD_LETTERS, "topology" => topology.to_string(), "node" => node.to_string(), "reason" => reason.code())
}

/// Duration of each commit, from collecting the tasks' changelogs to their
/// state written to the stores: the sum of its [`CommitPhase`]s.
pub(crate) const COMMIT_DURATION: &str = "streamfold_commit_duration_seconds";
/// Duration of each step of a commit, labelled `phase`
/// ([`CommitPhase::label`]).
pub(crate) const COMMIT_PHASE_DURATION: &str = "streamfold_commit_phase_duration_seconds";

/// The steps of a commit whose durations are told apart
/// ([`COMMIT_PHASE_DURATION`], `docs/exactly-once.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitPhase {
    /// Every running task's pending changes collected and handed to the
    /// producer as changelog records.
    Changelog,
    /// Waiting until the broker acknowledged every record of the
    /// transaction.
    Flush,
    /// The input positions and changelog offsets sent: into the
    /// transaction, or (`at_least_once`) committed by the consumer.
    Offsets,
    /// The transaction's commit request (`exactly_once` only).
    Commit,
    /// The committed changes written to the tasks' stores.
    Apply,
}

impl CommitPhase {
    pub(crate) const ALL: &[CommitPhase] = &[
        CommitPhase::Changelog,
        CommitPhase::Flush,
        CommitPhase::Offsets,
        CommitPhase::Commit,
        CommitPhase::Apply,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            CommitPhase::Changelog => "changelog",
            CommitPhase::Flush => "flush",
            CommitPhase::Offsets => "offsets",
            CommitPhase::Commit => "commit",
            CommitPhase::Apply => "apply",
        }
    }
}

/// The commit path's series of one topology, looked up once: a commit
/// records into them without building labels.
pub(crate) struct CommitMetrics {
    pub(crate) committed: ::metrics::Counter,
    pub(crate) aborted: ::metrics::Counter,
    pub(crate) duration: ::metrics::Histogram,
    pub(crate) abort_duration: ::metrics::Histogram,
    /// In the order of [`CommitPhase::ALL`].
    phases: Vec<::metrics::Histogram>,
}

impl CommitMetrics {
    /// The series of `topology` (registering them, with an exporter
    /// installed).
    pub(crate) fn new(topology: &str) -> CommitMetrics {
        let app = || topology.to_string();
        CommitMetrics {
            committed: ::metrics::counter!(TRANSACTIONS_COMMITTED, "topology" => app()),
            aborted: ::metrics::counter!(TRANSACTIONS_ABORTED, "topology" => app()),
            duration: ::metrics::histogram!(COMMIT_DURATION, "topology" => app()),
            abort_duration: ::metrics::histogram!(ABORT_DURATION, "topology" => app()),
            phases: CommitPhase::ALL
                .iter()
                .map(|phase| ::metrics::histogram!(COMMIT_PHASE_DURATION, "topology" => app(), "phase" => phase.label()))
                .collect(),
        }
    }

    /// Records that `phase` took `took`.
    pub(crate) fn took(&self, phase: CommitPhase, took: std::time::Duration) {
        self.phases[phase as usize].record(took.as_secs_f64());
    }
}

/// Transactions committed (commits, under at_least_once).
pub(crate) const TRANSACTIONS_COMMITTED: &str = "streamfold_transactions_committed_total";
/// Transactions aborted.
pub(crate) const TRANSACTIONS_ABORTED: &str = "streamfold_transactions_aborted_total";
/// Duration of each abort (purge, drain, abort request).
pub(crate) const ABORT_DURATION: &str = "streamfold_transaction_abort_duration_seconds";
/// Changelog records applied while restoring state.
pub(crate) const RESTORE_RECORDS: &str = "streamfold_restore_records_restored_total";
/// Changelog records left to restore.
pub(crate) const RESTORE_REMAINING: &str = "streamfold_restore_records_remaining";
/// Consumer lag per input partition, from librdkafka statistics.
pub(crate) const CONSUMER_LAG: &str = "streamfold_consumer_lag_records";
/// Input records consumed.
pub(crate) const RECORDS_CONSUMED: &str = "streamfold_runtime_records_consumed_total";
/// Input records the consumer delivered again behind their task's
/// position (processed already), skipped.
pub(crate) const RECORDS_BEHIND: &str = "streamfold_runtime_records_behind_total";
/// Input records whose offsets were committed (with their outputs, under
/// exactly-once).
pub(crate) const RECORDS_COMMITTED: &str = "streamfold_runtime_records_committed_total";
/// Records streamfold did not produce because they are larger than their
/// topic accepts (`max.message.bytes`, or the producer's
/// `message.max.bytes`); each became a dead letter (a changelog record:
/// its key's state was dropped). By the sink, node or store.
pub(crate) const RECORDS_TOO_LARGE: &str = "streamfold_runtime_records_too_large_total";
/// Tasks currently running (restored and processing).
pub(crate) const TASKS_RUNNING: &str = "streamfold_runtime_tasks_running";
/// Tasks assigned to this instance and not running yet: restoring their
/// state, or waiting for their committed offsets.
pub(crate) const TASKS_RESTORING: &str = "streamfold_runtime_tasks_restoring";
/// Tasks opened on this instance (assigned to it).
pub(crate) const TASKS_CREATED: &str = "streamfold_runtime_tasks_created_total";
/// Tasks closed on this instance (revoked, lost, or at the end of a
/// membership).
pub(crate) const TASKS_CLOSED: &str = "streamfold_runtime_tasks_closed_total";
/// Rebalance callbacks, by `event`: `assigned`, `revoked`, `lost`.
pub(crate) const REBALANCES: &str = "streamfold_runtime_rebalances_total";
/// Seconds each rebalance callback took, by `event` (as [`REBALANCES`]):
/// opening the assigned tasks, or committing and closing the revoked ones
/// (the Java consumer's `partition-assigned-latency` and
/// `partition-revoked-latency`).
pub(crate) const REBALANCE_CALLBACK_DURATION: &str =
    "streamfold_runtime_rebalance_callback_duration_seconds";
/// Seconds from the start of this instance's part in a rebalance (its
/// subscription, or a revocation) to the assignment that ends it.
pub(crate) const REBALANCE_DURATION: &str = "streamfold_runtime_rebalance_duration_seconds";
/// The events [`REBALANCES`] counts.
pub(crate) const REBALANCE_EVENTS: [&str; 3] = ["assigned", "revoked", "lost"];
/// Seconds from handing a polled batch's records to their tasks until
/// every output of theirs is with the producer (decode, process, encode;
/// a process latency, per batch).
pub(crate) const BATCH_DURATION: &str = "streamfold_runtime_batch_duration_seconds";
/// Seconds each poll for a batch took, from the consumer's queue and the
/// tasks' own: the wait for records when none had come included (Kafka
/// Streams' `poll-latency`).
pub(crate) const POLL_DURATION: &str = "streamfold_runtime_poll_duration_seconds";
/// Seconds a round of due timers took, from firing to their outputs with
/// the producer.
pub(crate) const PUNCTUATE_DURATION: &str = "streamfold_runtime_punctuate_duration_seconds";
/// Seconds from a sink record's timestamp to its hand-over to the
/// producer, by sink (`node`): Kafka Streams' `record-e2e-latency` at a
/// terminal node (KIP-613). The timestamp is the one the record is written
/// with: its input's, or the one the operator that emitted it gave it (a
/// fold's output is stamped when it closed).
pub(crate) const SINK_E2E_LATENCY: &str = "streamfold_sink_record_e2e_latency_seconds";

/// Input records a task processed (each time: a record processed again
/// after an abort counts again), by `partition`: Kafka Streams'
/// task-level `process-total`, whose rate is its `process-rate`.
pub(crate) const TASK_RECORDS_PROCESSED: &str = "streamfold_task_records_processed_total";
/// Seconds a task took to process its share of a polled batch (decode and
/// process, on its processing thread), by `partition`.
pub(crate) const TASK_PROCESS_DURATION: &str = "streamfold_task_process_duration_seconds";

/// The per-task processing series of one task, looked up once.
pub(crate) struct TaskMetrics {
    pub(crate) processed: ::metrics::Counter,
    pub(crate) duration: ::metrics::Histogram,
}

impl TaskMetrics {
    /// The series of task `partition` of `topology` (registering them,
    /// with an exporter installed).
    pub(crate) fn new(topology: &str, partition: i32) -> TaskMetrics {
        TaskMetrics {
            processed: ::metrics::counter!(TASK_RECORDS_PROCESSED, "topology" => topology.to_string(), "partition" => partition.to_string()),
            duration: ::metrics::histogram!(TASK_PROCESS_DURATION, "topology" => topology.to_string(), "partition" => partition.to_string()),
        }
    }

    /// Records that the task processed `records` of a batch in `took`.
    pub(crate) fn processed(&self, records: usize, took: std::time::Duration) {
        self.processed.increment(records as u64);
        self.duration.record(took.as_secs_f64());
    }
}

/// The end-to-end latency histogram of sink `sink`.
pub(crate) fn sink_latency(topology: &str, sink: &str) -> ::metrics::Histogram {
    ::metrics::histogram!(SINK_E2E_LATENCY, "topology" => topology.to_string(), "node" => sink.to_string())
}

/// Requests the query server answered, by `route` (`stores`, `instances`,
/// `scan`, `lookup`, `metadata`, `other`) and `status`, forwarded ones
/// included.
pub(crate) const QUERY_REQUESTS: &str = "streamfold_query_requests_total";
/// Seconds the query server took to answer, by `route`.
pub(crate) const QUERY_DURATION: &str = "streamfold_query_request_duration_seconds";

/// 1, labelled with the version of the running binary.
pub(crate) const BUILD_INFO: &str = "streamfold_build_info";
/// Bytes in the RocksDB block cache every task of the instance shares
/// (bounded by `state.block_cache`).
pub(crate) const STATE_BLOCK_CACHE: &str = "streamfold_state_block_cache_bytes";
/// Bytes of every RocksDB memtable of the instance (kept near
/// `state.write_buffers` by flushing).
pub(crate) const STATE_WRITE_BUFFERS: &str = "streamfold_state_write_buffer_bytes";
/// The estimated bytes of decoded entries in the stores' record caches
/// after their last commits (bounded by `state.record_cache`).
pub(crate) const STATE_RECORD_CACHE: &str = "streamfold_state_record_cache_bytes";
/// Bytes of a store's RocksDB memtables, by `store` and `partition`.
pub(crate) const STATE_MEMTABLE: &str = "streamfold_state_memtable_bytes";
/// Bytes of a store's live SST files.
pub(crate) const STATE_SST: &str = "streamfold_state_sst_bytes";
/// Bytes RocksDB estimates compaction has to rewrite for a store.
pub(crate) const STATE_PENDING_COMPACTION: &str = "streamfold_state_pending_compaction_bytes";
/// RocksDB's estimate of the keys a store holds.
pub(crate) const STATE_ESTIMATED_KEYS: &str = "streamfold_state_estimated_keys";
/// Block cache lookups of a task's database that found their block, by
/// `partition`.
pub(crate) const STATE_CACHE_HITS: &str = "streamfold_state_block_cache_hits_total";
/// Block cache lookups of a task's database that had to read the block.
pub(crate) const STATE_CACHE_MISSES: &str = "streamfold_state_block_cache_misses_total";
/// Source topics `run` is waiting for at startup (0 once they all exist).
pub(crate) const MISSING_SOURCE_TOPICS: &str = "streamfold_runtime_missing_source_topics";
/// Records of a global table's topic read by this instance, by `table`
/// (those it skipped included): at startup up to the topic's end, then as
/// they come.
pub(crate) const GLOBAL_TABLE_RECORDS: &str = "streamfold_global_table_records_total";
/// Records of a global table's topic it could not hold (no key, a key or
/// value its codec refuses), by `table` and `reason` (a dead-letter
/// reason code): skipped and logged, not dead-lettered, as every instance
/// reads them.
pub(crate) const GLOBAL_TABLE_SKIPPED: &str = "streamfold_global_table_skipped_records_total";

#[cfg(test)]
mod tests {
    use super::*;

    /// Each phase's time lands in its own series.
    #[test]
    fn a_commit_phase_is_recorded_under_its_own_label() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, || {
            let commits = CommitMetrics::new("shop");
            for (i, phase) in CommitPhase::ALL.iter().enumerate() {
                commits.took(*phase, std::time::Duration::from_secs(i as u64 + 1));
            }
        });
        let rendered = handle.render();
        for (i, phase) in CommitPhase::ALL.iter().enumerate() {
            let sum = format!(
                "{COMMIT_PHASE_DURATION}_sum{{topology=\"shop\",phase=\"{}\"}} {}",
                phase.label(),
                i + 1
            );
            assert!(rendered.contains(&sum), "{sum} in {rendered}");
        }
    }
}
