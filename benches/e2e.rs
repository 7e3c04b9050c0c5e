//! End-to-end benchmark: streamfold's social-metrics topology against a
//! bare consumer, on the same topic, broker and machine.
//!
//! ```text
//! cargo bench --bench e2e -- [--events N] [--accounts A] [--partitions P] [--repeat R]
//!                             [--threads T[,T…]] [--instances I[,I…]]
//!                             [--peer quix] [--peer-limit L]
//!                             [--workload social-metrics|question-feed|distributed-counter]
//!                             [--guarantees exactly_once[,at_least_once]]
//!                             [--commit-intervals D[,D…]]
//! ```
//!
//! `--workload` picks the topology and its events (`streamfold-loadgen
//! produce --workload`): social-metrics (the default, described below);
//! question-feed (dedup by event id, a projection per question, ordered
//! thanks totals; one event in ten sent twice; A questions and as many
//! answers); distributed-counter (a rollup per counter through its
//! repartition topic; every event sent twice; A counters). For the last
//! two, N counts distinct events (the topic holds the copies too, and
//! every rate is over the records in the topic), a run ends when every
//! record reached the topology's first stateful node (`dedup_events`,
//! `rollup_counters`: its `streamfold_node_records_in_total`, published
//! as of commits), and the peer and latency steps are social-metrics
//! only.
//!
//! 1. Produces N post-metric events (default 1,000,000) over A accounts
//!    (1,000), keyed by account, to a topic with P partitions (4) on a
//!    nisshi broker started for the run (or `STREAMFOLD_TEST_BOOTSTRAP`).
//! 2. Bare consumer: `streamfold-loadgen bare-consume` reads the topic with
//!    `assign()` (no group join), timed from its first record to its last;
//!    once with librdkafka's defaults (the reference), once with the fetch
//!    setting streamfold uses (`fetch.queue.backoff.ms=10`).
//! 3. streamfold, under exactly_once then at_least_once, each run a fresh
//!    application (group, state): timed from its first record consumed to
//!    its last record committed (both from its metrics, sampled every
//!    25 ms), so the group join is excluded. Peak RSS from /proc (VmHWM).
//!    With `--threads 1,2`, once per number of processing threads (`run
//!    --threads`); by default with the topology's default (the cores).
//!    With `--instances 1,2,4`, once per number of instances of the
//!    application, started together (one group; the time includes the
//!    rebalances as they join), records summed over them, peak RSS the
//!    largest of them. With `--commit-intervals 100ms,1s,5s` (social-metrics
//!    only), once per commit interval (the topology's
//!    `STREAMFOLD_COMMIT_INTERVAL`; by default its 100 ms): a longer
//!    interval makes fewer transactions and changelog writes, for a later
//!    folded event.
//! 4. Latency: with streamfold running (exactly_once), bursts of 100
//!    events for one account (a fold closes at its 100th event) are sent
//!    every 20 ms; latency is from the burst's last event (its timestamp,
//!    the folded event's `last_event_at`) to the folded event reaching a
//!    read_committed consumer. Once per commit interval.
//! 5. With `--peer quix`: Quix Streams (`scripts/quix-peer.sh`, which
//!    installs `quixstreams==3.28.1` into a venv under `~/.cache` the first
//!    time) on the same topic and broker, doing the equivalent work: a
//!    per-account 10 s tumbling window reducing to the union of metric names
//!    and post ids, exactly-once. It is about 15× slower, so it processes
//!    only the first L records it consumes (300,000; `--peer-limit`), timed
//!    from its first record to the end of its final commit.
//!
//! Every measurement is repeated R times (3); the medians are printed as a
//! Markdown table, with streamfold's rate as a ratio of the bare rate.
//!
//! Under `cargo test` (no `--bench` argument) it runs once on 20,000
//! events, with two instances, as a smoke test of the harness itself; its figures mean nothing,
//! and the peer never runs (no Python, no download in CI).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::{Value, json};
use support::*;

struct Options {
    /// Under `cargo test`: a smoke run of every workload.
    smoke: bool,
    workload: Workload,
    events: u64,
    accounts: u64,
    partitions: i32,
    repeat: usize,
    bursts: usize,
    /// Run Quix Streams too (`--peer quix`; only with `--bench`).
    quix: bool,
    /// Records the peer processes (a prefix of the topic).
    peer_limit: u64,
    /// `run --threads` values to measure (none: the default).
    threads: Vec<Option<usize>>,
    /// Numbers of instances to measure.
    instances: Vec<usize>,
    /// Extra arguments of every `streamfold run` (`--run-args`).
    run_args: Vec<String>,
    /// Processing guarantees to measure (`--guarantees`).
    guarantees: Vec<String>,
    /// Commit intervals to measure (`--commit-intervals`; none: the
    /// topology's).
    commit_intervals: Vec<Option<String>>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench");
    let mut o = if benchmarking {
        Options {
            smoke: false,
            workload: Workload::SocialMetrics,
            events: 1_000_000,
            accounts: 1_000,
            partitions: 4,
            repeat: 3,
            bursts: 200,
            quix: false,
            peer_limit: 300_000,
            threads: vec![None],
            instances: vec![1],
            run_args: Vec::new(),
            guarantees: vec!["exactly_once".into(), "at_least_once".into()],
            commit_intervals: vec![None],
        }
    } else {
        Options {
            smoke: true,
            workload: Workload::SocialMetrics,
            events: 20_000,
            accounts: 100,
            partitions: 4,
            repeat: 1,
            bursts: 10,
            quix: false,
            peer_limit: 300_000,
            threads: vec![None],
            // The smoke run goes through the several-instances path.
            instances: vec![2],
            run_args: Vec::new(),
            guarantees: vec!["exactly_once".into(), "at_least_once".into()],
            // And through the topology's commit interval variable.
            commit_intervals: vec![Some("100ms".into())],
        }
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--events" => o.events = value.parse().expect("--events N"),
            "--workload" => o.workload = Workload::parse(&value),
            "--accounts" => o.accounts = value.parse().expect("--accounts N"),
            "--partitions" => o.partitions = value.parse().expect("--partitions N"),
            "--repeat" => o.repeat = value.parse().expect("--repeat N"),
            "--peer" => {
                assert_eq!(value, "quix", "--peer quix (the only peer)");
                // The smoke run under `cargo test` never starts the peer.
                o.quix = benchmarking;
            }
            "--peer-limit" => o.peer_limit = value.parse().expect("--peer-limit N"),
            "--instances" => {
                o.instances = value
                    .split(',')
                    .map(|t| t.parse().expect("--instances I[,I…]"))
                    .collect();
            }
            "--guarantees" => {
                o.guarantees = value.split(',').map(String::from).collect();
                for g in &o.guarantees {
                    assert!(
                        g == "exactly_once" || g == "at_least_once",
                        "--guarantees exactly_once,at_least_once"
                    );
                }
            }
            // Extra `streamfold run` arguments, e.g. `-X key=value`
            // overrides for an experiment: `--run-args "-X a=b -X c=d"`.
            "--run-args" => {
                o.run_args = value.split_whitespace().map(String::from).collect();
            }
            "--commit-intervals" => {
                o.commit_intervals = value.split(',').map(|d| Some(d.to_string())).collect();
            }
            "--threads" => {
                o.threads = value
                    .split(',')
                    .map(|t| Some(t.parse().expect("--threads T[,T…]")))
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
    o.peer_limit = o.peer_limit.min(o.events);
    assert!(
        o.commit_intervals == [None] || o.workload == Workload::SocialMetrics,
        "--commit-intervals: social-metrics only"
    );
    o
}

/// The topology measured, with its events.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    SocialMetrics,
    QuestionFeed,
    DistributedCounter,
}

impl Workload {
    fn parse(name: &str) -> Workload {
        match name {
            "social-metrics" => Workload::SocialMetrics,
            "question-feed" => Workload::QuestionFeed,
            "distributed-counter" => Workload::DistributedCounter,
            _ => panic!("--workload social-metrics|question-feed|distributed-counter"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Workload::SocialMetrics => "social-metrics",
            Workload::QuestionFeed => "question-feed",
            Workload::DistributedCounter => "distributed-counter",
        }
    }

    /// The topology's variables naming its input and outputs (each run
    /// gets output topics of its own), and its first output topic.
    fn env(self, input: &str) -> (Vec<(String, String)>, String) {
        let (input_name, outputs): (&str, &[&str]) = match self {
            Workload::SocialMetrics => ("POST_METRICS_TOPIC", &["FOLDED_TOPIC"]),
            Workload::QuestionFeed => (
                "FEED_EVENTS_TOPIC",
                &["QUESTIONS_TOPIC", "THANKS_TOPIC", "OTHER_EVENTS_TOPIC"],
            ),
            Workload::DistributedCounter => ("COUNTER_EVENTS_TOPIC", &["COUNTER_VALUES_TOPIC"]),
        };
        let outputs: Vec<(String, String)> = outputs
            .iter()
            .map(|name| (name.to_string(), unique("bench-out")))
            .collect();
        let first = outputs[0].1.clone();
        let mut env = vec![
            (input_name.to_string(), input.to_string()),
            ("DEAD_LETTER_TOPIC".into(), unique("bench-dlq")),
        ];
        env.extend(outputs);
        if self == Workload::DistributedCounter {
            // The read-trigger source: empty here, co-partitioned with the
            // events.
            env.push(("COUNTER_READS_TOPIC".into(), format!("{input}-reads")));
        }
        (env, first)
    }

    /// Whether a run has processed `records`, from one instance's
    /// metrics summed over `texts`: for social-metrics, the records whose
    /// offsets it committed; otherwise the records that reached the first
    /// stateful node, after any repartition hop (counted as of commits).
    fn done(self, texts: &[String], records: u64) -> bool {
        let node = match self {
            Workload::SocialMetrics => {
                let committed: f64 = texts
                    .iter()
                    .map(|t| parse_metric(t, "streamfold_runtime_records_committed_total"))
                    .sum();
                return committed >= records as f64;
            }
            Workload::QuestionFeed => "dedup_events",
            Workload::DistributedCounter => "rollup_counters",
        };
        let label = format!("node=\"{node}\"");
        let received: f64 = texts
            .iter()
            .flat_map(|t| t.lines())
            .filter(|l| l.starts_with("streamfold_node_records_in_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        received >= records as f64
    }
}

fn loadgen() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"));
    command.arg("--bootstrap-servers").arg(&broker().bootstrap);
    command
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A fresh application of `workload` over `topic`, under `guarantee`,
/// committing every `commit_interval` (none: the topology's); with the name
/// of its first output topic (social-metrics: the folded events).
fn app_config(
    workload: Workload,
    topic: &str,
    (guarantee, commit_interval): (&str, Option<&str>),
    dir: &std::path::Path,
) -> (AppConfig, String) {
    let app = unique("bench");
    let (mut env, output) = workload.env(topic);
    env.push(("STREAMFOLD_APP".into(), app.clone()));
    env.push(("STREAMFOLD_GUARANTEE".into(), guarantee.into()));
    if let Some(interval) = commit_interval {
        env.push(("STREAMFOLD_COMMIT_INTERVAL".into(), interval.into()));
    }
    let config = AppConfig {
        topology: repo().join(format!("topologies/{}.yaml", workload.name())),
        instance: "bench".into(),
        state_dir: dir.join(&app),
        env,
        txn_header: false,
        args: Vec::new(),
    };
    (config, output)
}

/// Where the commits of a run went, from the instances' metrics: how many,
/// their mean duration and that of each phase, and the share of the run's
/// time an instance spent committing (no record is processed meanwhile).
fn commit_summary(texts: &[String], seconds: f64) -> String {
    let sum = |name: &str, phase: Option<&str>| -> f64 {
        texts
            .iter()
            .flat_map(|text| series(text, name))
            .filter(|(labels, _)| {
                phase.is_none_or(|p| labels.get("phase").map(String::as_str) == Some(p))
            })
            .map(|(_, v)| v)
            .sum()
    };
    let commits = sum("streamfold_commit_duration_seconds_count", None);
    let spent = sum("streamfold_commit_duration_seconds_sum", None);
    let mean_ms = |seconds: f64| 1000.0 * seconds / commits.max(1.0);
    let phases: Vec<String> = ["changelog", "flush", "offsets", "commit", "apply"]
        .iter()
        .map(|phase| {
            let took = sum("streamfold_commit_phase_duration_seconds_sum", Some(phase));
            format!("{phase} {:.1}", mean_ms(took))
        })
        .collect();
    format!(
        "{commits:.0} commits, mean {:.1} ms ({}), {:.0} % of the run's time per instance",
        mean_ms(spent),
        phases.join(", "),
        100.0 * spent / (seconds * texts.len() as f64)
    )
}

/// One streamfold run over the whole topic by `instances` instances with
/// `threads` processing threads each: (records/s, peak RSS MiB of the
/// largest, [`commit_summary`] and when the records consumed reached the
/// topic's: a run ends at the first commit after that, so the gap is up
/// to a commit interval).
fn streamfold_run(
    (workload, topic): (Workload, &str),
    events: u64,
    guarantee: (&str, Option<&str>),
    (threads, instances): (Option<usize>, usize),
    run_args: &[String],
    dir: &std::path::Path,
) -> (f64, f64, String) {
    let (mut config, _) = app_config(workload, topic, guarantee, dir);
    config
        .args
        .extend(threads.map(|t| format!("--threads={t}")));
    config.args.extend_from_slice(run_args);
    let state = config.state_dir.clone();
    // The broker's CPU over the run, when it is this bench's own nisshi.
    let broker_pid = Some(broker().pid());
    let broker_cpu = broker_pid.map(cpu_seconds);
    let apps: Vec<App> = (0..instances)
        .map(|i| {
            let mut config = config.clone();
            config.instance = format!("bench-{i}");
            config.state_dir = state.join(&config.instance);
            App::start(&config, dir)
        })
        .collect();
    let total = |name: &str| -> f64 {
        apps.iter()
            .map(|app| parse_metric(&app.metrics_text(), name))
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut first: Option<Instant> = None;
    let mut consumed: Option<Instant> = None;
    let end = loop {
        let now = Instant::now();
        if first.is_none() || consumed.is_none() {
            let records = total("streamfold_runtime_records_consumed_total");
            if first.is_none() && records > 0.0 {
                first = Some(now);
            }
            if consumed.is_none() && records >= events as f64 {
                consumed = Some(now);
            }
        }
        let texts: Vec<String> = apps.iter().map(App::metrics_text).collect();
        if workload.done(&texts, events) {
            break now;
        }
        for app in &apps {
            assert!(
                now < deadline,
                "streamfold did not finish; log:\n{}",
                app.log_text()
            );
            app.assert_running();
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let rss = apps
        .iter()
        .map(|app| peak_rss_mib(app.pid()))
        .fold(0.0, f64::max);
    let first = first.expect("a first record");
    let seconds = end.duration_since(first).as_secs_f64();
    let texts: Vec<String> = apps.iter().map(App::metrics_text).collect();
    let mut commits = commit_summary(&texts, seconds);
    if let Some(consumed) = consumed {
        commits += &format!(
            "; {events} records consumed after {:.2} s",
            consumed.duration_since(first).as_secs_f64()
        );
    }
    // CPU per record, the instances' from their start (restore and group
    // join included) and the broker's over the same span: what a record
    // costs the machine, whatever the threads' overlap.
    let cpu: f64 = apps.iter().map(|app| cpu_seconds(app.pid())).sum();
    let per_record = |seconds: f64| seconds / events as f64 * 1e6;
    commits += &format!("; CPU {cpu:.2} s ({:.2} µs a record)", per_record(cpu));
    if let (Some(pid), Some(before)) = (broker_pid, broker_cpu) {
        let broker = cpu_seconds(pid) - before;
        commits += &format!(", broker {broker:.2} s ({:.2} µs)", per_record(broker));
    }
    for app in apps {
        app.stop();
    }
    (events as f64 / seconds, rss, commits)
}

const QUIX_VERSION: &str = "3.28.1";

fn quix_peer() -> Command {
    let mut command = Command::new(repo().join("scripts/quix-peer.sh"));
    command.env("QUIX_VERSION", QUIX_VERSION);
    command
}

/// One Quix Streams run over the first `limit` records of `topic`:
/// (records/s, peak RSS MiB).
fn quix_run(topic: &str, limit: u64, dir: &std::path::Path) -> (f64, f64) {
    let group = unique("bench-quix");
    let output = quix_peer()
        .args(["--bootstrap-servers", &broker().bootstrap, "--topic", topic])
        .args(["--output", &unique("bench-quix-out"), "--group", &group])
        .arg("--state-dir")
        .arg(dir.join(&group))
        .args(["--limit", &limit.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "the Quix Streams run failed");
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    (
        result["rate"].as_f64().unwrap(),
        result["peak_rss_kib"].as_f64().unwrap_or(0.0) / 1024.0,
    )
}

/// Latencies in ms from a burst's last event to its folded event, with
/// commits every `commit_interval` (none: the topology's).
fn latencies(bursts: usize, commit_interval: Option<&str>, dir: &std::path::Path) -> Vec<f64> {
    let topic = unique("bench-latency");
    create_topic(&topic, 4);
    let (config, folded) = app_config(
        Workload::SocialMetrics,
        &topic,
        ("exactly_once", commit_interval),
        dir,
    );
    let app = App::start(&config, dir);
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("group.id", unique("bench-reader"))
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        .create()
        .unwrap();
    // The sink topic is created by streamfold at startup.
    let mut list = TopicPartitionList::new();
    for p in 0..4 {
        list.add_partition_offset(&folded, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();

    let producer_topic = topic.clone();
    let sender = std::thread::spawn(move || {
        let producer = TestProducer::new();
        for b in 0..bursts {
            let account = format!("latency_{b}");
            for i in 0..100 {
                producer.send_json(
                    &producer_topic,
                    &account,
                    &json!({"post_id": format!("post_{i}"), "account_id": account, "metrics": {"likes": i}}),
                );
            }
            producer.flush();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut out = Vec::with_capacity(bursts);
    let deadline = Instant::now() + Duration::from_secs(300);
    while out.len() < bursts && Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let received = now_ms();
        let value: Value =
            serde_json::from_slice(message.payload().unwrap_or_default()).unwrap_or_default();
        let last = value["last_event_at"]
            .as_str()
            .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
            .map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64);
        if let Some(last) = last {
            out.push((received - last) as f64);
        }
    }
    sender.join().unwrap();
    app.stop();
    out.sort_by(f64::total_cmp);
    out
}

/// Produces `events` of `workload` over `keys` keys to a new topic of
/// `partitions`; returns the topic and the records it holds (copies
/// included): what every run reads.
fn produce(workload: Workload, events: u64, keys: u64, partitions: i32) -> (String, u64) {
    let topic = unique("bench-input");
    create_topic(&topic, partitions);
    if workload == Workload::DistributedCounter {
        create_topic(&format!("{topic}-reads"), partitions);
    }
    let produced = loadgen()
        .args(["produce", "--workload", workload.name(), "--topic", &topic])
        .args(["--partitions", &partitions.to_string()])
        .args(["--events", &events.to_string()])
        .args(["--accounts", &keys.to_string(), "--json"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(produced.status.success());
    let summary: Value = serde_json::from_slice(&produced.stdout).unwrap();
    let records = summary["records"].as_u64().unwrap();
    assert!(records >= events, "{records} records for {events} events");
    (topic, records)
}

fn main() {
    let o = options();
    let dir = tempfile::Builder::new()
        .prefix("streamfold-bench-")
        .tempdir()
        .unwrap();
    eprintln!("broker {}", broker().bootstrap);

    let (topic, records) = produce(o.workload, o.events, o.accounts, o.partitions);
    let o = Options {
        events: records,
        ..o
    };

    let bare_run = |extra: &[&str]| -> f64 {
        let output = loadgen()
            .args([
                "bare-consume",
                "--topic",
                &topic,
                "--expect",
                &o.events.to_string(),
            ])
            .args(extra)
            .output()
            .unwrap();
        let result: Value = serde_json::from_slice(&output.stdout).unwrap();
        result["rate"].as_f64().unwrap()
    };
    let mut bare = Vec::new();
    let mut tuned = Vec::new();
    for run in 0..o.repeat {
        bare.push(bare_run(&[]));
        tuned.push(bare_run(&["-X", "fetch.queue.backoff.ms=10"]));
        eprintln!(
            "bare consumer run {run}: {:.0} records/s (defaults), {:.0} records/s (fetch.queue.backoff.ms=10)",
            bare[run], tuned[run]
        );
    }

    let mut results = Vec::new();
    for guarantee in &o.guarantees {
        let (threads, instances) = (&o.threads, &o.instances);
        let runs = o.commit_intervals.iter().flat_map(|interval| {
            threads
                .iter()
                .flat_map(move |&t| instances.iter().map(move |&i| (interval, t, i)))
        });
        for (interval, threads, instances) in runs {
            let mut label = guarantee.to_string();
            if let Some(interval) = interval {
                label += &format!(", commits every {interval}");
            }
            if let Some(t) = threads {
                label += &format!(", {t} thread{}", if t == 1 { "" } else { "s" });
            }
            if o.instances != [1] {
                label += &format!(
                    ", {instances} instance{}",
                    if instances == 1 { "" } else { "s" }
                );
            }
            let mut rates = Vec::new();
            let mut rss = Vec::new();
            for run in 0..o.repeat {
                let (rate, peak, commits) = streamfold_run(
                    (o.workload, &topic),
                    o.events,
                    (guarantee, interval.as_deref()),
                    (threads, instances),
                    &o.run_args,
                    dir.path(),
                );
                eprintln!(
                    "streamfold {label} run {run}: {rate:.0} records/s ({:.1}s), peak RSS {peak:.0} MiB",
                    o.events as f64 / rate
                );
                eprintln!("  commits: {commits}");
                rates.push(rate);
                rss.push(peak);
            }
            results.push((
                label,
                guarantee == "exactly_once",
                median(&mut rates),
                median(&mut rss),
            ));
        }
    }

    // The peer and the latency bursts are social-metrics' workload.
    let social = o.workload == Workload::SocialMetrics;
    assert!(
        social || !o.quix,
        "--peer quix measures the social-metrics workload"
    );
    let mut quix = Vec::new();
    let mut quix_rss = Vec::new();
    if o.quix {
        assert!(
            quix_peer()
                .arg("--install-only")
                .status()
                .unwrap()
                .success(),
            "installing Quix Streams failed"
        );
        for run in 0..o.repeat {
            let (rate, peak) = quix_run(&topic, o.peer_limit, dir.path());
            eprintln!(
                "Quix Streams run {run}: {rate:.0} records/s over the first {} records ({:.1}s), peak RSS {peak:.0} MiB",
                o.peer_limit,
                o.peer_limit as f64 / rate
            );
            quix.push(rate);
            quix_rss.push(peak);
        }
    }

    // (commit interval, p50s, p99s), one entry per commit interval.
    let mut latency = Vec::new();
    for interval in o.commit_intervals.iter().filter(|_| social) {
        let (mut p50, mut p99) = (Vec::new(), Vec::new());
        let every = interval.as_deref().unwrap_or("100ms (the topology's)");
        for run in 0..o.repeat {
            let l = latencies(o.bursts, interval.as_deref(), dir.path());
            assert_eq!(l.len(), o.bursts, "every burst was folded");
            eprintln!(
                "latency run {run}, commits every {every}: {} folds, p50 {:.0} ms, p99 {:.0} ms",
                l.len(),
                percentile(&l, 0.5),
                percentile(&l, 0.99)
            );
            p50.push(percentile(&l, 0.5));
            p99.push(percentile(&l, 0.99));
        }
        latency.push((every, median(&mut p50), median(&mut p99)));
    }

    let bare = median(&mut bare);
    let tuned = median(&mut tuned);
    println!(
        "\n{}: {} records over {} keys, {} partitions; medians of {} runs\n",
        o.workload.name(),
        o.events,
        o.accounts,
        o.partitions,
        o.repeat
    );
    println!(
        "| run | records/s | vs bare consumer (defaults) | vs bare consumer (fetch.queue.backoff.ms=10) | peak RSS |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| bare rdkafka consumer (assign, no group), librdkafka defaults | {bare:.0} | 100% | {:.0}% | |",
        100.0 * bare / tuned
    );
    println!(
        "| bare rdkafka consumer, fetch.queue.backoff.ms=10 | {tuned:.0} | {:.0}% | 100% | |",
        100.0 * tuned / bare
    );
    for (guarantee, _, rate, rss) in &results {
        println!(
            "| streamfold {}, {guarantee} | {rate:.0} | {:.0}% | {:.0}% | {rss:.0} MiB |",
            o.workload.name(),
            100.0 * rate / bare,
            100.0 * rate / tuned
        );
    }
    if o.quix {
        let runs = quix
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rate = median(&mut quix);
        println!(
            "| Quix Streams {QUIX_VERSION}, exactly-once, per-account 10 s tumbling reduce (first {} records) | {rate:.0} | {:.1}% | {:.1}% | {:.0} MiB |",
            o.peer_limit,
            100.0 * rate / bare,
            100.0 * rate / tuned,
            median(&mut quix_rss)
        );
        println!();
        for (guarantee, _, streamfold, _) in results.iter().filter(|r| r.1) {
            println!(
                "streamfold social-metrics ({guarantee}) / Quix Streams: {:.1}x (Quix timed over the first {} of {} records; runs: {})",
                *streamfold / rate,
                o.peer_limit,
                o.events,
                runs
            );
        }
    }
    if o.smoke {
        // The other workloads' topologies and completion through the
        // harness: one small run each.
        for workload in [Workload::QuestionFeed, Workload::DistributedCounter] {
            let (topic, records) = produce(workload, 5_000, 100, o.partitions);
            let (rate, _, _) = streamfold_run(
                (workload, &topic),
                records,
                ("exactly_once", None),
                (None, 1),
                &[],
                dir.path(),
            );
            eprintln!(
                "smoke run of {}: {records} records, {rate:.0} records/s",
                workload.name()
            );
        }
    }
    if social {
        println!();
    }
    for (every, p50, p99) in latency {
        println!(
            "latency, last event of a burst to its folded event (exactly_once, commits every {every}, read_committed): p50 {p50:.0} ms, p99 {p99:.0} ms",
        );
    }
}
