//! Operators and the interface they are written against.
//!
//! An operator sees one record at a time, in offset order within a task,
//! and reaches the world only through its [`Context`]: typed store handles
//! it declared up front, a timer service, an emitter and counters. It never
//! touches RocksDB or Kafka, so the runtime and the offline test driver run
//! the same code.
//!
//! [`NodeKind`] is the closed registry of operator types: adding one means
//! adding a variant, and the compiler points at every `match` that must
//! learn about it.

pub mod common;
pub mod dedup;
pub mod expr;
pub mod filter;
pub mod fold;
pub mod map;
pub mod ordered;
pub mod projection;
pub mod rollup;
pub mod route;
#[cfg(test)]
mod testing;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::{Origin, Record, Timestamp};
use crate::state::timers::{Clock, Timer, TimerState};
use crate::state::{StateError, StateSet, StateValue, StoreHandle, StoreView};
use crate::telemetry::{NodeCounter, NodeGauge, NodeStats};
use crate::topology::types::JsonPointer;

/// The operator of a node, chosen by its `type`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NodeKind {
    /// Fold a burst of events per key into one event, emitted when the key
    /// goes quiet, after `max_wait`, or after `max_events`.
    Fold(fold::FoldConfig),
    /// Drop records whose id was already seen within `retention`.
    Dedup(dedup::DedupConfig),
    /// Keep per key the update with the highest order value; drop or
    /// dead-letter stale ones; stamp outputs with a Lamport clock.
    Ordered(ordered::OrderedConfig),
    /// Rebuild an event-sourced entity from its events, in order, and emit
    /// its read model with a version.
    Projection(projection::ProjectionConfig),
    /// Netflix's distributed counter: idempotent counter events rolled up
    /// over immutable windows into checkpoints.
    Rollup(rollup::RollupConfig),
    /// Keep the records a jq condition holds for.
    Filter(filter::FilterConfig),
    /// Reshape each record with a jq expression.
    Map(map::MapConfig),
    /// Send records to named outputs by jq conditions.
    Route(route::RouteConfig),
}

impl NodeKind {
    /// Every `type` name, for "did you mean" suggestions.
    pub const TYPES: &'static [&'static str] = &[
        "fold",
        "dedup",
        "ordered",
        "projection",
        "rollup",
        "filter",
        "map",
        "route",
    ];

    pub fn type_name(&self) -> &'static str {
        match self {
            NodeKind::Fold(_) => "fold",
            NodeKind::Dedup(_) => "dedup",
            NodeKind::Ordered(_) => "ordered",
            NodeKind::Projection(_) => "projection",
            NodeKind::Rollup(_) => "rollup",
            NodeKind::Filter(_) => "filter",
            NodeKind::Map(_) => "map",
            NodeKind::Route(_) => "route",
        }
    }

    /// The counters an operator of this kind moves, besides records in and
    /// out (every node's) and what the runtime counts for `key_by` nodes.
    /// `streamfold run` exports exactly these for the node, from startup.
    pub fn counters(&self) -> &'static [NodeCounter] {
        use NodeCounter::*;
        match self {
            NodeKind::Fold(_) => &[
                FoldEligible,
                FoldFolded,
                FoldClosedQuiet,
                FoldClosedMaxWait,
                FoldClosedMaxEvents,
                FoldClosedMaxBytes,
            ],
            NodeKind::Dedup(_) => &[Dropped, DedupDuplicates, DedupRedeliveries, DedupExpired],
            NodeKind::Ordered(_) => &[Dropped, OrderedStale],
            NodeKind::Projection(_) => &[
                Dropped,
                ProjectionDuplicates,
                ProjectionRefolds,
                ProjectionUnknown,
            ],
            NodeKind::Rollup(_) => &[
                Dropped,
                RollupDuplicates,
                RollupLate,
                RollupRollups,
                RollupUnknownReads,
            ],
            NodeKind::Filter(_) => &[Dropped, FilterRejected],
            NodeKind::Map(_) => &[Dropped, MapEmpty],
            // Records on a route nobody reads (or on an unread default
            // output) are dropped.
            NodeKind::Route(_) => &[Dropped, RouteUnmatched],
        }
    }

    /// The per-task levels an operator of this kind tracks.
    pub fn gauges(&self) -> &'static [NodeGauge] {
        match self {
            NodeKind::Fold(_) => &[NodeGauge::FoldsOpen],
            NodeKind::Rollup(_) => &[NodeGauge::RollupQueued],
            NodeKind::Dedup(_)
            | NodeKind::Ordered(_)
            | NodeKind::Projection(_)
            | NodeKind::Filter(_)
            | NodeKind::Map(_)
            | NodeKind::Route(_) => &[],
        }
    }

    /// The static description of the operator (stores, outputs, checks).
    pub fn spec(&self) -> &dyn OperatorSpec {
        match self {
            NodeKind::Fold(config) => config,
            NodeKind::Dedup(config) => config,
            NodeKind::Ordered(config) => config,
            NodeKind::Projection(config) => config,
            NodeKind::Rollup(config) => config,
            NodeKind::Filter(config) => config,
            NodeKind::Map(config) => config,
            NodeKind::Route(config) => config,
        }
    }

    /// Reads the operator options of a node whose `type` is `type_name`
    /// from `body` (the node's mapping without the common fields).
    pub fn load(
        type_name: &str,
        body: &crate::topology::yaml::Node,
        path: &crate::topology::de::Path,
    ) -> Option<Result<NodeKind, crate::topology::de::DeError>> {
        use crate::topology::de::from_entries;
        use crate::topology::model::NODE_COMMON_FIELDS;
        let skip = NODE_COMMON_FIELDS;
        Some(match type_name {
            "fold" => from_entries(body, path, skip).map(NodeKind::Fold),
            "dedup" => from_entries(body, path, skip).map(NodeKind::Dedup),
            "ordered" => from_entries(body, path, skip).map(NodeKind::Ordered),
            "projection" => from_entries(body, path, skip).map(NodeKind::Projection),
            "rollup" => from_entries(body, path, skip).map(NodeKind::Rollup),
            "filter" => from_entries(body, path, skip).map(NodeKind::Filter),
            "map" => from_entries(body, path, skip).map(NodeKind::Map),
            "route" => from_entries(body, path, skip).map(NodeKind::Route),
            _ => return None,
        })
    }
}

/// What the topology compiler and the runtime need to know about an
/// operator before any record flows.
pub trait OperatorSpec {
    /// Stores the operator keeps, by short name (`open`); each becomes
    /// `<node>-<store>` with a changelog topic.
    fn stores(&self) -> &'static [&'static str] {
        &[]
    }

    /// The store `run --query-addr` serves (short name, one of
    /// [`OperatorSpec::stores`]): the operator's result per key.
    fn queryable_store(&self) -> Option<&'static str> {
        None
    }

    /// How a value of the queryable store reads over HTTP, from its stored
    /// JSON. The stored form by default.
    fn query_view(&self, stored: serde_json::Value) -> serde_json::Value {
        stored
    }

    /// Whether the operator sets timers (adds the store `<node>-timers`).
    fn uses_timers(&self) -> bool {
        false
    }

    /// Named outputs beside the default one (`route` branches).
    fn outputs(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the operator groups by key, so its input must be keyed (or
    /// the node must set `key_by`).
    fn keyed(&self) -> bool {
        !self.stores().is_empty()
    }

    /// Whether what the operator emits is keyed. Stateless operators pass
    /// their input's keying through.
    fn output_keyed(&self, input_keyed: bool) -> bool {
        self.keyed() || input_keyed
    }

    /// Checks options that serde cannot (combinations, ranges).
    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>);

    /// Makes the operator for one task, declaring its stores in `state`.
    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<Box<dyn Operator>, StateError>;
}

/// What an operator may know about the node it runs as.
#[derive(Clone, Copy, Debug)]
pub struct NodeInfo<'a> {
    pub name: &'a str,
    pub key_by: Option<&'a JsonPointer>,
    /// The largest record the producer may send (its `message.max.bytes`),
    /// for operators whose state or output grows with their input.
    pub max_record_bytes: usize,
}

impl NodeInfo<'_> {
    /// The full name of one of this node's stores.
    pub fn store_name(&self, store: &str) -> String {
        format!("{}-{store}", self.name)
    }
}

/// A problem with an operator's options, at a path below the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    pub path: Vec<String>,
    pub message: String,
}

impl Issue {
    pub fn new(path: &[&str], message: impl Into<String>) -> Issue {
        Issue {
            path: path.iter().map(|s| s.to_string()).collect(),
            message: message.into(),
        }
    }
}

/// Why an operator could not process a record, and so what happens next.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The record is at fault (missing field, wrong type): it goes to the
    /// dead-letter topic and processing continues.
    #[error("{0}")]
    Record(String),
    /// The outside world failed (a lookup, a registry): retried with
    /// backoff, then dead-lettered.
    #[error("{0}")]
    External(String),
    /// Our bug or unusable state: the task stops.
    #[error("{0}")]
    Internal(String),
}

impl OpError {
    /// The class name written in dead-letter headers.
    pub fn class(&self) -> &'static str {
        match self {
            OpError::Record(_) => "record",
            OpError::External(_) => "external",
            OpError::Internal(_) => "internal",
        }
    }
}

impl From<StateError> for OpError {
    fn from(e: StateError) -> Self {
        OpError::Internal(e.to_string())
    }
}

/// A record an operator emitted, on one of its outputs (0 is the default).
#[derive(Clone, Debug, PartialEq)]
pub struct Emit {
    pub output: usize,
    pub record: Record,
}

/// Current time on each clock, as the task sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clocks {
    pub processing: Timestamp,
    pub event: Timestamp,
}

impl Clocks {
    pub fn now(&self, clock: Clock) -> Timestamp {
        match clock {
            Clock::Processing => self.processing,
            Clock::Event => self.event,
        }
    }
}

/// An operator's window on its task.
pub struct Context<'a> {
    pub(crate) state: &'a mut StateSet,
    pub(crate) timers: Option<&'a mut TimerState>,
    pub(crate) out: &'a mut Vec<Emit>,
    pub(crate) stats: &'a mut NodeStats,
    pub(crate) clocks: Clocks,
    pub(crate) input: usize,
    /// Where the record being processed was read; `None` in timers and
    /// `on_start`.
    pub(crate) origin: Option<&'a Origin<'a>>,
}

impl Context<'_> {
    pub fn store<V: StateValue>(&mut self, handle: StoreHandle<V>) -> StoreView<'_, V> {
        self.state.view(handle)
    }

    /// Calls [`Operator::on_timer`] for `key` once `clock` reaches `at`.
    pub fn set_timer(&mut self, clock: Clock, at: Timestamp, key: &[u8]) -> Result<(), OpError> {
        let timers = self.timers.as_deref_mut().ok_or_else(no_timers)?;
        timers.set(self.state, clock, at, key);
        Ok(())
    }

    pub fn cancel_timer(&mut self, clock: Clock, at: Timestamp, key: &[u8]) -> Result<(), OpError> {
        let timers = self.timers.as_deref_mut().ok_or_else(no_timers)?;
        timers.cancel(self.state, clock, at, key);
        Ok(())
    }

    pub fn now(&self, clock: Clock) -> Timestamp {
        self.clocks.now(clock)
    }

    /// Emits on the default output.
    pub fn emit(&mut self, record: Record) {
        self.out.push(Emit { output: 0, record });
    }

    /// Emits on a named output (its index in [`OperatorSpec::outputs`] + 1).
    pub fn emit_to(&mut self, output: usize, record: Record) {
        self.out.push(Emit { output, record });
    }

    pub fn count(&mut self, counter: NodeCounter, n: u64) {
        self.stats.add(counter, n);
    }

    pub fn gauge_add(&mut self, gauge: NodeGauge, delta: i64) {
        self.stats.gauge_add(gauge, delta);
    }

    /// Which of the node's inputs the current record came from.
    pub fn input(&self) -> usize {
        self.input
    }

    /// Where the record being processed was read: source (or repartition)
    /// topic, partition and offset. Records an upstream node emitted carry
    /// the position of the input record they came from. `None` in
    /// [`Operator::on_timer`] and [`Operator::on_start`].
    pub fn origin(&self) -> Option<&Origin<'_>> {
        self.origin
    }
}

fn no_timers() -> OpError {
    OpError::Internal("this operator declared no timers".into())
}

/// A running operator in one task.
pub trait Operator: Send {
    /// After the task's state is restored, before the first record.
    fn on_start(&mut self, _ctx: &mut Context<'_>) -> Result<(), OpError> {
        Ok(())
    }

    /// One record, in offset order within the task.
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError>;

    /// A timer this operator set came due.
    fn on_timer(&mut self, _timer: Timer, _ctx: &mut Context<'_>) -> Result<(), OpError> {
        Ok(())
    }
}
