//! The running joins: a stream with a table, two tables, two streams.
//!
//! Table stores map a key to its latest row. Stream buffers are keyed
//! `entity_prefix(key) ++ ordered_i64(time) ++ topic fingerprint ++
//! ordered_i64(offset) ++ sequence`, so one key's records are a range in
//! time order and a record re-processed after an abort lands on the key it
//! had. Their timers are keyed by the side (one byte) and the buffer key.

use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::JoinType;
use crate::config::types::JsonPointer;
use crate::operators::expr::{Bindings, Program};
use crate::operators::keyed::{OnReject, ago, entity_prefix, ordered_i64, topic_fingerprint};
use crate::operators::{Context, OpError, Operator};
use crate::record::json::rfc3339_millis;
use crate::record::{Record, Timestamp};
use crate::state::global::GlobalTable;
use crate::state::timers::{Clock, Timer};
use crate::state::{JsonState, StoreHandle};
use crate::telemetry::NodeCounter;

/// A table's latest value of one key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct TableRow {
    pub(crate) value: Value,
    pub(crate) timestamp: Timestamp,
}

impl JsonState for TableRow {}

/// A stream record waiting in its join window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Buffered {
    pub(crate) value: Value,
    pub(crate) timestamp: Timestamp,
    /// Whether it joined a record of the other side.
    pub(crate) matched: bool,
}

impl JsonState for Buffered {}

/// How the joined value is made.
pub(crate) enum Build {
    /// `{<left>: ..., <right>: ...}`.
    Pair,
    /// A jq expression over the pair.
    Expression(Program),
    /// Output fields read from the pair.
    Fields(Vec<(String, JsonPointer)>),
}

/// The joined value of a node: its inputs' names and how to build it.
pub(crate) struct JoinedValue {
    pub(crate) left: String,
    pub(crate) right: String,
    pub(crate) build: Build,
}

impl JoinedValue {
    fn make(
        &self,
        left: Option<&Value>,
        right: Option<&Value>,
        bindings: &Bindings<'_>,
    ) -> Result<Value, OpError> {
        let mut pair = Map::with_capacity(2);
        pair.insert(self.left.clone(), left.cloned().unwrap_or(Value::Null));
        pair.insert(self.right.clone(), right.cloned().unwrap_or(Value::Null));
        let pair = Value::Object(pair);
        match &self.build {
            Build::Pair => Ok(pair),
            Build::Expression(program) => program
                .one(&pair, bindings, &[])
                .map_err(|e| OpError::Record(format!("value expression failed: {e}"))),
            Build::Fields(fields) => Ok(Value::Object(
                fields
                    .iter()
                    .map(|(name, pointer)| {
                        (
                            name.clone(),
                            pointer.get(&pair).cloned().unwrap_or(Value::Null),
                        )
                    })
                    .collect(),
            )),
        }
    }
}

fn stream_key(key: &Option<Box<[u8]>>) -> Result<&[u8], OpError> {
    key.as_deref().ok_or_else(|| {
        OpError::Record("record has no key to join by (give records a key or set `key_by`)".into())
    })
}

fn table_key(key: &Option<Box<[u8]>>) -> Result<&[u8], OpError> {
    key.as_deref().ok_or_else(|| {
        OpError::Record("a table record needs a key: the table holds one value per key".into())
    })
}

/// A stream joined with a table: input 0 the stream, input 1 the table.
pub(crate) struct StreamTable {
    pub(crate) table: StoreHandle<TableRow>,
    pub(crate) how: JoinType,
    pub(crate) value: JoinedValue,
}

impl Operator for StreamTable {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        if ctx.input() == 1 {
            let key = table_key(&record.key)?;
            let mut table = ctx.store(self.table);
            if record.value.is_null() {
                if table.get(key)?.is_some() {
                    table.delete(key);
                }
            } else {
                let row = TableRow {
                    value: record.value,
                    timestamp: record.timestamp,
                };
                table.put(key, row);
            }
            return Ok(());
        }
        let key = stream_key(&record.key)?;
        let bindings = Bindings::of(&record);
        let joined = match ctx.store(self.table).get(key)? {
            Some(row) => Some(
                self.value
                    .make(Some(&record.value), Some(&row.value), &bindings)?,
            ),
            None => None,
        };
        let value = match (joined, self.how) {
            (Some(value), _) => value,
            (None, JoinType::Inner) => {
                ctx.count(NodeCounter::JoinUnmatched, 1);
                ctx.count(NodeCounter::Dropped, 1);
                return Ok(());
            }
            (None, JoinType::Left | JoinType::Outer) => {
                ctx.count(NodeCounter::JoinUnmatched, 1);
                self.value.make(Some(&record.value), None, &bindings)?
            }
        };
        ctx.emit(Record {
            key: Some(key.into()),
            value,
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }
}

/// Where a stream record names the global table's row it joins.
pub(crate) enum TableKey {
    Pointer(JsonPointer),
    Expression(Program),
}

impl TableKey {
    /// The row's key for `record`: `None` when the record names none
    /// (the field is missing or `null`, or the expression gave `null`).
    fn of(&self, record: &Record, bindings: &Bindings<'_>) -> Result<Option<Box<[u8]>>, OpError> {
        let value = match self {
            TableKey::Pointer(pointer) => pointer.get(&record.value).cloned(),
            TableKey::Expression(program) => Some(
                program
                    .one(&record.value, bindings, &[])
                    .map_err(|e| OpError::Record(format!("table_key expression failed: {e}")))?,
            ),
        };
        Ok(value
            .filter(|v| !v.is_null())
            .map(|v| crate::record::json::key_bytes(&v)))
    }
}

/// A stream joined with a global table: input 0 the stream, input 1 the
/// table, whose records never reach the task (the instance reads them
/// into `table`).
pub(crate) struct StreamGlobal {
    pub(crate) table: Arc<dyn GlobalTable>,
    pub(crate) key: TableKey,
    pub(crate) how: JoinType,
    pub(crate) value: JoinedValue,
}

impl Operator for StreamGlobal {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let bindings = Bindings::of(&record);
        let Some(key) = self.key.of(&record, &bindings)? else {
            return Err(OpError::Record(
                "the record names no row of the global table: `table_key` is missing or null"
                    .into(),
            ));
        };
        let row = self.table.get(&key)?;
        let value = match (row, self.how) {
            (Some(row), _) => self
                .value
                .make(Some(&record.value), Some(&row), &bindings)?,
            (None, JoinType::Inner) => {
                ctx.count(NodeCounter::JoinUnmatched, 1);
                ctx.count(NodeCounter::Dropped, 1);
                return Ok(());
            }
            (None, JoinType::Left | JoinType::Outer) => {
                ctx.count(NodeCounter::JoinUnmatched, 1);
                self.value.make(Some(&record.value), None, &bindings)?
            }
        };
        ctx.emit(Record {
            key: record.key,
            value,
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }
}

/// Two tables joined: input 0 the left, input 1 the right.
pub(crate) struct TableTable {
    pub(crate) sides: [StoreHandle<TableRow>; 2],
    pub(crate) how: JoinType,
    pub(crate) value: JoinedValue,
}

impl TableTable {
    /// Whether a joined row exists with these sides present.
    fn exists(&self, left: bool, right: bool) -> bool {
        match self.how {
            JoinType::Inner => left && right,
            JoinType::Left => left,
            JoinType::Outer => left || right,
        }
    }
}

impl Operator for TableTable {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let side = ctx.input().min(1);
        let key = table_key(&record.key)?;
        let (this, other) = (self.sides[side], self.sides[1 - side]);
        let other_row = ctx.store(other).get(key)?.cloned();
        let had = ctx.store(this).get(key)?.is_some();
        let row = (!record.value.is_null()).then(|| TableRow {
            value: record.value.clone(),
            timestamp: record.timestamp,
        });
        let present = |this_side: bool| {
            let other_side = other_row.is_some();
            if side == 0 {
                (this_side, other_side)
            } else {
                (other_side, this_side)
            }
        };
        let (now_left, now_right) = present(row.is_some());
        let (was_left, was_right) = present(had);
        let out = if self.exists(now_left, now_right) {
            let bindings = Bindings::of(&record);
            let this_value = row.as_ref().map(|r| &r.value);
            let other_value = other_row.as_ref().map(|r| &r.value);
            let (left, right) = if side == 0 {
                (this_value, other_value)
            } else {
                (other_value, this_value)
            };
            let timestamp = other_row
                .as_ref()
                .map_or(record.timestamp, |r| r.timestamp.max(record.timestamp));
            Some((self.value.make(left, right, &bindings)?, timestamp))
        } else if self.exists(was_left, was_right) {
            // The joined row is gone: a tombstone retracts it.
            Some((Value::Null, record.timestamp))
        } else {
            None
        };
        match row {
            Some(row) => ctx.store(this).put(key, row),
            None if had => ctx.store(this).delete(key),
            None => {}
        }
        if let Some((value, timestamp)) = out {
            ctx.emit(Record {
                key: Some(key.into()),
                value,
                timestamp,
                headers: record.headers,
            });
        }
        Ok(())
    }
}

/// Two streams joined within a window of event time: input 0 the left,
/// input 1 the right.
pub(crate) struct StreamStream {
    sides: [StoreHandle<Buffered>; 2],
    how: JoinType,
    window: i64,
    grace: i64,
    on_late: OnReject,
    value: JoinedValue,
    /// The source position of the current input record and how many
    /// records it became here: one input record fanned out upstream into
    /// several keeps one buffer entry for each.
    position: Option<(u32, i64)>,
    sequence: u32,
}

/// The buffer key of a record of `key` at `at`, read at `position`, the
/// `sequence`-th record that position became.
fn buffer_key(key: &[u8], at: Timestamp, position: (u32, i64), sequence: u32) -> Vec<u8> {
    let mut out = entity_prefix(key);
    out.extend_from_slice(&ordered_i64(at));
    out.extend_from_slice(&position.0.to_be_bytes());
    out.extend_from_slice(&ordered_i64(position.1));
    out.extend_from_slice(&sequence.to_be_bytes());
    out
}

/// The group key a buffer key starts with.
fn key_of(buffer_key: &[u8]) -> Option<&[u8]> {
    let len = u32::from_be_bytes(buffer_key.get(..4)?.try_into().ok()?) as usize;
    buffer_key.get(4..4 + len)
}

fn time_bound(key: &[u8], at: Timestamp) -> Vec<u8> {
    let mut out = entity_prefix(key);
    out.extend_from_slice(&ordered_i64(at));
    out
}

impl StreamStream {
    pub(crate) fn new(
        sides: [StoreHandle<Buffered>; 2],
        how: JoinType,
        window: i64,
        grace: i64,
        on_late: OnReject,
        value: JoinedValue,
    ) -> StreamStream {
        StreamStream {
            sides,
            how,
            window,
            grace,
            on_late,
            value,
            position: None,
            sequence: 0,
        }
    }

    /// Whether a record of `side` that never matched is emitted alone.
    fn emits_unmatched(&self, side: usize) -> bool {
        match self.how {
            JoinType::Inner => false,
            JoinType::Left => side == 0,
            JoinType::Outer => true,
        }
    }

    fn late(&self, record: &Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        ctx.count(NodeCounter::JoinLate, 1);
        match self.on_late {
            OnReject::Drop => {
                ctx.count(NodeCounter::Dropped, 1);
                Ok(())
            }
            OnReject::DeadLetter => {
                let closed = record
                    .timestamp
                    .saturating_add(self.window)
                    .saturating_add(self.grace);
                Err(OpError::Record(format!(
                    "late: the join window of this record (time {}) closed {} ago, with the grace period",
                    rfc3339_millis(record.timestamp),
                    ago(ctx.now(Clock::Event), closed),
                )))
            }
        }
    }
}

impl Operator for StreamStream {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let side = ctx.input().min(1);
        let key = stream_key(&record.key)?;
        let t = record.timestamp;
        let closes = t.saturating_add(self.window).saturating_add(self.grace);
        if ctx.now(Clock::Event) > closes {
            return self.late(&record, ctx);
        }
        let here = ctx
            .origin()
            .map_or((0, 0), |o| (topic_fingerprint(o.topic), o.offset));
        if Some(here) == self.position {
            self.sequence = self.sequence.wrapping_add(1);
        } else {
            self.position = Some(here);
            self.sequence = 0;
        }
        let (this, other) = (self.sides[side], self.sides[1 - side]);
        let from = time_bound(key, t.saturating_sub(self.window));
        // Records at `i64::MAX` itself are past any real clock.
        let to = time_bound(key, t.saturating_add(self.window).saturating_add(1));
        let partners = ctx.store(other).range(
            Bound::Included(from.as_slice()),
            Bound::Excluded(to.as_slice()),
            usize::MAX,
        )?;
        // Every joined value first: a failing expression dead-letters the
        // record before anything changed.
        let bindings = Bindings::of(&record);
        let mut joined = Vec::with_capacity(partners.len());
        for (_, partner) in &partners {
            let (left, right) = if side == 0 {
                (&record.value, &partner.value)
            } else {
                (&partner.value, &record.value)
            };
            joined.push(self.value.make(Some(left), Some(right), &bindings)?);
        }
        let matched = !partners.is_empty();
        let own = buffer_key(key, t, here, self.sequence);
        let expires = closes.saturating_add(self.window).saturating_add(1);
        let mut timer = Vec::with_capacity(own.len() + 1);
        timer.push(side as u8);
        timer.extend_from_slice(&own);
        ctx.set_timer(Clock::Event, expires, &timer)?;
        let mut others = ctx.store(other);
        for (partner_key, partner) in &partners {
            if !partner.matched {
                let mut partner = partner.clone();
                partner.matched = true;
                others.put(partner_key, partner);
            }
        }
        ctx.store(this).put(
            &own,
            Buffered {
                value: record.value,
                timestamp: t,
                matched,
            },
        );
        for ((_, partner), value) in partners.iter().zip(joined) {
            ctx.emit(Record {
                key: Some(key.into()),
                value,
                timestamp: t.max(partner.timestamp),
                headers: record.headers.clone(),
            });
        }
        Ok(())
    }

    fn on_timer(&mut self, timer: Timer, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some((&side, own)) = timer.key.split_first() else {
            return Ok(());
        };
        let side = usize::from(side).min(1);
        let Some(entry) = ctx.store(self.sides[side]).take(own)? else {
            return Ok(());
        };
        ctx.count(NodeCounter::JoinExpired, 1);
        if entry.matched {
            return Ok(());
        }
        ctx.count(NodeCounter::JoinUnmatched, 1);
        if !self.emits_unmatched(side) {
            ctx.count(NodeCounter::Dropped, 1);
            return Ok(());
        }
        let key = key_of(own)
            .ok_or_else(|| OpError::Internal("a join buffer key without its group key".into()))?;
        let bindings = Bindings {
            key: Some(key),
            timestamp: entry.timestamp,
            headers: &[],
        };
        let value = if side == 0 {
            self.value.make(Some(&entry.value), None, &bindings)?
        } else {
            self.value.make(None, Some(&entry.value), &bindings)?
        };
        ctx.emit(Record::new(Some(key.into()), value, entry.timestamp));
        Ok(())
    }
}
