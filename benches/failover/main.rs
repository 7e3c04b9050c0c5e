//! Failover benchmark: how long the partitions of an instance killed with
//! SIGKILL go without output, until a record produced after the kill
//! comes out of them, committed.
//!
//! ```text
//! cargo bench --bench failover -- [--records N] [--repeat R] [--partitions P]
//!                                  [--rate E] [--scenarios 1,2,4,3]
//! ```
//!
//! 1. The state: `streamfold-loadgen` produces N/2 post-metric events
//!    (default N = 1,000,000), each for its own account, to a topic with P
//!    partitions (4) on the Apache Kafka node started for the run
//!    (tests/support/broker.rs, or `STREAMFOLD_TEST_BOOTSTRAP`); instance
//!    `a` of the social-metrics topology (exactly_once, a commit every
//!    100 ms, static membership but in scenario 4, folds kept open:
//!    `quiet_for` 1h, `max_events` 2) folds them: N changelog records, one
//!    `fold_account-open` and one `fold_account-timers` record per account.
//! 2. Live input from then on (traffic.rs): E events a second (100), each
//!    to an account of the state, so that it closes that account's fold at
//!    once: a folded event is output within a commit interval of the event,
//!    and only by a task whose state holds the account.
//! 3. R times (3) per scenario, once the outputs have caught up with the
//!    live input, the instance that owns the affected partitions is killed
//!    (SIGKILL: mid-transaction, as the live input keeps one open):
//!    1. static member restarted on the same state directory at once (a
//!       StatefulSet pod restarted on its persistent volume);
//!    2. static member restarted at once on an empty state directory (the
//!       volume lost: a full restore from the changelogs);
//!    3. two instances, the killed one not restarted: a new instance with
//!       an empty state directory joins the one holding every task and
//!       takes half of them; then the older one is killed and the newer
//!       one, which never held the killed one's tasks, takes them over
//!       (a node lost, its pod not rescheduled);
//!    4. as 1, but a dynamic member (`kafka.static_membership` off): the
//!       group keeps the killed member's tasks until its session times
//!       out.
//!
//!    Timed from the kill to the first folded event of a live event
//!    produced after the kill that a read_committed reader of the output
//!    topic gets from an affected partition (the killed instance's), and
//!    to every affected partition having given one. The new owner's
//!    `Restore finished.` lines give what it restored.
//! 4. Checked, not timed: every live event has exactly one folded event in
//!    the committed output, folding the restored event of its account with
//!    the live one; nothing else is output.
//!
//! Medians of R are printed as a Markdown table, the times to output with
//! each run's beside them (they may differ by a timeout: whether the
//! killed instance left a transaction open on the broker depends on the
//! instant of the kill), and `uptime`'s load averages at each run (the
//! machine is shared).
//!
//! Under `cargo test` (no `--bench` argument) it runs scenarios 1 and 2
//! once on 10,000 changelog records, as a smoke test of the failover and of
//! the harness: its figures mean nothing, its checks do.

#[path = "../../tests/support/mod.rs"]
mod support;
mod traffic;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use support::*;
use traffic::{Live, Output, Outputs};

/// How the owner of the affected partitions fails and who takes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    SameVolume,
    VolumeLost,
    Survivor,
    Dynamic,
}

impl Scenario {
    fn parse(number: &str) -> Scenario {
        match number {
            "1" => Scenario::SameVolume,
            "2" => Scenario::VolumeLost,
            "3" => Scenario::Survivor,
            "4" => Scenario::Dynamic,
            _ => panic!("--scenarios 1,2,3,4"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Scenario::SameVolume => "1. static member restarted on its state directory",
            Scenario::VolumeLost => "2. static member restarted, state directory lost",
            Scenario::Survivor => "3. two instances, the killed one not restarted",
            Scenario::Dynamic => "4. dynamic member restarted on its state directory",
        }
    }
}

struct Options {
    /// Changelog records of the state (two per account).
    records: u64,
    repeat: usize,
    partitions: i32,
    /// Live events a second.
    rate: f64,
    scenarios: Vec<Scenario>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench");
    let mut o = Options {
        records: if benchmarking { 1_000_000 } else { 10_000 },
        repeat: if benchmarking { 3 } else { 1 },
        partitions: 4,
        rate: if benchmarking { 100.0 } else { 50.0 },
        scenarios: if benchmarking {
            vec![
                Scenario::SameVolume,
                Scenario::VolumeLost,
                Scenario::Dynamic,
                Scenario::Survivor,
            ]
        } else {
            vec![Scenario::SameVolume, Scenario::VolumeLost]
        },
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--records" => o.records = value.parse().expect("--records N"),
            "--repeat" => o.repeat = value.parse().expect("--repeat R"),
            "--partitions" => o.partitions = value.parse().expect("--partitions P"),
            "--rate" => o.rate = value.parse().expect("--rate E"),
            "--scenarios" => o.scenarios = value.split(',').map(Scenario::parse).collect(),
            // cargo passes `--bench`; ignore what is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    assert!(o.partitions >= 2, "--partitions: two instances share them");
    o
}

/// The application all scenarios run: one group, one set of changelogs.
struct Bench {
    app: String,
    topic: String,
    folded: String,
    partitions: i32,
    /// Accounts in the state, each with one open fold.
    accounts: u64,
    dir: PathBuf,
}

impl Bench {
    fn state_dir(&self, instance: &str) -> PathBuf {
        self.dir.join(format!("{instance}-state"))
    }

    fn config(&self, instance: &str, static_membership: bool) -> AppConfig {
        let dead_letters = format!("{}-dlq", self.app);
        AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: instance.into(),
            state_dir: self.state_dir(instance),
            env: env_vars(&[
                ("STREAMFOLD_APP", self.app.as_str()),
                ("POST_METRICS_TOPIC", self.topic.as_str()),
                ("FOLDED_TOPIC", self.folded.as_str()),
                ("DEAD_LETTER_TOPIC", dead_letters.as_str()),
                (
                    "STREAMFOLD_STATIC_MEMBERSHIP",
                    if static_membership { "true" } else { "false" },
                ),
                // Every fold of the state stays open; a live event closes
                // its account's at once.
                ("FOLD_QUIET_FOR", "1h"),
                ("FOLD_MAX_WAIT", "2h"),
                ("FOLD_MAX_EVENTS", "2"),
            ]),
            txn_header: false,
            args: Vec::new(),
        }
    }

    /// Starts `instance` as a static member of the group.
    fn start(&self, instance: &str) -> App {
        self.start_as(instance, true)
    }

    fn start_as(&self, instance: &str, static_membership: bool) -> App {
        App::start(&self.config(instance, static_membership), &self.dir)
    }
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

fn task_of(line: &str) -> i32 {
    field(line, "task")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no task in {line:?}"))
}

/// The tasks an instance runs, by its log: each `Task running.` until its
/// `Task closed.`.
fn running_tasks(log: &str) -> BTreeSet<i32> {
    let mut running = BTreeSet::new();
    for line in log.lines() {
        if line.contains("Task running.") {
            running.insert(task_of(line));
        } else if line.contains("Task closed.") {
            running.remove(&task_of(line));
        }
    }
    running
}

/// What the `Restore finished.` lines among `lines` add up to: records
/// restored, and the slowest task's seconds.
fn restore_totals(lines: &[&str]) -> (u64, f64) {
    let mut records = 0;
    let mut slowest: f64 = 0.0;
    for line in lines.iter().filter(|l| l.contains("Restore finished.")) {
        let number = |name| {
            field(line, name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        records += number("restored");
        slowest = slowest.max(number("millis") as f64 / 1000.0);
    }
    (records, slowest)
}

/// When each task was last assigned and when it started running, in
/// seconds after `killed`, by the timestamps of the `Tasks assigned.` and
/// `Task running.` lines among `lines`.
fn task_story(lines: &[&str], killed: SystemTime) -> BTreeMap<i32, (f64, f64)> {
    let after = |line: &str| {
        let stamp = line.split_whitespace().next().unwrap_or_default();
        let at = humantime::parse_rfc3339_weak(stamp)
            .unwrap_or_else(|e| panic!("no timestamp in {line:?}: {e}"));
        match at.duration_since(killed) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        }
    };
    let mut assigned = BTreeMap::new();
    let mut story = BTreeMap::new();
    for line in lines {
        if line.contains("Tasks assigned.") {
            let tasks = line
                .split_once("tasks=[")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map_or("", |(tasks, _)| tasks);
            for task in tasks
                .split(',')
                .filter_map(|t| t.trim().parse::<i32>().ok())
            {
                assigned.insert(task, after(line));
            }
        } else if line.contains("Task running.") {
            let task = task_of(line);
            let at = assigned.get(&task).copied().unwrap_or(f64::NAN);
            story.insert(task, (at, after(line)));
        }
    }
    story
}

fn describe_story(story: &BTreeMap<i32, (f64, f64)>) -> String {
    story
        .iter()
        .map(|(task, (assigned, running))| {
            format!("task {task} assigned {assigned:.2}s, running {running:.2}s")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until the instances run `want` tasks each (by their logs).
fn wait_tasks(apps: &[(&App, usize)], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let counts: Vec<usize> = apps
            .iter()
            .map(|(app, _)| running_tasks(&app.log_text()).len())
            .collect();
        if apps.iter().zip(&counts).all(|((_, want), n)| n == want) {
            return;
        }
        for (app, _) in apps {
            app.assert_running();
        }
        assert!(
            Instant::now() < deadline,
            "tasks running {counts:?} after {timeout:?}, not {:?}; logs:\n{}",
            apps.iter().map(|(_, w)| w).collect::<Vec<_>>(),
            apps.iter()
                .map(|(a, _)| a.log_text())
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the outputs have caught up with the live input, then a
/// second more: the pipeline is steady when the kill comes.
fn steady(live: &Live, outputs: &Outputs, app: &App) {
    outputs.wait_through(live.count(), Duration::from_secs(300), || {
        format!("log:\n{}", app.log_text())
    });
    std::thread::sleep(Duration::from_secs(1));
    app.assert_running();
}

/// One failover's figures.
struct Run {
    /// From the kill to the first output of a live event sent after it,
    /// on an affected partition.
    first: f64,
    /// From the kill to every affected partition having given one.
    all: f64,
    /// Records the new owner restored, and its slowest task's restore.
    restored: u64,
    restore_seconds: f64,
    /// The longest time without output on the partitions that were not
    /// affected, from the kill to `all` (scenario 3).
    other_gap: Option<f64>,
    load: String,
    /// Per affected partition: its first output, seconds after the kill.
    firsts: BTreeMap<i32, f64>,
    /// The new owner's affected tasks: assigned and running, seconds
    /// after the kill.
    story: BTreeMap<i32, (f64, f64)>,
}

/// When each affected partition first gave the output of a live event
/// sent after `killed`, as seconds after it, reading the outputs from
/// index `from`; fails after `timeout`.
fn resumed(
    outputs: &Outputs,
    from: usize,
    live: &Live,
    killed: Instant,
    affected: &BTreeSet<i32>,
    timeout: Duration,
    log: impl Fn() -> String,
) -> BTreeMap<i32, f64> {
    let first_live = live.first_after(killed);
    let deadline = killed + timeout;
    loop {
        let mut firsts = BTreeMap::new();
        for o in outputs.since(from) {
            if o.k >= first_live && affected.contains(&o.partition) {
                firsts
                    .entry(o.partition)
                    .or_insert_with(|| o.at.duration_since(killed).as_secs_f64());
            }
        }
        if firsts.len() == affected.len() {
            return firsts;
        }
        assert!(
            Instant::now() < deadline,
            "partitions {:?} gave no output of a live event sent after the kill within {timeout:?} (those that did: {firsts:?}); the new owner's log:\n{}",
            affected,
            log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The longest stretch without output on `partitions` between `killed`
/// and `until` seconds after it.
fn longest_gap(outputs: &[Output], partitions: &BTreeSet<i32>, killed: Instant, until: f64) -> f64 {
    partitions
        .iter()
        .map(|p| {
            let mut times: Vec<f64> = outputs
                .iter()
                .filter(|o| o.partition == *p && o.at >= killed)
                .map(|o| o.at.duration_since(killed).as_secs_f64())
                .filter(|t| *t <= until)
                .collect();
            times.insert(0, 0.0);
            times.push(until);
            times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

fn timeout(bench: &Bench) -> Duration {
    // Generous: a full restore on a loaded machine, after the session and
    // transaction timeouts.
    Duration::from_secs(600 + bench.accounts / 1000)
}

/// Scenarios 1, 2 and 4: instance `a` is killed and started again at
/// once, on its state directory or, when `wipe`, on an empty one; as a
/// static member of the group or, when not `static_membership`, as a
/// dynamic one.
fn restart(
    bench: &Bench,
    live: &Live,
    outputs: &Outputs,
    a: &mut Option<App>,
    wipe: bool,
    static_membership: bool,
) -> Run {
    let app = a.take().expect("instance a runs");
    steady(live, outputs, &app);
    let affected: BTreeSet<i32> = (0..bench.partitions).collect();
    let load = load_average();
    let from = outputs.len();
    let killed = Instant::now();
    let killed_wall = SystemTime::now();
    app.kill();
    if wipe {
        std::fs::remove_dir_all(bench.state_dir("a")).expect("the state directory is deleted");
    }
    let app = bench.start_as("a", static_membership);
    let firsts = resumed(
        outputs,
        from,
        live,
        killed,
        &affected,
        timeout(bench),
        || app.log_text(),
    );
    wait_tasks(&[(&app, bench.partitions as usize)], timeout(bench));
    let log = app.log_text();
    let lines: Vec<&str> = log.lines().collect();
    let (restored, restore_seconds) = restore_totals(&lines);
    let story = task_story(&lines, killed_wall);
    *a = Some(app);
    Run {
        first: firsts.values().copied().fold(f64::INFINITY, f64::min),
        all: firsts.values().copied().fold(0.0, f64::max),
        restored,
        restore_seconds,
        other_gap: None,
        load,
        firsts,
        story,
    }
}

/// Scenario 3: a new instance with an empty state directory joins `a`,
/// the instance holding every task, and takes half of them; `a` is killed
/// and the new one takes its tasks over. The new one is then `a`.
fn survive(bench: &Bench, live: &Live, outputs: &Outputs, a: &mut Option<App>, run: usize) -> Run {
    let old = a.take().expect("an instance runs");
    let joiner = bench.start(&format!("joiner-{run}"));
    let half = bench.partitions as usize / 2;
    wait_tasks(
        &[(&old, bench.partitions as usize - half), (&joiner, half)],
        timeout(bench),
    );
    steady(live, outputs, &old);
    let affected = running_tasks(&old.log_text());
    let others: BTreeSet<i32> = running_tasks(&joiner.log_text());
    assert!(affected.is_disjoint(&others), "{affected:?} and {others:?}");
    let lines_before = joiner.log_text().lines().count();
    let load = load_average();
    let from = outputs.len();
    let killed = Instant::now();
    let killed_wall = SystemTime::now();
    old.kill();
    let firsts = resumed(
        outputs,
        from,
        live,
        killed,
        &affected,
        timeout(bench),
        || joiner.log_text(),
    );
    let all = firsts.values().copied().fold(0.0, f64::max);
    wait_tasks(&[(&joiner, bench.partitions as usize)], timeout(bench));
    let log = joiner.log_text();
    let after: Vec<&str> = log.lines().skip(lines_before).collect();
    let (restored, restore_seconds) = restore_totals(&after);
    let mut story = task_story(&after, killed_wall);
    story.retain(|task, _| affected.contains(task));
    let other_gap = longest_gap(&outputs.since(from), &others, killed, all);
    *a = Some(joiner);
    Run {
        first: firsts.values().copied().fold(f64::INFINITY, f64::min),
        all,
        restored,
        restore_seconds,
        other_gap: Some(other_gap),
        load,
        firsts,
        story,
    }
}

fn main() {
    let o = options();
    let dir = tempfile::Builder::new()
        .prefix("streamfold-bench-failover-")
        .tempdir()
        .unwrap();
    eprintln!("broker {}", broker().bootstrap);
    let commit = head_commit();
    let app = unique("bench-failover");
    let bench = Bench {
        topic: format!("{app}-posts"),
        folded: format!("{app}-folded"),
        app,
        partitions: o.partitions,
        accounts: o.records / 2,
        dir: dir.path().to_path_buf(),
    };

    create_topic(&bench.topic, bench.partitions);
    let produced = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .arg("--bootstrap-servers")
        .arg(&broker().bootstrap)
        .args(["produce", "--topic", &bench.topic])
        .args(["--partitions", &bench.partitions.to_string()])
        .args(["--events", &bench.accounts.to_string()])
        .args(["--accounts", &bench.accounts.to_string()])
        .status()
        .unwrap();
    assert!(produced.success());
    let started = Instant::now();
    let mut a = Some(bench.start("a"));
    let writer = a.as_ref().unwrap();
    // Published as of commits: every account's fold is committed.
    writer.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(3600),
        |n| n == bench.accounts as f64,
    );
    eprintln!(
        "the state: {} accounts folded in {:.1}s",
        bench.accounts,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        partition_count(&bench.folded),
        bench.partitions,
        "the folded output has a partition per task"
    );
    let outputs = Outputs::follow(&bench.folded, bench.partitions);
    let live = Live::start(&bench.topic, o.rate, bench.accounts);

    let mut runs: BTreeMap<Scenario, Vec<Run>> = BTreeMap::new();
    for &scenario in &o.scenarios {
        for run in 0..o.repeat {
            let r = match scenario {
                Scenario::SameVolume => restart(&bench, &live, &outputs, &mut a, false, true),
                Scenario::VolumeLost => restart(&bench, &live, &outputs, &mut a, true, true),
                Scenario::Dynamic => restart(&bench, &live, &outputs, &mut a, false, false),
                Scenario::Survivor => survive(&bench, &live, &outputs, &mut a, run),
            };
            eprintln!(
                "{}, run {run}: first output {:.2}s after the kill, every affected partition {:.2}s ({}); {}; restored {} records, slowest task {:.2}s{} (load {})",
                scenario.label(),
                r.first,
                r.all,
                r.firsts
                    .iter()
                    .map(|(p, t)| format!("partition {p} {t:.2}s"))
                    .collect::<Vec<_>>()
                    .join(", "),
                describe_story(&r.story),
                r.restored,
                r.restore_seconds,
                r.other_gap.map_or(String::new(), |g| format!(
                    "; other partitions' longest gap {g:.2}s"
                )),
                r.load
            );
            runs.entry(scenario).or_default().push(r);
        }
    }

    let sent = live.stop();
    let app = a.take().expect("an instance runs");
    outputs.wait_through(sent, timeout(&bench), || {
        format!("log:\n{}", app.log_text())
    });
    // Long enough for a duplicate to show.
    std::thread::sleep(Duration::from_secs(2));
    let checked = outputs.assert_exactly_once(sent);
    app.stop();
    eprintln!("{sent} live events, each folded and output exactly once ({checked} outputs)");

    println!(
        "\nfailover after kill -9, social-metrics fold state of {} changelog records ({} accounts) on {} partitions, live input {} events/s (commit {commit}); medians of {} runs, times to output with each run's\n",
        2 * bench.accounts,
        bench.accounts,
        bench.partitions,
        o.rate,
        o.repeat
    );
    println!(
        "| scenario | first output after the kill | every affected partition | restored by the new owner | its slowest task's restore | survivor's own partitions, longest gap | load averages (1, 5, 15 min) at each run |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (scenario, runs) in &runs {
        let of = |f: fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        // The times to output with every run's, which may differ by a
        // timeout: whether the killed instance left a transaction open on
        // the broker depends on the instant of the kill.
        let spread = |f: fn(&Run) -> f64| {
            let values: Vec<f64> = runs.iter().map(f).collect();
            let each: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
            match values.len() {
                1 => format!("{:.2} s", values[0]),
                _ => format!("{:.2} s ({})", median(&values), each.join(", ")),
            }
        };
        let gap = runs.iter().filter_map(|r| r.other_gap).collect::<Vec<_>>();
        println!(
            "| {} | {} | {} | {:.0} records | {:.2} s | {} | {} |",
            scenario.label(),
            spread(|r| r.first),
            spread(|r| r.all),
            of(|r| r.restored as f64),
            of(|r| r.restore_seconds),
            if gap.is_empty() {
                "–".to_string()
            } else {
                format!("{:.2} s", median(&gap))
            },
            runs.iter()
                .map(|r| r.load.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}
