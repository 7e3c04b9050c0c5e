//! Schema-guided conversion between JSON values and Avro values (the
//! mapping is tabled in the [parent module](super)).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use apache_avro::schema::{
    DecimalSchema, EnumSchema, FixedSchema, InnerDecimalSchema, Name, Names, NamespaceRef,
    RecordSchema, UnionSchema, UuidSchema,
};
use apache_avro::types::Value as Avro;
use apache_avro::{BigDecimal, Days, Decimal, Duration, Millis, Months, Schema, Uuid};
use serde_json::{Map, Number, Value};

use crate::record::json;

/// `record com.example.Folded`, `array of string`, ... for messages.
pub(crate) fn describe(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => format!("record `{}`", r.name),
        Schema::Enum(e) => format!("enum `{}`", e.name),
        Schema::Fixed(f) => format!("fixed `{}` ({} bytes)", f.name, f.size),
        Schema::Ref { name } => format!("`{name}`"),
        Schema::Array(a) => format!("array of {}", describe(&a.items)),
        Schema::Map(m) => format!("map of {}", describe(&m.types)),
        Schema::Union(u) => {
            let branches: Vec<String> = u.variants().iter().map(describe).collect();
            format!("union of {}", branches.join(", "))
        }
        Schema::Decimal(d) => format!("decimal({}, {})", d.precision, d.scale),
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int => "int".into(),
        Schema::Long => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes => "bytes".into(),
        Schema::String => "string".into(),
        Schema::BigDecimal => "big-decimal".into(),
        Schema::Uuid(_) => "uuid".into(),
        Schema::Date => "date".into(),
        Schema::TimeMillis => "time-millis".into(),
        Schema::TimeMicros => "time-micros".into(),
        Schema::TimestampMillis => "timestamp-millis".into(),
        Schema::TimestampMicros => "timestamp-micros".into(),
        Schema::TimestampNanos => "timestamp-nanos".into(),
        Schema::LocalTimestampMillis => "local-timestamp-millis".into(),
        Schema::LocalTimestampMicros => "local-timestamp-micros".into(),
        Schema::LocalTimestampNanos => "local-timestamp-nanos".into(),
        Schema::Duration(_) => "duration".into(),
    }
}

/// Where in a value a conversion is, rendered as a JSON pointer only when
/// something goes wrong.
pub(super) enum At<'p> {
    Root,
    Field(&'p At<'p>, &'p str),
    Index(&'p At<'p>, usize),
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Root => Ok(()),
            At::Field(parent, name) => {
                write!(f, "{parent}/")?;
                f.write_str(&name.replace('~', "~0").replace('/', "~1"))
            }
            At::Index(parent, i) => write!(f, "{parent}/{i}"),
        }
    }
}

impl At<'_> {
    fn error(&self, message: impl fmt::Display) -> String {
        match self {
            At::Root => message.to_string(),
            _ => format!("{self}: {message}"),
        }
    }
}

/// Follows a named reference.
fn deref<'s>(
    schema: &'s Schema,
    ns: NamespaceRef<'s>,
    names: &'s Names,
) -> Result<&'s Schema, String> {
    match schema {
        Schema::Ref { name } => {
            let full = name.fully_qualified_name(ns);
            names
                .get(full.as_ref())
                .ok_or_else(|| format!("the schema refers to `{name}`, which it does not define"))
        }
        other => Ok(other),
    }
}

/// The namespace named types inside `schema` inherit.
fn namespace_of<'s>(schema: &'s Schema, enclosing: NamespaceRef<'s>) -> NamespaceRef<'s> {
    let name: Option<&Name> = match schema {
        Schema::Record(r) => Some(&r.name),
        Schema::Enum(e) => Some(&e.name),
        Schema::Fixed(f) => Some(&f.name),
        _ => None,
    };
    name.and_then(Name::namespace).or(enclosing)
}

fn expected(at: &At<'_>, schema: &Schema, found: &Value) -> String {
    at.error(format!(
        "expected {}, found {}",
        describe(schema),
        json::type_name(found)
    ))
}

fn whole(at: &At<'_>, schema: &Schema, value: &Value) -> Result<i64, String> {
    match value {
        Value::Number(n) => n.as_i64().ok_or_else(|| {
            at.error(format!(
                "expected {}, found {n}, which is not a whole number in range",
                describe(schema)
            ))
        }),
        other => Err(expected(at, schema, other)),
    }
}

fn int(at: &At<'_>, schema: &Schema, value: &Value) -> Result<i32, String> {
    let n = whole(at, schema, value)?;
    i32::try_from(n).map_err(|_| {
        at.error(format!(
            "expected {}, found {n}, which is out of its range",
            describe(schema)
        ))
    })
}

/// A whole number, or (for timestamps) an RFC 3339 time in `per_second`
/// units.
fn instant(at: &At<'_>, schema: &Schema, value: &Value, per_second: i128) -> Result<i64, String> {
    let Value::String(text) = value else {
        return whole(at, schema, value);
    };
    let time = crate::record::json::rfc3339_instant(text).ok_or_else(|| {
        at.error(format!(
            "expected {} (a number or an RFC 3339 time), found \"{text}\"",
            describe(schema)
        ))
    })?;
    let nanos = time.as_nanosecond();
    i64::try_from(nanos * per_second / 1_000_000_000).map_err(|_| {
        at.error(format!(
            "\"{text}\" is out of the range of {}",
            describe(schema)
        ))
    })
}

/// Bytes from a string of code points U+0000–U+00FF (Avro's JSON encoding).
fn latin1(at: &At<'_>, schema: &Schema, value: &Value) -> Result<Vec<u8>, String> {
    let Value::String(text) = value else {
        return Err(expected(at, schema, value));
    };
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| {
            at.error(format!(
                "expected {} as a string of characters U+0000 to U+00FF (one per byte)",
                describe(schema)
            ))
        })
}

fn bytes_text(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

fn number(at: &At<'_>, value: f64) -> Result<Value, String> {
    Number::from_f64(value)
        .map(Value::Number)
        .ok_or_else(|| at.error(format!("{value} cannot be written in JSON")))
}

/// A JSON value as the Avro value `schema` describes.
pub(super) fn to_avro<'s>(
    value: &Value,
    schema: &'s Schema,
    ns: NamespaceRef<'s>,
    names: &'s Names,
    at: &At<'_>,
) -> Result<Avro, String> {
    let schema = deref(schema, ns, names).map_err(|e| at.error(e))?;
    let ns = namespace_of(schema, ns);
    Ok(match (schema, value) {
        (Schema::Null, Value::Null) => Avro::Null,
        (Schema::Boolean, Value::Bool(b)) => Avro::Boolean(*b),
        (Schema::Int, _) => Avro::Int(int(at, schema, value)?),
        (Schema::Long, _) => Avro::Long(whole(at, schema, value)?),
        (Schema::Float | Schema::Double, Value::Number(n)) => float_to_avro(schema, n, value, at)?,
        (Schema::String, Value::String(s)) => Avro::String(s.clone()),
        (Schema::Bytes, _) => Avro::Bytes(latin1(at, schema, value)?),
        (Schema::Fixed(fixed), _) => fixed_to_avro(schema, fixed, value, at)?,
        (Schema::Enum(e), Value::String(symbol)) => enum_to_avro(e, symbol, at)?,
        (Schema::Array(array), Value::Array(items)) => Avro::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| to_avro(item, &array.items, ns, names, &At::Index(at, i)))
                .collect::<Result<_, _>>()?,
        ),
        (Schema::Map(map), Value::Object(entries)) => Avro::Map(
            entries
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.clone(),
                        to_avro(v, &map.types, ns, names, &At::Field(at, k))?,
                    ))
                })
                .collect::<Result<HashMap<_, _>, String>>()?,
        ),
        (Schema::Record(record), Value::Object(entries)) => {
            record_to_avro(record, entries, ns, names, at)?
        }
        (Schema::Union(union), _) => union_to_avro(schema, union, value, ns, names, at)?,
        (Schema::Decimal(decimal), Value::Number(_) | Value::String(_)) => {
            decimal_to_avro(decimal, value, at)?
        }
        (Schema::BigDecimal, Value::Number(_) | Value::String(_)) => {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Avro::BigDecimal(
                BigDecimal::from_str(&text)
                    .map_err(|_| at.error(format!("`{text}` is not a decimal number")))?,
            )
        }
        (Schema::Uuid(_), Value::String(s)) => {
            Avro::Uuid(Uuid::parse_str(s).map_err(|_| at.error(format!("`{s}` is not a UUID")))?)
        }
        (Schema::Date, _) => Avro::Date(int(at, schema, value)?),
        (Schema::TimeMillis, _) => Avro::TimeMillis(int(at, schema, value)?),
        (Schema::TimeMicros, _) => Avro::TimeMicros(whole(at, schema, value)?),
        (Schema::TimestampMillis, _) => Avro::TimestampMillis(instant(at, schema, value, 1_000)?),
        (Schema::TimestampMicros, _) => {
            Avro::TimestampMicros(instant(at, schema, value, 1_000_000)?)
        }
        (Schema::TimestampNanos, _) => {
            Avro::TimestampNanos(instant(at, schema, value, 1_000_000_000)?)
        }
        (Schema::LocalTimestampMillis, _) => {
            Avro::LocalTimestampMillis(instant(at, schema, value, 1_000)?)
        }
        (Schema::LocalTimestampMicros, _) => {
            Avro::LocalTimestampMicros(instant(at, schema, value, 1_000_000)?)
        }
        (Schema::LocalTimestampNanos, _) => {
            Avro::LocalTimestampNanos(instant(at, schema, value, 1_000_000_000)?)
        }
        (Schema::Duration(_), Value::Object(parts)) => duration_to_avro(parts, at)?,
        _ => return Err(expected(at, schema, value)),
    })
}

/// A JSON number as the Avro float or double `schema` is, a float out of
/// range refused.
fn float_to_avro(schema: &Schema, n: &Number, value: &Value, at: &At<'_>) -> Result<Avro, String> {
    let f = n.as_f64().ok_or_else(|| expected(at, schema, value))?;
    Ok(if matches!(schema, Schema::Double) {
        Avro::Double(f)
    } else {
        #[allow(clippy::cast_possible_truncation)] // range checked below
        let narrow = f as f32;
        if narrow.is_infinite() {
            return Err(at.error(format!("{n} is out of the range of a float")));
        }
        Avro::Float(narrow)
    })
}

/// A JSON string of bytes as the Avro fixed `schema` is, of its size.
fn fixed_to_avro(
    schema: &Schema,
    fixed: &FixedSchema,
    value: &Value,
    at: &At<'_>,
) -> Result<Avro, String> {
    let bytes = latin1(at, schema, value)?;
    if bytes.len() != fixed.size {
        return Err(at.error(format!(
            "expected {}, found {} bytes",
            describe(schema),
            bytes.len()
        )));
    }
    Ok(Avro::Fixed(fixed.size, bytes))
}

/// A JSON string as a symbol of the Avro enum `e`.
fn enum_to_avro(e: &EnumSchema, symbol: &str, at: &At<'_>) -> Result<Avro, String> {
    let index = e.symbols.iter().position(|s| s == symbol).ok_or_else(|| {
        at.error(format!(
            "`{symbol}` is not a symbol of enum `{}` ({})",
            e.name,
            e.symbols.join(", ")
        ))
    })?;
    Ok(Avro::Enum(
        u32::try_from(index).unwrap_or(u32::MAX),
        symbol.to_owned(),
    ))
}

/// A JSON value as the first branch of the Avro union `schema` that it
/// fits; when none does, the error of the one branch of the value's kind,
/// if there is one.
fn union_to_avro<'s>(
    schema: &Schema,
    union: &'s UnionSchema,
    value: &Value,
    ns: NamespaceRef<'s>,
    names: &'s Names,
    at: &At<'_>,
) -> Result<Avro, String> {
    let mut failures = Vec::new();
    for (i, branch) in union.variants().iter().enumerate() {
        match to_avro(value, branch, ns, names, at) {
            Ok(avro) => {
                return Ok(Avro::Union(
                    u32::try_from(i).unwrap_or(u32::MAX),
                    Box::new(avro),
                ));
            }
            Err(e) => failures.push((branch, e)),
        }
    }
    // When one branch is of the value's kind, its error says more
    // than "none fits" (a record branch names the field at fault).
    let same_kind: Vec<String> = failures
        .into_iter()
        .filter(|(branch, _)| deref(branch, ns, names).is_ok_and(|b| same_json_kind(b, value)))
        .map(|(_, e)| e)
        .collect();
    match <[String; 1]>::try_from(same_kind) {
        Ok([only]) => Err(only),
        Err(_) => Err(expected(at, schema, value)),
    }
}

/// A JSON object of `months`, `days` and `millis` as an Avro duration.
fn duration_to_avro(parts: &Map<String, Value>, at: &At<'_>) -> Result<Avro, String> {
    let part = |name: &str| -> Result<u32, String> {
        let at = At::Field(at, name);
        let n = whole(&at, &Schema::Long, parts.get(name).unwrap_or(&Value::Null))?;
        u32::try_from(n).map_err(|_| at.error(format!("{n} is out of range (0 to 4294967295)")))
    };
    Ok(Avro::Duration(Duration::new(
        Months::new(part("months")?),
        Days::new(part("days")?),
        Millis::new(part("millis")?),
    )))
}

/// Whether `value` is the JSON shape `schema` is written from, to pick the
/// union branch whose error to report.
fn same_json_kind(schema: &Schema, value: &Value) -> bool {
    match value {
        Value::Null => matches!(schema, Schema::Null),
        Value::Bool(_) => matches!(schema, Schema::Boolean),
        Value::Array(_) => matches!(schema, Schema::Array(_)),
        Value::Object(_) => matches!(
            schema,
            Schema::Record(_) | Schema::Map(_) | Schema::Duration(_)
        ),
        Value::Number(_) | Value::String(_) => !matches!(
            schema,
            Schema::Null
                | Schema::Boolean
                | Schema::Array(_)
                | Schema::Record(_)
                | Schema::Map(_)
                | Schema::Duration(_)
                | Schema::Union(_)
        ),
    }
}

fn record_to_avro<'s>(
    record: &'s RecordSchema,
    entries: &Map<String, Value>,
    ns: NamespaceRef<'s>,
    names: &'s Names,
    at: &At<'_>,
) -> Result<Avro, String> {
    if let Some(extra) = entries.keys().find(|k| !record.lookup.contains_key(*k)) {
        let declared: Vec<&str> = record.fields.iter().map(|f| f.name.as_str()).collect();
        return Err(At::Field(at, extra).error(format!(
            "record `{}` has no field `{extra}` (its fields: {})",
            record.name,
            declared.join(", ")
        )));
    }
    let mut fields = Vec::with_capacity(record.fields.len());
    for field in &record.fields {
        let field_at = At::Field(at, &field.name);
        let value = match (entries.get(&field.name), &field.default) {
            (Some(value), _) => to_avro(value, &field.schema, ns, names, &field_at)?,
            (None, Some(default)) => to_avro(default, &field.schema, ns, names, &field_at)
                .map_err(|e| {
                    field_at.error(format!("missing, and its default does not fit: {e}"))
                })?,
            (None, None) => {
                to_avro(&Value::Null, &field.schema, ns, names, &field_at).map_err(|_| {
                    field_at.error(format!(
                        "missing: record `{}` requires it ({})",
                        record.name,
                        describe(&field.schema)
                    ))
                })?
            }
        };
        fields.push((field.name.clone(), value));
    }
    Ok(Avro::Record(fields))
}

/// The number `value` (a JSON number or string) as a decimal's unscaled
/// two's-complement bytes.
fn decimal_to_avro(decimal: &DecimalSchema, value: &Value, at: &At<'_>) -> Result<Avro, String> {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let unscaled = parse_decimal(&text, decimal.scale).map_err(|e| {
        at.error(format!(
            "`{text}` does not fit decimal({}, {}): {e}",
            decimal.precision, decimal.scale
        ))
    })?;
    let digits = unscaled.unsigned_abs().to_string().len();
    if unscaled != 0 && digits > decimal.precision {
        return Err(at.error(format!(
            "`{text}` has more than {} digits, the precision of decimal({}, {})",
            decimal.precision, decimal.precision, decimal.scale
        )));
    }
    let full = unscaled.to_be_bytes();
    let bytes = match &decimal.inner {
        InnerDecimalSchema::Fixed(fixed) => {
            let size = fixed.size;
            let minimal = minimal_twos_complement(&full);
            if minimal.len() > size {
                return Err(at.error(format!("`{text}` does not fit in {size} bytes")));
            }
            let fill = if unscaled < 0 { 0xff } else { 0 };
            let mut out = vec![fill; size - minimal.len()];
            out.extend_from_slice(minimal);
            out
        }
        InnerDecimalSchema::Bytes => minimal_twos_complement(&full).to_vec(),
    };
    Ok(Avro::Decimal(Decimal::from(bytes)))
}

/// The shortest big-endian two's-complement form of a number.
fn minimal_twos_complement(full: &[u8]) -> &[u8] {
    let mut start = 0;
    while start + 1 < full.len() {
        let (b, next) = (full[start], full[start + 1]);
        let redundant = (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    &full[start..]
}

/// `"-12.3"` with scale 2 → -1230.
fn parse_decimal(text: &str, scale: usize) -> Result<i128, String> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return Err("not a decimal number".into());
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > scale {
        return Err(format!("more than {scale} digits after the point"));
    }
    let mut unscaled: i128 = 0;
    let padding = std::iter::repeat_n(b'0', scale - fraction.len());
    for b in whole.bytes().chain(fraction.bytes()).chain(padding) {
        unscaled = unscaled
            .checked_mul(10)
            .and_then(|n| n.checked_add(i128::from(b - b'0')))
            .ok_or("more than 38 digits")?;
    }
    Ok(if negative { -unscaled } else { unscaled })
}

/// An unscaled decimal as text with `scale` digits after the point.
fn format_decimal(decimal: &Decimal, scale: usize) -> Result<String, String> {
    let bytes = Vec::<u8>::try_from(decimal).map_err(|e| e.to_string())?;
    if bytes.len() > 16 {
        return Err(format!(
            "a decimal of {} bytes is wider than the 38 digits streamfold reads",
            bytes.len()
        ));
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut full = [if negative { 0xff } else { 0 }; 16];
    full[16 - bytes.len()..].copy_from_slice(&bytes);
    let unscaled = i128::from_be_bytes(full);
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        return Ok(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    Ok(format!("{sign}{whole}.{fraction}"))
}

/// An Avro value read with `schema` as JSON.
pub(super) fn to_json<'s>(
    value: Avro,
    schema: &'s Schema,
    ns: NamespaceRef<'s>,
    names: &'s Names,
    at: &At<'_>,
) -> Result<Value, String> {
    let schema = deref(schema, ns, names).map_err(|e| at.error(e))?;
    let ns = namespace_of(schema, ns);
    let mismatch = |value: &Avro| {
        at.error(format!(
            "expected {}, read {:?}",
            describe(schema),
            apache_avro::schema::SchemaKind::from(value)
        ))
    };
    Ok(match (value, schema) {
        (Avro::Union(i, inner), Schema::Union(union)) => {
            let branch = usize::try_from(i)
                .ok()
                .and_then(|i| union.variants().get(i))
                .ok_or_else(|| at.error(format!("union branch {i} does not exist")))?;
            to_json(*inner, branch, ns, names, at)?
        }
        (Avro::Null, Schema::Null) => Value::Null,
        (Avro::Boolean(b), Schema::Boolean) => Value::Bool(b),
        (Avro::Int(n), Schema::Int)
        | (Avro::Date(n), Schema::Date)
        | (Avro::TimeMillis(n), Schema::TimeMillis) => Value::from(n),
        (Avro::Long(n), Schema::Long)
        | (Avro::TimeMicros(n), Schema::TimeMicros)
        | (Avro::TimestampMillis(n), Schema::TimestampMillis)
        | (Avro::TimestampMicros(n), Schema::TimestampMicros)
        | (Avro::TimestampNanos(n), Schema::TimestampNanos)
        | (Avro::LocalTimestampMillis(n), Schema::LocalTimestampMillis)
        | (Avro::LocalTimestampMicros(n), Schema::LocalTimestampMicros)
        | (Avro::LocalTimestampNanos(n), Schema::LocalTimestampNanos) => Value::from(n),
        (Avro::Float(f), Schema::Float) => number(at, f64::from(f))?,
        (Avro::Double(f), Schema::Double) => number(at, f)?,
        (Avro::String(s), Schema::String) => Value::String(s),
        (Avro::Bytes(b), Schema::Bytes) | (Avro::Fixed(_, b), Schema::Fixed(_)) => {
            Value::String(bytes_text(&b))
        }
        (Avro::Enum(_, symbol), Schema::Enum(_)) => Value::String(symbol),
        (Avro::Array(items), Schema::Array(array)) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| to_json(item, &array.items, ns, names, &At::Index(at, i)))
                .collect::<Result<_, _>>()?,
        ),
        (Avro::Map(entries), Schema::Map(map)) => {
            // Sorted, so the same map always reads the same.
            let mut entries: Vec<(String, Avro)> = entries.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut out = Map::with_capacity(entries.len());
            for (k, v) in entries {
                let item = to_json(v, &map.types, ns, names, &At::Field(at, &k))?;
                out.insert(k, item);
            }
            Value::Object(out)
        }
        (Avro::Record(fields), Schema::Record(record)) => {
            let mut out = Map::with_capacity(fields.len());
            for ((name, v), field) in fields.into_iter().zip(&record.fields) {
                let item = to_json(v, &field.schema, ns, names, &At::Field(at, &name))?;
                out.insert(name, item);
            }
            Value::Object(out)
        }
        (Avro::Decimal(d), Schema::Decimal(decimal)) => {
            Value::String(format_decimal(&d, decimal.scale).map_err(|e| at.error(e))?)
        }
        (Avro::BigDecimal(d), Schema::BigDecimal) => Value::String(d.to_string()),
        (Avro::Uuid(u), Schema::Uuid(_)) => Value::String(u.to_string()),
        // A uuid written as a plain string or 16 bytes by an older writer.
        (Avro::String(s), Schema::Uuid(UuidSchema::String)) => Value::String(s),
        (Avro::Duration(d), Schema::Duration(_)) => {
            let mut out = Map::new();
            out.insert("months".into(), Value::from(u32::from(d.months())));
            out.insert("days".into(), Value::from(u32::from(d.days())));
            out.insert("millis".into(), Value::from(u32::from(d.millis())));
            Value::Object(out)
        }
        (other, _) => return Err(mismatch(&other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_text_and_twos_complement_agree() {
        assert_eq!(parse_decimal("-0.5", 2), Ok(-50));
        assert_eq!(parse_decimal("3", 0), Ok(3));
        assert!(parse_decimal("1e3", 0).is_err());
        assert!(parse_decimal(".", 1).is_err());
        for (unscaled, scale, text) in [
            (-50i128, 2, "-0.50"),
            (128, 1, "12.8"),
            (-129, 0, "-129"),
            (5, 3, "0.005"),
        ] {
            let full = unscaled.to_be_bytes();
            let decimal = Decimal::from(minimal_twos_complement(&full));
            assert_eq!(format_decimal(&decimal, scale).unwrap(), text);
        }
        assert_eq!(minimal_twos_complement(&128i128.to_be_bytes()), &[0, 0x80]);
        assert_eq!(minimal_twos_complement(&(-1i128).to_be_bytes()), &[0xff]);
    }
}
