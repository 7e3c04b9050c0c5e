//! The Kafka Streams peer of the benchmarks (`benches/peers/kafka-streams/`)
//! does streamfold's work: on the same input, on the same broker, it writes
//! the same folds and the same read models, so the benchmarks compare the
//! same work. The only tests that start the JVM peer.
//!
//! What is compared does not depend on timing. The folds close by
//! `max_events` only (`quiet_for` and `max_wait` an hour away): an
//! account keyed by itself has its events in one partition, in one order
//! for both systems, so its folds must be equal, one by one; an
//! account whose events are keyed by post is re-keyed through each
//! system's repartition topic, where the interleaving of partitions
//! depends on timing, so only its totals must be equal (events, posts,
//! metrics, folds of `max_events` each). The question feed's outputs are
//! keyed by the entity whose events are in one partition in order, so
//! each key's outputs must be equal, one by one. Values are compared as
//! JSON (an object's fields in any order).

mod support;

#[allow(dead_code)] // the benchmark's driver; the test uses part of it
#[path = "../benches/peers/kafka_streams.rs"]
mod kafka_streams;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use kafka_streams::{KafkaStreamsPeer, PeerApp, PeerConfig};
use serde_json::{Value, json};
use streamfold::testkit::article::METRICS;
use support::*;

/// Events per account; a multiple of [`MAX_EVENTS`], so every fold closes.
const EVENTS_PER_ACCOUNT: u64 = 40;
const MAX_EVENTS: u64 = 10;
/// Accounts whose events are keyed by the account.
const IN_PLACE: u64 = 25;
/// Accounts whose events are keyed by the post: the re-key moves them.
const MOVED: u64 = 10;
const PARTITIONS: i32 = 4;

/// Records by key, each key's JSON values in order. Objects compare
/// field for field whatever the order of their fields: streamfold writes
/// them sorted, the peer in the order the rules build them.
fn values_by_key(records: &[Consumed]) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in records {
        out.entry(r.key.clone().unwrap_or_default())
            .or_default()
            .push(r.json());
    }
    out
}

/// The payloads of dead-lettered records, sorted.
fn dead_letters(records: &[Consumed]) -> Vec<String> {
    let mut out: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
        .collect();
    out.sort();
    out
}

/// An account's folds summed up: events, posts, metrics, folds, and
/// whether every fold closed by `max_events` with that many events.
fn totals(folds: &[Value]) -> Value {
    let (mut events, mut posts, mut metrics) = (0, BTreeSet::new(), BTreeSet::new());
    let mut all_full = true;
    for fold in folds {
        let count = fold["folded_count"].as_u64().unwrap();
        events += count;
        all_full &= count == MAX_EVENTS && fold["closed_by"] == "max_events";
        for p in fold["posts"].as_array().unwrap() {
            posts.insert(p.as_str().unwrap().to_string());
        }
        for m in fold["metrics"].as_array().unwrap() {
            metrics.insert(m.as_str().unwrap().to_string());
        }
    }
    json!({"events": events, "posts": posts, "metrics": metrics, "folds": folds.len(), "all_full": all_full})
}

/// The fold's input: [`IN_PLACE`] accounts keyed by themselves and
/// [`MOVED`] keyed by post, interleaved; then two records to dead-letter.
fn produce_post_metrics(topic: &str) -> u64 {
    create_topic(topic, PARTITIONS);
    let producer = TestProducer::new();
    let accounts = IN_PLACE + MOVED;
    for i in 0..accounts * EVENTS_PER_ACCOUNT {
        let account = i % accounts;
        let account_id = format!("account_{account}");
        let post_id = format!("post_{}", i % 37);
        let value = json!({
            "post_id": post_id,
            "account_id": account_id,
            "metrics": {METRICS[(i % 6) as usize]: i % 97},
        });
        let key = if account < IN_PLACE {
            &account_id
        } else {
            &post_id
        };
        producer.send_json(topic, key, &value);
    }
    producer.send(topic, Some(b"bad-1"), b"{not json", &[]);
    producer.send(
        topic,
        Some(b"bad-2"),
        br#"{"post_id":"post_1","metrics":{"likes":1}}"#,
        &[],
    );
    producer.flush();
    accounts * EVENTS_PER_ACCOUNT / MAX_EVENTS
}

#[test]
fn the_peer_folds_as_streamfold_does() {
    let _serial = serial();
    let dir = temp_dir();
    let input = unique("peers-posts");
    let folds = produce_post_metrics(&input) as usize;

    // streamfold: topologies/social-metrics.yaml, max_events closes only.
    let app = unique("peers-sf");
    let (folded, dlq) = (format!("{app}-folded"), format!("{app}-dlq"));
    let config = AppConfig {
        topology: repo().join("topologies/social-metrics.yaml"),
        instance: "peers".into(),
        state_dir: dir.path().join(&app),
        env: env_vars(&[
            ("STREAMFOLD_APP", &app),
            ("POST_METRICS_TOPIC", &input),
            ("FOLDED_TOPIC", &folded),
            ("DEAD_LETTER_TOPIC", &dlq),
            ("FOLD_QUIET_FOR", "1h"),
            ("FOLD_MAX_WAIT", "1h"),
            ("FOLD_MAX_EVENTS", &MAX_EVENTS.to_string()),
        ]),
        txn_header: false,
        args: Vec::new(),
    };
    let streamfold = App::start(&config, dir.path());
    let ours = read_topic(
        &folded,
        folds,
        Duration::from_secs(1),
        Duration::from_secs(180),
    );
    let our_dead = read_topic(&dlq, 2, Duration::ZERO, Duration::from_secs(30));
    streamfold.stop();

    // The peer, same input, same parameters.
    let peer_id = unique("peers-ks");
    let (peer_folded, peer_dlq) = (format!("{peer_id}-folded"), format!("{peer_id}-dlq"));
    let peer = KafkaStreamsPeer::start(
        &PeerConfig {
            app: PeerApp::Fold,
            application_id: peer_id.clone(),
            state_dir: dir.path().join(&peer_id),
            args: [
                "--input",
                &input,
                "--output",
                &peer_folded,
                "--dead-letter-topic",
                &peer_dlq,
                "--quiet-for",
                "1h",
                "--max-wait",
                "1h",
                "--max-events",
                &MAX_EVENTS.to_string(),
                "--commit-interval",
                "100ms",
            ]
            .map(String::from)
            .to_vec(),
            heap: Some("384m".into()),
        },
        dir.path(),
    );
    peer.wait_running(Duration::from_secs(180));
    let theirs = read_topic(
        &peer_folded,
        folds,
        Duration::from_secs(1),
        Duration::from_secs(180),
    );
    let their_dead = read_topic(&peer_dlq, 2, Duration::ZERO, Duration::from_secs(30));
    peer.stop();

    assert_eq!(ours.len(), folds, "streamfold's folds");
    assert_eq!(theirs.len(), folds, "the peer's folds");
    let (ours, theirs) = (values_by_key(&ours), values_by_key(&theirs));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "the same accounts folded"
    );
    for account in 0..IN_PLACE + MOVED {
        let key = format!("account_{account}");
        let (a, b) = (&ours[&key], &theirs[&key]);
        let sums = totals(a);
        assert_eq!(
            sums["events"], EVENTS_PER_ACCOUNT,
            "{key}: streamfold folded every event once: {sums}"
        );
        assert_eq!(sums["all_full"], true, "{key}: {sums}");
        if account < IN_PLACE {
            // Not re-keyed: one order of events, the same folds.
            assert_eq!(a, b, "{key}: the folds differ");
        } else {
            assert_eq!(sums, totals(b), "{key}: the totals differ");
        }
    }
    assert_eq!(our_dead.len(), 2, "streamfold's dead letters");
    assert_eq!(
        dead_letters(&our_dead),
        dead_letters(&their_dead),
        "the same records dead-lettered"
    );
}

#[test]
fn the_peer_projects_the_question_feed_as_streamfold_does() {
    let _serial = serial();
    let dir = temp_dir();
    let input = unique("peers-feed");
    create_topic(&input, PARTITIONS);
    let produced = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .args(["--bootstrap-servers", &broker().bootstrap])
        .args(["produce", "--workload", "question-feed", "--topic", &input])
        .args(["--events", "3000", "--accounts", "60"])
        .output()
        .unwrap();
    assert!(produced.status.success(), "{produced:?}");
    let producer = TestProducer::new();
    producer.send(&input, Some(b"q3"), b"{not json", &[]);
    producer.send(
        &input,
        Some(b"q3"),
        br#"{"type":"QuestionCreated","question_id":"q3","sequence":1}"#,
        &[],
    );
    producer.send(
        &input,
        Some(b"q3"),
        br#"{"event_id":"viewed-1","type":"QuestionViewed","question_id":"q3"}"#,
        &[],
    );
    producer.flush();
    let ends: Vec<i64> = (0..PARTITIONS).map(|p| partition_end(&input, p)).collect();

    // Each system's outputs: read models, thanks totals, other events,
    // dead letters.
    let outputs = |prefix: &str| -> [String; 4] {
        ["questions", "thanks", "other", "dlq"].map(|t| format!("{prefix}-{t}"))
    };

    let app = unique("peers-sf");
    let ours = outputs(&app);
    let config = AppConfig {
        topology: repo().join("topologies/question-feed.yaml"),
        instance: "peers".into(),
        state_dir: dir.path().join(&app),
        env: env_vars(&[
            ("STREAMFOLD_APP", &app),
            ("FEED_EVENTS_TOPIC", &input),
            ("QUESTIONS_TOPIC", &ours[0]),
            ("THANKS_TOPIC", &ours[1]),
            ("OTHER_EVENTS_TOPIC", &ours[2]),
            ("DEAD_LETTER_TOPIC", &ours[3]),
        ]),
        txn_header: false,
        args: Vec::new(),
    };
    let streamfold = App::start(&config, dir.path());
    wait_committed_to(&streamfold, &app, &input, &ends, Duration::from_secs(180));
    streamfold.stop();
    let ours: Vec<Vec<Consumed>> = ours
        .iter()
        .map(|t| read_to_end(t, Duration::from_secs(60)))
        .collect();

    let peer_id = unique("peers-ks");
    let theirs = outputs(&peer_id);
    let peer = KafkaStreamsPeer::start(
        &PeerConfig {
            app: PeerApp::QuestionFeed,
            application_id: peer_id.clone(),
            state_dir: dir.path().join(&peer_id),
            args: [
                "--input",
                &input,
                "--questions-topic",
                &theirs[0],
                "--thanks-topic",
                &theirs[1],
                "--other-events-topic",
                &theirs[2],
                "--dead-letter-topic",
                &theirs[3],
                "--commit-interval",
                "100ms",
            ]
            .map(String::from)
            .to_vec(),
            heap: Some("384m".into()),
        },
        dir.path(),
    );
    peer.wait_running(Duration::from_secs(180));
    // Wait for as many records as streamfold wrote to each, then stop
    // (a clean close commits everything) and read them all.
    for (topic, ours) in theirs.iter().zip(&ours) {
        read_topic(topic, ours.len(), Duration::ZERO, Duration::from_secs(180));
    }
    peer.stop();
    let theirs: Vec<Vec<Consumed>> = theirs
        .iter()
        .map(|t| read_to_end(t, Duration::from_secs(60)))
        .collect();

    let read_models = values_by_key(&ours[0]);
    let versions: Vec<u64> = read_models["q3"]
        .iter()
        .map(|model| model["version"].as_u64().unwrap())
        .collect();
    assert!(
        versions.windows(2).all(|v| v[1] == v[0] + 1),
        "q3's versions count the events applied: {versions:?}"
    );
    for (name, (a, b)) in ["read models", "thanks totals", "other events"]
        .iter()
        .zip(ours.iter().zip(&theirs))
    {
        assert!(!a.is_empty(), "streamfold wrote {name}");
        assert_eq!(a.len(), b.len(), "{name}: as many records");
        let (a, b) = (values_by_key(a), values_by_key(b));
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "{name}: the same keys"
        );
        for (key, a) in &a {
            assert_eq!(a, &b[key], "{name} of {key} differ");
        }
    }
    assert_eq!(ours[3].len(), 2, "streamfold's dead letters");
    assert_eq!(
        dead_letters(&ours[3]),
        dead_letters(&theirs[3]),
        "the same records dead-lettered"
    );
}
