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
//! - `max_events`: the fold holds this many events.
//!
//! At least one closing rule is required. `clock: processing` (default)
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
//! `closed_by` is `quiet`, `max_wait` or `max_events`. The node counts
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
//! ```
//!
//! State: `<node>-open` (the open fold per key) and `<node>-timers`. Each
//! open fold keeps one timer, armed at its earliest possible close; when it
//! fires and the key has seen events since, it is re-armed instead of
//! closing, so a busy key costs one timer write per quiet period, not one
//! per event.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::num::{NonZeroU64, NonZeroUsize};

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use super::{Context, Issue, NodeInfo, OpError, Operator, OperatorSpec};
use crate::formats::json::{canonical_cmp, rfc3339_millis};
use crate::record::{Record, Timestamp, key_text};
use crate::state::timers::{Clock, Timer};
use crate::state::{JsonState, StateError, StateSet, StoreHandle};
use crate::telemetry::{NodeCounter, NodeGauge};
use crate::topology::types::{HumanDuration, JsonPointer};

/// Options of a `fold` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FoldConfig {
    /// Output fields, each with the rule that merges the folded events.
    #[serde(default)]
    pub fields: IndexMap<String, FieldRule>,
    /// Close a fold once its key has seen no event for this long.
    #[serde(default)]
    pub quiet_for: Option<HumanDuration>,
    /// Close a fold this long after its first event, quiet or not.
    #[serde(default)]
    pub max_wait: Option<HumanDuration>,
    /// Close a fold once it holds this many events.
    #[serde(default)]
    pub max_events: Option<NonZeroU64>,
    /// Clock for `quiet_for` and `max_wait`: `processing` (wall clock,
    /// default) or `event` (record time).
    #[serde(default)]
    pub clock: Clock,
    /// Output field carrying the group key. Defaults to the last segment of
    /// `key_by` (`/account_id` → `account_id`), else `key`.
    #[serde(default)]
    pub key_field: Option<String>,
}

/// How one output field is computed from the folded events.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FieldRule {
    /// The merge rule.
    pub rule: MergeRule,
    /// JSON pointer to the value in each event. Required except for
    /// `count`, which counts events when it is absent.
    #[serde(default)]
    pub from: Option<JsonPointer>,
    /// For `list`: how many values to keep (the most recent). Required for
    /// `list`, not allowed otherwise.
    #[serde(default)]
    pub max_len: Option<NonZeroUsize>,
}

/// A merge rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MergeRule {
    /// Sorted union of values; array values contribute their items.
    Set,
    /// Sorted union of the keys of an object value.
    KeyUnion,
    /// Sum of numbers.
    Sum,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Value of the first event.
    First,
    /// Value of the latest event.
    Last,
    /// Number of events (carrying `from`, when given).
    Count,
    /// Values in arrival order, the latest `max_len` kept.
    List,
}

impl MergeRule {
    fn name(self) -> &'static str {
        match self {
            MergeRule::Set => "set",
            MergeRule::KeyUnion => "key_union",
            MergeRule::Sum => "sum",
            MergeRule::Min => "min",
            MergeRule::Max => "max",
            MergeRule::First => "first",
            MergeRule::Last => "last",
            MergeRule::Count => "count",
            MergeRule::List => "list",
        }
    }
}

/// Fields every folded event carries; user fields may not reuse them.
pub const RESERVED_FIELDS: &[&str] = &[
    "folded_count",
    "first_event_at",
    "last_event_at",
    "closed_by",
];

impl FoldConfig {
    fn key_field(&self, node: &NodeInfo<'_>) -> String {
        self.key_field
            .clone()
            .or_else(|| node.key_by.and_then(|p| p.last_token()).map(str::to_string))
            .unwrap_or_else(|| "key".to_string())
    }
}

impl OperatorSpec for FoldConfig {
    fn stores(&self) -> &'static [&'static str] {
        &["open"]
    }

    fn uses_timers(&self) -> bool {
        self.quiet_for.is_some() || self.max_wait.is_some()
    }

    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if self.quiet_for.is_none() && self.max_wait.is_none() && self.max_events.is_none() {
            issues.push(Issue::new(
                &[],
                "a fold needs a closing rule: set `quiet_for`, `max_wait` or `max_events`",
            ));
        }
        for (field, value) in [("quiet_for", self.quiet_for), ("max_wait", self.max_wait)] {
            if value.is_some_and(|d| d.0.is_zero()) {
                issues.push(Issue::new(&[field], "must be longer than zero"));
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
    ) -> Result<Box<dyn Operator>, StateError> {
        Ok(Box::new(Fold {
            open: state.declare(&node.store_name("open"))?,
            key_field: self.key_field(node),
            fields: self
                .fields
                .iter()
                .map(|(name, rule)| (name.clone(), rule.clone()))
                .collect(),
            quiet_for: self.quiet_for.map(HumanDuration::as_millis),
            max_wait: self.max_wait.map(HumanDuration::as_millis),
            max_events: self.max_events.map(NonZeroU64::get),
            clock: self.clock,
            timed: self.uses_timers(),
        }))
    }
}

/// Why a fold closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedBy {
    Quiet,
    MaxWait,
    MaxEvents,
}

impl ClosedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ClosedBy::Quiet => "quiet",
            ClosedBy::MaxWait => "max_wait",
            ClosedBy::MaxEvents => "max_events",
        }
    }

    fn counter(self) -> NodeCounter {
        match self {
            ClosedBy::Quiet => NodeCounter::FoldClosedQuiet,
            ClosedBy::MaxWait => NodeCounter::FoldClosedMaxWait,
            ClosedBy::MaxEvents => NodeCounter::FoldClosedMaxEvents,
        }
    }
}

/// One open fold, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpenFold {
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
}

impl JsonState for OpenFold {}

/// The running result of one merge rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Acc {
    /// Sorted, without duplicates (canonical JSON order).
    Set(Vec<Value>),
    /// Sorted object keys.
    Keys(Vec<String>),
    Sum(Sum),
    Min(Option<Value>),
    Max(Option<Value>),
    First(Option<Value>),
    Last(Option<Value>),
    Count(u64),
    List(VecDeque<Value>),
}

/// An exact integer sum until a float or an overflow makes it a float.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sum {
    Int(i64),
    Float(f64),
}

impl Sum {
    fn add(self, n: &Number) -> Sum {
        match (self, n.as_i64()) {
            (Sum::Int(a), Some(b)) => match a.checked_add(b) {
                Some(s) => Sum::Int(s),
                None => Sum::Float(a as f64 + b as f64),
            },
            (Sum::Int(a), None) => Sum::Float(a as f64 + n.as_f64().unwrap_or(0.0)),
            (Sum::Float(a), _) => Sum::Float(a + n.as_f64().unwrap_or(0.0)),
        }
    }

    fn to_value(self) -> Value {
        match self {
            Sum::Int(i) => Value::from(i),
            Sum::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }
}

impl Acc {
    fn empty(rule: MergeRule) -> Acc {
        match rule {
            MergeRule::Set => Acc::Set(Vec::new()),
            MergeRule::KeyUnion => Acc::Keys(Vec::new()),
            MergeRule::Sum => Acc::Sum(Sum::Int(0)),
            MergeRule::Min => Acc::Min(None),
            MergeRule::Max => Acc::Max(None),
            MergeRule::First => Acc::First(None),
            MergeRule::Last => Acc::Last(None),
            MergeRule::Count => Acc::Count(0),
            MergeRule::List => Acc::List(VecDeque::new()),
        }
    }

    /// Merges one event's value (`None`: the event lacks the field).
    fn merge(&mut self, value: Option<&Value>, max_len: usize) {
        match self {
            Acc::Count(n) => {
                if value.is_some() {
                    *n += 1;
                }
            }
            Acc::Set(set) => match value {
                Some(Value::Array(items)) => items.iter().for_each(|v| insert_sorted(set, v)),
                Some(v) => insert_sorted(set, v),
                None => {}
            },
            Acc::Keys(keys) => {
                if let Some(Value::Object(map)) = value {
                    for name in map.keys() {
                        if let Err(at) = keys.binary_search_by(|k| k.as_str().cmp(name)) {
                            keys.insert(at, name.clone());
                        }
                    }
                }
            }
            Acc::Sum(sum) => {
                if let Some(Value::Number(n)) = value {
                    *sum = sum.add(n);
                }
            }
            Acc::Min(current) => keep_if(current, value, Ordering::Less),
            Acc::Max(current) => keep_if(current, value, Ordering::Greater),
            Acc::First(current) => {
                if current.is_none() {
                    *current = value.cloned();
                }
            }
            Acc::Last(current) => {
                if value.is_some() {
                    *current = value.cloned();
                }
            }
            Acc::List(list) => {
                if let Some(v) = value {
                    if list.len() == max_len {
                        list.pop_front();
                    }
                    list.push_back(v.clone());
                }
            }
        }
    }

    fn to_value(&self) -> Value {
        match self {
            Acc::Set(set) => Value::Array(set.clone()),
            Acc::Keys(keys) => Value::Array(keys.iter().cloned().map(Value::String).collect()),
            Acc::Sum(sum) => sum.to_value(),
            Acc::Min(v) | Acc::Max(v) | Acc::First(v) | Acc::Last(v) => {
                v.clone().unwrap_or(Value::Null)
            }
            Acc::Count(n) => Value::from(*n),
            Acc::List(list) => Value::Array(list.iter().cloned().collect()),
        }
    }
}

fn insert_sorted(set: &mut Vec<Value>, value: &Value) {
    if let Err(at) = set.binary_search_by(|probe| canonical_cmp(probe, value)) {
        set.insert(at, value.clone());
    }
}

fn keep_if(current: &mut Option<Value>, value: Option<&Value>, wanted: Ordering) {
    if let Some(v) = value
        && current
            .as_ref()
            .is_none_or(|c| canonical_cmp(v, c) == wanted)
    {
        *current = Some(v.clone());
    }
}

/// What `rule` takes from an event: the value at `from` (null counts as
/// absent), or, for `count` without `from`, a marker for "this event".
fn contribution<'v>(rule: &FieldRule, value: &'v Value) -> Option<&'v Value> {
    static EVENT: Value = Value::Null;
    match &rule.from {
        None if rule.rule == MergeRule::Count => Some(&EVENT),
        None => None,
        Some(pointer) => pointer.get(value).filter(|v| !v.is_null()),
    }
}

/// Checks that `value` suits `rule`, so a bad event is rejected before it
/// changes anything.
fn check(rule: MergeRule, pointer: &JsonPointer, value: &Value) -> Result<(), String> {
    let wanted = match rule {
        MergeRule::Sum if !value.is_number() => "a number",
        MergeRule::KeyUnion if !value.is_object() => "an object",
        _ => return Ok(()),
    };
    Err(format!(
        "field {pointer} must be {wanted} for rule `{}`, found {}",
        rule.name(),
        crate::formats::json::type_name(value)
    ))
}

struct Fold {
    open: StoreHandle<OpenFold>,
    key_field: String,
    fields: Vec<(String, FieldRule)>,
    quiet_for: Option<i64>,
    max_wait: Option<i64>,
    max_events: Option<u64>,
    clock: Clock,
    timed: bool,
}

impl Fold {
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

impl Operator for Fold {
    fn on_start(&mut self, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let open = ctx.store(self.open).count()?;
        ctx.gauge_add(
            NodeGauge::FoldsOpen,
            i64::try_from(open).unwrap_or(i64::MAX),
        );
        Ok(())
    }

    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some(key) = record.key.as_deref() else {
            return Err(OpError::Record(
                "record has no key to fold by (give records a key or set `key_by`)".into(),
            ));
        };
        // Check every field first, so a bad event changes nothing.
        for (_, rule) in &self.fields {
            if let (Some(pointer), Some(v)) = (&rule.from, contribution(rule, &record.value)) {
                check(rule.rule, pointer, v).map_err(OpError::Record)?;
            }
        }
        let now = match self.clock {
            Clock::Processing => ctx.now(Clock::Processing),
            Clock::Event => record.timestamp,
        };
        ctx.count(NodeCounter::FoldEligible, 1);

        let mut store = ctx.store(self.open);
        let (count, arm) = match store.get_mut(key)? {
            Some(fold) => {
                fold.touched = fold.touched.max(now);
                fold.last_ts = fold.last_ts.max(record.timestamp);
                fold.first_ts = fold.first_ts.min(record.timestamp);
                fold.count += 1;
                for ((_, rule), acc) in self.fields.iter().zip(&mut fold.acc) {
                    let max_len = rule.max_len.map_or(usize::MAX, NonZeroUsize::get);
                    acc.merge(contribution(rule, &record.value), max_len);
                }
                (fold.count, None)
            }
            None => {
                let mut fold = OpenFold {
                    opened: now,
                    touched: now,
                    first_ts: record.timestamp,
                    last_ts: record.timestamp,
                    count: 1,
                    timer: None,
                    acc: self
                        .fields
                        .iter()
                        .map(|(_, r)| Acc::empty(r.rule))
                        .collect(),
                };
                for ((_, rule), acc) in self.fields.iter().zip(&mut fold.acc) {
                    let max_len = rule.max_len.map_or(usize::MAX, NonZeroUsize::get);
                    acc.merge(contribution(rule, &record.value), max_len);
                }
                // A fold that closes on its first event needs no timer.
                let closes_now = self.max_events.is_some_and(|max| max <= 1);
                let arm = if closes_now {
                    None
                } else {
                    self.deadline(&fold).map(|(at, _)| at)
                };
                fold.timer = arm;
                store.put(key, fold);
                (1, arm)
            }
        };
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn acc_after(rule: MergeRule, values: &[Value]) -> Value {
        let mut acc = Acc::empty(rule);
        for v in values {
            acc.merge(Some(v), 2);
        }
        acc.to_value()
    }

    #[test]
    fn merge_rules_compute_what_their_names_say() {
        let metrics = [
            json!({"likes": 1, "shares": 2}),
            json!({"comments": 1, "likes": 5}),
        ];
        assert_eq!(
            acc_after(MergeRule::KeyUnion, &metrics),
            json!(["comments", "likes", "shares"])
        );
        assert_eq!(
            acc_after(MergeRule::Set, &[json!("b"), json!(["a", "b"]), json!(3)]),
            json!([3, "a", "b"])
        );
        assert_eq!(
            acc_after(MergeRule::Sum, &[json!(2), json!(3), json!(-1)]),
            json!(4)
        );
        assert_eq!(
            acc_after(MergeRule::Sum, &[json!(2), json!(0.5)]),
            json!(2.5)
        );
        assert_eq!(
            acc_after(MergeRule::Min, &[json!(4), json!(2), json!(9)]),
            json!(2)
        );
        assert_eq!(
            acc_after(MergeRule::Max, &[json!(4), json!(12), json!(9)]),
            json!(12)
        );
        assert_eq!(
            acc_after(MergeRule::First, &[json!("x"), json!("y")]),
            json!("x")
        );
        assert_eq!(
            acc_after(MergeRule::Last, &[json!("x"), json!("y")]),
            json!("y")
        );
        assert_eq!(
            acc_after(MergeRule::Count, &[json!(1), json!(1), json!(1)]),
            json!(3)
        );
        assert_eq!(
            acc_after(MergeRule::List, &[json!(1), json!(2), json!(3)]),
            json!([2, 3])
        );
    }

    #[test]
    fn integer_sums_stay_exact_and_overflow_to_float() {
        let big = Sum::Int(i64::MAX).add(&Number::from(1));
        assert!(matches!(big, Sum::Float(_)));
        assert_eq!(Sum::Int(1).add(&Number::from(2)), Sum::Int(3));
    }

    #[test]
    fn wrong_types_are_the_record_s_fault() {
        let pointer = JsonPointer::parse("/delta").unwrap();
        let err = check(MergeRule::Sum, &pointer, &json!("ten")).unwrap_err();
        assert_eq!(
            err,
            "field /delta must be a number for rule `sum`, found a string"
        );
        assert!(check(MergeRule::KeyUnion, &pointer, &json!([1])).is_err());
        assert!(check(MergeRule::Set, &pointer, &json!([1])).is_ok());
    }
}
