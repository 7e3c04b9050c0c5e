use serde_json::{Value, json};

use super::super::testing::{Harness, record};
use super::super::{Emit, OpError};
use super::*;
use crate::state::timers::Clock;

fn window(options: Value) -> Harness {
    let mut node = json!({"type": "window", "fields": {"n": {"rule": "count"}}});
    for (k, v) in options.as_object().unwrap() {
        node[k] = v.clone();
    }
    Harness::new(node, None)
}

/// `(key, start, end, n)` of what was emitted; tombstones as `n = -1`.
fn windows(out: &[Emit]) -> Vec<(String, i64, i64, i64)> {
    out.iter()
        .map(|e| {
            let key = String::from_utf8_lossy(e.record.key.as_deref().unwrap()).into_owned();
            let (name, span) = key.split_once('@').unwrap();
            let (start, end) = span.split_once('/').unwrap();
            let ms = |t: &str| crate::record::json::parse_timestamp(&json!(t)).unwrap();
            let n = e.record.value["n"].as_i64().unwrap_or(-1);
            if !e.record.value.is_null() {
                assert_eq!(e.record.value["window_start"], json!(start));
                assert_eq!(e.record.value["window_end"], json!(end));
                assert_eq!(e.record.value["key"], json!(name));
            }
            (name.to_string(), ms(start), ms(end), n)
        })
        .collect()
}

fn feed(h: &mut Harness, key: &str, at: i64) -> Vec<(String, i64, i64, i64)> {
    windows(&h.process(record(key, json!({"v": at}), at)).unwrap())
}

fn close_all(h: &mut Harness, now: i64) -> Vec<(String, i64, i64, i64)> {
    windows(&h.advance(Clock::Event, now).unwrap())
}

fn w(key: &str, start: i64, end: i64, n: i64) -> (String, i64, i64, i64) {
    (key.to_string(), start, end, n)
}

#[test]
fn tumbling_windows_emit_their_final_count_once_when_they_close() {
    let mut h = window(json!({"window": "tumbling", "size": "10ms", "grace": "5ms"}));
    assert!(feed(&mut h, "a", 1).is_empty());
    assert!(feed(&mut h, "a", 9).is_empty());
    assert!(feed(&mut h, "b", 10).is_empty());
    // Stream time 14: [0,10) closes at 10 + 5 = 15; a record at 3 still fits.
    assert!(feed(&mut h, "a", 14).is_empty());
    assert!(feed(&mut h, "a", 3).is_empty());
    let out = close_all(&mut h, 15);
    assert_eq!(out, vec![w("a", 0, 10, 3)]);
    let out = close_all(&mut h, 100);
    let mut out = out;
    out.sort();
    assert_eq!(out, vec![w("a", 10, 20, 1), w("b", 10, 20, 1)]);
    assert_eq!(h.count(NodeCounter::WindowClosed), 3);
    assert_eq!(h.count(NodeCounter::WindowExpired), 3);
    // Closed windows are gone: the state is bounded.
    assert_eq!(h.store::<run::StoredWindow>("windows").count().unwrap(), 0);
}

#[test]
fn a_record_past_the_grace_period_is_late_counted_and_dropped_or_dead_lettered() {
    let mut h = window(json!({"window": "tumbling", "size": "10ms", "grace": "5ms"}));
    feed(&mut h, "a", 20);
    // [0,10) closed at 15 <= 20.
    assert!(feed(&mut h, "a", 9).is_empty());
    assert_eq!(h.count(NodeCounter::WindowLate), 1);
    assert_eq!(h.count(NodeCounter::Dropped), 1);

    let mut h = window(json!({
        "window": "tumbling", "size": "10ms", "grace": "5ms", "on_late": "dead_letter"
    }));
    feed(&mut h, "a", 20);
    let error = h.process(record("a", json!({}), 9)).unwrap_err();
    assert!(matches!(error, OpError::Record(_)));
    assert_eq!(
        error.to_string(),
        "late record for key `a`: its time 1970-01-01T00:00:00.009Z is 11ms behind stream time 1970-01-01T00:00:00.020Z, and its window closed at 1970-01-01T00:00:00.015Z (grace 5ms)"
    );
    assert_eq!(h.count(NodeCounter::WindowLate), 1);
    assert_eq!(h.count(NodeCounter::Dropped), 0);
    let out = close_all(&mut h, 100);
    assert_eq!(out, vec![w("a", 20, 30, 1)]);
}

#[test]
fn a_hopping_record_counts_in_every_window_it_falls_in() {
    let mut h = window(json!({"window": "hopping", "size": "10ms", "advance": "5ms"}));
    feed(&mut h, "a", 7);
    feed(&mut h, "a", 12);
    let out = close_all(&mut h, 100);
    assert_eq!(
        out,
        vec![w("a", 0, 10, 1), w("a", 5, 15, 2), w("a", 10, 20, 1)]
    );
}

#[test]
fn on_update_emits_each_change_and_keeps_windows_until_retention() {
    let mut h = window(json!({
        "window": "tumbling", "size": "10ms", "emit": "on_update", "retention": "1s"
    }));
    assert_eq!(feed(&mut h, "a", 1), vec![w("a", 0, 10, 1)]);
    assert_eq!(feed(&mut h, "a", 2), vec![w("a", 0, 10, 2)]);
    assert!(close_all(&mut h, 999).is_empty());
    assert_eq!(h.store::<run::StoredWindow>("windows").count().unwrap(), 1);
    assert!(close_all(&mut h, 1000).is_empty());
    assert_eq!(h.store::<run::StoredWindow>("windows").count().unwrap(), 0);
    assert_eq!(h.count(NodeCounter::WindowExpired), 1);
}

#[test]
fn a_record_filling_the_gap_merges_two_sessions() {
    let mut h = window(json!({"window": "session", "gap": "10ms", "grace": "100ms"}));
    feed(&mut h, "a", 0);
    feed(&mut h, "a", 5);
    feed(&mut h, "a", 30);
    assert_eq!(h.store::<run::StoredWindow>("windows").count().unwrap(), 2);
    // 18 is within 10 of 5? No: 13 away. It opens a third session,
    // which 24 then bridges to the one at 30 and 15 to the first.
    feed(&mut h, "a", 18);
    feed(&mut h, "a", 24);
    assert_eq!(h.count(NodeCounter::WindowSessionMerges), 1);
    feed(&mut h, "a", 14);
    assert_eq!(h.count(NodeCounter::WindowSessionMerges), 2);
    feed(&mut h, "b", 14);
    let mut out = close_all(&mut h, 1000);
    out.sort();
    assert_eq!(out, vec![w("a", 0, 30, 6), w("b", 14, 14, 1)]);
    assert_eq!(h.store::<run::StoredWindow>("windows").count().unwrap(), 0);
}

#[test]
fn a_session_that_grows_or_merges_is_retracted_under_its_old_key_on_update() {
    let mut h = window(json!({
        "window": "session", "gap": "10ms", "grace": "100ms", "emit": "on_update"
    }));
    assert_eq!(feed(&mut h, "a", 0), vec![w("a", 0, 0, 1)]);
    assert_eq!(feed(&mut h, "a", 20), vec![w("a", 20, 20, 1)]);
    assert_eq!(
        feed(&mut h, "a", 10),
        vec![w("a", 0, 0, -1), w("a", 20, 20, -1), w("a", 0, 20, 3)]
    );
    // A record inside the session changes its value, not its key.
    assert_eq!(feed(&mut h, "a", 15), vec![w("a", 0, 20, 4)]);
}

#[test]
fn a_closed_session_is_final_and_a_later_record_starts_a_new_one() {
    let mut h = window(json!({"window": "session", "gap": "10ms"}));
    feed(&mut h, "a", 0);
    // The session [0,0] closes when stream time passes 0 + 10.
    assert_eq!(close_all(&mut h, 11), vec![w("a", 0, 0, 1)]);
    // A record at 0 would have joined it: it is late.
    assert!(feed(&mut h, "a", 0).is_empty());
    assert_eq!(h.count(NodeCounter::WindowLate), 1);
    feed(&mut h, "a", 12);
    assert_eq!(close_all(&mut h, 100), vec![w("a", 12, 12, 1)]);
}

/// Kafka Streams' example of sliding windows: records at 10 and 15 with a
/// time difference of 10 make the windows [0,10], [5,15] and [11,21]
/// (here 100 later).
#[test]
fn sliding_windows_are_the_distinct_record_sets_within_the_time_difference() {
    let mut h = window(json!({"window": "sliding", "size": "10ms"}));
    feed(&mut h, "a", 110);
    feed(&mut h, "a", 115);
    let out = close_all(&mut h, 1000);
    assert_eq!(
        out,
        vec![
            w("a", 100, 110, 1),
            w("a", 105, 115, 2),
            w("a", 111, 121, 1)
        ]
    );
    assert_eq!(h.count(NodeCounter::WindowClosed), 3);
    assert_eq!(h.store::<run::StoredWindow>("buckets").count().unwrap(), 0);

    let mut h = window(json!({
        "window": "sliding", "size": "10ms", "grace": "100ms", "emit": "on_update"
    }));
    assert_eq!(feed(&mut h, "a", 110), vec![w("a", 100, 110, 1)]);
    assert_eq!(
        feed(&mut h, "a", 115),
        vec![w("a", 105, 115, 2), w("a", 111, 121, 1)]
    );
    // An earlier record: its own window, the one it opens after it, and
    // the ones it falls in.
    assert_eq!(
        feed(&mut h, "a", 108),
        vec![
            w("a", 98, 108, 1),
            w("a", 100, 110, 2),
            w("a", 105, 115, 3),
            w("a", 109, 119, 2)
        ]
    );
}

#[test]
fn merge_rules_work_per_window_and_across_merged_sessions() {
    let mut h = Harness::new(
        json!({
            "type": "window", "window": "session", "gap": "10ms", "grace": "100ms",
            "fields": {
                "n": {"rule": "count"},
                "users": {"rule": "set", "from": "/u"},
                "total": {"rule": "sum", "from": "/x"},
                "low": {"rule": "min", "from": "/x"},
                "high": {"rule": "max", "from": "/x"},
                "first": {"rule": "first", "from": "/u"},
                "last": {"rule": "last", "from": "/u"},
                "names": {"rule": "key_union", "from": "/m"},
                "recent": {"rule": "list", "from": "/x", "max_len": 2},
            },
        }),
        None,
    );
    h.process(record("a", json!({"u": "x", "x": 5, "m": {"p": 1}}), 0))
        .unwrap();
    h.process(record("a", json!({"u": "y", "x": 1.5, "m": {"q": 1}}), 20))
        .unwrap();
    h.process(record("a", json!({"u": "x", "x": 7}), 10))
        .unwrap();
    let out = h.advance(Clock::Event, 1000).unwrap();
    assert_eq!(out.len(), 1);
    let value = &out[0].record.value;
    assert_eq!(value["n"], json!(3));
    assert_eq!(value["users"], json!(["x", "y"]));
    assert_eq!(value["total"], json!(13.5));
    assert_eq!(value["low"], json!(1.5));
    assert_eq!(value["high"], json!(7));
    assert_eq!(value["first"], json!("x"));
    assert_eq!(value["last"], json!("x"));
    assert_eq!(value["names"], json!(["p", "q"]));
    assert_eq!(value["recent"], json!([1.5, 7]));
    assert_eq!(out[0].record.timestamp, 20);
}

#[test]
fn a_record_of_the_wrong_type_changes_nothing() {
    let mut h = Harness::new(
        json!({"type": "window", "window": "tumbling", "size": "10ms",
               "fields": {"total": {"rule": "sum", "from": "/x"}}}),
        None,
    );
    let error = h.process(record("a", json!({"x": "ten"}), 1)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "field /x must be a number for rule `sum`, found a string"
    );
    assert!(h.advance(Clock::Event, 100).unwrap().is_empty());
}

fn issues(options: Value) -> Vec<String> {
    let mut node = json!({"type": "window", "fields": {"n": {"rule": "count"}}});
    for (k, v) in options.as_object().unwrap() {
        node[k] = v.clone();
    }
    let kind: crate::operators::NodeKind = serde_json::from_value(node).unwrap();
    let info = NodeInfo {
        name: "n",
        key_by: None,
        max_record_bytes: 1_000_000,
        inputs: &[],
    };
    let mut issues = Vec::new();
    kind.spec().validate(&info, &mut issues);
    issues
        .into_iter()
        .map(|i| format!("{}: {}", i.path.join("."), i.message))
        .collect()
}

#[test]
fn check_explains_every_misuse_of_the_window_options() {
    assert_eq!(
        issues(json!({"window": "hopping", "size": "1m", "advance": "2m"})),
        vec![
            "advance: `advance` (2m) is longer than `size` (1m): records between windows would belong to none"
        ]
    );
    assert_eq!(
        issues(json!({"window": "session"})),
        vec!["window: a `session` window needs `gap`"]
    );
    assert_eq!(
        issues(json!({"window": "session", "gap": "1m", "size": "5m"})),
        vec![
            "size: a session window has no `size`: its length follows its records (`gap` sets the inactivity gap)"
        ]
    );
    assert_eq!(
        issues(json!({"window": "tumbling", "size": "5m", "grace": "1m", "retention": "5m"})),
        vec![
            "retention: must be at least `size + grace`, or windows would be deleted while records may still change them"
        ]
    );
    assert_eq!(
        issues(json!({"window": "hopping", "size": "1d", "advance": "1s"})),
        vec![
            "advance: `size / advance` is over 1000: each record would update that many windows; advance by more"
        ]
    );
    assert_eq!(
        issues(json!({"window": "tumbling", "size": "0s", "gap": "1m"})),
        vec![
            "size: must be at least 1ms",
            "gap: `gap` applies to `session` windows, not `tumbling`"
        ]
    );
    assert!(issues(json!({"window": "sliding", "size": "5m", "grace": "1m"})).is_empty());
}
