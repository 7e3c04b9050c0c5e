//! A YAML document as a tree that remembers where every node came from.
//!
//! serde deserializers for YAML lose positions once a value is handed to a
//! `Deserialize` impl, and stop at the first error. We parse with
//! `saphyr-parser` (the maintained YAML 1.2 parser of the yaml-rust lineage)
//! into this tree, then deserialize each section from it with
//! [`super::de`], so every diagnostic carries file, line and column and a
//! file with five mistakes reports five.
//!
//! Plain scalars are resolved with the YAML 1.2 core schema (`true`, `~`,
//! `12`, `1.5`); quoted scalars are always strings. `${VAR}` and
//! `${VAR:-default}` are interpolated in every scalar *after* parsing, so
//! positions stay those of the file the user wrote (`$${` escapes a literal
//! `${`).

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, Tag};

/// Position of a node in its file: 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    fn from_span(span: &Span) -> Pos {
        Pos {
            line: span.start.line(),
            col: span.start.col() + 1,
        }
    }
}

/// A parsed YAML node with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub(crate) pos: Pos,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A string scalar. Non-string scalars keep their source text too (see
    /// [`Node::scalar_text`]) so a `kafka:` property `acks: 1` can still be
    /// read as the string `"1"`.
    Str(String),
    Seq(Vec<Node>),
    /// Entries in file order; keys are nodes so their positions survive.
    Map(Vec<(Node, Node)>),
}

impl Node {
    pub fn describe(&self) -> &'static str {
        match self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }

    /// The scalar rendered as text, for places that accept any scalar as a
    /// string (librdkafka properties, for instance).
    pub fn scalar_text(&self) -> Option<Cow<'_, str>> {
        match &self.kind {
            Kind::Str(s) => Some(Cow::Borrowed(s)),
            Kind::Bool(b) => Some(Cow::Owned(b.to_string())),
            Kind::Int(i) => Some(Cow::Owned(i.to_string())),
            Kind::Float(f) => Some(Cow::Owned(f.to_string())),
            Kind::Null | Kind::Seq(_) | Kind::Map(_) => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The value under `key` in a mapping, with the key node.
    pub(crate) fn entry(&self, key: &str) -> Option<(&Node, &Node)> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(k, v)| (k, v))
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|(_, v)| v)
    }
}

/// A problem found while reading the YAML text itself.
#[derive(Clone, Debug, PartialEq)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
}

/// Parses one YAML document. Returns the root node (an empty document is
/// `Null`) and every interpolation or duplicate-key problem found; a syntax
/// error stops parsing and is the only error returned.
pub fn parse(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Node, Vec<YamlError>), YamlError> {
    let mut builder = Builder {
        env,
        stack: Vec::new(),
        anchors: HashMap::new(),
        root: None,
        errors: Vec::new(),
        documents: 0,
        nodes: 0,
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| YamlError {
            pos: Pos {
                line: e.marker().line(),
                col: e.marker().col() + 1,
            },
            message: format!("invalid YAML: {}", e.info()),
        })?;
        builder.event(event, &span)?;
    }
    let root = builder.root.unwrap_or(Node {
        pos: Pos { line: 1, col: 1 },
        kind: Kind::Null,
    });
    Ok((root, builder.errors))
}

/// The most nodes a file may hold once every alias is replaced by what it
/// names. Real topologies hold a few hundred; without a bound, a few lines
/// of nested aliases ("billion laughs") would exhaust memory.
const MAX_NODES: usize = 100_000;

/// A collection being read, with the node count when it started.
enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
        first_node: usize,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<(Node, Node)>,
        pending_key: Option<Node>,
        first_node: usize,
    },
}

struct Builder<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    stack: Vec<Frame>,
    /// Anchored nodes with the number of nodes each holds.
    anchors: HashMap<usize, (Node, usize)>,
    root: Option<Node>,
    errors: Vec<YamlError>,
    documents: usize,
    /// Nodes read so far, aliases counted as what they expand to.
    nodes: usize,
}

impl Builder<'_> {
    fn event(&mut self, event: Event<'_>, span: &Span) -> Result<(), YamlError> {
        let pos = Pos::from_span(span);
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(YamlError {
                        pos,
                        message: "a topology file holds one YAML document; found a second `---`"
                            .into(),
                    });
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                self.scalar(value, style, anchor, tag, pos)?
            }
            Event::Alias(id) => self.alias(id, pos)?,
            Event::SequenceStart(anchor, _) => self.stack.push(Frame::Seq {
                pos,
                anchor,
                items: Vec::new(),
                first_node: self.nodes,
            }),
            Event::MappingStart(anchor, _) => self.stack.push(Frame::Map {
                pos,
                anchor,
                entries: Vec::new(),
                pending_key: None,
                first_node: self.nodes,
            }),
            Event::SequenceEnd | Event::MappingEnd => self.end_collection(pos)?,
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
        Ok(())
    }

    /// Adds a scalar: a plain one resolved with the core schema, any
    /// string interpolated.
    fn scalar(
        &mut self,
        value: Cow<'_, str>,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<Cow<'_, Tag>>,
        pos: Pos,
    ) -> Result<(), YamlError> {
        let tagged_str = tag.as_ref().is_some_and(|t| t.suffix == "str");
        let plain = style == ScalarStyle::Plain && !tagged_str;
        let kind = if plain {
            resolve_plain(&value)
        } else {
            Kind::Str(value.into_owned())
        };
        let kind = match kind {
            // A plain `${N:-100}` resolves like the literal it
            // expands to; a quoted one stays a string.
            Kind::Str(s) if plain && s.contains("${") => resolve_plain(&self.interpolate(&s, pos)),
            Kind::Str(s) => Kind::Str(self.interpolate(&s, pos)),
            other => other,
        };
        self.count(1, pos)?;
        self.push(Node { pos, kind }, anchor, 1);
        Ok(())
    }

    /// Adds a copy of the node that anchor `id` names, counted as all the
    /// nodes it holds.
    fn alias(&mut self, id: usize, pos: Pos) -> Result<(), YamlError> {
        let (node, size) = match self.anchors.get(&id) {
            Some((node, size)) => (
                Node {
                    pos,
                    kind: node.kind.clone(),
                },
                *size,
            ),
            None => {
                return Err(YamlError {
                    pos,
                    message: "alias refers to an unknown anchor".into(),
                });
            }
        };
        // Counted before the copy is made.
        self.count(size, pos)?;
        self.push(node, 0, size);
        Ok(())
    }

    /// Adds the sequence or mapping that ends at `pos`.
    fn end_collection(&mut self, pos: Pos) -> Result<(), YamlError> {
        let (node, anchor, first_node) = match self.stack.pop() {
            Some(Frame::Seq {
                pos,
                anchor,
                items,
                first_node,
            }) => (
                Node {
                    pos,
                    kind: Kind::Seq(items),
                },
                anchor,
                first_node,
            ),
            Some(Frame::Map {
                pos,
                anchor,
                entries,
                first_node,
                ..
            }) => (
                Node {
                    pos,
                    kind: Kind::Map(entries),
                },
                anchor,
                first_node,
            ),
            None => {
                return Err(YamlError {
                    pos,
                    message: "invalid YAML: unbalanced collection end".into(),
                });
            }
        };
        self.count(1, pos)?;
        let size = self.nodes - first_node;
        self.push(node, anchor, size);
        Ok(())
    }

    /// Counts `added` more nodes, refusing to go past [`MAX_NODES`].
    fn count(&mut self, added: usize, pos: Pos) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(added);
        if self.nodes > MAX_NODES {
            return Err(YamlError {
                pos,
                message: format!(
                    "aliases repeat too much: this file would expand to more than {MAX_NODES} YAML nodes"
                ),
            });
        }
        Ok(())
    }

    /// Adds `node`, which holds `size` nodes, to the collection being read.
    fn push(&mut self, node: Node, anchor: usize, size: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                pending_key,
                ..
            }) => match pending_key.take() {
                None => *pending_key = Some(node),
                Some(key) => {
                    if let Some(name) = key.as_str()
                        && let Some((first, _)) =
                            entries.iter().find(|(k, _)| k.as_str() == Some(name))
                    {
                        self.errors.push(YamlError {
                            pos: key.pos,
                            message: format!(
                                "duplicate key `{name}` (first defined at line {})",
                                first.pos.line
                            ),
                        });
                    }
                    entries.push((key, node));
                }
            },
        }
    }

    fn interpolate(&mut self, text: &str, pos: Pos) -> String {
        match interpolate(text, self.env) {
            Ok(s) => s,
            Err(message) => {
                self.errors.push(YamlError { pos, message });
                text.to_string()
            }
        }
    }
}

/// What an unset variable becomes.
enum Fallback<'a> {
    /// `${VAR:-default}`.
    Default(&'a str),
    /// `${VAR:?message}`.
    Error(&'a str),
}

/// The contents of a secret file for `${file:/path}`, without the line
/// break editors and `kubectl create secret --from-file` leave at the end.
fn read_secret_file(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("`${file:}` names no file (write ${file:/path/to/secret})".into());
    }
    let mut text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the file `{path}` of `${{file:{path}}}`: {e}"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

/// Resolves a plain scalar with the YAML 1.2 core schema.
fn resolve_plain(text: &str) -> Kind {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Kind::Null,
        "true" | "True" | "TRUE" => return Kind::Bool(true),
        "false" | "False" | "FALSE" => return Kind::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Kind::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Kind::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Kind::Float(f64::NAN),
        _ => {}
    }
    if let Some(hex) = text.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Kind::Int(i);
    }
    if let Some(oct) = text.strip_prefix("0o")
        && let Ok(i) = i64::from_str_radix(oct, 8)
    {
        return Kind::Int(i);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && let Ok(i) = text.parse::<i64>()
    {
        return Kind::Int(i);
    }
    let looks_numeric = !digits.is_empty()
        && digits
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'.')
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if looks_numeric && let Ok(f) = text.parse::<f64>() {
        return Kind::Float(f);
    }
    Kind::Str(text.to_string())
}

/// Expands `${VAR}`, `${VAR:-default}` (the default when `VAR` is unset or
/// empty), `${VAR:?message}` (an error saying `message` then) and
/// `${file:/path}` (the file's contents without the trailing line break:
/// a secret mounted as a file); `$${` is a literal `${`.
pub(crate) fn interpolate(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    if !text.contains('$') {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(body) = tail.strip_prefix("${") {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unterminated `${{` in `{text}`"))?;
            let expr = &body[..end];
            if let Some(path) = expr.strip_prefix("file:") {
                out.push_str(&read_secret_file(path)?);
                rest = &body[end + 1..];
                continue;
            }
            let (name, fallback) = match (expr.split_once(":-"), expr.split_once(":?")) {
                (Some((name, default)), None) => (name, Some(Fallback::Default(default))),
                (None, Some((name, message))) => (name, Some(Fallback::Error(message))),
                (Some((a, default)), Some((b, _))) if a.len() < b.len() => {
                    (a, Some(Fallback::Default(default)))
                }
                (Some(_), Some((name, message))) => (name, Some(Fallback::Error(message))),
                (None, None) => (expr, None),
            };
            let valid = !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit();
            if !valid {
                return Err(format!(
                    "`${{{expr}}}` is not a valid reference (use ${{NAME}}, ${{NAME:-default}}, ${{NAME:?message}} or ${{file:/path}})"
                ));
            }
            match (env(name).filter(|v| !v.is_empty()), fallback) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(Fallback::Default(default))) => out.push_str(default),
                (None, Some(Fallback::Error(message))) if !message.is_empty() => {
                    return Err(format!(
                        "environment variable `{name}` is not set: {message}"
                    ));
                }
                (None, _) => {
                    return Err(format!(
                        "environment variable `{name}` is not set (write ${{{name}:-default}} to give a default)"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse_ok(text: &str) -> Node {
        let (node, errors) = parse(text, &no_env).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        node
    }

    #[test]
    fn positions_are_one_based_and_point_at_the_value() {
        let root = parse_ok("name: demo\nnodes:\n  fold:\n    quiet_for: 5m\n");
        let fold = root.get("nodes").unwrap().get("fold").unwrap();
        let (key, value) = fold.entry("quiet_for").unwrap();
        assert_eq!(key.pos, Pos { line: 4, col: 5 });
        assert_eq!(value.pos, Pos { line: 4, col: 16 });
        assert_eq!(value.kind, Kind::Str("5m".into()));
    }

    #[test]
    fn plain_scalars_follow_the_core_schema_and_quoted_ones_stay_strings() {
        let root = parse_ok("a: 12\nb: '12'\nc: true\nd: ~\ne: 1.5\nf: yes\ng: 0x1F\n");
        assert_eq!(root.get("a").unwrap().kind, Kind::Int(12));
        assert_eq!(root.get("b").unwrap().kind, Kind::Str("12".into()));
        assert_eq!(root.get("c").unwrap().kind, Kind::Bool(true));
        assert_eq!(root.get("d").unwrap().kind, Kind::Null);
        assert_eq!(root.get("e").unwrap().kind, Kind::Float(1.5));
        // YAML 1.2: `yes` is a string, not a boolean.
        assert_eq!(root.get("f").unwrap().kind, Kind::Str("yes".into()));
        assert_eq!(root.get("g").unwrap().kind, Kind::Int(31));
    }

    #[test]
    fn duplicate_keys_are_reported_with_both_lines() {
        let (_, errors) = parse("a: 1\nb: 2\na: 3\n", &no_env).unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].pos, Pos { line: 3, col: 1 });
        assert!(errors[0].message.contains("first defined at line 1"));
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let err = parse("a: [1, 2\nb: 3\n", &no_env).unwrap_err();
        assert!(err.message.starts_with("invalid YAML"), "{}", err.message);
        assert!(err.pos.line >= 1);
    }

    #[test]
    fn interpolation_uses_the_environment_then_the_default() {
        let env = |name: &str| (name == "BROKER").then(|| "kafka:9092".to_string());
        assert_eq!(interpolate("${BROKER}", &env).unwrap(), "kafka:9092");
        assert_eq!(
            interpolate("${MISSING:-localhost:9092}", &env).unwrap(),
            "localhost:9092"
        );
        assert_eq!(
            interpolate("a-${BROKER:-x}-b", &env).unwrap(),
            "a-kafka:9092-b"
        );
        assert_eq!(
            interpolate("$${BROKER} costs $5", &env).unwrap(),
            "${BROKER} costs $5"
        );
        let err = interpolate("${MISSING}", &env).unwrap_err();
        assert!(err.contains("`MISSING` is not set"), "{err}");
        assert!(interpolate("${1BAD}", &env).is_err());
    }

    #[test]
    fn a_required_variable_fails_with_its_message() {
        let env = |name: &str| (name == "SET").then(|| "v".to_string());
        assert_eq!(interpolate("${SET:?needed}", &env).unwrap(), "v");
        let err = interpolate("${KAFKA_PASSWORD:?set it from the secret}", &env).unwrap_err();
        assert_eq!(
            err,
            "environment variable `KAFKA_PASSWORD` is not set: set it from the secret"
        );
        // Empty counts as unset, as with `:-`.
        let empty = |_: &str| Some(String::new());
        assert!(interpolate("${X:?no}", &empty).is_err());
        // Without a message, the usual one.
        assert!(
            interpolate("${X:?}", &env)
                .unwrap_err()
                .contains("`X` is not set")
        );
        // A default that contains `:?` is a default.
        assert_eq!(interpolate("${X:-a:?b}", &env).unwrap(), "a:?b");
    }

    #[test]
    fn a_file_reference_reads_the_secret_without_its_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("password");
        std::fs::write(&path, "s3cret\n").unwrap();
        let text = format!("pw=${{file:{}}}!", path.display());
        assert_eq!(interpolate(&text, &no_env).unwrap(), "pw=s3cret!");
        std::fs::write(&path, "two\nlines\r\n").unwrap();
        assert_eq!(
            interpolate(&format!("${{file:{}}}", path.display()), &no_env).unwrap(),
            "two\nlines"
        );
        let missing = dir.path().join("missing");
        let err = interpolate(&format!("${{file:{}}}", missing.display()), &no_env).unwrap_err();
        assert!(err.contains("cannot read the file"), "{err}");
        assert!(interpolate("${file:}", &no_env).is_err());
    }

    #[test]
    fn interpolated_plain_scalars_resolve_like_literals() {
        let env = |name: &str| (name == "N").then(|| "250".to_string());
        let (root, errors) = parse(
            "a: ${N}\nb: ${FLAG:-true}\nc: '${N}'\nd: ${NAME:-x}\n",
            &env,
        )
        .unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(root.get("a").unwrap().kind, Kind::Int(250));
        assert_eq!(root.get("b").unwrap().kind, Kind::Bool(true));
        assert_eq!(root.get("c").unwrap().kind, Kind::Str("250".into()));
        assert_eq!(root.get("d").unwrap().kind, Kind::Str("x".into()));
    }

    #[test]
    fn anchors_and_aliases_are_expanded() {
        let root = parse_ok("base: &b {x: 1}\nother: *b\n");
        assert_eq!(
            root.get("other").unwrap().get("x").unwrap().kind,
            Kind::Int(1)
        );
    }

    #[test]
    fn aliases_that_expand_without_bound_are_an_error_not_an_exhausted_memory() {
        // "Billion laughs": each level repeats the one before ten times.
        let mut text = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..10 {
            let refs = vec![format!("*l{}", level - 1); 10].join(", ");
            text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
        }
        let error = parse(&text, &no_env).unwrap_err();
        assert_eq!(
            error.message,
            "aliases repeat too much: this file would expand to more than 100000 YAML nodes"
        );
        assert_eq!(error.pos.line, 5);
    }
}
