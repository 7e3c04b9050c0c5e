use serde_json::{Number, json};

use super::super::Clocks;
use super::super::merge::Sum;
use super::super::testing::{Harness, record, values};
use super::*;
use crate::state::StateValue;
use crate::telemetry::NodeStats;

fn acc_after(rule: MergeRule, values: &[Value]) -> Value {
    let mut acc = Acc::empty(rule);
    for v in values {
        acc.merge(Some(v), 2);
    }
    acc.to_value()
}

#[test]
fn merge_rules_compute_what_their_names_say() {
    let metrics = [
        json!({"likes": 1, "shares": 2}),
        json!({"comments": 1, "likes": 5}),
    ];
    assert_eq!(
        acc_after(MergeRule::KeyUnion, &metrics),
        json!(["comments", "likes", "shares"])
    );
    assert_eq!(
        acc_after(MergeRule::Set, &[json!("b"), json!(["a", "b"]), json!(3)]),
        json!([3, "a", "b"])
    );
    assert_eq!(
        acc_after(MergeRule::Sum, &[json!(2), json!(3), json!(-1)]),
        json!(4)
    );
    assert_eq!(
        acc_after(MergeRule::Sum, &[json!(2), json!(0.5)]),
        json!(2.5)
    );
    assert_eq!(
        acc_after(MergeRule::Min, &[json!(4), json!(2), json!(9)]),
        json!(2)
    );
    assert_eq!(
        acc_after(MergeRule::Max, &[json!(4), json!(12), json!(9)]),
        json!(12)
    );
    assert_eq!(
        acc_after(MergeRule::First, &[json!("x"), json!("y")]),
        json!("x")
    );
    assert_eq!(
        acc_after(MergeRule::Last, &[json!("x"), json!("y")]),
        json!("y")
    );
    assert_eq!(
        acc_after(MergeRule::Count, &[json!(1), json!(1), json!(1)]),
        json!(3)
    );
    assert_eq!(
        acc_after(MergeRule::List, &[json!(1), json!(2), json!(3)]),
        json!([2, 3])
    );
}

#[test]
fn integer_sums_stay_exact_and_overflow_to_float() {
    let big = Sum::Int(i64::MAX).add(&Number::from(1));
    assert!(matches!(big, Sum::Float(_)));
    assert_eq!(Sum::Int(1).add(&Number::from(2)), Sum::Int(3));
}

#[test]
fn wrong_types_are_the_record_s_fault() {
    let pointer = JsonPointer::parse("/delta").unwrap();
    let err = check(MergeRule::Sum, &pointer, &json!("ten")).unwrap_err();
    assert_eq!(
        err,
        "field /delta must be a number for rule `sum`, found a string"
    );
    assert!(check(MergeRule::KeyUnion, &pointer, &json!([1])).is_err());
    assert!(check(MergeRule::Set, &pointer, &json!([1])).is_ok());
}

/// A fold of every rule over `events`, as the operator stores it.
fn fold_of(events: &[Value]) -> (Fold, OpenFold) {
    let config: FoldConfig = serde_json::from_value(json!({
        "fields": {
            "tags": {"rule": "set", "from": "/tag"},
            "names": {"rule": "key_union", "from": "/metrics"},
            "total": {"rule": "sum", "from": "/n"},
            "low": {"rule": "min", "from": "/v"},
            "high": {"rule": "max", "from": "/v"},
            "first": {"rule": "first", "from": "/v"},
            "last": {"rule": "last", "from": "/v"},
            "seen": {"rule": "count"},
            "recent": {"rule": "list", "from": "/v", "max_len": 3},
        },
        "max_events": 1000,
    }))
    .unwrap();
    let fold = Fold {
        open: StateSet::new(
            Box::new(crate::state::memory::MemoryBackend::new(1)),
            vec!["n-open".into()],
        )
        .declare("n-open")
        .unwrap(),
        key_field: "account_id".into(),
        fields: config.fields.clone().into_iter().collect(),
        quiet_for: None,
        max_wait: None,
        max_events: None,
        max_bytes: u64::MAX,
        names_bytes: names_bytes("account_id", config.fields.keys()),
        clock: Clock::Processing,
        timed: false,
        reads: Vec::new(),
    };
    let mut open = OpenFold {
        opened: i64::MIN,
        touched: i64::MAX,
        first_ts: i64::MIN,
        last_ts: i64::MAX,
        count: u64::MAX,
        timer: Some(i64::MIN),
        acc: fold
            .fields
            .iter()
            .map(|(_, r)| Acc::empty(r.rule))
            .collect(),
        bytes: Some(0),
    };
    for event in events {
        let mut bytes = open.bytes.unwrap() as i64;
        for ((_, rule), acc) in fold.fields.iter().zip(&mut open.acc) {
            let found = rule.from.as_ref().and_then(|p| p.get(event));
            let value = contribution(rule, found);
            let growth = acc.growth(value);
            assert!(
                growth <= growth_bound(rule.rule, value),
                "{rule:?} {value:?}"
            );
            let delta = acc.merge(value, rule.max_len.map_or(usize::MAX, NonZeroUsize::get));
            assert!(
                delta <= growth as i64,
                "{rule:?} {value:?}: {delta} > {growth}"
            );
            bytes += delta;
        }
        open.bytes = Some(bytes as u64);
    }
    (fold, open)
}

/// The tracked size plus the allowance is never less than the folded
/// event or the stored fold, whatever the values (escapes, floats,
/// extreme times and counts included).
#[test]
fn the_size_estimate_bounds_the_folded_event_and_the_stored_fold() {
    let events: Vec<Value> = (0..40)
            .map(|i| {
                json!({
                    "tag": if i % 3 == 0 { json!([format!("t\"\n{i}"), i, {"a": [i]}]) } else { json!(format!("é{i}")) },
                    "metrics": {format!("m\u{1}{}", i % 7): i, "likes": i},
                    "n": if i % 2 == 0 { json!(-1.2345678901234567e-300) } else { json!(i64::MIN / 2) },
                    "v": if i % 5 == 0 { json!({"deep": ["x", "y", "z"]}) } else { json!(i * 1000) },
                })
            })
            .collect();
    for n in [0, 1, 2, 7, 40] {
        let (fold, open) = fold_of(&events[..n]);
        let key = b"key \"quoted\" \x01";
        let estimate = fold.fixed_bytes(key) + open.bytes.unwrap();
        assert_eq!(
            open.bytes.unwrap(),
            content_bytes(&open.acc),
            "tracked = measured"
        );
        let stored = open.encode().unwrap().len() as u64;
        assert!(stored <= estimate, "stored {stored} > {estimate}");
        let mut ctx_out = Vec::new();
        let mut state = StateSet::new(
            Box::new(crate::state::memory::MemoryBackend::new(1)),
            vec!["n-open".into()],
        );
        let mut stats = NodeStats::default();
        let mut ctx = Context {
            state: &mut state,
            timers: None,
            out: &mut ctx_out,
            stats: &mut stats,
            clocks: Clocks::default(),
            input: 0,
            origin: None,
        };
        fold.close(key, open, ClosedBy::MaxEvents, i64::MAX, &mut ctx);
        let emitted = crate::record::json::encode(&ctx_out[0].record.value).len() as u64;
        assert!(emitted <= estimate, "emitted {emitted} > {estimate}");
    }
}

/// A set stays sorted and without repeats whether values arrive in
/// order (appended) or not (inserted).
#[test]
fn a_set_stays_sorted_whatever_order_values_arrive_in() {
    let ascending: Vec<Value> = (0..20).map(|i| json!(format!("id{i:02}"))).collect();
    let mut mixed = ascending.clone();
    mixed.reverse();
    mixed.extend(ascending.iter().step_by(3).cloned());
    mixed.push(json!(5));
    let mut expected = vec![json!(5)];
    expected.extend(ascending.iter().cloned());
    assert_eq!(
        acc_after(MergeRule::Set, &mixed),
        Value::Array(expected.clone())
    );
    assert_eq!(
        acc_after(
            MergeRule::Set,
            &[expected.clone(), expected.clone()].concat()
        ),
        Value::Array(expected)
    );
}

/// A fold whose deadline passed but whose timer has not fired yet
/// (timers fire in bounded rounds) closes before it takes the next
/// event of its key: the gap is longer than `quiet_for`, so the event
/// opens a new fold rather than extending the old one.
#[test]
fn an_overdue_fold_closes_before_it_takes_another_event() {
    let mut h = Harness::new(
        json!({
            "type": "fold",
            "fields": {"n": {"rule": "count"}},
            "quiet_for": "1m",
            "clock": "event",
        }),
        None,
    );
    assert!(h.process(record("k", json!({}), 0)).unwrap().is_empty());
    let first = values(&h.process(record("k", json!({}), 120_000)).unwrap());
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["n"], json!(1));
    assert_eq!(first[0]["closed_by"], json!("quiet"));
    let second = values(&h.advance(Clock::Event, 300_000).unwrap());
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0]["n"], json!(1));
    assert_eq!(
        second[0]["last_event_at"],
        json!("1970-01-01T00:02:00.000Z")
    );
}

fn capped(max_bytes: u64) -> Harness {
    Harness::new(
        json!({
            "type": "fold",
            "fields": {"tags": {"rule": "set", "from": "/tag"}, "n": {"rule": "count"}},
            "quiet_for": "1m",
            "max_bytes": max_bytes,
        }),
        None,
    )
}

fn tag(i: u64) -> Value {
    json!({"tag": format!("{i:04}-{}", "x".repeat(95))})
}

/// A hot key's `set` would outgrow the cap; the
/// fold closes before the event that would pass it, that event opens
/// the next fold, and no emitted event is larger than the cap.
#[test]
fn a_fold_closes_before_an_event_would_take_it_past_max_bytes() {
    let mut h = capped(4096);
    let mut folds = Vec::new();
    for i in 0..200 {
        folds.extend(values(&h.process(record("hot", tag(i), 0)).unwrap()));
    }
    folds.extend(values(&h.advance(Clock::Processing, 120_000).unwrap()));
    assert!(folds.len() > 2, "{} folds", folds.len());
    let mut seen = Vec::new();
    for (i, fold) in folds.iter().enumerate() {
        let size = crate::record::json::encode(fold).len();
        assert!(size <= 4096, "fold {i}: {size} bytes");
        let last = i + 1 == folds.len();
        assert_eq!(
            fold["closed_by"],
            json!(if last { "quiet" } else { "max_bytes" })
        );
        // A closed fold is full: the next tag would not have fitted.
        if !last {
            assert!(
                size + 100 > 4096 - 600,
                "fold {i} closed early at {size} bytes"
            );
        }
        seen.extend(fold["tags"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(
        seen,
        (0..200).map(|i| tag(i)["tag"].clone()).collect::<Vec<_>>()
    );
    assert_eq!(
        h.count(NodeCounter::FoldClosedMaxBytes),
        folds.len() as u64 - 1
    );
    assert_eq!(h.count(NodeCounter::FoldEligible), 200);
    assert_eq!(h.count(NodeCounter::FoldFolded), 200 - folds.len() as u64);
}

#[test]
fn values_already_in_a_full_fold_do_not_close_it() {
    let mut h = capped(4096);
    let mut i = 0;
    // Fill the fold up to its last tag.
    loop {
        let out = h.process(record("hot", tag(i), 0)).unwrap();
        if !out.is_empty() {
            break;
        }
        i += 1;
    }
    // The fold that closed held tags 0..i; tag i opened the next one.
    for _ in 0..100 {
        assert!(h.process(record("hot", tag(i), 0)).unwrap().is_empty());
    }
}

#[test]
fn an_event_too_large_for_any_fold_is_the_record_s_fault_and_changes_nothing() {
    let mut h = capped(2048);
    assert!(
        h.process(record("k", json!({"tag": "small"}), 0))
            .unwrap()
            .is_empty()
    );
    let error = h
        .process(record("k", json!({"tag": "x".repeat(3000)}), 0))
        .unwrap_err();
    assert!(matches!(error, OpError::Record(_)));
    assert!(
        error
            .to_string()
            .contains("over the fold's `max_bytes` (2048)"),
        "{error}"
    );
    assert_eq!(h.count(NodeCounter::FoldEligible), 1);
    let out = values(&h.advance(Clock::Processing, 120_000).unwrap());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["tags"], json!(["small"]));
}

#[test]
fn the_default_cap_is_nine_tenths_of_the_producer_s_limit_and_check_refuses_more() {
    let config: FoldConfig =
        serde_json::from_value(json!({"fields": {"n": {"rule": "count"}}, "max_events": 5}))
            .unwrap();
    let node = |limit| NodeInfo {
        name: "n",
        key_by: None,
        max_record_bytes: limit,
        inputs: &[],
    };
    assert_eq!(config.max_bytes(&node(1_000_000)), 900_000);
    assert_eq!(config.max_bytes(&node(65_536)), 58_977);
    let too_big: FoldConfig = serde_json::from_value(
        json!({"fields": {"n": {"rule": "count"}}, "max_events": 5, "max_bytes": 70_000}),
    )
    .unwrap();
    let mut issues = Vec::new();
    too_big.validate(&node(65_536), &mut issues);
    assert_eq!(issues.len(), 1);
    assert!(
        issues[0]
            .message
            .contains("larger than the producer's `message.max.bytes` (65536)")
    );
    let mut issues = Vec::new();
    too_big.validate(&node(1_000_000), &mut issues);
    assert!(issues.is_empty(), "{issues:?}");
}

/// Folds stored before `bytes` existed get their size measured once.
#[test]
fn a_fold_stored_without_its_size_is_measured_when_next_touched() {
    let mut h = capped(4096);
    for i in 0..10 {
        h.process(record("hot", tag(i), 0)).unwrap();
    }
    let mut legacy = h
        .store::<OpenFold>("open")
        .get(b"hot")
        .unwrap()
        .unwrap()
        .clone();
    let tracked = legacy.bytes.take().unwrap();
    assert_eq!(tracked, content_bytes(&legacy.acc));
    h.store::<OpenFold>("open").put(b"hot", legacy);
    h.process(record("hot", tag(10), 0)).unwrap();
    let fold = h
        .store::<OpenFold>("open")
        .get(b"hot")
        .unwrap()
        .unwrap()
        .clone();
    assert_eq!(fold.bytes, Some(content_bytes(&fold.acc)));
    assert_eq!(fold.count, 11);
}

/// A close is counted under the word its output's `closed_by` carries.
#[test]
fn a_close_is_counted_under_its_closed_by_word() {
    for closed_by in [
        ClosedBy::Quiet,
        ClosedBy::MaxWait,
        ClosedBy::MaxEvents,
        ClosedBy::MaxBytes,
    ] {
        assert_eq!(closed_by.counter().cause(), Some(closed_by.as_str()));
        assert_eq!(closed_by.counter().metric(), crate::telemetry::FOLD_CLOSED);
    }
}
