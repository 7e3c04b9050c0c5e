//! A record too large for its topic must neither end
//! the process nor make it abort and rewind forever.
//!
//! - A hot key whose `set` grows past the producer's `message.max.bytes`:
//!   the fold closes early (`closed_by: max_bytes`), every folded event
//!   and every open-fold changelog value stays under the limit, and the
//!   split folds add up to the events produced.
//! - A folded event too large for its output topic's `max.message.bytes`
//!   (smaller than the cap): it becomes a dead letter with the reason, the
//!   process keeps running, the other keys' folds are all there once.
//! - A record too large for its topic *and* for the dead-letter topic: the
//!   letter carries the start of the payload and its original size.
//!
//! Apache Kafka enforces the topic's `max.message.bytes`; librdkafka's
//! own client-side limit (`message.max.bytes`) applies before it.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// Normal keys, and the events each of them gets.
const USERS: u64 = 20;
const PER_USER: u64 = 30;

struct Run {
    app: String,
    source: String,
    out: String,
    dlq: String,
}

impl Run {
    fn new(test: &str) -> Run {
        Run {
            app: unique(&format!("sf-{test}")),
            source: unique("events"),
            out: unique("folded"),
            dlq: unique("dlq"),
        }
    }

    fn start(&self, dir: &Path, topology: &str) -> (App, std::path::PathBuf) {
        let file = dir.join("topology.yaml");
        std::fs::write(&file, topology).unwrap();
        let journal = dir.join("journal.txt");
        let config = AppConfig {
            topology: file,
            instance: "a".into(),
            state_dir: dir.join("state"),
            env: Vec::new(),
            txn_header: true,
            args: vec!["--txn-journal".into(), journal.display().to_string()],
        };
        (App::start(&config, dir), journal)
    }
}

/// Reads `topic` to its end and keeps the records of committed
/// transactions, as the journal tells them.
fn committed_records(topic: &str, journal: &Path) -> Vec<Consumed> {
    let uncommitted = TxnJournal::read(journal).uncommitted();
    read_to_end(topic, Duration::from_secs(60))
        .into_iter()
        .filter(|r| {
            r.header("streamfold.txn")
                .is_none_or(|txn| !uncommitted.contains(txn))
        })
        .collect()
}

/// The normal keys' events: `PER_USER` each, interleaved, five tags.
fn produce_users(producer: &TestProducer, topic: &str) {
    for i in 0..USERS * PER_USER {
        let user = format!("user_{}", i % USERS);
        producer.send_json(
            topic,
            &user,
            &json!({"user": user, "tag": format!("t{}", (i / USERS) % 5)}),
        );
    }
}

/// A tag of about `len` bytes, distinct per `i`.
fn big_tag(i: u64, len: usize) -> String {
    format!("{i:05}-{}", "x".repeat(len))
}

/// Every normal key folded once, with its five tags and all its events.
fn assert_users_folded_once(records: &[Consumed]) {
    let users = by_key(records);
    for u in 0..USERS {
        let user = format!("user_{u}");
        let folds = users
            .get(&user)
            .unwrap_or_else(|| panic!("{user} has no folded event"));
        assert_eq!(folds.len(), 1, "{user} folded more than once");
        let value = folds[0].json();
        assert_eq!(value["n"], json!(PER_USER), "{value}");
        assert_eq!(value["tags"], json!(["t0", "t1", "t2", "t3", "t4"]));
    }
}

/// The producer allows 64 KiB per record; a hot key gets 600 distinct
/// tags of ~210 bytes (~126 KB in one `set`). Before the fix the open
/// fold's changelog value and its folded event outgrew the limit: the
/// producer refused them at once, every commit aborted and rewound, and
/// no key's fold was ever published.
#[test]
fn a_hot_key_that_outgrows_message_max_bytes_splits_into_folds_under_the_limit() {
    let _serial = serial();
    let dir = temp_dir();
    let run = Run::new("hot-fold");
    create_topic(&run.source, 2);
    let limit = 65_536usize;
    let topology = format!(
        r#"
name: {app}
kafka:
  bootstrap_servers: 127.0.0.1:9
  producer:
    message.max.bytes: "{limit}"
sources:
  events: {{ topic: {source} }}
nodes:
  fold_user:
    type: fold
    input: events
    key_field: user
    fields:
      tags: {{ rule: set, from: /tag }}
      n: {{ rule: count }}
    quiet_for: 3s
sinks:
  folded: {{ topic: {out}, input: fold_user, create: true }}
dead_letter:
  topic: {dlq}
"#,
        app = run.app,
        source = run.source,
        out = run.out,
        dlq = run.dlq,
    );
    let (app, journal) = run.start(dir.path(), &topology);

    let hot_events = 600u64;
    let producer = TestProducer::new();
    produce_users(&producer, &run.source);
    for i in 0..hot_events {
        producer.send_json(
            &run.source,
            "hot",
            &json!({"user": "hot", "tag": big_tag(i, 200)}),
        );
    }
    producer.flush();
    let ends = producer.ends(&run.source, 2);
    wait_committed_to(&app, &run.app, &run.source, &ends, Duration::from_secs(120));
    // Every normal key and the hot key's last fold close by quiet.
    app.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(60),
        |n| n >= (USERS + 1) as f64,
    );
    app.assert_running();
    let max_bytes_closes = app.metric(r#"streamfold_fold_closed_total{cause="max_bytes"}"#);
    let log = app.stop();

    let records = committed_records(&run.out, &journal);
    assert_users_folded_once(&records);
    let hot: Vec<&Consumed> = records
        .iter()
        .filter(|r| r.key.as_deref() == Some("hot"))
        .collect();
    assert!(
        hot.len() >= 2,
        "the hot key should have been split: {} folds",
        hot.len()
    );
    let mut tags = BTreeSet::new();
    let mut folded = 0;
    for (i, record) in hot.iter().enumerate() {
        let size = record.payload.as_ref().map_or(0, Vec::len);
        assert!(size < limit, "a folded event of {size} bytes");
        let value = record.json();
        let last = i + 1 == hot.len();
        assert_eq!(
            value["closed_by"],
            json!(if last { "quiet" } else { "max_bytes" }),
            "fold {i} of {}",
            hot.len()
        );
        folded += value["n"].as_u64().unwrap();
        assert_eq!(value["folded_count"], value["n"]);
        for tag in value["tags"].as_array().unwrap() {
            assert!(
                tags.insert(tag.as_str().unwrap().to_string()),
                "{tag} in two folds"
            );
        }
    }
    assert_eq!(folded, hot_events, "the split folds add up to the input");
    assert_eq!(tags.len() as u64, hot_events);
    assert_eq!(max_bytes_closes, (hot.len() - 1) as f64);
    let letters = committed_records(&run.dlq, &journal);
    assert!(
        letters.is_empty(),
        "{} unexpected dead letters",
        letters.len()
    );
    assert!(
        !log.contains("aborting and rewinding"),
        "no transaction should abort:\n{log}"
    );
}

/// The output topic takes 16 KiB per record; folds close by `max_events`
/// long before the cap, and a hot key's three folds of 100 tags of ~300
/// bytes (~30 KB each) do not fit the topic. Each becomes a dead letter
/// with the reason and the whole folded event; the other keys' folds are
/// all there, once; the process keeps running.
#[test]
fn a_folded_event_too_large_for_its_topic_becomes_a_dead_letter() {
    let _serial = serial();
    let dir = temp_dir();
    let run = Run::new("big-out");
    create_topic(&run.source, 2);
    let topic_limit = 16_384usize;
    create_topic_with(
        &run.out,
        2,
        &[("max.message.bytes", &topic_limit.to_string())],
    );
    let topology = format!(
        r#"
name: {app}
kafka:
  bootstrap_servers: 127.0.0.1:9
sources:
  events: {{ topic: {source} }}
nodes:
  fold_user:
    type: fold
    input: events
    key_field: user
    fields:
      tags: {{ rule: set, from: /tag }}
      n: {{ rule: count }}
    quiet_for: 10m
    max_events: {PER_USER}
sinks:
  folded: {{ topic: {out}, input: fold_user }}
dead_letter:
  topic: {dlq}
"#,
        app = run.app,
        source = run.source,
        out = run.out,
        dlq = run.dlq,
    );
    let (app, journal) = run.start(dir.path(), &topology);

    let hot_folds = 3;
    let producer = TestProducer::new();
    produce_users(&producer, &run.source);
    for i in 0..hot_folds * PER_USER {
        producer.send_json(
            &run.source,
            "hot",
            &json!({"user": "hot", "tag": big_tag(i, 600)}),
        );
    }
    producer.flush();
    let ends = producer.ends(&run.source, 2);
    wait_committed_to(&app, &run.app, &run.source, &ends, Duration::from_secs(120));
    app.assert_running();
    let too_large = app.wait_metric(
        "streamfold_runtime_records_too_large_total",
        Duration::from_secs(30),
        |n| n >= hot_folds as f64,
    );
    // Dead letters are counted as of commits (published after them).
    let dead_letters = app.wait_metric(
        "streamfold_node_dead_letters_total",
        Duration::from_secs(30),
        |n| n >= hot_folds as f64,
    );
    let log = app.stop();

    let records = committed_records(&run.out, &journal);
    assert_users_folded_once(&records);
    assert!(
        records.iter().all(|r| r.key.as_deref() != Some("hot")),
        "a record over the topic's max.message.bytes was written"
    );
    let letters = committed_records(&run.dlq, &journal);
    assert_eq!(letters.len() as u64, hot_folds);
    let mut tags = BTreeSet::new();
    let mut folded = 0;
    for letter in &letters {
        assert_eq!(letter.key.as_deref(), Some("hot"));
        assert_eq!(letter.header("streamfold.dlq.node"), Some("folded"));
        let reason = letter.header("streamfold.dlq.reason").unwrap();
        assert!(
            reason.starts_with("record_too_large:") && reason.contains(&topic_limit.to_string()),
            "{reason}"
        );
        assert_eq!(letter.header("streamfold.dlq.truncated"), None);
        let value = letter.json();
        assert_eq!(value["closed_by"], json!("max_events"));
        folded += value["n"].as_u64().unwrap();
        tags.extend(
            value["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string()),
        );
    }
    assert_eq!(folded, hot_folds * PER_USER, "nothing lost");
    assert_eq!(tags.len() as u64, hot_folds * PER_USER);
    assert_eq!(too_large, hot_folds as f64);
    assert_eq!(dead_letters, hot_folds as f64);
    assert!(
        !log.contains("aborting and rewinding"),
        "no transaction should abort:\n{log}"
    );
}

/// A `map` node inflates a record past the output topic's limit, and the
/// dead-letter topic is as small: the letter keeps the start of the value
/// and says how large it was, and fits.
#[test]
fn a_dead_letter_too_large_for_its_topic_is_truncated_and_says_so() {
    let _serial = serial();
    let dir = temp_dir();
    let run = Run::new("big-map");
    create_topic(&run.source, 1);
    let limit = 8_192usize;
    for topic in [&run.out, &run.dlq] {
        create_topic_with(topic, 1, &[("max.message.bytes", &limit.to_string())]);
    }
    let topology = format!(
        r#"
name: {app}
kafka:
  bootstrap_servers: 127.0.0.1:9
sources:
  events: {{ topic: {source} }}
nodes:
  inflate:
    type: map
    input: events
    expression: '. + {{padding: ([range(.size)] | map("x") | join(""))}}'
sinks:
  inflated: {{ topic: {out}, input: inflate }}
dead_letter:
  topic: {dlq}
"#,
        app = run.app,
        source = run.source,
        out = run.out,
        dlq = run.dlq,
    );
    let (app, journal) = run.start(dir.path(), &topology);

    let producer = TestProducer::new();
    let sizes = [10u64, 20_000, 30, 50_000, 40];
    for (i, size) in sizes.iter().enumerate() {
        producer.send_json(
            &run.source,
            &format!("k{i}"),
            &json!({"i": i, "size": size}),
        );
    }
    producer.flush();
    let ends = producer.ends(&run.source, 1);
    wait_committed_to(&app, &run.app, &run.source, &ends, Duration::from_secs(120));
    app.assert_running();
    app.stop();

    let records = committed_records(&run.out, &journal);
    let kept: BTreeMap<String, Value> = records
        .iter()
        .map(|r| (r.key.clone().unwrap(), r.json()))
        .collect();
    assert_eq!(kept.keys().cloned().collect::<Vec<_>>(), ["k0", "k2", "k4"]);
    let letters = committed_records(&run.dlq, &journal);
    assert_eq!(letters.len(), 2);
    for (letter, key) in letters.iter().zip(["k1", "k3"]) {
        assert_eq!(letter.key.as_deref(), Some(key));
        let payload = letter.payload.as_deref().unwrap();
        assert!(payload.len() < limit, "{} bytes", payload.len());
        let original: usize = letter
            .header("streamfold.dlq.truncated")
            .expect("the letter says it was truncated")
            .parse()
            .unwrap();
        assert!(original > limit, "{original}");
        assert!(payload.starts_with(b"{\""), "the start of the value");
        assert!(
            letter
                .header("streamfold.dlq.reason")
                .unwrap()
                .starts_with("record_too_large:")
        );
    }
}

/// The changelog of the fold's open folds takes 16 KiB per record, less
/// than a hot key's open fold (~60 KB, closed only by quiet). The state
/// value cannot be committed: it becomes a dead letter and the key's state
/// is deleted (a tombstone in the changelog), so the store stays writable,
/// no transaction aborts, and every hot event is either in a folded event
/// or in a dropped state's count.
#[test]
fn a_state_value_too_large_for_its_changelog_is_dead_lettered_and_the_store_stays_writable() {
    let _serial = serial();
    let dir = temp_dir();
    let run = Run::new("big-state");
    create_topic(&run.source, 2);
    let limit = 16_384usize;
    create_topic_with(
        &format!("{}-fold_user-open-changelog", run.app),
        2,
        &[
            ("cleanup.policy", "compact"),
            ("max.message.bytes", &limit.to_string()),
        ],
    );
    let topology = format!(
        r#"
name: {app}
kafka:
  bootstrap_servers: 127.0.0.1:9
sources:
  events: {{ topic: {source} }}
nodes:
  fold_user:
    type: fold
    input: events
    key_field: user
    fields:
      tags: {{ rule: set, from: /tag }}
      n: {{ rule: count }}
    quiet_for: 3s
sinks:
  folded: {{ topic: {out}, input: fold_user, create: true }}
dead_letter:
  topic: {dlq}
"#,
        app = run.app,
        source = run.source,
        out = run.out,
        dlq = run.dlq,
    );
    let (app, journal) = run.start(dir.path(), &topology);

    let hot_events = 200u64;
    let producer = TestProducer::new();
    produce_users(&producer, &run.source);
    for i in 0..hot_events {
        producer.send_json(
            &run.source,
            "hot",
            &json!({"user": "hot", "tag": big_tag(i, 300)}),
        );
    }
    producer.flush();
    let ends = producer.ends(&run.source, 2);
    wait_committed_to(&app, &run.app, &run.source, &ends, Duration::from_secs(120));
    app.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(60),
        |n| n >= USERS as f64,
    );
    // The hot key's timer fires too (on a dropped fold: nothing to close).
    std::thread::sleep(Duration::from_secs(4));
    app.assert_running();
    let too_large = app.metric("streamfold_runtime_records_too_large_total");
    let log = app.stop();

    let records = committed_records(&run.out, &journal);
    assert_users_folded_once(&records);
    let letters = committed_records(&run.dlq, &journal);
    assert!(!letters.is_empty(), "the hot key's state was never dropped");
    let mut accounted = 0;
    for letter in &letters {
        assert_eq!(letter.key.as_deref(), Some("hot"));
        assert_eq!(letter.header("streamfold.dlq.node"), Some("fold_user-open"));
        let reason = letter.header("streamfold.dlq.reason").unwrap();
        assert!(
            reason.starts_with("record_too_large:")
                && reason.ends_with("the key's state was dropped"),
            "{reason}"
        );
        accounted += letter.json()["count"].as_u64().unwrap();
    }
    for record in records.iter().filter(|r| r.key.as_deref() == Some("hot")) {
        accounted += record.json()["n"].as_u64().unwrap();
    }
    assert_eq!(accounted, hot_events, "every hot event is accounted for");
    assert_eq!(too_large, letters.len() as f64);
    assert!(
        !log.contains("aborting and rewinding"),
        "no transaction should abort:\n{log}"
    );
}
