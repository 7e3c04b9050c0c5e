//! Expressions: jq programs, compiled and run by [jaq](https://github.com/01mf02/jaq).
//!
//! `filter`, `map`, `route`, the rules of `projection` and the reset test
//! of `rollup` are written in jq, the JSON query language most people who
//! handle JSON on the command line already know:
//!
//! ```yaml
//! where: '.type == "QuestionCreated" and (.tags | index("rust"))'
//! expr: '{id: .question_id, title: .title | ascii_downcase}'
//! ```
//!
//! Why jq through jaq rather than CEL or a language of our own: jq's syntax
//! is the one users of `kafkacat | jq` already type every day, it is built
//! for reshaping JSON (objects, paths, updates such as `.n += 1`), and jaq
//! is a maintained, pure-Rust implementation (no C toolchain, no unsafe
//! code) that compiles a program once and runs it many times — exactly the
//! shape of a stream operator. CEL would give predicates but no reshaping.
//!
//! Every expression is compiled when the topology is checked, so a syntax
//! error or an unknown function is a `streamfold check` error naming the
//! line and column inside the expression. A running operator compiles its
//! expressions once and evaluates them per record. Besides its input
//! (`.`), an expression can read:
//!
//! | variable | value |
//! |---|---|
//! | `$key` | the record key as text (`null` when the record has none) |
//! | `$timestamp` | the record timestamp, epoch milliseconds |
//! | `$headers` | the record headers, `{"name": "text"}` |
//!
//! and operators may declare more (`projection` rules read `$event`).
//!
//! Expressions must be deterministic, so that replaying a topic (after a
//! crash, or from the dead-letter topic) gives the same result: `now` and
//! `env` are not available. A runtime error (`.a + 1` on a string, say) is
//! the record's fault: the record goes to the dead-letter topic with the
//! error as its reason.

use std::borrow::Cow;
use std::fmt;

use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data::JustLut};
use jaq_json::{Num, Val};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

use crate::record::{Record, Timestamp};

mod native;

type Data = JustLut<Val>;

/// Natives left out because their result depends on when or where the
/// expression runs, which would make replays differ.
const NON_DETERMINISTIC: &[&str] = &["now", "env"];

/// Variables every expression may read, in the order they are bound.
const STANDARD_VARS: [&str; 3] = ["$key", "$timestamp", "$headers"];

/// The text of a jq expression in a topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Expression(pub String);

impl Expression {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Expression {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Expression)
    }
}

impl Serialize for Expression {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl JsonSchema for Expression {
    fn schema_name() -> Cow<'static, str> {
        "Expression".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A jq expression (run by jaq). `.` is the record value; `$key`, `$timestamp` and `$headers` describe the record.",
            "examples": [".type == \"QuestionCreated\"", "{id: .id, total: .n + 1}"]
        })
    }
}

/// Why an expression does not compile, with where in its text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CompileError {
    /// 1-based line within the expression.
    pub(crate) line: usize,
    /// 1-based column (in characters) within that line.
    pub(crate) col: usize,
    pub(crate) message: String,
    /// Whether the expression spans several lines (the line is then worth
    /// naming).
    multiline: bool,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.multiline {
            write!(
                f,
                "invalid jq expression at line {}, column {}: {}",
                self.line, self.col, self.message
            )
        } else {
            write!(
                f,
                "invalid jq expression at column {}: {}",
                self.col, self.message
            )
        }
    }
}

impl CompileError {
    fn at(code: &str, offset: usize, message: String) -> CompileError {
        let offset = offset.min(code.len());
        let before = &code[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = code[line_start..offset].chars().count() + 1;
        CompileError {
            line,
            col,
            message,
            multiline: code.trim_end().contains('\n'),
        }
    }
}

/// The values of a record that expressions see as `$key`, `$timestamp`
/// and `$headers`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bindings<'r> {
    pub(crate) key: Option<&'r [u8]>,
    pub(crate) timestamp: Timestamp,
    pub(crate) headers: &'r [(String, Vec<u8>)],
}

impl<'r> Bindings<'r> {
    pub(crate) fn of(record: &'r Record) -> Bindings<'r> {
        Bindings {
            key: record.key.as_deref(),
            timestamp: record.timestamp,
            headers: &record.headers,
        }
    }
}

/// A compiled expression, ready to run on many records.
pub struct Program {
    filter: jaq_core::Filter<Data>,
    /// Per bound variable (standard ones first, then the operator's): whether
    /// the text mentions it, so unused ones cost nothing per record.
    used: Vec<bool>,
    /// The same program without jaq, when it is a simple update or
    /// condition ([`native`]).
    native: Option<native::Native>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program").finish_non_exhaustive()
    }
}

fn natives() -> impl Iterator<Item = jaq_core::native::Filter<jaq_core::Native<Data>>> {
    jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| !NON_DETERMINISTIC.contains(name))
}

/// Whether `code` mentions the variable `$name` (a cheap, conservative
/// test: a variable can only be read by writing its name).
fn mentions(code: &str, var: &str) -> bool {
    code.match_indices(var).any(|(at, _)| {
        !code[at + var.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

impl Program {
    /// Compiles `code`; `extra_vars` (each starting with `$`) are bound
    /// after the standard ones, in order, by [`Program::run`].
    pub fn compile(code: &str, extra_vars: &[&'static str]) -> Result<Program, CompileError> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(&arena, File { code, path: () })
            .map_err(|errors| load_error(code, errors))?;
        let vars: Vec<&'static str> = STANDARD_VARS.iter().chain(extra_vars).copied().collect();
        let filter = Compiler::default()
            .with_funs(natives())
            .with_global_vars(vars.iter().copied())
            .compile(modules)
            .map_err(|errors| undefined_error(code, errors, &vars))?;
        Ok(Program {
            filter,
            used: vars.iter().map(|v| mentions(code, v)).collect(),
            native: native::Native::parse(code, extra_vars),
        })
    }

    fn vars(&self, bindings: &Bindings<'_>, extra: &[&Value]) -> Vars<Val> {
        let used = |i: usize| self.used.get(i).copied().unwrap_or(false);
        let mut values = Vec::with_capacity(self.used.len());
        values.push(match bindings.key {
            Some(key) if used(0) => Val::from(String::from_utf8_lossy(key).into_owned()),
            _ => Val::Null,
        });
        values.push(if used(1) {
            Val::Num(Num::from_integral(bindings.timestamp))
        } else {
            Val::Null
        });
        values.push(if used(2) {
            Val::obj(
                bindings
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            Val::from(k.clone()),
                            Val::from(String::from_utf8_lossy(v).into_owned()),
                        )
                    })
                    .collect(),
            )
        } else {
            Val::Null
        });
        for (i, value) in extra.iter().enumerate() {
            values.push(if used(STANDARD_VARS.len() + i) {
                to_val(value)
            } else {
                Val::Null
            });
        }
        Vars::new(values)
    }

    /// Runs the program on `input` and returns up to `limit` outputs; the
    /// first error (or an output that is not JSON) is returned as the
    /// record's fault.
    pub(crate) fn run(
        &self,
        input: &Value,
        bindings: &Bindings<'_>,
        extra: &[&Value],
        limit: usize,
    ) -> Result<Vec<Value>, String> {
        if limit > 0
            && let Some(output) = self.native.as_ref().and_then(|n| n.eval(input, extra))
        {
            return Ok(vec![output]);
        }
        self.run_val(to_val(input), bindings, extra, limit)
    }

    fn run_val(
        &self,
        input: Val,
        bindings: &Bindings<'_>,
        extra: &[&Value],
        limit: usize,
    ) -> Result<Vec<Value>, String> {
        isolated(|| {
            let ctx = Ctx::<Data>::new(&self.filter.lut, self.vars(bindings, extra));
            let mut out = Vec::new();
            for output in self.filter.id.run((ctx, input)).take(limit) {
                match output {
                    Ok(value) => out.push(from_val(value)?),
                    Err(exception) => {
                        return Err(match exception.get_err() {
                            Ok(error) => shorten(error.to_string()),
                            // `halt` would stop the process in jq; here it
                            // is the record's error like any other.
                            Err(_) => "the expression halted".to_string(),
                        });
                    }
                }
            }
            Ok(out)
        })
    }

    /// The program as a predicate: true when its first output is neither
    /// `false` nor `null` (no output is false).
    pub(crate) fn test(&self, input: &Value, bindings: &Bindings<'_>) -> Result<bool, String> {
        if let Some(holds) = self.native.as_ref().and_then(|n| n.holds(input)) {
            return Ok(holds);
        }
        isolated(|| {
            let ctx = Ctx::<Data>::new(&self.filter.lut, self.vars(bindings, &[]));
            match self.filter.id.run((ctx, to_val(input))).next() {
                None => Ok(false),
                Some(Ok(value)) => Ok(!matches!(value, Val::Null | Val::Bool(false))),
                Some(Err(exception)) => Err(match exception.get_err() {
                    Ok(error) => shorten(error.to_string()),
                    Err(_) => "the expression halted".to_string(),
                }),
            }
        })
    }

    /// Runs the program expecting exactly one output.
    pub(crate) fn one(
        &self,
        input: &Value,
        bindings: &Bindings<'_>,
        extra: &[&Value],
    ) -> Result<Value, String> {
        let mut outputs = self.run(input, bindings, extra, 2)?;
        match outputs.len() {
            1 => Ok(outputs.remove(0)),
            0 => Err("the expression produced no value (`empty`)".into()),
            _ => Err("the expression produced several values where one is expected".into()),
        }
    }
}

/// Runs one evaluation so that a panic inside jaq (an arithmetic overflow
/// on an extreme number, in a build with overflow checks) becomes the
/// record's error, dead-lettered like any other, instead of ending the
/// task. The evaluation shares nothing mutable with its caller: the
/// program is immutable and the input is the evaluation's own.
fn isolated<T>(evaluate: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(evaluate)).unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".to_string());
        Err(format!("jq failed on this record: {reason}"))
    })
}

/// The longest runtime error message kept: jaq's messages quote the values
/// involved, which can be whole records.
const MAX_ERROR_LEN: usize = 200;

/// Cuts the middle out of a long message, keeping its start and its end
/// (where jaq says what was expected: `... as number`).
fn shorten(message: String) -> String {
    if message.len() <= MAX_ERROR_LEN {
        return message;
    }
    let mut head = MAX_ERROR_LEN * 2 / 3;
    while !message.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = message.len() - MAX_ERROR_LEN / 4;
    while !message.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{} ... {}", &message[..head], &message[tail..])
}

/// Compiles an expression for a running operator. Every expression was
/// compiled when the topology was checked, so this cannot fail for a loaded
/// topology; `OperatorSpec::build` can only report state errors, so a
/// failure (a topology built without being checked) is reported as one.
pub(crate) fn compile_for_build(
    expression: &Expression,
    extra_vars: &[&'static str],
    option: &str,
) -> Result<Program, crate::state::StateError> {
    Program::compile(expression.as_str(), extra_vars).map_err(|e| {
        crate::state::StateError::Backend(format!("option `{option}` was never checked: {e}"))
    })
}

/// Compiles `expression` for `validate`: `None` when it compiles.
pub(crate) fn check(expression: &Expression, extra_vars: &[&'static str]) -> Option<CompileError> {
    Program::compile(expression.as_str(), extra_vars).err()
}

fn load_error(code: &str, errors: load::Errors<&str, ()>) -> CompileError {
    // Only the user's text can fail: the standard library always parses.
    let mut found: Vec<(usize, String)> = Vec::new();
    for (file, error) in errors {
        if !std::ptr::eq(file.code, code) {
            continue;
        }
        match error {
            load::Error::Lex(errors) => {
                for (expect, rest) in errors {
                    found.push(lex_message(code, expect, rest));
                }
            }
            load::Error::Parse(errors) => {
                for (expect, token) in errors {
                    let at = load::span(code, token).start;
                    let found_text = if token.is_empty() {
                        "the end of the expression".to_string()
                    } else {
                        format!("`{token}`")
                    };
                    found.push((
                        at,
                        format!(
                            "expected {}, found {found_text}",
                            parse_expectation(&expect)
                        ),
                    ));
                }
            }
            load::Error::Io(errors) => {
                for (path, _) in errors {
                    found.push((
                        load::span(code, path).start,
                        "expressions cannot include or import modules".to_string(),
                    ));
                }
            }
        }
    }
    let (at, message) = found
        .into_iter()
        .min_by_key(|(at, _)| *at)
        .unwrap_or((0, "the expression does not parse".to_string()));
    CompileError::at(code, at, message)
}

fn lex_message(code: &str, expect: load::lex::Expect<&str>, rest: &str) -> (usize, String) {
    use load::lex::Expect;
    let at = load::span(code, rest).start;
    match expect {
        // Point at the bracket or quote that is never closed.
        Expect::Delim(open) => {
            let what = match open {
                "(" => "parenthesis",
                "[" => "bracket",
                "{" => "brace",
                _ => "string",
            };
            (
                load::span(code, open).start,
                format!("this {what} `{open}` is never closed"),
            )
        }
        Expect::Digit => (at, "expected a digit".into()),
        Expect::Ident => (at, "expected a name after `$` or `@`".into()),
        Expect::Escape => (at, "invalid escape sequence in a string".into()),
        Expect::Unicode => (at, "expected 4 hexadecimal digits after `\\u`".into()),
        // `Token`, and whatever later jaq versions add.
        _ => {
            let found = rest.chars().next().map_or_else(
                || "the end of the expression".to_string(),
                |c| format!("`{c}`"),
            );
            (at, format!("unexpected {found}"))
        }
    }
}

fn parse_expectation(expect: &load::parse::Expect<&str>) -> String {
    use load::parse::Expect;
    match expect {
        Expect::Just(token) => format!("`{token}`"),
        Expect::Term => "a value or filter".into(),
        Expect::Nothing => "the end of the expression".into(),
        other => other.as_str().to_string(),
    }
}

fn undefined_error(
    code: &str,
    errors: jaq_core::compile::Errors<&str, ()>,
    vars: &[&str],
) -> CompileError {
    let mut found: Vec<(usize, String)> = Vec::new();
    for (file, undefined) in errors {
        if !std::ptr::eq(file.code, code) {
            continue;
        }
        for (name, kind) in undefined {
            let message = match kind {
                jaq_core::compile::Undefined::Filter(_) if NON_DETERMINISTIC.contains(&name) => {
                    format!(
                        "`{name}` is not available: expressions must give the same result when records are replayed"
                    )
                }
                jaq_core::compile::Undefined::Filter(arity) => {
                    format!("unknown function `{name}/{arity}`")
                }
                jaq_core::compile::Undefined::Var => format!(
                    "unknown variable `{name}` (this expression can read {})",
                    vars.join(", ")
                ),
                other => format!("unknown {} `{name}`", other.as_str()),
            };
            found.push((load::span(code, name).start, message));
        }
    }
    let (at, message) = found
        .into_iter()
        .min_by_key(|(at, _)| *at)
        .unwrap_or((0, "the expression does not compile".to_string()));
    CompileError::at(code, at, message)
}

/// A JSON value as jaq sees it.
pub(crate) fn to_val(value: &Value) -> Val {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Val::Num(Num::from_integral(i)),
            (None, Some(u)) => Val::Num(Num::from_integral(u)),
            _ => Val::Num(Num::Float(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => Val::from(s.clone()),
        Value::Array(items) => items.iter().map(to_val).collect(),
        Value::Object(map) => Val::obj(
            map.iter()
                .map(|(k, v)| (Val::from(k.clone()), to_val(v)))
                .collect(),
        ),
    }
}

/// A jaq value as JSON. jaq also has byte strings and non-string object
/// keys; those are not JSON, so they are the expression's error.
pub(crate) fn from_val(value: Val) -> Result<Value, String> {
    Ok(match value {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(b),
        Val::Num(n) => num_to_json(&n),
        Val::TStr(s) | Val::BStr(s) => Value::String(String::from_utf8_lossy(&s).into_owned()),
        Val::Arr(items) => Value::Array(
            items
                .iter()
                .cloned()
                .map(from_val)
                .collect::<Result<_, _>>()?,
        ),
        Val::Obj(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map.iter() {
                let key = match k {
                    Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
                    other => {
                        return Err(format!(
                            "object key {other} is not a string, so the result is not JSON"
                        ));
                    }
                };
                out.insert(key, from_val(v.clone())?);
            }
            Value::Object(out)
        }
    })
}

fn num_to_json(n: &Num) -> Value {
    match n {
        Num::Int(i) => Value::from(*i as i64),
        Num::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        // Big integers and decimal literals: through their JSON text.
        other => {
            let text = Val::Num(other.clone()).to_string();
            serde_json::from_str::<Number>(&text).map_or(Value::Null, Value::Number)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bindings() -> Bindings<'static> {
        Bindings {
            key: Some(b"q1"),
            timestamp: 1_000,
            headers: &[],
        }
    }

    fn run(code: &str, input: Value) -> Result<Vec<Value>, String> {
        Program::compile(code, &[])
            .unwrap()
            .run(&input, &bindings(), &[], usize::MAX)
    }

    /// jaq's `length` negates a negative integer, which overflows for
    /// i64::MIN (a panic where overflow checks are on, as in every test
    /// build): found by `tests/topology_fuzz.rs` with a `route` node on
    /// `.items | length`. A record's value must never crash its task.
    #[test]
    fn a_panic_inside_jq_is_the_record_s_error() {
        let input = json!({"items": i64::MIN});
        let outcome = std::panic::catch_unwind(|| run(".items | length", input.clone()));
        let outcome = outcome.expect("the evaluation does not unwind into the caller");
        if let Err(message) = outcome {
            assert!(message.contains("jq failed"), "{message}");
        }
        let predicate = Program::compile(".items | length > 0", &[]).unwrap();
        let outcome = std::panic::catch_unwind(|| predicate.test(&input, &bindings()));
        assert!(outcome.is_ok(), "the predicate does not unwind either");
    }

    #[test]
    fn programs_reshape_json_with_the_standard_library() {
        assert_eq!(
            run(
                "{id: .id, tags: (.tags | map(ascii_upcase) | sort), n: .n + 1}",
                json!({"id": "a", "tags": ["y", "x"], "n": 41})
            )
            .unwrap(),
            vec![json!({"id": "a", "tags": ["X", "Y"], "n": 42})]
        );
        assert_eq!(
            run(".items[]", json!({"items": [1, 2.5, "x"]})).unwrap(),
            vec![json!(1), json!(2.5), json!("x")]
        );
        assert_eq!(
            run(".a.b |= . + 1.5", json!({"a": {"b": 1}})).unwrap(),
            vec![json!({"a": {"b": 2.5}})]
        );
        assert_eq!(
            run("$key + \"@\" + ($timestamp | tostring)", json!(null)).unwrap(),
            vec![json!("q1@1000")]
        );
    }

    #[test]
    fn jaq_does_not_assign_into_null_but_into_an_empty_object() {
        // Documented in docs/topology.md: projection rules see `{}` for an
        // entity that does not exist yet because of this.
        assert!(run(".a = 1", json!(null)).is_err());
        assert_eq!(run(".a += 1", json!({})).unwrap(), vec![json!({"a": 1})]);
        assert!(run(".a.b = 1", json!({})).is_err());
        assert_eq!(
            run(".a += {b: 1}", json!({})).unwrap(),
            vec![json!({"a": {"b": 1}})]
        );
    }

    #[test]
    fn extra_variables_are_bound_in_order() {
        let program = Program::compile(".n + $event.delta", &["$event"]).unwrap();
        let event = json!({"delta": 5});
        assert_eq!(
            program
                .one(&json!({"n": 1}), &bindings(), &[&event])
                .unwrap(),
            json!(6)
        );
    }

    #[test]
    fn predicates_follow_jq_truthiness() {
        let program = Program::compile(".n > 1", &[]).unwrap();
        assert!(program.test(&json!({"n": 2}), &bindings()).unwrap());
        assert!(!program.test(&json!({"n": 1}), &bindings()).unwrap());
        let select = Program::compile("select(.ok) | .x", &[]).unwrap();
        assert!(!select.test(&json!({"ok": false}), &bindings()).unwrap());
        assert!(!select.test(&json!({"ok": true}), &bindings()).unwrap());
        assert!(
            select
                .test(&json!({"ok": true, "x": 0}), &bindings())
                .unwrap()
        );
    }

    #[test]
    fn runtime_errors_are_messages_not_panics() {
        let err = run(".a + 1", json!({"a": "text"})).unwrap_err();
        assert!(err.contains("cannot"), "{err}");
        assert_eq!(run("halt", json!(1)).unwrap_err(), "the expression halted");
        let err = run("{(1): 2}", json!(null)).unwrap_err();
        assert!(err.contains("not a string"), "{err}");
    }

    #[test]
    fn long_runtime_errors_are_shortened() {
        let err = run("(.s * 1000) | round", json!({"s": "ab"})).unwrap_err();
        assert!(err.len() <= MAX_ERROR_LEN, "{err}");
        assert!(err.starts_with("cannot use \"abab"), "{err}");
        assert!(err.ends_with("abab\" as number"), "{err}");
    }

    #[test]
    fn syntax_errors_point_into_the_expression() {
        let err = Program::compile(".type == \"x\" and (.n > ", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid jq expression at column 18: this parenthesis `(` is never closed"
        );
        let err = Program::compile(".a | | .b", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid jq expression at column 6: expected a value or filter, found `|`"
        );
        let err = Program::compile("if .a then 1", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid jq expression at column 13: expected else or end, found the end of the expression"
        );
        let err = Program::compile(".a\n| lenght", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid jq expression at line 2, column 3: unknown function `lenght/0`"
        );
        let err = Program::compile("$nope", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid jq expression at column 1: unknown variable `$nope` (this expression can read $key, $timestamp, $headers)"
        );
    }

    #[test]
    fn clocks_and_the_environment_are_not_available() {
        let err = Program::compile(".at = now", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid jq expression at column 7: `now` is not available: expressions must give the same result when records are replayed"
        );
        assert!(Program::compile("env.HOME", &[]).is_err());
    }

    #[test]
    fn unused_variables_are_not_built() {
        let program = Program::compile(".x", &["$event"]).unwrap();
        assert_eq!(program.used, vec![false, false, false, false]);
        let program = Program::compile("$headers.h, $key_2", &[]);
        assert!(program.is_err(), "`$key_2` is not `$key`");
        assert!(mentions("$headers.a", "$headers"));
        assert!(!mentions("$keys", "$key"));
    }

    #[test]
    fn json_round_trips_through_jaq_values() {
        let value = json!({"a": [1, -2, 3.5, null, true, "s"], "big": 18446744073709551615u64});
        assert_eq!(from_val(to_val(&value)).unwrap(), value);
    }
}
