//! `streamfold reset` against Apache Kafka: it refuses while the
//! application runs, `--dry-run` prints the plan and changes nothing, and
//! a reset deletes the internal topics and the group's offsets, commits
//! the sources' start and removes the local state, so the next run
//! processes everything again from a clean state; `--to` a time starts
//! each partition at its first record at or after it.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;
use support::*;

const KEYS: usize = 20;
const EVENTS: i64 = 100;

fn write_topology(dir: &Path, app: &str, source: &str) -> PathBuf {
    let path = dir.join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: '{bootstrap}' }}
processing: {{ commit_interval: 100ms }}
sources:
  events: {{ topic: {source}, format: json }}
nodes:
  per_key:
    type: fold
    input: events
    key_by: /k
    fields: {{ n: {{ rule: count }} }}
    quiet_for: 1h
sinks:
  out: {{ topic: {app}-out, input: per_key, create: true }}
",
            bootstrap = broker().bootstrap
        ),
    )
    .unwrap();
    path
}

fn reset(path: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(streamfold_binary())
        .arg("reset")
        .arg(path)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// Writes event `i` of `0..EVENTS` to partition `i % 2` with timestamp
/// `base + i` seconds, so partition `p` holds event `2 * offset + p` and a
/// time picks known offsets.
fn produce_events(source: &str, base_ms: i64) {
    let producer: BaseProducer = plain_client().create().unwrap();
    for i in 0..EVENTS {
        let key = format!("k{}", i % KEYS as i64);
        let value = json!({"k": key, "i": i}).to_string();
        producer
            .send(
                BaseRecord::to(source)
                    .partition((i % 2) as i32)
                    .timestamp(base_ms + i * 1000)
                    .key(&key)
                    .payload(&value),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn topics() -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = plain_client().create().unwrap();
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .collect()
}

#[test]
fn reset_refuses_while_running_plans_with_dry_run_and_starts_the_application_over() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-reset");
    let source = unique("events");
    create_topic(&source, 2);
    // Whole seconds, a quarter of an hour ago: well inside retention.
    let base_ms = (jiff::Timestamp::now().as_second() - 900) * 1000;
    produce_events(&source, base_ms);
    let end = vec![EVENTS / 2, EVENTS / 2];
    let path = write_topology(dir.path(), &app, &source);
    let state = dir.path().join("state");
    let config = AppConfig {
        topology: path.clone(),
        instance: "a".into(),
        state_dir: state.clone(),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let changelog = format!("{app}-per_key-open-changelog");
    let repartition = format!("{app}-per_key-repartition");

    let running = App::start(&config, dir.path());
    wait_committed_to(&running, &app, &source, &end, Duration::from_secs(120));
    // While it runs, the group has a member: no reset.
    let refused = reset(&path, &state, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains(&format!("the group `{app}` has 1 member(s)")),
        "{}",
        text(&refused.stderr)
    );
    assert!(topics().contains(&changelog));
    assert!(topics().contains(&repartition));
    running.stop();

    let planned = reset(&path, &state, &["--dry-run"]);
    assert!(planned.status.success(), "{}", text(&planned.stderr));
    let plan = text(&planned.stdout);
    assert!(plan.starts_with(&format!("Would reset {app}:\n")), "{plan}");
    assert!(
        plan.contains(&format!("delete topic {changelog}")),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("delete topic {app}-per_key-timers-changelog")),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("delete topic {repartition}")),
        "{plan}"
    );
    assert!(
        !plan.contains(&format!("delete topic {app}-dlq")),
        "dead letters stay: {plan}"
    );
    for (partition, end) in end.iter().enumerate() {
        assert!(
            plan.contains(&format!(
                "commit {source}[{partition}] offset 0 (committed now: {end})"
            )),
            "{plan}"
        );
    }
    assert!(
        plan.contains(&format!(
            "remove local state {}",
            state.join(&app).display()
        )),
        "{plan}"
    );
    // Nothing changed.
    assert!(topics().contains(&changelog));
    assert_eq!(group_committed(&app, &source, 2), end);
    assert!(state.join(&app).exists());

    let done = reset(&path, &state, &[]);
    assert!(done.status.success(), "{}", text(&done.stderr));
    assert!(text(&done.stdout).starts_with(&format!("Reset {app}:\n")));
    assert!(!topics().contains(&changelog));
    assert!(!topics().contains(&repartition));
    assert_eq!(group_committed(&app, &source, 2), vec![0, 0]);
    assert!(!state.join(&app).exists());

    // Started again, it processes every record once more from empty state:
    // one open fold per key, counting each key's events once.
    let again = App::start(&config, dir.path());
    wait_committed_to(&again, &app, &source, &end, Duration::from_secs(120));
    again.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(60),
        |n| n == EVENTS as f64,
    );
    again.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == KEYS as f64
    });
    again.stop();

    // To the end: nothing is read again.
    let latest = reset(&path, &state, &["--to", "latest"]);
    assert!(latest.status.success(), "{}", text(&latest.stderr));
    assert_eq!(group_committed(&app, &source, 2), end);

    // To a time, written with an offset of its own: event 51's second is
    // 51 s after `base_ms`; partition 0 starts at event 52 (offset 26),
    // partition 1 at event 51 (offset 25).
    let at = jiff::Timestamp::from_millisecond(base_ms + 51_000)
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::fixed(jiff::tz::offset(2)))
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    let timed = reset(&path, &state, &["--to", &at, "--dry-run"]);
    assert!(timed.status.success(), "{}", text(&timed.stderr));
    let plan = text(&timed.stdout);
    assert!(
        plan.contains(&format!("commit {source}[0] offset 26 (committed now: 50)")),
        "{plan}"
    );
    let timed = reset(&path, &state, &["--to", &at]);
    assert!(timed.status.success(), "{}", text(&timed.stderr));
    assert_eq!(group_committed(&app, &source, 2), vec![26, 25]);
    // After the last record: every partition's end.
    let later = jiff::Timestamp::now().to_string();
    let timed = reset(&path, &state, &["--to", &later]);
    assert!(timed.status.success(), "{}", text(&timed.stderr));
    assert_eq!(group_committed(&app, &source, 2), end);
}

#[test]
fn reset_names_what_it_accepts_for_a_start_it_cannot_read() {
    // The command line is refused before the topology is read.
    let dir = temp_dir();
    let path = dir.path().join("topology.yaml");
    let out = reset(&path, &dir.path().join("state"), &["--to", "yesterday"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("expected earliest, latest or an RFC 3339 time, found `yesterday`"),
        "{}",
        text(&out.stderr)
    );
}

/// A source topic deleted and created again under the same name while the
/// application runs: the committed positions, the state and the
/// changelogs all describe a log that no longer exists. The application
/// must stop and say how to start over, not read the new log as if it
/// continued the old one.
#[test]
fn a_source_topic_recreated_under_a_running_application_stops_it_naming_reset() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-recreated");
    let source = unique("events");
    create_topic(&source, 2);
    let base_ms = (jiff::Timestamp::now().as_second() - 900) * 1000;
    produce_events(&source, base_ms);
    let end = vec![EVENTS / 2, EVENTS / 2];
    let path = write_topology(dir.path(), &app, &source);
    let config = AppConfig {
        topology: path,
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let running = App::start(&config, dir.path());
    wait_committed_to(&running, &app, &source, &end, Duration::from_secs(120));

    delete_topic(&source);
    create_topic(&source, 2);
    // Fewer records than the old log had: offsets it had passed already.
    let producer = TestProducer::new();
    for i in 0..10 {
        producer.send_json(
            &source,
            &format!("k{i}"),
            &json!({"k": format!("k{i}"), "i": i}),
        );
    }
    producer.flush();

    let (status, log) = running.wait_exit(Duration::from_secs(120));
    assert_eq!(
        status.code(),
        Some(3),
        "exit status 3 (configuration); log:\n{log}"
    );
    assert!(
        log.contains(&format!("source topic `{source}`")) && log.contains("streamfold reset"),
        "the error names the topic and the tool; log:\n{log}"
    );
}
