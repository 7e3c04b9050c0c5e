//! A serde `Deserializer` over [`yaml::Node`](super::yaml::Node) that knows
//! where it is.
//!
//! Every error leaves with the position and dotted path of the innermost
//! node it concerns (`nodes.fold_account.quiet_for`), and unknown fields keep
//! the list serde expected so the loader can suggest the closest name.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};

use super::yaml::{Kind, Node, Pos};

/// Where a value sits in the topology: `nodes.fold_account.fields.metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Path(Vec<Segment>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl Path {
    pub(crate) fn root() -> Path {
        Path(Vec::new())
    }

    pub(crate) fn key(&self, key: &str) -> Path {
        let mut next = self.clone();
        next.0.push(Segment::Key(key.to_string()));
        next
    }

    pub(crate) fn index(&self, index: usize) -> Path {
        let mut next = self.clone();
        next.0.push(Segment::Index(index));
        next
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(top level)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(key)?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A deserialization error, placed at the node it concerns.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DeError {
    pub(crate) pos: Option<Pos>,
    pub(crate) path: Option<Path>,
    pub(crate) kind: DeErrorKind,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum DeErrorKind {
    /// A field the struct does not have, with the names it does have.
    UnknownField {
        field: String,
        expected: Vec<&'static str>,
    },
    /// A unit variant (such as `rule: sume`) that does not exist.
    UnknownVariant {
        variant: String,
        expected: Vec<&'static str>,
    },
    Message(String),
}

impl DeError {
    pub(crate) fn message(message: impl Into<String>) -> DeError {
        DeError {
            pos: None,
            path: None,
            kind: DeErrorKind::Message(message.into()),
        }
    }

    /// Sets the position and path unless an inner node already did.
    fn at(mut self, pos: Pos, path: &Path) -> DeError {
        if self.pos.is_none() {
            self.pos = Some(pos);
            self.path = Some(path.clone());
        }
        self
    }

    /// The human message, with a "did you mean" for near misses.
    /// `extra` lists names accepted at this place beyond the struct's own
    /// (the fields every node has, for instance).
    pub(crate) fn render(&self, extra: &[&str]) -> String {
        match &self.kind {
            DeErrorKind::Message(message) => message.clone(),
            DeErrorKind::UnknownField { field, expected } => {
                let candidates: Vec<&str> = expected
                    .iter()
                    .copied()
                    .chain(extra.iter().copied())
                    .collect();
                unknown_name("field", field, &candidates)
            }
            DeErrorKind::UnknownVariant { variant, expected } => {
                unknown_name("value", variant, expected)
            }
        }
    }
}

/// `unknown field `quiet_fr`, did you mean `quiet_for`?` or the list of
/// accepted names when nothing is close.
pub(crate) fn unknown_name(what: &str, name: &str, candidates: &[&str]) -> String {
    match suggest(name, candidates) {
        Some(best) => format!("unknown {what} `{name}`, did you mean `{best}`?"),
        None if candidates.is_empty() => format!("unknown {what} `{name}`"),
        None => {
            let list: Vec<String> = candidates.iter().map(|c| format!("`{c}`")).collect();
            format!(
                "unknown {what} `{name}`, expected one of {}",
                list.join(", ")
            )
        }
    }
}

/// The candidate closest to `name`, if it is close enough to be a typo.
pub(crate) fn suggest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(name, c), *c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&[]))
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::message(msg.to_string())
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        DeError {
            pos: None,
            path: None,
            kind: DeErrorKind::UnknownField {
                field: field.to_string(),
                expected: expected.to_vec(),
            },
        }
    }

    fn invalid_value(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        let expected = expected.to_string();
        if let Some(integer) = expected.strip_prefix("a nonzero ") {
            // serde reports zero and values too large for the type alike.
            let positive = match unexpected {
                de::Unexpected::Signed(n) => n > 0,
                de::Unexpected::Unsigned(n) => n > 0,
                _ => false,
            };
            let max = match integer {
                "u8" => Some(u64::from(u8::MAX)),
                "u16" => Some(u64::from(u16::MAX)),
                "u32" => Some(u64::from(u32::MAX)),
                "u64" => Some(u64::MAX),
                "usize" => u64::try_from(usize::MAX).ok(),
                _ => None,
            };
            return DeError::message(match (positive, max) {
                (true, Some(max)) => format!("must be at most {max}, found {unexpected}"),
                _ => format!("must be greater than zero, found {unexpected}"),
            });
        }
        DeError::message(format!("invalid value: {unexpected}, expected {expected}"))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        DeError {
            pos: None,
            path: None,
            kind: DeErrorKind::UnknownVariant {
                variant: variant.to_string(),
                expected: expected.to_vec(),
            },
        }
    }
}

/// Deserializes `T` from `node`, which sits at `path`.
pub(crate) fn from_node<T: DeserializeOwned>(node: &Node, path: &Path) -> Result<T, DeError> {
    T::deserialize(NodeDe {
        node,
        path: path.clone(),
    })
}

/// Deserializes `T` from the entries of a mapping node, skipping `skip`
/// keys (the fields every node has, read separately).
pub(crate) fn from_entries<T: DeserializeOwned>(
    node: &Node,
    path: &Path,
    skip: &[&str],
) -> Result<T, DeError> {
    let entries: Vec<(Node, Node)> = node
        .as_map()
        .unwrap_or_default()
        .iter()
        .filter(|(k, _)| !k.as_str().is_some_and(|k| skip.contains(&k)))
        .cloned()
        .collect();
    let filtered = Node {
        pos: node.pos,
        kind: Kind::Map(entries),
    };
    from_node(&filtered, path)
}

struct NodeDe<'a> {
    node: &'a Node,
    path: Path,
}

impl NodeDe<'_> {
    fn wrap<T>(&self, result: Result<T, DeError>) -> Result<T, DeError> {
        result.map_err(|e| e.at(self.node.pos, &self.path))
    }

    fn invalid(&self, expected: &str) -> DeError {
        DeError::message(format!(
            "expected {expected}, found {}",
            self.node.describe()
        ))
        .at(self.node.pos, &self.path)
    }
}

macro_rules! deserialize_integer {
    ($($method:ident => $visit:ident,)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            match self.node.kind {
                Kind::Int(i) => self.wrap(visitor.visit_i64(i)),
                _ => Err(self.invalid("an integer")),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Null => visitor.visit_unit(),
            Kind::Bool(b) => visitor.visit_bool(*b),
            Kind::Int(i) => visitor.visit_i64(*i),
            Kind::Float(f) => visitor.visit_f64(*f),
            Kind::Str(s) => visitor.visit_str(s),
            Kind::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter().enumerate(),
                path: &self.path,
            }),
            Kind::Map(entries) => visitor.visit_map(MapDe {
                entries: entries.iter(),
                value: None,
                path: &self.path,
            }),
        };
        self.wrap(result)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            Kind::Bool(b) => self.wrap(visitor.visit_bool(b)),
            _ => Err(self.invalid("`true` or `false`")),
        }
    }

    deserialize_integer! {
        deserialize_i8 => visit_i64,
        deserialize_i16 => visit_i64,
        deserialize_i32 => visit_i64,
        deserialize_i64 => visit_i64,
        deserialize_u8 => visit_i64,
        deserialize_u16 => visit_i64,
        deserialize_u32 => visit_i64,
        deserialize_u64 => visit_i64,
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            Kind::Int(i) => self.wrap(visitor.visit_f64(i as f64)),
            Kind::Float(f) => self.wrap(visitor.visit_f64(f)),
            _ => Err(self.invalid("a number")),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.scalar_text() {
            Some(text) => self.wrap(visitor.visit_str(&text)),
            None => Err(self.invalid("a string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            Kind::Null => self.wrap(visitor.visit_none()),
            _ => {
                let pos = self.node.pos;
                let path = self.path.clone();
                visitor.visit_some(self).map_err(|e| e.at(pos, &path))
            }
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            Kind::Null => self.wrap(visitor.visit_unit()),
            _ => Err(self.invalid("null")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let pos = self.node.pos;
        let path = self.path.clone();
        visitor
            .visit_newtype_struct(self)
            .map_err(|e| e.at(pos, &path))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Seq(items) => self.wrap(visitor.visit_seq(SeqDe {
                items: items.iter().enumerate(),
                path: &self.path,
            })),
            _ => Err(self.invalid("a list")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Map(entries) => self.wrap(visitor.visit_map(MapDe {
                entries: entries.iter(),
                value: None,
                path: &self.path,
            })),
            _ => Err(self.invalid("a mapping")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Str(s) => self.wrap(visitor.visit_enum(s.as_str().into_deserializer())),
            Kind::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                self.wrap(visitor.visit_enum(EnumDe {
                    key,
                    value,
                    path: &self.path,
                }))
            }
            _ => Err(self.invalid("one of the listed names")),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}

struct SeqDe<'a, I> {
    items: I,
    path: &'a Path,
}

impl<'de, 'a, I: Iterator<Item = (usize, &'a Node)>> de::SeqAccess<'de> for SeqDe<'a, I> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some((index, node)) => seed
                .deserialize(NodeDe {
                    node,
                    path: self.path.index(index),
                })
                .map(Some),
            None => Ok(None),
        }
    }
}

struct MapDe<'a, I> {
    entries: I,
    value: Option<(&'a Node, Path)>,
    path: &'a Path,
}

fn key_path(parent: &Path, key: &Node) -> Path {
    match key.scalar_text() {
        Some(text) => parent.key(&text),
        None => parent.clone(),
    }
}

impl<'de, 'a, I: Iterator<Item = &'a (Node, Node)>> de::MapAccess<'de> for MapDe<'a, I> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            Some((key, value)) => {
                let path = key_path(self.path, key);
                self.value = Some((value, path.clone()));
                seed.deserialize(NodeDe { node: key, path }).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let (node, path) = self
            .value
            .take()
            .ok_or_else(|| DeError::message("internal: map value requested before its key"))?;
        seed.deserialize(NodeDe { node, path })
    }
}

struct EnumDe<'a> {
    key: &'a Node,
    value: &'a Node,
    path: &'a Path,
}

impl<'de, 'a> de::EnumAccess<'de> for EnumDe<'a> {
    type Error = DeError;
    type Variant = NodeDe<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, NodeDe<'a>), DeError> {
        let path = key_path(self.path, self.key);
        let variant = seed.deserialize(NodeDe {
            node: self.key,
            path: path.clone(),
        })?;
        Ok((
            variant,
            NodeDe {
                node: self.value,
                path,
            },
        ))
    }
}

impl<'de> de::VariantAccess<'de> for NodeDe<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.node.kind {
            Kind::Null => Ok(()),
            _ => Err(self.invalid("no value")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;
    use crate::config::yaml;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        quiet_for: String,
        count: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        items: BTreeMap<String, Inner>,
        list: Vec<u32>,
    }

    fn load<T: DeserializeOwned>(text: &str) -> Result<T, DeError> {
        let (node, _) = yaml::parse(text, &|_| None).unwrap();
        from_node(&node, &Path::root())
    }

    #[test]
    fn unknown_field_points_at_the_key_and_suggests_the_closest_name() {
        let err = load::<Outer>("items:\n  a:\n    quiet_fr: 5m\nlist: []\n").unwrap_err();
        assert_eq!(err.pos, Some(Pos { line: 3, col: 5 }));
        assert_eq!(err.path.as_ref().unwrap().to_string(), "items.a.quiet_fr");
        assert_eq!(
            err.render(&[]),
            "unknown field `quiet_fr`, did you mean `quiet_for`?"
        );
    }

    #[test]
    fn type_errors_point_at_the_value() {
        let err = load::<Outer>("items: {}\nlist: [1, two]\n").unwrap_err();
        assert_eq!(err.path.as_ref().unwrap().to_string(), "list[1]");
        assert_eq!(err.pos, Some(Pos { line: 2, col: 11 }));
        assert_eq!(err.render(&[]), "expected an integer, found a string");
    }

    #[test]
    fn missing_fields_point_at_the_mapping() {
        let err = load::<Outer>("items:\n  a:\n    count: 3\nlist: []\n").unwrap_err();
        assert_eq!(err.path.as_ref().unwrap().to_string(), "items.a");
        assert_eq!(err.render(&[]), "missing field `quiet_for`");
    }

    #[test]
    fn far_off_names_list_the_alternatives() {
        assert_eq!(
            unknown_name("field", "zzz", &["input", "key_by"]),
            "unknown field `zzz`, expected one of `input`, `key_by`"
        );
    }
}
