//! The simplest update expressions, evaluated without jaq.
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
//! Recognised, separated by `|`:
//!
//! | update | meaning |
//! |---|---|
//! | `.f = term` | set field `f` |
//! | `.f += n` | add the integer `n` to field `f` (absent or null counts as 0) |
//! | `. + {f: term, g: term, ...}` | set several fields at once |
//!
//! where a term is a literal (`true`, `false`, `null`, an integer, a string
//! without escapes), a field of the input (`.f`), a field path of a
//! variable the operator binds (`$event.f`, `$event.f.g`), or either of the
//! last two with a default (`(.f // false)`). Field names are identifiers;
//! anything else (`.a.b = 1`, `.f |= .+1`, `del(.f)`, `$key`) is jaq's.

use serde_json::{Map, Value};

/// A recognised expression: updates applied in order to an object.
#[derive(Debug, PartialEq)]
pub(super) struct Native {
    updates: Vec<Update>,
}

#[derive(Debug, PartialEq)]
enum Update {
    /// `.field = term`
    Set(String, Term),
    /// `.field += integer`
    Add(String, i64),
    /// `. + {field: term, ...}`
    Merge(Vec<(String, Term)>),
}

#[derive(Debug, PartialEq)]
enum Term {
    Literal(Value),
    /// `.field` of the update's input.
    Field(String),
    /// `$var.a.b`: the operator's variable at this index, and the fields
    /// read from it.
    Var(usize, Vec<String>),
    /// `(term // literal)`: the literal when the term is null or false.
    Or(Box<Term>, Value),
}

static NULL: Value = Value::Null;

/// Words jq reads as keywords, never as a field name or object key here.
const KEYWORDS: &[&str] = &[
    "and", "or", "not", "if", "then", "elif", "else", "end", "as", "def", "reduce", "foreach",
    "try", "catch", "label", "import", "include", "__loc__", "true", "false", "null",
];

impl Native {
    /// Recognises `code`, whose operator binds `vars` (each starting with
    /// `$`) in this order; `None` when it is not one of the shapes above.
    pub(super) fn parse(code: &str, vars: &[&str]) -> Option<Native> {
        // A comment could hide anything; leave such texts to jaq.
        if code.contains('#') {
            return None;
        }
        let mut parser = Parser { code, at: 0, vars };
        let mut updates = vec![parser.update()?];
        loop {
            parser.skip_space();
            if parser.at == code.len() {
                return Some(Native { updates });
            }
            if !parser.eat_exactly("|", "=") {
                return None;
            }
            updates.push(parser.update()?);
        }
    }

    /// Evaluates the updates on `input` with the operator's variables
    /// `vars`; `None` leaves the evaluation to jaq.
    pub(super) fn eval(&self, input: &Value, vars: &[&Value]) -> Option<Value> {
        let Value::Object(input) = input else {
            return None;
        };
        let mut entity = input.clone();
        for update in &self.updates {
            match update {
                Update::Set(field, term) => {
                    let value = term.eval(&entity, vars)?;
                    entity.insert(field.clone(), value);
                }
                Update::Add(field, n) => {
                    // jaq adds integers exactly and turns an overflow into
                    // a big integer, and anything with a float into a
                    // float: only the exact case is done here.
                    let sum = match entity.get(field) {
                        None | Some(Value::Null) => *n,
                        Some(Value::Number(current)) => current.as_i64()?.checked_add(*n)?,
                        Some(_) => return None,
                    };
                    entity.insert(field.clone(), Value::from(sum));
                }
                Update::Merge(fields) => {
                    // Every value is read from the input before any is set.
                    let values = fields
                        .iter()
                        .map(|(field, term)| Some((field, term.eval(&entity, vars)?)))
                        .collect::<Option<Vec<_>>>()?;
                    for (field, value) in values {
                        entity.insert(field.clone(), value);
                    }
                }
            }
        }
        Some(Value::Object(entity))
    }
}

impl Term {
    fn eval(&self, input: &Map<String, Value>, vars: &[&Value]) -> Option<Value> {
        Some(match self {
            Term::Literal(value) => value.clone(),
            Term::Field(field) => input.get(field).cloned().unwrap_or(Value::Null),
            Term::Var(index, path) => {
                let mut value: &Value = vars.get(*index)?;
                for field in path {
                    value = match value {
                        Value::Object(fields) => fields.get(field).unwrap_or(&NULL),
                        Value::Null => &NULL,
                        // jq's error: leave it to jaq to word it.
                        _ => return None,
                    };
                }
                value.clone()
            }
            Term::Or(term, default) => match term.eval(input, vars)? {
                Value::Null | Value::Bool(false) => default.clone(),
                value => value,
            },
        })
    }
}

/// A recursive-descent reader of the shapes above. Every method returns
/// `None` at the first thing it does not expect.
struct Parser<'a> {
    code: &'a str,
    at: usize,
    vars: &'a [&'a str],
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.code[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Skips space, then `token` if it comes next and is not followed by
    /// `unless` (so `|` is not read from `|=`).
    fn eat_exactly(&mut self, token: &str, unless: &str) -> bool {
        self.skip_space();
        let rest = self.rest();
        if rest.starts_with(token)
            && !(!unless.is_empty() && rest[token.len()..].starts_with(unless))
        {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.eat_exactly(token, "")
    }

    /// An identifier right here (no space before it).
    fn word(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let word = &rest[..len];
        if word.is_empty() || word.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.at += len;
        Some(word)
    }

    /// A field name right here: an identifier that is not a keyword.
    fn field(&mut self) -> Option<String> {
        let word = self.word()?;
        (!KEYWORDS.contains(&word)).then(|| word.to_string())
    }

    fn update(&mut self) -> Option<Update> {
        if !self.eat(".") {
            return None;
        }
        if self
            .rest()
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        {
            let field = self.field()?;
            if self.eat("+=") {
                return Some(Update::Add(field, self.integer()?));
            }
            if self.eat_exactly("=", "=") {
                return Some(Update::Set(field, self.term()?));
            }
            return None;
        }
        if !self.eat_exactly("+", "=") || !self.eat("{") {
            return None;
        }
        let mut fields = Vec::new();
        loop {
            self.skip_space();
            let field = if self.rest().starts_with('"') {
                match self.string()? {
                    Value::String(field) => field,
                    _ => return None,
                }
            } else {
                self.field()?
            };
            if !self.eat(":") {
                return None;
            }
            fields.push((field, self.term()?));
            if self.eat("}") {
                return Some(Update::Merge(fields));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    fn term(&mut self) -> Option<Term> {
        self.skip_space();
        if self.eat("(") {
            let term = self.path()?;
            if !self.eat("//") {
                return None;
            }
            let default = self.literal()?;
            return self.eat(")").then(|| Term::Or(Box::new(term), default));
        }
        if self.rest().starts_with(['.', '$']) {
            return self.path();
        }
        self.literal().map(Term::Literal)
    }

    /// `.field` or `$var.field...`.
    fn path(&mut self) -> Option<Term> {
        self.skip_space();
        if self.eat(".") {
            return self.field().map(Term::Field);
        }
        if !self.eat("$") {
            return None;
        }
        let name = self.word()?;
        let index = self.vars.iter().position(|var| var[1..] == *name)?;
        let mut path = Vec::new();
        while self.rest().starts_with('.') {
            self.at += 1;
            path.push(self.field()?);
        }
        Some(Term::Var(index, path))
    }

    fn literal(&mut self) -> Option<Value> {
        self.skip_space();
        let rest = self.rest();
        if rest.starts_with('"') {
            return self.string();
        }
        if rest.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            return self.integer().map(Value::from);
        }
        match self.word()? {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            "null" => Some(Value::Null),
            // A function call: jaq's.
            _ => None,
        }
    }

    /// A decimal integer within i64, optionally negative; not a float.
    fn integer(&mut self) -> Option<i64> {
        self.skip_space();
        let rest = self.rest();
        let negative = rest.starts_with('-');
        let digits = &rest[usize::from(negative)..];
        let len = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        let after = &digits[len..];
        if len == 0
            || (len > 1 && digits.starts_with('0'))
            || after.starts_with(|c: char| c == '.' || c == 'e' || c == 'E' || c.is_alphanumeric())
        {
            return None;
        }
        let text = &rest[..usize::from(negative) + len];
        let value = text.parse().ok()?;
        self.at += text.len();
        Some(value)
    }

    /// A string without escapes or interpolation.
    fn string(&mut self) -> Option<Value> {
        let body = self.rest().strip_prefix('"')?;
        let end = body.find('"')?;
        let text = &body[..end];
        if text.contains(|c: char| c == '\\' || c.is_control()) {
            return None;
        }
        self.at += end + 2;
        Some(Value::String(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{Bindings, Program};
    use super::*;

    /// What jaq alone gives for `code`.
    fn jaq(code: &str, input: &Value, event: &Value) -> Result<Value, String> {
        let mut program = Program::compile(code, &["$event"]).expect("compiles");
        program.native = None;
        let bindings = Bindings {
            key: Some(b"q1"),
            timestamp: 1,
            headers: &[],
        };
        program.one(input, &bindings, &[event])
    }

    fn native(code: &str) -> Option<Native> {
        Native::parse(code, &["$event"])
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
            ".a == 1",
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
            "[a-z ]{0,4}".prop_map(Value::from),
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
            "[a-z ]{0,4}".prop_map(|s| format!("\"{s}\"")),
        ]
    }

    fn path() -> impl Strategy<Value = String> {
        prop_oneof![
            field().prop_map(|f| format!(".{f}")),
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

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
