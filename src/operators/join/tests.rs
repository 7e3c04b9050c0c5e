use serde_json::{Value, json};

use super::super::testing::{Harness, record};
use super::super::{Emit, NodeInfo, NodeInput};
use super::run::{Buffered, TableRow};
use super::*;
use crate::state::timers::Clock;

const LEFT_IN: usize = 0;
const RIGHT_IN: usize = 1;

/// The node's YAML (as JSON) with `type: join` and `options`.
fn node(options: Value) -> Value {
    let mut node = json!({"type": "join"});
    for (k, v) in options.as_object().unwrap() {
        node[k] = v.clone();
    }
    node
}

fn config(options: Value) -> JoinConfig {
    match serde_json::from_value(node(options)).unwrap() {
        crate::operators::NodeKind::Join(config) => config,
        other => panic!("not a join: {other:?}"),
    }
}

fn node_inputs(inputs: &[(&str, bool)]) -> Vec<NodeInput> {
    inputs
        .iter()
        .map(|&(name, table)| NodeInput {
            name: name.to_string(),
            table,
            global: false,
        })
        .collect()
}

fn join(options: Value, inputs: &[(&str, bool)]) -> Harness {
    Harness::with_inputs(node(options), None, inputs)
}

/// Feeds `value` (a tombstone when `null`) for `key` at `at` on `input`.
fn feed(h: &mut Harness, input: usize, key: &str, value: Value, at: i64) -> Vec<(String, Value)> {
    let out = h
        .process_at(record(key, value, at), at * 10 + input as i64, input)
        .unwrap();
    pairs(&out)
}

fn pairs(out: &[Emit]) -> Vec<(String, Value)> {
    out.iter()
        .map(|e| {
            let key = String::from_utf8_lossy(e.record.key.as_deref().unwrap()).into_owned();
            (key, e.record.value.clone())
        })
        .collect()
}

fn kv(key: &str, value: Value) -> (String, Value) {
    (key.to_string(), value)
}

const STREAM_TABLE: &[(&str, bool)] = &[("orders", false), ("customers", true)];
const TABLES: &[(&str, bool)] = &[("accounts", true), ("limits", true)];
const STREAMS: &[(&str, bool)] = &[("clicks", false), ("views", false)];

#[test]
fn a_stream_record_joins_the_table_s_current_value_and_a_tombstone_deletes_it() {
    let mut h = join(json!({"how": "inner"}), STREAM_TABLE);
    // No customer yet: an inner join drops the order, counted.
    assert!(feed(&mut h, LEFT_IN, "c1", json!({"order": 1}), 1).is_empty());
    assert_eq!(h.count(NodeCounter::JoinUnmatched), 1);
    assert_eq!(h.count(NodeCounter::Dropped), 1);
    // A table update alone emits nothing.
    assert!(feed(&mut h, RIGHT_IN, "c1", json!({"name": "Ada"}), 2).is_empty());
    assert_eq!(
        feed(&mut h, LEFT_IN, "c1", json!({"order": 2}), 3),
        vec![kv(
            "c1",
            json!({"orders": {"order": 2}, "customers": {"name": "Ada"}})
        )]
    );
    // The latest value wins; the output has the stream record's time.
    feed(&mut h, RIGHT_IN, "c1", json!({"name": "Ada L."}), 4);
    let out = h
        .process_at(record("c1", json!({"order": 3}), 5), 99, LEFT_IN)
        .unwrap();
    assert_eq!(out[0].record.value["customers"], json!({"name": "Ada L."}));
    assert_eq!(out[0].record.timestamp, 5);
    // A tombstone deletes the key.
    assert!(feed(&mut h, RIGHT_IN, "c1", Value::Null, 6).is_empty());
    assert!(h.store::<TableRow>("table").get(b"c1").unwrap().is_none());
    assert!(feed(&mut h, LEFT_IN, "c1", json!({"order": 4}), 7).is_empty());
    assert_eq!(h.count(NodeCounter::JoinUnmatched), 2);
    // A tombstone for a key the table never held writes nothing.
    assert!(feed(&mut h, RIGHT_IN, "c9", Value::Null, 8).is_empty());
}

#[test]
fn a_left_join_emits_every_stream_record_with_null_for_a_missing_row() {
    let mut h = join(json!({"how": "left"}), STREAM_TABLE);
    assert_eq!(
        feed(&mut h, LEFT_IN, "c1", json!({"order": 1}), 1),
        vec![kv("c1", json!({"orders": {"order": 1}, "customers": null}))]
    );
    assert_eq!(h.count(NodeCounter::JoinUnmatched), 1);
    assert_eq!(h.count(NodeCounter::Dropped), 0);
    feed(&mut h, RIGHT_IN, "c1", json!({"name": "Ada"}), 2);
    assert_eq!(
        feed(&mut h, LEFT_IN, "c1", json!({"order": 2}), 3),
        vec![kv(
            "c1",
            json!({"orders": {"order": 2}, "customers": {"name": "Ada"}})
        )]
    );
}

#[test]
fn the_table_outlives_a_restart() {
    let mut h = join(json!({}), STREAM_TABLE);
    feed(&mut h, RIGHT_IN, "c1", json!({"name": "Ada"}), 1);
    h.restart();
    assert_eq!(feed(&mut h, LEFT_IN, "c1", json!({"order": 1}), 2).len(), 1);
}

#[test]
fn the_joined_value_comes_from_an_expression_or_fields() {
    let mut h = join(
        json!({"how": "left", "value": ".orders + {customer: .customers.name}"}),
        STREAM_TABLE,
    );
    feed(&mut h, RIGHT_IN, "c1", json!({"name": "Ada"}), 1);
    assert_eq!(
        feed(&mut h, LEFT_IN, "c1", json!({"order": 1}), 2),
        vec![kv("c1", json!({"order": 1, "customer": "Ada"}))]
    );
    assert_eq!(
        feed(&mut h, LEFT_IN, "c2", json!({"order": 2}), 3),
        vec![kv("c2", json!({"order": 2, "customer": null}))]
    );
    // A failing expression is the record's error: nothing is emitted.
    let err = h
        .process_at(record("c1", json!([1]), 4), 50, LEFT_IN)
        .unwrap_err();
    assert!(
        err.to_string().starts_with("value expression failed: "),
        "{err}"
    );

    let mut h = join(
        json!({"fields": {"order": "/orders/order", "name": "/customers/name", "tier": "/customers/tier"}}),
        STREAM_TABLE,
    );
    feed(&mut h, RIGHT_IN, "c1", json!({"name": "Ada"}), 1);
    assert_eq!(
        feed(&mut h, LEFT_IN, "c1", json!({"order": 1}), 2),
        vec![kv("c1", json!({"order": 1, "name": "Ada", "tier": null}))]
    );
}

#[test]
fn a_record_without_a_key_is_refused_on_either_side() {
    let mut h = join(json!({}), STREAM_TABLE);
    let keyless = crate::record::Record::new(None, json!({"order": 1}), 1);
    let err = h.process_at(keyless.clone(), 1, LEFT_IN).unwrap_err();
    assert!(err.to_string().contains("no key to join by"), "{err}");
    let err = h.process_at(keyless, 2, RIGHT_IN).unwrap_err();
    assert!(
        err.to_string().contains("a table record needs a key"),
        "{err}"
    );
}

#[test]
fn two_tables_emit_on_every_change_and_retract_a_row_that_is_gone() {
    let a = |n: i64| json!({"n": n});
    let joined = |l: Value, r: Value| json!({"accounts": l, "limits": r});
    // inner: a row exists while both sides do.
    let mut h = join(json!({"how": "inner"}), TABLES);
    assert!(feed(&mut h, LEFT_IN, "k", a(1), 1).is_empty());
    assert_eq!(
        feed(&mut h, RIGHT_IN, "k", a(10), 2),
        vec![kv("k", joined(a(1), a(10)))]
    );
    assert_eq!(
        feed(&mut h, LEFT_IN, "k", a(2), 3),
        vec![kv("k", joined(a(2), a(10)))]
    );
    assert_eq!(
        feed(&mut h, RIGHT_IN, "k", Value::Null, 4),
        vec![kv("k", Value::Null)]
    );
    // Deleting the other side too retracts nothing more.
    assert!(feed(&mut h, LEFT_IN, "k", Value::Null, 5).is_empty());
    assert!(h.store::<TableRow>("left").get(b"k").unwrap().is_none());

    // left: a row exists while the left side does.
    let mut h = join(json!({"how": "left"}), TABLES);
    assert!(feed(&mut h, RIGHT_IN, "k", a(10), 1).is_empty());
    assert_eq!(
        feed(&mut h, LEFT_IN, "k", a(1), 2),
        vec![kv("k", joined(a(1), a(10)))]
    );
    assert_eq!(
        feed(&mut h, RIGHT_IN, "k", Value::Null, 3),
        vec![kv("k", joined(a(1), Value::Null))]
    );
    assert_eq!(
        feed(&mut h, LEFT_IN, "k", Value::Null, 4),
        vec![kv("k", Value::Null)]
    );

    // outer: a row exists while either side does.
    let mut h = join(json!({"how": "outer"}), TABLES);
    assert_eq!(
        feed(&mut h, RIGHT_IN, "k", a(10), 1),
        vec![kv("k", joined(Value::Null, a(10)))]
    );
    let out = h.process_at(record("k", a(1), 2), 20, LEFT_IN).unwrap();
    assert_eq!(pairs(&out), vec![kv("k", joined(a(1), a(10)))]);
    assert_eq!(out[0].record.timestamp, 2, "the later of the two rows");
    assert_eq!(
        feed(&mut h, LEFT_IN, "k", Value::Null, 3),
        vec![kv("k", joined(Value::Null, a(10)))]
    );
    assert_eq!(
        feed(&mut h, RIGHT_IN, "k", Value::Null, 4),
        vec![kv("k", Value::Null)]
    );
    // A tombstone for a key neither side holds emits nothing.
    assert!(feed(&mut h, RIGHT_IN, "x", Value::Null, 5).is_empty());
}

fn streams(how: &str) -> Harness {
    join(json!({"how": how, "window": "10s", "grace": "2s"}), STREAMS)
}

#[test]
fn two_streams_join_records_of_a_key_within_the_window_in_either_order() {
    let mut h = streams("inner");
    assert!(feed(&mut h, LEFT_IN, "u", json!("c1"), 100_000).is_empty());
    // 10 s later, at the edge: joins; a different key does not.
    assert_eq!(
        feed(&mut h, RIGHT_IN, "u", json!("v1"), 110_000),
        vec![kv("u", json!({"clicks": "c1", "views": "v1"}))]
    );
    assert!(feed(&mut h, RIGHT_IN, "w", json!("v2"), 110_000).is_empty());
    // A left record earlier than a right one it falls near, and one too
    // far before anything.
    assert_eq!(
        feed(&mut h, LEFT_IN, "u", json!("c2"), 101_000),
        vec![kv("u", json!({"clicks": "c2", "views": "v1"}))]
    );
    assert!(feed(&mut h, LEFT_IN, "u", json!("c3"), 99_000).is_empty());
    // Two partners, in time order; the output time is the later record's.
    let out = h
        .process_at(record("u", json!("v3"), 105_000), 7, RIGHT_IN)
        .unwrap();
    assert_eq!(
        pairs(&out),
        vec![
            kv("u", json!({"clicks": "c3", "views": "v3"})),
            kv("u", json!({"clicks": "c1", "views": "v3"})),
            kv("u", json!({"clicks": "c2", "views": "v3"})),
        ]
    );
    assert_eq!(
        out.iter().map(|e| e.record.timestamp).collect::<Vec<_>>(),
        vec![105_000, 105_000, 105_000]
    );
}

#[test]
fn left_and_outer_joins_emit_a_lonely_record_once_its_window_has_closed() {
    let mut h = streams("left");
    feed(&mut h, LEFT_IN, "u", json!("alone"), 100_000);
    feed(&mut h, LEFT_IN, "u", json!("paired"), 100_500);
    feed(&mut h, RIGHT_IN, "u", json!("v"), 109_000);
    feed(&mut h, RIGHT_IN, "x", json!("right alone"), 100_000);
    // `alone` joined `v` too (9 s apart): nothing is lonely yet. A record
    // is kept until t + 2 * window + grace = t + 22 s.
    assert!(h.advance(Clock::Event, 122_000).unwrap().is_empty());
    let mut h = streams("left");
    feed(&mut h, LEFT_IN, "u", json!("alone"), 100_000);
    feed(&mut h, RIGHT_IN, "x", json!("right alone"), 100_000);
    assert!(
        h.advance(Clock::Event, 122_000).unwrap().is_empty(),
        "not early"
    );
    assert_eq!(
        pairs(&h.advance(Clock::Event, 122_001).unwrap()),
        vec![kv("u", json!({"clicks": "alone", "views": null}))],
        "a left join drops the lonely right record"
    );
    assert_eq!(h.count(NodeCounter::JoinUnmatched), 2);
    assert_eq!(h.count(NodeCounter::JoinExpired), 2);
    assert_eq!(h.count(NodeCounter::Dropped), 1);
    assert!(
        h.store::<Buffered>("left")
            .prefix(b"", 10)
            .unwrap()
            .is_empty()
    );
    assert!(
        h.store::<Buffered>("right")
            .prefix(b"", 10)
            .unwrap()
            .is_empty()
    );

    let mut h = streams("outer");
    feed(&mut h, LEFT_IN, "u", json!("c"), 100_000);
    feed(&mut h, RIGHT_IN, "x", json!("v"), 100_000);
    let mut out = pairs(&h.advance(Clock::Event, 122_001).unwrap());
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        out,
        vec![
            kv("u", json!({"clicks": "c", "views": null})),
            kv("x", json!({"clicks": null, "views": "v"})),
        ]
    );
}

#[test]
fn a_stream_record_past_its_window_and_grace_is_late() {
    let mut h = streams("inner");
    feed(&mut h, LEFT_IN, "u", json!("now"), 100_000);
    // 100 s - (10 s + 2 s) = 88 s: the last time still accepted.
    assert!(feed(&mut h, RIGHT_IN, "u", json!("on time"), 88_000).is_empty());
    assert_eq!(h.count(NodeCounter::JoinLate), 0);
    assert!(feed(&mut h, RIGHT_IN, "u", json!("late"), 87_999).is_empty());
    assert_eq!(h.count(NodeCounter::JoinLate), 1);
    assert_eq!(h.count(NodeCounter::Dropped), 1);

    let mut h = join(
        json!({"window": "10s", "grace": "2s", "on_late": "dead_letter"}),
        STREAMS,
    );
    feed(&mut h, LEFT_IN, "u", json!("now"), 100_000);
    let err = h
        .process_at(record("u", json!("late"), 80_000), 5, RIGHT_IN)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "late: the join window of this record (time 1970-01-01T00:01:20.000Z) closed 8s ago, with the grace period"
    );
}

#[test]
fn a_record_re_processed_after_an_abort_keeps_its_buffer_entry() {
    let mut h = streams("inner");
    let at = |h: &mut Harness, offset| {
        h.process_at(record("u", json!("c"), 100_000), offset, LEFT_IN)
            .unwrap()
    };
    at(&mut h, 5);
    h.restart();
    at(&mut h, 5);
    assert_eq!(
        h.store::<Buffered>("left").prefix(b"", 10).unwrap().len(),
        1
    );
    at(&mut h, 6);
    assert_eq!(
        h.store::<Buffered>("left").prefix(b"", 10).unwrap().len(),
        2
    );
}

fn issues(options: Value, inputs: &[(&str, bool)]) -> Vec<String> {
    let config = config(options);
    let inputs = node_inputs(inputs);
    let info = NodeInfo {
        name: "n",
        key_by: None,
        max_record_bytes: 1_000_000,
        inputs: &inputs,
    };
    let mut issues = Vec::new();
    config.validate(&info, &mut issues);
    issues
        .into_iter()
        .map(|i| format!("{}: {}", i.path.join("."), i.message))
        .collect()
}

#[test]
fn check_explains_every_misuse_of_the_join_options() {
    assert_eq!(
        issues(json!({}), &[("orders", false)]),
        [
            "input: a join has two inputs, the left and the right (`input: [orders, customers]`); found 1"
        ]
    );
    assert_eq!(
        issues(json!({}), &[("orders", false), ("orders", false)]),
        [
            "input: a join needs two different inputs; `orders` is both",
            ": a join of two streams (`orders`, `orders`) needs `window`: how far apart in event time two records may be to join (Kafka Streams' JoinWindows); to join a table, give its source `kind: table`",
        ]
    );
    assert_eq!(
        issues(json!({}), &[("customers", true), ("orders", false)]),
        [
            "input: `customers` is a table and `orders` a stream: put the stream first (`input: [orders, customers]`), it is what joins the table"
        ]
    );
    assert_eq!(
        issues(
            json!({"how": "outer", "window": "5m", "grace": "1s", "on_late": "drop"}),
            STREAM_TABLE
        ),
        [
            "how: a stream joins a table `inner` or `left`: a table update alone emits nothing, so there is no outer side (as in Kafka Streams)",
            "window: `window` applies to a join of two streams; with a table, records join its current value",
            "grace: `grace` applies to a join of two streams; with a table, records join its current value",
            "on_late: `on_late` applies to a join of two streams; with a table, records join its current value",
        ]
    );
    assert_eq!(
        issues(json!({"window": "0s"}), STREAMS),
        ["window: must be at least 1ms"]
    );
    assert_eq!(
        issues(
            json!({"value": ".orders +", "fields": {"bad name": "/orders/id", "x": "/other/id"}}),
            STREAM_TABLE
        )
        .len(),
        4,
        "the expression, both of value and fields, the name, the pointer"
    );
    assert_eq!(
        issues(json!({"fields": {"x": "/other/id"}}), STREAM_TABLE),
        [
            "fields.x: `/other/id` reads neither input: start it with an input's name, `/orders` or `/customers`"
        ]
    );
    assert!(issues(json!({"how": "outer"}), TABLES).is_empty());
    let key_by = JsonPointer::parse("/id").unwrap();
    let inputs = node_inputs(TABLES);
    let info = NodeInfo {
        name: "n",
        key_by: Some(&key_by),
        max_record_bytes: 1_000_000,
        inputs: &inputs,
    };
    let mut found = Vec::new();
    config(json!({})).validate(&info, &mut found);
    assert_eq!(
        found,
        [Issue::new(
            &["key_by"],
            "`key_by` re-keys the stream inputs of a join, and both inputs are tables: a table keeps its key"
        )]
    );
    assert!(issues(json!({"how": "outer", "window": "1m"}), STREAMS).is_empty());
}

#[test]
fn each_kind_of_join_declares_the_stores_it_keeps() {
    let inputs = node_inputs;
    let plain = config(json!({}));
    assert_eq!(plain.stores(&inputs(STREAM_TABLE)), ["table"]);
    assert_eq!(plain.queryable_store(&inputs(STREAM_TABLE)), Some("table"));
    assert_eq!(plain.stores(&inputs(TABLES)), ["left", "right"]);
    assert!(!plain.uses_timers());
    let windowed = config(json!({"window": "1m"}));
    assert_eq!(windowed.stores(&inputs(STREAMS)), ["left", "right"]);
    assert!(windowed.uses_timers());
}

/// Issues of a join whose right input is a global table (`global`), or
/// whose left is.
fn global_issues(options: Value, global_on_left: bool) -> Vec<String> {
    let config = config(options);
    let stream = NodeInput {
        name: "orders".into(),
        table: false,
        global: false,
    };
    let global = NodeInput {
        name: "customers".into(),
        table: true,
        global: true,
    };
    let inputs = if global_on_left {
        vec![global, stream]
    } else {
        vec![stream, global]
    };
    let info = NodeInfo {
        name: "n",
        key_by: None,
        max_record_bytes: 1_000_000,
        inputs: &inputs,
    };
    let mut issues = Vec::new();
    config.validate(&info, &mut issues);
    issues
        .into_iter()
        .map(|i| format!("{}: {}", i.path.join("."), i.message))
        .collect()
}

#[test]
fn check_explains_every_misuse_of_a_global_table_join() {
    assert!(global_issues(json!({"table_key": "/customer_id"}), false).is_empty());
    assert!(
        global_issues(
            json!({"table_key": ".customer.id | tostring", "how": "left"}),
            false
        )
        .is_empty()
    );
    assert_eq!(
        global_issues(json!({}), false),
        [
            ": a join with a global table needs `table_key`: where the stream record names its row (`/customer_id`, or a jq expression)"
        ]
    );
    assert_eq!(
        global_issues(json!({"table_key": ".customer |"}), false).len(),
        1,
        "the expression does not compile"
    );
    assert_eq!(
        global_issues(
            json!({"table_key": "/c", "how": "outer", "window": "1m"}),
            false
        ),
        [
            "how: a stream joins a global table `inner` or `left`: a table update alone emits nothing (as in Kafka Streams)",
            "window: `window` applies to a join of two streams; with a table, records join its current value",
        ]
    );
    assert_eq!(
        global_issues(json!({"table_key": "/c"}), true),
        [
            "input: a global table is joined by a stream, on the right: `input: [<stream>, <global table>]`; `customers` and `orders` are not that"
        ]
    );
    assert_eq!(
        issues(json!({"table_key": "/c"}), STREAM_TABLE),
        [
            "table_key: `table_key` applies to a join of a stream with a global table (`kind: global_table`); `customers` is not one"
        ]
    );
    // Keyed input is not needed: the key comes from the record.
    assert!(!config(json!({"table_key": "/c"})).keyed());
    assert!(config(json!({})).keyed());
}
