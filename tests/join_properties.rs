//! Joins over random inputs, run offline through the same driver as
//! `streamfold test`, against reference joins computed the slow way:
//!
//! - two streams: whatever the arrival order (out of order, never later
//!   than the grace period), the inner join is every pair of same-key
//!   records at most `window` apart (a nested loop over the input), the
//!   left join adds each left record that has no such pair, the outer join
//!   each right one too — every record exactly once;
//! - a stream with a table: each stream record joins the table as a map of
//!   the updates and tombstones before it.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use streamfold::config::types::HumanDuration;
use streamfold::testkit::{Driver, VIRTUAL_EPOCH};
use streamfold::topology::{self, Topology};

const WINDOW: i64 = 5_000;
const GRACE: i64 = 3_000;

fn topology() -> Arc<Topology> {
    let text = "
name: joins
kafka: { bootstrap_servers: 'unused:9092' }
processing: { punctuation_interval: 1s, idle_advance: 1m }
sources:
  clicks: { topic: clicks, timestamp: /t }
  views: { topic: views, timestamp: /t }
  orders: { topic: orders }
  customers: { topic: customers, kind: table }
nodes:
  inner: { type: join, input: [clicks, views], how: inner, window: 5s, grace: 3s }
  left: { type: join, input: [clicks, views], how: left, window: 5s, grace: 3s }
  outer: { type: join, input: [clicks, views], how: outer, window: 5s, grace: 3s }
  enriched: { type: join, input: [orders, customers], how: left }
sinks:
  inner_out: { topic: inner, input: inner }
  left_out: { topic: left, input: left }
  outer_out: { topic: outer, input: outer }
  enriched_out: { topic: enriched, input: enriched }
";
    Arc::new(topology::load_str("joins.yaml", text, &|_| None).expect("a valid topology"))
}

/// A stream record: (left side?, key, time, id).
type Event = (bool, String, i64, u64);

/// A joined pair as `(key, left id, right id)`, `None` for a missing side.
type Pair = (String, Option<u64>, Option<u64>);

fn reference(events: &[Event], how: &str) -> Vec<Pair> {
    let mut out = Vec::new();
    let (lefts, rights): (Vec<&Event>, Vec<&Event>) = events.iter().partition(|e| e.0);
    let near = |l: &Event, r: &Event| l.1 == r.1 && (l.2 - r.2).abs() <= WINDOW;
    for l in &lefts {
        for r in &rights {
            if near(l, r) {
                out.push((l.1.clone(), Some(l.3), Some(r.3)));
            }
        }
    }
    if how != "inner" {
        for l in &lefts {
            if !rights.iter().any(|r| near(l, r)) {
                out.push((l.1.clone(), Some(l.3), None));
            }
        }
    }
    if how == "outer" {
        for r in &rights {
            if !lefts.iter().any(|l| near(l, r)) {
                out.push((r.1.clone(), None, Some(r.3)));
            }
        }
    }
    out.sort();
    out
}

fn id(value: &Value) -> Option<u64> {
    value.get("id").and_then(Value::as_u64)
}

fn received(driver: &Driver, topic: &str) -> Result<Vec<Pair>, String> {
    let mut out = Vec::new();
    for record in driver.received(topic) {
        let value = record.value.as_ref().map_err(Clone::clone)?;
        let key = record.key.clone().ok_or("a key")?;
        out.push((key, id(&value["clicks"]), id(&value["views"])));
    }
    out.sort();
    Ok(out)
}

/// Stream records in arrival order, each at most `GRACE` behind the latest
/// time before it (so none is late); times often in whole seconds, so
/// window edges are hit exactly.
fn streams() -> impl Strategy<Value = Vec<Event>> {
    let ms = |max: i64| prop_oneof![(0..=max / 1_000).prop_map(|n| n * 1_000), 0..=max];
    prop::collection::vec((any::<bool>(), 0u8..3, ms(2_000), ms(GRACE)), 1..50).prop_map(|steps| {
        let mut base = 0;
        steps
            .into_iter()
            .enumerate()
            .map(|(n, (left, key, step, behind))| {
                base += step;
                (left, format!("k{key}"), (base - behind).max(0), n as u64)
            })
            .collect()
    })
}

/// Table updates (`Some(version)`, `None` a tombstone) and stream records,
/// interleaved: `(table?, key, version)`.
fn table_and_stream() -> impl Strategy<Value = Vec<(bool, u8, Option<u64>)>> {
    prop::collection::vec(
        (
            any::<bool>(),
            0u8..4,
            prop::option::weighted(0.8, 0u64..100),
        ),
        1..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn stream_joins_equal_a_nested_loop_over_the_input(events in streams()) {
        let mut driver = Driver::new(topology()).unwrap();
        for (left, key, t, n) in &events {
            let topic = if *left { "clicks" } else { "views" };
            driver
                .feed_json(topic, Some(key), &json!({"id": n, "t": VIRTUAL_EPOCH + t}))
                .unwrap();
        }
        // Idle for longer than `idle_advance` and every record's window.
        driver.advance(HumanDuration::from_secs(600)).unwrap();
        for how in ["inner", "left", "outer"] {
            let expected = reference(&events, how);
            prop_assert_eq!(received(&driver, how), Ok(expected), "{} join", how);
        }
        prop_assert!(driver.received("joins-dlq").is_empty());
    }

    #[test]
    fn a_stream_record_joins_the_table_as_of_its_arrival(steps in table_and_stream()) {
        let mut driver = Driver::new(topology()).unwrap();
        let mut table: BTreeMap<String, u64> = BTreeMap::new();
        let mut expected = Vec::new();
        for (n, (is_table, key, version)) in steps.iter().enumerate() {
            let key = format!("c{key}");
            if *is_table {
                let value = version.map_or(Value::Null, |v| json!({"version": v}));
                driver.feed_json("customers", Some(&key), &value).unwrap();
                match version {
                    Some(v) => table.insert(key, *v),
                    None => table.remove(&key),
                };
            } else {
                driver.feed_json("orders", Some(&key), &json!({"order": n})).unwrap();
                expected.push((key.clone(), n as u64, table.get(&key).copied()));
            }
        }
        let got: Vec<(String, u64, Option<u64>)> = driver
            .received("enriched")
            .iter()
            .map(|r| {
                let value = r.value.as_ref().unwrap();
                (
                    r.key.clone().unwrap(),
                    value["orders"]["order"].as_u64().unwrap(),
                    value["customers"]["version"].as_u64(),
                )
            })
            .collect();
        prop_assert_eq!(got, expected);
        prop_assert!(driver.received("joins-dlq").is_empty());
    }
}
