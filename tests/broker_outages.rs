//! Broker outages a running application waits out: the broker goes down
//! with transactions open and comes back minutes later; the processes stay
//! up, resume, and every input event is in exactly one committed folded
//! event (read_committed, nothing excused).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

const ACCOUNTS: u64 = 40;

/// Event `i`: accounts take turns, each event a post of its own.
fn event(i: u64) -> (String, serde_json::Value) {
    let account = format!("account_{}", i % ACCOUNTS);
    let value = json!({
        "post_id": format!("post_{i}"),
        "account_id": account,
        "metrics": {"likes": i},
    });
    (account, value)
}

/// Every event of `0..events` in exactly one folded event, under its
/// account.
fn judge(folded: &[Consumed], events: u64) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for record in folded {
        let fold = record.json();
        let account = fold["account_id"].as_str().unwrap().to_string();
        for post in fold["posts"].as_array().unwrap() {
            let post = post.as_str().unwrap().to_string();
            let at = format!("{account} at {}/{}", record.partition, record.offset);
            if let Some(first) = seen.insert(post.clone(), at.clone()) {
                panic!("{post} folded twice: {first} and {at}");
            }
        }
    }
    let missing: Vec<u64> = (0..events)
        .filter(|i| !seen.contains_key(&format!("post_{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {events} events in no folded event, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(seen.len() as u64, events, "no event of another run");
}

/// The broker is killed while events flow (so a transaction is open) and
/// stays down for three minutes, longer than every timeout of the commit
/// cycle (30 s) and than `transaction.timeout.ms` (60 s); the process must
/// wait it out rather than exit, then go on exactly once.
#[test]
fn a_broker_down_for_three_minutes_with_transactions_open_is_waited_out() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("post-metric-updated");
    let folded = unique("account-metrics-folded");
    let name = unique("sf-outage");
    create_topic(&source, 4);
    let app = App::start(
        &AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: env_vars(&[
                ("STREAMFOLD_APP", &name),
                ("POST_METRICS_TOPIC", &source),
                ("FOLDED_TOPIC", &folded),
                ("DEAD_LETTER_TOPIC", &unique("dlq")),
                ("FOLD_QUIET_FOR", "1s"),
                ("FOLD_MAX_WAIT", "10s"),
                ("FOLD_MAX_EVENTS", "25"),
            ]),
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    // Events flow before, during and after the outage: the producer
    // queues what it cannot deliver (its delivery timeout is 5 minutes).
    let producer = std::sync::Arc::new(TestProducer::new());
    let events = 3_000;
    let feeding = {
        let producer = std::sync::Arc::clone(&producer);
        let source = source.clone();
        std::thread::spawn(move || {
            for i in 0..events {
                let (key, value) = event(i);
                producer.send_json(&source, &key, &value);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(5));
    let node = &broker().nodes[0];
    node.stop(true);
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(180) {
        app.assert_running();
        std::thread::sleep(Duration::from_secs(1));
    }
    node.start_again(1);
    feeding.join().unwrap();
    producer.flush();
    let end = producer.ends(&source, 4);
    wait_committed_to(&app, &name, &source, &end, Duration::from_secs(300));
    let mut follower = Follower::new(&folded, 4);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        follower.poll(Duration::from_millis(500));
        let count: u64 = follower
            .records
            .iter()
            .map(|r| r.json()["folded_count"].as_u64().unwrap_or(0))
            .sum();
        if count >= events {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{count} of {events} events folded; log:\n{}",
            app.log_text()
        );
        app.assert_running();
    }
    let log = app.stop();
    judge(&read_to_end(&folded, Duration::from_secs(60)), events);
    eprintln!(
        "outage of 180 s waited out; {} warnings of a coordinator that did not answer",
        log.matches("does not answer").count()
    );
}
