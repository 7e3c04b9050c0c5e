//! The article topologies beyond folding, against a real broker:
//! question-feed (dedup → projection) under kill -9, distributed-counter
//! with every event delivered twice, a dead-letter round trip through
//! `streamfold dlq replay`, and a source record's headers on the records
//! made from it.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::*;

fn app(topology: &str, instance: &str, state: PathBuf, env: Vec<(String, String)>) -> AppConfig {
    AppConfig {
        topology: repo().join(topology),
        instance: instance.into(),
        state_dir: state,
        env,
        txn_header: true,
        args: Vec::new(),
    }
}

/// One question's events: created, maybe edited, some answers, maybe
/// deleted; numbered by `sequence`.
fn question_events(q: u64) -> Vec<Value> {
    let id = format!("q{q}");
    let mut events = vec![
        json!({"type": "QuestionCreated", "title": format!("title {q}"), "author": format!("author{}", q % 7)}),
    ];
    if q.is_multiple_of(2) {
        events.push(json!({"type": "QuestionEdited", "title": format!("title {q} (edited)")}));
    }
    for _ in 0..q % 4 {
        events.push(json!({"type": "AnswerAdded"}));
    }
    if q.is_multiple_of(10) {
        events.push(json!({"type": "QuestionDeleted"}));
    }
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e["event_id"] = json!(format!("{id}-e{i}"));
            e["question_id"] = json!(id);
            e["sequence"] = json!(i + 1);
            e
        })
        .collect()
}

/// The read model a question ends with.
fn final_model(q: u64) -> Value {
    let events = question_events(q);
    let mut model = json!({
        "title": if q.is_multiple_of(2) { format!("title {q} (edited)") } else { format!("title {q}") },
        "author": format!("author{}", q % 7),
        "is_deleted": q.is_multiple_of(10),
        "question_id": format!("q{q}"),
        "version": events.len(),
    });
    if !q.is_multiple_of(4) {
        model["answers"] = json!(q % 4);
    }
    model
}

#[test]
fn question_feed_read_models_are_right_after_kill_9_and_no_version_has_two_contents() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("feed-events");
    let questions_topic = unique("question-read-models");
    create_topic(&source, 4);
    let names = env_vars(&[
        ("STREAMFOLD_APP", &unique("sf-feed")),
        ("FEED_EVENTS_TOPIC", &source),
        ("QUESTIONS_TOPIC", &questions_topic),
        ("THANKS_TOPIC", &unique("answer-thanks")),
        ("OTHER_EVENTS_TOPIC", &unique("other-events")),
        ("DEAD_LETTER_TOPIC", &unique("feed-dlq")),
        ("STREAMFOLD_STATIC_MEMBERSHIP", "true"),
    ]);
    let config = app(
        "topologies/question-feed.yaml",
        "a",
        dir.path().join("state"),
        names,
    );
    let count = 400u64;

    // Events of each question in a scrambled order, every third one sent
    // twice (at-least-once delivery upstream), keyed by question.
    let feed_source = source.clone();
    let feeder = std::thread::spawn(move || {
        let producer = TestProducer::new();
        for chunk in 0..8 {
            for q in chunk * count / 8..(chunk + 1) * count / 8 {
                let mut events = question_events(q);
                if q.is_multiple_of(3) {
                    events.reverse();
                } else if events.len() > 1 {
                    events.swap(0, 1);
                }
                for (i, e) in events.iter().enumerate() {
                    producer.send_json(&feed_source, &format!("q{q}"), e);
                    if i.is_multiple_of(3) {
                        producer.send_json(&feed_source, &format!("q{q}"), e);
                    }
                }
            }
            producer.flush();
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    for _ in 0..3 {
        let running = App::start(&config, dir.path());
        running.wait_metric(
            "streamfold_runtime_tasks_running",
            Duration::from_secs(120),
            |n| n == 4.0,
        );
        std::thread::sleep(Duration::from_millis(700));
        running.kill();
    }
    feeder.join().unwrap();
    let last = App::start(&config, dir.path());
    let total_events: usize = (0..count).map(|q| question_events(q).len()).sum();
    last.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );

    // Wait until every question reached its final version.
    let deadline = Instant::now() + Duration::from_secs(180);
    let models = loop {
        let models = read_topic(
            &questions_topic,
            0,
            Duration::from_secs(2),
            Duration::from_secs(60),
        );
        let mut latest: BTreeMap<String, Value> = BTreeMap::new();
        for r in &models {
            let v = r.json();
            let key = r.key.clone().unwrap();
            if latest
                .get(&key)
                .is_none_or(|l| l["version"].as_u64() <= v["version"].as_u64())
            {
                latest.insert(key, v);
            }
        }
        let done = (0..count).all(|q| latest.get(&format!("q{q}")) == Some(&final_model(q)));
        if done || Instant::now() > deadline {
            break models;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let mut latest: BTreeMap<String, Value> = BTreeMap::new();
    let mut by_version: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for r in &models {
        let v = r.json();
        let key = r.key.clone().unwrap();
        let version = v["version"].as_u64().unwrap();
        by_version
            .entry((key.clone(), version))
            .or_default()
            .insert(v.to_string());
        if latest
            .get(&key)
            .is_none_or(|l| l["version"].as_u64().unwrap() <= version)
        {
            latest.insert(key, v);
        }
    }
    for q in 0..count {
        assert_eq!(latest.get(&format!("q{q}")), Some(&final_model(q)), "q{q}");
    }
    for ((key, version), contents) in &by_version {
        assert_eq!(
            contents.len(),
            1,
            "{key} version {version} was emitted with different contents: {contents:?}"
        );
    }
    eprintln!(
        "{} read models emitted for {count} questions ({total_events} distinct events)",
        models.len()
    );
    last.stop();
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[test]
fn counters_count_each_event_once_when_the_producer_delivers_everything_twice() {
    let _serial = serial();
    let dir = temp_dir();
    let events = unique("counter-events");
    let reads = unique("counter-reads");
    let values = unique("counter-values");
    create_topic(&events, 4);
    create_topic(&reads, 4);
    let config = app(
        "topologies/distributed-counter.yaml",
        "a",
        dir.path().join("state"),
        env_vars(&[
            ("STREAMFOLD_APP", &unique("sf-counter")),
            ("COUNTER_EVENTS_TOPIC", &events),
            ("COUNTER_READS_TOPIC", &reads),
            ("COUNTER_VALUES_TOPIC", &values),
            ("DEAD_LETTER_TOPIC", &unique("counter-dlq")),
        ]),
    );
    let running = App::start(&config, dir.path());
    running.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );

    let producer = TestProducer::new();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..3000u64 {
        let counter = format!("views:post_{}", i % 50);
        let delta = (i % 7) as i64 - 2;
        let event = json!({
            "counter": counter,
            "token": format!("t{i}"),
            "delta": delta,
            "event_time": now_ms() as u64,
        });
        // Every write is delivered twice: a retry with the same token.
        producer.send_json(&events, &counter, &event);
        producer.send_json(&events, &counter, &event);
        *expected.entry(counter).or_default() += delta;
        if i % 300 == 299 {
            producer.flush();
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    producer.flush();

    // Rollups reach every write once its window is immutable (accept_limit
    // 5s) and the coalesced trigger fires (10s).
    let deadline = Instant::now() + Duration::from_secs(120);
    let latest = loop {
        let outputs = read_topic(&values, 0, Duration::from_secs(2), Duration::from_secs(30));
        let mut latest: BTreeMap<String, i64> = BTreeMap::new();
        for r in &outputs {
            latest.insert(r.key.clone().unwrap(), r.json()["value"].as_i64().unwrap());
        }
        if latest == expected || Instant::now() > deadline {
            break latest;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    assert_eq!(
        latest, expected,
        "each counter is the sum of its distinct deltas"
    );
    running.stop();
}

fn replay(topology: &Path, env: &[(String, String)], extra: &[&str]) -> String {
    let output = Command::new(streamfold_binary())
        .args(["dlq", "replay", "--topology"])
        .arg(topology)
        .args(["--bootstrap-servers", &broker().bootstrap])
        .args(extra)
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn dead_letters_replayed_after_the_fix_are_processed_and_the_counters_add_up() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("post-metric-updated");
    let folded = unique("account-metrics-folded");
    let dlq = unique("dlq");
    create_topic(&source, 4);
    let names = env_vars(&[
        ("STREAMFOLD_APP", &unique("sf-replay")),
        ("POST_METRICS_TOPIC", &source),
        ("FOLDED_TOPIC", &folded),
        ("DEAD_LETTER_TOPIC", &dlq),
        ("FOLD_QUIET_FOR", "2s"),
    ]);

    // A new producer version writes `accountId`: version 1 of the topology
    // cannot group those events and dead-letters them.
    let producer = TestProducer::new();
    for i in 0..60u64 {
        let account = format!("account_{}", i % 6);
        let value = if i % 6 < 2 {
            json!({"post_id": format!("post_{i}"), "accountId": account, "metrics": {"likes": i}})
        } else {
            json!({"post_id": format!("post_{i}"), "account_id": account, "metrics": {"likes": i}})
        };
        producer.send_json(&source, &account, &value);
    }
    producer.flush();
    let v1 = App::start(
        &app(
            "topologies/social-metrics.yaml",
            "a",
            dir.path().join("state"),
            names.clone(),
        ),
        dir.path(),
    );
    let letters = read_topic(&dlq, 20, Duration::from_secs(2), Duration::from_secs(60));
    assert_eq!(letters.len(), 20);
    for l in &letters {
        assert_eq!(l.header("streamfold.dlq.topic"), Some(source.as_str()));
        assert!(
            l.header("streamfold.dlq.partition").is_some()
                && l.header("streamfold.dlq.offset").is_some()
        );
        assert_eq!(l.header("streamfold.dlq.node"), Some("fold_account"));
        assert_eq!(l.header("streamfold.dlq.class"), Some("record"));
        assert_eq!(
            l.header("streamfold.dlq.reason"),
            Some("key field /account_id is missing or null")
        );
        assert_eq!(l.header("streamfold.dlq.attempts"), Some("1"));
    }
    let first = read_topic(&folded, 4, Duration::from_secs(3), Duration::from_secs(60));
    assert_eq!(
        by_key(&first).keys().cloned().collect::<Vec<_>>(),
        ["account_2", "account_3", "account_4", "account_5"]
    );
    // Every record in is folded or dead-lettered. (A fold drops nothing:
    // version 1, a fold alone, exports no drop counter at all.)
    let consumed = v1.metric("streamfold_runtime_records_consumed_total");
    let eligible = v1.metric("streamfold_fold_eligible_events_total");
    let dead = v1.metric("streamfold_node_dead_letters_total");
    assert_eq!((consumed, eligible, dead), (60.0, 40.0, 20.0));
    assert_eq!(
        v1.metric_if_exported("streamfold_node_dropped_records_total"),
        None
    );
    v1.stop();

    // Version 2 maps `accountId` to `account_id` before folding.
    let fixed = dir.path().join("social-metrics-v2.yaml");
    let original = std::fs::read_to_string(repo().join("topologies/social-metrics.yaml")).unwrap();
    let v2_text = original
        .replace(
            "nodes:\n",
            "nodes:\n  normalize:\n    type: map\n    input: post_metrics\n    expression: 'if has(\"accountId\") then (. + {account_id: .accountId} | del(.accountId)) else . end'\n",
        )
        .replace("  fold_account:\n    type: fold\n    input: post_metrics\n", "  fold_account:\n    type: fold\n    input: normalize\n");
    assert_ne!(v2_text, original);
    std::fs::write(&fixed, v2_text).unwrap();

    // A dry run counts without sending; the filter selects by header.
    let dry = replay(&fixed, &names, &["--dry-run"]);
    assert!(dry.contains("would replay 20 of 20 dead letters"), "{dry}");
    let filtered = replay(
        &fixed,
        &names,
        &["--dry-run", "--filter", "$key == \"account_0\""],
    );
    assert!(filtered.contains("would replay 10 of 20"), "{filtered}");
    assert!(filtered.contains("10 left out by the filter"), "{filtered}");

    let v2 = App::start(
        &app(
            fixed.to_str().unwrap(),
            "a",
            dir.path().join("state"),
            names.clone(),
        ),
        dir.path(),
    );
    let done = replay(&fixed, &names, &[]);
    assert!(done.contains("replayed 20 of 20 dead letters"), "{done}");
    assert!(done.contains(&format!("20 to {source}")), "{done}");
    // A second replay has nothing left: progress was committed.
    let again = replay(&fixed, &names, &[]);
    assert!(again.contains("replayed 0 of 0"), "{again}");

    let all = read_topic(&folded, 6, Duration::from_secs(3), Duration::from_secs(60));
    let accounts: BTreeSet<String> = all.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(
        accounts.len(),
        6,
        "the replayed events were folded: {accounts:?}"
    );
    for r in all
        .iter()
        .filter(|r| matches!(r.key.as_deref(), Some("account_0" | "account_1")))
    {
        assert_eq!(r.json()["folded_count"], json!(10));
    }
    // The second version consumed the 20 replayed records and folded them
    // all; nothing was lost on the way: in = out + dead letters + drops
    // (the `normalize` map's drop counter exists, at 0).
    v2.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(30),
        |n| n == 20.0,
    );
    assert_eq!(v2.metric("streamfold_runtime_records_consumed_total"), 20.0);
    assert_eq!(v2.metric("streamfold_node_dead_letters_total"), 0.0);
    assert_eq!(v2.metric("streamfold_node_dropped_records_total"), 0.0);
    v2.stop();
}

/// A record's own headers reach the records made from it: through a
/// stateless node to a sink, and through a repartition topic (`key_by`) to
/// a sink, in order, without the headers streamfold adds to a repartition
/// record.
#[test]
fn source_headers_reach_sink_records_directly_and_through_a_repartition() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("tagged-events");
    let direct = unique("tagged-direct");
    let rekeyed = unique("tagged-rekeyed");
    create_topic(&source, 2);
    let topology = dir.path().join("headers.yaml");
    write_json_topology(
        &topology,
        "",
        "nodes:
  kept:
    type: filter
    input: events
    condition: '.n >= 0'
  by_user:
    type: dedup
    input: events
    key_by: /user
    id_field: /n
    retention: 1h
sinks:
  direct:
    topic: ${DIRECT_TOPIC}
    input: kept
    create: true
  rekeyed:
    topic: ${REKEYED_TOPIC}
    input: by_user
    create: true
",
    );
    let check = Command::new(streamfold_binary())
        .arg("check")
        .arg(&topology)
        .envs([
            ("STREAMFOLD_APP", "check"),
            ("EVENTS_TOPIC", "e"),
            ("DIRECT_TOPIC", "d"),
            ("REKEYED_TOPIC", "r"),
            ("DEAD_LETTER_TOPIC", "dlq"),
        ])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");

    let count = 30;
    let producer = TestProducer::new();
    for n in 0..count {
        let value = json!({"user": format!("u{}", n % 3), "n": n});
        let trace = format!("t-{n}");
        producer.send(
            &source,
            Some(format!("k{n}").as_bytes()),
            value.to_string().as_bytes(),
            &[
                ("trace", trace.as_str()),
                ("tenant", "acme"),
                ("trace", "again"),
            ],
        );
    }
    producer.flush();
    let config = AppConfig {
        topology,
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: env_vars(&[
            ("STREAMFOLD_APP", &unique("sf-headers")),
            ("EVENTS_TOPIC", &source),
            ("DIRECT_TOPIC", &direct),
            ("REKEYED_TOPIC", &rekeyed),
            ("DEAD_LETTER_TOPIC", &unique("headers-dlq")),
        ]),
        txn_header: false,
        args: Vec::new(),
    };
    let app = App::start(&config, dir.path());
    let timeout = Duration::from_secs(60);
    let direct = read_topic(&direct, count, Duration::from_secs(1), timeout);
    let rekeyed = read_topic(&rekeyed, count, Duration::from_secs(1), timeout);
    app.stop();

    for (sink, records) in [("direct", &direct), ("rekeyed", &rekeyed)] {
        assert_eq!(records.len(), count, "{sink}: {records:?}");
        let mut seen = BTreeSet::new();
        for record in records.iter() {
            let n = record.json()["n"].as_u64().unwrap();
            assert!(seen.insert(n), "{sink}: n = {n} twice");
            let headers: Vec<(&str, &str)> = record
                .headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect();
            assert_eq!(
                headers,
                [
                    ("trace", format!("t-{n}").as_str()),
                    ("tenant", "acme"),
                    ("trace", "again")
                ],
                "{sink}: record {n}"
            );
        }
    }
    let users: BTreeSet<_> = rekeyed.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(
        users,
        BTreeSet::from(["u0".into(), "u1".into(), "u2".into()])
    );
}

/// Events whose `n` is not negative, from `EVENTS_TOPIC` to `OUT_TOPIC`.
fn write_filter_topology(path: &Path) {
    write_json_topology(
        path,
        "",
        "nodes:
  kept:
    type: filter
    input: events
    condition: '.n >= 0'
sinks:
  out:
    topic: ${OUT_TOPIC}
    input: kept
    create: true
",
    );
}

/// A header whose name is not UTF-8 (Kafka allows any bytes; rust-rdkafka's
/// header reader panics on one) neither stops `run` nor loses its record:
/// the name reaches the sink read lossily, the other headers as they were.
#[test]
fn a_header_name_that_is_not_utf8_is_read_lossily_and_the_record_goes_on() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("raw-header-events");
    let sink = unique("raw-header-out");
    create_topic(&source, 2);
    let topology = dir.path().join("raw-headers.yaml");
    write_filter_topology(&topology);
    let count = 10;
    let producer = TestProducer::new();
    for n in 0..count {
        let value = json!({"n": n}).to_string();
        producer.send_raw_headers(
            &source,
            None,
            format!("k{n}").as_bytes(),
            value.as_bytes(),
            &[(b"tr\xffce", b"t"), (b"tenant", b"acme")],
        );
    }
    producer.flush();
    let config = AppConfig {
        topology,
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: env_vars(&[
            ("STREAMFOLD_APP", &unique("sf-raw-headers")),
            ("EVENTS_TOPIC", &source),
            ("OUT_TOPIC", &sink),
            ("DEAD_LETTER_TOPIC", &unique("raw-headers-dlq")),
        ]),
        txn_header: false,
        args: Vec::new(),
    };
    let app = App::start(&config, dir.path());
    let out = read_topic(
        &sink,
        count,
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    app.stop();

    assert_eq!(out.len(), count, "{out:?}");
    let mut seen = BTreeSet::new();
    for record in &out {
        let n = record.json()["n"].as_u64().unwrap();
        assert!(seen.insert(n), "n = {n} twice");
        let headers: Vec<(&str, &str)> = record
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        assert_eq!(
            headers,
            [("tr\u{FFFD}ce", "t"), ("tenant", "acme")],
            "record {n}"
        );
    }
}

/// `dlq replay` reads a dead letter whose header name is not UTF-8 (written
/// by another client, or kept from the original record) instead of
/// panicking on it, and replays it with the name read lossily.
#[test]
fn replay_reads_a_dead_letter_whose_header_name_is_not_utf8() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("raw-replay-events");
    let dlq = unique("raw-replay-dlq");
    create_topic(&source, 1);
    create_topic(&dlq, 1);
    let topology = dir.path().join("raw-replay.yaml");
    write_filter_topology(&topology);
    let names = env_vars(&[
        ("STREAMFOLD_APP", &unique("sf-raw-replay")),
        ("EVENTS_TOPIC", &source),
        ("OUT_TOPIC", &unique("raw-replay-out")),
        ("DEAD_LETTER_TOPIC", &dlq),
    ]);
    let producer = TestProducer::new();
    producer.send_raw_headers(
        &dlq,
        None,
        b"k0",
        br#"{"n": 0}"#,
        &[
            (b"tr\xffce", b"t"),
            (b"streamfold.dlq.topic", source.as_bytes()),
        ],
    );
    producer.flush();

    let dry = replay(&topology, &names, &["--dry-run"]);
    assert!(dry.contains("would replay 1 of 1 dead letters"), "{dry}");
    let done = replay(&topology, &names, &[]);
    assert!(done.contains("replayed 1 of 1 dead letters"), "{done}");
    let replayed = read_topic(&source, 1, Duration::from_secs(1), Duration::from_secs(30));
    assert_eq!(replayed.len(), 1, "{replayed:?}");
    assert_eq!(replayed[0].header("tr\u{FFFD}ce"), Some("t"));
}

/// `streamfold-loadgen read`, the quickstart's reader, prints a record
/// whose header name is not UTF-8 instead of panicking on it, and still
/// counts the dead-letter reason the record carries.
#[test]
fn loadgen_read_prints_a_record_whose_header_name_is_not_utf8() {
    let _serial = serial();
    let topic = unique("raw-read");
    create_topic(&topic, 1);
    let producer = TestProducer::new();
    producer.send_raw_headers(
        &topic,
        None,
        b"k0",
        br#"{"n": 0}"#,
        &[
            (b"tr\xffce", b"t"),
            (b"streamfold.dlq.reason", b"value is not valid JSON"),
        ],
    );
    producer.flush();

    let output = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .args(["--bootstrap-servers", &broker().bootstrap])
        .args(["read", "--topic", &topic])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let printed: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(printed, [json!({"key": "k0", "value": {"n": 0}})]);
    assert!(
        stderr.contains(&format!("1 records in {topic}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 dead letters: value is not valid JSON"),
        "{stderr}"
    );
}

fn loadgen_read(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .args(["--bootstrap-servers", &broker().bootstrap, "read"])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `streamfold-loadgen read` stops at the ends of the partitions, not
/// after a quiet period: an empty topic reads as empty at once, every
/// partition is read to its end, `--count` waits for records committed
/// after the read began, and a count never reached is a failure.
#[test]
fn loadgen_read_stops_at_the_partitions_ends() {
    let _serial = serial();
    let topic = unique("read-ends");
    create_topic(&topic, 3);
    let (ok, stdout, stderr) = loadgen_read(&["--topic", &topic]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "", "{stderr}");
    assert!(
        stderr.contains(&format!("0 records in {topic}")),
        "{stderr}"
    );

    let producer = TestProducer::new();
    for (i, key) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        producer.send(
            &topic,
            Some(key.as_bytes()),
            format!(r#"{{"n": {i}}}"#).as_bytes(),
            &[],
        );
    }
    producer.flush();
    let (ok, stdout, stderr) = loadgen_read(&["--topic", &topic]);
    assert!(ok, "{stderr}");
    let mut keys: Vec<String> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, ["a", "b", "c", "d", "e"], "{stderr}");

    // Two more records, written after the read began.
    let reader = std::thread::spawn({
        let topic = topic.clone();
        move || loadgen_read(&["--topic", &topic, "--count", "7", "--summary"])
    });
    std::thread::sleep(Duration::from_secs(2));
    producer.send(&topic, Some(b"f"), br#"{"n": 5}"#, &[]);
    producer.send(&topic, Some(b"g"), br#"{"n": 6}"#, &[]);
    producer.flush();
    let (ok, stdout, stderr) = reader.join().unwrap();
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "", "--summary prints no records");
    assert!(
        stderr.contains(&format!("7 records in {topic}")),
        "{stderr}"
    );

    let (ok, _, stderr) = loadgen_read(&["--topic", &topic, "--count", "8", "--timeout", "2s"]);
    assert!(!ok, "a count never reached fails: {stderr}");
    assert!(
        stderr.contains("read 7 records (wanted at least 8) within 2s"),
        "{stderr}"
    );
}
