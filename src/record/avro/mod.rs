//! Avro values in the Confluent wire format, converted to and from the JSON
//! values operators work on.
//!
//! A Confluent-framed record is a zero byte, the schema id (4 bytes, big
//! endian) and the Avro binary body. [`frame`] and [`unframe`] handle the
//! header; [`AvroSchema`] converts bodies, guided by the schema:
//!
//! | Avro | JSON |
//! |---|---|
//! | `null`, `boolean`, `string` | the same |
//! | `int`, `long`, `float`, `double` | a number (ints must be whole and in range) |
//! | `bytes`, `fixed` | a string of code points U+0000–U+00FF, one per byte (the Avro JSON encoding) |
//! | `enum` | the symbol, a string |
//! | `array`, `map`, `record` | an array, an object, an object (record fields in schema order) |
//! | union | the value of the branch, unwrapped: `["null", "string"]` is `null` or `"text"`; writing picks the first branch the value fits |
//! | `decimal` | a string such as `"12.30"` (written from a number or a string; at most 38 digits) |
//! | `big-decimal`, `uuid` | a string |
//! | `date`, `time-*` | the underlying number |
//! | `timestamp-*`, `local-timestamp-*` | the underlying number; written also from an RFC 3339 string |
//! | `duration` | `{"months": m, "days": d, "millis": ms}` |
//!
//! Writing is strict so nothing is lost silently: a JSON field the record
//! does not declare is an error, a missing field takes the field's default,
//! or `null` when the field is a union with `null`, and is an error
//! otherwise. Every mismatch names where it is (`/metrics/2: expected a
//! string, found a number`).

mod convert;

use std::fmt;
use std::io::Read;
use std::path::Path;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Names, ResolvedSchema};
use apache_avro::types::Value as Avro;
use apache_avro::writer::datum::GenericDatumWriter;
use serde_json::Value;

pub(crate) use self::convert::describe;
use self::convert::{At, to_avro, to_json};

/// The first byte of a Confluent-framed record.
pub(crate) const MAGIC_BYTE: u8 = 0;

/// `0`, the schema id, then `body`: what a Confluent serializer writes.
pub fn frame(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(MAGIC_BYTE);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The schema id and the Avro body of a Confluent-framed record.
pub fn unframe(bytes: &[u8]) -> Result<(u32, &[u8]), String> {
    match bytes {
        [MAGIC_BYTE, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        [MAGIC_BYTE, ..] | [] => Err(format!(
            "not Confluent Avro: {} bytes, shorter than the 5-byte header (magic byte 0 and a 4-byte schema id)",
            bytes.len()
        )),
        [first, ..] => Err(format!(
            "not Confluent Avro: the first byte is {first:#04x}, not the magic byte 0x00{}",
            if *first == b'{' {
                " (it looks like JSON; is the source's `format` right?)"
            } else {
                ""
            }
        )),
    }
}

/// A parsed Avro schema with its named types resolved, ready to convert
/// values either way.
pub struct AvroSchema {
    root: Schema,
    /// Every named type of the schema by full name, to follow references.
    names: Names,
    /// Compact JSON text of the schema as written (docs and defaults kept),
    /// which is what gets registered.
    text: String,
}

impl fmt::Debug for AvroSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AvroSchema").field(&self.text).finish()
    }
}

impl AvroSchema {
    /// Parses schema text (an `.avsc` file or a registry answer).
    pub fn parse(text: &str) -> Result<AvroSchema, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let schema = Schema::parse(&json).map_err(|e| format!("not an Avro schema: {e}"))?;
        let names: Names = ResolvedSchema::try_from(&schema)
            .map_err(|e| format!("not an Avro schema: {e}"))?
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        Ok(AvroSchema {
            root: schema,
            names,
            text: json.to_string(),
        })
    }

    pub(crate) fn root(&self) -> &Schema {
        &self.root
    }

    /// The schema as compact JSON, for registering it.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Avro's Parsing Canonical Form: equal for schemas that read and write
    /// the same bytes.
    pub(crate) fn canonical_form(&self) -> String {
        self.root().canonical_form()
    }

    /// `record com.example.Folded`, `string`, ... for messages.
    pub(crate) fn describe(&self) -> String {
        describe(self.root())
    }

    fn names(&self) -> &Names {
        &self.names
    }

    /// Writes `value` as an Avro body (no header), or says where it does not
    /// fit the schema.
    pub fn encode(&self, value: &Value) -> Result<Vec<u8>, String> {
        let avro = to_avro(value, self.root(), None, self.names(), &At::Root).map_err(|e| {
            format!(
                "value does not fit the Avro schema ({}): {e}",
                self.describe()
            )
        })?;
        // The writer resolves the schema's names on each call; for the
        // schemas of event topics that is a few small allocations.
        let writer = GenericDatumWriter::builder(self.root())
            .build()
            .map_err(|e| format!("cannot use the Avro schema: {e}"))?;
        writer.write_value_to_vec(avro).map_err(|e| {
            format!(
                "value does not fit the Avro schema ({}): {e}",
                self.describe()
            )
        })
    }

    /// Reads an Avro body written with this schema.
    pub fn decode(&self, body: &[u8]) -> Result<Value, String> {
        let avro = self.read(body)?;
        to_json(avro, self.root(), None, self.names(), &At::Root)
            .map_err(|e| format!("the Avro value does not match its schema: {e}"))
    }

    /// Reads an Avro body written with this schema and resolves it to
    /// `reader` (Avro schema resolution: defaults for new fields, promoted
    /// numbers, fields the reader does not know dropped).
    pub(crate) fn decode_as(&self, body: &[u8], reader: &AvroSchema) -> Result<Value, String> {
        let avro = self.read(body)?;
        let resolved = avro
            .resolve_with_names(reader.root(), reader.names())
            .map_err(|e| {
                format!(
                    "cannot resolve the record to the reader schema ({}): {e}",
                    reader.describe()
                )
            })?;
        to_json(resolved, reader.root(), None, reader.names(), &At::Root)
            .map_err(|e| format!("the Avro value does not match its schema: {e}"))
    }

    fn read(&self, body: &[u8]) -> Result<Avro, String> {
        let reader = GenericDatumReader::builder(self.root())
            .build()
            .map_err(|e| format!("cannot use the Avro schema: {e}"))?;
        let mut input = Body {
            bytes: body,
            read: 0,
            ran_out: false,
        };
        let avro = reader
            .read_value(&mut input)
            .map_err(|e| format!("the Avro body does not decode with its schema: {e}"))?;
        // The decoder reads a missing union index or string as null instead
        // of failing, so running out of bytes is checked here.
        if input.ran_out {
            return Err("the Avro body ends before the value does (truncated?)".into());
        }
        if input.read < body.len() {
            return Err(format!(
                "the Avro body has {} bytes left over after the value: it was not written with this schema",
                body.len() - input.read
            ));
        }
        Ok(avro)
    }
}

/// An Avro body being read, which remembers whether the decoder asked for
/// more bytes than there were.
struct Body<'a> {
    bytes: &'a [u8],
    read: usize,
    ran_out: bool,
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = &self.bytes[self.read..];
        let n = rest.len().min(buf.len());
        if n < buf.len() {
            self.ran_out = true;
        }
        buf[..n].copy_from_slice(&rest[..n]);
        self.read += n;
        Ok(n)
    }
}

/// Reads and parses an `.avsc` file; the message names the file.
pub fn read_schema_file(path: &Path) -> Result<AvroSchema, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "schema file `{shown}` not found (relative paths start from the directory streamfold runs in)"
        ),
        _ => format!("cannot read schema file `{shown}`: {e}"),
    })?;
    AvroSchema::parse(&text).map_err(|e| format!("schema file `{shown}` is {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FOLDED: &str = r#"{
      "type": "record", "name": "AccountMetricsFolded", "namespace": "streamfold.examples",
      "fields": [
        {"name": "account_id", "type": "string"},
        {"name": "metrics", "type": {"type": "array", "items": "string"}},
        {"name": "folded_count", "type": "long"},
        {"name": "closed_by", "type": {"type": "enum", "name": "ClosedBy", "symbols": ["quiet", "max_wait", "max_events"]}},
        {"name": "note", "type": ["null", "string"], "default": null},
        {"name": "reason", "type": ["null", "ClosedBy"]}
      ]
    }"#;

    fn schema(text: &str) -> AvroSchema {
        AvroSchema::parse(text).unwrap()
    }

    #[test]
    fn the_wire_header_is_magic_byte_then_big_endian_id() {
        let framed = frame(258, &[7, 8]);
        assert_eq!(framed, vec![0, 0, 0, 1, 2, 7, 8]);
        assert_eq!(unframe(&framed).unwrap(), (258, &[7u8, 8][..]));
        assert!(
            unframe(b"{\"a\":1}")
                .unwrap_err()
                .contains("looks like JSON")
        );
        assert!(
            unframe(&[0, 0, 1])
                .unwrap_err()
                .contains("shorter than the 5-byte header")
        );
        assert!(unframe(&[]).unwrap_err().contains("0 bytes"));
    }

    #[test]
    fn records_round_trip_with_unions_enums_and_named_references() {
        let s = schema(FOLDED);
        let value = json!({
            "account_id": "account_1",
            "metrics": ["likes", "shares"],
            "folded_count": 4,
            "closed_by": "quiet",
            "note": "burst",
            "reason": "max_wait"
        });
        let body = s.encode(&value).unwrap();
        assert_eq!(s.decode(&body).unwrap(), value);
        // A missing optional field reads back as null (its default).
        let mut sparse = value.clone();
        sparse.as_object_mut().unwrap().remove("note");
        sparse.as_object_mut().unwrap().remove("reason");
        let back = s.decode(&s.encode(&sparse).unwrap()).unwrap();
        assert_eq!(back["note"], Value::Null);
        assert_eq!(back["reason"], Value::Null);
    }

    #[test]
    fn values_that_do_not_fit_say_where_and_why() {
        let s = schema(FOLDED);
        let base =
            json!({"account_id": "a", "metrics": [], "folded_count": 1, "closed_by": "quiet"});
        let with = |pointer: &str, v: Value| {
            let mut value = base.clone();
            *value.pointer_mut(pointer).unwrap() = v;
            s.encode(&value).unwrap_err()
        };
        assert!(
            with("/folded_count", json!("four"))
                .ends_with("/folded_count: expected long, found a string"),
            "{}",
            with("/folded_count", json!("four"))
        );
        assert!(with("/closed_by", json!("later")).contains(
            "/closed_by: `later` is not a symbol of enum `streamfold.examples.ClosedBy` (quiet, max_wait, max_events)"
        ));
        assert!(
            with("/metrics", json!(["a", 2]))
                .contains("/metrics/1: expected string, found a number")
        );
        assert!(with("/folded_count", json!(1.5)).contains("not a whole number"));
        let mut extra = base.clone();
        extra["surprise"] = json!(true);
        assert!(
            s.encode(&extra)
                .unwrap_err()
                .contains("has no field `surprise`")
        );
        let mut missing = base.clone();
        missing.as_object_mut().unwrap().remove("account_id");
        assert!(
            s.encode(&missing)
                .unwrap_err()
                .contains("/account_id: missing: record `streamfold.examples.AccountMetricsFolded` requires it (string)")
        );
        assert!(
            s.encode(&json!([1]))
                .unwrap_err()
                .contains("expected record")
        );
    }

    #[test]
    fn int_range_floats_bytes_and_fixed_are_checked() {
        let ints = schema(r#"{"type": "array", "items": "int"}"#);
        assert!(
            ints.encode(&json!([1, 3_000_000_000_i64]))
                .unwrap_err()
                .contains("out of its range")
        );
        let floats = schema(r#""float""#);
        assert!(
            floats
                .encode(&json!(1e300))
                .unwrap_err()
                .contains("out of the range of a float")
        );
        assert_eq!(
            floats.decode(&floats.encode(&json!(1.5)).unwrap()).unwrap(),
            json!(1.5)
        );
        let bytes = schema(r#""bytes""#);
        let body = bytes.encode(&json!("\u{0}\u{ff}A")).unwrap();
        assert_eq!(body, vec![6, 0, 0xff, b'A']);
        assert_eq!(bytes.decode(&body).unwrap(), json!("\u{0}\u{ff}A"));
        assert!(
            bytes
                .encode(&json!("€"))
                .unwrap_err()
                .contains("U+0000 to U+00FF")
        );
        let fixed = schema(r#"{"type": "fixed", "name": "Two", "size": 2}"#);
        assert!(
            fixed
                .encode(&json!("abc"))
                .unwrap_err()
                .contains("found 3 bytes")
        );
    }

    #[test]
    fn decimals_timestamps_uuids_and_durations_use_readable_json() {
        let s = schema(
            r#"{"type": "record", "name": "R", "fields": [
                {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
                {"name": "fixed_price", "type": {"type": "fixed", "name": "F", "size": 8, "logicalType": "decimal", "precision": 12, "scale": 3}},
                {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
                {"name": "wait", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}}
            ]}"#,
        );
        let value = json!({
            "price": "-12.3",
            "fixed_price": 7,
            "at": "2025-01-01T00:00:00.123Z",
            "id": "4f9a4e41-6c27-4d1b-9f65-8c7d3f0a5b21",
            "wait": {"months": 1, "days": 2, "millis": 3}
        });
        let back = s.decode(&s.encode(&value).unwrap()).unwrap();
        assert_eq!(
            back,
            json!({
                "price": "-12.30",
                "fixed_price": "7.000",
                "at": 1_735_689_600_123_i64,
                "id": "4f9a4e41-6c27-4d1b-9f65-8c7d3f0a5b21",
                "wait": {"months": 1, "days": 2, "millis": 3}
            })
        );
        let mut too_precise = value.clone();
        too_precise["price"] = json!("1.234");
        assert!(
            s.encode(&too_precise)
                .unwrap_err()
                .contains("more than 2 digits after the point")
        );
        let mut too_big = value.clone();
        too_big["price"] = json!("12345678.9");
        assert!(
            s.encode(&too_big)
                .unwrap_err()
                .contains("more than 9 digits")
        );
        let mut with_offset = value.clone();
        with_offset["at"] = json!("2025-01-01T02:00:00.123+02:00");
        assert_eq!(
            s.decode(&s.encode(&with_offset).unwrap()).unwrap()["at"],
            json!(1_735_689_600_123_i64),
            "an offset names the same instant"
        );
        let mut not_a_time = value;
        not_a_time["at"] = json!("yesterday");
        assert!(
            s.encode(&not_a_time)
                .unwrap_err()
                .contains("a number or an RFC 3339 time")
        );
    }

    #[test]
    fn truncated_or_padded_bodies_do_not_decode() {
        let s = schema(FOLDED);
        let body = s
            .encode(&json!({"account_id": "account_1", "metrics": ["likes"], "folded_count": 4, "closed_by": "quiet"}))
            .unwrap();
        for cut in 1..body.len() {
            assert!(
                s.decode(&body[..cut]).is_err(),
                "a body cut at {cut} decoded"
            );
        }
        let mut padded = body.clone();
        padded.push(0);
        assert!(s.decode(&padded).unwrap_err().contains("1 bytes left over"));
    }

    #[test]
    fn a_reader_schema_resolves_older_writers() {
        let v1 = schema(
            r#"{"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}"#,
        );
        let v2 = schema(
            r#"{"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}, {"name": "tag", "type": "string", "default": "none"}]}"#,
        );
        let body = v1.encode(&json!({"id": "x", "n": 3})).unwrap();
        assert_eq!(
            v1.decode_as(&body, &v2).unwrap(),
            json!({"id": "x", "n": 3, "tag": "none"})
        );
    }

    #[test]
    fn schema_files_report_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_schema_file(&dir.path().join("missing.avsc")).unwrap_err();
        assert!(missing.contains("not found"), "{missing}");
        let broken = dir.path().join("broken.avsc");
        std::fs::write(&broken, "{\"type\": \"record\",").unwrap();
        assert!(
            read_schema_file(&broken)
                .unwrap_err()
                .contains("is not JSON")
        );
        let not_avro = dir.path().join("not-avro.avsc");
        std::fs::write(&not_avro, r#"{"type": "record", "name": "R"}"#).unwrap();
        assert!(
            read_schema_file(&not_avro)
                .unwrap_err()
                .contains("is not an Avro schema")
        );
    }
}
