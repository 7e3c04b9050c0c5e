//! Unit-test harness: one operator over the in-memory backend, fed records
//! with source positions, its timers fired by hand, state committed after
//! every step as the offline driver does.

use serde_json::Value;

use super::{BuiltOperator, Clocks, Context, Emit, NodeInfo, NodeInput, NodeKind, OpError};
use crate::config::types::JsonPointer;
use crate::record::{Origin, Record, Timestamp};
use crate::state::memory::MemoryBackend;
use crate::state::timers::{Clock, TimerState};
use crate::state::{StateSet, StateValue, StoreDef, StoreHandle, StoreView};
use crate::telemetry::{NodeCounter, NodeStats};

pub(crate) const TOPIC: &str = "in";

pub(crate) struct Harness {
    kind: NodeKind,
    key_by: Option<JsonPointer>,
    inputs: Vec<NodeInput>,
    pub(crate) state: StateSet,
    timers: Option<TimerState>,
    operator: BuiltOperator,
    pub(crate) stats: NodeStats,
    pub(crate) clocks: Clocks,
    next_offset: i64,
}

impl Harness {
    /// The node `n` with the operator described by `options` (the node's
    /// YAML as JSON, with `type`), grouping by `key_by` when given.
    pub(crate) fn new(options: Value, key_by: Option<&str>) -> Harness {
        Harness::with_inputs(options, key_by, &[])
    }

    /// As [`Harness::new`], for a node whose inputs are `inputs` (name,
    /// and whether it is a table).
    pub(crate) fn with_inputs(
        options: Value,
        key_by: Option<&str>,
        inputs: &[(&str, bool)],
    ) -> Harness {
        let kind: NodeKind = serde_json::from_value(options).expect("valid operator options");
        let key_by = key_by.map(|p| JsonPointer::parse(p).unwrap());
        let inputs: Vec<NodeInput> = inputs
            .iter()
            .map(|&(name, table)| NodeInput {
                name: name.to_string(),
                table,
                global: false,
            })
            .collect();
        let info = NodeInfo {
            name: "n",
            key_by: key_by.as_ref(),
            max_record_bytes: crate::record::DEFAULT_MESSAGE_MAX_BYTES,
            inputs: &inputs,
        };
        let spec = kind.spec();
        let mut issues = Vec::new();
        spec.validate(&info, &mut issues);
        assert!(issues.is_empty(), "{issues:?}");
        let names: Vec<String> = kind
            .stores(&inputs, info.key_by.is_some())
            .into_iter()
            .map(|s| info.store_name(s))
            .collect();
        let mut state = StateSet::new(Box::new(MemoryBackend::new(names.len())), names);
        let operator = spec.build(&info, &mut state).unwrap();
        let timers = spec
            .uses_timers()
            .then(|| TimerState::declare(&mut state, &info.store_name(StoreDef::TIMERS)).unwrap());
        let mut harness = Harness {
            kind: kind.clone(),
            key_by: key_by.clone(),
            inputs: inputs.clone(),
            state,
            timers,
            operator,
            stats: NodeStats::default(),
            clocks: Clocks::default(),
            next_offset: 0,
        };
        let mut out = Vec::new();
        let mut ctx = Context {
            state: &mut harness.state,
            timers: harness.timers.as_mut(),
            out: &mut out,
            stats: &mut harness.stats,
            clocks: harness.clocks,
            input: 0,
            origin: None,
        };
        harness.operator.operator().count_gauges(&mut ctx).unwrap();
        harness
    }

    /// A new instance of the operator over the same (committed) state, as
    /// after a restart.
    pub(crate) fn restart(&mut self) {
        let info = NodeInfo {
            name: "n",
            key_by: self.key_by.as_ref(),
            max_record_bytes: crate::record::DEFAULT_MESSAGE_MAX_BYTES,
            inputs: &self.inputs,
        };
        let spec = self.kind.spec();
        self.operator = spec.build(&info, &mut self.state).unwrap();
        if spec.uses_timers() {
            let timers = info.store_name(StoreDef::TIMERS);
            self.timers = Some(TimerState::declare(&mut self.state, &timers).unwrap());
        }
        let mut out = Vec::new();
        let mut ctx = Context {
            state: &mut self.state,
            timers: self.timers.as_mut(),
            out: &mut out,
            stats: &mut self.stats,
            clocks: self.clocks,
            input: 0,
            origin: None,
        };
        self.operator.operator().count_gauges(&mut ctx).unwrap();
    }

    /// Feeds `record` as read at the next offset of [`TOPIC`].
    pub(crate) fn process(&mut self, record: Record) -> Result<Vec<Emit>, OpError> {
        let offset = self.next_offset;
        self.next_offset += 1;
        self.process_at(record, offset, 0)
    }

    /// Feeds `record` as read at `offset`, on the node's `input`-th input.
    pub(crate) fn process_at(
        &mut self,
        record: Record,
        offset: i64,
        input: usize,
    ) -> Result<Vec<Emit>, OpError> {
        self.clocks.event = self.clocks.event.max(record.timestamp);
        let origin = Origin {
            topic: TOPIC,
            partition: 0,
            offset,
            key: None,
            payload: None,
            headers: &[],
        };
        let mut out = Vec::new();
        let result = {
            let mut ctx = Context {
                state: &mut self.state,
                timers: self.timers.as_mut(),
                out: &mut out,
                stats: &mut self.stats,
                clocks: self.clocks,
                input,
                origin: Some(&origin),
            };
            self.operator.operator().process(record, &mut ctx)
        };
        self.commit();
        result.map(|()| out)
    }

    /// Moves `clock` to `now` and fires what is due.
    pub(crate) fn advance(&mut self, clock: Clock, now: Timestamp) -> Result<Vec<Emit>, OpError> {
        match clock {
            Clock::Processing => self.clocks.processing = now,
            Clock::Event => self.clocks.event = now,
        }
        let mut out = Vec::new();
        while let Some(timers) = &mut self.timers {
            let due = timers.due(&mut self.state, clock, now, 1024).unwrap();
            if due.is_empty() {
                break;
            }
            for timer in due {
                let mut ctx = Context {
                    state: &mut self.state,
                    timers: self.timers.as_mut(),
                    out: &mut out,
                    stats: &mut self.stats,
                    clocks: self.clocks,
                    input: 0,
                    origin: None,
                };
                self.operator.operator().on_timer(timer, &mut ctx)?;
            }
        }
        self.commit();
        Ok(out)
    }

    fn commit(&mut self) {
        let entries = self.state.changelog().unwrap();
        self.state.committed(entries, &[]).unwrap();
    }

    pub(crate) fn count(&self, counter: NodeCounter) -> u64 {
        self.stats.get(counter)
    }

    /// A view of one of the node's stores, for assertions on state.
    pub(crate) fn store<V: StateValue>(&mut self, name: &str) -> StoreView<'_, V> {
        let handle: StoreHandle<V> = self.state.declare(&format!("n-{name}")).unwrap();
        self.state.view(handle)
    }
}

/// A record with a text key.
pub(crate) fn record(key: &str, value: Value, timestamp: Timestamp) -> Record {
    Record::new(Some(key.as_bytes().into()), value, timestamp)
}

/// The values of emitted records.
pub(crate) fn values(out: &[Emit]) -> Vec<Value> {
    out.iter().map(|e| e.record.value.clone()).collect()
}
