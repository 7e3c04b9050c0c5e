//! The merge rules the fold and the window aggregations share: a field's
//! rule, the running result it keeps (its accumulator), and the JSON size
//! a value adds to it (the fold's `max_bytes`).

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::num::NonZeroUsize;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

use crate::config::types::JsonPointer;
use crate::record::json::canonical_cmp;

/// How one output field is computed from the folded events.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct FieldRule {
    /// The merge rule.
    pub(crate) rule: MergeRule,
    /// JSON pointer to the value in each event. Required except for
    /// `count`, which counts events when it is absent.
    #[serde(default)]
    pub(crate) from: Option<JsonPointer>,
    /// For `list`: how many values to keep (the most recent). Required for
    /// `list`, not allowed otherwise.
    #[serde(default)]
    pub(crate) max_len: Option<NonZeroUsize>,
}

/// A merge rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MergeRule {
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
    pub(crate) fn name(self) -> &'static str {
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

/// The running result of one merge rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Acc {
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
pub(crate) enum Sum {
    Int(i64),
    Float(f64),
}

impl Sum {
    pub(crate) fn add(self, n: &Number) -> Sum {
        match (self, n.as_i64()) {
            (Sum::Int(a), Some(b)) => match a.checked_add(b) {
                Some(s) => Sum::Int(s),
                None => Sum::Float(a as f64 + b as f64),
            },
            (Sum::Int(a), None) => Sum::Float(a as f64 + n.as_f64().unwrap_or(0.0)),
            (Sum::Float(a), _) => Sum::Float(a + n.as_f64().unwrap_or(0.0)),
        }
    }

    pub(crate) fn to_value(self) -> Value {
        match self {
            Sum::Int(i) => Value::from(i),
            Sum::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }
}

impl Acc {
    pub(crate) fn empty(rule: MergeRule) -> Acc {
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

    /// Merges one event's value (`None`: the event lacks the field);
    /// returns how much [`Acc::content_bytes`] changed.
    pub(crate) fn merge(&mut self, value: Option<&Value>, max_len: usize) -> i64 {
        let len = |v: &Value| json_len(v) as i64;
        match self {
            Acc::Count(n) => {
                if value.is_some() {
                    *n += 1;
                }
                0
            }
            Acc::Set(set) => match value {
                Some(Value::Array(items)) => items.iter().map(|v| insert_sorted(set, v)).sum(),
                Some(v) => insert_sorted(set, v),
                None => 0,
            },
            Acc::Keys(keys) => {
                let mut grown = 0;
                if let Some(Value::Object(map)) = value {
                    for name in map.keys() {
                        if let Err(at) = keys.binary_search_by(|k| k.as_str().cmp(name)) {
                            keys.insert(at, name.clone());
                            grown += str_len(name) as i64 + 1;
                        }
                    }
                }
                grown
            }
            Acc::Sum(sum) => {
                if let Some(Value::Number(n)) = value {
                    *sum = sum.add(n);
                }
                0
            }
            Acc::Min(current) => keep_if(current, value, Ordering::Less),
            Acc::Max(current) => keep_if(current, value, Ordering::Greater),
            Acc::First(current) => match (&current, value) {
                (None, Some(v)) => {
                    *current = Some(v.clone());
                    len(v)
                }
                _ => 0,
            },
            Acc::Last(current) => match value {
                Some(v) => {
                    let old = current.replace(v.clone());
                    len(v) - old.as_ref().map_or(0, len)
                }
                None => 0,
            },
            Acc::List(list) => match value {
                Some(v) => {
                    let mut grown = len(v) + 1;
                    if list.len() == max_len
                        && let Some(dropped) = list.pop_front()
                    {
                        grown -= len(&dropped) + 1;
                    }
                    list.push_back(v.clone());
                    grown
                }
                None => 0,
            },
        }
    }

    /// By how much merging `value` could grow [`Acc::content_bytes`] at
    /// most: what would be inserted, or the new value of a replacement
    /// (without subtracting the value it replaces).
    pub(crate) fn growth(&self, value: Option<&Value>) -> u64 {
        let Some(value) = value else { return 0 };
        let absent = |set: &Vec<Value>, v: &Value| {
            if set.binary_search_by(|p| canonical_cmp(p, v)).is_ok() {
                0
            } else {
                json_len(v) + 1
            }
        };
        match self {
            Acc::Count(_) | Acc::Sum(_) => 0,
            Acc::Set(set) => match value {
                Value::Array(items) => items.iter().map(|v| absent(set, v)).sum(),
                v => absent(set, v),
            },
            Acc::Keys(keys) => match value {
                Value::Object(map) => map
                    .keys()
                    .filter(|name| keys.binary_search_by(|k| k.as_str().cmp(name)).is_err())
                    .map(|name| str_len(name) + 1)
                    .sum(),
                _ => 0,
            },
            Acc::Min(current) => replaces(current, value, Ordering::Less),
            Acc::Max(current) => replaces(current, value, Ordering::Greater),
            Acc::First(current) => {
                if current.is_none() {
                    json_len(value)
                } else {
                    0
                }
            }
            Acc::Last(_) => json_len(value),
            Acc::List(_) => json_len(value) + 1,
        }
    }

    /// The JSON size of the accumulated values, as [`Acc::merge`] tracks
    /// it: each item of a set, key set or list with one separator, a single
    /// value as itself; the fixed-size `sum` and `count` as nothing (the
    /// per-field allowance covers them).
    pub(crate) fn content_bytes(&self) -> u64 {
        match self {
            Acc::Count(_) | Acc::Sum(_) => 0,
            Acc::Set(values) => values.iter().map(|v| json_len(v) + 1).sum(),
            Acc::List(values) => values.iter().map(|v| json_len(v) + 1).sum(),
            Acc::Keys(keys) => keys.iter().map(|k| str_len(k) + 1).sum(),
            Acc::Min(v) | Acc::Max(v) | Acc::First(v) | Acc::Last(v) => {
                v.as_ref().map_or(0, json_len)
            }
        }
    }

    pub(crate) fn to_value(&self) -> Value {
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

/// Inserts `value` unless present; returns the bytes it added. A value
/// after the last is appended after one comparison, without a search:
/// ids that ascend (sequence numbers, time-ordered ids) are common, and a
/// set of them is built in order.
fn insert_sorted(set: &mut Vec<Value>, value: &Value) -> i64 {
    let at = match set.last().map(|last| canonical_cmp(last, value)) {
        None | Some(Ordering::Less) => set.len(),
        Some(Ordering::Equal) => return 0,
        Some(Ordering::Greater) => {
            match set.binary_search_by(|probe| canonical_cmp(probe, value)) {
                Ok(_) => return 0,
                Err(at) => at,
            }
        }
    };
    set.insert(at, value.clone());
    json_len(value) as i64 + 1
}

/// Whether `value` would replace `current` under `wanted`.
fn would_replace(current: &Option<Value>, value: &Value, wanted: Ordering) -> bool {
    current
        .as_ref()
        .is_none_or(|c| canonical_cmp(value, c) == wanted)
}

/// Replaces `current` when `value` is `wanted` of it; returns the change
/// in bytes.
fn keep_if(current: &mut Option<Value>, value: Option<&Value>, wanted: Ordering) -> i64 {
    match value {
        Some(v) if would_replace(current, v, wanted) => {
            let old = current.replace(v.clone());
            json_len(v) as i64 - old.as_ref().map_or(0, |o| json_len(o) as i64)
        }
        _ => 0,
    }
}

fn replaces(current: &Option<Value>, value: &Value, wanted: Ordering) -> u64 {
    if would_replace(current, value, wanted) {
        json_len(value)
    } else {
        0
    }
}

/// Counts bytes written through it.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Length of `value` as compact JSON, without building the text.
pub(crate) fn json_len(value: &Value) -> u64 {
    let mut count = ByteCount(0);
    // Writing a `Value` into an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Length of `text` as a JSON string, quotes and escapes included.
pub(crate) fn str_len(text: &str) -> u64 {
    let mut count = ByteCount(0);
    // As above: a string into an infallible writer.
    let _ = serde_json::to_writer(&mut count, text);
    count.0
}

/// What `rule` takes from an event whose value at `from` is `found`: that
/// value (null counts as absent), or, for `count` without `from`, a marker
/// for "this event".
pub(crate) fn contribution<'v>(rule: &FieldRule, found: Option<&'v Value>) -> Option<&'v Value> {
    static EVENT: Value = Value::Null;
    match &rule.from {
        None if rule.rule == MergeRule::Count => Some(&EVENT),
        None => None,
        Some(_) => found.filter(|v| !v.is_null()),
    }
}

/// Checks that `value` suits `rule`, so a bad event is rejected before it
/// changes anything.
pub(crate) fn check(rule: MergeRule, pointer: &JsonPointer, value: &Value) -> Result<(), String> {
    let wanted = match rule {
        MergeRule::Sum if !value.is_number() => "a number",
        MergeRule::KeyUnion if !value.is_object() => "an object",
        _ => return Ok(()),
    };
    Err(format!(
        "field {pointer} must be {wanted} for rule `{}`, found {}",
        rule.name(),
        crate::record::json::type_name(value)
    ))
}
