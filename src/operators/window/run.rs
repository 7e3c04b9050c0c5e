//! The running `window` operator: which windows a record falls in, when
//! they close, what they emit.
//!
//! Store keys are `entity_prefix(key) ++ ordered_i64(start)` (for sliding
//! windows, the start is a bucket's record time), so one key's windows are
//! a range in start order. Timer keys are a store key plus one byte naming
//! what is due: [`CLOSE`] (emit the final result) or [`EXPIRE`] (delete the
//! state). Sliding windows have their close timers keyed by window start
//! and their expiry timers by bucket.

use std::ops::Bound;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use smallvec::SmallVec;

use super::{EmitMode, Shape, WindowKind};
use crate::operators::keyed::{OnReject, ago, entity_prefix, from_ordered_i64, ordered_i64};
use crate::operators::merge::{Acc, FieldRule, Sum, check, contribution};
use crate::operators::{Context, OpError, Operator};
use crate::record::json::rfc3339_millis;
use crate::record::{Record, Timestamp, key_text};
use crate::state::timers::{Clock, Timer};
use crate::state::{JsonState, StoreHandle};
use crate::telemetry::NodeCounter;

/// Timer tag: the window closes (its final result is emitted).
const CLOSE: u8 = 0;
/// Timer tag: the window's (or bucket's) state is deleted.
const EXPIRE: u8 = 1;

/// One window as stored; for sliding windows, one bucket: the records of
/// one key at one time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredWindow {
    /// Window start (a bucket's time).
    start: Timestamp,
    /// Window end: exclusive for tumbling and hopping windows, a session's
    /// last record time, a bucket's time.
    end: Timestamp,
    /// The latest record time in it: the timestamp of what it emits.
    latest: Timestamp,
    /// Records merged into it.
    records: u64,
    /// One accumulator per output field, in declaration order.
    acc: Vec<Acc>,
}

impl JsonState for StoredWindow {}

/// What a window is, as emitted.
struct Span {
    start: Timestamp,
    end: Timestamp,
}

pub(crate) struct Window {
    shape: Shape,
    store: StoreHandle<StoredWindow>,
    emit: EmitMode,
    on_late: OnReject,
    fields: Vec<(String, FieldRule)>,
    key_field: String,
}

fn store_key(prefix: &[u8], at: Timestamp) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 9);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&ordered_i64(at));
    key
}

fn timer_key(store_key: &[u8], tag: u8) -> Vec<u8> {
    let mut key = Vec::with_capacity(store_key.len() + 1);
    key.extend_from_slice(store_key);
    key.push(tag);
    key
}

/// The group key and the start (or bucket time) of a store key.
fn split_store_key(key: &[u8]) -> Option<(&[u8], Timestamp)> {
    let len = u32::from_be_bytes(key.get(..4)?.try_into().ok()?) as usize;
    let group = key.get(4..4 + len)?;
    let at = from_ordered_i64(key.get(4 + len..)?)?;
    Some((group, at))
}

/// For the query API: the store keys of `group`'s windows that start
/// within `[from, to]` (either end open when `None`), as the prefix they
/// share and the first and last key, both inclusive.
pub(crate) fn window_key_bounds(
    group: &[u8],
    from: Option<Timestamp>,
    to: Option<Timestamp>,
) -> (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>) {
    let prefix = entity_prefix(group);
    let first = from.map(|t| store_key(&prefix, t));
    let last = to.map(|t| store_key(&prefix, t));
    (prefix, first, last)
}

/// For the query API: the group key a window's store key belongs to.
pub(crate) fn window_group(store_key: &[u8]) -> Option<&[u8]> {
    split_store_key(store_key).map(|(group, _)| group)
}

/// For the query API: a stored window as it would be emitted now, its
/// bounds, the records merged into it and one value per field (`fields`
/// in declaration order); what is not a stored window, as it is.
pub(crate) fn window_view<'a>(stored: Value, fields: impl Iterator<Item = &'a String>) -> Value {
    let Ok(slot) = StoredWindow::deserialize(&stored) else {
        return stored;
    };
    let mut value = Map::new();
    value.insert("window_start".into(), rfc3339_millis(slot.start).into());
    value.insert("window_end".into(), rfc3339_millis(slot.end).into());
    value.insert("records".into(), slot.records.into());
    for (name, acc) in fields.zip(&slot.acc) {
        value.insert(name.clone(), acc.to_value());
    }
    Value::Object(value)
}

/// The key of an emitted window: `<key>@<start>/<end>`.
fn windowed_key(key: &[u8], span: &Span) -> Box<[u8]> {
    format!(
        "{}@{}/{}",
        key_text(key),
        rfc3339_millis(span.start),
        rfc3339_millis(span.end)
    )
    .into_bytes()
    .into_boxed_slice()
}

/// Merges `later` into `earlier`, as if `later`'s records had been merged
/// after `earlier`'s.
fn combine(earlier: &mut [Acc], later: &[Acc], fields: &[(String, FieldRule)]) {
    for ((into, from), (_, rule)) in earlier.iter_mut().zip(later).zip(fields) {
        let max_len = rule.max_len.map_or(usize::MAX, |n| n.get());
        match from {
            Acc::Set(values) => {
                into.merge(Some(&Value::Array(values.clone())), max_len);
            }
            Acc::Keys(keys) => {
                let names: Map<String, Value> =
                    keys.iter().map(|k| (k.clone(), Value::Null)).collect();
                into.merge(Some(&Value::Object(names)), max_len);
            }
            Acc::Sum(sum) => {
                if let Acc::Sum(total) = into {
                    *total = match *sum {
                        Sum::Int(i) => total.add(&Number::from(i)),
                        Sum::Float(f) => {
                            let base = match *total {
                                Sum::Int(i) => i as f64,
                                Sum::Float(x) => x,
                            };
                            Sum::Float(base + f)
                        }
                    };
                }
            }
            Acc::Min(v) | Acc::Max(v) | Acc::First(v) | Acc::Last(v) => {
                if let Some(v) = v {
                    into.merge(Some(v), max_len);
                }
            }
            Acc::Count(n) => {
                if let Acc::Count(total) = into {
                    *total += n;
                }
            }
            Acc::List(values) => {
                for v in values {
                    into.merge(Some(v), max_len);
                }
            }
        }
    }
}

impl Window {
    pub(crate) fn new(
        shape: Shape,
        store: StoreHandle<StoredWindow>,
        emit: EmitMode,
        on_late: OnReject,
        fields: Vec<(String, FieldRule)>,
        key_field: String,
    ) -> Window {
        Window {
            shape,
            store,
            emit,
            on_late,
            fields,
            key_field,
        }
    }

    /// A window (or bucket) holding one record's contributions.
    fn slot(
        &self,
        start: Timestamp,
        end: Timestamp,
        t: Timestamp,
        values: &[Option<&Value>],
    ) -> StoredWindow {
        let mut slot = StoredWindow {
            start,
            end,
            latest: t,
            records: 0,
            acc: self
                .fields
                .iter()
                .map(|(_, r)| Acc::empty(r.rule))
                .collect(),
        };
        self.merge(&mut slot, t, values);
        slot
    }

    fn merge(&self, slot: &mut StoredWindow, t: Timestamp, values: &[Option<&Value>]) {
        for ((acc, (_, rule)), value) in slot.acc.iter_mut().zip(&self.fields).zip(values) {
            acc.merge(*value, rule.max_len.map_or(usize::MAX, |n| n.get()));
        }
        slot.records += 1;
        slot.latest = slot.latest.max(t);
    }

    /// When a stored window closes, and when its state may go.
    fn deadlines(&self, slot: &StoredWindow) -> (Timestamp, Timestamp) {
        let s = &self.shape;
        match s.kind {
            WindowKind::Session => {
                let close = slot
                    .end
                    .saturating_add(s.gap)
                    .saturating_add(s.grace)
                    .saturating_add(1);
                (close, close.max(slot.end.saturating_add(s.retention)))
            }
            WindowKind::Sliding => {
                // A bucket: it is in windows starting up to its own time.
                let close = slot
                    .start
                    .saturating_add(s.size)
                    .saturating_add(s.grace)
                    .saturating_add(1);
                (close, close.max(slot.start.saturating_add(s.retention)))
            }
            WindowKind::Tumbling | WindowKind::Hopping => {
                let close = slot.end.saturating_add(s.grace);
                (close, close.max(slot.start.saturating_add(s.retention)))
            }
        }
    }

    /// The timers a stored window keeps: its close (when it emits then) and
    /// its expiry (when later than its close, or when nothing emits at
    /// close). A close timer due at the expiry also deletes.
    fn timers_of(&self, slot: &StoredWindow) -> SmallVec<[(Timestamp, u8); 2]> {
        let (close, expire) = self.deadlines(slot);
        let mut timers = SmallVec::new();
        let closes = self.emit == EmitMode::OnClose && self.shape.kind != WindowKind::Sliding;
        if closes {
            timers.push((close, CLOSE));
        }
        if !closes || expire > close {
            timers.push((expire, EXPIRE));
        }
        timers
    }

    fn arm(&self, key: &[u8], slot: &StoredWindow, ctx: &mut Context<'_>) -> Result<(), OpError> {
        for (at, tag) in self.timers_of(slot) {
            ctx.set_timer(Clock::Event, at, &timer_key(key, tag))?;
        }
        Ok(())
    }

    fn disarm(
        &self,
        key: &[u8],
        slot: &StoredWindow,
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        for (at, tag) in self.timers_of(slot) {
            ctx.cancel_timer(Clock::Event, at, &timer_key(key, tag))?;
        }
        Ok(())
    }

    fn emit_window(
        &self,
        key: &[u8],
        span: Span,
        latest: Timestamp,
        acc: &[Acc],
        ctx: &mut Context<'_>,
    ) {
        let mut value = Map::with_capacity(self.fields.len() + 3);
        value.insert(self.key_field.clone(), Value::String(key_text(key)));
        value.insert("window_start".into(), rfc3339_millis(span.start).into());
        value.insert("window_end".into(), rfc3339_millis(span.end).into());
        for ((name, _), acc) in self.fields.iter().zip(acc) {
            value.insert(name.clone(), acc.to_value());
        }
        ctx.emit(Record::new(
            Some(windowed_key(key, &span)),
            Value::Object(value),
            latest,
        ));
    }

    /// The span a stored window is emitted as.
    fn span(&self, slot: &StoredWindow) -> Span {
        Span {
            start: slot.start,
            end: slot.end,
        }
    }

    /// Counts a late record and drops it or says why it is dead-lettered.
    fn late(
        &self,
        key: &[u8],
        t: Timestamp,
        closed_at: Timestamp,
        now: Timestamp,
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        ctx.count(NodeCounter::WindowLate, 1);
        match self.on_late {
            OnReject::Drop => {
                ctx.count(NodeCounter::Dropped, 1);
                Ok(())
            }
            OnReject::DeadLetter => Err(OpError::Record(format!(
                "late record for key `{}`: its time {} is {} behind stream time {}, and its window closed at {} (grace {})",
                key_text(key),
                rfc3339_millis(t),
                ago(now, t),
                rfc3339_millis(now),
                rfc3339_millis(closed_at),
                humantime::format_duration(std::time::Duration::from_millis(
                    u64::try_from(self.shape.grace).unwrap_or(0)
                )),
            ))),
        }
    }

    fn window_record(
        &mut self,
        key: &[u8],
        t: Timestamp,
        values: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        // Check every field first, so a bad record changes nothing.
        for ((_, rule), value) in self.fields.iter().zip(values) {
            if let (Some(pointer), Some(v)) = (&rule.from, value) {
                check(rule.rule, pointer, v).map_err(OpError::Record)?;
            }
        }
        let now = ctx.now(Clock::Event);
        let prefix = entity_prefix(key);
        match self.shape.kind {
            WindowKind::Tumbling | WindowKind::Hopping => {
                self.time_windows(key, &prefix, t, now, values, ctx)
            }
            WindowKind::Session => self.session(key, &prefix, t, now, values, ctx),
            WindowKind::Sliding => self.sliding(key, &prefix, t, now, values, ctx),
        }
    }

    fn time_windows(
        &self,
        key: &[u8],
        prefix: &[u8],
        t: Timestamp,
        now: Timestamp,
        values: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        let Shape {
            size,
            advance,
            grace,
            ..
        } = self.shape;
        let last = t - t.rem_euclid(advance);
        let mut first = last;
        while first - advance > t - size {
            first -= advance;
        }
        // The first window ends first: if it closed, the record is late.
        let first_close = first.saturating_add(size).saturating_add(grace);
        if first_close <= now {
            return self.late(key, t, first_close, now, ctx);
        }
        let mut start = first;
        while start <= last {
            let slot_key = store_key(prefix, start);
            let merged = ctx.store(self.store).update(&slot_key, |slot| {
                slot.map(|slot| {
                    self.merge(slot, t, values);
                    slot.clone()
                })
            })?;
            let slot = match merged {
                Some(slot) => slot,
                None => {
                    let slot = self.slot(start, start.saturating_add(size), t, values);
                    self.arm(&slot_key, &slot, ctx)?;
                    ctx.store(self.store).put(&slot_key, slot.clone());
                    slot
                }
            };
            if self.emit == EmitMode::OnUpdate {
                self.emit_window(key, self.span(&slot), slot.latest, &slot.acc, ctx);
            }
            start += advance;
        }
        Ok(())
    }

    fn session(
        &self,
        key: &[u8],
        prefix: &[u8],
        t: Timestamp,
        now: Timestamp,
        values: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        let gap = self.shape.gap;
        // The open sessions within `gap` of the record, walking back from
        // the last one starting by `t + gap`. Open sessions never overlap,
        // so the walk stops at the first open one ending before `t - gap`;
        // closed ones kept for `retention` are stepped over.
        let mut touching: Vec<(Box<[u8]>, StoredWindow)> = Vec::new();
        let mut upper = store_key(prefix, t.saturating_add(gap));
        let mut included = true;
        loop {
            let to = if included {
                Bound::Included(&upper[..])
            } else {
                Bound::Excluded(&upper[..])
            };
            let found = ctx.store(self.store).last(Bound::Included(prefix), to)?;
            let Some((found_key, slot)) = found else {
                break;
            };
            let (close, _) = self.deadlines(&slot);
            upper = found_key.to_vec();
            included = false;
            if close <= now {
                continue;
            }
            if slot.end < t.saturating_sub(gap) {
                break;
            }
            touching.push((found_key, slot));
        }
        touching.reverse();
        if touching.is_empty() {
            let close = t
                .saturating_add(gap)
                .saturating_add(self.shape.grace)
                .saturating_add(1);
            if close <= now {
                return self.late(key, t, close, now, ctx);
            }
        }
        let mut parts = touching.into_iter();
        let (mut merged, old) = match parts.next() {
            None => (self.slot(t, t, t, values), Vec::new()),
            Some((first_key, first)) => {
                let mut merged = first.clone();
                let mut old = vec![(first_key, first)];
                for (later_key, later) in parts {
                    combine(&mut merged.acc, &later.acc, &self.fields);
                    merged.end = merged.end.max(later.end);
                    merged.latest = merged.latest.max(later.latest);
                    merged.records += later.records;
                    old.push((later_key, later));
                }
                ctx.count(NodeCounter::WindowSessionMerges, old.len() as u64 - 1);
                self.merge(&mut merged, t, values);
                merged.start = merged.start.min(t);
                merged.end = merged.end.max(t);
                (merged, old)
            }
        };
        merged.latest = merged.latest.max(t);
        for (old_key, old_slot) in &old {
            self.disarm(old_key, old_slot, ctx)?;
            ctx.store(self.store).delete(old_key);
            if self.emit == EmitMode::OnUpdate
                && (old_slot.start, old_slot.end) != (merged.start, merged.end)
            {
                // The old session is gone under its key: retract it.
                ctx.emit(Record::new(
                    Some(windowed_key(key, &self.span(old_slot))),
                    Value::Null,
                    merged.latest,
                ));
            }
        }
        let new_key = store_key(prefix, merged.start);
        self.arm(&new_key, &merged, ctx)?;
        if self.emit == EmitMode::OnUpdate {
            self.emit_window(key, self.span(&merged), merged.latest, &merged.acc, ctx);
        }
        ctx.store(self.store).put(&new_key, merged);
        Ok(())
    }

    fn sliding(
        &self,
        key: &[u8],
        prefix: &[u8],
        t: Timestamp,
        now: Timestamp,
        values: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        let Shape { size, grace, .. } = self.shape;
        // The window ending at the record closes first.
        let close = t.saturating_add(grace).saturating_add(1);
        if close <= now {
            return self.late(key, t, close, now, ctx);
        }
        let bucket_key = store_key(prefix, t);
        let existed = ctx.store(self.store).update(&bucket_key, |bucket| {
            bucket.map(|bucket| self.merge(bucket, t, values)).is_some()
        })?;
        // The windows the record is in: ending at it, at a later record
        // up to `size` after it, or starting right after an earlier record
        // up to `size` (+1) before it.
        let mut starts: Vec<Timestamp> = Vec::new();
        if !existed {
            let bucket = self.slot(t, t, t, values);
            self.arm(&bucket_key, &bucket, ctx)?;
            ctx.store(self.store).put(&bucket_key, bucket);
        }
        starts.push(t.saturating_sub(size));
        let later = self.bucket_times(
            prefix,
            Bound::Excluded(t),
            Bound::Included(t.saturating_add(size)),
            ctx,
        )?;
        let earlier = self.bucket_times(
            prefix,
            Bound::Included(t.saturating_sub(size).saturating_sub(1)),
            Bound::Excluded(t),
            ctx,
        )?;
        starts.extend(later.iter().map(|q| q.saturating_sub(size)));
        starts.extend(earlier.iter().map(|p| p.saturating_add(1)));
        // A new record with later ones opens the window right after it.
        let opens_after = !existed && !later.is_empty();
        match self.emit {
            EmitMode::OnClose => {
                if !existed {
                    // New windows: ending at the record, right after the
                    // record before it (now holding the record), right
                    // after the record.
                    let mut new = vec![t.saturating_sub(size)];
                    new.extend(earlier.last().map(|p| p.saturating_add(1)));
                    if opens_after {
                        new.push(t.saturating_add(1));
                    }
                    for start in new {
                        let at = start
                            .saturating_add(size)
                            .saturating_add(grace)
                            .saturating_add(1);
                        ctx.set_timer(
                            Clock::Event,
                            at,
                            &timer_key(&store_key(prefix, start), CLOSE),
                        )?;
                    }
                }
            }
            EmitMode::OnUpdate => {
                if opens_after {
                    starts.push(t.saturating_add(1));
                }
                starts.sort_unstable();
                starts.dedup();
                for start in starts {
                    self.emit_sliding(key, prefix, start, ctx)?;
                }
            }
        }
        Ok(())
    }

    /// The times of the key's buckets in a range.
    fn bucket_times(
        &self,
        prefix: &[u8],
        from: Bound<Timestamp>,
        to: Bound<Timestamp>,
        ctx: &mut Context<'_>,
    ) -> Result<Vec<Timestamp>, OpError> {
        let bound = |b: Bound<Timestamp>| b.map(|at| store_key(prefix, at));
        let (from, to) = (bound(from), bound(to));
        let entries = ctx.store(self.store).range(
            from.as_ref().map(Vec::as_slice),
            to.as_ref().map(Vec::as_slice),
            usize::MAX,
        )?;
        Ok(entries.into_iter().map(|(_, b)| b.start).collect())
    }

    /// Emits the sliding window `[start, start + size]` of `key`, assembled
    /// from its buckets; nothing when it holds none.
    fn emit_sliding(
        &self,
        key: &[u8],
        prefix: &[u8],
        start: Timestamp,
        ctx: &mut Context<'_>,
    ) -> Result<bool, OpError> {
        let end = start.saturating_add(self.shape.size);
        let from = store_key(prefix, start);
        let to = store_key(prefix, end);
        let buckets = ctx.store(self.store).range(
            Bound::Included(&from),
            Bound::Included(&to),
            usize::MAX,
        )?;
        let mut buckets = buckets.into_iter().map(|(_, b)| b);
        let Some(mut window) = buckets.next() else {
            return Ok(false);
        };
        for bucket in buckets {
            combine(&mut window.acc, &bucket.acc, &self.fields);
            window.latest = window.latest.max(bucket.latest);
        }
        self.emit_window(key, Span { start, end }, window.latest, &window.acc, ctx);
        Ok(true)
    }

    fn fire(&mut self, timer: Timer, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some((&tag, slot_key)) = timer.key.split_last() else {
            return Ok(());
        };
        let Some((group, start)) = split_store_key(slot_key) else {
            return Err(OpError::Internal(
                "a window timer with a malformed key".into(),
            ));
        };
        if self.shape.kind == WindowKind::Sliding {
            if tag == CLOSE {
                let prefix = &slot_key[..slot_key.len() - 8];
                if self.emit_sliding(group, prefix, start, ctx)? {
                    ctx.count(NodeCounter::WindowClosed, 1);
                }
            } else if ctx.store(self.store).take(slot_key)?.is_some() {
                ctx.count(NodeCounter::WindowExpired, 1);
            }
            return Ok(());
        }
        let Some(slot) = ctx.store(self.store).get(slot_key)?.cloned() else {
            return Ok(());
        };
        let (close, expire) = self.deadlines(&slot);
        if tag == CLOSE {
            if timer.at != close {
                return Ok(());
            }
            self.emit_window(group, self.span(&slot), slot.latest, &slot.acc, ctx);
            ctx.count(NodeCounter::WindowClosed, 1);
        } else if timer.at != expire {
            return Ok(());
        }
        if expire <= timer.at {
            ctx.store(self.store).delete(slot_key);
            ctx.count(NodeCounter::WindowExpired, 1);
        }
        Ok(())
    }
}

impl Operator for Window {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some(key) = record.key.as_deref() else {
            return Err(OpError::Record(
                "record has no key to window by (give records a key or set `key_by`)".into(),
            ));
        };
        let values: SmallVec<[Option<&Value>; 8]> = self
            .fields
            .iter()
            .map(|(_, rule)| {
                contribution(rule, rule.from.as_ref().and_then(|p| p.get(&record.value)))
            })
            .collect();
        self.window_record(key, record.timestamp, &values, ctx)
    }

    fn on_timer(&mut self, timer: Timer, ctx: &mut Context<'_>) -> Result<(), OpError> {
        self.fire(timer, ctx)
    }
}
