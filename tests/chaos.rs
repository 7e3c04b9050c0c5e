//! Chaos on the real broker: several instances of an article topology as
//! one consumer group, faults on a seeded schedule, every record accounted
//! for.
//!
//! Each test starts `CHAOS_INSTANCES` (default 3) `streamfold run`
//! processes with distinct `--instance-id`s against a nisshi whose data
//! lives in SQLite, so the broker itself can be restarted. A producer that
//! keys events by their own id (librdkafka's default partitioner, not the
//! grouping key) feeds the input while faults are injected, so every
//! `key_by` goes through its repartition topic. The faults, drawn from the
//! seed:
//!
//! - kill -9 of an instance, restarted after a delay (sometimes with its
//!   state directory wiped, so it restores from the changelogs);
//! - SIGSTOP, then SIGCONT (a frozen member);
//! - a graceful restart (SIGTERM, start again);
//! - scale-out (a new instance) and scale-in (one stopped for good);
//! - a broker restart (SIGTERM or SIGKILL, down for a while): at least one
//!   per run.
//!
//! The instances run with different numbers of processing threads
//! (`--threads`: instance-0, 3, … the default, the number of cores;
//! instance-1, 4, … one; instance-2, 5, … four), so tasks move between
//! single- and multi-threaded members.
//!
//! Then the faults stop, the test waits until the group has committed every
//! input record and every repartitioned record (by committed offsets, not by
//! a quiet period) and the outputs that timers produce are all there (every
//! event in a committed folded event, every counter at its value), and judges
//! the outputs against an expectation computed from the input alone. Then
//! membership changes are made one at a time (`CHAOS_SETTLE_ROUNDS` rounds
//! of a graceful restart, a kill -9 and restart, scale-out and scale-in),
//! each timed from the change until the group settles (every task running
//! once, on instances that each run one, read from their logs); with
//! static membership a restarted instance must get its own tasks back
//! while no other instance closes one. Finally every instance stops, every
//! state directory is wiped, and a tail of input meets state restored from
//! scratch; the whole output is judged again.
//!
//! **Which records may be extra** is known, not guessed: every process
//! keeps a transaction journal (`--txn-journal`) and stamps its records
//! with their transaction. On nisshi, which shows aborted transactions to
//! read_committed readers (DESIGN §9), a record is excused only when the
//! journal shows its transaction did not commit (aborted, or open when its
//! process was killed); against a broker that hides them
//! (`STREAMFOLD_TEST_BOOTSTRAP`) nothing is excused, and the broker is
//! restarted by the command in `CHAOS_BROKER_RESTART` (not at all without
//! one: the harness does not own that broker).
//!
//! Replay and scale: the seed is printed at the start (`CHAOS_KEEP=1` keeps
//! the logs, journals and state of a passing run too; a failing run keeps
//! them always); `CHAOS_SEED=<n>`
//! replays a schedule, and `CHAOS_EVENTS`, `CHAOS_FAULTS`,
//! `CHAOS_INSTANCES`, `CHAOS_STATIC=true|false` scale a run (the long runs
//! in RELIABILITY.md). The schedule (fault kinds, targets, delays) depends
//! only on the seed; when each fault lands relative to the processing does
//! not.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{Value, json};
use support::*;

use streamfold::testkit::article::METRICS;

/// Partitions of each input topic (the tasks of the group).
const PARTITIONS: i32 = 6;
/// Instances never fall below this many, nor rise above `MAX_INSTANCES`.
const MIN_INSTANCES: usize = 2;
const MAX_INSTANCES: usize = 5;
/// How long the end of a run may take to commit everything.
const SETTLE: Duration = Duration::from_secs(300);
/// How long the group may take to settle after one membership change.
const SETTLE_CHANGE: Duration = Duration::from_secs(120);
/// How long outputs that timers produce may take once every input record
/// is committed (folds close within `max_wait`, rollups within seconds).
const COMPLETE: Duration = Duration::from_secs(120);

/// What a run does, from the environment or the test's defaults.
#[derive(Clone, Debug)]
struct Settings {
    seed: u64,
    events: u64,
    faults: usize,
    instances: usize,
    static_membership: bool,
    /// Rounds of membership changes made one at a time after the chaos,
    /// each timed until the group settles (see [`Cluster::measure_settling`]).
    settle_rounds: usize,
}

impl Settings {
    fn from_env(
        test: &str,
        seed: u64,
        events: u64,
        faults: usize,
        static_membership: bool,
    ) -> Self {
        fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
            let text = std::env::var(name).ok()?;
            Some(
                text.parse()
                    .unwrap_or_else(|_| panic!("{name}={text} does not parse")),
            )
        }
        let settings = Settings {
            seed: var("CHAOS_SEED").unwrap_or(seed),
            events: var("CHAOS_EVENTS").unwrap_or(events),
            faults: var("CHAOS_FAULTS").unwrap_or(faults),
            instances: var("CHAOS_INSTANCES").unwrap_or(3),
            static_membership: var("CHAOS_STATIC").unwrap_or(static_membership),
            settle_rounds: var("CHAOS_SETTLE_ROUNDS").unwrap_or(1),
        };
        assert!(settings.instances >= MIN_INSTANCES && settings.instances <= MAX_INSTANCES);
        eprintln!(
            "chaos {test}: {settings:?}\n  replay: CHAOS_SEED={} CHAOS_EVENTS={} CHAOS_FAULTS={} \
             CHAOS_INSTANCES={} CHAOS_STATIC={} cargo test --test chaos {test} -- --nocapture",
            settings.seed,
            settings.events,
            settings.faults,
            settings.instances,
            settings.static_membership
        );
        settings
    }
}

/// One fault of the schedule. Targets are drawn when the fault is applied,
/// from the same seeded generator, among the instances then running: the
/// sequence of instance counts, and so every draw, depends only on the seed.
#[derive(Clone, Debug)]
enum Fault {
    Kill { wipe: bool, down: Duration },
    Freeze(Duration),
    Restart,
    ScaleOut,
    ScaleIn,
    BrokerRestart { crash: bool, down: Duration },
}

/// The faults of a run and the pause before each one.
fn schedule(rng: &mut StdRng, faults: usize, broker_restarts: bool) -> Vec<(Duration, Fault)> {
    let millis =
        |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..hi));
    let mut plan: Vec<(Duration, Fault)> = (0..faults)
        .map(|_| {
            let gap = millis(rng, 500, 4_000);
            let fault = match rng.random_range(0..100) {
                0..40 => Fault::Kill {
                    wipe: rng.random_bool(0.25),
                    down: millis(rng, 200, 5_000),
                },
                40..55 => Fault::Freeze(millis(rng, 500, 6_000)),
                55..70 => Fault::Restart,
                70..80 => Fault::ScaleOut,
                80..90 => Fault::ScaleIn,
                _ => Fault::BrokerRestart {
                    crash: rng.random_bool(0.5),
                    down: millis(rng, 500, 4_000),
                },
            };
            (gap, fault)
        })
        .collect();
    if !broker_restarts {
        plan.retain(|(_, f)| !matches!(f, Fault::BrokerRestart { .. }));
    } else if faults > 0
        && !plan
            .iter()
            .any(|(_, f)| matches!(f, Fault::BrokerRestart { .. }))
    {
        let at = rng.random_range(0..plan.len());
        plan[at].1 = Fault::BrokerRestart {
            crash: rng.random_bool(0.5),
            down: millis(rng, 500, 4_000),
        };
    }
    plan
}

/// A running instance: its process, and what outlives the process.
struct Member {
    app: App,
    state: PathBuf,
}

/// The instances of one application under chaos.
struct Cluster {
    topology: PathBuf,
    env: Vec<(String, String)>,
    static_membership: bool,
    /// Logs, journals and state; kept when the test fails.
    dir: Option<tempfile::TempDir>,
    members: BTreeMap<String, Member>,
    next: usize,
    /// One journal file per process (a process appends only to its own).
    journals: Vec<PathBuf>,
    /// Every log file, for failure messages.
    logs: Vec<PathBuf>,
}

/// `--threads` of instance `id` (`instance-<n>`): none (the default)
/// for every third, else one or four.
fn threads_of(id: &str) -> Option<usize> {
    let n: usize = id.rsplit('-').next()?.parse().ok()?;
    [None, Some(1), Some(4)][n % 3]
}

impl Cluster {
    fn start(topology: &str, env: Vec<(String, String)>, settings: &Settings) -> Cluster {
        let mut cluster = Cluster {
            topology: repo().join("topologies").join(topology),
            env,
            static_membership: settings.static_membership,
            dir: Some(temp_dir()),
            members: BTreeMap::new(),
            next: 0,
            journals: Vec::new(),
            logs: Vec::new(),
        };
        for _ in 0..settings.instances {
            cluster.scale_out();
        }
        cluster
    }

    fn dir(&self) -> &std::path::Path {
        self.dir.as_ref().unwrap().path()
    }

    fn spawn(&mut self, id: &str, state: PathBuf) -> Member {
        let journal = self.dir().join(unique(&format!("journal-{id}")));
        self.journals.push(journal.clone());
        let mut env = self.env.clone();
        env.push((
            "STREAMFOLD_STATIC_MEMBERSHIP".into(),
            self.static_membership.to_string(),
        ));
        let mut args = vec!["--txn-journal".into(), journal.display().to_string()];
        args.extend(threads_of(id).map(|n| format!("--threads={n}")));
        let app = App::start(
            &AppConfig {
                topology: self.topology.clone(),
                instance: id.to_string(),
                state_dir: state.clone(),
                env,
                txn_header: true,
                args,
            },
            self.dir(),
        );
        self.logs.push(app.log.clone());
        Member { app, state }
    }

    fn scale_out(&mut self) -> String {
        let id = format!("instance-{}", self.next);
        self.next += 1;
        let state = self.dir().join(format!("state-{id}"));
        let member = self.spawn(&id, state);
        self.members.insert(id.clone(), member);
        id
    }

    fn pick(&self, rng: &mut StdRng) -> String {
        let ids: Vec<&String> = self.members.keys().collect();
        ids[rng.random_range(0..ids.len())].clone()
    }

    fn assert_running(&self) {
        for member in self.members.values() {
            member.app.assert_running();
        }
    }

    /// Applies `fault`; returns what it did, for the run's log.
    fn apply(&mut self, fault: &Fault, rng: &mut StdRng) -> String {
        match *fault {
            Fault::Kill { wipe, down } => {
                let id = self.pick(rng);
                self.kill(&id, wipe, down);
                format!(
                    "kill -9 {id}, down {down:?}{}",
                    if wipe { ", state wiped" } else { "" }
                )
            }
            Fault::Freeze(pause) => {
                let id = self.pick(rng);
                let app = &self.members[&id].app;
                app.pause();
                std::thread::sleep(pause);
                app.resume();
                format!("SIGSTOP {id} for {pause:?}")
            }
            Fault::Restart => {
                let id = self.pick(rng);
                self.restart(&id);
                format!("graceful restart of {id}")
            }
            Fault::ScaleOut if self.members.len() < MAX_INSTANCES => {
                format!("scale out: {} added", self.scale_out())
            }
            Fault::ScaleIn if self.members.len() > MIN_INSTANCES => {
                let id = self.pick(rng);
                self.scale_in(&id);
                format!("scale in: {id} stopped for good")
            }
            // At the bounds, scaling turns into the opposite step.
            Fault::ScaleOut => self.apply(&Fault::ScaleIn, rng),
            Fault::ScaleIn => self.apply(&Fault::ScaleOut, rng),
            Fault::BrokerRestart { crash, down } => {
                restart_broker(crash, down);
                format!(
                    "broker {}, down {down:?}",
                    if crash { "kill -9" } else { "SIGTERM" }
                )
            }
        }
    }

    /// kill -9 of instance `id`, started again (same id and state
    /// directory, wiped if `wipe`) after `down`.
    fn kill(&mut self, id: &str, wipe: bool, down: Duration) {
        let member = self.members.remove(id).unwrap();
        member.app.kill();
        if wipe {
            std::fs::remove_dir_all(&member.state).ok();
        }
        std::thread::sleep(down);
        let restarted = self.spawn(id, member.state);
        self.members.insert(id.to_string(), restarted);
    }

    /// SIGTERM to instance `id`, then started again at once.
    fn restart(&mut self, id: &str) {
        let member = self.members.remove(id).unwrap();
        member.app.stop();
        let restarted = self.spawn(id, member.state);
        self.members.insert(id.to_string(), restarted);
    }

    /// SIGTERM to instance `id`, stopped for good.
    fn scale_in(&mut self, id: &str) {
        self.members.remove(id).unwrap().app.stop();
    }

    /// Every instance stops; their state directories are wiped; `instances`
    /// fresh processes (same ids) restore from the changelogs.
    fn restart_from_scratch(&mut self, instances: usize) {
        let stopped: Vec<(String, Member)> =
            std::mem::take(&mut self.members).into_iter().collect();
        for (_, member) in stopped {
            member.app.stop();
            std::fs::remove_dir_all(&member.state).ok();
        }
        self.next = 0;
        for _ in 0..instances {
            self.scale_out();
        }
    }

    fn journal(&self) -> TxnJournal {
        let mut all = TxnJournal::default();
        for path in &self.journals {
            all.merge(TxnJournal::read(path));
        }
        all
    }

    fn logs_tail(&self) -> String {
        self.logs
            .iter()
            .map(|log| {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(30)..].join("\n");
                format!("==> {} <==\n{tail}", log.display())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until the group has committed every record of `topic` up to
    /// `end` (per partition: the offset after the last record), checking the
    /// instances stay up.
    fn wait_committed(&self, group: &str, topic: &str, end: &[i64]) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let committed = group_committed(group, topic, end.len());
            if committed.iter().zip(end).all(|(c, e)| *e == 0 || *c >= *e) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{group} committed {committed:?} of {topic}, whose end is {end:?}, within {SETTLE:?}\n{}",
                self.logs_tail()
            );
            self.assert_running();
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits up to `timeout` for `condition`, checking the instances stay
    /// up; whether it came.
    fn wait_for(&self, timeout: Duration, condition: impl Fn(&Cluster) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while !condition(self) {
            if Instant::now() >= deadline {
                return false;
            }
            self.assert_running();
            std::thread::sleep(Duration::from_millis(500));
        }
        true
    }
}

impl Cluster {
    /// From each process's log, sorted: seconds from its start to its first
    /// task running (restart-to-processing, first starts included).
    fn startup_seconds(&self) -> Vec<f64> {
        let at = |line: &str| -> Option<std::time::SystemTime> {
            humantime::parse_rfc3339_weak(line.split_whitespace().next()?.trim_end_matches('Z'))
                .ok()
        };
        let mut out = Vec::new();
        for log in &self.logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let start = text.lines().find(|l| l.contains("Starting.")).and_then(at);
            let running = text
                .lines()
                .find(|l| l.contains("Task running."))
                .and_then(at);
            if let (Some(start), Some(running)) = (start, running) {
                out.push(
                    running
                        .duration_since(start)
                        .unwrap_or_default()
                        .as_secs_f64(),
                );
            }
        }
        out.sort_by(f64::total_cmp);
        out
    }
}

/// What one process's log says of its tasks.
#[derive(Clone, Debug, Default)]
struct TaskLog {
    /// Started (`Task running.`) and not closed since.
    running: BTreeSet<i32>,
    /// `Task closed.` lines so far: revocations, and the shutdown's.
    closed: usize,
}

impl TaskLog {
    fn read(log: &std::path::Path) -> TaskLog {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut tasks = TaskLog::default();
        for line in text.lines() {
            let task = || -> Option<i32> {
                let rest = line.split(" task=").nth(1)?;
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            };
            if line.contains("Task running.") {
                tasks.running.extend(task());
            } else if line.contains("Task closed.") {
                if let Some(task) = task() {
                    tasks.running.remove(&task);
                }
                tasks.closed += 1;
            }
        }
        tasks
    }
}

/// A membership change [`Cluster::measure_settling`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    GracefulRestart,
    KillAndRestart,
    ScaleOut,
    ScaleIn,
}

impl Change {
    /// One round, in order.
    const ROUND: [Change; 4] = [
        Change::GracefulRestart,
        Change::KillAndRestart,
        Change::ScaleOut,
        Change::ScaleIn,
    ];
}

impl Cluster {
    /// Each running instance's tasks, from its log.
    fn tasks(&self) -> BTreeMap<String, TaskLog> {
        self.members
            .iter()
            .map(|(id, member)| (id.clone(), TaskLog::read(&member.app.log)))
            .collect()
    }

    /// Whether the group has settled: every running instance runs a task,
    /// and together they run each task exactly once.
    fn settled(&self) -> bool {
        let mut seen = BTreeSet::new();
        self.tasks().values().all(|tasks| {
            !tasks.running.is_empty() && tasks.running.iter().all(|task| seen.insert(*task))
        }) && seen.len() == PARTITIONS as usize
    }

    /// Waits until the group has settled.
    fn wait_settled(&self, after: &str) {
        let start = Instant::now();
        while !self.settled() {
            assert!(
                start.elapsed() < SETTLE_CHANGE,
                "the group did not settle within {SETTLE_CHANGE:?} after {after}: {:?}\n{}",
                self.tasks(),
                self.logs_tail()
            );
            self.assert_running();
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Membership changes made one at a time, each once the group has
    /// settled from the one before: a graceful restart, a kill -9 and
    /// restart at once, scale-out, scale-in. Returns how long the group
    /// took to settle after each (from the change to every task running
    /// once, on instances that all run one; a kill includes the expulsion
    /// of the dead member after `session.timeout.ms` when membership is not
    /// static).
    ///
    /// With static membership, an instance restarted within the session
    /// timeout must get its own tasks back while every other instance keeps
    /// its own: no task closed anywhere else (issue 9, part 5).
    fn measure_settling(&mut self, rng: &mut StdRng, rounds: usize) -> Vec<(Change, Duration)> {
        let mut out = Vec::new();
        for _ in 0..rounds {
            for change in Change::ROUND {
                self.wait_settled("the previous change");
                let before = self.tasks();
                let start = Instant::now();
                let id = match change {
                    Change::GracefulRestart => {
                        let id = self.pick(rng);
                        self.restart(&id);
                        id
                    }
                    Change::KillAndRestart => {
                        let id = self.pick(rng);
                        self.kill(&id, false, Duration::ZERO);
                        id
                    }
                    Change::ScaleOut if self.members.len() < MAX_INSTANCES => self.scale_out(),
                    Change::ScaleIn if self.members.len() > MIN_INSTANCES => {
                        let id = self.pick(rng);
                        self.scale_in(&id);
                        id
                    }
                    Change::ScaleOut | Change::ScaleIn => continue,
                };
                let what = format!("{change:?} of {id}");
                self.wait_settled(&what);
                let took = start.elapsed();
                eprintln!("  {what}: settled in {:.1} s", took.as_secs_f64());
                out.push((change, took));
                let restarted = matches!(change, Change::GracefulRestart | Change::KillAndRestart);
                if self.static_membership && restarted {
                    let after = self.tasks();
                    assert_eq!(
                        after[&id].running, before[&id].running,
                        "static member {id} did not get its own tasks back after {what}"
                    );
                    for (other, tasks) in before.iter().filter(|(other, _)| **other != id) {
                        assert_eq!(
                            after[other].closed, tasks.closed,
                            "{other} closed a task when static member {id} restarted ({what})"
                        );
                    }
                }
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("CHAOS_KEEP").is_some() || std::thread::panicking() {
            let kept = self.dir.take().unwrap().keep();
            eprintln!("chaos: logs, journals and state kept in {}", kept.display());
        }
    }
}

/// The input producer: keyed by the event's own id and placed by
/// librdkafka's default partitioner, so records of one grouping key are
/// spread over every partition. It rides out broker restarts (idempotent,
/// long delivery timeout); a record that is not delivered fails the test.
struct Feed {
    producer: BaseProducer<Delivered>,
}

impl Feed {
    fn new() -> Feed {
        Feed {
            producer: ClientConfig::new()
                .set("bootstrap.servers", &broker().bootstrap)
                .set("enable.idempotence", "true")
                .set("linger.ms", "5")
                .set("message.timeout.ms", "300000")
                .create_with_context(Delivered::default())
                .unwrap(),
        }
    }

    fn send(&self, topic: &str, key: &str, value: &Value) {
        let payload = serde_json::to_vec(value).unwrap();
        let mut record = BaseRecord::<str, [u8]>::to(topic)
            .key(key)
            .payload(&payload);
        loop {
            match self.producer.send(record) {
                Ok(()) => {
                    self.producer.poll(Duration::ZERO);
                    return;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce failed: {e}"),
            }
        }
    }

    fn flush(&self) {
        self.producer
            .flush(Duration::from_secs(300))
            .expect("every input record is delivered");
    }

    /// The offset after the last record written to each partition.
    fn ends(&self, topic: &str) -> Vec<i64> {
        let ends = self.producer.context().ends();
        (0..PARTITIONS)
            .map(|p| ends.get(&(topic.to_string(), p)).copied().unwrap_or(0))
            .collect()
    }
}

/// Sends `events` paced evenly over `over`, on its own thread; returns the
/// producer once every record is delivered.
fn feed_during(
    events: Vec<(String, String, Value)>,
    over: Duration,
) -> std::thread::JoinHandle<Feed> {
    std::thread::spawn(move || {
        let feed = Feed::new();
        let started = Instant::now();
        let total = events.len().max(1) as u32;
        // A null `event_time` is stamped with the time of sending; copies of
        // one token (a retry) share the first copy's stamp.
        let mut stamps: BTreeMap<String, String> = BTreeMap::new();
        for (i, (topic, key, value)) in events.into_iter().enumerate() {
            let due = started + over * (i as u32) / total;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let mut value = value;
            if value.get("event_time") == Some(&Value::Null) {
                let token = value["token"].as_str().unwrap_or_default().to_string();
                let stamp = stamps.entry(token).or_insert_with(|| {
                    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
                });
                value["event_time"] = json!(stamp);
            }
            feed.send(&topic, &key, &value);
        }
        feed.flush();
        feed
    })
}

/// The offset after the last record of each partition of `topic`, from a
/// read to its end (nisshi's ListOffsets cannot be trusted, DESIGN §9).
fn record_ends(topic: &str) -> Vec<i64> {
    let mut ends = vec![0; partition_count(topic) as usize];
    for record in read_to_end(topic, Duration::from_secs(120)) {
        let end = &mut ends[record.partition as usize];
        *end = (*end).max(record.offset + 1);
    }
    ends
}

/// The command that restarts an external broker (`STREAMFOLD_TEST_BOOTSTRAP`),
/// e.g. `docker compose -f docker/compose.yaml restart kafka`.
fn external_restart() -> Option<String> {
    std::env::var("CHAOS_BROKER_RESTART").ok()
}

/// Restarts the broker: nisshi of this test binary (SIGKILL when `crash`,
/// else SIGTERM; down for `down`), or an external one with
/// `CHAOS_BROKER_RESTART`.
fn restart_broker(crash: bool, down: Duration) {
    if broker().restartable() {
        return broker().restart(crash, down);
    }
    let command = external_restart().expect("a broker restart was scheduled");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .status()
        .unwrap();
    assert!(status.success(), "`{command}` failed: {status}");
    wait_for_broker(&broker().bootstrap);
}

/// Runs `plan` against `cluster` while `events` are fed; returns the
/// producer once everything is delivered and the faults are over.
fn run_chaos(
    cluster: &mut Cluster,
    rng: &mut StdRng,
    settings: &Settings,
    events: Vec<(String, String, Value)>,
) -> Feed {
    let restarts = broker().restartable() || external_restart().is_some();
    let plan = schedule(rng, settings.faults, restarts);
    eprintln!("chaos plan ({} faults):", plan.len());
    for (gap, fault) in &plan {
        eprintln!("  after {gap:?}: {fault:?}");
    }
    let planned: Duration = plan
        .iter()
        .map(|(gap, fault)| {
            *gap + match fault {
                Fault::Kill { down, .. } => *down,
                Fault::Freeze(pause) => *pause,
                Fault::BrokerRestart { down, .. } => *down,
                _ => Duration::from_secs(1),
            }
        })
        .sum();
    let feeding = feed_during(events, planned);
    let started = Instant::now();
    for (i, (gap, fault)) in plan.iter().enumerate() {
        std::thread::sleep(*gap);
        cluster.assert_running();
        let done = cluster.apply(fault, rng);
        eprintln!(
            "  [{:>6.1}s] fault {}: {done}",
            started.elapsed().as_secs_f64(),
            i + 1
        );
    }
    let feed = feeding.join().expect("the producer delivered every record");
    cluster.assert_running();
    feed
}

/// Splits `records` by what the journal says of their transactions:
/// committed ones, and the count of excused ones (aborted, or open when
/// their process was killed). A record without a transaction, or with one
/// the journal never saw, fails the test. A broker that hides aborted
/// transactions shows none of their records, so there only a transaction
/// in doubt at a kill (see [`resolve_in_doubt`]) can have records the
/// journal does not call committed, and they did commit.
fn committed_only<'a>(records: &'a [Consumed], journal: &TxnJournal) -> (Vec<&'a Consumed>, usize) {
    let in_doubt = journal.in_doubt();
    let mut committed = Vec::new();
    let mut excused = 0;
    for record in records {
        let label = record
            .header("streamfold.txn")
            .unwrap_or_else(|| panic!("a record without its transaction: {record:?}"));
        assert!(
            journal.begun.contains(label),
            "{label} is not in any journal"
        );
        let resolved = || broker().strict || journal.fate(label) == Fate::Committed;
        if journal.committed.contains(label) || in_doubt.contains(label) && resolved() {
            committed.push(record);
        } else {
            assert!(
                !broker().strict,
                "a broker that hides aborted transactions shows none of their records: {label}"
            );
            excused += 1;
        }
    }
    (committed, excused)
}

fn strings(value: &Value) -> BTreeSet<String> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            })
            .collect(),
        Value::Object(map) => map.keys().cloned().collect(),
        _ => BTreeSet::new(),
    }
}

// ---------------------------------------------------------------------------
// social-metrics: fold bursts per account through the repartition topic.

const SOCIAL_ACCOUNTS: u64 = 200;

/// Event `i`: a random account, a post id of its own (so each event can be
/// traced to the one folded event that carries it), one or two metrics.
fn social_event(rng: &mut StdRng, i: u64, topic: &str) -> (String, String, Value) {
    let account = format!("account_{}", rng.random_range(0..SOCIAL_ACCOUNTS));
    let mut metrics = serde_json::Map::new();
    for _ in 0..rng.random_range(1..3) {
        metrics.insert(
            METRICS[rng.random_range(0..METRICS.len())].to_string(),
            json!(i),
        );
    }
    let value = json!({"account_id": account, "post_id": format!("post_{i}"), "metrics": metrics});
    (topic.to_string(), format!("event_{i}"), value)
}

/// A process killed after asking the broker to commit and before hearing
/// back leaves a transaction in doubt (`committing` without `committed`
/// in its journal). [`TxnJournal::fate`] tells most of them from the
/// offsets the next owners resumed at, and [`committed_only`] counts
/// those accordingly. Its fate also shows in the output: had it not
/// committed, every event it folded was folded again by a committed
/// transaction; had it committed, none was. This checks the two agree,
/// and decides by the output the ones whose next owners left no trace (a
/// mix is a real loss or double).
fn resolve_in_doubt<'a>(
    outputs: &'a [Consumed],
    journal: &TxnJournal,
    committed: &mut Vec<&'a Consumed>,
    excused: &mut usize,
) {
    let in_doubt = journal.in_doubt();
    if in_doubt.is_empty() || broker().strict {
        return;
    }
    let elsewhere: BTreeSet<String> = committed
        .iter()
        .filter(|r| !in_doubt.contains(r.header("streamfold.txn").unwrap()))
        .flat_map(|r| strings(&r.json()["posts"]))
        .collect();
    let mut by_label: BTreeMap<&str, Vec<&Consumed>> = BTreeMap::new();
    for record in outputs {
        let label = record.header("streamfold.txn").unwrap();
        if in_doubt.contains(label) {
            by_label.entry(label).or_default().push(record);
        }
    }
    for (label, records) in by_label {
        let posts: Vec<String> = records
            .iter()
            .flat_map(|r| strings(&r.json()["posts"]))
            .collect();
        let again = posts.iter().filter(|p| elsewhere.contains(*p)).count();
        let fate = journal.fate(label);
        eprintln!(
            "  {label} was in doubt at a kill: {fate:?} by the offsets its next owners resumed at; \
             {again} of its {} events folded again",
            posts.len()
        );
        match fate {
            Fate::Committed => assert_eq!(
                again, 0,
                "{label} committed, yet its events were folded again"
            ),
            Fate::NotCommitted => assert_eq!(
                again,
                posts.len(),
                "{label} did not commit, yet not all its events were folded again"
            ),
            Fate::Unknown if again == 0 => {
                *excused -= records.len();
                committed.extend(records);
            }
            Fate::Unknown => assert_eq!(
                again,
                posts.len(),
                "{label}, in doubt at a kill, has {again} of its {} events folded again by \
                 committed transactions: neither committed nor not",
                posts.len()
            ),
        }
    }
}

/// Every input event is in exactly one committed folded event, under its
/// account; each folded event's `folded_count` is the number of posts it
/// carries; per account, the metrics are the union of its events'.
fn judge_social(
    outputs: &[Consumed],
    journal: &TxnJournal,
    input: &[(String, String, Value)],
) -> usize {
    let (mut committed, mut excused) = committed_only(outputs, journal);
    resolve_in_doubt(outputs, journal, &mut committed, &mut excused);
    let mut expected_posts: BTreeMap<String, String> = BTreeMap::new();
    let mut expected_metrics: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, _, event) in input {
        let account = event["account_id"].as_str().unwrap().to_string();
        expected_posts.insert(
            event["post_id"].as_str().unwrap().to_string(),
            account.clone(),
        );
        expected_metrics
            .entry(account)
            .or_default()
            .extend(strings(&event["metrics"]));
    }
    let mut seen_posts: BTreeMap<String, String> = BTreeMap::new();
    let mut seen_metrics: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for record in &committed {
        let fold = record.json();
        let account = fold["account_id"].as_str().unwrap().to_string();
        assert_eq!(record.key.as_deref(), Some(account.as_str()), "{fold}");
        let posts = strings(&fold["posts"]);
        assert_eq!(
            fold["folded_count"].as_u64(),
            Some(posts.len() as u64),
            "a folded event counts each of its events once: {fold}"
        );
        for post in posts {
            let label = record.header("streamfold.txn").unwrap();
            let place = format!(
                "{account} in {label} at {}/{}",
                record.partition, record.offset
            );
            if let Some(first) = seen_posts.insert(post.clone(), place.clone()) {
                panic!("{post} folded twice: {first}, and {place}");
            }
            assert_eq!(
                expected_posts.get(&post),
                Some(&account),
                "{post} folded under the wrong account, or never produced"
            );
        }
        seen_metrics
            .entry(account)
            .or_default()
            .extend(strings(&fold["metrics"]));
    }
    let missing: Vec<&String> = expected_posts
        .keys()
        .filter(|p| !seen_posts.contains_key(*p))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events are in no committed folded event, e.g. {:?}",
        missing.len(),
        expected_posts.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(seen_metrics, expected_metrics, "metrics per account");
    excused
}

/// An input record: topic, key, value.
type Event = (String, String, Value);

/// Whether the outputs of some input are complete.
type Finished = Box<dyn Fn(&Cluster, &[Event]) -> bool>;

/// One article topology under chaos.
struct Scenario {
    test: &'static str,
    topology: &'static str,
    app: String,
    /// The input topics, created by the test.
    sources: Vec<String>,
    /// Repartition topics to see committed to their ends.
    repartitions: Vec<String>,
    /// The topics it writes, created by the test on nisshi.
    outputs: Vec<String>,
    env: Vec<(String, String)>,
    /// Whether the outputs of `input` are complete, from what the output
    /// topics hold: timers (folds closing, rollups) may still be due once
    /// every input record is committed.
    finished: Finished,
}

impl Scenario {
    fn new(test: &'static str, topology: &'static str, prefix: &str) -> Scenario {
        Scenario {
            test,
            topology,
            app: unique(prefix),
            sources: Vec::new(),
            repartitions: Vec::new(),
            outputs: Vec::new(),
            env: Vec::new(),
            finished: Box::new(|_, _| true),
        }
    }

    fn env(&mut self, name: &str, value: &str) {
        self.env.push((name.into(), value.into()));
    }

    /// A fresh output topic named after `prefix`, passed to the topology as
    /// `var`.
    fn topic(&mut self, var: &str, prefix: &str) -> String {
        let topic = unique(prefix);
        self.env(var, &topic);
        self.outputs.push(topic.clone());
        topic
    }

    /// On nisshi, creates the output topics and the compacted internal
    /// topics (changelogs) before streamfold does, without
    /// `cleanup.policy=compact`. nisshi 0.7.0 compacts at every start and
    /// every 10 minutes keeping each key's highest offset whatever its
    /// transaction became, so a record of an aborted (or still open)
    /// transaction replaces the committed one: a changelog would lose
    /// committed state on a broker restart, an output its last committed
    /// value (DESIGN §9, docs/exactly-once.md). Apache Kafka compacts only
    /// below the last stable offset and drops aborted records, so there
    /// streamfold creates them compacted, as in production.
    fn create_uncompacted_topics(&self) {
        if broker().strict {
            return;
        }
        let described = std::process::Command::new(streamfold_binary())
            .arg("describe")
            .arg(repo().join("topologies").join(self.topology))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap();
        assert!(described.status.success(), "{described:?}");
        let text = String::from_utf8(described.stdout).unwrap();
        let changelogs = text
            .lines()
            .filter(|l| l.ends_with("(compacted)"))
            .filter_map(|l| l.split_whitespace().next());
        for topic in changelogs.chain(self.outputs.iter().map(String::as_str)) {
            create_topic(topic, PARTITIONS);
        }
    }

    fn source(&mut self, var: &str, prefix: &str) -> String {
        let topic = self.topic(var, prefix);
        create_topic(&topic, PARTITIONS);
        self.sources.push(topic.clone());
        topic
    }

    fn repartition(&mut self, node: &str) {
        self.repartitions
            .push(format!("{}-{node}-repartition", self.app));
    }

    /// Waits until everything fed so far (`input`) is processed and
    /// committed.
    fn settle(&self, cluster: &Cluster, feed: &Feed, input: &[Event]) {
        for source in &self.sources {
            cluster.wait_committed(&self.app, source, &feed.ends(source));
        }
        for topic in &self.repartitions {
            cluster.wait_committed(&self.app, topic, &record_ends(topic));
        }
        // Incomplete outputs are for the judge to explain (what is missing,
        // where); waiting longer would not bring them.
        if !cluster.wait_for(COMPLETE, |c| (self.finished)(c, input)) {
            eprintln!(
                "{}: the outputs are not complete after {COMPLETE:?}",
                self.test
            );
        }
    }

    /// The whole run: chaos while `input` is fed, judge; then every state
    /// directory wiped, `tail` fed to state restored from scratch, judge
    /// everything again. `judge` reads the outputs, then the journals (so
    /// that every transaction it sees has its `begin` there), and returns
    /// the number of excused records.
    fn run(
        mut self,
        settings: &Settings,
        rng: &mut StdRng,
        input: Vec<Event>,
        tail: Vec<Event>,
        judge: impl Fn(&Cluster, &[Event]) -> usize,
    ) {
        self.env("STREAMFOLD_APP", &self.app.clone());
        self.create_uncompacted_topics();
        let mut cluster = Cluster::start(self.topology, self.env.clone(), settings);
        let feed = run_chaos(&mut cluster, rng, settings, input.clone());
        self.settle(&cluster, &feed, &input);
        let excused = judge(&cluster, &input);
        let journal = cluster.journal();
        eprintln!(
            "{}: judged {} input records: nothing lost, nothing twice; {excused} records of {} \
             uncommitted transactions excused ({} open at a kill, {} of them in doubt, {} aborted); \
             in doubt: {:?}",
            self.test,
            input.len(),
            journal.uncommitted().len(),
            journal.open_at_kill().len(),
            journal.in_doubt().len(),
            journal.aborted.len(),
            journal
                .in_doubt()
                .iter()
                .map(|label| (label.clone(), journal.fate(label)))
                .collect::<Vec<_>>(),
        );

        let startup = cluster.startup_seconds();
        if !startup.is_empty() {
            eprintln!(
                "{}: start to first task running, {} processes: median {:.1} s, max {:.1} s",
                self.test,
                startup.len(),
                startup[startup.len() / 2],
                startup[startup.len() - 1]
            );
        }
        let settling = cluster.measure_settling(rng, settings.settle_rounds);
        for change in Change::ROUND {
            let mut seconds: Vec<f64> = settling
                .iter()
                .filter(|(c, _)| *c == change)
                .map(|(_, took)| took.as_secs_f64())
                .collect();
            seconds.sort_by(f64::total_cmp);
            if let (Some(median), Some(max)) = (seconds.get(seconds.len() / 2), seconds.last()) {
                eprintln!(
                    "{}: rebalance settle after {change:?} (static membership {}), {} times: median {median:.1} s, max {max:.1} s",
                    self.test,
                    if settings.static_membership {
                        "on"
                    } else {
                        "off"
                    },
                    seconds.len()
                );
            }
        }
        cluster.restart_from_scratch(settings.instances.min(2));
        let feed = feed_during(tail.clone(), Duration::from_secs(1))
            .join()
            .unwrap();
        let all: Vec<Event> = input.into_iter().chain(tail).collect();
        self.settle(&cluster, &feed, &all);
        judge(&cluster, &all);
        eprintln!(
            "{}: after a from-scratch restore and {} more records: judged again, all well",
            self.test,
            all.len()
        );
    }
}

#[test]
fn social_metrics_under_chaos() {
    let _serial = serial();
    persistent_broker();
    let settings = Settings::from_env("social_metrics_under_chaos", 1, 6_000, 10, false);
    let mut rng = StdRng::seed_from_u64(settings.seed);
    let mut scenario = Scenario::new(
        "social_metrics_under_chaos",
        "social-metrics.yaml",
        "chaos-social",
    );
    let source = scenario.source("POST_METRICS_TOPIC", "chaos-posts");
    let folded = scenario.topic("FOLDED_TOPIC", "chaos-folded");
    let dlq = scenario.topic("DEAD_LETTER_TOPIC", "chaos-social-dlq");
    scenario.repartition("fold_account");
    scenario.env("FOLD_QUIET_FOR", "1s");
    scenario.env("FOLD_MAX_WAIT", "10s");
    scenario.env("FOLD_MAX_EVENTS", "20");
    // Done when the committed folded events count every input event.
    let topic = folded.clone();
    scenario.finished = Box::new(move |cluster, input| {
        let outputs = read_to_end(&topic, Duration::from_secs(120));
        let journal = cluster.journal();
        let folded: u64 = committed_only(&outputs, &journal)
            .0
            .iter()
            .map(|r| r.json()["folded_count"].as_u64().unwrap_or(0))
            .sum();
        folded >= input.len() as u64
    });
    let input: Vec<Event> = (0..settings.events)
        .map(|i| social_event(&mut rng, i, &source))
        .collect();
    let tail: Vec<Event> = (settings.events..settings.events + SOCIAL_ACCOUNTS)
        .map(|i| social_event(&mut rng, i, &source))
        .collect();
    scenario.run(&settings, &mut rng, input, tail, |cluster, input| {
        let dead = read_to_end(&dlq, Duration::from_secs(60));
        assert!(dead.is_empty(), "dead letters: {dead:?}");
        let outputs = read_to_end(&folded, Duration::from_secs(120));
        judge_social(&outputs, &cluster.journal(), input)
    });
}

// ---------------------------------------------------------------------------
// question-feed: dedup, a projection per question and ordered thanks totals,
// both through repartition topics, with every event sent twice now and then.

const QUESTIONS: u64 = 60;
const ANSWERS: u64 = 60;

/// The question-feed input: per question a `QuestionCreated` then edits and
/// answers (some questions end deleted), per answer growing thanks totals;
/// each event keyed by its id, about one in ten sent twice (dedup drops the
/// copy). `first` numbers the events; `sequences` carries each question's and
/// answer's next sequence across calls.
fn question_events(
    rng: &mut StdRng,
    topic: &str,
    count: u64,
    first: u64,
    sequences: &mut BTreeMap<String, u64>,
) -> Vec<Event> {
    let mut out = Vec::new();
    for i in first..first + count {
        let id = format!("event_{i}");
        let value = if rng.random_bool(0.6) {
            let question = format!("q{}", rng.random_range(0..QUESTIONS));
            let seq = sequences.entry(question.clone()).or_insert(0);
            *seq += 1;
            let kind = match (*seq, rng.random_range(0..10)) {
                (1, _) => "QuestionCreated",
                (_, 0..5) => "QuestionEdited",
                (_, 5..9) => "AnswerAdded",
                _ => "QuestionDeleted",
            };
            json!({"event_id": id, "type": kind, "question_id": question, "sequence": *seq,
                   "title": format!("{question} title {seq}"), "author": format!("author of {question}")})
        } else {
            let answer = format!("a{}", rng.random_range(0..ANSWERS));
            let seq = sequences.entry(answer.clone()).or_insert(0);
            *seq += 1;
            json!({"event_id": id, "type": "ThanksForAnswerGiven", "answer_id": answer,
                   "totalThanks": *seq, "sequence": *seq})
        };
        let event = (topic.to_string(), id, value);
        if rng.random_bool(0.1) {
            out.push(event.clone());
        }
        out.push(event);
    }
    out
}

/// The read model a question's events give, applied in sequence order.
fn expected_question(question: &str, events: &BTreeMap<u64, Value>) -> Value {
    let mut model = serde_json::Map::new();
    let mut answers = 0;
    for event in events.values() {
        match event["type"].as_str().unwrap() {
            "QuestionCreated" => {
                model.insert("title".into(), event["title"].clone());
                model.insert("author".into(), event["author"].clone());
                model.entry("is_deleted").or_insert(json!(false));
            }
            "QuestionEdited" => {
                model.insert("title".into(), event["title"].clone());
            }
            "AnswerAdded" => {
                answers += 1;
                model.insert("answers".into(), json!(answers));
            }
            _ => {
                model.insert("is_deleted".into(), json!(true));
            }
        }
    }
    model.insert("question_id".into(), json!(question));
    model.insert("version".into(), json!(events.len()));
    Value::Object(model)
}

/// Per question (the topic is compacted, so a question's history may be
/// cut short): the committed read models there carry growing versions, no
/// committed version comes with two contents, and the last is the in-order fold of
/// every distinct event, its version their number. Per answer: committed
/// totals grow in sequence with growing Lamport clocks, the last is the
/// highest total sent, and its clock counts at most one tick per total.
fn judge_questions(
    models: &[Consumed],
    thanks: &[Consumed],
    journal: &TxnJournal,
    input: &[Event],
) -> usize {
    let mut questions: BTreeMap<String, BTreeMap<u64, Value>> = BTreeMap::new();
    let mut answers: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, event) in input {
        let seq = event["sequence"].as_u64().unwrap();
        if let Some(question) = event["question_id"].as_str() {
            questions
                .entry(question.into())
                .or_default()
                .insert(seq, event.clone());
        } else {
            let answer = event["answer_id"].as_str().unwrap().to_string();
            let top = answers.entry(answer).or_default();
            *top = (*top).max(seq);
        }
    }
    let (models, excused_models) = committed_only(models, journal);
    // Every committed version of every question: a version means one
    // content. (A transaction that did not commit may have applied the
    // same number of events in another order of arrival: its version N
    // can differ, and it is excused with the rest of its records.)
    let mut versions: BTreeMap<(String, u64), Value> = BTreeMap::new();
    for record in &models {
        let model = record.json();
        let key = (
            record.key.clone().unwrap_or_default(),
            model["version"].as_u64().unwrap(),
        );
        if let Some(other) = versions.insert(key.clone(), model.clone()) {
            assert_eq!(other, model, "{key:?} with two contents");
        }
    }
    let (thanks, excused_thanks) = committed_only(thanks, journal);
    let models: Vec<Consumed> = models.into_iter().cloned().collect();
    let models = by_key(&models);
    assert_eq!(
        models.keys().collect::<Vec<_>>(),
        questions.keys().collect::<Vec<_>>(),
        "one read model per question"
    );
    for (question, events) in &questions {
        let history: Vec<Value> = models[question].iter().map(|r| r.json()).collect();
        let seen: Vec<u64> = history
            .iter()
            .map(|m| m["version"].as_u64().unwrap())
            .collect();
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "{question}: versions only grow: {seen:?}"
        );
        assert_eq!(
            history.last().unwrap(),
            &expected_question(question, events),
            "{question}: the read model of its events in sequence order"
        );
    }
    let thanks: Vec<Consumed> = thanks.into_iter().cloned().collect();
    let thanks = by_key(&thanks);
    assert_eq!(
        thanks.keys().collect::<Vec<_>>(),
        answers.keys().collect::<Vec<_>>(),
        "one thanks total per answer"
    );
    for (answer, top) in &answers {
        let history: Vec<Value> = thanks[answer].iter().map(|r| r.json()).collect();
        let field = |name: &str| -> Vec<u64> {
            history.iter().map(|t| t[name].as_u64().unwrap()).collect()
        };
        let (sequences, lamports) = (field("sequence"), field("lamport"));
        assert!(
            sequences.windows(2).all(|w| w[0] < w[1]) && lamports.windows(2).all(|w| w[0] < w[1]),
            "{answer}: totals and clocks only grow: {sequences:?} {lamports:?}"
        );
        assert_eq!(
            sequences.last(),
            Some(top),
            "{answer}: ends at the highest total"
        );
        assert!(
            *lamports.last().unwrap() <= *top,
            "{answer}: one tick per applied total at most: {lamports:?}"
        );
    }
    excused_models + excused_thanks
}

#[test]
fn question_feed_under_chaos() {
    let _serial = serial();
    persistent_broker();
    let settings = Settings::from_env("question_feed_under_chaos", 2, 4_000, 10, true);
    let mut rng = StdRng::seed_from_u64(settings.seed);
    let mut scenario = Scenario::new(
        "question_feed_under_chaos",
        "question-feed.yaml",
        "chaos-questions",
    );
    let source = scenario.source("FEED_EVENTS_TOPIC", "chaos-feed");
    let models = scenario.topic("QUESTIONS_TOPIC", "chaos-read-models");
    let thanks = scenario.topic("THANKS_TOPIC", "chaos-thanks");
    let other = scenario.topic("OTHER_EVENTS_TOPIC", "chaos-other");
    let dlq = scenario.topic("DEAD_LETTER_TOPIC", "chaos-questions-dlq");
    scenario.repartition("project_question");
    scenario.repartition("thanks_totals");
    let mut sequences = BTreeMap::new();
    let input = question_events(&mut rng, &source, settings.events, 0, &mut sequences);
    // After the restore: one more event for every question and answer.
    let tail: Vec<Event> = sequences
        .iter_mut()
        .map(|(entity, seq)| {
            *seq += 1;
            let id = format!("tail_{entity}");
            let value = if entity.starts_with('q') {
                json!({"event_id": id, "type": "QuestionEdited", "question_id": entity,
                       "sequence": *seq, "title": format!("{entity} title {seq}")})
            } else {
                json!({"event_id": id, "type": "ThanksForAnswerGiven", "answer_id": entity,
                       "totalThanks": *seq, "sequence": *seq})
            };
            (source.clone(), id, value)
        })
        .collect();
    scenario.run(&settings, &mut rng, input, tail, |cluster, input| {
        let dead = read_to_end(&dlq, Duration::from_secs(60));
        assert!(dead.is_empty(), "dead letters: {dead:?}");
        let other = read_to_end(&other, Duration::from_secs(60));
        assert!(other.is_empty(), "unrouted events: {other:?}");
        let models = read_to_end(&models, Duration::from_secs(120));
        let thanks = read_to_end(&thanks, Duration::from_secs(120));
        judge_questions(&models, &thanks, &cluster.journal(), input)
    });
}

// ---------------------------------------------------------------------------
// distributed-counter: idempotent rollups per counter through the
// repartition topic, with the producer retrying every event once.

const COUNTERS: u64 = 50;

/// Counter events, each sent twice in a row (the producer's retry: same
/// token, same event time, which the feed stamps when it sends the first).
fn counter_events(rng: &mut StdRng, topic: &str, count: u64, first: u64) -> Vec<Event> {
    let mut out = Vec::new();
    for i in first..first + count {
        let token = format!("token_{i}");
        let value = json!({"counter": format!("likes:post_{}", rng.random_range(0..COUNTERS)),
                           "token": token, "delta": rng.random_range(1..10), "event_time": null});
        out.push((topic.to_string(), token.clone(), value.clone()));
        out.push((topic.to_string(), token, value));
    }
    out
}

/// What the counter topics hold against what the input asks for.
struct Counted {
    /// Per counter, the value of its last committed rollup.
    actual: BTreeMap<String, i64>,
    /// Per counter, the sum of the deltas of its distinct tokens, less those
    /// the node dead-lettered as late (a token counts unless every copy of
    /// it is a committed dead letter).
    expected: BTreeMap<String, i64>,
    /// Committed dead letters per token.
    late: BTreeMap<String, usize>,
    /// Tokens not counted at all.
    uncounted: usize,
    excused: usize,
}

/// Reads the counters' outputs against the input; fails on a dead letter
/// that is not a late event of the rollup, or on more dead letters of a
/// token than it had copies (a copy dead-lettered twice).
fn count_counters(
    values: &[Consumed],
    dead: &[Consumed],
    journal: &TxnJournal,
    input: &[Event],
) -> Counted {
    let mut tokens: BTreeMap<String, (String, i64, usize)> = BTreeMap::new();
    for (_, _, event) in input {
        let entry = tokens
            .entry(event["token"].as_str().unwrap().into())
            .or_insert_with(|| {
                (
                    event["counter"].as_str().unwrap().into(),
                    event["delta"].as_i64().unwrap(),
                    0,
                )
            });
        entry.2 += 1;
    }
    let (dead, excused_dead) = committed_only(dead, journal);
    let mut late: BTreeMap<String, usize> = BTreeMap::new();
    for letter in &dead {
        assert_eq!(
            letter.header("streamfold.dlq.node"),
            Some("rollup_counters"),
            "{letter:?}"
        );
        *late
            .entry(letter.json()["token"].as_str().unwrap().into())
            .or_default() += 1;
    }
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut uncounted = 0;
    for (token, (counter, delta, copies)) in &tokens {
        let dead = late.get(token).copied().unwrap_or(0);
        assert!(
            dead <= *copies,
            "{token}: {dead} dead letters of {copies} copies"
        );
        let total = expected.entry(counter.clone()).or_default();
        if dead < *copies {
            *total += delta;
        } else {
            uncounted += 1;
        }
    }
    let (values, excused_values) = committed_only(values, journal);
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    for record in values {
        let value = record.json();
        let counter = value["counter"].as_str().unwrap().to_string();
        let newer = last
            .get(&counter)
            .is_none_or(|seen| seen["last_rollup_ts"].as_str() <= value["last_rollup_ts"].as_str());
        if newer {
            last.insert(counter, value);
        }
    }
    let actual = last
        .iter()
        .map(|(c, v)| (c.clone(), v["value"].as_i64().unwrap()))
        .collect();
    Counted {
        actual,
        expected,
        late,
        uncounted,
        excused: excused_dead + excused_values,
    }
}

#[test]
fn distributed_counter_under_chaos() {
    let _serial = serial();
    persistent_broker();
    let settings = Settings::from_env("distributed_counter_under_chaos", 3, 3_000, 10, false);
    let mut rng = StdRng::seed_from_u64(settings.seed);
    let mut scenario = Scenario::new(
        "distributed_counter_under_chaos",
        "distributed-counter.yaml",
        "chaos-counter",
    );
    let source = scenario.source("COUNTER_EVENTS_TOPIC", "chaos-counter-events");
    scenario.source("COUNTER_READS_TOPIC", "chaos-counter-reads");
    let values = scenario.topic("COUNTER_VALUES_TOPIC", "chaos-counter-values");
    let dlq = scenario.topic("DEAD_LETTER_TOPIC", "chaos-counter-dlq");
    scenario.repartition("rollup_counters");
    // Done when every counter's last committed rollup has its value.
    let (topic, dead) = (values.clone(), dlq.clone());
    scenario.finished = Box::new(move |cluster, input| {
        let values = read_to_end(&topic, Duration::from_secs(120));
        let dead = read_to_end(&dead, Duration::from_secs(60));
        let counted = count_counters(&values, &dead, &cluster.journal(), input);
        counted.actual == counted.expected
    });
    let input = counter_events(&mut rng, &source, settings.events / 2, 0);
    let tail = counter_events(&mut rng, &source, COUNTERS, settings.events);
    scenario.run(&settings, &mut rng, input, tail, |cluster, input| {
        let values = read_to_end(&values, Duration::from_secs(120));
        let dead = read_to_end(&dlq, Duration::from_secs(60));
        let counted = count_counters(&values, &dead, &cluster.journal(), input);
        assert_eq!(
            counted.actual,
            counted.expected,
            "counter values ({} tokens dead-lettered as late, first ones: {:?}; in doubt at a kill: {:?})",
            counted.late.len(),
            counted.late.iter().take(20).collect::<Vec<_>>(),
            cluster
                .journal()
                .in_doubt()
                .iter()
                .map(|label| (label.clone(), cluster.journal().fate(label)))
                .collect::<Vec<_>>()
        );
        eprintln!(
            "  {} tokens dead-lettered as late, {} of them entirely",
            counted.late.len(),
            counted.uncounted
        );
        counted.excused
    });
}

/// A broker that goes down while a process runs its startup checks (the
/// cluster's metadata, the changelogs' configuration, topic creation): the
/// process waits for it and starts, where it used to exit with the error
/// (RELIABILITY.md, finding 19; the distributed-counter run of seed 102
/// met it). The process freezes itself just before the checks
/// (`prepare:freeze`), the broker goes down for longer than one metadata
/// request waits (10 s), and the process wakes while it is down.
#[test]
fn a_broker_down_during_startup_is_waited_for() {
    let _serial = serial();
    persistent_broker();
    if !broker().restartable() {
        return;
    }
    let dir = temp_dir();
    let source = unique("post-metric-updated");
    create_topic(&source, 4);
    let env = [
        ("STREAMFOLD_APP", unique("sf-startup")),
        ("POST_METRICS_TOPIC", source),
        ("FOLDED_TOPIC", unique("account-metrics-folded")),
        ("DEAD_LETTER_TOPIC", unique("dlq")),
    ];
    let app = App::start(
        &AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: env.map(|(k, v)| (k.to_string(), v)).to_vec(),
            txn_header: false,
            args: vec!["--inject-fault".into(), "prepare:freeze".into()],
        },
        dir.path(),
    );
    app.wait_frozen(Duration::from_secs(60));
    let restart = std::thread::spawn(|| broker().restart(true, Duration::from_secs(14)));
    // Down by now (the kill takes milliseconds); the checks start at once.
    std::thread::sleep(Duration::from_secs(1));
    app.resume();
    restart.join().unwrap();
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    let log = app.stop();
    assert!(
        log.contains("The cluster checks failed on a broker that stopped answering; trying again."),
        "the checks never met the broker down, so nothing was tested; log:\n{log}"
    );
}

/// Why the chaos tests create changelogs uncompacted on nisshi: its
/// compaction (at every start, then every 10 minutes) keeps each key's
/// highest offset whatever its transaction became, so an aborted record
/// replaces the committed one. When this fails, nisshi has fixed it and
/// [`Scenario::create_uncompacted_topics`] can go.
#[test]
fn nisshi_compaction_keeps_an_aborted_record_over_the_committed_one() {
    let _serial = serial();
    persistent_broker();
    if !broker().restartable() {
        return;
    }
    let topic = unique("chaos-compaction");
    create_topic_with(&topic, 1, &[("cleanup.policy", "compact")]);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("transactional.id", unique("compaction-probe"))
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    for (value, commit) in [("committed", true), ("aborted", false)] {
        producer.begin_transaction().unwrap();
        producer
            .send(BaseRecord::to(&topic).key("k").payload(value))
            .unwrap();
        producer.flush(Duration::from_secs(30)).unwrap();
        if commit {
            producer
                .commit_transaction(Duration::from_secs(30))
                .unwrap();
        } else {
            producer.abort_transaction(Duration::from_secs(30)).unwrap();
        }
    }
    let before: Vec<String> = read_to_end(&topic, Duration::from_secs(60))
        .iter()
        .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(
        before,
        ["committed", "aborted"],
        "nisshi shows aborted records"
    );
    // Compaction runs when the broker starts.
    broker().restart(false, Duration::ZERO);
    let after: Vec<String> = read_to_end(&topic, Duration::from_secs(60))
        .iter()
        .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(after, ["aborted"], "the committed record is compacted away");
}
