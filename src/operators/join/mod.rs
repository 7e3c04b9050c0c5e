//! `join`: join two inputs by key.
//!
//! Kafka Streams' joins in YAML. A node has two inputs, the left and the
//! right (`input: [left, right]`); what kind of join it is follows from
//! them, as in Kafka Streams from the types of the two sides:
//!
//! | inputs | joins | emits | `how` |
//! |---|---|---|---|
//! | stream, table | each stream record with the table's current value for its key | on each stream record; a table update alone emits nothing | `inner`, `left` |
//! | table, table | the two tables' current values per key | on every change of either side; a tombstone when a result stops existing | `inner`, `left`, `outer` |
//! | stream, stream | records of the same key at most `window` apart in event time | on each match; with `left`/`outer`, a record that found none once its window has closed | `inner`, `left`, `outer` |
//!
//! A table is a source of `kind: table`: each record is the latest value of
//! its key, a tombstone (no value) deletes it. The join keeps it in its own
//! store (`<node>-table`, or `<node>-left` and `<node>-right` for two
//! tables), restored from its changelog like any other state.
//!
//! Both sides must be partitioned alike (the compiler requires the same
//! partition count of every source; producers must use the same
//! partitioner, Kafka's default murmur2 for keyed records). To join a
//! stream on a field, set `key_by`: it re-keys the stream inputs through a
//! repartition topic, as for any keyed node; a table keeps its key.
//!
//! The joined value: by default `{<left input>: left value, <right
//! input>: right value}` (`null` for a side without a match); `value:` a jq
//! expression over that object; or `fields:` output field → JSON pointer
//! into it. The output is keyed by the join key and timestamped with the
//! later of the two records. A tombstone (table–table) is emitted as is.
//!
//! Two streams: a record at time `t` joins the other side's records of the
//! same key in `[t - window, t + window]` (Kafka Streams'
//! `JoinWindows.ofTimeDifferenceAndGrace`). A record is late when stream
//! time (the task's latest event time) has passed `t + window + grace`: it
//! is counted (`streamfold_join_late_records_total`) and dropped (`on_late:
//! drop`, default) or dead-lettered. Each side keeps its records until
//! stream time passes `t + 2 * window + grace` — until then a record of the
//! other side that is not late may still match it — and a `left` (left
//! side) or `outer` (either side) join then emits a record that never
//! matched, with `null` for the other side: never early, and never after a
//! match.
//!
//! ```yaml
//! enrich_orders:
//!   type: join
//!   input: [orders, customers]   # a stream and a table (kind: table)
//!   how: left
//!   value: '.orders + {customer: .customers.name}'
//! ```
//!
//! Counters: `streamfold_join_unmatched_records_total` (records that found
//! no partner: dropped by an inner join, also counted as dropped; or
//! emitted with a `null` side), `streamfold_join_late_records_total`,
//! `streamfold_join_expired_records_total` (buffered stream records
//! deleted at the end of their join window).

mod run;
#[cfg(test)]
mod tests;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::expr::{Expression, check, compile_for_build};
use super::keyed::{OnReject, legal_name};
use super::{BuiltOperator, Issue, NodeInfo, NodeInput, Operator, OperatorSpec};
use crate::config::types::{HumanDuration, JsonPointer};
use crate::state::{StateError, StateSet};
use crate::telemetry::NodeCounter;

/// Options of a `join` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct JoinConfig {
    /// `inner` (default): only records with a partner; `left`: every left
    /// record, with `null` for a missing right side; `outer`: both sides
    /// (tables and streams only, not a stream with a table).
    #[serde(default)]
    pub(crate) how: JoinType,
    /// Two streams only: how far apart in event time two records of the
    /// same key may be to join (`5m`).
    #[serde(default)]
    pub(crate) window: Option<HumanDuration>,
    /// Two streams only: how long after the join window a record may still
    /// arrive (default 0s).
    #[serde(default)]
    pub(crate) grace: Option<HumanDuration>,
    /// Two streams only: what happens to a late record: `drop` (default,
    /// counted) or `dead_letter`.
    #[serde(default)]
    pub(crate) on_late: Option<OnReject>,
    /// jq expression building the joined value from `{<left input>: ...,
    /// <right input>: ...}`; it must produce one value.
    #[serde(default)]
    pub(crate) value: Option<Expression>,
    /// Or: output field name → JSON pointer into `{<left input>: ...,
    /// <right input>: ...}` (`/orders/order_id`); a missing value is `null`.
    #[serde(default)]
    pub(crate) fields: Option<IndexMap<String, JsonPointer>>,
    /// A stream with a global table only: the key of the row a stream
    /// record joins, read from the record: a JSON pointer
    /// (`/customer_id`) or a jq expression (`.customer.id | tostring`).
    /// Strings are the key's text, anything else its compact JSON.
    #[serde(default)]
    pub(crate) table_key: Option<Expression>,
}

/// Which records a join emits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum JoinType {
    /// Only records that found a partner.
    #[default]
    Inner,
    /// Every left record, with `null` when the right side has none.
    Left,
    /// Every record of either side, with `null` for a missing partner.
    Outer,
}

/// What the two inputs of a join are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sides {
    StreamTable,
    TableTable,
    StreamStream,
    /// A stream with a global table, by a key read from the stream record.
    StreamGlobal,
    /// A table on the left of a stream: refused.
    TableStream,
    /// A global table with a table, or on the left: refused.
    OtherGlobal,
}

fn sides(inputs: &[NodeInput]) -> Option<Sides> {
    match inputs {
        [left, right] if left.global || right.global => Some(match (left.table, right.global) {
            (false, true) => Sides::StreamGlobal,
            _ => Sides::OtherGlobal,
        }),
        [left, right] => Some(match (left.table, right.table) {
            (false, true) => Sides::StreamTable,
            (true, true) => Sides::TableTable,
            (false, false) => Sides::StreamStream,
            (true, false) => Sides::TableStream,
        }),
        _ => None,
    }
}

/// The stores of each kind of join, by short name.
const TABLE: &str = "table";
const LEFT: &str = "left";
const RIGHT: &str = "right";

impl OperatorSpec for JoinConfig {
    fn stores(&self, inputs: &[NodeInput]) -> &'static [&'static str] {
        match sides(inputs) {
            Some(Sides::StreamTable) => &[TABLE],
            Some(Sides::TableTable | Sides::StreamStream) => &[LEFT, RIGHT],
            _ => &[],
        }
    }

    fn queryable_store(&self, inputs: &[NodeInput]) -> Option<&'static str> {
        (sides(inputs) == Some(Sides::StreamTable)).then_some(TABLE)
    }

    fn uses_timers(&self) -> bool {
        self.window.is_some()
    }

    /// A join with a global table reads its key from the record, and
    /// needs neither keyed input nor co-partitioning.
    fn keyed(&self) -> bool {
        self.table_key.is_none()
    }

    fn reads_tables(&self) -> bool {
        true
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[
            NodeCounter::Dropped,
            NodeCounter::JoinUnmatched,
            NodeCounter::JoinLate,
            NodeCounter::JoinExpired,
        ]
    }

    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        self.check_inputs(node, issues);
        self.check_value(node, issues);
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        let unchecked = || {
            StateError::Backend(format!(
                "join `{}` was never checked: it needs a stream and a table, two tables, or two streams with `window`",
                node.name
            ))
        };
        let (Some(sides), [left, right]) = (sides(node.inputs), node.inputs) else {
            return Err(unchecked());
        };
        let value = run::JoinedValue {
            left: left.name.clone(),
            right: right.name.clone(),
            build: match (&self.value, &self.fields) {
                (Some(expression), _) => {
                    run::Build::Expression(compile_for_build(expression, &[], "value")?)
                }
                (None, Some(fields)) => {
                    run::Build::Fields(fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                }
                (None, None) => run::Build::Pair,
            },
        };
        let operator: Box<dyn Operator> = match sides {
            Sides::StreamTable => Box::new(run::StreamTable {
                table: state.declare(&node.store_name(TABLE))?,
                how: self.how,
                value,
            }),
            Sides::TableTable => Box::new(run::TableTable {
                sides: [
                    state.declare(&node.store_name(LEFT))?,
                    state.declare(&node.store_name(RIGHT))?,
                ],
                how: self.how,
                value,
            }),
            Sides::StreamStream => {
                let window = self.window.ok_or_else(unchecked)?.as_millis();
                Box::new(run::StreamStream::new(
                    [
                        state.declare(&node.store_name(LEFT))?,
                        state.declare(&node.store_name(RIGHT))?,
                    ],
                    self.how,
                    window,
                    self.grace.map_or(0, HumanDuration::as_millis),
                    self.on_late.unwrap_or_default(),
                    value,
                ))
            }
            Sides::StreamGlobal => {
                let table = state.global(&right.name).ok_or_else(|| {
                    StateError::Backend(format!(
                        "join `{}` reads global table `{}`, which this instance does not hold",
                        node.name, right.name
                    ))
                })?;
                let key = match &self.table_key {
                    Some(key) if key.as_str().starts_with('/') => run::TableKey::Pointer(
                        JsonPointer::parse(key.as_str()).map_err(|_| unchecked())?,
                    ),
                    Some(key) => {
                        run::TableKey::Expression(compile_for_build(key, &[], "table_key")?)
                    }
                    None => return Err(unchecked()),
                };
                Box::new(run::StreamGlobal {
                    table,
                    key,
                    how: self.how,
                    value,
                })
            }
            Sides::TableStream | Sides::OtherGlobal => return Err(unchecked()),
        };
        Ok(BuiltOperator::Whole(operator))
    }
}

impl JoinConfig {
    /// Two inputs, and the options their kinds allow.
    fn check_inputs(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        let Some(sides) = sides(node.inputs) else {
            issues.push(Issue::new(
                &["input"],
                format!(
                    "a join has two inputs, the left and the right (`input: [orders, customers]`); found {}",
                    node.inputs.len()
                ),
            ));
            return;
        };
        let (left, right) = (&node.inputs[0].name, &node.inputs[1].name);
        if left == right {
            issues.push(Issue::new(
                &["input"],
                format!("a join needs two different inputs; `{left}` is both"),
            ));
        }
        if self.table_key.is_some() && !matches!(sides, Sides::StreamGlobal | Sides::OtherGlobal) {
            issues.push(Issue::new(
                &["table_key"],
                format!(
                    "`table_key` applies to a join of a stream with a global table (`kind: global_table`); `{right}` is not one"
                ),
            ));
        }
        match sides {
            Sides::TableStream => issues.push(Issue::new(
                &["input"],
                format!(
                    "`{left}` is a table and `{right}` a stream: put the stream first (`input: [{right}, {left}]`), it is what joins the table"
                ),
            )),
            Sides::OtherGlobal => issues.push(Issue::new(
                &["input"],
                format!(
                    "a global table is joined by a stream, on the right: `input: [<stream>, <global table>]`; `{left}` and `{right}` are not that"
                ),
            )),
            Sides::StreamGlobal => {
                self.check_table_key(issues);
                if self.how == JoinType::Outer {
                    issues.push(Issue::new(
                        &["how"],
                        "a stream joins a global table `inner` or `left`: a table update alone emits nothing (as in Kafka Streams)",
                    ));
                }
                self.check_no_window(issues);
            }
            Sides::TableTable if node.key_by.is_some() => issues.push(Issue::new(
                &["key_by"],
                "`key_by` re-keys the stream inputs of a join, and both inputs are tables: a table keeps its key",
            )),
            Sides::StreamTable | Sides::TableTable => {
                if sides == Sides::StreamTable && self.how == JoinType::Outer {
                    issues.push(Issue::new(
                        &["how"],
                        "a stream joins a table `inner` or `left`: a table update alone emits nothing, so there is no outer side (as in Kafka Streams)",
                    ));
                }
                self.check_no_window(issues);
            }
            Sides::StreamStream => match self.window {
                None => issues.push(Issue::new(
                    &[],
                    format!(
                        "a join of two streams (`{left}`, `{right}`) needs `window`: how far apart in event time two records may be to join (Kafka Streams' JoinWindows); to join a table, give its source `kind: table`"
                    ),
                )),
                Some(window) if window.under_a_millisecond() => {
                    issues.push(Issue::new(&["window"], "must be at least 1ms"));
                }
                Some(_) => {}
            },
        }
        if let (Some(window), Some(grace)) = (self.window, self.grace) {
            let retention = window
                .as_millis()
                .checked_mul(2)
                .and_then(|w| w.checked_add(grace.as_millis()));
            if retention.is_none_or(|r| r > HumanDuration::MAX.as_millis()) {
                issues.push(Issue::new(
                    &["grace"],
                    "`window` twice and `grace` add up to more than 100 years",
                ));
            }
        }
    }

    /// A join with a table has no join window: `window`, `grace` and
    /// `on_late` are options of a join of two streams.
    fn check_no_window(&self, issues: &mut Vec<Issue>) {
        for (option, set) in [
            ("window", self.window.is_some()),
            ("grace", self.grace.is_some()),
            ("on_late", self.on_late.is_some()),
        ] {
            if set {
                issues.push(Issue::new(
                    &[option],
                    format!(
                        "`{option}` applies to a join of two streams; with a table, records join its current value"
                    ),
                ));
            }
        }
    }

    /// A global table's key: present, and a pointer or a jq expression
    /// that compiles.
    fn check_table_key(&self, issues: &mut Vec<Issue>) {
        match &self.table_key {
            None => issues.push(Issue::new(
                &[],
                "a join with a global table needs `table_key`: where the stream record names its row (`/customer_id`, or a jq expression)",
            )),
            Some(key) if key.as_str().starts_with('/') => {
                if let Err(error) = JsonPointer::parse(key.as_str()) {
                    issues.push(Issue::new(&["table_key"], error.to_string()));
                }
            }
            Some(key) => {
                if let Some(error) = check(key, &[]) {
                    issues.push(Issue::new(&["table_key"], error.to_string()));
                }
            }
        }
    }

    /// `value` compiles, or `fields` name legal fields that read one of the
    /// inputs.
    fn check_value(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if let Some(expression) = &self.value {
            if let Some(error) = check(expression, &[]) {
                issues.push(Issue::new(&["value"], error.to_string()));
            }
            if self.fields.is_some() {
                issues.push(Issue::new(
                    &["fields"],
                    "set either `value` (a jq expression) or `fields`, not both",
                ));
            }
        }
        for (name, pointer) in self.fields.iter().flatten() {
            if !legal_name(name) {
                issues.push(Issue::new(
                    &["fields", name],
                    "field names use letters, digits, `_` and `-`",
                ));
            }
            let first = pointer.tokens().first();
            if !node.inputs.is_empty() && !node.inputs.iter().any(|i| Some(&i.name) == first) {
                let names: Vec<String> = node
                    .inputs
                    .iter()
                    .map(|i| format!("`/{}`", i.name))
                    .collect();
                issues.push(Issue::new(
                    &["fields", name],
                    format!(
                        "`{pointer}` reads neither input: start it with an input's name, {}",
                        names.join(" or ")
                    ),
                ));
            }
        }
    }
}
