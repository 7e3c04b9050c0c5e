//! Invariants of dedup, projection and rollup over random streams, run
//! offline through the same driver as `streamfold test`:
//!
//! - dedup never passes an id twice within its retention, and passes it
//!   again once the retention since its last pass is over (first wins);
//! - a projection's final read model does not depend on the order events
//!   arrive in, nor on duplicates: it is the fold of the distinct events in
//!   their order; and after long in-order runs with late events among
//!   them, every read model it emits is the fold of the events so far;
//! - a rollup counter's final value does not depend on when triggers fire
//!   (reads, coalescing, clock steps) nor on retried writes: it is the sum
//!   of the distinct writes after the last reset.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use streamfold::config::types::HumanDuration;
use streamfold::testkit::{Driver, VIRTUAL_EPOCH};
use streamfold::topology::{self, Topology};

fn topology(text: &str) -> Arc<Topology> {
    Arc::new(
        topology::load_str("props.yaml", text, &|_| None).expect("the property topology is valid"),
    )
}

fn advance(driver: &mut Driver, ms: u64) {
    driver.advance(HumanDuration::from_millis(ms)).unwrap();
}

// ---------------------------------------------------------------- dedup

const DEDUP: &str = "
name: props
kafka: { bootstrap_servers: 'unused:9092' }
processing: { punctuation_interval: 100ms }
sources:
  events: { topic: events }
nodes:
  dedup:
    type: dedup
    input: events
    id_field: /id
    retention: 10s
sinks:
  out: { topic: out, input: dedup }
";

const RETENTION: i64 = 10_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn dedup_never_passes_an_id_twice_within_retention(
        // Waits often in whole half-seconds, so the retention boundary
        // (exactly 10 s after a pass) is hit, not only stepped over.
        steps in prop::collection::vec(
            (0u8..6, prop_oneof![(0u64..8).prop_map(|n| n * 500), 0u64..4_000]),
            1..120,
        )
    ) {
        let mut driver = Driver::new(topology(DEDUP)).unwrap();
        let mut now = VIRTUAL_EPOCH;
        let mut expected = Vec::new();
        let mut last_pass: BTreeMap<u8, i64> = BTreeMap::new();
        for (seq, (id, wait)) in steps.iter().enumerate() {
            advance(&mut driver, *wait);
            now += *wait as i64;
            driver
                .feed_json("events", Some("k"), &json!({"id": format!("id-{id}"), "seq": seq}))
                .unwrap();
            // The model: an id passes when it never passed, or passed
            // `retention` or longer ago.
            if last_pass.get(id).is_none_or(|at| now - at >= RETENTION) {
                last_pass.insert(*id, now);
                expected.push(seq);
            }
        }
        let passed: Vec<usize> = driver
            .received("out")
            .iter()
            .map(|r| r.value.as_ref().unwrap()["seq"].as_u64().unwrap() as usize)
            .collect();
        prop_assert_eq!(passed, expected);
    }
}

// ----------------------------------------------------------- projection

const PROJECTION: &str = "
name: props
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  entity:
    type: projection
    input: events
    event_id: /id
    event_name: /type
    order_by: /seq
    rules:
      Created: '. + {created: true}'
      Renamed: '.name = $event.name'
      Added: '.n += $event.by'
      Doubled: '.n = ((.n // 0) * 2)'
      Deleted: 'null'
    snapshot_every: SNAPSHOT
sinks:
  out: { topic: out, input: entity }
";

#[derive(Clone, Debug)]
struct Event {
    entity: u8,
    id: u16,
    seq: i64,
    kind: u8,
    arg: i64,
}

impl Event {
    fn name(&self) -> &'static str {
        ["Created", "Renamed", "Added", "Doubled", "Deleted"][usize::from(self.kind)]
    }

    fn value(&self) -> Value {
        json!({
            "id": format!("e{:05}", self.id),
            "type": self.name(),
            "seq": self.seq,
            "name": format!("n{}", self.arg),
            "by": self.arg,
        })
    }
}

/// The read model of folding `events` (distinct, any order) in
/// (order, id) order, as the projection documents it.
fn model(key: &str, events: &[&Event]) -> Value {
    let mut sorted: Vec<&&Event> = events.iter().collect();
    sorted.sort_by_key(|e| (e.seq, format!("e{:05}", e.id)));
    let mut entity: Option<serde_json::Map<String, Value>> = None;
    for event in &sorted {
        let mut current = entity.take().unwrap_or_default();
        entity = match event.kind {
            0 => {
                current.insert("created".into(), json!(true));
                Some(current)
            }
            1 => {
                current.insert("name".into(), json!(format!("n{}", event.arg)));
                Some(current)
            }
            2 => {
                let n = current.get("n").and_then(Value::as_i64).unwrap_or(0);
                current.insert("n".into(), json!(n + event.arg));
                Some(current)
            }
            3 => {
                let n = current.get("n").and_then(Value::as_i64).unwrap_or(0);
                current.insert("n".into(), json!(n * 2));
                Some(current)
            }
            _ => None,
        };
    }
    let mut out = entity.unwrap_or_default();
    out.insert("id".into(), json!(key));
    out.insert("version".into(), json!(events.len()));
    Value::Object(out)
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((0u8..3, 0i64..12, 0u8..5, -3i64..4), 1..40).prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (entity, seq, kind, arg))| Event {
                entity,
                id: i as u16,
                seq,
                kind,
                arg,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn projection_result_does_not_depend_on_arrival_order(
        (events, order, duplicates) in events().prop_flat_map(|events| {
            let n = events.len();
            (
                Just(events),
                Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
                prop::collection::vec(0..n, 0..10),
            )
        }),
        snapshot_every in 1u64..4,
    ) {
        let text = PROJECTION.replace("SNAPSHOT", &snapshot_every.to_string());
        let mut driver = Driver::new(topology(&text)).unwrap();
        // The events shuffled, some delivered again at random places.
        let mut deliveries: Vec<usize> = order.clone();
        for (i, d) in duplicates.iter().enumerate() {
            let at = (i * 7 + d) % (deliveries.len() + 1);
            deliveries.insert(at, *d);
        }
        for i in deliveries {
            let event = &events[i];
            let key = format!("entity-{}", event.entity);
            driver.feed_json("events", Some(&key), &event.value()).unwrap();
        }
        let mut last: BTreeMap<String, Value> = BTreeMap::new();
        for record in driver.received("out") {
            last.insert(record.key.clone().unwrap(), record.value.clone().unwrap());
        }
        let entities: BTreeSet<u8> = events.iter().map(|e| e.entity).collect();
        prop_assert_eq!(last.len(), entities.len());
        for entity in entities {
            let key = format!("entity-{entity}");
            let mine: Vec<&Event> = events.iter().filter(|e| e.entity == entity).collect();
            prop_assert_eq!(&last[&key], &model(&key, &mine), "entity {}", key);
        }
    }
}

/// Long in-order histories of one entity with late events among them: the
/// in-order path folds into the stored entity, a late event re-folds from
/// the last snapshot before it (or from the start without snapshots).
fn long_history() -> impl Strategy<Value = Vec<Event>> {
    // (kind, arg, how many events late: 0 is in order).
    prop::collection::vec(
        (
            0u8..5,
            -3i64..4,
            prop_oneof![6 => Just(0i64), 1 => 1i64..40],
        ),
        1..160,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (kind, arg, late_by))| Event {
                entity: 0,
                id: i as u16,
                // Sequence numbers in steps of 2, so a late event can
                // also tie with an applied one (broken by id).
                seq: 2 * (i as i64 - late_by) + (late_by % 2),
                kind,
                arg,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_read_model_of_a_long_history_is_the_fold_of_the_events_so_far(
        events in long_history(),
        snapshot_every in prop_oneof![Just(None), (1u64..70).prop_map(Some)],
    ) {
        let text = match snapshot_every {
            Some(n) => PROJECTION.replace("SNAPSHOT", &n.to_string()),
            None => PROJECTION.replace("    snapshot_every: SNAPSHOT\n", ""),
        };
        let mut driver = Driver::new(topology(&text)).unwrap();
        for (i, event) in events.iter().enumerate() {
            driver.feed_json("events", Some("entity-0"), &event.value()).unwrap();
            let received = driver.received("out");
            prop_assert_eq!(received.len(), i + 1);
            let so_far: Vec<&Event> = events[..=i].iter().collect();
            prop_assert_eq!(
                received[i].value.as_ref().unwrap(),
                &model("entity-0", &so_far),
                "after event {} (seq {})", i, event.seq
            );
        }
    }
}

// --------------------------------------------------------------- rollup

const ROLLUP: &str = "
name: props
kafka: { bootstrap_servers: 'unused:9092' }
processing: { punctuation_interval: 100ms }
sources:
  writes: { topic: writes, timestamp: /at }
  reads: { topic: reads }
nodes:
  counter:
    type: rollup
    input: [writes, reads]
    token: /token
    delta: /delta
    reset_when: '.op == \"ClearCount\"'
    coalesce: COALESCE
    accept_limit: 2s
    batch_size: BATCH
sinks:
  out: { topic: out, input: counter }
";

#[derive(Clone, Debug)]
enum Step {
    /// A new write to counter `.0` of `.1`, or a reset.
    Write(u8, i64, bool),
    /// Deliver the `n`-th write so far again (a retry).
    Retry(usize),
    /// A read of a counter.
    Read(u8),
    /// Let time pass.
    Wait(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0u8..3, -5i64..20, prop::bool::weighted(0.08))
                .prop_map(|(c, d, reset)| Step::Write(c, d, reset)),
            2 => (0usize..1000).prop_map(Step::Retry),
            1 => (0u8..4).prop_map(Step::Read),
            3 => (0u64..6_000).prop_map(Step::Wait),
        ],
        1..80,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rollup_value_does_not_depend_on_trigger_timing_or_retries(
        steps in steps(),
        coalesce_ms in 100u64..8_000,
        batch in 1usize..4,
    ) {
        let text = ROLLUP
            .replace("COALESCE", &format!("{coalesce_ms}ms"))
            .replace("BATCH", &batch.to_string());
        let mut driver = Driver::new(topology(&text)).unwrap();
        let mut now = VIRTUAL_EPOCH;
        // Every distinct write: counter, time, token, delta, reset.
        let mut writes: Vec<(u8, i64, String, i64, bool)> = Vec::new();
        for step in &steps {
            match step {
                Step::Write(counter, delta, reset) => {
                    let token = format!("t{}", writes.len());
                    writes.push((*counter, now, token, *delta, *reset));
                }
                Step::Retry(n) if !writes.is_empty() => {
                    writes.push(writes[n % writes.len()].clone());
                }
                Step::Retry(_) => continue,
                Step::Read(counter) => {
                    let name = format!("c{counter}");
                    driver.feed_json("reads", Some(&name), &json!({"counter": name})).unwrap();
                    continue;
                }
                Step::Wait(ms) => {
                    advance(&mut driver, *ms);
                    now += *ms as i64;
                    continue;
                }
            }
            let (counter, at, token, delta, reset) = writes.last().unwrap().clone();
            let name = format!("c{counter}");
            let mut value = json!({"token": token, "delta": delta, "at": at});
            if reset {
                value["op"] = json!("ClearCount");
            }
            driver.feed_json("writes", Some(&name), &value).unwrap();
        }
        // Let every counter drain.
        advance(&mut driver, 60_000);

        // The model: distinct writes by (token, time), applied in
        // (time, resets first, token) order.
        let mut distinct: BTreeMap<(u8, i64, bool, String), i64> = BTreeMap::new();
        for (counter, at, token, delta, reset) in &writes {
            distinct.insert((*counter, *at, !*reset, token.clone()), *delta);
        }
        let mut expected: BTreeMap<String, i64> = BTreeMap::new();
        for ((counter, _, add, _), delta) in &distinct {
            let value = expected.entry(format!("c{counter}")).or_insert(0);
            *value = if *add { *value + delta } else { 0 };
        }
        let mut last: BTreeMap<String, i64> = BTreeMap::new();
        for record in driver.received("out") {
            let value = record.value.as_ref().unwrap();
            last.insert(record.key.clone().unwrap(), value["value"].as_i64().unwrap());
        }
        prop_assert_eq!(last, expected);
    }
}
