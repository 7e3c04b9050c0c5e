//! Generated topologies, valid and invalid, never make streamfold panic.
//!
//! Each case is a YAML file assembled from random parts — subsets of
//! sources, nodes and sinks, every operator type with plausible and absurd
//! options, inputs that name missing nodes or outputs, empty and null
//! sections, values of the wrong type, garbage scalars, and sometimes text
//! mutations that break the YAML itself — fed through what `streamfold
//! check` runs ([`topology::load_str`]). A topology that passes is then
//! drawn by `describe` in every format and run offline: a task over the
//! in-memory backend ([`testkit::Driver`], what `streamfold test` uses)
//! gets JSON and raw records on every source and its clock moved forward,
//! firing timers. Errors are fine; a panic fails the case, and proptest
//! shrinks it to a small topology.
//!
//! 2,000 cases by default, a few seconds (`PROPTEST_CASES` sets more, not
//! fewer than 1,000); cases that failed once are replayed first from
//! `topology_fuzz.proptest-regressions`.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::{Value, json};
use streamfold::config::types::HumanDuration;
use streamfold::testkit::Driver;
use streamfold::topology::describe::{DescribeFormat, describe};
use streamfold::topology::load_str;

// ---------------------------------------------------------------------------
// A YAML tree and its text.

/// A YAML value to write out.
#[derive(Clone, Debug)]
enum Y {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A string, written double-quoted.
    Str(String),
    /// Text written as is (plain scalars, and garbage that may not parse).
    Plain(String),
    Seq(Vec<Y>),
    Map(Vec<(String, Y)>),
}

fn s(text: &str) -> Y {
    Y::Str(text.to_string())
}

fn quoted(text: &str) -> String {
    // JSON's escapes are valid in YAML double-quoted scalars.
    serde_json::to_string(text).unwrap()
}

fn key_text(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain { key.to_string() } else { quoted(key) }
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        ".nan".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        }
    } else {
        format!("{f:?}")
    }
}

/// `y` in flow style, on one line.
fn flow(y: &Y) -> String {
    match y {
        Y::Null => "null".into(),
        Y::Bool(b) => b.to_string(),
        Y::Int(i) => i.to_string(),
        Y::Float(f) => float_text(*f),
        Y::Str(text) => quoted(text),
        Y::Plain(text) => text.clone(),
        Y::Seq(items) => format!(
            "[{}]",
            items.iter().map(flow).collect::<Vec<_>>().join(", ")
        ),
        Y::Map(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!("{}: {}", key_text(k), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The entries of a mapping in block style at `indent`.
fn block(entries: &[(String, Y)], indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (key, value) in entries {
        out.push_str(&pad);
        out.push_str(&key_text(key));
        out.push(':');
        match value {
            Y::Map(inner) if !inner.is_empty() => {
                out.push('\n');
                block(inner, indent + 2, out);
            }
            Y::Seq(items) if !items.is_empty() => {
                out.push('\n');
                for item in items {
                    out.push_str(&pad);
                    out.push_str("  - ");
                    out.push_str(&flow(item));
                    out.push('\n');
                }
            }
            other => {
                out.push(' ');
                out.push_str(&flow(other));
                out.push('\n');
            }
        }
    }
}

fn document(root: &Y) -> String {
    match root {
        Y::Map(entries) => {
            let mut out = String::new();
            block(entries, 0, &mut out);
            out
        }
        other => format!("{}\n", flow(other)),
    }
}

// ---------------------------------------------------------------------------
// Values: plausible ones for a field, and garbage.
//
// Each case is either tidy (`chaos == false`: only values `check` may well
// accept, so many cases compile and run) or chaotic (wrong values, wrong
// types, garbage, broken YAML). Pools list what should pass, then what
// should not.

/// Values for one kind of field: the acceptable ones and the wrong ones.
struct Pool {
    good: &'static [&'static str],
    bad: &'static [&'static str],
}

const DURATIONS: Pool = Pool {
    good: &[
        "1ms", "250ms", "1s", "5s", "1m", "10m", "1h", "1h 30m", "2d", "1ns", "100y",
    ],
    bad: &[
        "0s",
        "0ms",
        "soon",
        "-5s",
        "",
        "10",
        "5 minutes",
        "101y",
        "300000000y",
        "584942417355y",
    ],
};
const POINTERS: Pool = Pool {
    good: &[
        "/account_id",
        "/metrics",
        "/post_id",
        "/n",
        "/seq",
        "/id",
        "/event_id",
        "/type",
        "/token",
        "/delta",
        "/counter",
        "/items/0",
        "/items",
        "/ts",
        "/a~1b",
        "/n/deep/er",
        "",
        "/",
    ],
    bad: &["account_id", "/~2", "/a~"],
};
const EXPRESSIONS: Pool = Pool {
    good: &[
        ".",
        ".n > 1",
        "select(.n)",
        ".items[]",
        "empty",
        "{x: .n}",
        "error(\"boom\")",
        ".a.b",
        "$key",
        "$timestamp",
        "$headers",
        ".type | startswith(\"Q\")",
        ". + {t: 1}",
        "null",
        "false",
        "1 / 0",
        ".answers += 1",
        "del(.n)",
        "limit(3; repeat(.))",
        "[.[]?]",
        "tostring",
        ".n | tonumber",
        ".op == \"ClearCount\"",
        "range(5)",
        "\"text\"",
        "{}",
        ". as $x | $x",
        ".items | length",
        "..",
    ],
    bad: &["(", "$undefined", "", "$event", ".[", "def f: ; f"],
};
const WORDS: Pool = Pool {
    good: &[
        "account_id",
        "count",
        "version",
        "lamport",
        "id",
        "x-id",
        "metrics",
    ],
    bad: &["", "a b", "é"],
};
const NAMES: Pool = Pool {
    good: &["app", "social-metrics", "a.b_c-d"],
    bad: &["", "has space", "ünï"],
};
const SCHEMAS: Pool = Pool {
    good: &[
        "schemas/post-metric-updated.avsc",
        "schemas/account-metrics-folded.avsc",
        "schemas/account-id.avsc",
    ],
    bad: &["schemas/missing.avsc", "Cargo.toml"],
};

fn garbage() -> BoxedStrategy<Y> {
    let leaf = prop_oneof![
        Just(Y::Null),
        any::<bool>().prop_map(Y::Bool),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1),
            Just(i64::MAX),
            Just(i64::MIN),
            any::<i64>()
        ]
        .prop_map(Y::Int),
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(-0.5),
            Just(1e300),
            any::<f64>()
        ]
        .prop_map(Y::Float),
        "[a-z0-9 ${}:/._-]{0,12}".prop_map(Y::Str),
        prop::sample::select(vec![
            "~", "yes", "0x1F", "1e3", "&a x", "*a", "!!str x", "${UNSET}", "${SET}", "- x", "{",
            "[", "'", "\"", "a: b", "#", "|", ">",
        ])
        .prop_map(|t| Y::Plain(t.to_string())),
        Just(Y::Seq(Vec::new())),
        Just(Y::Map(Vec::new())),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Y::Seq),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..3).prop_map(Y::Map),
        ]
    })
    .boxed()
}

fn pick(values: &'static [&'static str]) -> BoxedStrategy<Y> {
    prop::sample::select(values).prop_map(s).boxed()
}

/// A good value from `pool`; under chaos, sometimes a bad one or garbage.
fn plausible(pool: &'static Pool, chaos: bool) -> BoxedStrategy<Y> {
    if !chaos {
        return pick(pool.good);
    }
    prop_oneof![8 => pick(pool.good), 1 => pick(pool.bad), 1 => garbage()].boxed()
}

/// `good` under chaos mixed with garbage, else `good` alone.
fn or_garbage(good: BoxedStrategy<Y>, chaos: bool) -> BoxedStrategy<Y> {
    if chaos {
        prop_oneof![9 => good, 1 => garbage()].boxed()
    } else {
        good
    }
}

fn boolean(chaos: bool) -> BoxedStrategy<Y> {
    or_garbage(any::<bool>().prop_map(Y::Bool).boxed(), chaos)
}

fn count(chaos: bool) -> BoxedStrategy<Y> {
    let good = prop::sample::select(vec![1i64, 2, 3, 5, 100, 1000, 1 << 40, i64::MAX]);
    if chaos {
        prop_oneof![
            8 => good.prop_map(Y::Int),
            1 => prop::sample::select(vec![0i64, -1]).prop_map(Y::Int),
            1 => garbage(),
        ]
        .boxed()
    } else {
        good.prop_map(Y::Int).boxed()
    }
}

fn float(chaos: bool) -> BoxedStrategy<Y> {
    let good = prop::sample::select(vec![0.0, 0.2, 0.5, 1.0, 1.5, 2.0]);
    if chaos {
        prop_oneof![
            8 => good.prop_map(Y::Float),
            1 => prop::sample::select(vec![-1.0, 1e9, f64::NAN]).prop_map(Y::Float),
            1 => garbage(),
        ]
        .boxed()
    } else {
        good.prop_map(Y::Float).boxed()
    }
}

/// An enum field: one of `good`, or under chaos one of `bad` or garbage.
fn one_of(
    good: &'static [&'static str],
    bad: &'static [&'static str],
    chaos: bool,
) -> BoxedStrategy<Y> {
    if !chaos {
        return pick(good);
    }
    prop_oneof![8 => pick(good), 1 => pick(bad), 1 => garbage()].boxed()
}

/// `Some` of `value` with probability `p`, 0 and 1 included.
fn maybe<S>(p: f64, value: S) -> BoxedStrategy<Option<S::Value>>
where
    S: Strategy + 'static,
    S::Value: Clone,
{
    if p >= 1.0 {
        value.prop_map(Some).boxed()
    } else if p <= 0.0 {
        Just(None).boxed()
    } else {
        prop::option::weighted(p, value).boxed()
    }
}

/// A mapping whose fields are each present with probability `p`, plus,
/// under chaos, sometimes a field nobody knows.
fn fields(
    spec: Vec<(&'static str, f64, BoxedStrategy<Y>)>,
    chaos: bool,
) -> BoxedStrategy<Vec<(String, Y)>> {
    let parts: Vec<BoxedStrategy<Option<(String, Y)>>> = spec
        .into_iter()
        .map(|(name, p, value)| maybe(p, value.prop_map(move |v| (name.to_string(), v))))
        .collect();
    let unknown = maybe(if chaos { 0.05 } else { 0.0 }, ("[a-z_]{1,8}", garbage()));
    (parts, unknown)
        .prop_map(|(parts, unknown)| parts.into_iter().flatten().chain(unknown).collect())
        .boxed()
}

/// A mapping section: `fields` as a mapping, or under chaos sometimes
/// garbage instead.
fn section(fields: BoxedStrategy<Vec<(String, Y)>>, chaos: bool) -> BoxedStrategy<Y> {
    or_garbage(fields.prop_map(Y::Map).boxed(), chaos)
}

fn retry(c: bool) -> BoxedStrategy<Y> {
    section(
        fields(
            vec![
                ("max_attempts", 0.6, count(c)),
                ("initial_backoff", 0.5, plausible(&DURATIONS, c)),
                ("max_backoff", 0.5, plausible(&DURATIONS, c)),
                ("multiplier", 0.4, float(c)),
                ("jitter", 0.4, float(c)),
            ],
            c,
        ),
        c,
    )
}

fn string_map(c: bool) -> BoxedStrategy<Y> {
    let entries = prop::collection::vec(
        (
            prop::sample::select(vec!["linger.ms", "acks", "fetch.max.bytes", "x"]),
            prop_oneof![
                "[0-9a-z]{0,4}".prop_map(Y::Str),
                any::<i32>().prop_map(|i| Y::Int(i.into())),
                any::<bool>().prop_map(Y::Bool),
            ],
        ),
        0..3,
    )
    .prop_map(move |entries| mapping(entries, c));
    or_garbage(entries.boxed(), c)
}

const SERVERS: Pool = Pool {
    good: &["127.0.0.1:9092", "${SET}"],
    bad: &["", "${UNSET}"],
};

fn kafka(c: bool) -> BoxedStrategy<Y> {
    section(
        fields(
            vec![
                (
                    "bootstrap_servers",
                    if c { 0.95 } else { 1.0 },
                    plausible(&SERVERS, c),
                ),
                ("properties", 0.1, string_map(c)),
                ("consumer", 0.1, string_map(c)),
                ("producer", 0.1, string_map(c)),
                ("static_membership", 0.1, boolean(c)),
                ("wait_for_sources", 0.2, boolean(c)),
            ],
            c,
        ),
        c,
    )
}

fn processing(c: bool) -> BoxedStrategy<Y> {
    section(
        fields(
            vec![
                (
                    "guarantee",
                    0.3,
                    one_of(&["exactly_once", "at_least_once"], &["maybe"], c),
                ),
                ("commit_interval", 0.3, plausible(&DURATIONS, c)),
                ("punctuation_interval", 0.3, plausible(&DURATIONS, c)),
                ("transaction_timeout", 0.3, plausible(&DURATIONS, c)),
                ("retry", 0.2, retry(c)),
                ("idle_advance", 0.3, plausible(&DURATIONS, c)),
                ("state_dir", 0.1, one_of(&["./state"], &[""], c)),
            ],
            c,
        ),
        c,
    )
}

const TOPICS: Pool = Pool {
    good: &["t1", "t2", "t3"],
    bad: &["", "bad topic"],
};

fn format(c: bool) -> BoxedStrategy<Y> {
    prop_oneof![6 => one_of(&["json"], &["xml"], c), 1 => pick(&["avro"])].boxed()
}

/// Encodings a tidy case may use: Avro only when the case has a schema
/// registry.
fn encodings(avro: bool) -> &'static [&'static str] {
    if avro { &["json", "avro"] } else { &["json"] }
}

fn key_encodings(avro: bool) -> &'static [&'static str] {
    if avro {
        &["string", "json", "bytes", "none", "avro"]
    } else {
        &["string", "json", "bytes", "none"]
    }
}

fn source(c: bool, avro: bool) -> BoxedStrategy<Y> {
    if c {
        return section(
            fields(
                vec![
                    ("topic", 0.95, plausible(&TOPICS, c)),
                    ("format", 0.3, format(c)),
                    (
                        "key_format",
                        0.3,
                        one_of(key_encodings(true), &["utf16"], c),
                    ),
                    ("timestamp", 0.2, plausible(&POINTERS, c)),
                    (
                        "offset_reset",
                        0.1,
                        one_of(&["earliest", "latest"], &["middle"], c),
                    ),
                    ("schema", 0.05, plausible(&SCHEMAS, c)),
                    ("retry", 0.05, retry(c)),
                ],
                c,
            ),
            c,
        );
    }
    // Only what fits together: a reader schema only for Avro values.
    prop::sample::select(encodings(avro))
        .prop_flat_map(move |format| {
            let is_avro = format == "avro";
            fields(
                vec![
                    ("topic", 1.0, plausible(&TOPICS, false)),
                    (
                        "format",
                        if is_avro { 1.0 } else { 0.3 },
                        pick_static(format),
                    ),
                    ("key_format", 0.3, pick(key_encodings(avro))),
                    ("timestamp", 0.2, plausible(&POINTERS, false)),
                    ("offset_reset", 0.1, pick(&["earliest", "latest"])),
                    (
                        "schema",
                        if is_avro { 0.3 } else { 0.0 },
                        plausible(&SCHEMAS, false),
                    ),
                    ("retry", 0.05, retry(false)),
                ],
                false,
            )
        })
        .prop_map(Y::Map)
        .boxed()
}

fn pick_static(value: &'static str) -> BoxedStrategy<Y> {
    Just(s(value)).boxed()
}

fn clock(c: bool) -> BoxedStrategy<Y> {
    one_of(&["processing", "event"], &["wall"], c)
}

fn on_reject(c: bool) -> BoxedStrategy<Y> {
    one_of(&["drop", "dead_letter"], &["keep"], c)
}

/// A mapping of `entries`; keys repeat only under chaos (a YAML error).
fn mapping(entries: Vec<(&'static str, Y)>, c: bool) -> Y {
    let mut out: Vec<(String, Y)> = Vec::new();
    for (k, v) in entries {
        if c || !out.iter().any(|(seen, _)| seen == k) {
            out.push((k.to_string(), v));
        }
    }
    Y::Map(out)
}

/// `chaotic` under chaos, else `tidy`: how likely a field is present.
fn pr(c: bool, chaotic: f64, tidy: f64) -> f64 {
    if c { chaotic } else { tidy }
}

const MERGE_RULES: &[&str] = &[
    "set",
    "key_union",
    "sum",
    "min",
    "max",
    "first",
    "last",
    "count",
    "list",
];

/// A fold's output field. Tidy: `from` where the rule needs it, `max_len`
/// exactly for `list`.
fn merge_rule(c: bool) -> BoxedStrategy<Y> {
    if c {
        return section(
            fields(
                vec![
                    ("rule", 0.95, one_of(MERGE_RULES, &["avg"], c)),
                    ("from", 0.8, plausible(&POINTERS, c)),
                    ("max_len", 0.3, count(c)),
                ],
                c,
            ),
            c,
        );
    }
    prop::sample::select(MERGE_RULES)
        .prop_flat_map(|rule| {
            fields(
                vec![
                    ("rule", 1.0, pick_static(rule)),
                    (
                        "from",
                        if rule == "count" { 0.5 } else { 1.0 },
                        plausible(&POINTERS, false),
                    ),
                    (
                        "max_len",
                        if rule == "list" { 1.0 } else { 0.0 },
                        count(false),
                    ),
                ],
                false,
            )
        })
        .prop_map(Y::Map)
        .boxed()
}

fn fold(c: bool) -> BoxedStrategy<Vec<(String, Y)>> {
    let rules = prop::collection::vec(
        (
            prop::sample::select(vec!["metrics", "posts", "n", "total", "last"]),
            merge_rule(c),
        ),
        if c { 0..4 } else { 1..4 },
    )
    .prop_map(move |entries| mapping(entries, c));
    fields(
        vec![
            ("fields", pr(c, 0.9, 1.0), or_garbage(rules.boxed(), c)),
            ("quiet_for", 0.6, plausible(&DURATIONS, c)),
            ("max_wait", pr(c, 0.4, 0.2), plausible(&DURATIONS, c)),
            ("max_events", pr(c, 0.4, 0.6), count(c)),
            ("clock", 0.3, clock(c)),
            ("key_field", 0.2, plausible(&WORDS, c)),
        ],
        c,
    )
}

fn dedup(c: bool) -> BoxedStrategy<Vec<(String, Y)>> {
    let by_field = any::<bool>();
    (by_field, Just(c))
        .prop_flat_map(|(by_field, c)| {
            // Tidy: exactly one of `id_field` and `id_header`.
            let (field, header) = match (c, by_field) {
                (true, _) => (0.7, 0.2),
                (false, true) => (1.0, 0.0),
                (false, false) => (0.0, 1.0),
            };
            fields(
                vec![
                    ("id_field", field, plausible(&POINTERS, c)),
                    ("id_header", header, plausible(&WORDS, c)),
                    ("retention", pr(c, 0.9, 1.0), plausible(&DURATIONS, c)),
                    ("clock", 0.3, clock(c)),
                    ("on_duplicate", 0.3, on_reject(c)),
                ],
                c,
            )
        })
        .boxed()
}

fn ordered(c: bool) -> BoxedStrategy<Vec<(String, Y)>> {
    (0..3u8, Just(c))
        .prop_flat_map(|(lamport, c)| {
            // Tidy: at most one of `lamport_field` and `lamport_header`.
            let (field, header) = match (c, lamport) {
                (true, _) => (0.3, 0.2),
                (false, 0) => (0.0, 0.0),
                (false, 1) => (1.0, 0.0),
                (false, _) => (0.0, 1.0),
            };
            fields(
                vec![
                    ("order_by", pr(c, 0.9, 1.0), plausible(&POINTERS, c)),
                    ("tie_break", 0.3, plausible(&POINTERS, c)),
                    ("on_stale", 0.3, on_reject(c)),
                    ("per_field", 0.3, boolean(c)),
                    ("lamport_field", field, plausible(&WORDS, c)),
                    ("lamport_header", header, plausible(&WORDS, c)),
                ],
                c,
            )
        })
        .boxed()
}

fn named_expressions(names: Vec<&'static str>, c: bool) -> BoxedStrategy<Y> {
    let entries = prop::collection::vec(
        (prop::sample::select(names), plausible(&EXPRESSIONS, c)),
        if c { 0..4 } else { 1..4 },
    )
    .prop_map(move |entries| mapping(entries, c));
    or_garbage(entries.boxed(), c)
}

fn projection(c: bool) -> BoxedStrategy<Vec<(String, Y)>> {
    let rule_names = if c {
        vec!["Created", "Deleted", "Q", "a b", ""]
    } else {
        vec!["Created", "Deleted", "Q", "QuestionCreated"]
    };
    let required = pr(c, 0.9, 1.0);
    fields(
        vec![
            ("event_id", required, plausible(&POINTERS, c)),
            ("event_name", required, plausible(&POINTERS, c)),
            ("order_by", required, plausible(&POINTERS, c)),
            ("rules", required, named_expressions(rule_names, c)),
            ("on_unknown_event", 0.2, on_reject(c)),
            ("snapshot_every", 0.3, count(c)),
            ("tombstone", 0.3, boolean(c)),
            ("key_field", 0.2, plausible(&WORDS, c)),
            ("version_field", 0.2, plausible(&WORDS, c)),
        ],
        c,
    )
}

fn rollup(c: bool) -> BoxedStrategy<Vec<(String, Y)>> {
    let required = pr(c, 0.9, 1.0);
    fields(
        vec![
            ("token", required, plausible(&POINTERS, c)),
            ("delta", 0.5, plausible(&POINTERS, c)),
            ("reset_when", 0.3, plausible(&EXPRESSIONS, c)),
            ("coalesce", required, plausible(&DURATIONS, c)),
            ("accept_limit", required, plausible(&DURATIONS, c)),
            ("batch_size", 0.3, count(c)),
            ("clock", 0.3, clock(c)),
            ("on_late", 0.3, on_reject(c)),
            ("counter_field", 0.2, plausible(&WORDS, c)),
        ],
        c,
    )
}

fn route(c: bool) -> BoxedStrategy<Vec<(String, Y)>> {
    let route_names = if c {
        vec!["a", "b", "c", "bad name", ""]
    } else {
        vec!["a", "b", "c"]
    };
    fields(
        vec![
            (
                "routes",
                pr(c, 0.95, 1.0),
                named_expressions(route_names, c),
            ),
            ("first_match", 0.3, boolean(c)),
        ],
        c,
    )
}

/// A node's operator: its `type` and options.
fn operator(c: bool) -> BoxedStrategy<(Y, Vec<(String, Y)>)> {
    let typed = |name: &'static str, options: BoxedStrategy<Vec<(String, Y)>>| {
        options.prop_map(move |o| (s(name), o)).boxed()
    };
    let filter = fields(
        vec![("condition", pr(c, 0.95, 1.0), plausible(&EXPRESSIONS, c))],
        c,
    );
    let map = fields(
        vec![
            ("expression", pr(c, 0.95, 1.0), plausible(&EXPRESSIONS, c)),
            ("max_outputs", 0.3, count(c)),
        ],
        c,
    );
    let known = prop_oneof![
        4 => typed("fold", fold(c)),
        2 => typed("dedup", dedup(c)),
        2 => typed("ordered", ordered(c)),
        2 => typed("projection", projection(c)),
        2 => typed("rollup", rollup(c)),
        2 => typed("filter", filter),
        2 => typed("map", map),
        3 => typed("route", route(c)),
    ];
    if !c {
        return known.boxed();
    }
    prop_oneof![
        18 => known,
        1 => (garbage(), fold(c)).boxed(),
        1 => typed("folds", fold(c)),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------
// A whole topology.

/// How an `input` is written: which names it picks (indexes into the
/// candidates, resolved once the names are known) and in what shape.
#[derive(Clone, Debug)]
enum InputPlan {
    One(usize),
    List(Vec<usize>),
    /// Any upstream, also later nodes (cycles) and missing names.
    Wild(usize),
    Missing,
    Garbage(Y),
}

fn input_plan(c: bool) -> BoxedStrategy<Option<InputPlan>> {
    let tidy = prop_oneof![
        12 => any::<usize>().prop_map(InputPlan::One),
        3 => prop::collection::vec(any::<usize>(), 1..3).prop_map(InputPlan::List),
        1 => any::<usize>().prop_map(InputPlan::Wild),
    ];
    if !c {
        return tidy.prop_map(Some).boxed();
    }
    prop::option::weighted(
        0.95,
        prop_oneof![
            16 => tidy,
            1 => Just(InputPlan::List(Vec::new())),
            1 => Just(InputPlan::Missing),
            1 => garbage().prop_map(InputPlan::Garbage),
        ],
    )
    .boxed()
}

#[derive(Clone, Debug)]
struct NodePlan {
    operator: (Y, Vec<(String, Y)>),
    input: Option<InputPlan>,
    key_by: Option<Y>,
    description: Option<Y>,
}

fn node_plan(c: bool) -> BoxedStrategy<NodePlan> {
    operator(c)
        .prop_flat_map(move |operator| {
            // Tidy: `key_by` only where the operator groups by key.
            let keyed = matches!(
                &operator.0,
                Y::Str(t) if ["fold", "dedup", "ordered", "projection", "rollup"].contains(&t.as_str())
            );
            (
                Just(operator),
                input_plan(c),
                maybe(pr(c, 0.3, if keyed { 0.4 } else { 0.0 }), plausible(&POINTERS, c)),
                maybe(0.05, or_garbage(pick(&["a node", "", "ü"]), c)),
            )
        })
        .prop_map(|(operator, input, key_by, description)| NodePlan {
            operator,
            input,
            key_by,
            description,
        })
        .boxed()
}

#[derive(Clone, Debug)]
struct SinkPlan {
    input: Option<InputPlan>,
    options: Vec<(String, Y)>,
}

const SINK_TOPICS: Pool = Pool {
    good: &["o1", "o2", "t1"],
    bad: &["", "app-n0-open-changelog"],
};

fn sink_plan(c: bool, avro: bool) -> BoxedStrategy<SinkPlan> {
    let options = if c {
        fields(
            vec![
                ("topic", 0.95, plausible(&SINK_TOPICS, c)),
                ("format", 0.2, format(c)),
                ("key_format", 0.2, one_of(key_encodings(true), &["x"], c)),
                ("create", 0.5, boolean(c)),
                ("partitions", 0.1, count(c)),
                ("compact", 0.1, boolean(c)),
                ("schema", 0.05, plausible(&SCHEMAS, c)),
                ("key_schema", 0.03, plausible(&SCHEMAS, c)),
                ("register", 0.05, boolean(c)),
            ],
            c,
        )
    } else {
        // Avro values and keys come with the schema files they need;
        // `partitions` and `compact` only with `create`.
        (
            prop::sample::select(encodings(avro)),
            prop::sample::select(key_encodings(avro)),
            any::<bool>(),
        )
            .prop_flat_map(|(format, key_format, create)| {
                fields(
                    vec![
                        ("topic", 1.0, plausible(&SINK_TOPICS, false)),
                        ("format", 0.5, pick_static(format)),
                        ("key_format", 0.5, pick_static(key_format)),
                        (
                            "create",
                            if create { 1.0 } else { 0.3 },
                            Just(Y::Bool(create)).boxed(),
                        ),
                        ("partitions", if create { 0.2 } else { 0.0 }, count(false)),
                        ("compact", if create { 0.2 } else { 0.0 }, boolean(false)),
                        (
                            "schema",
                            if format == "avro" { 1.0 } else { 0.0 },
                            plausible(&SCHEMAS, false),
                        ),
                        (
                            "key_schema",
                            if key_format == "avro" { 1.0 } else { 0.0 },
                            pick(&["schemas/account-id.avsc"]),
                        ),
                        (
                            "register",
                            if format == "avro" || key_format == "avro" {
                                0.2
                            } else {
                                0.0
                            },
                            boolean(false),
                        ),
                    ],
                    false,
                )
            })
            .boxed()
    };
    (input_plan(c), options)
        .prop_map(|(input, options)| SinkPlan { input, options })
        .boxed()
}

/// How a section is written.
#[derive(Clone, Debug)]
enum Shape {
    Normal,
    Absent,
    Empty,
    Garbage(Y),
}

fn shape(c: bool) -> BoxedStrategy<Shape> {
    if !c {
        return prop_oneof![30 => Just(Shape::Normal), 1 => Just(Shape::Empty)].boxed();
    }
    prop_oneof![
        20 => Just(Shape::Normal),
        1 => Just(Shape::Absent),
        2 => Just(Shape::Empty),
        1 => garbage().prop_map(Shape::Garbage),
    ]
    .boxed()
}

/// A change to the text after it is written, to reach the YAML parser's
/// error paths.
#[derive(Clone, Debug)]
enum Mutation {
    None,
    Truncate(usize),
    Insert(usize, &'static str),
    Delete(usize, usize),
}

fn mutation(c: bool) -> BoxedStrategy<Mutation> {
    if !c {
        return Just(Mutation::None).boxed();
    }
    prop_oneof![
        12 => Just(Mutation::None),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        2 => (
            any::<usize>(),
            prop::sample::select(vec![
                ":", "{", "}", "[", "]", "-", "\n", "\t", " ", "&a ", "*a", "*b", "? ", "'", "\"",
                "${", "${X}", "#", "\n  ", "\n- ", "%YAML 1.2\n---\n", "\n---\n", "!!map ", "\u{0}",
            ])
        )
            .prop_map(|(at, text)| Mutation::Insert(at, text)),
        1 => (any::<usize>(), 1..20usize).prop_map(|(at, n)| Mutation::Delete(at, n)),
    ]
    .boxed()
}

fn char_boundary(text: &str, at: usize) -> usize {
    if text.is_empty() {
        return 0;
    }
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

impl Mutation {
    fn apply(&self, text: &mut String) {
        match *self {
            Mutation::None => {}
            Mutation::Truncate(at) => {
                let at = char_boundary(text, at);
                text.truncate(at);
            }
            Mutation::Insert(at, insert) => {
                let at = char_boundary(text, at);
                text.insert_str(at, insert);
            }
            Mutation::Delete(at, n) => {
                let start = char_boundary(text, at);
                let end = char_boundary(text, start.saturating_add(n).min(text.len()));
                text.replace_range(start..end.max(start), "");
            }
        }
    }
}

/// A record to feed once the topology compiles.
#[derive(Clone, Debug)]
enum Step {
    Json {
        source: usize,
        key: Option<String>,
        value: Value,
    },
    Raw {
        source: usize,
        key: Option<String>,
        bytes: Vec<u8>,
    },
    /// Move the clock this many punctuation ticks.
    Advance(u16),
}

fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(json!(0)),
            Just(json!(-1)),
            Just(json!(1)),
            Just(json!(i64::MAX)),
            Just(json!(i64::MIN)),
            Just(json!(u64::MAX)),
            Just(json!(1.5)),
            Just(json!(1e308)),
            any::<i64>().prop_map(|i| json!(i)),
        ],
        prop::sample::select(vec![
            "a",
            "",
            "likes",
            "QuestionCreated",
            "Created",
            "ClearCount",
            "2025-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "0001-01-01T00:00:00Z",
            "not a time",
            "7",
        ])
        .prop_map(|t| json!(t)),
    ];
    let field = prop::sample::select(vec![
        "account_id",
        "metrics",
        "post_id",
        "n",
        "seq",
        "sequence",
        "id",
        "event_id",
        "type",
        "token",
        "delta",
        "counter",
        "op",
        "items",
        "ts",
        "a",
    ]);
    leaf.prop_recursive(3, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((field.clone(), inner), 0..6).prop_map(|entries| {
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )
            }),
        ]
    })
    .boxed()
}

fn key() -> BoxedStrategy<Option<String>> {
    prop::option::weighted(
        0.8,
        prop::sample::select(vec!["account_1", "account_2", "k", ""]).prop_map(str::to_string),
    )
    .boxed()
}

fn step() -> BoxedStrategy<Step> {
    prop_oneof![
        8 => (any::<usize>(), key(), json_value())
            .prop_map(|(source, key, value)| Step::Json { source, key, value }),
        1 => (any::<usize>(), key(), prop::collection::vec(any::<u8>(), 0..12))
            .prop_map(|(source, key, bytes)| Step::Raw { source, key, bytes }),
        3 => (1..300u16).prop_map(Step::Advance),
    ]
    .boxed()
}

/// The generated parts of one case.
#[derive(Clone, Debug)]
struct Plan {
    name: Y,
    kafka: Y,
    processing: Option<Y>,
    sources: (Shape, Vec<Y>),
    nodes: (Shape, Vec<NodePlan>),
    sinks: (Shape, Vec<SinkPlan>),
    /// Add a sink for every node and source nothing reads, so more cases
    /// compile.
    read_everything: bool,
    dead_letter: Option<Y>,
    schema_registry: Option<Y>,
    extra: Option<(String, Y)>,
    mutation: Mutation,
    steps: Vec<Step>,
}

const DEAD_LETTER_TOPICS: Pool = Pool {
    good: &["dlq"],
    bad: &["t1", ""],
};
const REGISTRY_URLS: Pool = Pool {
    good: &["http://127.0.0.1:1", "http://a, https://b"],
    bad: &["ftp://x", ""],
};

/// A case: tidy (`chaos` false) with JSON only or, with `avro`, also
/// Avro and a schema registry; or chaotic.
fn plan_with(c: bool, avro: bool) -> BoxedStrategy<Plan> {
    let (sources, sinks) = if c { (0..3, 0..3) } else { (1..3, 1..3) };
    (
        (
            plausible(&NAMES, c),
            kafka(c),
            prop::option::weighted(0.4, processing(c)),
            (shape(c), prop::collection::vec(source(c, avro), sources)),
            (shape(c), prop::collection::vec(node_plan(c), 0..5)),
            (shape(c), prop::collection::vec(sink_plan(c, avro), sinks)),
        ),
        (
            prop::bool::weighted(pr(c, 0.6, 0.9)),
            prop::option::weighted(
                0.1,
                section(
                    fields(vec![("topic", 0.9, plausible(&DEAD_LETTER_TOPICS, c))], c),
                    c,
                ),
            ),
            maybe(
                if avro { 1.0 } else { 0.05 },
                section(
                    fields(
                        vec![
                            ("url", 0.9, plausible(&REGISTRY_URLS, c)),
                            ("username", 0.2, plausible(&WORDS, c)),
                            ("password", 0.2, plausible(&WORDS, c)),
                        ],
                        c,
                    ),
                    c,
                ),
            ),
            maybe(if c { 0.03 } else { 0.0 }, ("[a-z_]{1,8}", garbage())),
            mutation(c),
            prop::collection::vec(step(), 0..12),
        ),
    )
        .prop_map(
            |(
                (name, kafka, processing, sources, nodes, sinks),
                (read_everything, dead_letter, schema_registry, extra, mutation, steps),
            )| Plan {
                name,
                kafka,
                processing,
                sources,
                nodes,
                sinks,
                read_everything,
                dead_letter,
                schema_registry,
                extra,
                mutation,
                steps,
            },
        )
        .boxed()
}

fn plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        4 => Just((false, false)),
        1 => Just((false, true)),
        4 => Just((true, false)),
    ]
    .prop_flat_map(|(chaos, avro)| plan_with(chaos, avro))
}

const SOURCE_NAMES: &[&str] = &["events", "reads", "more"];
const NODE_NAMES: &[&str] = &["n0", "n1", "n2", "n3", "n4"];
const SINK_NAMES: &[&str] = &["out0", "out1", "out2", "all0", "all1"];

/// Route names a node's options declare, if it is a route.
fn route_names(node: &NodePlan) -> Vec<String> {
    let is_route = matches!(&node.operator.0, Y::Str(t) if t == "route");
    if !is_route {
        return Vec::new();
    }
    node.operator
        .1
        .iter()
        .find(|(k, _)| k == "routes")
        .and_then(|(_, v)| match v {
            Y::Map(entries) => Some(entries.iter().map(|(k, _)| k.clone()).collect()),
            _ => None,
        })
        .unwrap_or_default()
}

impl Plan {
    /// The YAML text and the topics its sources read (for the records).
    fn render(&self) -> String {
        let source_names: Vec<&str> = SOURCE_NAMES[..self.sources.1.len()].to_vec();
        let node_names: Vec<&str> = NODE_NAMES[..self.nodes.1.len()].to_vec();
        // What node `i` may read: sources, earlier nodes and their routes.
        let upstream = |before: usize| -> Vec<String> {
            let mut out: Vec<String> = source_names.iter().map(|n| n.to_string()).collect();
            for (j, node) in self.nodes.1.iter().enumerate().take(before) {
                out.push(node_names[j].to_string());
                for route in route_names(node) {
                    out.push(format!("{}.{route}", node_names[j]));
                }
            }
            out
        };
        let everything = {
            let mut all = upstream(self.nodes.1.len());
            all.push("ghost".into());
            all.push("n0.nope".into());
            all.push("events.a".into());
            all
        };
        let resolve = |plan: &InputPlan, candidates: &[String]| -> Y {
            let choose = |i: usize| -> Y {
                if candidates.is_empty() {
                    s("ghost")
                } else {
                    Y::Str(candidates[i % candidates.len()].clone())
                }
            };
            match plan {
                InputPlan::One(i) => choose(*i),
                InputPlan::List(items) => Y::Seq(items.iter().map(|&i| choose(i)).collect()),
                InputPlan::Wild(i) => Y::Str(everything[i % everything.len()].clone()),
                InputPlan::Missing => s("ghost"),
                InputPlan::Garbage(y) => y.clone(),
            }
        };
        let mut read: Vec<String> = Vec::new();

        let mut top: Vec<(String, Y)> = vec![
            ("name".into(), self.name.clone()),
            ("kafka".into(), self.kafka.clone()),
        ];
        if let Some(p) = &self.processing {
            top.push(("processing".into(), p.clone()));
        }
        let section = |shape: &Shape, entries: Vec<(String, Y)>| -> Option<Y> {
            match shape {
                Shape::Normal => Some(Y::Map(entries)),
                Shape::Absent => None,
                Shape::Empty => Some(Y::Map(Vec::new())),
                Shape::Garbage(y) => Some(y.clone()),
            }
        };
        let sources: Vec<(String, Y)> = source_names
            .iter()
            .zip(&self.sources.1)
            .map(|(n, y)| (n.to_string(), y.clone()))
            .collect();
        if let Some(y) = section(&self.sources.0, sources) {
            top.push(("sources".into(), y));
        }
        let mut nodes = Vec::new();
        for (i, node) in self.nodes.1.iter().enumerate() {
            let mut entries = vec![("type".to_string(), node.operator.0.clone())];
            if let Some(plan) = &node.input {
                let input = resolve(plan, &upstream(i));
                note_reads(&input, &mut read);
                entries.push(("input".into(), input));
            }
            if let Some(key_by) = &node.key_by {
                entries.push(("key_by".into(), key_by.clone()));
            }
            if let Some(description) = &node.description {
                entries.push(("description".into(), description.clone()));
            }
            entries.extend(node.operator.1.iter().cloned());
            nodes.push((node_names[i].to_string(), Y::Map(entries)));
        }
        if let Some(y) = section(&self.nodes.0, nodes) {
            top.push(("nodes".into(), y));
        }
        let all = upstream(self.nodes.1.len());
        let mut sinks = Vec::new();
        for (i, sink) in self.sinks.1.iter().enumerate() {
            let mut entries = Vec::new();
            if let Some(plan) = &sink.input {
                let input = resolve(plan, &all);
                note_reads(&input, &mut read);
                entries.push(("input".into(), input));
            }
            entries.extend(sink.options.iter().cloned());
            sinks.push((SINK_NAMES[i].to_string(), Y::Map(entries)));
        }
        if self.read_everything {
            let unread: Vec<String> = source_names
                .iter()
                .chain(&node_names)
                .map(|n| n.to_string())
                .filter(|n| !read.contains(n))
                .collect();
            if !unread.is_empty() {
                sinks.push((
                    "all0".into(),
                    Y::Map(vec![
                        ("topic".into(), s("everything")),
                        (
                            "input".into(),
                            Y::Seq(unread.iter().map(|n| s(n)).collect()),
                        ),
                    ]),
                ));
            }
        }
        if let Some(y) = section(&self.sinks.0, sinks) {
            top.push(("sinks".into(), y));
        }
        if let Some(y) = &self.dead_letter {
            top.push(("dead_letter".into(), y.clone()));
        }
        if let Some(y) = &self.schema_registry {
            top.push(("schema_registry".into(), y.clone()));
        }
        if let Some((k, y)) = &self.extra {
            top.push((k.clone(), y.clone()));
        }
        let mut text = document(&Y::Map(top));
        self.mutation.apply(&mut text);
        text
    }
}

/// Notes the names an `input` reads.
fn note_reads(input: &Y, read: &mut Vec<String>) {
    match input {
        Y::Str(name) => read.push(name.clone()),
        Y::Seq(items) => {
            for item in items {
                if let Y::Str(name) = item {
                    read.push(name.clone());
                }
            }
        }
        _ => {}
    }
}

/// A case as proptest prints it when it fails: the YAML as written.
struct Case {
    yaml: String,
    steps: Vec<Step>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "topology.yaml:\n{}", self.yaml)?;
        for step in &self.steps {
            writeln!(f, "step: {step:?}")?;
        }
        Ok(())
    }
}

fn case() -> impl Strategy<Value = Case> {
    plan().prop_map(|plan| Case {
        yaml: plan.render(),
        steps: plan.steps,
    })
}

// ---------------------------------------------------------------------------
// The property.

fn env(name: &str) -> Option<String> {
    (name == "SET").then(|| "5s".to_string())
}

#[derive(Default)]
struct Tally {
    cases: AtomicUsize,
    compiled: AtomicUsize,
    ran: AtomicUsize,
}

/// Checks one case and, when it compiles, draws it and runs it offline.
fn exercise(case: &Case, tally: &Tally) {
    tally.cases.fetch_add(1, Ordering::Relaxed);
    let topology = match load_str("fuzz.yaml", &case.yaml, &env) {
        Ok(topology) => topology,
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty(), "a rejected topology says why");
            for d in &diagnostics {
                // Every message points into the file.
                assert!(d.pos.line >= 1 && d.pos.col >= 1, "{d}");
            }
            return;
        }
    };
    tally.compiled.fetch_add(1, Ordering::Relaxed);
    // What `run` relies on without checking again: it subscribes to the
    // first source, and what it computes has somewhere to go.
    assert!(!topology.sources.is_empty(), "compiled without a source");
    assert!(!topology.sinks.is_empty(), "compiled without a sink");
    for format in [
        DescribeFormat::Text,
        DescribeFormat::Mermaid,
        DescribeFormat::Dot,
    ] {
        describe(&topology, format);
    }
    let topology = Arc::new(topology);
    let Ok(mut driver) = Driver::new(Arc::clone(&topology)) else {
        return;
    };
    tally.ran.fetch_add(1, Ordering::Relaxed);
    let tick = topology.processing.punctuation_interval.as_millis().max(1) as u64;
    let topic = |source: usize| -> Option<String> {
        let sources = &topology.sources;
        sources
            .get(source % sources.len().max(1))
            .map(|s| s.config.topic.clone())
    };
    for step in &case.steps {
        // Errors are fine (a task may stop on a record); panics are not.
        match step {
            Step::Json { source, key, value } => {
                if let Some(topic) = topic(*source) {
                    let _ = driver.feed_json(&topic, key.as_deref(), value);
                }
            }
            Step::Raw { source, key, bytes } => {
                if let Some(topic) = topic(*source) {
                    let _ = driver.feed_raw(&topic, key.as_deref(), bytes);
                }
            }
            Step::Advance(ticks) => {
                let by = tick.saturating_mul(u64::from(*ticks));
                let _ = driver.advance(HumanDuration::from_millis(by));
            }
        }
    }
    let _ = driver.stats();
}

/// A case that runs for minutes is a hang (a case takes milliseconds):
/// print it, so it can be replayed, and end the process rather than CI's
/// time limit.
struct Watchdog(Arc<Mutex<(Instant, String)>>);

impl Watchdog {
    fn start(limit: Duration) -> Watchdog {
        let current = Arc::new(Mutex::new((Instant::now(), String::new())));
        let watched = Arc::clone(&current);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let (since, case) = &*watched.lock().unwrap_or_else(|p| p.into_inner());
                if since.elapsed() > limit {
                    eprintln!("a case has run for {limit:?}; it hangs:\n{case}");
                    std::process::abort();
                }
            }
        });
        Watchdog(current)
    }

    fn now_running(&self, case: &Case) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = (Instant::now(), format!("{case:?}"));
    }
}

#[test]
fn no_generated_topology_makes_check_compile_describe_or_a_task_panic() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
        .max(1000);
    let mut runner = TestRunner::new(Config {
        // Failing cases are saved beside this file and replayed first.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/topology_fuzz.proptest-regressions",
        ))),
        ..Config::with_cases(cases)
    });
    let tally = Tally::default();
    let watchdog = Watchdog::start(Duration::from_secs(120));
    let result = runner.run(&case(), |case| {
        watchdog.now_running(&case);
        exercise(&case, &tally);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let total = tally.cases.load(Ordering::Relaxed);
    let compiled = tally.compiled.load(Ordering::Relaxed);
    let ran = tally.ran.load(Ordering::Relaxed);
    eprintln!("{total} cases: {compiled} compiled, {ran} ran offline");
    // The generator must reach past `check`, or the task half is untested.
    assert!(
        compiled * 10 >= total,
        "only {compiled} of {total} generated topologies compiled"
    );
    assert!(ran * 20 >= total, "only {ran} of {total} ran offline");
}
