//! `rollup`: Netflix's distributed counter — exact counts from an event
//! log, rolled up over immutable windows.
//!
//! Writes to a counter are events: the counter's name (the record key, or
//! `key_by`), a delta, an idempotency token and an event time (the record
//! timestamp — set `timestamp` on the source to read it from a field). The
//! node keeps a counter's events by time and token, so a retried write —
//! same token, same event time — counts once. Every event also triggers a
//! rollup of its counter; so do *read triggers*, records on the node's
//! second and further inputs whose key names a counter (the article's read
//! path: reading a counter asks for a fresh rollup). Triggers for one
//! counter coalesce: the first one schedules a rollup `coalesce` later and
//! the ones before it are absorbed.
//!
//! A rollup at clock time `now` aggregates only the events of the window
//! `(last_rollup_ts, now - accept_limit]` into the counter's checkpoint
//! `(value, last_rollup_ts)`, stores the new checkpoint, forgets the events
//! it folded in and emits
//!
//! ```json
//! {"counter": "likes:post_1", "value": 42, "last_rollup_ts": "2025-01-01T00:00:55.000Z"}
//! ```
//!
//! keyed by the counter, for a compacted topic. Events must arrive within
//! `accept_limit` of their time, so a window that ends `accept_limit` ago
//! is final: rolling it up again, or later, gives the same value — no
//! locks, whatever the trigger timing. An event at or before its counter's
//! `last_rollup_ts` arrived too late for that promise: it is counted and
//! dropped, or dead-lettered with `on_late: dead_letter`. (A retry of an
//! event already rolled up is such an event: it counted once.)
//!
//! A reset (`ClearCount`) is an event the `reset_when` condition holds
//! for: the counter restarts from 0 at its event time, before the deltas
//! of the same millisecond. Deltas are integers (`delta` names the field;
//! without it every event counts 1); sums saturate at the 64-bit range.
//!
//! After a rollup, a counter that still has events waiting (newer than its
//! window) is scheduled again `coalesce` later: busy counters keep rolling
//! up. One whose events are all rolled up leaves circulation (cold
//! counters drain) until its next event or read. Due counters are rolled
//! up `batch_size` per timer firing, in the order they became due; the rest
//! wait for the next firing (the next punctuation tick on the processing
//! clock), which bounds the work one tick does.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `token` | JSON pointer to the idempotency token |
//! | `delta` | JSON pointer to the integer delta (default: each event counts 1) |
//! | `reset_when` | jq condition marking a reset (`.op == "ClearCount"`) |
//! | `coalesce` | window in which a counter's triggers coalesce (`10s`) |
//! | `accept_limit` | how late an event may arrive (`5s`) |
//! | `batch_size` | counters rolled up per timer firing (default 256) |
//! | `clock` | `processing` (default) or `event` |
//! | `on_late` | `drop` (default) or `dead_letter` |
//! | `counter_field` | output field with the counter name (default: last segment of `key_by`, else `counter`) |
//!
//! ```yaml
//! rollup_counters:
//!   type: rollup
//!   input: [counter_events, counter_reads]
//!   key_by: /counter
//!   token: /token
//!   delta: /delta
//!   reset_when: '.op == "ClearCount"'
//!   coalesce: 10s
//!   accept_limit: 5s
//!   batch_size: 32
//! ```
//!
//! With `clock: processing` (the article's), `now` is the wall clock;
//! replaying a backlog of old events then rolls up windows whose events
//! have not all been read yet, and those arrive late. `clock: event` uses
//! the task's event time, which moves with the records, and is the safe
//! choice for replays.
//!
//! State: `<node>-checkpoints` (per counter: value, last rollup time and
//! when it is due), `<node>-events` (events not rolled up yet, by counter,
//! time and token), `<node>-queue` (due counters by due time) and
//! `<node>-timers`. Counters: `streamfold_rollup_rollups_total`,
//! `streamfold_rollup_duplicate_events_total`,
//! `streamfold_rollup_late_events_total`,
//! `streamfold_rollup_unknown_counter_reads_total`; gauge
//! `streamfold_rollup_queued_counters`.

use std::num::NonZeroUsize;
use std::ops::Bound;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::expr::{Bindings, Expression, Program, check, compile_for_build};
use super::keyed::{
    OnReject, ago, entity_prefix, from_ordered_i64, id_bytes, legal_name, ordered_i64, required,
};
use super::{BuiltOperator, Context, Issue, NodeInfo, NodeInput, OpError, Operator, OperatorSpec};
use crate::config::types::{HumanDuration, JsonPointer};
use crate::record::json::{rfc3339_millis, type_name};
use crate::record::{Record, Timestamp, key_text};
use crate::state::timers::{Clock, Timer};
use crate::state::{JsonState, StateError, StateSet, StoreHandle, prefix_end};
use crate::telemetry::{NodeCounter, NodeGauge};

/// Options of a `rollup` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct RollupConfig {
    /// JSON pointer to the event's idempotency token: a retried write
    /// carries the same token and event time, and counts once.
    pub(crate) token: JsonPointer,
    /// JSON pointer to the event's delta, an integer. Without it, every
    /// event counts 1.
    #[serde(default)]
    pub(crate) delta: Option<JsonPointer>,
    /// jq condition marking a reset event (`ClearCount`): the counter
    /// restarts from 0 at the event's time.
    #[serde(default)]
    pub(crate) reset_when: Option<Expression>,
    /// Triggers of one counter within this window coalesce into one rollup.
    pub(crate) coalesce: HumanDuration,
    /// How late an event may arrive after its event time. Rollups aggregate
    /// only events older than `now - accept_limit`, so every window they
    /// read is final.
    pub(crate) accept_limit: HumanDuration,
    /// Counters rolled up per timer firing; the rest wait for the next one.
    /// Default 256.
    #[serde(default = "default_batch_size")]
    pub(crate) batch_size: NonZeroUsize,
    /// Clock for coalescing and windows: `processing` (wall clock,
    /// default) or `event` (record time, advanced per task).
    #[serde(default)]
    pub(crate) clock: Clock,
    /// What happens to an event at or before its counter's last rollup:
    /// `drop` (default, counted) or `dead_letter`.
    #[serde(default)]
    pub(crate) on_late: OnReject,
    /// Output field carrying the counter name. Defaults to the last segment
    /// of `key_by`, else `counter`.
    #[serde(default)]
    pub(crate) counter_field: Option<String>,
}

fn default_batch_size() -> NonZeroUsize {
    NonZeroUsize::new(256).unwrap_or(NonZeroUsize::MIN)
}

impl RollupConfig {
    fn counter_field(&self, node: &NodeInfo<'_>) -> String {
        self.counter_field
            .clone()
            .or_else(|| node.key_by.and_then(|p| p.last_token()).map(str::to_string))
            .unwrap_or_else(|| "counter".to_string())
    }
}

impl OperatorSpec for RollupConfig {
    /// Checkpoints: each counter's value as of its last rollup.
    fn queryable_store(&self, _inputs: &[NodeInput]) -> Option<&'static str> {
        Some("checkpoints")
    }

    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        &["checkpoints", "events", "queue"]
    }

    fn uses_timers(&self) -> bool {
        true
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[
            NodeCounter::Dropped,
            NodeCounter::RollupDuplicates,
            NodeCounter::RollupLate,
            NodeCounter::RollupRollups,
            NodeCounter::RollupUnknownReads,
        ]
    }

    fn gauges(&self) -> &'static [NodeGauge] {
        &[NodeGauge::RollupQueued]
    }

    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if self.token.last_token().is_none() {
            issues.push(Issue::new(
                &["token"],
                "must point to a field of the event, such as `/token`",
            ));
        }
        if self.coalesce.under_a_millisecond() {
            issues.push(Issue::new(
                &["coalesce"],
                "must be at least 1ms, or every event would roll its counter up on its own",
            ));
        }
        if let Some(reset) = &self.reset_when
            && let Some(error) = check(reset, &[])
        {
            issues.push(Issue::new(&["reset_when"], error.to_string()));
        }
        let field = self.counter_field(node);
        if !legal_name(&field) || matches!(field.as_str(), "value" | "last_rollup_ts") {
            issues.push(Issue::new(
                &["counter_field"],
                format!(
                    "`{field}` cannot carry the counter name: use letters, digits, `_` and `-`, other than `value` and `last_rollup_ts`"
                ),
            ));
        }
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        Ok(BuiltOperator::whole(Rollup {
            checkpoints: state.declare(&node.store_name("checkpoints"))?,
            events: state.declare(&node.store_name("events"))?,
            queue: state.declare(&node.store_name("queue"))?,
            token: self.token.clone(),
            delta: self.delta.clone(),
            reset_when: match &self.reset_when {
                Some(reset) => Some(compile_for_build(reset, &[], "reset_when")?),
                None => None,
            },
            coalesce: self.coalesce.as_millis(),
            accept_limit: self.accept_limit.as_millis(),
            batch_size: self.batch_size.get(),
            clock: self.clock,
            on_late: self.on_late,
            counter_field: self.counter_field(node),
        }))
    }
}

/// A counter's rolled-up state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    /// The count as of `last_rollup_ts`.
    pub(crate) value: i64,
    /// End of the last window rolled up; events at or before it are late.
    pub(crate) last_rollup_ts: Option<Timestamp>,
    /// When the counter's next rollup is due, while it is in circulation.
    pub(crate) due: Option<Timestamp>,
}

impl JsonState for Checkpoint {}

/// A counter event not rolled up yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CounterEvent {
    pub(crate) delta: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) reset: bool,
}

impl JsonState for CounterEvent {}

/// Events of one millisecond are applied resets first, then by token.
const RESET: u8 = 0;
const ADD: u8 = 1;

/// The one timer of the node: when the earliest queued counter is due.
const QUEUE_TIMER: &[u8] = b"";

struct Rollup {
    checkpoints: StoreHandle<Checkpoint>,
    events: StoreHandle<CounterEvent>,
    queue: StoreHandle<()>,
    token: JsonPointer,
    delta: Option<JsonPointer>,
    reset_when: Option<Program>,
    coalesce: i64,
    accept_limit: i64,
    batch_size: usize,
    clock: Clock,
    on_late: OnReject,
    counter_field: String,
}

fn queue_key(due: Timestamp, counter: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + counter.len());
    key.extend_from_slice(&ordered_i64(due));
    key.extend_from_slice(counter);
    key
}

impl Rollup {
    /// Schedules a rollup of `counter` unless one is already scheduled.
    fn trigger(
        &self,
        counter: &[u8],
        checkpoint: &mut Checkpoint,
        now: Timestamp,
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        if checkpoint.due.is_some() {
            return Ok(());
        }
        let due = now.saturating_add(self.coalesce);
        checkpoint.due = Some(due);
        ctx.store(self.queue).put(&queue_key(due, counter), ());
        ctx.set_timer(self.clock, due, QUEUE_TIMER)?;
        ctx.gauge_add(NodeGauge::RollupQueued, 1);
        Ok(())
    }

    fn delta(&self, value: &Value) -> Result<i64, String> {
        let Some(pointer) = &self.delta else {
            return Ok(1);
        };
        match required(pointer, value, "delta")? {
            Value::Number(n) if n.as_i64().is_some() => Ok(n.as_i64().unwrap_or(0)),
            other => Err(format!(
                "delta {pointer} must be an integer, found {}",
                match other {
                    Value::Number(n) => n.to_string(),
                    other => type_name(other).to_string(),
                }
            )),
        }
    }

    fn rollup(&self, counter: &[u8], now: Timestamp, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some(mut checkpoint) = ctx.store(self.checkpoints).get(counter)?.cloned() else {
            return Ok(());
        };
        if checkpoint.due.take().is_some() {
            ctx.gauge_add(NodeGauge::RollupQueued, -1);
        }
        let end = now.saturating_sub(self.accept_limit);
        let prefix = entity_prefix(counter);
        let after_window = {
            let mut key = prefix.clone();
            key.extend_from_slice(&ordered_i64(end.saturating_add(1)));
            key
        };
        if checkpoint.last_rollup_ts.is_none_or(|last| end > last) {
            let mut from = prefix.clone();
            if let Some(last) = checkpoint.last_rollup_ts {
                from.extend_from_slice(&ordered_i64(last.saturating_add(1)));
            }
            let mut events = ctx.store(self.events);
            let window = events.range(
                Bound::Included(&from),
                Bound::Excluded(&after_window),
                usize::MAX,
            )?;
            let mut value = checkpoint.value;
            for (key, event) in &window {
                value = if event.reset {
                    0
                } else {
                    value.saturating_add(event.delta)
                };
                events.delete(key);
            }
            checkpoint.value = value;
            checkpoint.last_rollup_ts = Some(end);
            ctx.count(NodeCounter::RollupRollups, 1);
            let mut out = Map::new();
            out.insert(self.counter_field.clone(), Value::String(key_text(counter)));
            out.insert("value".into(), Value::from(value));
            out.insert("last_rollup_ts".into(), Value::String(rfc3339_millis(end)));
            ctx.emit(Record::new(Some(counter.into()), Value::Object(out), now));
        }
        // Events newer than the window keep the counter in circulation.
        let upper = prefix_end(&prefix);
        let waiting = ctx.store(self.events).range(
            Bound::Included(&prefix),
            match &upper {
                Some(end) => Bound::Excluded(end.as_slice()),
                None => Bound::Unbounded,
            },
            1,
        )?;
        if !waiting.is_empty() {
            self.trigger(counter, &mut checkpoint, now, ctx)?;
        }
        ctx.store(self.checkpoints).put(counter, checkpoint);
        Ok(())
    }
}

impl Operator for Rollup {
    fn count_gauges(&mut self, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let queued = ctx.store(self.queue).count()?;
        ctx.gauge_add(
            NodeGauge::RollupQueued,
            i64::try_from(queued).unwrap_or(i64::MAX),
        );
        Ok(())
    }

    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some(counter) = record.key.as_deref() else {
            return Err(OpError::Record(
                "record has no counter name (give records a key or set `key_by`)".into(),
            ));
        };
        let now = ctx.now(self.clock);
        if ctx.input() > 0 {
            // A read trigger.
            let Some(mut checkpoint) = ctx.store(self.checkpoints).get(counter)?.cloned() else {
                ctx.count(NodeCounter::RollupUnknownReads, 1);
                ctx.count(NodeCounter::Dropped, 1);
                return Ok(());
            };
            if checkpoint.due.is_none() {
                self.trigger(counter, &mut checkpoint, now, ctx)?;
                ctx.store(self.checkpoints).put(counter, checkpoint);
            }
            return Ok(());
        }
        let token = id_bytes(
            required(&self.token, &record.value, "idempotency token").map_err(OpError::Record)?,
        );
        let reset = match &self.reset_when {
            Some(condition) => condition
                .test(&record.value, &Bindings::of(&record))
                .map_err(|e| OpError::Record(format!("reset_when failed: {e}")))?,
            None => false,
        };
        // A reset carries no delta.
        let delta = if reset {
            0
        } else {
            self.delta(&record.value).map_err(OpError::Record)?
        };
        let time = record.timestamp;
        let mut checkpoint = ctx
            .store(self.checkpoints)
            .get(counter)?
            .cloned()
            .unwrap_or_default();
        if let Some(last) = checkpoint.last_rollup_ts
            && time <= last
        {
            ctx.count(NodeCounter::RollupLate, 1);
            return match self.on_late {
                OnReject::Drop => {
                    ctx.count(NodeCounter::Dropped, 1);
                    Ok(())
                }
                OnReject::DeadLetter => Err(OpError::Record(format!(
                    "late event for counter `{}`: its time {} is {} before the last rollup ({}); events must arrive within accept_limit",
                    key_text(counter),
                    rfc3339_millis(time),
                    ago(last, time),
                    rfc3339_millis(last),
                ))),
            };
        }
        let mut key = entity_prefix(counter);
        key.extend_from_slice(&ordered_i64(time));
        key.push(if reset { RESET } else { ADD });
        key.extend_from_slice(&token);
        let mut events = ctx.store(self.events);
        if events.get(&key)?.is_some() {
            ctx.count(NodeCounter::RollupDuplicates, 1);
            ctx.count(NodeCounter::Dropped, 1);
            return Ok(());
        }
        events.put(&key, CounterEvent { delta, reset });
        let was_due = checkpoint.due;
        let known = checkpoint.last_rollup_ts.is_some() || was_due.is_some();
        self.trigger(counter, &mut checkpoint, now, ctx)?;
        if !known || checkpoint.due != was_due {
            ctx.store(self.checkpoints).put(counter, checkpoint);
        }
        Ok(())
    }

    fn on_timer(&mut self, _timer: Timer, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let now = ctx.now(self.clock);
        let upto = ordered_i64(now.saturating_add(1));
        let due = ctx.store(self.queue).range(
            Bound::Unbounded,
            Bound::Excluded(&upto[..]),
            self.batch_size,
        )?;
        for (key, ()) in &due {
            ctx.store(self.queue).delete(key);
            // Queue keys are the due time (8 bytes) and the counter.
            if let Some(counter) = key.get(8..) {
                self.rollup(counter, now, ctx)?;
            }
        }
        if due.len() == self.batch_size {
            let more =
                ctx.store(self.queue)
                    .range(Bound::Unbounded, Bound::Excluded(&upto[..]), 1)?;
            if let Some((key, ())) = more.first() {
                // Still due: the next firing takes the next batch.
                let at = from_ordered_i64(key).map_or(now, |due| due.max(now));
                ctx.set_timer(self.clock, at.saturating_add(1), QUEUE_TIMER)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{Harness, record, values};
    use super::*;

    const S: i64 = 1_000;

    fn counter() -> Harness {
        Harness::new(
            json!({
                "type": "rollup", "token": "/token", "delta": "/delta",
                "reset_when": ".op == \"ClearCount\"",
                "coalesce": "10s", "accept_limit": "5s", "batch_size": 2,
            }),
            Some("/counter"),
        )
    }

    fn add(name: &str, token: &str, delta: i64, at: Timestamp) -> Record {
        record(
            name,
            json!({"counter": name, "token": token, "delta": delta, "op": "AddCount"}),
            at,
        )
    }

    #[test]
    fn retried_writes_count_once_and_windows_roll_up_into_the_checkpoint() {
        let mut h = counter();
        h.process(add("likes", "t1", 2, 0)).unwrap();
        h.process(add("likes", "t2", 3, S)).unwrap();
        h.process(add("likes", "t1", 2, 0)).unwrap();
        assert_eq!(h.count(NodeCounter::RollupDuplicates), 1);
        // Coalesced: one rollup 10 s after the first trigger, over (.., 5s].
        let out = h.advance(Clock::Processing, 10 * S).unwrap();
        assert_eq!(
            values(&out),
            vec![
                json!({"counter": "likes", "value": 5, "last_rollup_ts": "1970-01-01T00:00:05.000Z"})
            ]
        );
        // Its events are folded in: the counter drained.
        assert!(h.advance(Clock::Processing, 60 * S).unwrap().is_empty());
        assert_eq!(h.stats.gauge(NodeGauge::RollupQueued), 0);
    }

    #[test]
    fn busy_counters_keep_rolling_up_until_their_events_are_in() {
        let mut h = counter();
        h.process(add("likes", "t1", 1, 0)).unwrap();
        h.clocks.processing = 8 * S;
        h.process(add("likes", "t2", 1, 8 * S)).unwrap();
        let first = h.advance(Clock::Processing, 10 * S).unwrap();
        assert_eq!(
            first[0].record.value["value"],
            json!(1),
            "t2 is not final yet"
        );
        // t2 is still waiting, so the counter comes back 10 s later.
        let second = h.advance(Clock::Processing, 20 * S).unwrap();
        assert_eq!(second[0].record.value["value"], json!(2));
        assert!(h.advance(Clock::Processing, 40 * S).unwrap().is_empty());
    }

    #[test]
    fn clear_count_restarts_from_zero_at_its_time() {
        let mut h = counter();
        h.process(add("likes", "t1", 5, 0)).unwrap();
        let clear = record(
            "likes",
            json!({"counter": "likes", "token": "t2", "op": "ClearCount"}),
            S,
        );
        h.process(clear).unwrap();
        h.process(add("likes", "t3", 4, S)).unwrap();
        let out = h.advance(Clock::Processing, 10 * S).unwrap();
        assert_eq!(out[0].record.value["value"], json!(4));
    }

    #[test]
    fn late_events_are_counted_and_dropped_and_reads_trigger_rollups() {
        let mut h = counter();
        h.process(add("likes", "t1", 1, 0)).unwrap();
        h.advance(Clock::Processing, 10 * S).unwrap();
        h.process(add("likes", "t0", 1, 4 * S)).unwrap();
        assert_eq!(h.count(NodeCounter::RollupLate), 1);
        // A read of a known counter schedules a rollup; of an unknown one,
        // nothing.
        h.process_at(record("likes", json!({"counter": "likes"}), 0), 99, 1)
            .unwrap();
        h.process_at(record("views", json!({"counter": "views"}), 0), 100, 1)
            .unwrap();
        assert_eq!(h.count(NodeCounter::RollupUnknownReads), 1);
        let out = h.advance(Clock::Processing, 20 * S).unwrap();
        assert_eq!(
            values(&out),
            vec![
                json!({"counter": "likes", "value": 1, "last_rollup_ts": "1970-01-01T00:00:15.000Z"})
            ]
        );
    }

    #[test]
    fn due_counters_roll_up_a_batch_per_firing() {
        let mut h = counter();
        for name in ["a", "b", "c", "d", "e"] {
            h.process(add(name, "t", 1, 0)).unwrap();
        }
        assert_eq!(h.stats.gauge(NodeGauge::RollupQueued), 5);
        assert_eq!(h.advance(Clock::Processing, 10 * S).unwrap().len(), 2);
        assert_eq!(h.advance(Clock::Processing, 10 * S + 1).unwrap().len(), 2);
        assert_eq!(h.advance(Clock::Processing, 10 * S + 2).unwrap().len(), 1);
        assert_eq!(h.stats.gauge(NodeGauge::RollupQueued), 0);
    }

    #[test]
    fn bad_deltas_are_the_record_s_fault() {
        let mut h = counter();
        let err = h
            .process(record("likes", json!({"token": "t", "delta": 1.5}), 0))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "delta /delta must be an integer, found 1.5"
        );
        let err = h
            .process(record("likes", json!({"delta": 1}), 0))
            .unwrap_err();
        assert_eq!(err.to_string(), "idempotency token /token is missing");
    }
}
