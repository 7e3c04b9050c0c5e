//! End-to-end benchmark: streamfold beside Kafka Streams, Quix Streams and
//! a bare consumer, in one run, on one Apache Kafka broker and one topic.
//!
//! ```text
//! cargo bench --bench e2e -- [--peers kafka-streams,quix]
//!                             [--workloads social-metrics,question-feed,page-views,orders-enriched]
//!                             [--events N | --events W=N[,W=N…]] [--accounts A] [--partitions P] [--keyed-by account|post]
//!                             [--seed S] [--views-per-window V] [--repeat R]
//!                             [--bursts B] [--warmup-bursts W] [--no-latency]
//!                             [--no-recovery | --recovery-workloads W[,W…]]
//!                             [--guarantees exactly_once[,at_least_once]]
//!                             [--commit-intervals D[,D…]] [--quix-commit-interval D]
//!                             [--threads T[,T…]] [--instances I[,I…]]
//!                             [--run-args "-X key=value …"] [--compare-builds LABEL=PATH[,…]]
//! ```
//!
//! For each workload (`--workloads`; social-metrics by default):
//!
//! 1. N events (`--events`, 2,000,000) over A keys (`--accounts`, 1,000) go
//!    to a topic of P partitions (4) on the Apache Kafka node the harness
//!    starts (tests/support/broker.rs): `streamfold-loadgen produce`,
//!    keyed as the topology's stateful nodes key them (by account; by
//!    question or answer), so streamfold's re-key leaves them where they
//!    are, where Kafka Streams writes every record through its
//!    repartition topic; with `--keyed-by post`, social-metrics' events
//!    are keyed by post, so streamfold sends the three in four that are
//!    not on their account's partition through its repartition topic
//!    too. question-feed sends one event in ten twice and
//!    distributed-counter every event twice; rates count every record of
//!    the topic. page-views' views are keyed by view id and re-keyed by
//!    page (both systems use their repartition topics), their event times
//!    a function of the view's number that closes windows during the run
//!    and leaves the last ones open (`streamfold-loadgen`'s `page_view`
//!    says how); orders-enriched writes a customers table (`A` customers,
//!    some updated, some deleted) to `<topic>-customers` first, then the
//!    orders, keyed by order id; its rates count orders. `--events
//!    question-feed=N` sets one workload's count; `--seed` picks the
//!    generators' stretch (the same seed, the same events).
//! 2. Bare consumer: `streamfold-loadgen bare-consume` reads the topic with
//!    `assign()` (no group), timed from its first record to its last, once
//!    with librdkafka's defaults and once with the fetch setting streamfold
//!    uses (`fetch.queue.backoff.ms=10`); its CPU is the whole process's.
//! 3. Each system, a fresh application (group, state, output topics) per
//!    run, over the whole topic, streamfold and Kafka Streams at the same
//!    commit interval (100 ms, or each of `--commit-intervals`): streamfold (`streamfold
//!    run topologies/<workload>.yaml`, under each of `--guarantees`, with
//!    `--threads`, `--instances`, `--run-args`; and again with each other
//!    build of `--compare-builds`, a row labelled `[LABEL]`, to compare
//!    two commits in one run); with `--peers
//!    kafka-streams`, the Kafka Streams peer (benches/peers/kafka-streams,
//!    its README says what it does and how it is tuned), exactly_once_v2;
//!    with `--peers quix`, Quix Streams (`scripts/quix-peer.sh`, which
//!    installs `quixstreams==3.28.1` into a venv under `~/.cache` the
//!    first time), exactly-once, a per-account 10 s tumbling reduce
//!    (another operator: Quix has none closing on quiet keys), social-
//!    metrics only, at its own default commit interval of 5 s
//!    (`--quix-commit-interval`: at 100 ms it spends most of its time
//!    committing). Each is timed from outside by its group's commits
//!    (measure.rs): records/s, CPU seconds per million records of its
//!    processes and of the broker over the timed span, peak RSS. Both
//!    systems emit a joined order, and a window closed by a record, in the
//!    transaction that commits that record (streamfold closes at most
//!    1,024 windows per record, the rest at its next 250 ms tick; the
//!    input closes its last windows a seventh of a burst before its end),
//!    so a group done with its input has written its output. page-views'
//!    and orders-enriched's output is then checked against a recount of
//!    the input (verify.rs), after every run and every recovery: a
//!    mismatch fails the benchmark.
//! 4. Latency (social-metrics, streamfold under exactly-once and Kafka
//!    Streams): bursts on a fresh topic to a folded event at a
//!    read_committed consumer (latency.rs).
//! 5. Restore and catch-up after a kill -9 with the state wiped, each
//!    system (recovery.rs).
//!
//! The runs of the systems are interleaved (each system's first run, then
//! each one's second…), so the machine's moods fall on all of them. Every
//! figure is a median of R runs (`--repeat`, 3), printed with the spread
//! as a Markdown table per workload, then the ratios of streamfold under
//! exactly-once to each peer and to the tuned bare consumer.
//!
//! Under `cargo test` (no `--bench` argument) it runs once, as a smoke
//! test of the harness that CI can afford (about a minute):
//!
//! ```text
//! cargo test --locked --features fault-injection --bench e2e [-- --seed S] [--peers kafka-streams]
//! ```
//!
//! 20,000 social-metrics events through every step (bare consumer,
//! throughput, latency, recovery) with streamfold, one instance and two,
//! then a small question-feed and distributed-counter run of streamfold.
//! No peer unless `--peers` asks for one (tests/peers.rs runs the Kafka
//! Streams peer; Quix Streams would come from PyPI). The events are
//! those of `--seed` (0 by default): the same on every run. The figures
//! of a smoke run mean nothing.

#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "../peers/kafka_streams.rs"]
mod kafka_streams;

mod latency;
mod measure;
mod options;
mod recovery;
mod report;
mod systems;
mod verify;
mod workload;

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use measure::{Progress, RunFigures, cpu_of, follow};
use options::{Options, options};
use report::Row;
use support::*;
use systems::{Kind, Launch, StreamfoldRun};
use workload::{Input, Workload, loadgen, produce};

/// CPU seconds of the children this process has waited for.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// One bare consumer run over `records` of `topic` with `extra`
/// properties.
fn bare_run(topic: &str, records: u64, extra: &[&str]) -> RunFigures {
    let (cpu, broker_cpu) = (children_cpu(), cpu_of(broker().pid()).unwrap_or(0.0));
    let output = loadgen()
        .args(["bare-consume", "--topic", topic])
        .args(["--expect", &records.to_string()])
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.success(), "bare-consume failed: {output:?}");
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    RunFigures {
        records: result["records"].as_f64().unwrap(),
        seconds: result["seconds"].as_f64().unwrap(),
        cpu: children_cpu() - cpu,
        broker_cpu: cpu_of(broker().pid()).unwrap_or(0.0) - broker_cpu,
        rss_mib: 0.0,
    }
}

/// One throughput run of `launch` over the whole of `topic`; with
/// `expected`, its output checked against it once it stopped (the check's
/// summary is returned).
fn system_run(
    launch: &Launch,
    topic: &str,
    partitions: i32,
    expected: Option<&verify::Expected>,
    dir: &Path,
) -> (RunFigures, Option<String>) {
    let progress = Progress::new(&launch.group, topic, partitions);
    let started = Instant::now();
    let running = launch.start(dir);
    let figures = follow(running.as_ref(), &progress, started);
    let detail = running.detail(figures.seconds);
    running.stop();
    // Figures of a run whose output is wrong mean nothing: stop here.
    let checked = expected.map(|e| verify::check(e, launch).unwrap_or_else(|m| panic!("{m}")));
    eprintln!(
        "{}: {:.0} records/s ({:.0} records in {:.2} s), CPU {:.2} s per 1M records, broker {:.2} s, peak RSS {:.0} MiB{}",
        launch.label,
        figures.rate(),
        figures.records,
        figures.seconds,
        figures.cpu_per_million(),
        figures.broker_cpu_per_million(),
        figures.rss_mib,
        if detail.is_empty() {
            String::new()
        } else {
            format!("; {detail}")
        }
    );
    if let Some(summary) = &checked {
        eprintln!("{}: verified: {summary}", launch.label);
    }
    (figures, checked)
}

/// The repository's commit, for the table's heading.
fn commit() -> String {
    std::process::Command::new("git")
        .args([
            "-C",
            &repo().display().to_string(),
            "describe",
            "--always",
            "--dirty",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// How to make a fresh application of one system over a topic.
type Launcher = Box<dyn Fn(&str) -> Launch>;

/// Every system measured on `workload`, each with a fresh application
/// per run.
fn systems(o: &Options, workload: Workload, dir: &Path) -> Vec<(Row, Launcher)> {
    let mut out: Vec<(Row, Launcher)> = Vec::new();
    // This build first: the ratios are of its first exactly-once row.
    let builds: Vec<Option<(String, std::path::PathBuf)>> = std::iter::once(None)
        .chain(o.builds.iter().cloned().map(Some))
        .collect();
    for interval in &o.commit_intervals {
        for build in &builds {
            for guarantee in &o.guarantees {
                for &threads in &o.threads {
                    for &instances in &o.instances {
                        let exactly_once = guarantee == "exactly_once";
                        let (guarantee, interval) = (guarantee.clone(), interval.clone());
                        let (run_args, build) = (o.run_args.clone(), build.clone());
                        let dir = dir.to_path_buf();
                        let launch = move |topic: &str| {
                            Launch::streamfold(
                                workload,
                                topic,
                                &StreamfoldRun {
                                    guarantee: &guarantee,
                                    commit_interval: interval.as_deref(),
                                    threads,
                                    instances,
                                    run_args: &run_args,
                                    build: build.as_ref().map(|(l, p)| (l.as_str(), p.as_path())),
                                },
                                &dir,
                            )
                        };
                        let probe = launch("probe");
                        out.push((
                            Row {
                                label: probe.label.clone(),
                                kind: Some(Kind::Streamfold),
                                exactly_once,
                                several_instances: instances > 1,
                                ..Row::default()
                            },
                            Box::new(launch),
                        ));
                    }
                }
            }
        }
        if o.kafka_streams && workload.peer_app().is_some() {
            let (interval, dir) = (interval.clone(), dir.to_path_buf());
            let launch = move |topic: &str| {
                Launch::kafka_streams(workload, topic, interval.as_deref(), &dir)
            };
            let label = launch("probe").label;
            out.push((
                Row {
                    label,
                    kind: Some(Kind::KafkaStreams),
                    exactly_once: true,
                    ..Row::default()
                },
                Box::new(launch),
            ));
        }
        if o.quix && workload == Workload::SocialMetrics && interval == &o.commit_intervals[0] {
            let (interval, dir) = (o.quix_commit_interval.clone(), dir.to_path_buf());
            let launch = move |topic: &str| Launch::quix(topic, &interval, &dir);
            let label = format!(
                "{} (10 s tumbling reduce per account)",
                launch("probe").label
            );
            out.push((
                Row {
                    label,
                    kind: Some(Kind::Quix),
                    exactly_once: true,
                    ..Row::default()
                },
                Box::new(launch),
            ));
        }
    }
    out
}

/// Measures every system on `workload` and prints its table; returns the
/// mismatches the checks of its recoveries found.
fn bench_workload(o: &Options, workload: Workload, dir: &Path) -> Vec<String> {
    let mut mismatches = Vec::new();
    let started_load = load_average();
    let key_by_post = o.key_by_post && workload == Workload::SocialMetrics;
    let (topic, records) = produce(&Input {
        workload,
        events: o.events(workload),
        keys: o.accounts,
        partitions: o.partitions,
        key_by_post,
        seed: o.seed,
        views_per_window: o
            .views_per_window
            .unwrap_or_else(|| Workload::views_per_window(o.events(workload))),
    });
    let expected = verify::expected(workload, &topic);
    let mut bare = Row {
        label: "bare rdkafka consumer (assign, no group), librdkafka defaults".into(),
        ..Row::default()
    };
    let mut tuned = Row {
        label: "bare rdkafka consumer, fetch.queue.backoff.ms=10".into(),
        ..Row::default()
    };
    let mut systems = systems(o, workload, dir);

    for run in 0..o.repeat {
        eprintln!(
            "{} run {run}, load average {}",
            workload.name(),
            load_average()
        );
        bare.runs.push(bare_run(&topic, records, &[]));
        tuned.runs.push(bare_run(
            &topic,
            records,
            &["-X", "fetch.queue.backoff.ms=10"],
        ));
        eprintln!(
            "bare consumer: {:.0} records/s (defaults), {:.0} records/s (fetch.queue.backoff.ms=10)",
            bare.runs[run].rate(),
            tuned.runs[run].rate()
        );
        for (row, launch) in &mut systems {
            let (figures, checked) = system_run(
                &launch(&topic),
                &topic,
                o.partitions,
                expected.as_ref(),
                dir,
            );
            row.runs.push(figures);
            row.checks.extend(checked);
        }
    }

    if o.latency && workload == Workload::SocialMetrics {
        for run in 0..o.repeat {
            for (row, launch) in systems.iter_mut().filter(|(row, _)| {
                row.exactly_once && !row.several_instances && row.kind != Some(Kind::Quix)
            }) {
                let l =
                    latency::latencies(|topic: &str| launch(topic), o.warmup_bursts, o.bursts, dir);
                let (p50, p99) = (latency::percentile(&l, 0.5), latency::percentile(&l, 0.99));
                eprintln!(
                    "latency run {run}, {}: {} folds, p50 {p50:.0} ms, p99 {p99:.0} ms",
                    row.label,
                    l.len()
                );
                row.p50.push(p50);
                row.p99.push(p99);
            }
        }
    }

    if o.recovery_on(workload) {
        for run in 0..o.repeat {
            // One row per system: exactly-once, one instance, the first
            // commit interval.
            let mut done = Vec::new();
            for (row, launch) in &mut systems {
                if !row.exactly_once || row.several_instances || done.contains(&row.kind) {
                    continue;
                }
                // The smoke run goes through the steps once, with
                // streamfold: each recovery waits out a session timeout.
                if o.smoke && row.kind != Some(Kind::Streamfold) {
                    continue;
                }
                done.push(row.kind);
                let launch = launch(&topic);
                let r = recovery::recover(&launch, &topic, o.partitions, dir);
                eprintln!(
                    "recovery run {run}, {}: {:.1} s for {} records left ({:.1} s to its first commit), broker let go after {:.1} s",
                    row.label, r.seconds, r.records_left, r.first_commit_seconds, r.settle_seconds
                );
                // A recovery that lost or repeated output is reported with
                // the table, and fails the benchmark at its end.
                if let Some(expected) = &expected {
                    match verify::check(expected, &launch) {
                        Ok(summary) => {
                            eprintln!("recovery run {run}, {}: verified: {summary}", row.label);
                        }
                        Err(mismatch) => {
                            eprintln!("recovery run {run}: {mismatch}");
                            row.checks
                                .push(format!("recovery run {run}: MISMATCH: {mismatch}"));
                            mismatches.push(mismatch);
                        }
                    }
                }
                row.recovery.push(r);
            }
        }
    }

    let keys = match workload {
        Workload::SocialMetrics if key_by_post => "accounts, keyed by post",
        Workload::SocialMetrics => "accounts",
        Workload::QuestionFeed => "questions and as many answers",
        Workload::DistributedCounter => "counters",
        Workload::PageViews => "pages, keyed by view id",
        Workload::OrdersEnriched => "customers, orders keyed by order id",
    };
    println!(
        "\n{}: {records} records ({} events over {} {keys}, seed {}), {} partitions; commit {}, {} profile; medians of {} runs (min–max); load average {} at the start, {} at the end\n",
        workload.name(),
        o.events(workload),
        o.accounts,
        o.seed,
        o.partitions,
        commit(),
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        },
        o.repeat,
        started_load,
        load_average(),
    );
    let tuned_rate = median(&tuned.rates());
    let mut rows = vec![bare, tuned];
    rows.extend(systems.into_iter().map(|(row, _)| row));
    report::table(&rows);
    report::ratios(&rows, tuned_rate);
    report::checks(&rows);
    mismatches
}

fn main() {
    let o = options();
    let dir = tempfile::Builder::new()
        .prefix("streamfold-bench-")
        .tempdir()
        .unwrap();
    eprintln!("broker {}", broker().bootstrap);
    if o.kafka_streams {
        kafka_streams::build_peer();
    }
    if o.quix {
        systems::install_quix();
    }
    let mut mismatches = Vec::new();
    for &workload in &o.workloads {
        mismatches.extend(bench_workload(&o, workload, dir.path()));
    }
    if o.smoke {
        // The other workloads' topologies through the harness: one small
        // run of streamfold each, page-views' and orders-enriched's output
        // checked against the input (tests/peers.rs runs the peers).
        for workload in [
            Workload::QuestionFeed,
            Workload::DistributedCounter,
            Workload::PageViews,
            Workload::OrdersEnriched,
        ] {
            let smoke = Options {
                workloads: vec![workload],
                events: 5_000,
                kafka_streams: false,
                instances: vec![1],
                commit_intervals: vec![None],
                latency: false,
                recovery: false,
                ..options()
            };
            mismatches.extend(bench_workload(&smoke, workload, dir.path()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} recoveries wrote output that does not match the input:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
