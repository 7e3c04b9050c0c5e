//! A task: the topology running over one partition number.
//!
//! The task owns the operators, their state and timers, and pushes each
//! record depth-first through the graph. It knows nothing of Kafka: the
//! caller feeds it decoded records with their [`Origin`] and collects
//! [`Output`]s (sink records, records to repartition, dead letters). The
//! Kafka runtime and the offline test driver both drive tasks, so an
//! operator behaves the same in `streamfold test` and in production.
//!
//! Beside it: where a `key_by` node's records go ([`routing`]; the
//! partitioner, Kafka's murmur2, in [`partitioner`], for `key_by` and
//! queries), the repartition format ([`repartition`]), and the one path
//! from outputs to the wire that both drivers take ([`output`]: encode,
//! size check against [`limits`], dead letter).

mod dead_letter;
mod fields;
pub(crate) mod limits;
pub(crate) mod output;
pub(crate) mod partitioner;
mod records;
pub(crate) mod repartition;
pub(crate) mod routing;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::types::JsonPointer;
use crate::formats::CodecError;
use crate::operators::{BuiltOperator, Clocks, Context, Emit, OpError};
use crate::record::json::{self, parse_timestamp};
use crate::record::{ErrorClass, Origin, Record, Timestamp};
use crate::state::global::Globals;
use crate::state::timers::{Clock, TimerState};
use crate::state::{JsonState, StateBackend, StateError, StateSet, StoreHandle};
use crate::telemetry::{DeadLetterReason, NodeCounter, NodeGauge, NodeStats};
use crate::topology::{Target, Topology};

pub use dead_letter::DeadLetter;
pub(crate) use dead_letter::{DeadLetterAt, dead_letter, dlq_headers, sink_dead_letter};
use fields::FieldwiseSource;
pub use partitioner::partition_for;
pub use records::Records;
pub(crate) use repartition::Upstream;
pub use routing::Routing;
use routing::{Rekeyed, rekey};

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

/// Why a task must stop.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// An operator reported an internal error.
    #[error("node `{node}`: {message}")]
    Operator { node: String, message: String },
    /// The task's state failed.
    #[error(transparent)]
    State(#[from] StateError),
}

struct NodeRuntime {
    operator: BuiltOperator,
    timers: Option<TimerState>,
    /// For `key_by` nodes: the highest upstream offset seen per source
    /// partition.
    seen: Option<StoreHandle<Seen>>,
    stats: NodeStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    offset: i64,
    seq: u32,
}

impl JsonState for Seen {}

/// The topology over one partition number.
pub struct Task {
    topology: Arc<Topology>,
    state: StateSet,
    nodes: Vec<NodeRuntime>,
    /// Per source whose records may be read a field at a time, where they
    /// go and what is read, so [`Records::process_source_bytes`] may
    /// build just those fields.
    field_paths: Vec<Option<FieldwiseSource>>,
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

impl Task {
    /// Builds every operator over `backend`, whose stores are
    /// [`Topology::stores`] in order.
    pub fn new(
        topology: Arc<Topology>,
        backend: Box<dyn StateBackend>,
        routing: Routing,
    ) -> Result<Task, StateError> {
        Task::with_globals(topology, backend, routing, Globals::default())
    }

    /// [`Task::new`], its operators reading the instance's global tables.
    pub fn with_globals(
        topology: Arc<Topology>,
        backend: Box<dyn StateBackend>,
        routing: Routing,
        globals: Globals,
    ) -> Result<Task, StateError> {
        let names = topology.stores().map(|s| s.name.clone()).collect();
        let mut state = StateSet::new(backend, names)
            .with_cache_entries(topology.state.cache_entries)
            .with_globals(globals);
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
                    Some(FieldwiseSource {
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
                node.operator.operator().count_gauges(&mut ctx)
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
        // A table's tombstone has no value to read a time from: it keeps
        // the Kafka timestamp.
        let tombstone = record.value.is_null() && def.config.kind.is_table();
        if let Some(pointer) = def.config.timestamp.as_ref().filter(|_| !tombstone) {
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
                        node.operator.operator().on_timer(timer, &mut ctx)
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
                // A table keeps its own key: `key_by` re-keys streams.
                let key_by = def
                    .common
                    .key_by
                    .as_ref()
                    .filter(|_| !def.input_info[input].table);
                if let Some(pointer) = key_by {
                    match rekey(record.key.as_deref(), pointer.get(&record.value)) {
                        Rekeyed::Kept => {}
                        Rekeyed::New(key) => record.key = Some(key),
                        Rekeyed::Missing => {
                            let code = DeadLetterReason::MissingKeyField;
                            self.nodes[node].stats.dead_letter(code);
                            let reason = format!("key field {pointer} is missing or null");
                            out.push(Output::DeadLetter(dead_letter(
                                origin, &def.name, code, &reason, 1,
                            )));
                            return Ok(());
                        }
                    }
                    if let Some(key) = &record.key
                        && !self.routing.is_here(key)
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
            operator.operator().process(record, ctx)
        })
    }

    /// Node `index` takes one record from its `input`-th input, by `take`
    /// ([`crate::operators::Operator::process`] or
    /// [`crate::operators::FieldwiseOperator::process_fields`]).
    fn run_operator(
        &mut self,
        topology: &Topology,
        index: usize,
        input: usize,
        origin: Option<&Origin<'_>>,
        out: &mut Vec<Output>,
        take: impl FnOnce(&mut BuiltOperator, &mut Context<'_>) -> Result<(), OpError>,
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
            take(&mut node.operator, &mut ctx)
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

/// A node's entry in the saved gauges: `name/type`.
fn gauge_key(node: &crate::topology::Node) -> String {
    format!("{}/{}", node.name, node.kind.type_name())
}
