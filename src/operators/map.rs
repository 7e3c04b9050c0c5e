//! `map`: reshape each record with a jq expression.
//!
//! The expression (see [`super::expr`]) runs on the record value; each of
//! its outputs becomes a record with the input's key, timestamp and
//! headers. Most expressions have one output (`{id: .id, total: .a + .b}`);
//! one with several splits a record (`.items[]`), and one with none
//! (`empty`, or `select(...)` that fails) drops it, counted. A failing
//! expression sends the record to the dead-letter topic with jq's error.
//! The key does not change: regroup with `key_by` on the next keyed node.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `expression` | jq expression producing the new value(s) |
//! | `max_outputs` | most records one input may become (default 1000); more is the record's error |
//!
//! ```yaml
//! read_model_view:
//!   type: map
//!   input: project_question
//!   expression: '{question_id, title, answers: (.answers // 0), version}'
//! ```
//!
//! Stateless. Inputs with no output are counted in
//! `streamfold_map_empty_results_total` and
//! `streamfold_node_dropped_records_total`.

use std::num::NonZeroUsize;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::expr::{Bindings, Expression, Program, check, compile_for_build};
use super::{BuiltOperator, Context, Issue, NodeInfo, OpError, Operator, OperatorSpec};
use crate::record::Record;
use crate::state::{StateError, StateSet};
use crate::telemetry::NodeCounter;

/// Options of a `map` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct MapConfig {
    /// jq expression run on the record value; each output becomes a record
    /// with the input's key, timestamp and headers.
    pub(crate) expression: Expression,
    /// The most records one input may become; an expression producing more
    /// is the record's error (it goes to the dead-letter topic). Default
    /// 1000.
    #[serde(default = "default_max_outputs")]
    pub(crate) max_outputs: NonZeroUsize,
}

fn default_max_outputs() -> NonZeroUsize {
    NonZeroUsize::new(1000).unwrap_or(NonZeroUsize::MIN)
}

impl OperatorSpec for MapConfig {
    fn counters(&self) -> &'static [NodeCounter] {
        &[NodeCounter::Dropped, NodeCounter::MapEmpty]
    }

    fn validate(&self, _node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if let Some(error) = check(&self.expression, &[]) {
            issues.push(Issue::new(&["expression"], error.to_string()));
        }
    }

    fn build(
        &self,
        _node: &NodeInfo<'_>,
        _state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        Ok(BuiltOperator::whole(Map {
            expression: compile_for_build(&self.expression, &[], "expression")?,
            max_outputs: self.max_outputs.get(),
        }))
    }
}

struct Map {
    expression: Program,
    max_outputs: usize,
}

impl Operator for Map {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let outputs = self
            .expression
            .run(
                &record.value,
                &Bindings::of(&record),
                &[],
                self.max_outputs.saturating_add(1),
            )
            .map_err(|e| OpError::Record(format!("expression failed: {e}")))?;
        if outputs.len() > self.max_outputs {
            return Err(OpError::Record(format!(
                "the expression produced more than {} records (`max_outputs`)",
                self.max_outputs
            )));
        }
        if outputs.is_empty() {
            ctx.count(NodeCounter::MapEmpty, 1);
            ctx.count(NodeCounter::Dropped, 1);
        }
        for value in outputs {
            ctx.emit(Record {
                key: record.key.clone(),
                value,
                timestamp: record.timestamp,
                headers: record.headers.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{Harness, record, values};
    use super::*;

    #[test]
    fn each_output_becomes_a_record_with_the_input_s_key() {
        let mut h = Harness::new(
            json!({"type": "map", "expression": "{id: .id, total: (.a + .b)}"}),
            None,
        );
        let out = h
            .process(record("k", json!({"id": 1, "a": 2, "b": 3}), 9))
            .unwrap();
        assert_eq!(values(&out), vec![json!({"id": 1, "total": 5})]);
        assert_eq!(out[0].record.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(out[0].record.timestamp, 9);
    }

    #[test]
    fn several_outputs_split_a_record_and_none_drops_it() {
        let mut h = Harness::new(
            json!({"type": "map", "expression": ".items[]", "max_outputs": 3}),
            None,
        );
        let out = h
            .process(record("k", json!({"items": [1, 2, 3]}), 0))
            .unwrap();
        assert_eq!(values(&out), vec![json!(1), json!(2), json!(3)]);
        assert!(
            h.process(record("k", json!({"items": []}), 0))
                .unwrap()
                .is_empty()
        );
        assert_eq!(h.count(NodeCounter::MapEmpty), 1);
        let err = h
            .process(record("k", json!({"items": [1, 2, 3, 4]}), 0))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the expression produced more than 3 records (`max_outputs`)"
        );
        let err = h.process(record("k", json!({"items": 5}), 0)).unwrap_err();
        assert!(err.to_string().starts_with("expression failed: "), "{err}");
    }
}
