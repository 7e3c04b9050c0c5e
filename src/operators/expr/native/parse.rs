//! The reader of the [native shapes](super): an update, a condition or
//! a term, from an expression's text.

use serde_json::Value;

use super::{Comparison, Condition, Term, Update};

/// Words jq reads as keywords, never as a field name or object key here.
const KEYWORDS: &[&str] = &[
    "and", "or", "not", "if", "then", "elif", "else", "end", "as", "def", "reduce", "foreach",
    "try", "catch", "label", "import", "include", "__loc__", "true", "false", "null",
];

/// A recursive-descent reader of the shapes the parent module lists.
/// Every method returns `None` at the first thing it does not expect.
pub(super) struct Parser<'a> {
    pub(super) code: &'a str,
    pub(super) at: usize,
    pub(super) vars: &'a [&'a str],
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.code[self.at..]
    }

    pub(super) fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Skips space, then `token` if it comes next and is not followed by
    /// `unless` (so `|` is not read from `|=`).
    fn eat_exactly(&mut self, token: &str, unless: &str) -> bool {
        self.skip_space();
        let rest = self.rest();
        let Some(after) = rest.strip_prefix(token) else {
            return false;
        };
        if !unless.is_empty() && after.starts_with(unless) {
            return false;
        }
        self.at += token.len();
        true
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

    /// Updates separated by `|`, to the end of the text.
    pub(super) fn updates(&mut self) -> Option<Vec<Update>> {
        let mut updates = vec![self.update()?];
        loop {
            self.skip_space();
            if self.at == self.code.len() {
                return Some(updates);
            }
            if !self.eat_exactly("|", "=") {
                return None;
            }
            updates.push(self.update()?);
        }
    }

    /// A word (`and`, `or`) after space, not the start of a longer one.
    fn eat_word(&mut self, word: &str) -> bool {
        self.skip_space();
        let rest = self.rest();
        let whole = rest.starts_with(word)
            && !rest[word.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if whole {
            self.at += word.len();
        }
        whole
    }

    pub(super) fn condition(&mut self) -> Option<Condition> {
        let mut condition = self.conjunction()?;
        while self.eat_word("or") {
            condition = Condition::Or(Box::new(condition), Box::new(self.conjunction()?));
        }
        Some(condition)
    }

    fn conjunction(&mut self) -> Option<Condition> {
        let mut condition = self.comparison()?;
        while self.eat_word("and") {
            condition = Condition::And(Box::new(condition), Box::new(self.comparison()?));
        }
        Some(condition)
    }

    fn comparison(&mut self) -> Option<Condition> {
        if self.eat("(") {
            let condition = self.condition()?;
            return self.eat(")").then_some(condition);
        }
        let left = self.operand()?;
        // Longest operators first, so `<=` is not read as `<`.
        const OPERATORS: [(&str, Comparison); 6] = [
            ("==", Comparison::Eq),
            ("!=", Comparison::Ne),
            ("<=", Comparison::Le),
            (">=", Comparison::Ge),
            ("<", Comparison::Lt),
            (">", Comparison::Gt),
        ];
        for (token, comparison) in OPERATORS {
            if self.eat(token) {
                return Some(Condition::Compare(left, comparison, self.operand()?));
            }
        }
        Some(Condition::Truthy(left))
    }

    /// A literal or a path, in a condition.
    fn operand(&mut self) -> Option<Term> {
        self.skip_space();
        if self.rest().starts_with(['.', '$']) {
            return self.path();
        }
        self.literal().map(Term::Literal)
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

    /// `.a.b` or `$var.a.b`.
    fn path(&mut self) -> Option<Term> {
        self.skip_space();
        let var = if self.eat("$") {
            let name = self.word()?;
            Some(self.vars.iter().position(|var| var[1..] == *name)?)
        } else {
            None
        };
        let mut path = Vec::new();
        while self.rest().starts_with('.') {
            self.at += 1;
            path.push(self.field()?);
        }
        match var {
            Some(index) => Some(Term::Var(index, path)),
            // `.` alone is the input itself: jaq's.
            None if path.is_empty() => None,
            None => Some(Term::Input(path)),
        }
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
