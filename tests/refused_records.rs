//! Records the broker refuses for good: a keyless record for a compacted
//! topic (INVALID_RECORD), a timestamp beyond the topic's
//! `message.timestamp.after.max.ms` (INVALID_TIMESTAMP). Retrying them
//! cannot help: each must become a dead letter with the broker's reason,
//! the records around it go on exactly once, and the instance must not
//! abort, rewind and replay forever.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::*;

/// A topology that passes every event to a compacted sink, its output
/// timestamp the event's own (`/at`).
fn topology(app: &str, source: &str, out: &str, dlq: &str) -> String {
    format!(
        r#"
name: {app}
kafka:
  bootstrap_servers: 127.0.0.1:9
processing:
  guarantee: exactly_once
  commit_interval: 100ms
sources:
  events: {{ topic: {source}, format: json, timestamp: /at }}
nodes:
  keep:
    type: filter
    input: events
    condition: 'true'
sinks:
  latest: {{ topic: {out}, input: keep, create: true, compact: true }}
dead_letter:
  topic: {dlq}
"#
    )
}

#[test]
fn records_the_broker_refuses_for_good_become_dead_letters_and_the_rest_goes_on() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-refused");
    let source = unique("events");
    let out = unique("latest");
    let dlq = unique("dlq");
    create_topic(&source, 2);
    // The sink, compacted, accepts timestamps at most an hour ahead.
    create_topic_with(
        &out,
        2,
        &[
            ("cleanup.policy", "compact"),
            ("message.timestamp.after.max.ms", "3600000"),
        ],
    );
    let file = dir.path().join("topology.yaml");
    std::fs::write(&file, topology(&app, &source, &out, &dlq)).unwrap();

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let producer = TestProducer::new();
    let mut good = 0;
    for i in 0..300u64 {
        let value = json!({"n": i, "at": now});
        match i {
            // No key: a compacted topic refuses it.
            50 | 170 => producer.send(&source, None, value.to_string().as_bytes(), &[]),
            // A day ahead: past the sink's timestamp limit.
            120 | 250 => producer.send_json(
                &source,
                &format!("k{i}"),
                &json!({"n": i, "at": now + 86_400_000}),
            ),
            _ => {
                good += 1;
                producer.send_json(&source, &format!("k{i}"), &value);
            }
        }
    }
    producer.flush();
    let ends = producer.ends(&source, 2);
    let running = App::start(
        &AppConfig {
            topology: file,
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: Vec::new(),
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    wait_committed_to(&running, &app, &source, &ends, Duration::from_secs(120));
    let aborts = running.wait_metric(
        "streamfold_transactions_aborted_total",
        Duration::from_secs(10),
        |_| true,
    );
    let log = running.stop();

    let outputs = read_to_end(&out, Duration::from_secs(60));
    let mut copies: BTreeMap<String, usize> = BTreeMap::new();
    for record in &outputs {
        *copies.entry(record.key.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(
        copies.len(),
        good,
        "every accepted record is out; log:\n{log}"
    );
    assert!(copies.values().all(|n| *n == 1), "each once: {copies:?}");

    let letters = read_to_end(&dlq, Duration::from_secs(60));
    let mut refused: Vec<(u64, String, String)> = letters
        .iter()
        .map(|l| {
            (
                l.json()["n"].as_u64().unwrap(),
                l.header("streamfold.dlq.reason_code")
                    .unwrap_or_default()
                    .to_string(),
                l.header("streamfold.dlq.reason")
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    refused.sort();
    let numbers: Vec<u64> = refused.iter().map(|r| r.0).collect();
    assert_eq!(
        numbers,
        [50, 120, 170, 250],
        "the refused records: {refused:?}"
    );
    for (n, code, reason) in &refused {
        assert_eq!(code, "refused_by_broker", "{n}: {reason}");
        let expected = if *n == 50 || *n == 170 {
            "INVALID_RECORD"
        } else {
            "INVALID_TIMESTAMP"
        };
        assert!(
            reason.contains(expected),
            "{n}: the broker's reason, {reason:?}"
        );
    }
    // The topics' configuration tells what the broker refuses: nothing
    // is sent to be refused, no transaction aborts.
    assert_eq!(aborts, 0.0, "aborts; log:\n{log}");
}
