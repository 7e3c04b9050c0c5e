//! A task: the topology running over one partition number.
//!
//! The task owns the operators, their state and timers, and pushes each
//! record depth-first through the graph. It knows nothing of Kafka: the
//! caller feeds it decoded records with their [`Origin`] and collects
//! [`Output`]s (sink records, records to repartition, dead letters). The
//! Kafka runtime and the offline test driver both drive tasks, so an
//! operator behaves the same in `streamfold test` and in production.
//!
//! Below it sit the partitioner ([`partitioner`], Kafka's murmur2, for
//! `key_by` and queries) and record size limits with the dead-letter cut
//! ([`limits`]), which both drivers apply.

pub(crate) mod limits;
pub(crate) mod partitioner;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use smallvec::SmallVec;

use serde::{Deserialize, Serialize};

use self::partitioner::partition_for;
use crate::config::types::JsonPointer;
use crate::formats::{CodecError, Codecs};
use crate::operators::{Clocks, Context, Emit, OpError, Operator};
use crate::record::json::{self, parse_timestamp};
use crate::record::{ErrorClass, Origin, Record, Timestamp};
use crate::state::timers::{Clock, TimerState};
use crate::state::{JsonState, StateBackend, StateError, StateSet, StoreHandle};
use crate::telemetry::{DeadLetterReason, NodeCounter, NodeGauge, NodeStats};
use crate::topology::{Target, Topology};

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
    /// length ([`super::limits::TRUNCATED_HEADER`]).
    pub(crate) const TRUNCATED: &str = super::limits::TRUNCATED_HEADER;
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

/// Timers read from a store at a time.
const TIMER_BATCH: usize = 1024;

/// Timers fired per record (event clock): leftovers fire with later
/// records or at the next punctuation.
const TIMERS_PER_RECORD: usize = TIMER_BATCH;

/// Timers a task fires per transaction, by records and punctuation
/// together. After downtime, or when event time jumps, a task may have
/// millions of overdue timers; firing them in bounded rounds, with a
/// commit after each, keeps a transaction's size and memory bounded and
/// its duration well inside `transaction.timeout.ms`. A fold whose timer
/// waits for the next round still closes before it takes another event
/// (an overdue fold is closed, not extended).
pub(crate) const TIMERS_PER_TRANSACTION: usize = 10_000;

/// What processing produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A record for sink `sink`.
    Sink {
        sink: usize,
        record: Record,
    },
    /// A record re-keyed for node `node` (as its `input`-th input); it
    /// reaches the node through the node's repartition topic.
    Repartition {
        node: usize,
        input: usize,
        record: Record,
    },
    DeadLetter(DeadLetter),
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

/// Why a task must stop.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// An operator reported an internal error.
    #[error("node `{node}`: {message}")]
    Operator { node: String, message: String },
    #[error(transparent)]
    State(#[from] StateError),
}

struct NodeRuntime {
    operator: Box<dyn Operator>,
    timers: Option<TimerState>,
    /// For `key_by` nodes: the highest upstream offset seen per source
    /// partition.
    seen: Option<StoreHandle<Seen>>,
    stats: NodeStats,
}

/// How `key_by` nodes get their records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Straight to the node (the offline driver: one task holds every key).
    Direct,
    /// Through the node's repartition topic, unless the record is already
    /// on the partition its new key hashes to: this task's `partition` of
    /// `partitions`.
    Partitioned { partition: i32, partitions: i32 },
}

/// Where a dead letter made outside the task is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeadLetterAt {
    /// The `n`-th sink.
    Sink(usize),
    /// The `n`-th node.
    Node(usize),
}

/// Where a repartition record came from: the source partition (as
/// `topic/partition`), its offset, and its index among the records that
/// offset produced for the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Upstream {
    pub(crate) source: String,
    pub(crate) offset: i64,
    pub(crate) seq: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    offset: i64,
    seq: u32,
}

impl JsonState for Seen {}

/// What [`Task::source_fields`] did with a record.
enum FieldsWay {
    /// Its operator took the fields it reads.
    Taken,
    /// It is to be taken whole.
    Whole,
}

/// A source whose records may be read a field at a time: the node and
/// input they go to, that node being its only target and reading only
/// some fields of a value ([`Operator::reads`]).
struct FieldPath {
    node: usize,
    input: usize,
    /// The node's `key_by` pointer, if any, then the pointers it reads.
    projection: json::Projection,
    keyed: bool,
    /// How many of the latest records read this way were bound for
    /// another partition's task, in 1,024ths (a moving average). Such a
    /// record is parsed twice, so above [`ELSEWHERE_LIMIT`] records are
    /// taken whole, all but one in [`ELSEWHERE_PROBE`], which keeps the
    /// average current.
    elsewhere: u16,
    /// Records taken whole unread since the last probe.
    skipped: u16,
    /// Records whose fields were read (taken or not), for tests to see
    /// which way was taken.
    #[cfg(test)]
    read: usize,
}

/// The share of records bound elsewhere, in 1,024ths, above which reading
/// a field at a time costs more than it saves (BENCHMARKS.md, "Only those
/// fields built, in one pass": a record bound elsewhere costs about three
/// times what a local one saves).
const ELSEWHERE_LIMIT: u16 = 200;
/// While above the limit, one record in this many is still read a field
/// at a time.
const ELSEWHERE_PROBE: u16 = 16;

/// The topology over one partition number.
pub struct Task {
    topology: Arc<Topology>,
    state: StateSet,
    nodes: Vec<NodeRuntime>,
    /// Per source whose records may be read a field at a time, where they
    /// go and what is read, so [`Records::process_source_bytes`] may
    /// build just those fields.
    field_paths: Vec<Option<FieldPath>>,
    /// Records taken a field at a time, for tests to see that way taken.
    #[cfg(test)]
    fields_taken: usize,
    /// What sources and sinks counted: the dead letters of records a source
    /// could not read and of values a sink could not write.
    sources: Vec<NodeStats>,
    sinks: Vec<NodeStats>,
    clocks: Clocks,
    routing: Routing,
    /// Wall-clock time of the last record, and the event time then: while
    /// the task is idle for `processing.idle_advance`, event time follows
    /// the wall clock from there.
    last_record: Option<(Timestamp, Timestamp)>,
    /// Timers fired since the last commit or abort, against
    /// [`TIMERS_PER_TRANSACTION`].
    timers_fired: usize,
    /// Per-task memory as of the last commit, restored on abort.
    committed: Snapshot,
}

/// Everything a task keeps in memory besides its stores' pending writes,
/// as of a commit: what an abort must return to.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    event_time: Timestamp,
    last_record: Option<(Timestamp, Timestamp)>,
    /// Nodes', then sources', then sinks' counters.
    stats: Vec<NodeStats>,
}

/// A task taking a run of records ([`Task::records`]), such as its share
/// of a polled batch. The topology is held once for the run: cloning its
/// `Arc` for every record made the threads processing different tasks
/// contend on its count (BENCHMARKS.md, "The topology held once per batch").
pub struct Records<'t> {
    task: &'t mut Task,
    topology: Arc<Topology>,
}

impl Records<'_> {
    /// One record from source `source`: `decoded` is the decoded record or
    /// why decoding failed.
    pub fn process_source(
        &mut self,
        source: usize,
        origin: &Origin<'_>,
        decoded: Result<Record, CodecError>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        self.task
            .source_record(&self.topology, source, origin, decoded, out)
    }

    /// One record from source `source` as read (`origin` has its key,
    /// payload and headers), decoded by `codecs`: what the runtime and the
    /// offline driver call.
    ///
    /// A plain JSON record whose source feeds a single operator that reads
    /// only some fields of a value ([`Operator::reads`]) is not decoded
    /// whole: one pass over it builds only the fields the operator reads
    /// and its `key_by` field ([`json::Projection`]; BENCHMARKS.md, "Only
    /// the fields an operator reads"). A record that way cannot take
    /// exactly as [`Records::process_source`] would (a value that is not
    /// JSON, a missing `key_by` field, a record bound for another
    /// partition's task) is taken whole, so the two ways differ in cost
    /// only. A source most of whose records are bound for other tasks is
    /// taken whole from the start, as that costs less ([`FieldPath`]).
    pub fn process_source_bytes(
        &mut self,
        source: usize,
        origin: &Origin<'_>,
        codecs: &Codecs,
        timestamp: Timestamp,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let decoded =
            match self
                .task
                .source_fields(&self.topology, source, origin, codecs, timestamp, out)?
            {
                FieldsWay::Taken => return Ok(()),
                FieldsWay::Whole => codecs.decode_record(
                    source,
                    origin.key,
                    origin.payload,
                    timestamp,
                    origin.headers.to_vec(),
                ),
            };
        self.process_source(source, origin, decoded, out)
    }

    /// One record read back from node `node`'s repartition topic, for its
    /// `input`-th input. A record whose `upstream` position was already
    /// seen is a re-delivery (a broker that shows aborted transactions) and
    /// is dropped, counted.
    pub(crate) fn process_repartitioned(
        &mut self,
        node: usize,
        input: usize,
        upstream: Option<Upstream>,
        origin: &Origin<'_>,
        record: Record,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let task = &mut *self.task;
        if let (Some(upstream), Some(seen)) = (upstream, task.nodes[node].seen) {
            let current = Seen {
                offset: upstream.offset,
                seq: upstream.seq,
            };
            let mut view = task.state.view(seen);
            let duplicate = view
                .get(upstream.source.as_bytes())?
                .is_some_and(|last| (current.offset, current.seq) <= (last.offset, last.seq));
            if duplicate {
                task.nodes[node]
                    .stats
                    .add(NodeCounter::RepartitionDuplicates, 1);
                return Ok(());
            }
            view.put(upstream.source.as_bytes(), current);
        }
        task.advance_event_time(record.timestamp);
        task.last_record = Some((task.clocks.processing, task.clocks.event));
        task.run_node(&self.topology, node, input, record, Some(origin), out)?;
        task.fire_timers(Clock::Event, out, TIMERS_PER_RECORD)?;
        Ok(())
    }

    /// A record on node `node`'s repartition topic that cannot be read
    /// back (not written by streamfold, or damaged): it goes to the
    /// dead-letter topic as read, counted on the node.
    pub(crate) fn unreadable_repartitioned(
        &mut self,
        node: usize,
        origin: &Origin<'_>,
        reason: &str,
        out: &mut Vec<Output>,
    ) {
        let name = &self.topology.nodes[node].name;
        self.task.nodes[node]
            .stats
            .dead_letter(DeadLetterReason::UndecodableValue);
        out.push(Output::DeadLetter(dead_letter(
            Some(origin),
            name,
            DeadLetterReason::UndecodableValue,
            reason,
            1,
        )));
    }
}

impl Task {
    /// Builds every operator over `backend`, whose stores are
    /// [`Topology::stores`] in order.
    pub fn new(
        topology: Arc<Topology>,
        backend: Box<dyn StateBackend>,
        routing: Routing,
    ) -> Result<Task, StateError> {
        let names = topology.stores().map(|s| s.name.clone()).collect();
        let mut state =
            StateSet::new(backend, names).with_cache_entries(topology.state.cache_entries);
        let mut nodes = Vec::with_capacity(topology.nodes.len());
        let max_record_bytes = topology.kafka.max_record_bytes();
        for node in &topology.nodes {
            let operator = node
                .kind
                .spec()
                .build(&node.info(max_record_bytes), &mut state)?;
            let timers = match node.timer_store() {
                Some(store) => Some(TimerState::declare(&mut state, &store)?),
                None => None,
            };
            let seen = match node.repartition_seen_store() {
                Some(store) => Some(state.declare::<Seen>(&store)?),
                None => None,
            };
            nodes.push(NodeRuntime {
                operator,
                timers,
                seen,
                stats: NodeStats::default(),
            });
        }
        let field_paths = topology
            .sources
            .iter()
            .map(|source| match source.targets.as_slice() {
                [Target::Node { node, input }] if source.config.timestamp.is_none() => {
                    let reads = nodes[*node].operator.reads()?;
                    let key_by = topology.nodes[*node].common.key_by.as_ref();
                    let pointers: Vec<&JsonPointer> = key_by.into_iter().chain(reads).collect();
                    Some(FieldPath {
                        node: *node,
                        input: *input,
                        projection: json::Projection::new(&pointers),
                        keyed: key_by.is_some(),
                        elsewhere: 0,
                        skipped: 0,
                        #[cfg(test)]
                        read: 0,
                    })
                }
                _ => None,
            })
            .collect();
        let sources = vec![NodeStats::default(); topology.sources.len()];
        let sinks = vec![NodeStats::default(); topology.sinks.len()];
        let committed = Snapshot {
            stats: vec![NodeStats::default(); nodes.len() + sources.len() + sinks.len()],
            ..Snapshot::default()
        };
        Ok(Task {
            topology,
            state,
            nodes,
            field_paths,
            #[cfg(test)]
            fields_taken: 0,
            sources,
            sinks,
            committed,
            clocks: Clocks::default(),
            routing,
            last_record: None,
            timers_fired: 0,
        })
    }

    /// Readies the operators once state is restored. `saved` is what
    /// [`Task::gauges_meta`] wrote with the state at its last commit, if the
    /// state still matches it: the gauges resume from there. Without it
    /// (a new store, a restore that replayed records, a topology whose
    /// nodes changed), every operator counts its stores
    /// ([`Operator::count_gauges`]). Says whether it counted.
    pub fn start(&mut self, saved: Option<&[u8]>) -> Result<bool, TaskError> {
        if let Some(saved) = saved.and_then(|bytes| self.saved_gauges(bytes)) {
            for (node, gauges) in self.nodes.iter_mut().zip(saved) {
                node.stats.set_gauges(&gauges);
            }
            self.snapshot();
            return Ok(false);
        }
        for index in 0..self.nodes.len() {
            let mut out = Vec::new();
            let result = {
                let node = &mut self.nodes[index];
                node.stats.set_gauges(&[0; NodeGauge::COUNT]);
                let mut ctx = Context {
                    state: &mut self.state,
                    timers: node.timers.as_mut(),
                    out: &mut out,
                    stats: &mut node.stats,
                    clocks: self.clocks,
                    input: 0,
                    origin: None,
                };
                node.operator.count_gauges(&mut ctx)
            };
            if let Err(e) = result {
                return Err(TaskError::Operator {
                    node: self.topology.nodes[index].name.clone(),
                    message: e.to_string(),
                });
            }
        }
        // What was counted (open folds...) is committed state.
        self.snapshot();
        Ok(true)
    }

    /// The nodes' gauges, to save with the state at a commit (meta key
    /// `gauges`): per node (`name/type`, so a node whose type changed
    /// counts again), its gauge values.
    pub(crate) fn gauges_meta(&self) -> Vec<u8> {
        let gauges: BTreeMap<String, &[i64]> = self
            .topology
            .nodes
            .iter()
            .zip(&self.nodes)
            .map(|(def, node)| (gauge_key(def), node.stats.gauges()))
            .collect();
        serde_json::to_vec(&gauges).expect("a map of names to numbers serializes")
    }

    /// Saved gauges for every node, in node order; `None` when they cannot
    /// be read or do not name every node with every gauge.
    fn saved_gauges(&self, bytes: &[u8]) -> Option<Vec<Vec<i64>>> {
        let mut saved: BTreeMap<String, Vec<i64>> = serde_json::from_slice(bytes).ok()?;
        self.topology
            .nodes
            .iter()
            .map(|def| saved.remove(&gauge_key(def)))
            .map(|gauges| gauges.filter(|g| g.len() == NodeGauge::COUNT))
            .collect()
    }

    pub fn state(&mut self) -> &mut StateSet {
        &mut self.state
    }

    pub(crate) fn clocks(&self) -> Clocks {
        self.clocks
    }

    /// Sets the wall clock the operators see (cached per batch, not read
    /// per record).
    pub fn set_processing_time(&mut self, now: Timestamp) {
        self.clocks.processing = now;
    }

    /// Resumes event time where the last commit left it (after a restart),
    /// so `idle_advance` can move it on even before the first record.
    pub(crate) fn resume_event_time(&mut self, ts: Timestamp) {
        self.advance_event_time(ts);
        self.last_record = Some((self.clocks.processing, self.clocks.event));
        self.snapshot();
    }

    fn snapshot(&mut self) {
        self.committed.event_time = self.clocks.event;
        self.committed.last_record = self.last_record;
        let current = self
            .nodes
            .iter()
            .map(|n| &n.stats)
            .chain(&self.sources)
            .chain(&self.sinks);
        for (saved, stats) in self.committed.stats.iter_mut().zip(current) {
            saved.clone_from(stats);
        }
    }

    /// Moves the task's event time forward (never back).
    pub(crate) fn advance_event_time(&mut self, ts: Timestamp) {
        self.clocks.event = self.clocks.event.max(ts);
    }

    /// The names of nodes, then sources, then sinks: the order of
    /// [`Task::stats`] and [`Task::committed_stats`].
    fn counted_names(&self) -> impl Iterator<Item = &str> {
        let nodes = self.topology.nodes.iter().map(|n| n.name.as_str());
        let sources = self.topology.sources.iter().map(|s| s.name.as_str());
        let sinks = self.topology.sinks.iter().map(|s| s.name.as_str());
        nodes.chain(sources).chain(sinks)
    }

    /// Per node, then source, then sink: its name and counters.
    pub(crate) fn stats(&self) -> impl Iterator<Item = (&str, &NodeStats)> {
        let current = self
            .nodes
            .iter()
            .map(|n| &n.stats)
            .chain(&self.sources)
            .chain(&self.sinks);
        self.counted_names().zip(current)
    }

    /// Per node, then source, then sink: its name and counters as of the
    /// last commit (what the runtime publishes: work an abort undoes is
    /// never counted).
    pub(crate) fn committed_stats(&self) -> impl Iterator<Item = (&str, &NodeStats)> {
        self.counted_names().zip(&self.committed.stats)
    }

    /// Counts a dead letter made outside the task: a sink's value (or key)
    /// the runtime could not write ([`sink_dead_letter`]), a record too
    /// large for its topic. The runtime encodes and sizes records after the
    /// task emitted them, so it reports these here, to be counted as of
    /// commits like the rest.
    pub(crate) fn count_dead_letter(&mut self, at: DeadLetterAt, reason: DeadLetterReason) {
        let stats = match at {
            DeadLetterAt::Sink(sink) => self.sinks.get_mut(sink),
            DeadLetterAt::Node(node) => self.nodes.get_mut(node).map(|n| &mut n.stats),
        };
        if let Some(stats) = stats {
            stats.dead_letter(reason);
        }
    }

    /// The transaction carrying `entries` committed: apply them to the
    /// stores with `meta` in one batch, and remember the task's memory as
    /// of this commit.
    pub fn committed(
        &mut self,
        entries: Vec<crate::state::ChangelogEntry>,
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StateError> {
        self.state.committed(entries, meta)?;
        self.snapshot();
        self.timers_fired = 0;
        Ok(())
    }

    /// The transaction aborted: return to the last commit. Pending writes
    /// are dropped, the timer cache forgotten, and the event clock, the
    /// idle tracking and the counters restored, so records consumed again
    /// meet exactly what their first attempt met.
    pub(crate) fn abort(&mut self) {
        self.state.abort();
        self.timers_fired = 0;
        for node in &mut self.nodes {
            if let Some(timers) = &mut node.timers {
                timers.reset();
            }
        }
        self.clocks.event = self.committed.event_time;
        self.last_record = self.committed.last_record;
        let current = self
            .nodes
            .iter_mut()
            .map(|n| &mut n.stats)
            .chain(&mut self.sources)
            .chain(&mut self.sinks);
        for (stats, saved) in current.zip(&self.committed.stats) {
            stats.clone_from(saved);
        }
    }

    /// A run of records for this task (one or many), with its topology held
    /// once for the run ([`Records`]).
    pub fn records(&mut self) -> Records<'_> {
        Records {
            topology: Arc::clone(&self.topology),
            task: self,
        }
    }

    /// The way of [`Records::process_source_bytes`] that builds only the
    /// fields the operator reads, or says that the record is to be taken
    /// whole (and nothing was done).
    fn source_fields(
        &mut self,
        topology: &Topology,
        source: usize,
        origin: &Origin<'_>,
        codecs: &Codecs,
        timestamp: Timestamp,
        out: &mut Vec<Output>,
    ) -> Result<FieldsWay, TaskError> {
        let Some(path) = &mut self.field_paths[source] else {
            return Ok(FieldsWay::Whole);
        };
        if path.elsewhere > ELSEWHERE_LIMIT {
            path.skipped += 1;
            if path.skipped < ELSEWHERE_PROBE {
                return Ok(FieldsWay::Whole);
            }
            path.skipped = 0;
        }
        let Some(keyless) = codecs.plain_json_keyless(source) else {
            return Ok(FieldsWay::Whole);
        };
        #[cfg(test)]
        {
            path.read += 1;
        }
        let path = &*path;
        let (node, input, projection) = (path.node, path.input, &path.projection);
        let Some(values) = origin.payload.and_then(|payload| projection.read(payload)) else {
            return Ok(FieldsWay::Whole);
        };
        let read_key = match origin.key {
            Some(key) if !keyless => Some(key),
            _ => None,
        };
        let mut key: Option<Cow<'_, [u8]>> = read_key.map(Cow::Borrowed);
        // As `deliver_one` re-keys and routes a record. A record without
        // its key, or bound for another partition's task, is taken whole:
        // parsed again.
        if path.keyed {
            match values[projection.slot(0)].as_ref().filter(|v| !v.is_null()) {
                Some(Value::String(text)) if key.as_deref() == Some(text.as_bytes()) => {}
                Some(value) => key = Some(Cow::Owned(key_bytes(value).into())),
                None => return Ok(FieldsWay::Whole),
            }
            if let (
                Routing::Partitioned {
                    partition,
                    partitions,
                },
                Some(key),
            ) = (self.routing, &key)
                && partition_for(key, partitions) != partition
            {
                self.note_elsewhere(source, true);
                return Ok(FieldsWay::Whole);
            }
        }
        let keyed = path.keyed;
        let fields: SmallVec<[Option<&Value>; 8]> = (usize::from(keyed)..projection.len())
            .map(|pointer| values[projection.slot(pointer)].as_ref())
            .collect();
        if keyed {
            self.note_elsewhere(source, false);
        }
        self.advance_event_time(timestamp);
        self.last_record = Some((self.clocks.processing, self.clocks.event));
        self.run_operator(topology, node, input, Some(origin), out, |operator, ctx| {
            operator.process_fields(key.as_deref(), timestamp, &fields, ctx)
        })?;
        self.fire_timers(Clock::Event, out, TIMERS_PER_RECORD)?;
        #[cfg(test)]
        {
            self.fields_taken += 1;
        }
        Ok(FieldsWay::Taken)
    }

    /// Moves source `source`'s average of records bound elsewhere
    /// ([`FieldPath::elsewhere`]) by one record.
    ///
    /// Above the limit only probes are counted, so each weighs more: a
    /// source whose records turn local is read a field at a time again
    /// after about six probes.
    fn note_elsewhere(&mut self, source: usize, elsewhere: bool) {
        if let Some(path) = &mut self.field_paths[source] {
            let shift = if path.elsewhere > ELSEWHERE_LIMIT {
                2
            } else {
                4
            };
            if elsewhere {
                path.elsewhere += (1024 - path.elsewhere) >> shift;
            } else {
                path.elsewhere -= path.elsewhere >> shift;
            }
        }
    }

    fn source_record(
        &mut self,
        topology: &Topology,
        source: usize,
        origin: &Origin<'_>,
        decoded: Result<Record, CodecError>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let def = &topology.sources[source];
        let mut record = match decoded {
            Ok(record) => record,
            Err(error) => {
                let reason = error.dead_letter_reason();
                self.sources[source].dead_letter(reason);
                let letter = dead_letter(
                    Some(origin),
                    &def.name,
                    reason,
                    &error.reason,
                    error.attempts,
                );
                out.push(Output::DeadLetter(letter));
                return Ok(());
            }
        };
        if let Some(pointer) = &def.config.timestamp {
            match pointer.get(&record.value).and_then(parse_timestamp) {
                Some(ts) => record.timestamp = ts,
                None => {
                    let reason = format!(
                        "timestamp field {pointer} is missing or is neither epoch milliseconds nor an RFC 3339 time"
                    );
                    self.sources[source].dead_letter(DeadLetterReason::BadTimestamp);
                    out.push(Output::DeadLetter(dead_letter(
                        Some(origin),
                        &def.name,
                        DeadLetterReason::BadTimestamp,
                        &reason,
                        1,
                    )));
                    return Ok(());
                }
            }
        }
        self.advance_event_time(record.timestamp);
        self.last_record = Some((self.clocks.processing, self.clocks.event));
        self.deliver(topology, &def.targets, record, Some(origin), out)?;
        self.fire_timers(Clock::Event, out, TIMERS_PER_RECORD)?;
        Ok(())
    }

    /// The wall-clock tick: fires processing-time timers and, when the task
    /// has been idle for `processing.idle_advance`, moves its event time
    /// forward with the wall clock and fires the event-time timers that
    /// come due, so an idle partition still closes its event-time folds.
    ///
    /// Fires what is left of the transaction's [`TIMERS_PER_TRANSACTION`];
    /// returns whether more may be due (the caller commits and punctuates
    /// again).
    pub(crate) fn punctuate(&mut self, out: &mut Vec<Output>) -> Result<bool, TaskError> {
        let mut budget = TIMERS_PER_TRANSACTION;
        budget -= self.fire_timers(Clock::Processing, out, budget)?;
        if let (Some(idle), Some((wall, event))) =
            (self.topology.processing.idle_advance, self.last_record)
        {
            let idle_for = self.clocks.processing - wall;
            if idle_for >= idle.as_millis() {
                self.advance_event_time(event.saturating_add(idle_for));
            }
        }
        // Also what records left due (they fire a bounded number each).
        self.fire_timers(Clock::Event, out, budget)?;
        Ok(self.timer_budget_spent())
    }

    /// Whether this transaction fired all the timers it may: timers still
    /// due wait for the next, so the caller should commit soon.
    pub(crate) fn timer_budget_spent(&self) -> bool {
        self.timers_fired >= TIMERS_PER_TRANSACTION
    }

    /// Fires up to `budget` timers of `clock` due at the task's current
    /// time on that clock, within what is left of the transaction's
    /// [`TIMERS_PER_TRANSACTION`]; returns how many fired.
    pub fn fire_timers(
        &mut self,
        clock: Clock,
        out: &mut Vec<Output>,
        budget: usize,
    ) -> Result<usize, TaskError> {
        let budget = budget.min(TIMERS_PER_TRANSACTION.saturating_sub(self.timers_fired));
        // Called per record for the event clock: clone only when due.
        let mut topology: Option<Arc<Topology>> = None;
        let now = self.clocks.now(clock);
        let mut fired = 0;
        for index in 0..self.nodes.len() {
            while fired < budget
                && let Some(timers) = &mut self.nodes[index].timers
            {
                let limit = TIMER_BATCH.min(budget - fired);
                let due = timers.due(&mut self.state, clock, now, limit)?;
                if due.is_empty() {
                    break;
                }
                fired += due.len();
                for timer in due {
                    let mut emitted = Vec::new();
                    let result = {
                        let node = &mut self.nodes[index];
                        let mut ctx = Context {
                            state: &mut self.state,
                            timers: node.timers.as_mut(),
                            out: &mut emitted,
                            stats: &mut node.stats,
                            clocks: self.clocks,
                            input: 0,
                            origin: None,
                        };
                        node.operator.on_timer(timer, &mut ctx)
                    };
                    let topology = topology
                        .get_or_insert_with(|| Arc::clone(&self.topology))
                        .clone();
                    self.after_operator(&topology, index, result, None, emitted, out)?;
                }
            }
        }
        self.timers_fired += fired;
        Ok(fired)
    }

    fn deliver(
        &mut self,
        topology: &Topology,
        targets: &[Target],
        record: Record,
        origin: Option<&Origin<'_>>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let Some((last, rest)) = targets.split_last() else {
            return Ok(());
        };
        for target in rest {
            self.deliver_one(topology, *target, record.clone(), origin, out)?;
        }
        self.deliver_one(topology, *last, record, origin, out)
    }

    fn deliver_one(
        &mut self,
        topology: &Topology,
        target: Target,
        mut record: Record,
        origin: Option<&Origin<'_>>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        match target {
            Target::Sink(sink) => {
                out.push(Output::Sink { sink, record });
                Ok(())
            }
            Target::Node { node, input } => {
                let def = &topology.nodes[node];
                if let Some(pointer) = &def.common.key_by {
                    match pointer.get(&record.value).filter(|v| !v.is_null()) {
                        // Producers mostly key a record by the field it is
                        // grouped by: then its key stays, not reallocated.
                        Some(Value::String(key))
                            if record.key.as_deref() == Some(key.as_bytes()) => {}
                        Some(key) => record.key = Some(key_bytes(key)),
                        None => {
                            let code = DeadLetterReason::MissingKeyField;
                            self.nodes[node].stats.dead_letter(code);
                            let reason = format!("key field {pointer} is missing or null");
                            out.push(Output::DeadLetter(dead_letter(
                                origin, &def.name, code, &reason, 1,
                            )));
                            return Ok(());
                        }
                    }
                    if let (
                        Routing::Partitioned {
                            partition,
                            partitions,
                        },
                        Some(key),
                    ) = (self.routing, &record.key)
                        && partition_for(key, partitions) != partition
                    {
                        out.push(Output::Repartition {
                            node,
                            input,
                            record,
                        });
                        return Ok(());
                    }
                }
                self.run_node(topology, node, input, record, origin, out)
            }
        }
    }

    fn run_node(
        &mut self,
        topology: &Topology,
        index: usize,
        input: usize,
        record: Record,
        origin: Option<&Origin<'_>>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        self.run_operator(topology, index, input, origin, out, |operator, ctx| {
            operator.process(record, ctx)
        })
    }

    /// Node `index` takes one record from its `input`-th input, by `take`
    /// ([`Operator::process`] or [`Operator::process_fields`]).
    fn run_operator(
        &mut self,
        topology: &Topology,
        index: usize,
        input: usize,
        origin: Option<&Origin<'_>>,
        out: &mut Vec<Output>,
        take: impl FnOnce(&mut dyn Operator, &mut Context<'_>) -> Result<(), OpError>,
    ) -> Result<(), TaskError> {
        let mut emitted = Vec::new();
        let result = {
            let node = &mut self.nodes[index];
            node.stats.add(NodeCounter::RecordsIn, 1);
            let mut ctx = Context {
                state: &mut self.state,
                timers: node.timers.as_mut(),
                out: &mut emitted,
                stats: &mut node.stats,
                clocks: self.clocks,
                input,
                origin,
            };
            take(node.operator.as_mut(), &mut ctx)
        };
        self.after_operator(topology, index, result, origin, emitted, out)
    }

    /// Routes what an operator emitted and turns its error into a dead
    /// letter or a task failure.
    fn after_operator(
        &mut self,
        topology: &Topology,
        index: usize,
        result: Result<(), OpError>,
        origin: Option<&Origin<'_>>,
        emitted: Vec<Emit>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let def = &topology.nodes[index];
        match result {
            Ok(()) => {}
            Err(error) if error.class() == ErrorClass::Internal => {
                return Err(TaskError::Operator {
                    node: def.name.clone(),
                    message: error.to_string(),
                });
            }
            Err(error) => {
                let code = DeadLetterReason::Rejected;
                self.nodes[index].stats.dead_letter(code);
                out.push(Output::DeadLetter(dead_letter(
                    origin,
                    &def.name,
                    code,
                    &error.to_string(),
                    1,
                )));
            }
        }
        for Emit { output, record } in emitted {
            let targets = &def.targets[output];
            // A route output nobody reads (`check` warns) ends here.
            let counter = if targets.is_empty() {
                NodeCounter::Dropped
            } else {
                NodeCounter::RecordsOut
            };
            self.nodes[index].stats.add(counter, 1);
            self.deliver(topology, targets, record, origin, out)?;
        }
        Ok(())
    }
}

/// The bytes of a key read from a value: strings as their text, anything
/// else as compact JSON.
pub(crate) fn key_bytes(value: &Value) -> Box<[u8]> {
    match value {
        Value::String(s) => s.as_bytes().into(),
        other => crate::record::json::encode(other).into_boxed_slice(),
    }
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
/// any, as context. Count it with [`Task::count_dead_letter`].
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

/// A node's entry in the saved gauges: `name/type`.
fn gauge_key(node: &crate::topology::Node) -> String {
    format!("{}/{}", node.name, node.kind.type_name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryBackend;

    const TOPOLOGY: &str = "
name: bounded
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    fields: { n: { rule: count } }
    quiet_for: 1s
sinks:
  out: { topic: out, input: fold }
";

    fn commit(task: &mut Task) {
        let entries = task.state().changelog().unwrap();
        task.committed(entries, &[]).unwrap();
    }

    /// A started task of [`TOPOLOGY`] on an in-memory state, at time 0.
    fn started_task() -> Task {
        let topology = crate::topology::load_str("bounded.yaml", TOPOLOGY, &|_| None).unwrap();
        task_of(&Arc::new(topology), Routing::Direct)
    }

    /// A started task of `topology` on an in-memory state, at time 0.
    fn task_of(topology: &Arc<Topology>, routing: Routing) -> Task {
        let stores = topology.stores().count();
        let mut task = Task::new(
            Arc::clone(topology),
            Box::new(MemoryBackend::new(stores)),
            routing,
        )
        .unwrap();
        task.set_processing_time(0);
        task.start(None).unwrap();
        task
    }

    /// Opens a fold for each of `folds` keys (`k0`, `k1`...), one event
    /// each at offsets 0...; returns what the task emitted.
    fn open_folds(task: &mut Task, folds: usize) -> Vec<Output> {
        let mut out = Vec::new();
        for i in 0..folds {
            let key = format!("k{i}");
            let origin = Origin {
                topic: "events",
                partition: 0,
                offset: i as i64,
                key: Some(key.as_bytes()),
                payload: Some(b"{}"),
                headers: &[],
            };
            let record = Record {
                key: Some(key.as_bytes().into()),
                value: serde_json::json!({}),
                timestamp: 0,
                headers: Vec::new(),
            };
            task.records()
                .process_source(0, &origin, Ok(record), &mut out)
                .unwrap();
        }
        out
    }

    /// After downtime every fold of a task is
    /// overdue at once; they fire in rounds of at most
    /// `TIMERS_PER_TRANSACTION`, each committed before the next.
    #[test]
    fn overdue_timers_fire_in_bounded_rounds() {
        let mut task = started_task();
        let folds = 2 * TIMERS_PER_TRANSACTION + TIMERS_PER_TRANSACTION / 2;
        let out = open_folds(&mut task, folds);
        assert!(out.is_empty());
        commit(&mut task);

        task.set_processing_time(3_600_000);
        let mut rounds = Vec::new();
        loop {
            let mut out = Vec::new();
            let more = task.punctuate(&mut out).unwrap();
            rounds.push(out.len());
            commit(&mut task);
            if !more {
                break;
            }
        }
        assert_eq!(
            rounds,
            vec![
                TIMERS_PER_TRANSACTION,
                TIMERS_PER_TRANSACTION,
                TIMERS_PER_TRANSACTION / 2
            ]
        );
    }

    fn folds_open(task: &Task) -> i64 {
        let (_, stats) = task.stats().find(|(name, _)| *name == "fold").unwrap();
        stats.gauge(NodeGauge::FoldsOpen)
    }

    /// A task resuming its own state takes the gauges saved at
    /// its last commit instead of counting its stores; without them (or
    /// when they do not fit the topology) it counts.
    #[test]
    fn a_start_takes_the_saved_gauges_and_counts_only_without_them() {
        let mut task = started_task();
        open_folds(&mut task, 3);
        commit(&mut task);
        assert_eq!(folds_open(&task), 3);
        let saved = task.gauges_meta();
        let parsed: BTreeMap<String, Vec<i64>> = serde_json::from_slice(&saved).unwrap();
        assert_eq!(parsed["fold/fold"][NodeGauge::FoldsOpen as usize], 3);

        // Saved gauges are taken as they are: a value the stores do not
        // hold shows that nothing was counted.
        let mut claimed = [0; NodeGauge::COUNT];
        claimed[NodeGauge::FoldsOpen as usize] = 7;
        let claimed = serde_json::to_vec(&BTreeMap::from([("fold/fold", claimed)])).unwrap();
        assert!(!task.start(Some(&claimed)).unwrap(), "not counted");
        assert_eq!(folds_open(&task), 7);
        let (_, committed) = task
            .committed_stats()
            .find(|(name, _)| *name == "fold")
            .unwrap();
        assert_eq!(committed.gauge(NodeGauge::FoldsOpen), 7);

        // No saved gauges, unreadable ones, or ones for another node type
        // (the node was a rollup before): the stores are counted.
        let other_type =
            serde_json::to_vec(&BTreeMap::from([("fold/rollup", [5; NodeGauge::COUNT])])).unwrap();
        for saved in [None, Some(&b"not json"[..]), Some(&other_type[..])] {
            assert!(task.start(saved).unwrap(), "counted");
            assert_eq!(folds_open(&task), 3, "saved: {saved:?}");
        }
    }

    /// A fold with every merge rule, keyed by a field, on a source it alone
    /// reads: its records may be taken a field at a time.
    const EVERY_RULE: &str = "
name: fields
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    key_by: /k
    fields:
      s: { rule: set, from: /a }
      u: { rule: key_union, from: /o }
      n: { rule: sum, from: /n/x }
      lo: { rule: min, from: /a }
      hi: { rule: max, from: /arr/1 }
      f: { rule: first, from: /a }
      l: { rule: last, from: /o }
      c: { rule: count }
      cf: { rule: count, from: /n }
      li: { rule: list, from: /a, max_len: 3 }
    max_events: 4
    quiet_for: 1s
sinks:
  out: { topic: out, input: fold }
";

    /// A record's key and payload as read.
    type Wire = (Option<Vec<u8>>, Option<Vec<u8>>);

    /// Two tasks of `topology`: one decodes whole records
    /// ([`Records::process_source`]), the other takes them as
    /// [`Records::process_source_bytes`] does.
    fn twin_tasks(topology: &str, routing: Routing) -> (Task, Task, Codecs) {
        let topology = Arc::new(crate::topology::load_str("t.yaml", topology, &|_| None).unwrap());
        let codecs = Codecs::offline(&topology).unwrap();
        (
            task_of(&topology, routing),
            task_of(&topology, routing),
            codecs,
        )
    }

    /// Feeds `(key, payload)` records to both tasks, one way each, and
    /// checks that they emit the same outputs and write the same state.
    fn same_both_ways(whole: &mut Task, fields: &mut Task, codecs: &Codecs, records: &[Wire]) {
        for (offset, (key, payload)) in records.iter().enumerate() {
            let origin = Origin {
                topic: "events",
                partition: 0,
                offset: offset as i64,
                key: key.as_deref(),
                payload: payload.as_deref(),
                headers: &[],
            };
            let timestamp = 1_000 + offset as i64;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let decoded =
                codecs.decode_record(0, origin.key, origin.payload, timestamp, Vec::new());
            whole
                .records()
                .process_source(0, &origin, decoded, &mut a)
                .unwrap();
            fields
                .records()
                .process_source_bytes(0, &origin, codecs, timestamp, &mut b)
                .unwrap();
            let payload = payload.as_deref().map(String::from_utf8_lossy);
            assert_eq!(a, b, "record {offset}: {key:?} {payload:?}");
        }
        let changelog = |task: &mut Task| {
            let entries = task.state().changelog().unwrap();
            entries
                .iter()
                .map(|e| (e.store, e.key.clone(), e.value.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(changelog(whole), changelog(fields), "state written");
    }

    /// A value as its text, from a few of each kind: strings with escapes,
    /// integers at their limits, floats, `-0`, objects with a repeated
    /// name, arrays.
    fn json_text() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            r#""x""#,
            r#""y\n""#,
            r#""\u0061""#,
            r#""a""#,
            "3",
            "-2",
            "2.5",
            "-0",
            "1e3",
            "18446744073709551615",
            "-9223372036854775808",
            "true",
            "null",
            r#"[1,"x"]"#,
            "[0,5]",
            r#"["a","b"]"#,
            r#"{"q":1}"#,
            r#"{"x":1}"#,
            r#"{"x":2.5}"#,
            r#"{"x":"s"}"#,
            r#"{"m1":1}"#,
            r#"{"m2":2,"m1":3}"#,
            r#"{"m1":1,"m1":2}"#,
            "{}",
        ])
        .prop_map(String::from)
    }

    /// A record's payload: an object of some of the fields the fold reads
    /// (a name may repeat), or text that is not such an object, or no
    /// payload.
    fn payload() -> impl Strategy<Value = Option<Vec<u8>>> {
        let name = prop::sample::select(vec!["k", "a", "o", "n", "arr", "z"]);
        let object = prop::collection::vec((name, json_text()), 0..7).prop_map(|fields| {
            let fields: Vec<String> = fields
                .iter()
                .map(|(name, value)| format!(r#""{name}":{value}"#))
                .collect();
            format!("{{{}}}", fields.join(","))
        });
        prop_oneof![
            8 => object.prop_map(|text| Some(text.into_bytes())),
            1 => json_text().prop_map(|text| Some(text.into_bytes())),
            1 => prop::sample::select(vec![
                &br#"{"k": "a","#[..],
                &b"\xff\xfe"[..],
                &br#"{"k": "a"} x"#[..],
                &b""[..],
            ])
            .prop_map(|bytes| Some(bytes.to_vec())),
            1 => Just(None),
        ]
    }

    fn record() -> impl Strategy<Value = Wire> {
        let key = prop::sample::select(vec![
            None,
            Some(&b"a"[..]),
            Some(&b"b"[..]),
            Some(&b"3"[..]),
        ])
        .prop_map(|key| key.map(<[u8]>::to_vec));
        (key, payload())
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever the records, taking them a field at a time emits and
        /// stores exactly what decoding them whole does, straight or
        /// through a repartition topic.
        #[test]
        fn fields_and_whole_records_fold_alike(
            records in prop::collection::vec(record(), 1..40),
            partitioned in any::<bool>(),
        ) {
            let routing = if partitioned {
                Routing::Partitioned { partition: 0, partitions: 2 }
            } else {
                Routing::Direct
            };
            let (mut whole, mut fields, codecs) = twin_tasks(EVERY_RULE, routing);
            same_both_ways(&mut whole, &mut fields, &codecs, &records);
            prop_assert_eq!(whole.fields_taken, 0);
        }
    }

    /// A source whose records are mostly bound for other partitions' tasks
    /// is taken whole but for a probe one record in [`ELSEWHERE_PROBE`];
    /// when its records turn local again, it is read a field at a time
    /// again. Both ways emit the same outputs throughout.
    #[test]
    fn a_source_mostly_bound_elsewhere_is_taken_whole() {
        let routing = Routing::Partitioned {
            partition: 0,
            partitions: 4,
        };
        let (mut whole, mut fields, codecs) = twin_tasks(EVERY_RULE, routing);
        let record = |k: String| {
            let event = format!(r#"{{"k":"{k}","a":"x","n":{{"x":1}}}}"#);
            (Some(b"unrelated".to_vec()), Some(event.into_bytes()))
        };
        let keys = |local: bool| {
            (0..)
                .map(|i| format!("key_{i}"))
                .filter(move |k| (partition_for(k.as_bytes(), 4) == 0) == local)
        };
        let elsewhere: Vec<Wire> = keys(false).take(400).map(record).collect();
        same_both_ways(&mut whole, &mut fields, &codecs, &elsewhere);
        // The average passes the limit after four records bound elsewhere
        // (each read a field at a time); after that only the probes are.
        assert_eq!(fields.fields_taken, 0);
        let path = fields.field_paths[0].as_ref().unwrap();
        assert_eq!(path.read, 4 + (400 - 4) / ELSEWHERE_PROBE as usize);
        assert!(path.elsewhere > ELSEWHERE_LIMIT);

        let local: Vec<Wire> = keys(true).take(400).map(record).collect();
        same_both_ways(&mut whole, &mut fields, &codecs, &local);
        let path = fields.field_paths[0].as_ref().unwrap();
        assert!(path.elsewhere <= ELSEWHERE_LIMIT);
        // Local probes bring the average down; from then on every record
        // is read a field at a time.
        assert!(
            fields.fields_taken > 300,
            "{} of 400 local records read a field at a time",
            fields.fields_taken
        );
    }

    /// The social-metrics event is taken a field at a time, and sources
    /// that cannot be are decoded whole: one feeding two nodes, one with a
    /// timestamp field, one whose only node takes whole records.
    #[test]
    fn which_records_are_taken_a_field_at_a_time() {
        let event = br#"{"k":"a","a":"x","o":{"m1":1},"n":{"x":2},"arr":[0,5]}"#;
        let (mut whole, mut fields, codecs) = twin_tasks(EVERY_RULE, Routing::Direct);
        let records = [(Some(b"a".to_vec()), Some(event.to_vec()))];
        same_both_ways(&mut whole, &mut fields, &codecs, &records);
        assert_eq!(fields.fields_taken, 1);
        // Without its key field the record is decoded whole, and
        // dead-lettered as before.
        let records = [(Some(b"a".to_vec()), Some(br#"{"a":"x"}"#.to_vec()))];
        same_both_ways(&mut whole, &mut fields, &codecs, &records);
        assert_eq!(fields.fields_taken, 1);

        let event = br#"{"post_id":"post_1","account_id":"account_1","metrics":{"likes":3}}"#;
        let records = [(Some(b"account_1".to_vec()), Some(event.to_vec()))];

        let fold = "
  fold:
    type: fold
    input: events
    fields: { p: { rule: set, from: /post_id } }
    quiet_for: 1s";
        let filter = "
  other:
    type: filter
    input: events
    condition: '.post_id != null'";
        let plain = "events: { topic: events }";
        let timed = "events: { topic: events, timestamp: /at }";
        let cases = [
            (plain, vec![fold], 1),
            (timed, vec![fold], 0),
            (plain, vec![fold, filter], 0),
            (plain, vec![filter], 0),
        ];
        for (source, nodes, taken) in cases {
            let sinks: String = nodes
                .iter()
                .map(|node| {
                    let name = if *node == fold { "fold" } else { "other" };
                    format!("\n  {name}_out: {{ topic: {name}-out, input: {name} }}")
                })
                .collect();
            let topology = format!(
                "name: t\nkafka: {{ bootstrap_servers: 'unused:9092' }}\nsources:\n  {source}\nnodes:{}\nsinks:{sinks}\n",
                nodes.concat()
            );
            let (mut whole, mut fields, codecs) = twin_tasks(&topology, Routing::Direct);
            same_both_ways(&mut whole, &mut fields, &codecs, &records);
            assert_eq!(fields.fields_taken, taken, "{topology}");
        }
    }
}
