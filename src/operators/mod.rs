//! Operators and the interface they are written against.
//!
//! An operator sees one record at a time, in offset order within a task,
//! and reaches the world only through its [`Context`]: typed store handles
//! it declared up front, a timer service, an emitter and counters. It never
//! touches RocksDB or Kafka, so the runtime and the offline test driver run
//! the same code.
//!
//! [`registry`] is the closed list of operator types: adding one is one
//! entry there plus its module here, and the compiler asks for the rest.

pub(crate) mod dedup;
pub mod expr;
pub(crate) mod filter;
pub(crate) mod fold;
pub(crate) mod join;
pub(crate) mod keyed;
pub(crate) mod map;
pub(crate) mod merge;
pub(crate) mod ordered;
pub(crate) mod projection;
pub(crate) mod registry;
pub(crate) mod rollup;
pub(crate) mod route;
#[cfg(test)]
mod testing;
pub(crate) mod window;

pub(crate) use registry::OperatorSpec;
pub use registry::{Issue, NodeInfo, NodeInput, NodeKind};

use serde_json::Value;

use crate::config::types::JsonPointer;
use crate::record::{ErrorClass, Origin, Record, Timestamp};
use crate::state::timers::{Clock, Timer, TimerState};
use crate::state::{StateError, StateSet, StateValue, StoreHandle, StoreView};
use crate::telemetry::{NodeCounter, NodeGauge, NodeStats};

/// Why an operator could not process a record, and so what happens next.
/// Operators reach nothing outside their task (no lookups, no registry),
/// so an operator's failure is never [`ErrorClass::External`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpError {
    /// The record is at fault (missing field, wrong type): it goes to the
    /// dead-letter topic and processing continues.
    #[error("{0}")]
    Record(String),
    /// Our bug or unusable state: the task stops.
    #[error("{0}")]
    Internal(String),
}

impl OpError {
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            OpError::Record(_) => ErrorClass::Record,
            OpError::Internal(_) => ErrorClass::Internal,
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
pub(crate) struct Emit {
    pub(crate) output: usize,
    pub(crate) record: Record,
}

/// Current time on each clock, as the task sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clocks {
    pub(crate) processing: Timestamp,
    pub(crate) event: Timestamp,
}

impl Clocks {
    pub(crate) fn now(&self, clock: Clock) -> Timestamp {
        match clock {
            Clock::Processing => self.processing,
            Clock::Event => self.event,
        }
    }
}

/// An operator's window on its task.
pub(crate) struct Context<'a> {
    pub(crate) state: &'a mut StateSet,
    pub(crate) timers: Option<&'a mut TimerState>,
    pub(crate) out: &'a mut Vec<Emit>,
    pub(crate) stats: &'a mut NodeStats,
    pub(crate) clocks: Clocks,
    pub(crate) input: usize,
    /// Where the record being processed was read; `None` in timers and
    /// `count_gauges`.
    pub(crate) origin: Option<&'a Origin<'a>>,
}

impl Context<'_> {
    pub(crate) fn store<V: StateValue>(&mut self, handle: StoreHandle<V>) -> StoreView<'_, V> {
        self.state.view(handle)
    }

    /// Calls [`Operator::on_timer`] for `key` once `clock` reaches `at`.
    pub(crate) fn set_timer(
        &mut self,
        clock: Clock,
        at: Timestamp,
        key: &[u8],
    ) -> Result<(), OpError> {
        let timers = self.timers.as_deref_mut().ok_or_else(no_timers)?;
        timers.set(self.state, clock, at, key);
        Ok(())
    }

    pub(crate) fn cancel_timer(
        &mut self,
        clock: Clock,
        at: Timestamp,
        key: &[u8],
    ) -> Result<(), OpError> {
        let timers = self.timers.as_deref_mut().ok_or_else(no_timers)?;
        timers.cancel(self.state, clock, at, key);
        Ok(())
    }

    pub(crate) fn now(&self, clock: Clock) -> Timestamp {
        self.clocks.now(clock)
    }

    /// Emits on the default output.
    pub(crate) fn emit(&mut self, record: Record) {
        self.out.push(Emit { output: 0, record });
    }

    /// Emits on a named output (its index in [`OperatorSpec::outputs`] + 1).
    pub(crate) fn emit_to(&mut self, output: usize, record: Record) {
        self.out.push(Emit { output, record });
    }

    pub(crate) fn count(&mut self, counter: NodeCounter, n: u64) {
        self.stats.add(counter, n);
    }

    pub(crate) fn gauge_add(&mut self, gauge: NodeGauge, delta: i64) {
        self.stats.gauge_add(gauge, delta);
    }

    /// Which of the node's inputs the current record came from.
    pub(crate) fn input(&self) -> usize {
        self.input
    }

    /// Where the record being processed was read: source (or repartition)
    /// topic, partition and offset. Records an upstream node emitted carry
    /// the position of the input record they came from. `None` in
    /// [`Operator::on_timer`] and [`Operator::count_gauges`].
    pub(crate) fn origin(&self) -> Option<&Origin<'_>> {
        self.origin
    }
}

fn no_timers() -> OpError {
    OpError::Internal("this operator declared no timers".into())
}

/// A running operator in one task.
pub(crate) trait Operator: Send {
    /// Sets the node's gauges from what its stores hold (open folds,
    /// queued counters), once the task's state is restored and before the
    /// first record. Called only when the state carries no gauges saved
    /// at its last commit: a new store, or one a restore replayed records
    /// into. A task that resumes its own local state takes the saved
    /// values instead of walking the stores.
    fn count_gauges(&mut self, _ctx: &mut Context<'_>) -> Result<(), OpError> {
        Ok(())
    }

    /// One record, in offset order within the task.
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError>;

    /// A timer this operator set came due.
    fn on_timer(&mut self, _timer: Timer, _ctx: &mut Context<'_>) -> Result<(), OpError> {
        Ok(())
    }
}

/// A capability an operator may declare when it is built
/// ([`BuiltOperator::Fieldwise`]): it reads nothing of a record but its
/// key, its timestamp and the values at a few JSON pointers (no headers),
/// so a task need not decode a whole value for it: one pass over the bytes
/// builds just those values ([`crate::record::json::Projection`]), which
/// [`FieldwiseOperator::process_fields`] takes.
pub(crate) trait FieldwiseOperator: Operator {
    /// The JSON pointers whose values are all this operator reads of a
    /// record's value.
    fn reads(&self) -> &[JsonPointer];

    /// One record, as [`Operator::process`] would take it, given as its
    /// key, its timestamp and the values at [`FieldwiseOperator::reads`]'
    /// pointers, in that order (`None`: absent). Must do exactly what
    /// `process` does with the whole record.
    fn process_fields(
        &mut self,
        key: Option<&[u8]>,
        timestamp: Timestamp,
        fields: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError>;
}

/// An operator as [`OperatorSpec::build`] makes it, with the ways it takes
/// records.
pub(crate) enum BuiltOperator {
    /// Takes whole records.
    Whole(Box<dyn Operator>),
    /// Takes whole records, or a record as the fields it reads.
    Fieldwise(Box<dyn FieldwiseOperator>),
}

impl BuiltOperator {
    /// An operator that takes whole records.
    pub(crate) fn whole(operator: impl Operator + 'static) -> BuiltOperator {
        BuiltOperator::Whole(Box::new(operator))
    }

    /// The operator, for whole records and timers.
    pub(crate) fn operator(&mut self) -> &mut dyn Operator {
        match self {
            BuiltOperator::Whole(operator) => operator.as_mut(),
            BuiltOperator::Fieldwise(operator) => operator.as_mut(),
        }
    }

    /// The operator's field-at-a-time way, if it declared one.
    pub(crate) fn fieldwise(&mut self) -> Option<&mut dyn FieldwiseOperator> {
        match self {
            BuiltOperator::Whole(_) => None,
            BuiltOperator::Fieldwise(operator) => Some(operator.as_mut()),
        }
    }

    /// The pointers a fieldwise operator reads; `None` for one that takes
    /// whole records only.
    pub(crate) fn reads(&self) -> Option<&[JsonPointer]> {
        match self {
            BuiltOperator::Whole(_) => None,
            BuiltOperator::Fieldwise(operator) => Some(operator.reads()),
        }
    }
}
