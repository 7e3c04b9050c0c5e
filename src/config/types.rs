//! Value types that topology fields share: human durations, JSON pointers
//! and references to upstream nodes.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A duration written for humans: `"250ms"`, `"5s"`, `"5m"`, `"1h 30m"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// The longest duration a topology may set: 100 years (of 365.25
    /// days, as `humantime` counts them). Deadlines are epoch milliseconds
    /// plus durations, and wall-clock instants plus durations; within this
    /// bound neither can overflow, whatever operators add up.
    pub(crate) const MAX: HumanDuration = HumanDuration::from_secs(100 * 31_557_600);

    pub const fn from_millis(ms: u64) -> HumanDuration {
        HumanDuration(Duration::from_millis(ms))
    }

    pub const fn from_secs(secs: u64) -> HumanDuration {
        HumanDuration(Duration::from_secs(secs))
    }

    /// The duration in whole milliseconds, the unit of every clock here.
    pub fn as_millis(self) -> i64 {
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }

    /// Shorter than the clocks' millisecond, so zero to them: a setting
    /// that must be longer than zero must be at least `1ms` (`coalesce:
    /// 1ns` re-armed a rollup at `now + 0`, for ever).
    pub(crate) fn under_a_millisecond(self) -> bool {
        self.as_millis() == 0
    }

    pub(crate) fn parse(text: &str) -> Result<HumanDuration, String> {
        let duration = humantime::parse_duration(text)
            .map(HumanDuration)
            .map_err(|_| {
                format!("expected a duration like \"5m\" or \"250ms\", found \"{text}\"")
            })?;
        if duration > HumanDuration::MAX {
            return Err(format!(
                "\"{text}\" is longer than 100 years, the longest duration accepted"
            ));
        }
        Ok(duration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        HumanDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration such as \"250ms\", \"5s\", \"5m\" or \"1h 30m\".",
            "pattern": "^\\s*[0-9]+\\s*[a-zµ]+(\\s*[0-9]+\\s*[a-zµ]+)*\\s*$",
            "examples": ["250ms", "5m"]
        })
    }
}

/// An amount of memory written for humans: `"64MiB"`, `"1 GiB"`, `"500MB"`
/// (`KB`, `MB`, `GB` are powers of 1000, `KiB`, `MiB`, `GiB` of 1024), or
/// a number of bytes. Parsed by the `bytesize` crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanBytes(pub u64);

impl HumanBytes {
    pub const fn mib(n: u64) -> HumanBytes {
        HumanBytes(n * 1024 * 1024)
    }

    pub(crate) fn parse(text: &str) -> Result<HumanBytes, String> {
        text.trim()
            .parse::<bytesize::ByteSize>()
            .map(|size| HumanBytes(size.as_u64()))
            .map_err(|_| format!("expected a size like \"64MiB\" or \"1GB\", found \"{text}\""))
    }

    /// The size as `usize`, for the APIs that take one (saturating).
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Exact, in the largest binary unit that divides the size.
        for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl<'de> Deserialize<'de> for HumanBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HumanBytes;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size like \"64MiB\" or a number of bytes")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HumanBytes, E> {
                HumanBytes::parse(text).map_err(E::custom)
            }

            // A bare number in YAML is a number of bytes.
            fn visit_u64<E: serde::de::Error>(self, bytes: u64) -> Result<HumanBytes, E> {
                Ok(HumanBytes(bytes))
            }

            fn visit_i64<E: serde::de::Error>(self, bytes: i64) -> Result<HumanBytes, E> {
                u64::try_from(bytes)
                    .map(HumanBytes)
                    .map_err(|_| E::custom(format!("a size cannot be negative ({bytes})")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Serialize for HumanBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl JsonSchema for HumanBytes {
    fn schema_name() -> Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": ["string", "integer"],
            "description": "An amount of memory such as \"64MiB\", \"1GiB\" or \"500MB\", or a number of bytes.",
            "examples": ["64MiB", "1GiB"]
        })
    }
}

/// A JSON Pointer (RFC 6901) into a record's value: `/account_id`,
/// `/metrics/likes`, `/items/0`. Parsed once, applied per record.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    tokens: Vec<String>,
}

impl JsonPointer {
    pub(crate) fn parse(text: &str) -> Result<JsonPointer, String> {
        if text.is_empty() {
            return Ok(JsonPointer {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "`{text}` is not a JSON pointer: write `/{text}` (pointers start with `/`)"
            ));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => token.push('~'),
                        Some('1') => token.push('/'),
                        _ => {
                            return Err(format!(
                                "`{text}` is not a JSON pointer: `~` must be followed by 0 or 1"
                            ));
                        }
                    }
                } else {
                    token.push(c);
                }
            }
            tokens.push(token);
        }
        Ok(JsonPointer {
            text: text.to_string(),
            tokens,
        })
    }

    /// The value the pointer designates, if present.
    pub(crate) fn get<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        get_by_tokens(value, &self.tokens)
    }

    /// The reference tokens, unescaped: the object member names or array
    /// indexes the pointer walks through, in order.
    pub(crate) fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The last reference token: the natural field name for what the
    /// pointer designates (`/account_id` → `account_id`).
    pub(crate) fn last_token(&self) -> Option<&str> {
        self.tokens.last().map(String::as_str)
    }
}

/// What the reference tokens `tokens` (unescaped, as
/// [`JsonPointer::tokens`] gives them) designate in `value`, if present:
/// [`JsonPointer::get`] for a pointer's tail.
pub(crate) fn get_by_tokens<'v>(value: &'v Value, tokens: &[String]) -> Option<&'v Value> {
    let mut current = value;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get(token.as_str())?,
            Value::Array(items) => items.get(array_index(token)?)?,
            _ => return None,
        };
    }
    Some(current)
}

/// The array index `token` writes, if it writes one: `0`, or digits
/// without a leading zero (RFC 6901, section 4, as serde_json's
/// `Value::pointer` reads it). `01` or `+1` index nothing.
pub(crate) fn array_index(token: &str) -> Option<usize> {
    let digits = token.bytes().all(|b| b.is_ascii_digit());
    if !digits || token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

impl fmt::Debug for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JsonPointer({:?})", self.text)
    }
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for JsonPointer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        JsonPointer::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for JsonPointer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl JsonSchema for JsonPointer {
    fn schema_name() -> Cow<'static, str> {
        "JsonPointer".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A JSON Pointer (RFC 6901) into the record value, such as \"/account_id\".",
            "pattern": "^(/.*)?$",
            "examples": ["/account_id"]
        })
    }
}

/// A reference to what feeds a node or sink: a source name, a node name,
/// or `node.output` for operators with several outputs (`route`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct InputRef(pub String);

impl InputRef {
    /// `(name, output)`; `output` is `None` for the default output.
    pub(crate) fn split(&self) -> (&str, Option<&str>) {
        match self.0.split_once('.') {
            Some((name, port)) => (name, Some(port)),
            None => (&self.0, None),
        }
    }
}

impl JsonSchema for InputRef {
    fn schema_name() -> Cow<'static, str> {
        "InputRef".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "The name of a source or node, or `node.output` for an operator with named outputs."
        })
    }
}

/// One input or several: `input: post_metrics` or `input: [a, b]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "`input` takes a source or node name, or a list of them"
)]
pub(crate) enum Inputs {
    One(InputRef),
    Many(Vec<InputRef>),
}

impl Inputs {
    pub(crate) fn refs(&self) -> &[InputRef] {
        match self {
            Inputs::One(one) => std::slice::from_ref(one),
            Inputs::Many(many) => many,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(HumanDuration::parse("5m").unwrap().as_millis(), 300_000);
        assert_eq!(HumanDuration::parse("250ms").unwrap().as_millis(), 250);
        assert_eq!(
            HumanDuration::parse("1h 30m").unwrap().as_millis(),
            5_400_000
        );
        let err = HumanDuration::parse("five minutes").unwrap_err();
        assert_eq!(
            err,
            "expected a duration like \"5m\" or \"250ms\", found \"five minutes\""
        );
    }

    #[test]
    fn durations_beyond_a_hundred_years_are_refused_so_clocks_cannot_overflow() {
        assert_eq!(
            HumanDuration::parse("100y").unwrap().0,
            HumanDuration::MAX.0
        );
        for text in ["101y", "300000000y", "500000000000y"] {
            assert_eq!(
                HumanDuration::parse(text).unwrap_err(),
                format!("\"{text}\" is longer than 100 years, the longest duration accepted")
            );
        }
    }

    #[test]
    fn pointers_reach_into_objects_and_arrays_with_escapes() {
        let value = json!({"a": {"b/c": [10, {"d~e": 7}]}});
        let pointer = JsonPointer::parse("/a/b~1c/1/d~0e").unwrap();
        assert_eq!(pointer.get(&value), Some(&json!(7)));
        assert_eq!(JsonPointer::parse("/a/missing").unwrap().get(&value), None);
        assert_eq!(JsonPointer::parse("").unwrap().get(&value), Some(&value));
        assert_eq!(
            JsonPointer::parse("/account_id").unwrap().last_token(),
            Some("account_id")
        );
        assert!(
            JsonPointer::parse("account_id")
                .unwrap_err()
                .contains("write `/account_id`")
        );
    }

    /// RFC 6901 writes an array index as `0` or digits without a leading
    /// zero; serde_json's `Value::pointer` reads them so too. `+1`, `01`
    /// and ` 1` index nothing, though they still name an object's members.
    #[test]
    fn array_indexes_are_written_one_way() {
        let value = json!({"a": [10, 20], "o": {"01": "zero-one", "+1": "plus-one"}});
        let get = |text: &str| JsonPointer::parse(text).unwrap().get(&value).cloned();
        assert_eq!(get("/a/0"), Some(json!(10)));
        assert_eq!(get("/a/1"), Some(json!(20)));
        for text in [
            "/a/01", "/a/+1", "/a/00", "/a/ 1", "/a/1 ", "/a/-1", "/a/-", "/a/",
        ] {
            assert_eq!(get(text), None, "{text}");
        }
        assert_eq!(get("/o/01"), Some(json!("zero-one")));
        assert_eq!(get("/o/+1"), Some(json!("plus-one")));
        // As serde_json reads them.
        for text in ["/a/0", "/a/1", "/a/01", "/a/+1", "/a/00", "/o/01"] {
            assert_eq!(get(text).as_ref(), value.pointer(text), "{text}");
        }
    }

    #[test]
    fn input_refs_split_on_the_output_name() {
        assert_eq!(
            InputRef("route.errors".into()).split(),
            ("route", Some("errors"))
        );
        assert_eq!(InputRef("fold".into()).split(), ("fold", None));
    }
}
