//! Keys as a request names them and as an answer shows them: the query
//! string, the key encoding (`key_encoding=text|base64`), the bounds of a
//! scan (`prefix`, `from`, `to`, `cursor`) and the cursor a page hands
//! back.
//!
//! Keys are bytes. In `text` (the default) a key in the path or a
//! parameter is percent-decoded as it is, so any byte can be written as
//! `%FF`; an answer's `key` is the key's text, and a key that is not UTF-8
//! also carries `key_base64`, its exact bytes. In `base64`, keys in and
//! out are base64url (RFC 4648 §5), padding optional on the way in.
//! A cursor is always base64url of the last key a page returned, whatever
//! the encoding.

use std::collections::BTreeMap;

use base64::Engine;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hyper::Uri;
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

use crate::state::prefix_end;

/// base64url: unpadded when written, padded or not when read.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// How keys are written in a request and shown in its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum KeyEncoding {
    /// Percent-decoded bytes in; UTF-8 text out (plus `key_base64` when
    /// the key is not UTF-8).
    #[default]
    Text,
    /// base64url in and out.
    Base64,
}

impl KeyEncoding {
    /// The `key_encoding` parameter of `params`.
    pub(crate) fn from_params(params: &Params) -> Result<KeyEncoding, String> {
        match params.get("key_encoding").map(Vec::as_slice) {
            None | Some(b"text") => Ok(KeyEncoding::Text),
            Some(b"base64") => Ok(KeyEncoding::Base64),
            Some(_) => Err("key_encoding must be `text` or `base64`".into()),
        }
    }

    /// The key bytes `raw` (already percent-decoded) stands for.
    pub(crate) fn decode(self, raw: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            KeyEncoding::Text => Ok(raw.to_vec()),
            KeyEncoding::Base64 => BASE64URL
                .decode(raw)
                .map_err(|e| format!("a key is not base64url: {e}")),
        }
    }

    /// `key` as an answer's `key` field.
    pub(crate) fn show(self, key: &[u8]) -> String {
        match self {
            KeyEncoding::Text => String::from_utf8_lossy(key).into_owned(),
            KeyEncoding::Base64 => BASE64URL.encode(key),
        }
    }

    /// Adds `key` (and, for a text key that is not UTF-8, `key_base64`)
    /// to the JSON object `into`.
    pub(crate) fn put(self, into: &mut Value, key: &[u8]) {
        into["key"] = json!(self.show(key));
        if self == KeyEncoding::Text && std::str::from_utf8(key).is_err() {
            into["key_base64"] = json!(BASE64URL.encode(key));
        }
    }
}

/// base64url of `bytes`, as forwarded requests write keys.
pub(crate) fn base64url(bytes: &[u8]) -> String {
    BASE64URL.encode(bytes)
}

/// Query-string parameters, percent-decoded to bytes.
pub(crate) type Params = BTreeMap<String, Vec<u8>>;

/// Percent-decoded bytes of a path segment or parameter.
pub(crate) fn percent_decode(text: &str) -> Vec<u8> {
    percent_decode_str(text).collect()
}

pub(crate) fn query_params(uri: &Uri) -> Params {
    let mut out = BTreeMap::new();
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        // `+` is a space in query strings.
        let value = value.replace('+', " ");
        out.insert(
            String::from_utf8_lossy(&percent_decode(name)).into_owned(),
            percent_decode(&value),
        );
    }
    out
}

/// The keys a scan covers: from `start` (inclusive) to `end` (exclusive,
/// `None`: the store's end), in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub(crate) start: Vec<u8>,
    pub(crate) end: Option<Vec<u8>>,
}

/// What a scan request asked for, as bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanBounds {
    /// Keys starting with these bytes (empty: any).
    pub(crate) prefix: Vec<u8>,
    /// The first key, inclusive.
    pub(crate) from: Option<Vec<u8>>,
    /// The last key, inclusive (as Kafka Streams' `range(from, to)`).
    pub(crate) to: Option<Vec<u8>>,
    /// Resume after this key (the decoded cursor).
    pub(crate) after: Option<Vec<u8>>,
}

impl ScanBounds {
    /// `prefix`, `from`, `to` in `encoding`, and `cursor`, of `params`.
    pub(crate) fn from_params(params: &Params, encoding: KeyEncoding) -> Result<Self, String> {
        let key = |name: &str| params.get(name).map(|v| encoding.decode(v)).transpose();
        Ok(ScanBounds {
            prefix: key("prefix")?.unwrap_or_default(),
            from: key("from")?,
            to: key("to")?,
            after: ScanBounds::cursor_of(params)?,
        })
    }

    /// The key `cursor` of `params` resumes after.
    pub(crate) fn cursor_of(params: &Params) -> Result<Option<Vec<u8>>, String> {
        params
            .get("cursor")
            .map(|c| {
                BASE64URL
                    .decode(c)
                    .map_err(|_| "cursor is not one this server handed out".to_string())
            })
            .transpose()
    }

    /// The one key range all the bounds leave.
    pub(crate) fn range(&self) -> KeyRange {
        let mut start = self.prefix.clone();
        if let Some(from) = self.from.as_ref().filter(|f| **f > start) {
            start.clone_from(from);
        }
        if let Some(after) = &self.after {
            let next = successor(after);
            if next > start {
                start = next;
            }
        }
        let mut end = prefix_end(&self.prefix);
        if let Some(to) = &self.to {
            let past_to = successor(to);
            if end.as_ref().is_none_or(|e| past_to < *e) {
                end = Some(past_to);
            }
        }
        KeyRange { start, end }
    }

    /// Bounds from the first page on.
    #[cfg(test)]
    pub(crate) fn of(prefix: &[u8], from: Option<&[u8]>, to: Option<&[u8]>) -> ScanBounds {
        ScanBounds {
            prefix: prefix.to_vec(),
            from: from.map(<[u8]>::to_vec),
            to: to.map(<[u8]>::to_vec),
            after: None,
        }
    }

    /// The cursor that resumes after `key`.
    pub(crate) fn cursor(key: &[u8]) -> String {
        BASE64URL.encode(key)
    }
}

/// The first key after `key` in byte order: `key` followed by a zero byte.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

impl KeyRange {
    /// Whether no key can be in the range.
    pub(crate) fn is_empty(&self) -> bool {
        self.end.as_ref().is_some_and(|end| *end <= self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(prefix: &[u8], from: Option<&[u8]>, to: Option<&[u8]>) -> ScanBounds {
        ScanBounds::of(prefix, from, to)
    }

    #[test]
    fn query_strings_decode() {
        let uri: Uri = "/v1/stores/a?prefix=q%2F1+x&limit=5&tasks=0,2&k=%FF"
            .parse()
            .unwrap();
        let params = query_params(&uri);
        assert_eq!(params["prefix"], b"q/1 x");
        assert_eq!(params["limit"], b"5");
        assert_eq!(params["tasks"], b"0,2");
        assert_eq!(params["k"], [0xff]);
    }

    #[test]
    fn keys_that_are_not_utf8_round_trip_in_base64_and_are_kept_in_text() {
        let key = [0x00, 0xff, b'a', 0xfe];
        let shown = KeyEncoding::Base64.show(&key);
        assert_eq!(KeyEncoding::Base64.decode(shown.as_bytes()).unwrap(), key);
        // Padded base64url is read too.
        assert_eq!(KeyEncoding::Base64.decode(b"AP9h_g==").unwrap(), key);
        assert!(KeyEncoding::Base64.decode(b"not base64!").is_err());
        let mut text = json!({});
        KeyEncoding::Text.put(&mut text, &key);
        let exact = text["key_base64"].as_str().unwrap();
        assert_eq!(KeyEncoding::Base64.decode(exact.as_bytes()).unwrap(), key);
        let mut plain = json!({});
        KeyEncoding::Text.put(&mut plain, b"user-1");
        assert_eq!(plain, json!({"key": "user-1"}));
        let params: Params = [("key_encoding".to_string(), b"hex".to_vec())].into();
        assert!(KeyEncoding::from_params(&params).is_err());
    }

    #[test]
    fn bounds_intersect_into_one_range() {
        let range = |b: ScanBounds| b.range();
        assert_eq!(
            range(bounds(b"", None, None)),
            KeyRange {
                start: vec![],
                end: None
            }
        );
        assert_eq!(
            range(bounds(b"ab", None, None)),
            KeyRange {
                start: b"ab".to_vec(),
                end: Some(b"ac".to_vec())
            }
        );
        // `to` is inclusive: the range ends just past it.
        assert_eq!(
            range(bounds(b"", Some(b"b"), Some(b"d"))),
            KeyRange {
                start: b"b".to_vec(),
                end: Some(b"d\0".to_vec())
            }
        );
        // A prefix and a range: their intersection.
        assert_eq!(
            range(bounds(b"b", Some(b"a"), Some(b"c"))),
            KeyRange {
                start: b"b".to_vec(),
                end: Some(b"c".to_vec())
            }
        );
        assert!(range(bounds(b"", Some(b"d"), Some(b"b"))).is_empty());
        // A cursor resumes just after its key.
        let mut resumed = bounds(b"a", None, None);
        resumed.after = Some(b"a5".to_vec());
        assert_eq!(resumed.range().start, b"a5\0".to_vec());
        let params: Params =
            [("cursor".to_string(), ScanBounds::cursor(b"a5").into_bytes())].into();
        let decoded = ScanBounds::from_params(&params, KeyEncoding::Text).unwrap();
        assert_eq!(decoded.after, Some(b"a5".to_vec()));
    }
}
