//! A restart after downtime finds a hundred
//! thousand folds overdue. They fire in bounded rounds, each its own
//! transaction (no transaction outlives `transaction.timeout.ms`, so none
//! is mistaken for fencing), with bounded memory, and each fold comes out
//! exactly once.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::*;

const ACCOUNTS: u64 = 100_000;
const PARTITIONS: i32 = 2;

fn topology(dir: &Path, app: &str, source: &str) -> std::path::PathBuf {
    let path = dir.join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 100ms }}
sources:
  events: {{ topic: {source}, format: json }}
nodes:
  fold_account:
    type: fold
    input: events
    fields:
      n: {{ rule: count }}
    quiet_for: 30s
    max_wait: 1h
sinks:
  folded: {{ topic: {app}-folded, input: fold_account, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

/// Peak resident memory of a process, from `/proc` (KiB).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn a_hundred_thousand_overdue_folds_fire_in_bounded_rounds_after_a_restart() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-overdue");
    let source = unique("overdue-events");
    create_topic(&source, PARTITIONS);
    let producer = TestProducer::new();
    for i in 0..ACCOUNTS {
        let account = format!("account_{i}");
        producer.send_json(&source, &account, &json!({"account_id": account}));
    }
    producer.flush();
    let end = producer.ends(&source, PARTITIONS);
    let journal = dir.path().join("journal");
    let config = AppConfig {
        topology: topology(dir.path(), &app, &source),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: true,
        args: vec!["--txn-journal".into(), journal.display().to_string()],
    };

    // Every account opens a fold; the process stops before any goes quiet.
    let first = App::start(&config, dir.path());
    wait_committed_to(&first, &app, &source, &end, Duration::from_secs(300));
    first.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == ACCOUNTS as f64
    });
    first.stop();
    // Downtime: every fold's quiet timer comes due meanwhile.
    std::thread::sleep(Duration::from_secs(31));

    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(300),
        |n| n == 0.0,
    );
    let committed = second.metric("streamfold_transactions_committed_total");
    let peak_mib = peak_rss_kib(second.pid()) / 1024;
    let log = second.stop();

    let outputs = read_to_end(&format!("{app}-folded"), Duration::from_secs(120));
    let journal = TxnJournal::read(&journal);
    let mut per_account: BTreeMap<String, u64> = BTreeMap::new();
    let mut excused = 0;
    for record in &outputs {
        let label = record.header("streamfold.txn").unwrap();
        assert!(
            journal.begun.contains(label),
            "{label} is not in the journal"
        );
        if !journal.committed.contains(label) {
            excused += 1;
            continue;
        }
        let value = record.json();
        assert_eq!(value["n"], json!(1), "{value}");
        assert_eq!(value["closed_by"], json!("quiet"), "{value}");
        *per_account.entry(record.key.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(per_account.len() as u64, ACCOUNTS, "every fold came out");
    assert!(
        per_account.values().all(|n| *n == 1),
        "each fold came out once"
    );
    assert_eq!(excused, 0);
    // Bounded rounds: at most 10,000 timers per task and punctuation, a
    // commit after each, so the restart's firing took at least five
    // transactions (two tasks).
    assert!(
        committed >= (ACCOUNTS / (10_000 * PARTITIONS as u64)) as f64,
        "{committed} transactions fired {ACCOUNTS} timers"
    );
    assert!(!log.contains("fenced"), "no fencing:\n{log}");
    assert!(!log.contains("aborting"), "no transaction failed:\n{log}");
    // Bounded memory: a round holds at most 10,000 folded events.
    eprintln!("peak RSS while firing {ACCOUNTS} overdue timers: {peak_mib} MiB");
    assert!(peak_mib < 512, "peak RSS {peak_mib} MiB");
}

/// An event-time jump: every key's fold opened at `t0`, then a stream of
/// records a day later. Each record advances the task's event clock past
/// every deadline and fires a bounded number of timers; a batch of such
/// records must not close every fold in one transaction: timers that come
/// due on the event clock fire at most [`TIMERS_PER_TRANSACTION`] per task
/// and transaction, as punctuation does, and each fold still comes out
/// exactly once.
#[test]
fn an_event_time_jump_closes_its_folds_over_bounded_transactions() {
    const KEYS: u64 = 30_000;
    /// The runtime's bound, per task and transaction.
    const TIMERS_PER_TRANSACTION: usize = 10_000;
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-jump");
    let source = unique("jump-events");
    // One partition: one task, so every fold is due on one event clock.
    create_topic(&source, 1);
    let path = dir.path().join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 2s }}
sources:
  events: {{ topic: {source}, format: json, timestamp: /at }}
nodes:
  fold_key:
    type: fold
    input: events
    fields:
      n: {{ rule: count }}
    quiet_for: 1m
    clock: event
sinks:
  folded: {{ topic: {app}-folded, input: fold_key, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    let t0 = 1_735_689_600_000i64;
    let producer = TestProducer::new();
    for i in 0..KEYS {
        producer.send_json(&source, &format!("k{i}"), &json!({"at": t0}));
    }
    // A day later: enough records to fire every timer at 1,024 a record.
    for i in 0..100 {
        producer.send_json(
            &source,
            &format!("late{i}"),
            &json!({"at": t0 + 86_400_000}),
        );
    }
    producer.flush();
    let end = producer.ends(&source, 1);
    let running = App::start(
        &AppConfig {
            topology: path,
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: Vec::new(),
            txn_header: true,
            args: Vec::new(),
        },
        dir.path(),
    );
    wait_committed_to(&running, &app, &source, &end, Duration::from_secs(300));
    running.wait_metric(
        "streamfold_node_records_out_total",
        Duration::from_secs(300),
        |n| n >= KEYS as f64,
    );
    running.stop();
    let folded = read_to_end(&format!("{app}-folded"), Duration::from_secs(120));
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_transaction: BTreeMap<String, usize> = BTreeMap::new();
    for record in &folded {
        *per_key.entry(record.key.clone().unwrap()).or_default() += 1;
        *per_transaction
            .entry(record.header("streamfold.txn").unwrap().to_string())
            .or_default() += 1;
    }
    let opened: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
    assert!(
        opened.iter().all(|k| per_key.get(k) == Some(&1)),
        "every fold of t0 once: {} keys, {} records",
        per_key.len(),
        folded.len()
    );
    let largest = per_transaction.values().max().copied().unwrap_or(0);
    eprintln!(
        "{} folded events in {} transactions, at most {largest} in one",
        folded.len(),
        per_transaction.len()
    );
    assert!(
        largest <= TIMERS_PER_TRANSACTION,
        "{largest} folds closed in one transaction"
    );
}
