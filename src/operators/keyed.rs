//! Pieces the keyed operators share: store key encodings, order values and
//! what to do with a record the operator will not apply.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::types::JsonPointer;
use crate::record::Timestamp;

/// What happens to a record an operator rejects on purpose (a duplicate, a
/// stale update, a late event): it is always counted, and it either
/// disappears or goes to the dead-letter topic with the reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OnReject {
    /// Drop it (counted in `streamfold_node_dropped_records_total`).
    #[default]
    Drop,
    /// Send it to the dead-letter topic with the reason.
    DeadLetter,
}

/// `v` as 8 bytes whose byte order is numeric order (sign bit flipped,
/// big-endian), for keys that range scans must visit in time or order.
pub(crate) fn ordered_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Inverse of [`ordered_i64`].
pub(crate) fn from_ordered_i64(bytes: &[u8]) -> Option<i64> {
    let raw: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(raw) ^ (1 << 63)) as i64)
}

/// The first part of a composite key: `part` with its length in front, so
/// the keys of one entity (`abc`) never share a prefix with another's
/// (`abcd`), and a prefix scan finds exactly one entity's entries.
pub(crate) fn entity_prefix(part: &[u8]) -> Vec<u8> {
    let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(4 + part.len() + 16);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(part);
    out
}

/// An id read from a value, as the bytes stores key it by: strings as
/// their text, anything else as compact JSON (so `7` and `"7"` are the
/// same id, as they are the same Kafka key).
pub(crate) fn id_bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.as_bytes().to_vec(),
        other => crate::record::json::encode(other),
    }
}

/// Reads an order value: an integer (a Lamport counter, a version, epoch
/// milliseconds) or an RFC 3339 time (as epoch milliseconds). Floats with a
/// fraction are refused: two producers rounding differently would disagree
/// on which update is newer.
pub(crate) fn order_value(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f >= i64::MIN as f64 && f <= i64::MAX as f64).then_some(f as i64)
        }),
        Value::String(s) => Some(crate::record::json::rfc3339_instant(s)?.as_millisecond()),
        _ => None,
    }
}

/// Reads the order value at `pointer`, or says why the record has none.
pub(crate) fn read_order(pointer: &JsonPointer, value: &Value) -> Result<i64, String> {
    match pointer.get(value) {
        None | Some(Value::Null) => Err(format!("order field {pointer} is missing")),
        Some(v) => order_value(v).ok_or_else(|| {
            format!(
                "order field {pointer} must be an integer or an RFC 3339 time, found {}",
                describe(v)
            )
        }),
    }
}

/// A short rendering of a value for messages: its JSON, cut at 60 bytes.
pub(crate) fn describe(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 60 {
        return text;
    }
    let mut end = 57;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// The value at `pointer`, refusing missing and null values.
pub(crate) fn required<'v>(
    pointer: &JsonPointer,
    value: &'v Value,
    what: &str,
) -> Result<&'v Value, String> {
    pointer
        .get(value)
        .filter(|v| !v.is_null())
        .ok_or_else(|| format!("{what} {pointer} is missing"))
}

/// A stable 32-bit fingerprint of a topic name (FNV-1a), small enough to
/// keep beside every remembered id.
pub(crate) fn topic_fingerprint(topic: &str) -> u32 {
    topic.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// `clock_now - since` rendered for messages (`"3m 20s"`), never negative.
pub(crate) fn ago(clock_now: Timestamp, since: Timestamp) -> String {
    let ms = u64::try_from(clock_now.saturating_sub(since)).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

/// Checks a name used as an output field or a named output.
pub(crate) fn legal_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ordered_integers_sort_like_numbers() {
        let mut values = vec![5, -3, i64::MIN, 0, i64::MAX, -1, 1_735_689_600_000];
        let mut encoded: Vec<[u8; 8]> = values.iter().map(|v| ordered_i64(*v)).collect();
        encoded.sort();
        values.sort();
        let decoded: Vec<i64> = encoded
            .iter()
            .map(|b| from_ordered_i64(b).unwrap())
            .collect();
        assert_eq!(decoded, values);
    }

    #[test]
    fn entity_prefixes_never_overlap() {
        let a = entity_prefix(b"abc");
        let b = entity_prefix(b"abcd");
        assert!(!b.starts_with(&a));
    }

    #[test]
    fn order_values_are_integers_or_times() {
        assert_eq!(order_value(&json!(17)), Some(17));
        assert_eq!(order_value(&json!(17.0)), Some(17));
        assert_eq!(order_value(&json!(17.5)), None);
        assert_eq!(
            order_value(&json!("2025-01-01T00:00:01Z")),
            Some(1_735_689_601_000)
        );
        assert_eq!(
            order_value(&json!("2025-01-01T02:00:01+02:00")),
            Some(1_735_689_601_000),
            "an offset is the same instant"
        );
        assert_eq!(order_value(&json!("soon")), None);
        let pointer = JsonPointer::parse("/seq").unwrap();
        assert_eq!(
            read_order(&pointer, &json!({"seq": [1]})).unwrap_err(),
            "order field /seq must be an integer or an RFC 3339 time, found [1]"
        );
        assert_eq!(
            read_order(&pointer, &json!({})).unwrap_err(),
            "order field /seq is missing"
        );
    }

    #[test]
    fn ids_keep_their_type() {
        assert_eq!(id_bytes(&json!("7")), b"7".to_vec());
        assert_eq!(id_bytes(&json!(7)), id_bytes(&json!("7")));
        assert_eq!(id_bytes(&json!({"a": 1})), b"{\"a\":1}".to_vec());
        assert_ne!(topic_fingerprint("a"), topic_fingerprint("b"));
    }
}
