//! JSON values: decoding, encoding, and a total order for merging.

use std::cmp::Ordering;
use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use serde::Deserialize;
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use smallvec::SmallVec;

use crate::config::types::{JsonPointer, array_index, get_by_tokens};
use crate::record::Timestamp;

/// Parses a record value. The error says what is wrong and where, for the
/// dead letter's reason header.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    parse(bytes).map_err(|e| format!("value is not valid JSON: {e}"))
}

/// serde_json's reading of `bytes`, value or error. Input that is UTF-8 as
/// a whole (nearly every record) is checked once, not string by string as
/// `from_slice` does, which is about a sixth of a small record's decoding
/// (BENCHMARKS.md, "UTF-8 checked once per record"); anything else goes to
/// `from_slice`, so its errors are serde_json's own.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// The values at some JSON pointers of a record, read without building the
/// rest of it: what a task reads when its operator reads only some fields
/// of a value (`FieldwiseOperator::reads`). The record is parsed in one pass, by
/// serde_json's own parser and with its recursion limit, so it is read as
/// JSON exactly when [`decode`] reads it; only the values at the pointers
/// become [`Value`]s. Each is what [`JsonPointer::get`] finds in the
/// decoded value: of an object's repeated names the last counts, as
/// serde_json's map keeps it. (BENCHMARKS.md, "Only the fields an operator
/// reads".)
#[derive(Debug)]
pub(crate) struct Projection {
    root: Step,
    /// Per pointer asked for, the slot its value is read into.
    slots: Vec<usize>,
    /// The slots of pointers under one that is read whole, found in its
    /// value once read: (slot, the ancestor's slot, the tokens below it).
    within: Vec<(usize, usize, Vec<String>)>,
    count: usize,
}

/// A place in the documents the pointers walk through.
#[derive(Debug, Default)]
struct Step {
    /// The slot of the pointer that ends here: its value is read whole.
    target: Option<usize>,
    /// The names or indexes the pointers go on through.
    children: Vec<Child>,
    /// The slots read at and under this step, which a repeated name
    /// clears.
    under: Vec<usize>,
}

impl Step {
    /// The step under this one that `token` leads to, added if new.
    fn child(&mut self, token: &str) -> &mut Step {
        let at = match self.children.iter().position(|(name, ..)| name == token) {
            Some(at) => at,
            None => {
                self.children
                    .push((token.to_string(), array_index(token), Step::default()));
                self.children.len() - 1
            }
        };
        &mut self.children[at].2
    }

    /// Fills in `under` here and below.
    fn gather(&mut self) -> &[usize] {
        let mut under: Vec<usize> = self.target.into_iter().collect();
        for (.., child) in &mut self.children {
            under.extend_from_slice(child.gather());
        }
        self.under = under;
        &self.under
    }
}

impl Projection {
    /// The projection of `pointers`.
    pub(crate) fn new(pointers: &[&JsonPointer]) -> Projection {
        let mut root = Step::default();
        let mut slots = vec![0; pointers.len()];
        let mut within = Vec::new();
        let mut count = 0;
        // Shortest first, so a pointer read whole is known before the
        // pointers under it.
        let mut order: Vec<usize> = (0..pointers.len()).collect();
        order.sort_by_key(|&at| pointers[at].tokens().len());
        'pointers: for at in order {
            let tokens = pointers[at].tokens();
            let mut step = &mut root;
            for (depth, token) in tokens.iter().enumerate() {
                if let Some(ancestor) = step.target {
                    within.push((count, ancestor, tokens[depth..].to_vec()));
                    slots[at] = count;
                    count += 1;
                    continue 'pointers;
                }
                step = step.child(token);
            }
            slots[at] = *step.target.get_or_insert_with(|| {
                count += 1;
                count - 1
            });
        }
        root.gather();
        Projection {
            root,
            slots,
            within,
            count,
        }
    }

    /// The values at the pointers in `bytes`, by slot ([`Projection::slot`]),
    /// if `bytes` are UTF-8 and JSON; the caller decodes anything else with
    /// [`decode`] for its error.
    pub(crate) fn read(&self, bytes: &[u8]) -> Option<SmallVec<[Option<Value>; 8]>> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut values: SmallVec<[Option<Value>; 8]> = SmallVec::from_elem(None, self.count);
        let mut deserializer = serde_json::Deserializer::from_str(text);
        Read {
            step: &self.root,
            values: &mut values,
        }
        .deserialize(&mut deserializer)
        .ok()?;
        deserializer.end().ok()?;
        for (slot, ancestor, tokens) in &self.within {
            values[*slot] = values[*ancestor]
                .as_ref()
                .and_then(|value| get_by_tokens(value, tokens))
                .cloned();
        }
        Some(values)
    }

    /// How many pointers [`Projection::new`] was given.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The slot of the `pointer`-th pointer [`Projection::new`] was given.
    pub(crate) fn slot(&self, pointer: usize) -> usize {
        self.slots[pointer]
    }
}

/// A [`Visitor`]'s `expecting` and its visits of JSON's scalars, for
/// [`Read`] and [`Skip`]: a scalar builds nothing.
macro_rules! any_scalar_is_nothing {
    () => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }

        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }

        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }

        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }

        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }

        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    };
}

/// Reads the value at a [`Step`]: whole if a pointer ends there, else the
/// steps under it, skipping the rest.
struct Read<'p, 'v> {
    step: &'p Step,
    values: &'v mut [Option<Value>],
}

impl<'de> DeserializeSeed<'de> for Read<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.step.target {
            Some(slot) => {
                self.values[slot] = Some(Value::deserialize(deserializer)?);
                Ok(())
            }
            None => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Read<'_, '_> {
    type Value = ();

    // A scalar where a pointer goes on: nothing there.
    any_scalar_is_nothing!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let child = self
                .step
                .children
                .iter()
                .find(|(_, at, _)| *at == Some(index));
            let more = match child {
                Some((.., step)) => items
                    .next_element_seed(Read {
                        step,
                        values: &mut *self.values,
                    })?
                    .is_some(),
                None => items.next_element_seed(Skip)?.is_some(),
            };
            if !more {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<(), A::Error> {
        while let Some(child) = fields.next_key_seed(Name(self.step))? {
            match child {
                Some((.., step)) => {
                    // A repeated name replaces what the earlier one held.
                    for &slot in &step.under {
                        self.values[slot] = None;
                    }
                    fields.next_value_seed(Read {
                        step,
                        values: &mut *self.values,
                    })?;
                }
                None => fields.next_value_seed(Skip)?,
            }
        }
        Ok(())
    }
}

/// The step a name leads to, if any pointer goes through it.
struct Name<'p>(&'p Step);

/// A name a pointer goes on through: its text, the array index it is as
/// well if it is one, and the step it leads to.
type Child = (String, Option<usize>, Step);

impl<'de, 'p> DeserializeSeed<'de> for Name<'p> {
    type Value = Option<&'p Child>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, 'p> Visitor<'de> for Name<'p> {
    type Value = Option<&'p Child>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
        Ok(self.0.children.iter().find(|(known, ..)| known == name))
    }
}

/// A value no pointer goes into, parsed and checked as [`decode`] checks it
/// (serde_json's `IgnoredAny` would skip it without its recursion limit),
/// building nothing.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    any_scalar_is_nothing!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<(), A::Error> {
        while fields.next_key_seed(SkipName)?.is_some() {
            fields.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

/// An object member name no pointer goes through.
struct SkipName;

impl<'de> DeserializeSeed<'de> for SkipName {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(Skip)
    }
}

pub fn encode(value: &Value) -> Vec<u8> {
    // Serializing a `Value` cannot fail: its map keys are strings.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The bytes of a key read from a value: strings as their text, anything
/// else as compact JSON.
pub(crate) fn key_bytes(value: &Value) -> Box<[u8]> {
    match value {
        Value::String(s) => s.as_bytes().into(),
        other => encode(other).into_boxed_slice(),
    }
}

/// "a string", "an object", ... for messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn rank(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

/// A total order on JSON values: null < booleans < numbers < strings <
/// arrays < objects; numbers numerically, strings by bytes, arrays and
/// objects element-wise (objects by sorted keys). Sets and min/max built on
/// it give the same result whatever order values arrive in.
pub(crate) fn canonical_cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => x
                    .as_f64()
                    .unwrap_or(0.0)
                    .total_cmp(&y.as_f64().unwrap_or(0.0)),
            },
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (x, y) in x.iter().zip(y) {
                let order = canonical_cmp(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((xk, xv), (yk, yv)) in xs.iter().zip(&ys) {
                let order = xk.cmp(yk).then_with(|| canonical_cmp(xv, yv));
                if order != Ordering::Equal {
                    return order;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// The last millisecond RFC 3339 can write: 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MILLIS: Timestamp = 253_402_300_799_999;

/// `2025-01-01T00:00:00.000Z` for a millisecond timestamp, clamped to what
/// RFC 3339 can write: from the epoch to the end of year 9999 (a record
/// may carry any time at all).
pub(crate) fn rfc3339_millis(ts: Timestamp) -> String {
    let clamped = ts.clamp(0, LAST_RFC3339_MILLIS);
    // Within that range the addition cannot overflow and formatting cannot
    // fail, so `to_string` cannot panic.
    let time = UNIX_EPOCH + Duration::from_millis(u64::try_from(clamped).unwrap_or(0));
    humantime::format_rfc3339_millis(time).to_string()
}

/// Reads a timestamp field: epoch milliseconds or an RFC 3339 string.
pub fn parse_timestamp(value: &Value) -> Option<Timestamp> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => Some(rfc3339_instant(s)?.as_millisecond()),
        _ => None,
    }
}

/// An RFC 3339 time as an instant, with any UTC offset (`Z`, `+02:00`,
/// `-05:30`; `2025-06-01T12:00:00+02:00` is 10:00 UTC), a fraction of a
/// second to nanoseconds, and before 1970 too. A time without an offset
/// (`2025-06-01T12:00:00`, `2025-06-01 12:00:00`) is read as UTC, as
/// earlier versions read it. jiff (already in the tree through jaq's
/// date functions) parses it: humantime's RFC 3339 reader knows `Z`
/// only, and turned every other offset into a dead letter.
pub(crate) fn rfc3339_instant(text: &str) -> Option<jiff::Timestamp> {
    if let Ok(instant) = text.parse::<jiff::Timestamp>() {
        return Some(instant);
    }
    let civil = text.parse::<jiff::civil::DateTime>().ok()?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|zoned| zoned.timestamp())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// `parse` must answer exactly as `from_slice`, the reading it
    /// replaces: the same value, or an error with the same message.
    fn same_as_from_slice(bytes: &[u8]) {
        let ours = parse::<Value>(bytes).map_err(|e| e.to_string());
        let reference = serde_json::from_slice::<Value>(bytes).map_err(|e| e.to_string());
        assert_eq!(
            ours,
            reference,
            "input {:?}",
            String::from_utf8_lossy(bytes)
        );
    }

    /// A projection reads exactly the inputs [`decode`] reads, and finds at
    /// each pointer what [`JsonPointer::get`] finds in the decoded value.
    fn projected_same_as_decoded(bytes: &[u8], pointers: &[JsonPointer]) {
        let pointers: Vec<&JsonPointer> = pointers.iter().collect();
        let projection = Projection::new(&pointers);
        let decoded = decode(bytes).ok();
        let expected = decoded.as_ref().map(|value| {
            pointers
                .iter()
                .map(|pointer| pointer.get(value).cloned())
                .collect::<Vec<_>>()
        });
        let projected = projection.read(bytes).map(|values| {
            (0..projection.len())
                .map(|pointer| values[projection.slot(pointer)].clone())
                .collect::<Vec<_>>()
        });
        assert_eq!(
            projected,
            expected,
            "input {:?}, pointers {pointers:?}",
            String::from_utf8_lossy(bytes)
        );
    }

    fn pointers(texts: &[&str]) -> Vec<JsonPointer> {
        texts
            .iter()
            .map(|text| JsonPointer::parse(text).unwrap())
            .collect()
    }

    #[test]
    fn parsing_answers_as_from_slice_does_on_edge_cases() {
        for input in [
            &b"{\"post_id\":\"post_1\",\"metrics\":{\"likes\":3}}"[..],
            b"  [1, -2, 3.5e3, true, null, \"\\u00e9\\n\"]  ",
            "{\"caf\u{e9}\": \"\u{1f600}\"}".as_bytes(),
            // Not UTF-8, inside a string and outside one.
            b"{\"a\": \"\xff\"}",
            b"{\"a\": 1}\xff",
            // A lone surrogate escape, trailing characters, nothing.
            b"\"\\ud800\"",
            b"{\"a\": 1} x",
            b"",
            b"{\"a\": 01}",
            // Repeated names, numbers at and past their limits, `-0`.
            b"{\"a\": 1, \"b\": [2], \"a\": {\"c\": 3}}",
            b"[18446744073709551615, 18446744073709551616, -9223372036854775808, -0, 1e308, 1e400]",
            b"[-9223372036854775809, 0.1, -0, -0.0, 5e-324]",
        ] {
            same_as_from_slice(input);
            projected_same_as_decoded(input, &pointers(&["/a", "/b/0", "/post_id"]));
        }
    }

    #[test]
    fn projections_find_what_pointers_find_on_edge_cases() {
        let deep = format!(
            "{{\"a\": 1, \"b\": {}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        for (input, texts) in [
            // A repeated name: the last counts, whatever the first held.
            (
                &br#"{"a": {"b": 1, "c": 2}, "a": {"c": 3}}"#[..],
                &["/a/b", "/a/c", "/a"][..],
            ),
            (br#"{"a": {"b": 1}, "a": 2}"#, &["/a/b"]),
            (br#"{"a": 2, "a": {"b": 1}}"#, &["/a/b", "/a/b"]),
            // A pointer under one read whole, the whole document, the
            // empty name, escapes in names.
            (
                br#"{"a": {"b": [1, {"c": 2}]}}"#,
                &["/a", "/a/b/1/c", "/a/b/1"],
            ),
            (br#"{"a": 1}"#, &["", "/a"]),
            (br#"{"": 1, "a~b": 2, "a/b": 3}"#, &["/", "/a~0b", "/a~1b"]),
            (br#"{"a\u0062": 1, "\u00e9": 2}"#, &["/ab", "/\u{e9}"]),
            // Indexes: into arrays, and as names of objects.
            (br#"{"a": [10, 20, 30]}"#, &["/a/0", "/a/2", "/a/3", "/a/x"]),
            (br#"{"a": {"0": "zero", "1": "one"}}"#, &["/a/0", "/a/1"]),
            (br#"[[1, 2], [3, 4]]"#, &["/1/0", "/0", "/+1"]),
            // An index written one way only: `01` is a name, not `1`.
            (
                br#"{"a": [10, 20], "o": {"01": 1, "1": 2}}"#,
                &["/a/1", "/a/01", "/a/+1", "/o/01", "/o/1"],
            ),
            // Through a scalar or null: nothing there.
            (br#"{"a": 1, "b": null}"#, &["/a/b", "/b", "/b/c", "/c"]),
            // Not JSON where no pointer goes, or too deep for serde_json.
            (br#"{"a": 1, "b": [01]}"#, &["/a"]),
            (br#"{"a": 1, "b": "\ud800"}"#, &["/a"]),
            (b"{\"a\": 1, \"b\": \"\xff\"}", &["/a"]),
            (deep.as_bytes(), &["/a"]),
            (br#"{"a": 1} {}"#, &["/a"]),
        ] {
            projected_same_as_decoded(input, &pointers(texts));
        }
    }

    /// JSON text with names from a few (so pointers find them, and some
    /// repeat in one object) and values of every kind.
    fn small_names_json() -> impl Strategy<Value = String> {
        let name = prop::sample::select(vec!["a", "b", "0", "1", "01", "a~b", ""]);
        let scalar = prop_oneof![
            Just("null".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|n| serde_json::to_string(&n).unwrap()),
            "[a-c\\\\\"]{0,3}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        ];
        scalar.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                proptest::collection::vec((name.clone(), inner), 0..5).prop_map(|fields| {
                    let fields: Vec<String> = fields
                        .iter()
                        .map(|(name, value)| {
                            format!("{}:{value}", serde_json::to_string(name).unwrap())
                        })
                        .collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    fn small_pointers() -> impl Strategy<Value = Vec<JsonPointer>> {
        let token = prop::sample::select(vec!["a", "b", "0", "1", "01", "a~0b", "", "2"]);
        let pointer = proptest::collection::vec(token, 0..4).prop_map(|tokens| {
            JsonPointer::parse(&tokens.iter().map(|t| format!("/{t}")).collect::<String>()).unwrap()
        });
        proptest::collection::vec(pointer, 1..5)
    }

    fn value() -> impl Strategy<Value = Value> {
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        scalar.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A value's encoding, compact or pretty, with one byte perhaps
    /// replaced: valid JSON and inputs a byte away from it.
    fn near_json() -> impl Strategy<Value = Vec<u8>> {
        (
            value(),
            any::<bool>(),
            any::<Option<(prop::sample::Index, u8)>>(),
        )
            .prop_map(|(value, pretty, change)| {
                let mut bytes = if pretty {
                    serde_json::to_vec_pretty(&value).unwrap()
                } else {
                    serde_json::to_vec(&value).unwrap()
                };
                if let Some((at, byte)) = change {
                    let at = at.index(bytes.len());
                    bytes[at] = byte;
                }
                bytes
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn parsing_answers_as_from_slice_does(
            bytes in prop_oneof![near_json(), proptest::collection::vec(any::<u8>(), 0..64)]
        ) {
            same_as_from_slice(&bytes);
            projected_same_as_decoded(&bytes, &pointers(&["/a", "/0/1", ""]));
        }

        #[test]
        fn projections_find_what_pointers_find(
            text in small_names_json(),
            change in any::<Option<(prop::sample::Index, u8)>>(),
            pointers in small_pointers(),
        ) {
            let mut bytes = text.into_bytes();
            if let Some((at, byte)) = change
                && !bytes.is_empty()
            {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            projected_same_as_decoded(&bytes, &pointers);
        }
    }

    #[test]
    fn timestamps_outside_what_rfc3339_can_write_are_clamped_not_a_panic() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(253_402_300_799_999),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            rfc3339_millis(253_402_300_800_000),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(rfc3339_millis(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn canonical_order_ranks_types_then_values() {
        let mut values = vec![
            json!("b"),
            json!(2),
            json!(null),
            json!([1]),
            json!(true),
            json!(1.5),
            json!("a"),
        ];
        values.sort_by(canonical_cmp);
        assert_eq!(
            values,
            vec![
                json!(null),
                json!(true),
                json!(1.5),
                json!(2),
                json!("a"),
                json!("b"),
                json!([1])
            ]
        );
        assert_eq!(
            canonical_cmp(&json!({"a": 1, "b": 2}), &json!({"b": 2, "a": 1})),
            Ordering::Equal
        );
    }

    #[test]
    fn timestamps_round_trip_through_rfc3339() {
        assert_eq!(
            rfc3339_millis(1_735_689_600_123),
            "2025-01-01T00:00:00.123Z"
        );
        assert_eq!(
            parse_timestamp(&json!("2025-01-01T00:00:00.123Z")),
            Some(1_735_689_600_123)
        );
        assert_eq!(parse_timestamp(&json!(42)), Some(42));
        assert_eq!(parse_timestamp(&json!("yesterday")), None);
    }

    #[test]
    fn rfc3339_times_with_any_offset_are_the_same_instant() {
        let utc = Some(1_748_772_000_000);
        for text in [
            "2025-06-01T10:00:00Z",
            "2025-06-01T10:00:00z",
            "2025-06-01T12:00:00+02:00",
            "2025-06-01T05:30:00-04:30",
            "2025-06-01T10:00:00+00:00",
            "2025-06-01t10:00:00.000Z",
            // Without an offset, UTC (as humantime read it).
            "2025-06-01T10:00:00",
            "2025-06-01 10:00:00",
        ] {
            assert_eq!(parse_timestamp(&json!(text)), utc, "{text}");
        }
        assert_eq!(
            parse_timestamp(&json!("2025-06-01T05:30:00.250-04:30")),
            Some(1_748_772_000_250)
        );
        assert_eq!(parse_timestamp(&json!("1969-12-31T23:59:59Z")), Some(-1000));
        for bad in [
            "2025-06-31T10:00:00+02:00",
            "2025-13-01T10:00:00Z",
            "10:00",
            "2025-06-01T10:00:00+2:00",
        ] {
            assert_eq!(parse_timestamp(&json!(bad)), None, "{bad}");
        }
    }
}
