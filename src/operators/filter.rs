//! `filter`: keep the records a jq condition holds for.
//!
//! The condition is a jq expression (see [`super::expr`]) run on the record
//! value; the record is kept when its first output is neither `false` nor
//! `null`, as with jq's `select`. Kept records pass unchanged (key, value,
//! timestamp, headers). A condition that fails on a record (`.n > 1` where
//! `.n` is a string compares fine in jq, but `.a.b` on a string does not)
//! sends the record to the dead-letter topic with jq's error.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `condition` | jq expression; `$key`, `$timestamp`, `$headers` describe the record |
//!
//! ```yaml
//! questions_only:
//!   type: filter
//!   input: feed_events
//!   condition: '.type | startswith("Question")'
//! ```
//!
//! Stateless. Records not kept are counted in
//! `streamfold_filter_rejected_records_total` and
//! `streamfold_node_dropped_records_total`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::expr::{Bindings, Expression, Program, check, compile_for_build};
use super::{BuiltOperator, Context, Issue, NodeInfo, OpError, Operator, OperatorSpec};
use crate::record::Record;
use crate::state::{StateError, StateSet};
use crate::telemetry::NodeCounter;

/// Options of a `filter` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FilterConfig {
    /// jq expression run on the record value; the record is kept when its
    /// first output is neither `false` nor `null`.
    pub(crate) condition: Expression,
}

impl OperatorSpec for FilterConfig {
    fn counters(&self) -> &'static [NodeCounter] {
        &[NodeCounter::Dropped, NodeCounter::FilterRejected]
    }

    fn validate(&self, _node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if let Some(error) = check(&self.condition, &[]) {
            issues.push(Issue::new(&["condition"], error.to_string()));
        }
    }

    fn build(
        &self,
        _node: &NodeInfo<'_>,
        _state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        Ok(BuiltOperator::whole(Filter {
            condition: compile_for_build(&self.condition, &[], "condition")?,
        }))
    }
}

struct Filter {
    condition: Program,
}

impl Operator for Filter {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let keep = self
            .condition
            .test(&record.value, &Bindings::of(&record))
            .map_err(|e| OpError::Record(format!("condition failed: {e}")))?;
        if keep {
            ctx.emit(record);
        } else {
            ctx.count(NodeCounter::FilterRejected, 1);
            ctx.count(NodeCounter::Dropped, 1);
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
    fn records_the_condition_holds_for_pass_unchanged() {
        let mut h = Harness::new(
            json!({"type": "filter", "condition": ".type | startswith(\"Question\")"}),
            None,
        );
        let kept = h
            .process(record("q1", json!({"type": "QuestionCreated"}), 5))
            .unwrap();
        assert_eq!(values(&kept), vec![json!({"type": "QuestionCreated"})]);
        assert_eq!(kept[0].record.key.as_deref(), Some(&b"q1"[..]));
        assert_eq!(kept[0].record.timestamp, 5);
        assert!(
            h.process(record("a1", json!({"type": "AnswerAdded"}), 0))
                .unwrap()
                .is_empty()
        );
        assert_eq!(h.count(NodeCounter::FilterRejected), 1);
        assert_eq!(h.count(NodeCounter::Dropped), 1);
    }

    #[test]
    fn a_condition_that_fails_is_the_record_s_fault() {
        let mut h = Harness::new(
            json!({"type": "filter", "condition": ".type | startswith(\"Q\")"}),
            None,
        );
        let err = h.process(record("k", json!({"type": 7}), 0)).unwrap_err();
        assert!(matches!(err, OpError::Record(_)));
        assert!(err.to_string().starts_with("condition failed: "), "{err}");
    }
}
