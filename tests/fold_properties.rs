//! Invariants of the fold operator, over random event streams.
//!
//! - `set`, `key_union`, `sum`, `min`, `max` and `count` give the same
//!   folded result whatever order the events arrive in;
//! - once every fold has closed, the `folded_count`s add up to the number
//!   of events: nothing lost, nothing counted twice, whatever closed the
//!   folds (quiet, max_wait, max_events) and however time moved;
//! - under `max_bytes`, no folded event is larger than the cap, every
//!   event is counted in exactly one fold and every value is in one, and
//!   only the last fold of a key closes otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use streamfold::config::types::HumanDuration;
use streamfold::testkit::Driver;
use streamfold::topology::{self, Topology};

const ORDER_FREE: &str = "
name: props
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    fields:
      tags: { rule: set, from: /tag }
      names: { rule: key_union, from: /metrics }
      total: { rule: sum, from: /n }
      low: { rule: min, from: /n }
      high: { rule: max, from: /n }
      events: { rule: count }
      with_n: { rule: count, from: /n }
    quiet_for: 10s
sinks:
  out: { topic: out, input: fold }
";

const SPLITTING: &str = "
name: props
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    fields:
      events: { rule: count }
    quiet_for: 5s
    max_wait: 12s
    max_events: 3
sinks:
  out: { topic: out, input: fold }
";

const CAPPED: &str = "
name: props
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    fields:
      tags: { rule: set, from: /tag }
      names: { rule: key_union, from: /metrics }
      last: { rule: last, from: /tag }
      events: { rule: count }
    quiet_for: 10s
    max_bytes: 2048
sinks:
  out: { topic: out, input: fold }
";

fn topology(text: &str) -> Arc<Topology> {
    Arc::new(
        topology::load_str("props.yaml", text, &|_| None).expect("the property topology is valid"),
    )
}

#[derive(Clone, Debug)]
struct Event {
    key: u8,
    tag: u8,
    metrics: Vec<u8>,
    n: Option<i64>,
}

impl Event {
    fn value(&self) -> Value {
        let metrics: serde_json::Map<String, Value> = self
            .metrics
            .iter()
            .map(|m| (format!("m{m}"), json!(1)))
            .collect();
        let mut value = json!({"tag": format!("t{}", self.tag), "metrics": metrics});
        if let Some(n) = self.n {
            value["n"] = json!(n);
        }
        value
    }
}

fn event() -> impl Strategy<Value = Event> {
    (
        0u8..4,
        0u8..6,
        prop::collection::vec(0u8..8, 0..4),
        prop::option::of(-1000i64..1000),
    )
        .prop_map(|(key, tag, metrics, n)| Event {
            key,
            tag,
            metrics,
            n,
        })
}

/// Feeds `events` at one instant, lets every key go quiet, and returns
/// each key's folded value.
fn fold_all(topology: &Arc<Topology>, events: &[Event]) -> BTreeMap<String, Value> {
    let mut driver = Driver::new(Arc::clone(topology)).unwrap();
    for e in events {
        driver
            .feed_json("events", Some(&format!("k{}", e.key)), &e.value())
            .unwrap();
    }
    driver.advance(HumanDuration::from_secs(60)).unwrap();
    driver
        .received("out")
        .iter()
        .map(|r| (r.key.clone().unwrap(), r.value.clone().unwrap()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn order_free_rules_do_not_depend_on_arrival_order(
        (events, shuffled) in prop::collection::vec(event(), 1..60)
            .prop_flat_map(|events| (Just(events.clone()), Just(events).prop_shuffle()))
    ) {
        let topology = topology(ORDER_FREE);
        let in_order = fold_all(&topology, &events);
        let reordered = fold_all(&topology, &shuffled);
        prop_assert_eq!(&in_order, &reordered);
        // One fold per key, holding every event of that key, with the
        // values a direct computation gives.
        let mut per_key: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
        for e in &events {
            per_key.entry(format!("k{}", e.key)).or_default().push(e);
        }
        for (key, group) in per_key {
            let folded = &in_order[&key];
            let ns: Vec<i64> = group.iter().filter_map(|e| e.n).collect();
            prop_assert_eq!(&folded["folded_count"], &json!(group.len()));
            prop_assert_eq!(&folded["events"], &json!(group.len()));
            prop_assert_eq!(&folded["with_n"], &json!(ns.len()));
            prop_assert_eq!(&folded["total"], &json!(ns.iter().sum::<i64>()));
            prop_assert_eq!(&folded["low"], &ns.iter().min().map_or(Value::Null, |n| json!(n)));
            prop_assert_eq!(&folded["high"], &ns.iter().max().map_or(Value::Null, |n| json!(n)));
            let mut tags: Vec<String> = group.iter().map(|e| format!("t{}", e.tag)).collect();
            tags.sort();
            tags.dedup();
            prop_assert_eq!(&folded["tags"], &json!(tags));
            let mut names: Vec<String> = group.iter().flat_map(|e| e.metrics.iter().map(|m| format!("m{m}"))).collect();
            names.sort();
            names.dedup();
            prop_assert_eq!(&folded["names"], &json!(names));
        }
    }

    #[test]
    fn folded_counts_add_up_to_the_events_once_every_fold_closed(
        steps in prop::collection::vec((0u8..5, 0u64..7_000), 1..120)
    ) {
        let mut driver = Driver::new(topology(SPLITTING)).unwrap();
        let mut sent: BTreeMap<String, u64> = BTreeMap::new();
        for (key, pause_ms) in &steps {
            let key = format!("k{key}");
            driver.feed_json("events", Some(&key), &json!({"x": 1})).unwrap();
            *sent.entry(key).or_default() += 1;
            driver.advance(HumanDuration::from_millis(*pause_ms)).unwrap();
        }
        driver.advance(HumanDuration::from_secs(3600)).unwrap();
        let mut folded: BTreeMap<String, u64> = BTreeMap::new();
        for record in driver.received("out") {
            let value = record.value.clone().unwrap();
            let count = value["folded_count"].as_u64().unwrap();
            prop_assert!((1..=3).contains(&count), "max_events caps a fold at 3: {value}");
            prop_assert_eq!(&value["events"], &json!(count));
            *folded.entry(record.key.clone().unwrap()).or_default() += count;
        }
        prop_assert_eq!(folded, sent);
        // Every fold closed, so none is left open.
        let stats = driver.stats();
        prop_assert_eq!(stats[0].1.gauge(streamfold::telemetry::NodeGauge::FoldsOpen), 0);
    }

    #[test]
    fn capped_folds_stay_under_max_bytes_and_lose_nothing(
        events in prop::collection::vec((0u8..3, 0u16..400, 1usize..120, prop::collection::vec(0u8..40, 0..4)), 1..150)
    ) {
        let mut driver = Driver::new(topology(CAPPED)).unwrap();
        let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, tag, len, metrics) in &events {
            let key = format!("k{key}");
            let tag = format!("{tag:03}{}", "x".repeat(*len));
            let metrics: serde_json::Map<String, Value> =
                metrics.iter().map(|m| (format!("metric_{m}"), json!(1))).collect();
            driver
                .feed_json("events", Some(&key), &json!({"tag": tag, "metrics": metrics}))
                .unwrap();
            sent.entry(key).or_default().push(tag);
        }
        driver.advance(HumanDuration::from_secs(60)).unwrap();
        let mut folds: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for record in driver.received("out") {
            let value = record.value.clone().unwrap();
            let size = serde_json::to_vec(&value).unwrap().len();
            prop_assert!(size <= 2048, "{size} bytes: {value}");
            folds.entry(record.key.clone().unwrap()).or_default().push(value);
        }
        for (key, tags) in &sent {
            let key_folds = &folds[key];
            let counted: u64 = key_folds.iter().map(|f| f["events"].as_u64().unwrap()).sum();
            prop_assert_eq!(counted, tags.len() as u64);
            // Every distinct tag is in a fold; a tag repeated after its
            // fold closed may be in another one too, never twice in one.
            let mut distinct = tags.clone();
            distinct.sort();
            distinct.dedup();
            let mut folded: Vec<String> = key_folds
                .iter()
                .flat_map(|f| f["tags"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()))
                .collect();
            folded.sort();
            folded.dedup();
            prop_assert_eq!(folded, distinct);
            for (i, fold) in key_folds.iter().enumerate() {
                let last = i + 1 == key_folds.len();
                prop_assert_eq!(&fold["closed_by"], &json!(if last { "quiet" } else { "max_bytes" }));
            }
        }
    }
}
