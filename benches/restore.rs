//! Restore benchmark: how fast a task's state comes back from its
//! changelogs into an empty state directory.
//!
//! ```text
//! cargo bench --bench restore -- [--records N] [--repeat R] [--partitions 1,4]
//!                                 [--cache-entries C]
//! ```
//!
//! For each partition count P (1, then 4):
//!
//! 1. The real runtime writes the state. `streamfold-loadgen` produces N/2
//!    post-metric events (default N = 5,000,000), each for its own account,
//!    to a topic with P partitions on the Apache Kafka node started for the
//!    run (tests/support/broker.rs, or `STREAMFOLD_TEST_BOOTSTRAP`);
//!    streamfold's social-metrics topology (exactly_once, folds kept
//!    open: `quiet_for` 1h) folds them, so each
//!    event leaves one `fold_account-open` and one `fold_account-timers`
//!    record in the changelogs, written by the runtime's own transactions
//!    with its writer-chain headers: N changelog records of distinct keys
//!    with JSON values. The writer stops gracefully; its state directory is
//!    the reference.
//! 2. R times (3): a fresh instance of the same application restores from
//!    an empty state directory. Each task logs `Restore finished.` with the
//!    records it restored and its milliseconds from the start of its
//!    restore to its end; per partition, records/s is the one over the
//!    other, and in total it is every record over the span from the first
//!    task's start to the last task's end (log timestamps). The group join
//!    before is not timed.
//! 3. Every run is checked, not timed: the restore is complete by offsets
//!    (each task's saved changelog offsets equal the changelog partitions'
//!    end offsets, and the restored counts add up to the records there),
//!    and every key's restored value equals the writer's.
//!
//! Medians of R are printed as a Markdown table, with `uptime`'s load
//! averages at the start of each run (the machine is shared), and the
//! highest peak RSS (VmHWM) of the writer and the restores: with N/2
//! distinct keys in the fold's stores, it shows the memory the topology's
//! `state:` section bounds (`--cache-entries` sets its `cache_entries`;
//! the block cache and write buffers keep the topology's defaults).
//!
//! Under `cargo test` (no `--bench` argument) it runs once on 20,000
//! changelog records as a smoke test of the restore and of the harness;
//! its figures mean nothing, its checks do.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

use support::*;

struct Options {
    /// Changelog records per scenario (two per event).
    records: u64,
    repeat: usize,
    partitions: Vec<i32>,
    /// `--cache-entries`: the topology's `state.cache_entries`.
    cache_entries: Option<usize>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench");
    let mut o = Options {
        records: if benchmarking { 5_000_000 } else { 20_000 },
        repeat: if benchmarking { 3 } else { 1 },
        partitions: vec![1, 4],
        cache_entries: None,
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--records" => o.records = value.parse().expect("--records N"),
            "--repeat" => o.repeat = value.parse().expect("--repeat N"),
            "--cache-entries" => {
                o.cache_entries = Some(value.parse().expect("--cache-entries N"));
            }
            "--partitions" => {
                o.partitions = value
                    .split(',')
                    .map(|p| p.parse().expect("--partitions 1,4"))
                    .collect();
            }
            // cargo passes `--bench`; ignore what is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// CPU seconds of a process's threads, by kind: the main thread (which
/// restores), RocksDB's background threads (flushes, compactions),
/// librdkafka's threads (fetching, decompressing), the rest.
fn cpu_by_thread(pid: u32) -> BTreeMap<&'static str, f64> {
    let mut out = BTreeMap::new();
    for (thread, seconds) in thread_cpu_seconds(pid) {
        // `name/tid`: the name may hold a `/`, the thread id does not.
        let name = thread
            .rsplit_once('/')
            .map_or(thread.as_str(), |(name, _)| name);
        let kind = match name {
            "streamfold" => "main",
            c if c.starts_with("rocksdb") => "rocksdb",
            c if c.starts_with("rdk:") => "librdkafka",
            _ => "other",
        };
        *out.entry(kind).or_insert(0.0) += seconds;
    }
    out
}

/// The application: one name, so every restore reads the writer's
/// changelogs and the group's committed offsets.
struct Scenario {
    app: String,
    topic: String,
    partitions: i32,
    events: u64,
    /// `state.cache_entries`, when not the topology's default.
    cache_entries: Option<usize>,
}

impl Scenario {
    fn config(&self, state_dir: PathBuf, instance: &str) -> AppConfig {
        AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: instance.into(),
            state_dir,
            env: vec![
                ("STREAMFOLD_APP".into(), self.app.clone()),
                ("POST_METRICS_TOPIC".into(), self.topic.clone()),
                ("FOLDED_TOPIC".into(), format!("{}-folded", self.app)),
                ("DEAD_LETTER_TOPIC".into(), format!("{}-dlq", self.app)),
                // Every fold stays open: the state is all there.
                ("FOLD_QUIET_FOR".into(), "1h".into()),
                ("FOLD_MAX_WAIT".into(), "2h".into()),
            ]
            .into_iter()
            .chain(
                self.cache_entries
                    .map(|n| ("STREAMFOLD_CACHE_ENTRIES".into(), n.to_string())),
            )
            .collect(),
            txn_header: false,
            args: Vec::new(),
        }
    }
}

/// One task's restore, from its `Restore finished.` line.
struct TaskRestore {
    task: i32,
    restored: u64,
    millis: u64,
    /// When it ended, ms since the epoch (the line's timestamp).
    ended: f64,
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

fn restores(log: &str) -> Vec<TaskRestore> {
    log.lines()
        .filter(|l| l.contains("Restore finished."))
        .map(|line| {
            let stamp = line.split_whitespace().next().unwrap_or_default();
            let ended = humantime::parse_rfc3339_weak(stamp)
                .unwrap_or_else(|e| panic!("no timestamp in {line:?}: {e}"))
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                * 1000.0;
            let number = |name| {
                field(line, name)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            };
            TaskRestore {
                task: number("task") as i32,
                restored: number("restored"),
                millis: number("millis"),
                ended,
            }
        })
        .collect()
}

/// The changelog offsets a stopped task saved with its state.
fn saved_offsets(task_dir: &Path) -> BTreeMap<String, i64> {
    let db = rocksdb::DB::open_for_read_only(&rocksdb::Options::default(), task_dir, false)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", task_dir.display()));
    let bytes = db
        .get(b"streamfold.meta/changelog_offsets")
        .unwrap()
        .expect("saved changelog offsets");
    serde_json::from_slice(&bytes).unwrap()
}

/// Committed records of `topic`'s `partition` from `offset` to its end
/// (read_committed, to the end librdkafka reports).
fn records_from(topic: &str, partition: i32, offset: i64) -> u64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = plain_client()
        .set("group.id", unique("bench-restore-check"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
        .unwrap();
    consumer.assign(&list).unwrap();
    let mut records = 0;
    loop {
        match consumer.poll(Duration::from_secs(30)) {
            Some(Ok(_)) => records += 1,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return records,
            Some(Err(e)) => panic!("reading {topic} partition {partition}: {e}"),
            None => panic!("no end of {topic} partition {partition} within 30s"),
        }
    }
}

/// Fails unless every store of every task holds the same entries in
/// `restored` as in `live` (compared in key order, without loading either
/// into memory); returns the number of entries compared.
fn assert_same_stores(live: &Path, restored: &Path, partitions: i32) -> u64 {
    let mut compared = 0;
    for task in 0..partitions {
        let open = |dir: &Path| {
            let path = dir.join(task.to_string());
            let options = rocksdb::Options::default();
            let families = rocksdb::DB::list_cf(&options, &path).unwrap();
            let db = rocksdb::DB::open_cf_for_read_only(&options, &path, &families, false)
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
            (db, families)
        };
        let (a, families) = open(live);
        let (b, restored_families) = open(restored);
        let mut expected = families.clone();
        let mut actual = restored_families.clone();
        expected.sort();
        actual.sort();
        assert_eq!(expected, actual, "task {task}: the same stores");
        for family in families
            .iter()
            .filter(|f| *f != rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
        {
            let mut x = a.iterator_cf(a.cf_handle(family).unwrap(), rocksdb::IteratorMode::Start);
            let mut y = b.iterator_cf(b.cf_handle(family).unwrap(), rocksdb::IteratorMode::Start);
            loop {
                match (x.next().map(Result::unwrap), y.next().map(Result::unwrap)) {
                    (None, None) => break,
                    (l, r) => {
                        assert_eq!(
                            l, r,
                            "task {task} store {family}: the restored entry (right) differs from the writer's (left)"
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    compared
}

/// Produces the events and has the runtime fold them; returns the
/// writer's state directory and its peak RSS in MiB.
fn write_state(scenario: &Scenario, dir: &Path) -> (PathBuf, f64) {
    create_topic(&scenario.topic, scenario.partitions);
    let produced = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .arg("--bootstrap-servers")
        .arg(&broker().bootstrap)
        .args(["produce", "--topic", &scenario.topic])
        .args(["--partitions", &scenario.partitions.to_string()])
        .args(["--events", &scenario.events.to_string()])
        .args(["--accounts", &scenario.events.to_string()])
        .status()
        .unwrap();
    assert!(produced.success());
    let state = dir.join("writer");
    let writer = App::start(&scenario.config(state.clone(), "writer"), dir);
    let started = std::time::Instant::now();
    // Published as of commits: every account's fold is committed.
    writer.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(3600),
        |n| n == scenario.events as f64,
    );
    eprintln!(
        "the runtime folded {} events into {} open folds in {:.1}s",
        scenario.events,
        scenario.events,
        started.elapsed().as_secs_f64()
    );
    let rss = peak_rss_mib(writer.pid());
    eprintln!(
        "writer: peak RSS {rss:.0} MiB; RocksDB block cache {:.0} MiB, memtables {:.0} MiB at the end",
        writer.metric("streamfold_state_block_cache_bytes") / MIB,
        writer.metric("streamfold_state_write_buffer_bytes") / MIB,
    );
    writer.stop();
    (state.join(&scenario.app), rss)
}

const MIB: f64 = 1024.0 * 1024.0;

struct Run {
    per_partition: Vec<f64>,
    total: f64,
    /// The slowest task's restore.
    seconds: f64,
    records: u64,
    load: String,
    /// CPU seconds of the restoring process by thread kind, and of the
    /// broker, while it ran.
    cpu: BTreeMap<&'static str, f64>,
    /// The restoring process's peak RSS, MiB.
    rss: f64,
}

fn restore_run(scenario: &Scenario, live: &Path, dir: &Path, run: usize) -> Run {
    let load = load_average();
    let state = dir.join(format!("restore-{run}"));
    let broker = Some(broker().pid());
    let broker_before = broker.map_or(0.0, cpu_seconds);
    let app = App::start(&scenario.config(state.clone(), "restorer"), dir);
    // A task starts once every changelog partition of it was read to its
    // end (its last stable offset): offsets decide, not a quiet period.
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(3600),
        |n| n == scenario.partitions as f64,
    );
    let mut cpu = cpu_by_thread(app.pid());
    if let Some(pid) = broker {
        cpu.insert("broker", cpu_seconds(pid) - broker_before);
    }
    let rss = peak_rss_mib(app.pid());
    let log = app.stop();
    let tasks = restores(&log);
    assert_eq!(
        tasks.len(),
        scenario.partitions as usize,
        "one restore per task; log:\n{log}"
    );

    let changelogs = scenario
        .config(state.clone(), "restorer")
        .changelog_topics();
    assert!(!changelogs.is_empty(), "the topology has stores");
    let mut records = 0;
    for task in &tasks {
        let saved = saved_offsets(&state.join(&scenario.app).join(task.task.to_string()));
        for topic in &changelogs {
            let at = saved.get(topic).copied().unwrap_or(0);
            let end = partition_end(topic, task.task);
            // Transaction markers take offsets too: after the last
            // record restored, the changelog holds no committed record.
            assert!(
                at <= end,
                "task {}: {topic} saved at {at}, beyond its end {end}",
                task.task
            );
            let beyond = records_from(topic, task.task, at);
            assert_eq!(
                beyond, 0,
                "task {}: {beyond} committed records of {topic} at or after the saved offset {at} (end {end}) were not restored",
                task.task
            );
        }
        records += task.restored;
    }
    let compared = assert_same_stores(live, &state.join(&scenario.app), scenario.partitions);
    assert!(
        compared >= 2 * scenario.events,
        "every fold and its timer compared ({compared})"
    );

    let first_start = tasks
        .iter()
        .map(|t| t.ended - t.millis as f64)
        .fold(f64::INFINITY, f64::min);
    let last_end = tasks.iter().map(|t| t.ended).fold(0.0, f64::max);
    let span = ((last_end - first_start) / 1000.0).max(1e-3);
    let per_partition: Vec<f64> = tasks
        .iter()
        .map(|t| t.restored as f64 / (t.millis.max(1) as f64 / 1000.0))
        .collect();
    let seconds = tasks.iter().map(|t| t.millis).max().unwrap_or(0) as f64 / 1000.0;
    for t in &tasks {
        eprintln!(
            "  task {}: {} records in {:.2}s, {:.0} records/s",
            t.task,
            t.restored,
            t.millis as f64 / 1000.0,
            t.restored as f64 / (t.millis.max(1) as f64 / 1000.0)
        );
    }
    let _ = std::fs::remove_dir_all(&state);
    Run {
        per_partition,
        total: records as f64 / span,
        seconds,
        records,
        load,
        cpu,
        rss,
    }
}

fn main() {
    let o = options();
    let dir = tempfile::Builder::new()
        .prefix("streamfold-bench-restore-")
        .tempdir()
        .unwrap();
    eprintln!("broker {}", broker().bootstrap);
    let commit = head_commit();
    let mut table = Vec::new();
    for &partitions in &o.partitions {
        let scenario = Scenario {
            app: unique("bench-restore"),
            topic: unique("bench-restore-posts"),
            partitions,
            events: o.records / 2,
            cache_entries: o.cache_entries,
        };
        let scenario_dir = dir.path().join(&scenario.app);
        std::fs::create_dir_all(&scenario_dir).unwrap();
        let (live, writer_rss) = write_state(&scenario, &scenario_dir);
        let mut per_partition = Vec::new();
        let mut totals = Vec::new();
        let mut seconds = Vec::new();
        let mut loads = Vec::new();
        let mut rss = vec![writer_rss];
        let mut records = 0;
        for run in 0..o.repeat {
            let r = restore_run(&scenario, &live, &scenario_dir, run);
            let cpu: Vec<String> = r
                .cpu
                .iter()
                .map(|(kind, seconds)| format!("{kind} {seconds:.1}s"))
                .collect();
            eprintln!(
                "{partitions} partition(s), run {run}: {} records, {:.0} records/s in total, slowest task {:.2}s (load {}); peak RSS {:.0} MiB; CPU: {}",
                r.records,
                r.total,
                r.seconds,
                r.load,
                r.rss,
                cpu.join(", ")
            );
            rss.push(r.rss);
            per_partition.extend(r.per_partition);
            totals.push(r.total);
            seconds.push(r.seconds);
            loads.push(r.load);
            records = r.records;
        }
        table.push((
            partitions,
            records,
            median(&per_partition),
            median(&totals),
            median(&seconds),
            rss.iter().copied().fold(0.0, f64::max),
            loads.join("; "),
        ));
        let _ = std::fs::remove_dir_all(&scenario_dir);
    }
    println!(
        "\nrestore from an empty state directory, social-metrics fold state (commit {commit}); medians of {} runs\n",
        o.repeat
    );
    println!(
        "| partitions restored together | changelog records | records/s per partition | records/s in total | slowest task | peak RSS (writer and restores) | load averages (1, 5, 15 min) at each run |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (partitions, records, per, total, seconds, rss, loads) in table {
        println!(
            "| {partitions} | {records} | {per:.0} | {total:.0} | {seconds:.2} s | {rss:.0} MiB | {loads} |"
        );
    }
}
