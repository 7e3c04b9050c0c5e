//! Liveness and readiness on the metrics port against Apache Kafka:
//! `/readyz` answers 503 while a task restores and 200 once it runs;
//! `/healthz` answers 200 throughout; `/metrics` is served beside them.
//!
//! The restore is held open by the broker, not by the clock: a fetch
//! quota on the instance's client id (set through Kafka's Admin API,
//! `tests/kafka/ClientQuota.java`) of a few bytes a second, below any one
//! fetch, so the broker answers the restore consumers' fetches empty
//! until the test has seen the instance restoring and lifted the quota.
//! (What is left to restore is then known before a record was read.)

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// Accounts, one open fold each: with their metric names, about a
/// megabyte of changelog.
const ACCOUNTS: usize = 4_000;

/// `GET path` on the app's metrics port: status and body (none while the
/// port is not up).
fn get(app: &App, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect((app.metrics_host.as_str(), app.metrics_port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Polls `path` until `accept` takes an answer; the answer.
fn wait_for(
    app: &App,
    path: &str,
    what: &str,
    accept: impl Fn(u16, &Value) -> bool,
) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = None;
    loop {
        if let Some((status, body)) = get(app, path) {
            let report: Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{path} answers JSON: {e}: {body}"));
            if accept(status, &report) {
                return (status, report);
            }
            last = Some((status, report));
        }
        assert!(
            Instant::now() < deadline,
            "{path}: {what} never came; last answer {last:?}; log:\n{}",
            app.log_text()
        );
        app.assert_running();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets (`Some`) or lifts (`None`) the fetch quota of `client_id`.
fn fetch_quota(client_id: &str, bytes_per_second: Option<u64>) {
    let kafka = Command::new(repo().join("scripts/install-kafka.sh"))
        .output()
        .expect("scripts/install-kafka.sh");
    assert!(kafka.status.success());
    let kafka = String::from_utf8(kafka.stdout).unwrap();
    let rate = bytes_per_second.map_or("none".to_string(), |b| b.to_string());
    let status = Command::new("java")
        .arg("-cp")
        .arg(format!("{}/libs/*", kafka.trim()))
        .arg(repo().join("tests/kafka/ClientQuota.java"))
        .args([broker().bootstrap.as_str(), client_id, rate.as_str()])
        .status()
        .expect("java runs");
    assert!(status.success(), "setting the quota of {client_id} failed");
}

/// The value of `name=` in a log line (its fields are `name=value`).
fn log_field<'a>(line: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}=");
    line.split_whitespace()
        .find_map(|field| field.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

fn write_topology(dir: &Path, app: &str, source: &str) -> std::path::PathBuf {
    let path = dir.join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka:
  bootstrap_servers: 'unused:9092'
  # Small fetches: the quota throttles every one of them.
  consumer: {{ max.partition.fetch.bytes: 16384 }}
processing: {{ commit_interval: 100ms }}
sources:
  events: {{ topic: {source}, format: json }}
nodes:
  per_account:
    type: fold
    input: events
    fields:
      metrics: {{ rule: key_union, from: /metrics }}
    quiet_for: 1h
sinks:
  folded: {{ topic: {app}-folded, input: per_account, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

#[test]
fn readyz_answers_503_while_a_task_restores_and_200_once_it_runs() {
    let _serial = serial();
    let dir = temp_dir();
    let app_name = unique("sf-ready");
    let source = unique("events");
    create_topic(&source, 1);
    let producer = TestProducer::new();
    for i in 0..ACCOUNTS {
        let metrics: serde_json::Map<String, Value> = (0..12)
            .map(|m| (format!("metric_number_{m:02}_of_account"), json!(i)))
            .collect();
        producer.send_json(
            &source,
            &format!("account_{i:05}"),
            &json!({ "metrics": metrics }),
        );
    }
    producer.flush();
    let end = producer.ends(&source, 1);
    let config = AppConfig {
        topology: write_topology(dir.path(), &app_name, &source),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };

    // A first run folds every account and leaves every fold open: a
    // changelog of one record per account.
    let first = App::start(&config, dir.path());
    wait_committed_to(&first, &app_name, &source, &end, Duration::from_secs(120));
    let (status, report) = wait_for(&first, "/readyz", "ready", |s, _| s == 200);
    assert_eq!(report["tasks"]["running"], 1, "{report}");
    assert_eq!(status, 200);
    first.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == ACCOUNTS as f64
    });
    first.stop();

    // Without its local state, the next run restores the whole changelog,
    // and reads none of it while the quota holds.
    std::fs::remove_dir_all(&config.state_dir).unwrap();
    let client_id = format!("{app_name}-{}", config.instance);
    fetch_quota(&client_id, Some(64));
    let second = App::start(&config, dir.path());
    let (status, restoring) = wait_for(&second, "/readyz", "a task restoring", |_, r| {
        r["tasks"]["restoring"] == 1
    });
    assert_eq!(status, 503, "{restoring}");
    assert_eq!(restoring["ready"], false, "{restoring}");
    let (status, alive) = get(&second, "/healthz").expect("/healthz answers");
    assert_eq!(status, 200, "{alive}");
    assert!(
        restoring["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("restoring")),
        "{restoring}"
    );
    // The metrics are served beside the health endpoints.
    let (status, metrics) = get(&second, "/metrics").expect("/metrics answers");
    assert_eq!(status, 200);
    // With the process's own (read at the scrape) and the build's.
    for name in [
        "streamfold_runtime_tasks_running",
        "streamfold_build_info{topology=",
        "streamfold_runtime_tasks_restoring",
        "streamfold_runtime_rebalances_total",
        "streamfold_runtime_batch_duration_seconds",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_threads",
    ] {
        assert!(metrics.contains(name), "{name} is not served: {metrics}");
    }

    // A long restore says how far it is every few seconds, and the gauge of
    // restoring tasks counts it.
    let progress = second.wait_log_lines("Restoring.", 1, Duration::from_secs(60));
    assert!(
        progress[0].contains("tasks=1") && progress[0].contains("remaining="),
        "{progress:?}"
    );
    assert!(progress[0].contains("per_second="), "{progress:?}");
    // What is left is the whole changelog (a record per account, and the
    // transactions' markers), known from where the changelog ends before
    // the restore read anything; the gauge says the same.
    let remaining: f64 = log_field(&progress[0], "remaining")
        .parse()
        .unwrap_or_else(|_| panic!("{progress:?}"));
    assert!(remaining >= ACCOUNTS as f64, "{progress:?}");
    assert!(
        second.metric("streamfold_restore_records_remaining") >= ACCOUNTS as f64,
        "{}",
        second.metrics_text()
    );
    assert_eq!(second.metric("streamfold_runtime_tasks_restoring"), 1.0);
    assert_eq!(second.metric("streamfold_runtime_tasks_running"), 0.0);
    // (The broker's throttle of the connections it held back outlasts the
    // quota by tens of seconds.)
    fetch_quota(&client_id, None);
    let (_, ready) = wait_for(&second, "/readyz", "ready after the restore", |s, _| {
        s == 200
    });
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["tasks"]["running"], 1, "{ready}");
    assert_eq!(ready["tasks"]["restoring"], 0, "{ready}");
    assert_eq!(second.metric("streamfold_runtime_tasks_restoring"), 0.0);
    assert!(second.metric("streamfold_restore_records_restored_total") > 0.0);
    second.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == ACCOUNTS as f64
    });
    // An unknown path is 404.
    assert_eq!(get(&second, "/nowhere").map(|(s, _)| s), Some(404));
    second.stop();
}
