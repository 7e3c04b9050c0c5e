//! The simplest expressions, updates and conditions, evaluated without jaq.
//!
//! Most projection rules take one of a few shapes: set a field from the
//! event (`.title = $event.title`), set a constant (`.is_deleted = true`),
//! count (`.answers += 1`) or merge fields into the entity
//! (`. + {title: $event.title, is_deleted: (.is_deleted // false)}`),
//! chained with `|`. Through jaq such a rule costs a conversion of the
//! entity and the event into jaq's values and of the result back, which is
//! most of the rule's time. This module recognises those shapes in the
//! expression's text and evaluates them on the JSON values directly.
//!
//! It is an optimisation, not a dialect: a text it does not recognise is
//! compiled and run by jaq only, and so is any evaluation it is not sure
//! to get exactly right — a counter that is not an integer, an overflow, a
//! field read from something that is not an object, an input that is not
//! an object. jaq then gives the result or the error. The property test
//! below generates rules and values and checks that wherever this module
//! gives a result, jaq gives the same one.
//!
//! Recognised updates, separated by `|`:
//!
//! | update | meaning |
//! |---|---|
//! | `.f = term` | set field `f` |
//! | `.f += n` | add the integer `n` to field `f` (absent or null counts as 0) |
//! | `. + {f: term, g: term, ...}` | set several fields at once |
//!
//! and conditions (of `filter`, `route`, `reset_when`): comparisons
//! `term == term` (also `!=`, `<`, `<=`, `>`, `>=`) and terms tested for
//! truth, joined with `and` and `or`, grouped with parentheses.
//!
//! A term is a literal (`true`, `false`, `null`, an integer, a string
//! without escapes), a field path of the input (`.f`, `.f.g`), a field path
//! of a variable the operator binds (`$event.f`), or, in an update, either
//! path with a default (`(.f // false)`). Field names are identifiers;
//! anything else (`.a.b = 1`, `.f |= .+1`, `del(.f)`, `$key`, `not`,
//! `.n > 1.5`) is jaq's. Comparisons are done here only between integers,
//! between strings, or between null and booleans; any other pair (floats,
//! arrays, objects, mixed types) is jaq's.

use serde_json::Value;

use parse::Parser;

mod parse;

/// A recognised expression.
#[derive(Debug, PartialEq)]
pub(super) enum Native {
    /// Updates applied in order to an object.
    Updates(Vec<Update>),
    /// A condition: its output is a boolean, or a lone term's value.
    Condition(Condition),
}

#[derive(Debug, PartialEq)]
pub(super) enum Update {
    /// `.field = term`
    Set(String, Term),
    /// `.field += integer`
    Add(String, i64),
    /// `. + {field: term, ...}`
    Merge(Vec<(String, Term)>),
}

#[derive(Debug, PartialEq)]
pub(super) enum Term {
    Literal(Value),
    /// `.a.b`: fields read from the input.
    Input(Vec<String>),
    /// `$var.a.b`: the operator's variable at this index, and the fields
    /// read from it.
    Var(usize, Vec<String>),
    /// `(term // literal)`: the literal when the term is null or false.
    Or(Box<Term>, Value),
}

#[derive(Debug, PartialEq)]
pub(super) enum Condition {
    Or(Box<Condition>, Box<Condition>),
    And(Box<Condition>, Box<Condition>),
    Compare(Term, Comparison, Term),
    /// A term tested for truth: neither null nor false.
    Truthy(Term),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Comparison {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

static NULL: Value = Value::Null;

impl Native {
    /// Recognises `code`, whose operator binds `vars` (each starting with
    /// `$`) in this order; `None` when it is not one of the shapes above.
    pub(super) fn parse(code: &str, vars: &[&str]) -> Option<Native> {
        // A comment could hide anything; leave such texts to jaq.
        if code.contains('#') {
            return None;
        }
        let parser = || Parser { code, at: 0, vars };
        let mut updates = parser();
        if let Some(updates) = updates.updates() {
            return Some(Native::Updates(updates));
        }
        let mut condition = parser();
        let parsed = condition.condition()?;
        condition.skip_space();
        (condition.at == code.len()).then_some(Native::Condition(parsed))
    }

    /// Whether the expression's output on `input` is true (neither null
    /// nor false), without copying a value to find out; `None` leaves it
    /// to jaq.
    pub(super) fn holds(&self, input: &Value) -> Option<bool> {
        match self {
            Native::Updates(_) => self.eval(input, &[]).map(|output| truthy(&output)),
            Native::Condition(condition) => condition.eval(input, &[]),
        }
    }

    /// Evaluates the expression on `input` with the operator's variables
    /// `vars`; `None` leaves the evaluation to jaq.
    pub(super) fn eval(&self, input: &Value, vars: &[&Value]) -> Option<Value> {
        match self {
            Native::Updates(updates) => update(updates, input, vars),
            // A lone term's output is its value, not whether it is true.
            Native::Condition(Condition::Truthy(term)) => term.peek(input, vars).cloned(),
            Native::Condition(condition) => condition.eval(input, vars).map(Value::Bool),
        }
    }
}

fn update(updates: &[Update], input: &Value, vars: &[&Value]) -> Option<Value> {
    if !input.is_object() {
        return None;
    }
    let mut entity = input.clone();
    for update in updates {
        match update {
            Update::Set(field, term) => {
                let value = term.eval(&entity, vars)?;
                entity.as_object_mut()?.insert(field.clone(), value);
            }
            Update::Add(field, n) => {
                // jaq adds integers exactly and turns an overflow into a
                // big integer, and anything with a float into a float:
                // only the exact case is done here.
                let sum = match entity.get(field) {
                    None | Some(Value::Null) => *n,
                    Some(Value::Number(current)) => current.as_i64()?.checked_add(*n)?,
                    Some(_) => return None,
                };
                entity
                    .as_object_mut()?
                    .insert(field.clone(), Value::from(sum));
            }
            Update::Merge(merged) => {
                // Every value is read from the input before any is set.
                let values = merged
                    .iter()
                    .map(|(field, term)| Some((field, term.eval(&entity, vars)?)))
                    .collect::<Option<Vec<_>>>()?;
                let fields = entity.as_object_mut()?;
                for (field, value) in values {
                    fields.insert(field.clone(), value);
                }
            }
        }
    }
    Some(entity)
}

/// Follows `path` from `value` as jq's `.a.b` does: a field of an object,
/// null from null; `None` where jq fails (a field of anything else).
fn read<'v>(mut value: &'v Value, path: &[String]) -> Option<&'v Value> {
    for field in path {
        value = match value {
            Value::Object(fields) => fields.get(field).unwrap_or(&NULL),
            Value::Null => &NULL,
            _ => return None,
        };
    }
    Some(value)
}

impl Term {
    fn eval(&self, input: &Value, vars: &[&Value]) -> Option<Value> {
        Some(match self {
            Term::Literal(value) => value.clone(),
            Term::Input(path) => read(input, path)?.clone(),
            Term::Var(index, path) => read(vars.get(*index)?, path)?.clone(),
            Term::Or(term, default) => match term.eval(input, vars)? {
                Value::Null | Value::Bool(false) => default.clone(),
                value => value,
            },
        })
    }

    /// The term's value without copying it where it can be borrowed.
    fn peek<'v>(&'v self, input: &'v Value, vars: &[&'v Value]) -> Option<&'v Value> {
        match self {
            Term::Literal(value) => Some(value),
            Term::Input(path) => read(input, path),
            Term::Var(index, path) => read(vars.get(*index)?, path),
            // Not produced by the condition parser.
            Term::Or(..) => None,
        }
    }
}

fn truthy(value: &Value) -> bool {
    !matches!(value, Value::Null | Value::Bool(false))
}

impl Condition {
    fn eval(&self, input: &Value, vars: &[&Value]) -> Option<bool> {
        match self {
            // jq does not evaluate the right side when the left decides.
            Condition::Or(left, right) => match left.eval(input, vars)? {
                true => Some(true),
                false => right.eval(input, vars),
            },
            Condition::And(left, right) => match left.eval(input, vars)? {
                false => Some(false),
                true => right.eval(input, vars),
            },
            Condition::Truthy(term) => term.peek(input, vars).map(truthy),
            Condition::Compare(left, comparison, right) => {
                let ordering = order(left.peek(input, vars)?, right.peek(input, vars)?)?;
                Some(match comparison {
                    Comparison::Eq => ordering.is_eq(),
                    Comparison::Ne => ordering.is_ne(),
                    Comparison::Lt => ordering.is_lt(),
                    Comparison::Le => ordering.is_le(),
                    Comparison::Gt => ordering.is_gt(),
                    Comparison::Ge => ordering.is_ge(),
                })
            }
        }
    }
}

/// jq's order of two values where it is sure to be jq's: integers by value,
/// strings by their bytes (UTF-8 keeps code point order), and null < false
/// < true < numbers < strings between kinds. Floats, arrays and objects
/// are jaq's.
fn order(left: &Value, right: &Value) -> Option<std::cmp::Ordering> {
    fn rank(value: &Value) -> Option<u8> {
        match value {
            Value::Null => Some(0),
            Value::Bool(false) => Some(1),
            Value::Bool(true) => Some(2),
            Value::Number(n) if n.as_i64().is_some() => Some(3),
            Value::String(_) => Some(4),
            _ => None,
        }
    }
    let (l, r) = (rank(left)?, rank(right)?);
    Some(match (left, right) {
        (Value::Number(a), Value::Number(b)) => a.as_i64()?.cmp(&b.as_i64()?),
        (Value::String(a), Value::String(b)) => a.as_bytes().cmp(b.as_bytes()),
        _ => l.cmp(&r),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{Bindings, Program};
    use super::*;

    /// `code` compiled for jaq alone: the native path taken away.
    fn jaq_only(code: &str, vars: &[&'static str]) -> Program {
        let mut program = Program::compile(code, vars).expect("compiles");
        program.native = None;
        program
    }

    const BINDINGS: Bindings<'static> = Bindings {
        key: None,
        timestamp: 1,
        headers: &[],
    };

    /// What jaq alone gives for the rule `code`.
    fn jaq(code: &str, input: &Value, event: &Value) -> Result<Value, String> {
        jaq_only(code, &["$event"]).one(input, &BINDINGS, &[event])
    }

    fn native(code: &str) -> Option<Native> {
        Native::parse(code, &["$event"])
    }

    /// What jaq alone gives for the condition `code`.
    fn jaq_test(code: &str, input: &Value) -> Result<bool, String> {
        jaq_only(code, &[]).test(input, &BINDINGS)
    }

    /// What jaq alone outputs for `code`, run as a `map` expression.
    fn jaq_value(code: &str, input: &Value) -> Result<Value, String> {
        jaq_only(code, &[]).one(input, &BINDINGS, &[])
    }

    #[test]
    fn a_lone_term_outputs_its_value() {
        for (code, input) in [
            ("null", json!({})),
            ("(.a.b)", json!({"a": {"b": [1, 2]}})),
            ("\"x\"", json!(null)),
            (".a == 1", json!({"a": 1})),
        ] {
            let recognised = native(code).expect("recognised");
            assert_eq!(
                Ok(recognised.eval(&input, &[]).unwrap()),
                jaq_value(code, &input),
                "{code}"
            );
        }
    }

    #[test]
    fn the_shipped_conditions_are_recognised() {
        let conditions = [
            r#".type == "QuestionCreated" or .type == "QuestionEdited" or .type == "AnswerAdded" or .type == "QuestionDeleted""#,
            r#".type == "ThanksForAnswerGiven""#,
            r#".op == "ClearCount""#,
            r#".status == "settled" and .amount > 0"#,
            r#"(.a.b != null or .c) and -1 <= .n"#,
        ];
        let inputs = [
            json!({"type": "AnswerAdded", "op": "Add", "status": "settled", "amount": 3}),
            json!({"type": "Other", "op": "ClearCount", "amount": -1, "a": {"b": 1}, "n": 0}),
            json!({}),
        ];
        for condition in conditions {
            let recognised = Native::parse(condition, &[])
                .unwrap_or_else(|| panic!("`{condition}` is recognised"));
            for input in &inputs {
                let value = recognised.eval(input, &[]).expect("evaluated natively");
                assert_eq!(
                    Ok(truthy(&value)),
                    jaq_test(condition, input),
                    "{condition} on {input}"
                );
            }
        }
    }

    #[test]
    fn the_shipped_rules_are_recognised() {
        let rules = [
            ". + {title: $event.title, author: $event.author, is_deleted: (.is_deleted // false)}",
            ".title = $event.title",
            ".answers += 1",
            ".is_deleted = true",
            ". + {title: $event.title, answers: 0}",
            ".a = 1 | .b += -2 | . + {\"c d\": \"x\"}",
        ];
        let input = json!({"answers": 2, "is_deleted": false});
        let event = json!({"title": "Why?", "author": "ann"});
        for rule in rules {
            let recognised = native(rule).unwrap_or_else(|| panic!("`{rule}` is recognised"));
            let value = recognised
                .eval(&input, &[&event])
                .expect("evaluated natively");
            assert_eq!(Ok(value), jaq(rule, &input, &event), "{rule}");
        }
    }

    #[test]
    fn other_texts_are_left_to_jaq() {
        for code in [
            ".",
            ".a.b = 1",
            ".a |= . + 1",
            ".a = .b + 1",
            ".a = .b // 1",
            ".a = 1.5",
            ".a += 1e3",
            ".a = $key",
            ".a = $event[0]",
            ".a = $event.b?",
            ".a = length",
            ".a = \"x\\n\"",
            ".a = \"\\(.b)\"",
            ".if = 1",
            ". + {if: 1}",
            ".a = 1 # a comment",
            ".a = 1 |",
            "del(.a)",
            "{a: 1}",
            ". + {a: 1} + {b: 2}",
            ".a = 01",
            ".a = 1,",
            ".a == 1 | not",
            ".a == 1.5",
            ".a == [1]",
            ".a and not",
            ".a == .b + 1",
            "(.a == 1",
            ".a == 1 or",
            ".a // 1 == 2",
            ".type | startswith(\"Q\")",
            ".a == 1 andx",
        ] {
            assert_eq!(native(code), None, "{code}");
        }
    }

    #[test]
    fn evaluations_it_is_not_sure_of_are_left_to_jaq() {
        let event = json!({"n": 1});
        let cases = [
            (".a += 1", json!({"a": 1.5})),
            (".a += 1", json!({"a": "text"})),
            (".a += 1", json!({"a": i64::MAX})),
            (".a += 1", json!({"a": u64::MAX})),
            (".a = $event.n.m", json!({})),
            (".a = 1", json!(null)),
            (".a = 1", json!([1])),
        ];
        for (code, input) in cases {
            let recognised = native(code).expect("recognised");
            assert_eq!(
                recognised.eval(&input, &[&event]),
                None,
                "{code} on {input}"
            );
        }
    }

    const FIELDS: [&str; 4] = ["a", "b", "title", "answers"];

    fn field() -> impl Strategy<Value = &'static str> {
        prop::sample::select(&FIELDS[..])
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-3i64..3).prop_map(Value::from),
            prop::sample::select(vec![i64::MIN, i64::MIN + 1, i64::MAX - 1, i64::MAX])
                .prop_map(Value::from),
            Just(Value::from(u64::MAX)),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-zé😀 ]{0,4}".prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(field().prop_map(String::from), inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn object() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(field().prop_map(String::from), value(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// Literal texts, integers at the edges included.
    fn literal() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("true".to_string()),
            Just("false".to_string()),
            Just("null".to_string()),
            (-3i64..3).prop_map(|n| n.to_string()),
            prop::sample::select(vec![i64::MIN + 1, i64::MAX]).prop_map(|n| n.to_string()),
            "[a-zé😀 ]{0,4}".prop_map(|s| format!("\"{s}\"")),
        ]
    }

    fn path() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::collection::vec(field(), 1..3)
                .prop_map(|fields| fields.iter().map(|f| format!(".{f}")).collect::<String>()),
            prop::collection::vec(field(), 0..3).prop_map(|fields| format!(
                "$event{}",
                fields.iter().map(|f| format!(".{f}")).collect::<String>()
            )),
        ]
    }

    fn term() -> impl Strategy<Value = String> {
        prop_oneof![
            literal(),
            path(),
            (path(), literal()).prop_map(|(path, default)| format!("({path} // {default})")),
        ]
    }

    fn update() -> impl Strategy<Value = String> {
        prop_oneof![
            (field(), term()).prop_map(|(f, t)| format!(".{f} = {t}")),
            (
                field(),
                literal().prop_filter("an integer", |l| l.parse::<i64>().is_ok())
            )
                .prop_map(|(f, n)| format!(".{f} += {n}")),
            prop::collection::vec((field(), term()), 1..4).prop_map(|fields| {
                let fields: Vec<String> = fields.iter().map(|(f, t)| format!("{f}: {t}")).collect();
                format!(". + {{{}}}", fields.join(", "))
            }),
        ]
    }

    fn rule() -> impl Strategy<Value = String> {
        prop::collection::vec(update(), 1..4).prop_map(|updates| updates.join(" | "))
    }

    fn operand() -> impl Strategy<Value = String> {
        prop_oneof![
            literal(),
            prop::collection::vec(field(), 1..3)
                .prop_map(|fields| fields.iter().map(|f| format!(".{f}")).collect::<String>()),
        ]
    }

    fn comparison() -> impl Strategy<Value = String> {
        let operator = prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="]);
        prop_oneof![
            (operand(), operator, operand()).prop_map(|(l, op, r)| format!("{l} {op} {r}")),
            operand(),
        ]
    }

    fn condition() -> impl Strategy<Value = String> {
        comparison().prop_recursive(3, 12, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(l, r)| format!("{l} and {r}")),
                (inner.clone(), inner.clone()).prop_map(|(l, r)| format!("{l} or {r}")),
                inner.prop_map(|c| format!("({c})")),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Wherever a native condition gives a result, jaq's test gives
        /// the same; where jaq fails, the native evaluation declines.
        #[test]
        fn native_conditions_are_jaq_s(
            condition in condition(),
            input in prop_oneof![4 => object(), 1 => value()],
        ) {
            let recognised = Native::parse(&condition, &[]);
            prop_assert!(recognised.is_some(), "`{}` is recognised", condition);
            if let Some(value) = recognised.and_then(|n| n.eval(&input, &[])) {
                prop_assert_eq!(Ok(truthy(&value)), jaq_test(&condition, &input), "{} on {}", condition, input);
                prop_assert_eq!(Ok(value), jaq_value(&condition, &input), "{} on {}", condition, input);
            }
        }

        /// Wherever the native evaluation gives a result, jaq gives the
        /// same; where jaq fails, the native evaluation declines.
        #[test]
        fn native_results_are_jaq_s(
            rule in rule(),
            input in object(),
            event in prop_oneof![4 => object(), 1 => value()],
        ) {
            let recognised = native(&rule);
            prop_assert!(recognised.is_some(), "`{}` is recognised", rule);
            if let Some(value) = recognised.and_then(|n| n.eval(&input, &[&event])) {
                prop_assert_eq!(Ok(value), jaq(&rule, &input, &event), "{} on {} with {}", rule, input, event);
            }
        }
    }
}
