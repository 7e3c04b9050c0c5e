//! `route`: send records to named outputs by jq conditions.
//!
//! Each route is a named output with a condition (a jq expression, see
//! [`super::expr`]); downstream nodes and sinks read a route as
//! `input: <node>.<route>`. A record goes to every route whose condition
//! holds (its first output is neither `false` nor `null`), or only to the
//! first one in the order written with `first_match: true`. A record that
//! matches no route leaves on the node's default output, read as
//! `input: <node>`; when nothing reads it, such records end there (counted
//! in `streamfold_route_unmatched_records_total`). A condition that fails
//! sends the record to the dead-letter topic, and it goes to no route.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `routes.<name>` | the condition of the output `<name>` (letters, digits, `_`, `-`) |
//! | `first_match` | `true`: only the first matching route (default `false`: all) |
//!
//! ```yaml
//! by_kind:
//!   type: route
//!   input: feed_events
//!   routes:
//!     questions: '.type | startswith("Question")'
//!     answers: '.type | startswith("Answer")'
//! sinks:
//!   questions: { topic: questions, input: by_kind.questions }
//!   unmatched: { topic: other-events, input: by_kind }
//! ```
//!
//! Stateless; records keep their key, value, timestamp and headers.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::expr::{Bindings, Expression, Program, check, compile_for_build};
use super::keyed::legal_name;
use super::{BuiltOperator, Context, Issue, NodeInfo, OpError, Operator, OperatorSpec};
use crate::record::Record;
use crate::state::{StateError, StateSet};
use crate::telemetry::NodeCounter;

/// Options of a `route` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct RouteConfig {
    /// Named outputs, each with the jq condition its records satisfy. Read
    /// one as `input: <node>.<name>`; records matching none leave on the
    /// default output (`input: <node>`).
    pub(crate) routes: IndexMap<String, Expression>,
    /// Send a record only to the first matching route, in the order
    /// written, instead of to every matching route.
    #[serde(default)]
    pub first_match: bool,
}

impl OperatorSpec for RouteConfig {
    fn outputs(&self) -> Vec<String> {
        self.routes.keys().cloned().collect()
    }

    /// Records on a route nobody reads (or on an unread default output)
    /// are dropped.
    fn counters(&self) -> &'static [NodeCounter] {
        &[NodeCounter::Dropped, NodeCounter::RouteUnmatched]
    }

    fn validate(&self, _node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if self.routes.is_empty() {
            issues.push(Issue::new(
                &["routes"],
                "a route node needs at least one route: `routes: {name: condition}`",
            ));
        }
        for (name, condition) in &self.routes {
            let at = ["routes", name.as_str()];
            if !legal_name(name) {
                issues.push(Issue::new(
                    &at,
                    format!("`{name}` cannot name an output: use letters, digits, `_` and `-`"),
                ));
            }
            if let Some(error) = check(condition, &[]) {
                issues.push(Issue::new(&at, error.to_string()));
            }
        }
    }

    fn build(
        &self,
        _node: &NodeInfo<'_>,
        _state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        let mut routes = Vec::with_capacity(self.routes.len());
        for (name, condition) in &self.routes {
            routes.push((
                name.clone(),
                compile_for_build(condition, &[], &format!("routes.{name}"))?,
            ));
        }
        Ok(BuiltOperator::whole(Route {
            routes,
            first_match: self.first_match,
        }))
    }
}

struct Route {
    /// In declaration order: output `i + 1` is `routes[i]`.
    routes: Vec<(String, Program)>,
    first_match: bool,
}

impl Operator for Route {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let bindings = Bindings::of(&record);
        let mut matched = Vec::new();
        for (index, (name, condition)) in self.routes.iter().enumerate() {
            let holds = condition
                .test(&record.value, &bindings)
                .map_err(|e| OpError::Record(format!("condition of route `{name}` failed: {e}")))?;
            if holds {
                matched.push(index + 1);
                if self.first_match {
                    break;
                }
            }
        }
        let Some((&last, rest)) = matched.split_last() else {
            ctx.count(NodeCounter::RouteUnmatched, 1);
            ctx.emit(record);
            return Ok(());
        };
        for &output in rest {
            ctx.emit_to(output, record.clone());
        }
        ctx.emit_to(last, record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{Harness, record};
    use super::*;

    fn outputs(out: &[super::super::Emit]) -> Vec<usize> {
        out.iter().map(|e| e.output).collect()
    }

    #[test]
    fn records_go_to_every_matching_route_or_to_the_default_output() {
        let mut h = Harness::new(
            json!({"type": "route", "routes": {"big": ".n > 10", "even": ".n % 2 == 0"}}),
            None,
        );
        assert_eq!(
            outputs(&h.process(record("k", json!({"n": 12}), 0)).unwrap()),
            vec![1, 2]
        );
        assert_eq!(
            outputs(&h.process(record("k", json!({"n": 4}), 0)).unwrap()),
            vec![2]
        );
        assert_eq!(
            outputs(&h.process(record("k", json!({"n": 3}), 0)).unwrap()),
            vec![0]
        );
        assert_eq!(h.count(NodeCounter::RouteUnmatched), 1);
    }

    #[test]
    fn first_match_stops_at_the_first_route_written() {
        let mut h = Harness::new(
            json!({"type": "route", "first_match": true, "routes": {"big": ".n > 10", "even": ".n % 2 == 0"}}),
            None,
        );
        assert_eq!(
            outputs(&h.process(record("k", json!({"n": 12}), 0)).unwrap()),
            vec![1]
        );
    }

    #[test]
    fn a_failing_condition_routes_the_record_nowhere() {
        let mut h = Harness::new(
            json!({"type": "route", "routes": {"a": "true", "b": ".n.m"}}),
            None,
        );
        let err = h.process(record("k", json!({"n": 1}), 0)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("condition of route `b` failed: "),
            "{err}"
        );
    }
}
