//! JSON values: decoding, encoding, and a total order for merging.

use std::cmp::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::types::JsonPointer;
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

/// A record's value parsed with its strings borrowed from the bytes where
/// they need no unescaping, objects as vectors of fields: what a task reads
/// the fields of when its operator reads only some (`Operator::reads`).
/// Parsing one takes about 60 % of the time of building a [`Value`]
/// (BENCHMARKS.md, "Only the fields an operator reads").
pub(crate) type Borrowed<'a> = serde_json_borrow::Value<'a>;

/// `bytes` as a [`Borrowed`] document, if they are UTF-8 and JSON; the
/// caller decodes anything else with [`decode`] for its error.
pub(crate) fn parse_borrowed(bytes: &[u8]) -> Option<Borrowed<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    serde_json::from_str(text).ok()
}

/// What `pointer` designates in a borrowed document, as
/// [`JsonPointer::get`] finds it in the [`Value`] of the same bytes: of an
/// object's repeated names the last counts, as serde_json's map keeps it.
pub(crate) fn pointer_get<'v, 'a>(
    pointer: &JsonPointer,
    value: &'v Borrowed<'a>,
) -> Option<&'v Borrowed<'a>> {
    let mut current = value;
    for token in pointer.tokens() {
        current = match current {
            Borrowed::Object(fields) => {
                fields
                    .iter()
                    .filter(|(name, _)| *name == token.as_str())
                    .last()?
                    .1
            }
            Borrowed::Array(items) => items.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

/// The [`Value`] a borrowed value stands for: the one [`decode`] builds
/// from the same bytes (numbers as serde_json reads them; of an object's
/// repeated names, the last).
pub(crate) fn to_owned(value: &Borrowed<'_>) -> Value {
    match value {
        Borrowed::Null => Value::Null,
        Borrowed::Bool(b) => Value::Bool(*b),
        // As serde_json's own `Value` keeps numbers (a float that is not
        // finite, which its parser never gives, would be null).
        Borrowed::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::from(u),
            (None, Some(i)) => Value::from(i),
            _ => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
        },
        Borrowed::Str(text) => Value::String(text.to_string()),
        Borrowed::Array(items) => Value::Array(items.iter().map(to_owned).collect()),
        // Inserted in order, as serde_json builds a map: a later repeated
        // name replaces the earlier one. (Collecting would sort first,
        // which costs more for the few fields of an event.)
        Borrowed::Object(fields) => {
            let mut map = serde_json::Map::new();
            for (name, value) in fields.iter() {
                map.insert(name.to_owned(), to_owned(value));
            }
            Value::Object(map)
        }
    }
}

pub fn encode(value: &Value) -> Vec<u8> {
    // Serializing a `Value` cannot fail: its map keys are strings.
    serde_json::to_vec(value).unwrap_or_default()
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
        Value::String(s) => {
            let time = humantime::parse_rfc3339_weak(s).ok()?;
            let ms = time
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .as_millis();
            i64::try_from(ms).ok()
        }
        _ => None,
    }
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

    /// A borrowed parse made whole is the value [`decode`] gives, and
    /// succeeds on exactly the inputs `decode` reads.
    fn borrowed_same_as_decode(bytes: &[u8]) {
        let decoded = decode(bytes).ok();
        let borrowed = parse_borrowed(bytes).map(|document| to_owned(&document));
        assert_eq!(
            borrowed,
            decoded,
            "input {:?}",
            String::from_utf8_lossy(bytes)
        );
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
            borrowed_same_as_decode(input);
        }
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
            borrowed_same_as_decode(&bytes);
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
}
