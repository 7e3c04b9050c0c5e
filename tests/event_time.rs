//! Event time on an idle partition: without `processing.idle_advance` an
//! event-clock fold whose key goes quiet stays open until later records
//! move event time; with it, event time follows the wall clock once the
//! task has been idle that long, and the fold closes.

use std::sync::Arc;

use serde_json::json;
use streamfold::config::types::HumanDuration;
use streamfold::testkit::Driver;
use streamfold::topology;

const TOPOLOGY: &str = "
name: event-time
kafka: { bootstrap_servers: 'unused:9092' }
processing:
  idle_advance: ${IDLE_ADVANCE:-}
sources:
  events: { topic: events, timestamp: /at }
nodes:
  fold:
    type: fold
    input: events
    fields: { n: { rule: count } }
    quiet_for: 30s
    clock: event
sinks:
  out: { topic: out, input: fold }
";

fn driver(idle_advance: &str) -> Driver {
    let env = |name: &str| {
        (name == "IDLE_ADVANCE" && !idle_advance.is_empty()).then(|| idle_advance.to_string())
    };
    let topology = topology::load_str("event-time.yaml", TOPOLOGY, &env).expect("valid topology");
    Driver::new(Arc::new(topology)).unwrap()
}

fn feed_two_events(driver: &mut Driver) {
    let t0 = 1_735_689_600_000i64;
    driver
        .feed_json("events", Some("k"), &json!({"at": t0}))
        .unwrap();
    driver
        .feed_json("events", Some("k"), &json!({"at": t0 + 5_000}))
        .unwrap();
}

#[test]
fn without_idle_advance_an_idle_partition_keeps_its_event_time_folds_open() {
    let mut driver = driver("");
    feed_two_events(&mut driver);
    driver.advance(HumanDuration::from_secs(120)).unwrap();
    assert!(driver.received("out").is_empty(), "event time did not move");
}

#[test]
fn with_idle_advance_event_time_follows_the_wall_clock_and_the_fold_closes() {
    let mut driver = driver("10s");
    feed_two_events(&mut driver);
    // 10 s idle, then event time runs from the last event (t0 + 5 s): the
    // quiet deadline t0 + 35 s is reached 30 s after the last record.
    driver.advance(HumanDuration::from_secs(29)).unwrap();
    assert!(
        driver.received("out").is_empty(),
        "not quiet for 30 s of event time yet"
    );
    driver.advance(HumanDuration::from_secs(2)).unwrap();
    let out = driver.received("out");
    assert_eq!(out.len(), 1);
    let value = out[0].value.clone().unwrap();
    assert_eq!(value["n"], json!(2));
    assert_eq!(value["closed_by"], json!("quiet"));
}
