//! `fold`: debounce a burst of events into one event per key.
//!
//! Many `post-metric-updated` events per account arrive in bursts; the
//! account-level work should run once, after the burst. A fold groups
//! events by key, merges what they carry with a rule per output field, and
//! emits one folded event when the fold closes:
//!
//! - `quiet_for`: the key has seen no event for this long (the debounce);
//! - `max_wait`: this long after the fold's *first* event, so a key that
//!   never goes quiet is still published;
//! - `max_events`: the fold holds this many events;
//! - `max_bytes`: the next event would make the folded event (or the open
//!   fold as stored in its changelog) larger than this many bytes of JSON.
//!   The fold closes *before* that event, which opens the next fold. The
//!   default is 90 % of the producer's `message.max.bytes` (librdkafka's
//!   default 1 000 000, so 900 000), so a hot key whose `set` or
//!   `key_union` keeps growing is split into folds that Kafka accepts
//!   instead of outgrowing what the producer may send. An event that alone
//!   would pass the cap is the record's error (dead letter).
//!
//! At least one of `quiet_for`, `max_wait`, `max_events` is required
//! (`max_bytes` always applies). `clock: processing` (default)
//! measures quiet and wait on the wall clock and closes folds from the
//! punctuation tick even when no records arrive; `clock: event` measures
//! them in record time, advanced per task.
//!
//! Merge rules (`fields.<name>.rule`), each reading the event value at the
//! JSON pointer `from` (events without it do not contribute):
//!
//! | rule | result |
//! |---|---|
//! | `set` | sorted union of the values (array values contribute their items) |
//! | `key_union` | sorted union of an object's keys ("which metrics changed") |
//! | `sum` | sum of numbers (integers stay exact) |
//! | `min` / `max` | smallest / largest value |
//! | `first` / `last` | value of the first / latest event, in processing order |
//! | `count` | number of events (with `from`: events carrying the field) |
//! | `list` | the values in order, keeping the latest `max_len` |
//!
//! The emitted event (keyed by the group key, timestamped when it closed):
//!
//! ```json
//! {"account_id": "account_1", "metrics": ["comments", "likes"],
//!  "folded_count": 4, "first_event_at": "2025-01-01T00:00:00.000Z",
//!  "last_event_at": "2025-01-01T00:00:03.000Z", "closed_by": "quiet"}
//! ```
//!
//! `closed_by` is `quiet`, `max_wait`, `max_events` or `max_bytes`. The node counts
//! fold-eligible events and events folded into an already-open fold, whose
//! ratio is the folding ratio (`streamfold_fold_folding_ratio`).
//!
//! ```yaml
//! fold_account:
//!   type: fold
//!   input: post_metrics
//!   key_field: account_id
//!   fields:
//!     metrics: { rule: key_union, from: /metrics }
//!     posts: { rule: set, from: /post_id }
//!   quiet_for: 5s
//!   max_wait: 1m
//!   max_events: 1000
//!   max_bytes: 500000
//! ```
//!
//! Sizes are tracked, not measured: each open fold keeps the JSON size of
//! its accumulated values, updated with each merge, and the cap compares
//! that plus a fixed allowance for the key, field names, counts and
//! timestamps. The estimate never undercounts, so a folded event is never
//! larger than `max_bytes`; it depends only on the events, so a replay
//! after an aborted transaction closes the same folds at the same events.
//!
//! State: `<node>-open` (the open fold per key) and `<node>-timers`. Each
//! open fold keeps one timer, armed at its earliest possible close; when it
//! fires and the key has seen events since, it is re-armed instead of
//! closing, so a busy key costs one timer write per quiet period, not one
//! per event.

use std::num::{NonZeroU64, NonZeroUsize};

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::merge::{Acc, check, contribution, json_len, str_len};
use super::merge::{FieldRule, MergeRule};
use super::{
    BuiltOperator, Context, FieldwiseOperator, Issue, NodeInfo, NodeInput, OpError, Operator,
    OperatorSpec,
};
use crate::config::types::{HumanDuration, JsonPointer};
use crate::record::json::rfc3339_millis;
use crate::record::{Record, Timestamp, key_text};
use crate::state::timers::{Clock, Timer};
use crate::state::{JsonState, StateError, StateSet, StoreHandle};
use crate::telemetry::{NodeCounter, NodeGauge};

/// Options of a `fold` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FoldConfig {
    /// Output fields, each with the rule that merges the folded events.
    #[serde(default)]
    pub(crate) fields: IndexMap<String, FieldRule>,
    /// Close a fold once its key has seen no event for this long.
    #[serde(default)]
    pub(crate) quiet_for: Option<HumanDuration>,
    /// Close a fold this long after its first event, quiet or not.
    #[serde(default)]
    pub(crate) max_wait: Option<HumanDuration>,
    /// Close a fold once it holds this many events.
    #[serde(default)]
    pub(crate) max_events: Option<NonZeroU64>,
    /// Close a fold before an event would make its folded event (or its
    /// stored state) larger than this many bytes of JSON; an event that
    /// alone would pass it goes to the dead-letter topic. Default: 90 % of
    /// the producer's `message.max.bytes` (900000 with librdkafka's
    /// default), so folds always fit what the producer may send.
    #[serde(default)]
    pub(crate) max_bytes: Option<NonZeroU64>,
    /// Clock for `quiet_for` and `max_wait`: `processing` (wall clock,
    /// default) or `event` (record time).
    #[serde(default)]
    pub(crate) clock: Clock,
    /// Output field carrying the group key. Defaults to the last segment of
    /// `key_by` (`/account_id` → `account_id`), else `key`.
    #[serde(default)]
    pub(crate) key_field: Option<String>,
}

/// Fields every folded event carries; user fields may not reuse them.
pub(crate) const RESERVED_FIELDS: &[&str] = &[
    "folded_count",
    "first_event_at",
    "last_event_at",
    "closed_by",
];

/// Smallest `max_bytes` accepted: below it the fold's own fields (counts,
/// timestamps, names) leave no room for values.
const MIN_MAX_BYTES: u64 = 1024;

impl FoldConfig {
    /// The cap in force: `max_bytes`, or 90 % of the producer's limit.
    fn max_bytes(&self, node: &NodeInfo<'_>) -> u64 {
        self.max_bytes
            .map_or(node.max_record_bytes as u64 / 10 * 9, NonZeroU64::get)
    }

    fn key_field(&self, node: &NodeInfo<'_>) -> String {
        self.key_field
            .clone()
            .or_else(|| node.key_by.and_then(|p| p.last_token()).map(str::to_string))
            .unwrap_or_else(|| "key".to_string())
    }
}

impl OperatorSpec for FoldConfig {
    /// Open folds: what each key has accumulated so far.
    fn queryable_store(&self, _inputs: &[NodeInput]) -> Option<&'static str> {
        Some("open")
    }

    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        &["open"]
    }

    fn uses_timers(&self) -> bool {
        self.quiet_for.is_some() || self.max_wait.is_some()
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[
            NodeCounter::FoldEligible,
            NodeCounter::FoldFolded,
            NodeCounter::FoldClosedQuiet,
            NodeCounter::FoldClosedMaxWait,
            NodeCounter::FoldClosedMaxEvents,
            NodeCounter::FoldClosedMaxBytes,
        ]
    }

    fn gauges(&self) -> &'static [NodeGauge] {
        &[NodeGauge::FoldsOpen]
    }

    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if self.quiet_for.is_none() && self.max_wait.is_none() && self.max_events.is_none() {
            issues.push(Issue::new(
                &[],
                "a fold needs a closing rule: set `quiet_for`, `max_wait` or `max_events`",
            ));
        }
        for (field, value) in [("quiet_for", self.quiet_for), ("max_wait", self.max_wait)] {
            if value.is_some_and(HumanDuration::under_a_millisecond) {
                issues.push(Issue::new(&[field], "must be at least 1ms"));
            }
        }
        if let (Some(quiet), Some(wait)) = (self.quiet_for, self.max_wait)
            && wait < quiet
        {
            issues.push(Issue::new(
                &["max_wait"],
                format!("`max_wait` ({wait}) is shorter than `quiet_for` ({quiet}), so folds would never close as quiet"),
            ));
        }
        if let Some(max) = self.max_bytes.map(NonZeroU64::get) {
            if max < MIN_MAX_BYTES {
                issues.push(Issue::new(
                    &["max_bytes"],
                    format!("must be at least {MIN_MAX_BYTES}: a folded event's own fields take a few hundred bytes"),
                ));
            } else if max > node.max_record_bytes as u64 {
                issues.push(Issue::new(
                    &["max_bytes"],
                    format!(
                        "`max_bytes` ({max}) is larger than the producer's `message.max.bytes` ({}), so a folded event that large could not be written; lower it or raise `message.max.bytes` in `kafka.producer`",
                        node.max_record_bytes
                    ),
                ));
            }
        }
        let key_field = self.key_field(node);
        if self.fields.is_empty() {
            issues.push(Issue::new(
                &["fields"],
                "a fold needs at least one output field",
            ));
        }
        for (name, rule) in &self.fields {
            let at = |leaf: &str| vec!["fields".to_string(), name.clone(), leaf.to_string()];
            if RESERVED_FIELDS.contains(&name.as_str()) || *name == key_field {
                issues.push(Issue {
                    path: vec!["fields".into(), name.clone()],
                    message: format!("`{name}` is a field every folded event already carries; choose another name"),
                });
            }
            if rule.from.is_none() && rule.rule != MergeRule::Count {
                issues.push(Issue {
                    path: vec!["fields".into(), name.clone()],
                    message: format!(
                        "rule `{}` needs `from`, the JSON pointer it reads",
                        rule.rule.name()
                    ),
                });
            }
            match (rule.rule, rule.max_len) {
                (MergeRule::List, None) => issues.push(Issue {
                    path: vec!["fields".into(), name.clone()],
                    message: "rule `list` needs `max_len`, so a fold's size stays bounded".into(),
                }),
                (MergeRule::List, Some(_)) | (_, None) => {}
                (other, Some(_)) => issues.push(Issue {
                    path: at("max_len"),
                    message: format!("`max_len` applies to rule `list`, not `{}`", other.name()),
                }),
            }
        }
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        let key_field = self.key_field(node);
        let names_bytes = names_bytes(&key_field, self.fields.keys());
        Ok(BuiltOperator::Fieldwise(Box::new(Fold {
            open: state.declare(&node.store_name("open"))?,
            key_field,
            names_bytes,
            fields: self
                .fields
                .iter()
                .map(|(name, rule)| (name.clone(), rule.clone()))
                .collect(),
            quiet_for: self.quiet_for.map(HumanDuration::as_millis),
            max_wait: self.max_wait.map(HumanDuration::as_millis),
            max_events: self.max_events.map(NonZeroU64::get),
            max_bytes: self.max_bytes(node),
            clock: self.clock,
            timed: self.uses_timers(),
            reads: self
                .fields
                .values()
                .filter_map(|rule| rule.from.clone())
                .collect(),
        })))
    }
}

/// Why a fold closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClosedBy {
    Quiet,
    MaxWait,
    MaxEvents,
    MaxBytes,
}

impl ClosedBy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ClosedBy::Quiet => "quiet",
            ClosedBy::MaxWait => "max_wait",
            ClosedBy::MaxEvents => "max_events",
            ClosedBy::MaxBytes => "max_bytes",
        }
    }

    fn counter(self) -> NodeCounter {
        match self {
            ClosedBy::Quiet => NodeCounter::FoldClosedQuiet,
            ClosedBy::MaxWait => NodeCounter::FoldClosedMaxWait,
            ClosedBy::MaxEvents => NodeCounter::FoldClosedMaxEvents,
            ClosedBy::MaxBytes => NodeCounter::FoldClosedMaxBytes,
        }
    }
}

/// One open fold, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct OpenFold {
    /// Clock time of the first event (`max_wait` counts from here).
    opened: Timestamp,
    /// Clock time of the latest event (`quiet_for` counts from here).
    touched: Timestamp,
    /// Record timestamps of the first and latest events.
    first_ts: Timestamp,
    last_ts: Timestamp,
    count: u64,
    /// Deadline of the timer currently armed for this fold.
    timer: Option<Timestamp>,
    /// One accumulator per output field, in declaration order.
    acc: Vec<Acc>,
    /// JSON size of the accumulated values ([`Acc::content_bytes`]), kept
    /// up to date by each merge. Absent in folds stored before it existed:
    /// computed once when such a fold is next touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
}

impl JsonState for OpenFold {}

/// What a folded event and a stored open fold hold besides the values
/// [`Acc::content_bytes`] counts: braces, the reserved fields
/// (`folded_count`, two RFC 3339 times, `closed_by`) or the stored fold's
/// times, count and timer, each at its longest.
const FOLD_BASE_BYTES: u64 = 320;
/// Per output field, besides its name and its values: separators, an
/// empty container or `null`, a `sum` or `count` at its longest (24
/// characters), and the stored accumulator's tag (`{"float":...}`).
const FIELD_BASE_BYTES: u64 = 48;

/// [`FOLD_BASE_BYTES`], plus the key field's name and each output field's
/// name and [`FIELD_BASE_BYTES`].
fn names_bytes<'n>(key_field: &str, fields: impl Iterator<Item = &'n String>) -> u64 {
    FOLD_BASE_BYTES
        + str_len(key_field)
        + fields
            .map(|name| str_len(name) + FIELD_BASE_BYTES)
            .sum::<u64>()
}

/// At most how many bytes `rule` may add for `value` to a fold holding
/// nothing yet: cheap (one encoding of the contribution), never less than
/// [`Acc::growth`] for any fold.
fn growth_bound(rule: MergeRule, value: Option<&Value>) -> u64 {
    match (rule, value) {
        (_, None) | (MergeRule::Sum | MergeRule::Count, _) => 0,
        (MergeRule::KeyUnion, Some(Value::Object(map))) => {
            map.keys().map(|name| str_len(name) + 1).sum()
        }
        (MergeRule::KeyUnion, Some(_)) => 0,
        (_, Some(v)) => json_len(v) + 1,
    }
}

/// [`Acc::content_bytes`] of every field.
fn content_bytes(acc: &[Acc]) -> u64 {
    acc.iter().map(Acc::content_bytes).sum()
}

struct Fold {
    open: StoreHandle<OpenFold>,
    key_field: String,
    fields: Vec<(String, FieldRule)>,
    quiet_for: Option<i64>,
    max_wait: Option<i64>,
    max_events: Option<u64>,
    max_bytes: u64,
    /// [`FOLD_BASE_BYTES`] plus the key field's and every field's name and
    /// [`FIELD_BASE_BYTES`]: the allowance of every fold but its key.
    names_bytes: u64,
    clock: Clock,
    timed: bool,
    /// The `from` pointers of the fields that have one, in field order:
    /// all the fold reads of an event's value ([`FieldwiseOperator::reads`]).
    reads: Vec<JsonPointer>,
}

impl Fold {
    /// One event, as its key, its timestamp and what each field takes
    /// from it ([`contribution`]): shared by [`Operator::process`] and
    /// [`FieldwiseOperator::process_fields`], so the two cannot differ.
    fn fold_event(
        &mut self,
        key: Option<&[u8]>,
        timestamp: Timestamp,
        values: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        let (key, fixed, bound) = self.admit(key, values)?;
        let now = match self.clock {
            Clock::Processing => ctx.now(Clock::Processing),
            Clock::Event => timestamp,
        };
        ctx.count(NodeCounter::FoldEligible, 1);
        // A fold whose deadline has passed on its clock closes before it
        // takes another event, whether or not its timer fired yet (timers
        // fire in bounded rounds): the event opens the next fold.
        let clock_now = ctx.now(self.clock);
        // One lookup of the open fold: it takes the event in place, or it
        // is overdue, or it cannot take the event without passing the cap
        // (it closes first, and the event opens the next fold), or there is
        // none.
        let found = ctx.store(self.open).update(key, |open| match open {
            Some(fold)
                if let Some((at, closed_by)) = self.deadline(fold)
                    && self.timed
                    && at <= clock_now =>
            {
                Found::Overdue(closed_by)
            }
            Some(fold) if self.would_outgrow(fold, values, fixed, bound) => Found::Outgrown,
            Some(fold) => {
                fold.touched = fold.touched.max(now);
                fold.last_ts = fold.last_ts.max(timestamp);
                fold.first_ts = fold.first_ts.min(timestamp);
                fold.count += 1;
                self.merge(fold, values);
                Found::Merged(fold.count)
            }
            None => Found::Absent,
        })?;
        let (count, arm) = match found {
            Found::Merged(count) => (count, None),
            found => {
                let closing = match found {
                    Found::Outgrown => Some((ClosedBy::MaxBytes, now)),
                    Found::Overdue(closed_by) => Some((closed_by, clock_now)),
                    _ => None,
                };
                let arm = self.reopen(key, closing, timestamp, now, values, ctx)?;
                (1, arm)
            }
        };
        self.after_event(key, count, arm, now, ctx)
    }

    /// Whether the fold may take an event of `key` with `values`: it has a
    /// key, every field's value fits its rule, and the event alone cannot
    /// make a folded event over `max_bytes`. Checked before anything
    /// changes, so a bad event changes nothing. Returns the key, the
    /// folded event's fixed allowance ([`Fold::fixed_bytes`]) and the
    /// most the event can add.
    fn admit<'k>(
        &self,
        key: Option<&'k [u8]>,
        values: &[Option<&Value>],
    ) -> Result<(&'k [u8], u64, u64), OpError> {
        let Some(key) = key else {
            return Err(OpError::Record(
                "record has no key to fold by (give records a key or set `key_by`)".into(),
            ));
        };
        for ((_, rule), value) in self.fields.iter().zip(values) {
            if let (Some(pointer), Some(v)) = (&rule.from, value) {
                check(rule.rule, pointer, v).map_err(OpError::Record)?;
            }
        }
        let fixed = self.fixed_bytes(key);
        let bound: u64 = self
            .fields
            .iter()
            .zip(values)
            .map(|((_, rule), value)| growth_bound(rule.rule, *value))
            .sum();
        if fixed + bound > self.max_bytes {
            return Err(OpError::Record(format!(
                "the event alone would make a folded event of up to {} bytes, over the fold's `max_bytes` ({})",
                fixed + bound,
                self.max_bytes
            )));
        }
        Ok((key, fixed, bound))
    }

    /// Merges an event's `values` into `fold`'s accumulators, keeping its
    /// size in bytes current.
    fn merge(&self, fold: &mut OpenFold, values: &[Option<&Value>]) {
        let mut bytes = fold.bytes.unwrap_or_else(|| content_bytes(&fold.acc)) as i64;
        for (((_, rule), acc), value) in self.fields.iter().zip(&mut fold.acc).zip(values) {
            let max_len = rule.max_len.map_or(usize::MAX, NonZeroUsize::get);
            bytes += acc.merge(*value, max_len);
        }
        fold.bytes = Some(bytes.max(0) as u64);
    }

    /// Opens a new fold of `key` with the event, after closing its open
    /// fold when `closing` says why and when (it is overdue, or the event
    /// would make it outgrow `max_bytes`). Returns when the new fold's
    /// timer is to be armed, if it needs one.
    fn reopen(
        &self,
        key: &[u8],
        closing: Option<(ClosedBy, Timestamp)>,
        timestamp: Timestamp,
        now: Timestamp,
        values: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<Option<Timestamp>, OpError> {
        if let Some((closed_by, at_time)) = closing
            && let Some(fold) = ctx.store(self.open).take(key)?
        {
            if let (Some(at), true) = (fold.timer, self.timed) {
                ctx.cancel_timer(self.clock, at, key)?;
            }
            self.close(key, fold, closed_by, at_time, ctx);
        }
        let mut fold = OpenFold {
            opened: now,
            touched: now,
            first_ts: timestamp,
            last_ts: timestamp,
            count: 1,
            timer: None,
            acc: self
                .fields
                .iter()
                .map(|(_, r)| Acc::empty(r.rule))
                .collect(),
            bytes: Some(0),
        };
        self.merge(&mut fold, values);
        // A fold that closes on its first event needs no timer.
        let closes_now = self.max_events.is_some_and(|max| max <= 1);
        if !closes_now {
            fold.timer = self.deadline(&fold).map(|(at, _)| at);
        }
        let arm = fold.timer;
        ctx.store(self.open).put(key, fold);
        Ok(arm)
    }

    /// Counts the event that made `key`'s fold hold `count` events, closes
    /// the fold when that reaches `max_events`, and otherwise arms the
    /// timer a new fold needs (`arm`).
    fn after_event(
        &self,
        key: &[u8],
        count: u64,
        arm: Option<Timestamp>,
        now: Timestamp,
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        if count > 1 {
            ctx.count(NodeCounter::FoldFolded, 1);
        } else {
            ctx.gauge_add(NodeGauge::FoldsOpen, 1);
        }
        if self.max_events.is_some_and(|max| count >= max) {
            if let Some(fold) = ctx.store(self.open).take(key)? {
                if let (Some(at), true) = (fold.timer, self.timed) {
                    ctx.cancel_timer(self.clock, at, key)?;
                }
                self.close(key, fold, ClosedBy::MaxEvents, now, ctx);
            }
        } else if let Some(at) = arm {
            ctx.set_timer(self.clock, at, key)?;
        }
        Ok(())
    }

    /// The allowance of a folded event of `key` besides its values: the
    /// key, the field names, and [`FOLD_BASE_BYTES`] and
    /// [`FIELD_BASE_BYTES`].
    fn fixed_bytes(&self, key: &[u8]) -> u64 {
        self.names_bytes + str_len(&String::from_utf8_lossy(key))
    }

    /// Whether merging the event whose contributions are `values` would
    /// take `fold` past `max_bytes`. `bound` is what the event could add at
    /// most ([`growth_bound`]); only a fold close to the cap pays for the
    /// exact look at which values are new.
    fn would_outgrow(
        &self,
        fold: &OpenFold,
        values: &[Option<&Value>],
        fixed: u64,
        bound: u64,
    ) -> bool {
        let held = fold.bytes.unwrap_or_else(|| content_bytes(&fold.acc));
        if fixed + held + bound <= self.max_bytes {
            return false;
        }
        let growth: u64 = fold
            .acc
            .iter()
            .zip(values)
            .map(|(acc, value)| acc.growth(*value))
            .sum();
        fixed + held + growth > self.max_bytes
    }

    /// When `fold` may close at the earliest, and by which rule.
    fn deadline(&self, fold: &OpenFold) -> Option<(Timestamp, ClosedBy)> {
        let quiet = self
            .quiet_for
            .map(|q| (fold.touched.saturating_add(q), ClosedBy::Quiet));
        let wait = self
            .max_wait
            .map(|w| (fold.opened.saturating_add(w), ClosedBy::MaxWait));
        match (quiet, wait) {
            (Some(q), Some(w)) => Some(if q.0 <= w.0 { q } else { w }),
            (q, w) => q.or(w),
        }
    }

    fn close(
        &self,
        key: &[u8],
        fold: OpenFold,
        closed_by: ClosedBy,
        now: Timestamp,
        ctx: &mut Context<'_>,
    ) {
        let mut value = Map::with_capacity(self.fields.len() + 5);
        value.insert(self.key_field.clone(), Value::String(key_text(key)));
        for ((name, _), acc) in self.fields.iter().zip(&fold.acc) {
            value.insert(name.clone(), acc.to_value());
        }
        value.insert("folded_count".into(), Value::from(fold.count));
        value.insert(
            "first_event_at".into(),
            Value::String(rfc3339_millis(fold.first_ts)),
        );
        value.insert(
            "last_event_at".into(),
            Value::String(rfc3339_millis(fold.last_ts)),
        );
        value.insert("closed_by".into(), Value::String(closed_by.as_str().into()));
        ctx.count(closed_by.counter(), 1);
        ctx.gauge_add(NodeGauge::FoldsOpen, -1);
        ctx.emit(Record::new(Some(key.into()), Value::Object(value), now));
    }
}

/// What the one lookup of a key's open fold found.
enum Found {
    /// A fold that took the event; its count now.
    Merged(u64),
    /// A fold the event would take past `max_bytes`.
    Outgrown,
    /// A fold whose deadline passed: it closes, by this rule.
    Overdue(ClosedBy),
    /// No open fold.
    Absent,
}

impl Operator for Fold {
    fn count_gauges(&mut self, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let open = ctx.store(self.open).count()?;
        ctx.gauge_add(
            NodeGauge::FoldsOpen,
            i64::try_from(open).unwrap_or(i64::MAX),
        );
        Ok(())
    }

    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        // Inline for up to eight fields: no allocation per event.
        let values: SmallVec<[Option<&Value>; 8]> = self
            .fields
            .iter()
            .map(|(_, rule)| {
                contribution(rule, rule.from.as_ref().and_then(|p| p.get(&record.value)))
            })
            .collect();
        self.fold_event(record.key.as_deref(), record.timestamp, &values, ctx)
    }

    fn on_timer(&mut self, timer: Timer, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let now = ctx.now(self.clock);
        let mut store = ctx.store(self.open);
        let Some(fold) = store.get(&timer.key)? else {
            // The fold closed by `max_events` after this timer was armed.
            return Ok(());
        };
        if fold.timer != Some(timer.at) {
            return Ok(());
        }
        let Some((deadline, closed_by)) = self.deadline(fold) else {
            return Ok(());
        };
        if deadline <= now {
            if let Some(fold) = store.take(&timer.key)? {
                self.close(&timer.key, fold, closed_by, now, ctx);
            }
        } else {
            // Events arrived since the timer was armed: wait for the new
            // deadline instead of closing.
            if let Some(fold) = store.get_mut(&timer.key)? {
                fold.timer = Some(deadline);
            }
            ctx.set_timer(self.clock, deadline, &timer.key)?;
        }
        Ok(())
    }
}

impl FieldwiseOperator for Fold {
    fn reads(&self) -> &[JsonPointer] {
        &self.reads
    }

    fn process_fields(
        &mut self,
        key: Option<&[u8]>,
        timestamp: Timestamp,
        fields: &[Option<&Value>],
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        let mut read = fields.iter();
        let values: SmallVec<[Option<&Value>; 8]> = self
            .fields
            .iter()
            .map(|(_, rule)| {
                let value = match rule.from {
                    Some(_) => read.next().copied().flatten(),
                    None => None,
                };
                contribution(rule, value)
            })
            .collect();
        self.fold_event(key, timestamp, &values, ctx)
    }
}

#[cfg(test)]
mod tests;
