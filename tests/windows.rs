//! Windowed counts against Apache Kafka, end to end: page views counted
//! per page and 10-second tumbling window, emitted once when each window
//! closes, exactly once under read_committed — across a kill and a restart
//! whose state directory was wiped, so the open windows and the stream
//! time come back from the changelogs. Late views and views without a
//! time are dead-lettered, each exactly once.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const PARTITIONS: i32 = 2;
const PAGES: u64 = 12;
const SIZE: i64 = 10_000;
const GRACE: i64 = 2_000;
const AT: i64 = 1_735_689_600_000;

fn topology(dir: &Path, app: &str, source: &str) -> std::path::PathBuf {
    let path = dir.join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 100ms }}
sources:
  views: {{ topic: {source}, format: json, timestamp: /at }}
nodes:
  per_page:
    type: window
    input: views
    window: tumbling
    size: 10s
    grace: 2s
    on_late: dead_letter
    key_field: page
    fields:
      views: {{ rule: count }}
      users: {{ rule: set, from: /user }}
sinks:
  counts: {{ topic: {app}-counts, input: per_page, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

/// Views `from..to`, keyed by page, 20 ms apart in event time; every 97th
/// is 15 s behind (late: its window has closed), every 89th 1.5 s behind
/// (within grace), every 251st has no time. The end offsets of the partitions.
fn produce(producer: &TestProducer, source: &str, from: u64, to: u64) -> Vec<i64> {
    for i in from..to {
        let page = format!("/page-{}", i % PAGES);
        let mut at = AT + i as i64 * 20;
        if i % 97 == 96 {
            at -= 15_000;
        } else if i % 89 == 88 {
            at -= 1_500;
        }
        let value = if i % 251 == 250 {
            json!({"page": page, "user": format!("u{}", i % 7)})
        } else {
            json!({"page": page, "user": format!("u{}", i % 7), "at": at})
        };
        producer.send_json(source, &page, &value);
    }
    producer.flush();
    producer.ends(source, PARTITIONS)
}

/// What the node must do with the input, partition by partition in offset
/// order as the tasks read it: the windows it emits (page, start → count
/// and users) and the input positions it dead-letters.
struct Model {
    windows: BTreeMap<(String, i64), (u64, BTreeSet<String>)>,
    dead: BTreeSet<(i32, i64)>,
}

fn model(input: &[Consumed]) -> Model {
    let mut stream_time: BTreeMap<i32, i64> = BTreeMap::new();
    let mut open: BTreeMap<(String, i64), (i32, u64, BTreeSet<String>)> = BTreeMap::new();
    let mut dead = BTreeSet::new();
    let mut records: Vec<&Consumed> = input.iter().collect();
    records.sort_by_key(|r| (r.partition, r.offset));
    for record in records {
        let value = record.json();
        let Some(at) = value["at"].as_i64() else {
            dead.insert((record.partition, record.offset));
            continue;
        };
        let now = stream_time.entry(record.partition).or_insert(i64::MIN);
        *now = (*now).max(at);
        let start = at - at.rem_euclid(SIZE);
        if start + SIZE + GRACE <= *now {
            dead.insert((record.partition, record.offset));
            continue;
        }
        let page = value["page"].as_str().unwrap().to_string();
        let window = open
            .entry((page, start))
            .or_insert((record.partition, 0, BTreeSet::new()));
        window.1 += 1;
        window.2.insert(value["user"].as_str().unwrap().to_string());
    }
    // A window is emitted once its partition's stream time closed it.
    let windows = open
        .into_iter()
        .filter(|((_, start), (partition, _, _))| start + SIZE + GRACE <= stream_time[partition])
        .map(|(window, (_, n, users))| (window, (n, users)))
        .collect();
    Model { windows, dead }
}

fn millis(text: &Value) -> i64 {
    let time = humantime::parse_rfc3339(text.as_str().unwrap()).unwrap();
    time.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn windowed_counts_are_exact_across_a_kill_and_a_wiped_state() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-windows");
    let source = unique("page-views");
    create_topic(&source, PARTITIONS);
    let config = AppConfig {
        topology: topology(dir.path(), &app, &source),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let producer = TestProducer::new();

    // 1,500 views over 30 s of event time; the last windows stay open.
    let end = produce(&producer, &source, 0, 1_500);
    let first = App::start(&config, dir.path());
    wait_committed_to(&first, &app, &source, &end, Duration::from_secs(120));
    first.wait_metric(
        "streamfold_window_closed_windows_total",
        Duration::from_secs(60),
        |n| n > 0.0,
    );
    first.kill();
    std::fs::remove_dir_all(&config.state_dir).unwrap();

    // 1,500 more, then one view per page far ahead, which closes every
    // window of the two batches on every partition.
    produce(&producer, &source, 1_500, 3_000);
    for page in 0..PAGES {
        let page = format!("/page-{page}");
        producer.send_json(
            &source,
            &page,
            &json!({"page": page, "user": "flush", "at": AT + 3_600_000}),
        );
    }
    producer.flush();
    let end = producer.ends(&source, PARTITIONS);
    let second = App::start(&config, dir.path());
    wait_committed_to(&second, &app, &source, &end, Duration::from_secs(120));
    let log = second.stop();
    assert!(log.contains("Restore finished"), "no restore in:\n{log}");

    let input = read_to_end(&source, Duration::from_secs(60));
    assert_eq!(input.len(), 3_000 + PAGES as usize);
    let expected = model(&input);
    assert!(expected.windows.len() > 3 * PAGES as usize);
    assert!(expected.dead.len() > 40);

    let mut emitted: BTreeMap<(String, i64), (u64, BTreeSet<String>)> = BTreeMap::new();
    for record in read_to_end(&format!("{app}-counts"), Duration::from_secs(60)) {
        let value = record.json();
        let page = value["page"].as_str().unwrap_or_default().to_string();
        let start = millis(&value["window_start"]);
        assert_eq!(millis(&value["window_end"]), start + SIZE);
        assert_eq!(
            record.key.as_deref(),
            Some(
                format!(
                    "{page}@{}/{}",
                    value["window_start"].as_str().unwrap(),
                    value["window_end"].as_str().unwrap()
                )
                .as_str()
            )
        );
        let users = value["users"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect();
        let n = value["views"].as_u64().unwrap();
        let again = emitted.insert((page.clone(), start), (n, users));
        assert!(again.is_none(), "window {page}@{start} emitted twice");
    }
    assert_eq!(emitted, expected.windows);

    let mut dead: Vec<(i32, i64)> = read_to_end(&format!("{app}-dlq"), Duration::from_secs(60))
        .iter()
        .map(|letter| {
            (
                letter
                    .header("streamfold.dlq.partition")
                    .unwrap()
                    .parse()
                    .unwrap(),
                letter
                    .header("streamfold.dlq.offset")
                    .unwrap()
                    .parse()
                    .unwrap(),
            )
        })
        .collect();
    dead.sort_unstable();
    // Each exactly once.
    assert_eq!(dead, expected.dead.into_iter().collect::<Vec<_>>());
}
