//! The chaos harness: several `streamfold run` instances of one topology
//! as one consumer group on a Kafka cluster of their own, faults on a
//! seeded schedule while a producer feeds the input, then waits until
//! everything fed is committed so a judge can read the outputs.
//!
//! The faults, drawn from the seed (see [`Fault`]): kill -9 of an instance
//! restarted after a delay (sometimes with its state wiped, so it restores
//! from the changelogs); SIGSTOP shorter and longer than the session
//! timeout; a graceful restart; scale-out and scale-in; a broker restart
//! (the one node of a one-node cluster, or one node of three); a kill -9
//! of the active controller (three nodes); a network partition that cuts
//! one instance off from the brokers, longer than the session timeout,
//! then heals (each instance then runs in a network namespace of its own,
//! see [`super::netns`]).
//!
//! The instances run with different numbers of processing threads
//! (`--threads`: instance-0, 3, … the default, the number of cores;
//! instance-1, 4, … one; instance-2, 5, … four), so tasks move between
//! single- and multi-threaded members.
//!
//! Replay and scale: the seed is printed at the start with the command
//! that replays it (`CHAOS_KEEP=1` keeps the logs and state of a passing
//! run too; a failing run keeps them always), and `CHAOS_EVENTS`,
//! `CHAOS_FAULTS`, `CHAOS_INSTANCES`, `CHAOS_STATIC=true|false`,
//! `CHAOS_BROKERS=1|3`, `CHAOS_PARTITIONS=true|false` (network partitions)
//! `CHAOS_SECURED=true|false` (the instances over SASL/SCRAM and TLS as a
//! user with only its ACLs, see [`Kafka::start`]) and `CHAOS_RATE` (input
//! records a second) scale a run (the long runs in
//! RELIABILITY.md); `CHAOS_APP_ARGS` adds arguments to every instance's
//! `streamfold run` (`-X debug=cgrp` traces the group protocol) and
//! `CHAOS_RUST_LOG` replaces their log filter (`librdkafka=debug` shows
//! that trace). The schedule (fault kinds, targets, delays) depends
//! only on the seed; when each fault lands relative to the processing does
//! not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{Value, json};

use super::admin::create_topic_on;
use super::app::{App, AppConfig};
use super::broker::{Broker, BrokerOptions};
use super::consumer::{Consumed, group_committed_on, partition_count_on, read_to_end_on};
use super::netns::{Netns, Network};
use super::producer::Delivered;
use super::tls::{SecureAccess, application_acls, secured_topology};
use super::{repo, temp_dir, unique};

/// Partitions of each input topic (the tasks of the group).
pub const PARTITIONS: i32 = 6;
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
/// streamfold's consumer session timeout (`session.timeout.ms`, set by
/// the runtime): a member silent for longer leaves the group.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What a run does, from the environment or the test's defaults.
#[derive(Clone, Debug)]
pub struct Settings {
    pub seed: u64,
    pub events: u64,
    pub faults: usize,
    pub instances: usize,
    pub static_membership: bool,
    /// Rounds of membership changes made one at a time after the chaos,
    /// each timed until the group settles (see [`Instances::measure_settling`]).
    pub settle_rounds: usize,
    /// Kafka nodes: 1, or 3 (replication 3, `min.insync.replicas=2`).
    pub brokers: usize,
    /// Whether each instance runs in a network namespace, so that network
    /// partitions are among the faults.
    pub partitions: bool,
    /// Input records a second; by default the input is spread over the
    /// planned duration of the faults.
    pub rate: Option<u64>,
    /// Whether the instances connect over SASL/SCRAM-SHA-512 and TLS to a
    /// cluster that authorizes with ACLs, as a user granted only what
    /// docs/security.md lists (one-node or three-node, without network
    /// partitions: the secured listeners advertise loopback).
    pub secured: bool,
}

impl Settings {
    /// The test's defaults, overridden by the `CHAOS_*` environment; prints
    /// the command that replays the run.
    pub fn from_env(test: &str, defaults: Settings) -> Settings {
        fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
            let text = std::env::var(name).ok()?;
            Some(
                text.parse()
                    .unwrap_or_else(|_| panic!("{name}={text} does not parse")),
            )
        }
        let settings = Settings {
            seed: var("CHAOS_SEED").unwrap_or(defaults.seed),
            events: var("CHAOS_EVENTS").unwrap_or(defaults.events),
            faults: var("CHAOS_FAULTS").unwrap_or(defaults.faults),
            instances: var("CHAOS_INSTANCES").unwrap_or(defaults.instances),
            static_membership: var("CHAOS_STATIC").unwrap_or(defaults.static_membership),
            settle_rounds: var("CHAOS_SETTLE_ROUNDS").unwrap_or(defaults.settle_rounds),
            brokers: var("CHAOS_BROKERS").unwrap_or(defaults.brokers),
            partitions: var("CHAOS_PARTITIONS").unwrap_or(defaults.partitions),
            rate: var("CHAOS_RATE").or(defaults.rate),
            secured: var("CHAOS_SECURED").unwrap_or(defaults.secured),
        };
        assert!(
            !(settings.secured && settings.partitions),
            "CHAOS_SECURED=true runs without network partitions"
        );
        assert!(settings.instances >= MIN_INSTANCES && settings.instances <= MAX_INSTANCES);
        assert!(settings.brokers == 1 || settings.brokers == 3);
        eprintln!(
            "chaos {test}: {settings:?}\n  replay: CHAOS_SEED={} CHAOS_EVENTS={} CHAOS_FAULTS={} \
             CHAOS_INSTANCES={} CHAOS_STATIC={} CHAOS_BROKERS={} CHAOS_PARTITIONS={} CHAOS_SECURED={}{} \
             scripts/test.sh --test chaos {test} -- --nocapture",
            settings.seed,
            settings.events,
            settings.faults,
            settings.instances,
            settings.static_membership,
            settings.brokers,
            settings.partitions,
            settings.secured,
            settings
                .rate
                .map_or(String::new(), |r| format!(" CHAOS_RATE={r}")),
        );
        settings
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            seed: 1,
            events: 5_000,
            faults: 10,
            instances: 3,
            static_membership: false,
            settle_rounds: 1,
            brokers: 1,
            partitions: false,
            rate: None,
            secured: false,
        }
    }
}

/// One fault of the schedule. Targets are drawn when the fault is applied,
/// from the same seeded generator, among the instances (or nodes) then
/// running: the sequence of instance counts, and so every draw, depends
/// only on the seed.
#[derive(Clone, Debug)]
pub enum Fault {
    /// kill -9 of an instance, started again after `down`.
    Kill {
        wipe: bool,
        down: Duration,
    },
    /// SIGSTOP for the given time, then SIGCONT.
    Freeze(Duration),
    /// SIGSTOP for longer than the session timeout: the group moves the
    /// instance's tasks, and it wakes a zombie.
    LongFreeze(Duration),
    /// SIGTERM, then started again.
    Restart,
    ScaleOut,
    ScaleIn,
    /// The one node of a one-node cluster, or a random node of three:
    /// SIGKILL when `crash`, else SIGTERM; down for `down`.
    BrokerRestart {
        crash: bool,
        down: Duration,
    },
    /// kill -9 of the node that leads the controller quorum (three nodes),
    /// started again after `down`.
    ControllerKill {
        down: Duration,
    },
    /// An instance cut off from the brokers (and everything else) while it
    /// keeps running, for longer than the session timeout, then healed.
    Partition(Duration),
}

/// The faults of a run and the pause before each one.
pub fn schedule(rng: &mut StdRng, settings: &Settings) -> Vec<(Duration, Fault)> {
    let millis =
        |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..hi));
    let cluster = settings.brokers > 1;
    let mut plan: Vec<(Duration, Fault)> = (0..settings.faults)
        .map(|_| {
            let gap = millis(rng, 500, 4_000);
            let fault = loop {
                let fault = match rng.random_range(0..100) {
                    0..36 => Fault::Kill {
                        wipe: rng.random_bool(0.25),
                        down: millis(rng, 200, 5_000),
                    },
                    36..48 => Fault::Freeze(millis(rng, 500, 6_000)),
                    48..52 => Fault::LongFreeze(SESSION_TIMEOUT + millis(rng, 2_000, 8_000)),
                    52..64 => Fault::Restart,
                    64..72 => Fault::ScaleOut,
                    72..80 => Fault::ScaleIn,
                    80..88 => Fault::BrokerRestart {
                        crash: rng.random_bool(0.5),
                        down: millis(rng, 500, 4_000),
                    },
                    88..94 if cluster => Fault::ControllerKill {
                        down: millis(rng, 500, 4_000),
                    },
                    94..100 if settings.partitions => {
                        Fault::Partition(SESSION_TIMEOUT + millis(rng, 3_000, 12_000))
                    }
                    _ => continue,
                };
                break fault;
            };
            (gap, fault)
        })
        .collect();
    // Every run restarts a broker at least once, and, where they are
    // possible, kills the controller and partitions the network once.
    let mut ensure = |rng: &mut StdRng, is: fn(&Fault) -> bool, fault: Fault| {
        if !plan.is_empty() && !plan.iter().any(|(_, f)| is(f)) {
            let at = rng.random_range(0..plan.len());
            plan[at].1 = fault;
        }
    };
    let restart = Fault::BrokerRestart {
        crash: rng.random_bool(0.5),
        down: millis(rng, 500, 4_000),
    };
    ensure(rng, |f| matches!(f, Fault::BrokerRestart { .. }), restart);
    if cluster {
        let kill = Fault::ControllerKill {
            down: millis(rng, 500, 4_000),
        };
        ensure(rng, |f| matches!(f, Fault::ControllerKill { .. }), kill);
    }
    if settings.partitions {
        let cut = Fault::Partition(SESSION_TIMEOUT + millis(rng, 3_000, 12_000));
        ensure(rng, |f| matches!(f, Fault::Partition(_)), cut);
    }
    plan
}

/// The Kafka cluster of one chaos run, and the network its instances
/// reach it over.
pub struct Kafka {
    pub broker: Broker,
    /// The secured listeners and the application's credentials, when the
    /// run is secured; the tests' own clients keep to the PLAINTEXT
    /// listener, whose principal is the super user.
    pub access: Option<SecureAccess>,
    /// The address the brokers listen on, when instances run in network
    /// namespaces (dropped after the broker).
    network: Option<Network>,
}

impl Kafka {
    pub fn start(settings: &Settings) -> Kafka {
        let network = settings.partitions.then(Network::create);
        let mut options = BrokerOptions {
            nodes: settings.brokers,
            ..BrokerOptions::default()
        };
        if let Some(network) = &network {
            options.host = network.host.clone();
        }
        // Changelogs are compacted, as in production: let the cleaner run
        // within the run (small segments, rolled every few seconds), so
        // restores meet compacted, transactional changelogs.
        options.configs.extend([
            "log.cleaner.backoff.ms=1000".to_string(),
            "log.cleaner.min.cleanable.ratio=0.01".to_string(),
            "log.roll.ms=5000".to_string(),
            "log.segment.bytes=1048576".to_string(),
        ]);
        let (broker, access) = if settings.secured {
            let (access, broker) = SecureAccess::start(options);
            (broker, Some(access))
        } else {
            (Broker::start(options), None)
        };
        Kafka {
            broker,
            access,
            network,
        }
    }

    /// The servers the instances connect to.
    pub fn app_bootstrap(&self) -> String {
        match &self.access {
            Some(access) => access.bootstrap.clone(),
            None => self.broker.bootstrap.clone(),
        }
    }

    pub fn client(&self) -> ClientConfig {
        self.broker.client()
    }

    pub fn create_topic(&self, name: &str, partitions: i32) {
        create_topic_on(&self.client(), name, partitions, &[]);
    }

    /// Every record of `topic` under read_committed, to its end.
    pub fn read(&self, topic: &str) -> Vec<Consumed> {
        read_to_end_on(&self.client(), topic, Duration::from_secs(180))
    }

    /// The offset after the last record of each partition of `topic`, from
    /// a read to its end.
    pub fn record_ends(&self, topic: &str) -> Vec<i64> {
        let mut ends = vec![0; partition_count_on(&self.client(), topic) as usize];
        for record in self.read(topic) {
            let end = &mut ends[record.partition as usize];
            *end = (*end).max(record.offset + 1);
        }
        ends
    }

    /// Restarts one node (the only one, or one drawn from `rng`).
    fn restart_node(&self, rng: &mut StdRng, crash: bool, down: Duration) -> String {
        let nodes = &self.broker.nodes;
        let node = &nodes[rng.random_range(0..nodes.len())];
        node.stop(crash);
        std::thread::sleep(down);
        node.start_again(nodes.len());
        format!(
            "broker node {} {}, down {down:?}",
            node.id,
            if crash { "kill -9" } else { "SIGTERM" }
        )
    }

    /// kill -9 of the active controller, started again after `down`.
    fn kill_controller(&self, down: Duration) -> String {
        let Some(leader) = self.broker.active_controller() else {
            return "no active controller known: nothing killed".into();
        };
        let node = self.broker.node(leader);
        node.stop(true);
        std::thread::sleep(down);
        node.start_again(self.broker.nodes.len());
        let now = self.broker.active_controller();
        format!(
            "kill -9 of the active controller (node {leader}), down {down:?}; now led by {now:?}"
        )
    }
}

/// A running instance: its process, and what outlives the process.
struct Member {
    app: App,
    state: PathBuf,
}

/// `--threads` of instance `id` (`instance-<n>`): none (the default)
/// for every third, else one or four.
fn threads_of(id: &str) -> Option<usize> {
    let n: usize = id.rsplit('-').next()?.parse().ok()?;
    [None, Some(1), Some(4)][n % 3]
}

/// The instances of one application under chaos.
pub struct Instances {
    topology: PathBuf,
    env: Vec<(String, String)>,
    static_membership: bool,
    bootstrap: String,
    /// Logs and state; kept when the test fails.
    dir: Option<tempfile::TempDir>,
    members: BTreeMap<String, Member>,
    next: usize,
    /// Each instance's network namespace, by id (kept across restarts),
    /// when the run has network partitions.
    namespaces: Option<BTreeMap<String, Netns>>,
    /// Every log file, for failure messages.
    logs: Vec<PathBuf>,
}

impl Instances {
    pub fn start(
        kafka: &Kafka,
        topology: &Path,
        env: Vec<(String, String)>,
        settings: &Settings,
    ) -> Instances {
        let mut instances = Instances {
            topology: topology.to_path_buf(),
            env,
            static_membership: settings.static_membership,
            bootstrap: kafka.app_bootstrap(),
            dir: Some(temp_dir()),
            members: BTreeMap::new(),
            next: 0,
            namespaces: settings.partitions.then(BTreeMap::new),
            logs: Vec::new(),
        };
        for _ in 0..settings.instances {
            instances.scale_out();
        }
        instances
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    fn spawn(&mut self, id: &str, state: PathBuf) -> Member {
        let mut env = self.env.clone();
        env.push((
            "STREAMFOLD_STATIC_MEMBERSHIP".into(),
            self.static_membership.to_string(),
        ));
        if let Ok(filter) = std::env::var("CHAOS_RUST_LOG") {
            env.push(("RUST_LOG".into(), filter));
        }
        // `CHAOS_APP_ARGS` adds arguments to every instance, say
        // `-X debug=cgrp` to trace the group protocol in a replay.
        let args = threads_of(id)
            .map(|n| format!("--threads={n}"))
            .into_iter()
            .chain(
                std::env::var("CHAOS_APP_ARGS")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(String::from),
            )
            .collect();
        let config = AppConfig {
            topology: self.topology.clone(),
            instance: id.to_string(),
            state_dir: state.clone(),
            env,
            txn_header: true,
            args,
        };
        let netns = self
            .namespaces
            .as_mut()
            .map(|spaces| &*spaces.entry(id.to_string()).or_insert_with(Netns::create));
        let dir = self.dir.as_ref().unwrap().path().to_path_buf();
        let app = App::start_in(&self.bootstrap, &config, &dir, netns);
        self.logs.push(app.log.clone());
        Member { app, state }
    }

    pub fn scale_out(&mut self) -> String {
        let id = format!("instance-{}", self.next);
        self.next += 1;
        let state = self.dir().join(format!("state-{id}"));
        let member = self.spawn(&id, state);
        self.members.insert(id.clone(), member);
        id
    }

    /// The ids of the running instances.
    pub fn ids(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// The log of instance `id` so far.
    pub fn log(&self, id: &str) -> String {
        self.members[id].app.log_text()
    }

    fn pick(&self, rng: &mut StdRng) -> String {
        let ids: Vec<&String> = self.members.keys().collect();
        ids[rng.random_range(0..ids.len())].clone()
    }

    pub fn assert_running(&self) {
        for member in self.members.values() {
            member.app.assert_running();
        }
    }

    /// Applies `fault`; returns what it did, for the run's log.
    pub fn apply(&mut self, kafka: &Kafka, fault: &Fault, rng: &mut StdRng) -> String {
        match *fault {
            Fault::Kill { wipe, down } => {
                let id = self.pick(rng);
                self.kill(&id, wipe, down);
                format!(
                    "kill -9 {id}, down {down:?}{}",
                    if wipe { ", state wiped" } else { "" }
                )
            }
            Fault::Freeze(pause) | Fault::LongFreeze(pause) => {
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
            Fault::ScaleOut => self.apply(kafka, &Fault::ScaleIn, rng),
            Fault::ScaleIn => self.apply(kafka, &Fault::ScaleOut, rng),
            Fault::BrokerRestart { crash, down } => kafka.restart_node(rng, crash, down),
            Fault::ControllerKill { down } => kafka.kill_controller(down),
            Fault::Partition(cut) => {
                let id = self.pick(rng);
                self.partition(&id, cut)
            }
        }
    }

    /// Cuts instance `id` off for `cut`, then heals the link and waits for
    /// what the zombie says once it hears from the brokers again: its
    /// commits refused, its tasks given away.
    pub fn partition(&mut self, id: &str, cut: Duration) -> String {
        let namespaces = self.namespaces.as_ref().expect("a run with partitions");
        let netns = &namespaces[id];
        let app = &self.members[id].app;
        let before = app.log_text().len();
        netns.cut();
        std::thread::sleep(cut);
        netns.heal();
        // The zombie learns it lost its tasks when its requests reach the
        // brokers again: say what it was told.
        let deadline = Instant::now() + Duration::from_secs(60);
        let told = loop {
            let log = app.log_text();
            let after = &log[before.min(log.len())..];
            let lines: Vec<&str> = after
                .lines()
                .filter(|l| ZOMBIE_SIGNS.iter().any(|sign| l.contains(sign)))
                .collect();
            if !lines.is_empty() || Instant::now() > deadline {
                break lines.first().map(|l| l.to_string());
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        format!(
            "network partition of {id} for {cut:?}, healed; {}",
            told.map_or(
                "the zombie said nothing of its fencing within 60 s".into(),
                |l| { format!("the zombie was told: {l}") }
            )
        )
    }

    /// kill -9 of instance `id`, started again (same id and state
    /// directory, wiped if `wipe`) after `down`.
    pub fn kill(&mut self, id: &str, wipe: bool, down: Duration) {
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
    pub fn restart(&mut self, id: &str) {
        let member = self.members.remove(id).unwrap();
        member.app.stop();
        let restarted = self.spawn(id, member.state);
        self.members.insert(id.to_string(), restarted);
    }

    /// SIGTERM to instance `id`, stopped for good.
    pub fn scale_in(&mut self, id: &str) {
        self.members.remove(id).unwrap().app.stop();
    }

    /// Every instance stops; their state directories are wiped; `instances`
    /// fresh processes (same ids) restore from the changelogs.
    pub fn restart_from_scratch(&mut self, instances: usize) {
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

    pub fn logs_tail(&self) -> String {
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

    /// What every process's log says of task `task`, and of the group
    /// around it (assignments, revocations, warnings and errors), so a
    /// stalled partition's last owner and what it waited for can be read
    /// from the failure alone: CI keeps nothing else.
    pub fn task_story(&self, task: i32) -> String {
        let mut story = format!("==== what the logs say of task {task} ====\n");
        for log in &self.logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text
                .lines()
                .filter(|line| {
                    line_task(line) == Some(task)
                        || [" WARN ", " ERROR ", "ssign", "evoke", "ebalance", "lost"]
                            .iter()
                            .any(|word| line.contains(word))
                })
                .collect();
            let shown = &lines[lines.len().saturating_sub(120)..];
            story.push_str(&format!(
                "==> {} <==\n{}\n",
                log.display(),
                shown.join("\n")
            ));
        }
        story
    }

    /// Every line of every log that contains `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        self.logs
            .iter()
            .flat_map(|log| {
                std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains(text))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Waits until the group has committed every record of `topic` up to
    /// `end` (per partition: the offset after the last record), checking the
    /// instances stay up.
    pub fn wait_committed(&self, kafka: &Kafka, group: &str, topic: &str, end: &[i64]) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let committed = group_committed_on(&kafka.client(), group, topic, end.len());
            if committed.iter().zip(end).all(|(c, e)| *e == 0 || *c >= *e) {
                return;
            }
            if Instant::now() >= deadline {
                let stalled: Vec<i32> = (0..end.len())
                    .filter(|&p| end[p] > 0 && committed[p] < end[p])
                    .map(|p| p as i32)
                    .collect();
                let stories: String = stalled.iter().map(|&task| self.task_story(task)).collect();
                panic!(
                    "{group} committed {committed:?} of {topic}, whose end is {end:?}, within {SETTLE:?}\n{}\n{stories}",
                    self.logs_tail()
                );
            }
            self.assert_running();
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits up to `timeout` for `condition`, checking the instances stay
    /// up; whether it came.
    pub fn wait_for(&self, timeout: Duration, condition: impl Fn(&Instances) -> bool) -> bool {
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

    /// From each process's log, sorted: seconds from its start to its first
    /// task running (restart-to-processing, first starts included).
    pub fn startup_seconds(&self) -> Vec<f64> {
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

/// What a zombie's log says once it hears from the brokers again, after a
/// partition or a long freeze: its commit refused for a stale generation
/// or member (KIP-447), its producer fenced, its tasks given away.
pub const ZOMBIE_SIGNS: [&str; 8] = [
    "ILLEGAL_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "FENCED_INSTANCE_ID",
    "IllegalGeneration",
    "UnknownMemberId",
    "FencedInstanceId",
    "fenced",
    "Task closed.",
];

/// What the broker refusing a zombie's commit or produce looks like in
/// its log: librdkafka's names of the errors (KIP-447's generation and
/// member checks, and a producer fenced by a newer epoch).
pub const REFUSALS: [&str; 10] = [
    "ILLEGAL_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "FENCED_INSTANCE_ID",
    "PRODUCER_FENCED",
    "INVALID_PRODUCER_EPOCH",
    "IllegalGeneration",
    "UnknownMemberId",
    "FencedInstanceId",
    "ProducerFenced",
    "InvalidProducerEpoch",
];

/// What one process's log says of its tasks.
#[derive(Clone, Debug, Default)]
struct TaskLog {
    /// Started (`Task running.`) and not closed since.
    running: BTreeSet<i32>,
    /// `Task closed.` lines so far: revocations, and the shutdown's.
    closed: usize,
}

/// The task a log line names (` task=N`), if any.
fn line_task(line: &str) -> Option<i32> {
    let rest = line.split(" task=").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl TaskLog {
    fn read(log: &Path) -> TaskLog {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut tasks = TaskLog::default();
        for line in text.lines() {
            let task = || line_task(line);
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

/// A membership change [`Instances::measure_settling`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    GracefulRestart,
    KillAndRestart,
    ScaleOut,
    ScaleIn,
}

impl Change {
    /// One round, in order.
    pub const ROUND: [Change; 4] = [
        Change::GracefulRestart,
        Change::KillAndRestart,
        Change::ScaleOut,
        Change::ScaleIn,
    ];
}

impl Instances {
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
    /// its own: no task closed anywhere else.
    pub fn measure_settling(&mut self, rng: &mut StdRng, rounds: usize) -> Vec<(Change, Duration)> {
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

impl Drop for Instances {
    fn drop(&mut self) {
        // Stop the processes before their namespaces go.
        self.members.clear();
        if std::env::var_os("CHAOS_KEEP").is_some() || std::thread::panicking() {
            let kept = self.dir.take().unwrap().keep();
            eprintln!("chaos: logs and state kept in {}", kept.display());
        }
    }
}

/// The input producer: keyed as each scenario says and placed by
/// librdkafka's default partitioner (CRC32, not the Java client's
/// murmur2), so records of one grouping key are spread over every
/// partition and every `key_by` goes through its repartition topic. A
/// table's records go where the Java client puts them (murmur2 of the key,
/// which a join needs), and a null value there is a tombstone. It rides
/// out broker restarts (idempotent, long delivery timeout); a record that
/// is not delivered fails the test.
pub struct Feed {
    producer: BaseProducer<Delivered>,
    tables: Vec<String>,
}

impl Feed {
    fn new(client: &ClientConfig, tables: Vec<String>) -> Feed {
        Feed {
            producer: client
                .clone()
                .set("enable.idempotence", "true")
                .set("linger.ms", "5")
                .set("message.timeout.ms", "300000")
                .create_with_context(Delivered::default())
                .unwrap(),
            tables,
        }
    }

    fn send(&self, topic: &str, key: &str, value: &Value) {
        let table = self.tables.iter().any(|t| t == topic);
        let payload = serde_json::to_vec(value).unwrap();
        let mut record = BaseRecord::<str, [u8]>::to(topic).key(key);
        if table {
            record = record.partition(streamfold::task::partition_for(key.as_bytes(), PARTITIONS));
        }
        if !(table && value.is_null()) {
            record = record.payload(&payload);
        }
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
        self.producer.context().assert_delivered();
    }

    /// The offset after the last record written to each partition.
    pub fn ends(&self, topic: &str) -> Vec<i64> {
        let ends = self.producer.context().ends();
        (0..PARTITIONS)
            .map(|p| ends.get(&(topic.to_string(), p)).copied().unwrap_or(0))
            .collect()
    }
}

/// An input record: topic, key, value.
pub type Event = (String, String, Value);

/// Sends `events` paced evenly over `over`, on its own thread; returns the
/// producer once every record is delivered. A null `event_time` is stamped
/// with the time of sending; copies of one token (a retry) share the first
/// copy's stamp, and the stamps are returned with the producer.
/// `tables` are the topics read as tables (see [`Feed`]).
pub fn feed_during(
    client: &ClientConfig,
    tables: &[String],
    events: Vec<Event>,
    over: Duration,
) -> std::thread::JoinHandle<(Feed, BTreeMap<String, String>)> {
    let client = client.clone();
    let tables = tables.to_vec();
    std::thread::spawn(move || {
        let feed = Feed::new(&client, tables);
        let started = Instant::now();
        let total = events.len().max(1) as u32;
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
        (feed, stamps)
    })
}

/// Whether the outputs of some input are complete.
pub type Finished = Box<dyn Fn(&Kafka, &[Event]) -> bool>;

/// One article topology under chaos: its topics, and how to tell its
/// outputs are complete.
pub struct Scenario {
    pub test: &'static str,
    pub topology: &'static str,
    pub app: String,
    pub settings: Settings,
    pub kafka: Kafka,
    /// The input topics, created by the test.
    sources: Vec<String>,
    /// Those of them read as tables (compacted, placed by murmur2).
    tables: Vec<String>,
    /// Those of the tables read as global tables, outside the group.
    globals: Vec<String>,
    /// Records fed, and committed by the group, before the chaos starts
    /// (a table's first rows, so that the stream records that follow find
    /// them).
    pub preload: Vec<Event>,
    /// Repartition topics to see committed to their ends.
    repartitions: Vec<String>,
    /// The output topics, created by the test.
    outputs: Vec<String>,
    env: Vec<(String, String)>,
    /// Whether the outputs of `input` are complete, from what the output
    /// topics hold: timers (folds closing, rollups) may still be due once
    /// every input record is committed.
    pub finished: Finished,
    /// The event times the feeds stamped, by token.
    pub stamps: BTreeMap<String, String>,
}

impl Scenario {
    pub fn new(test: &'static str, topology: &'static str, settings: Settings) -> Scenario {
        let kafka = Kafka::start(&settings);
        Scenario {
            test,
            topology,
            app: unique(&format!("chaos-{}", topology.trim_end_matches(".yaml"))),
            settings,
            kafka,
            sources: Vec::new(),
            tables: Vec::new(),
            globals: Vec::new(),
            preload: Vec::new(),
            repartitions: Vec::new(),
            outputs: Vec::new(),
            env: Vec::new(),
            finished: Box::new(|_, _| true),
            stamps: BTreeMap::new(),
        }
    }

    pub fn env(&mut self, name: &str, value: &str) {
        self.env.push((name.into(), value.into()));
    }

    /// A fresh output topic named after `prefix`, passed to the topology as
    /// `var`, created here without compaction (whatever the sink says), so
    /// that the judge reads every committed record, not only the latest of
    /// each key. The changelogs stay compacted, as in production.
    pub fn topic(&mut self, var: &str, prefix: &str) -> String {
        let topic = self.created(var, prefix, "delete");
        self.outputs.push(topic.clone());
        topic
    }

    /// A fresh topic named after `prefix` with `cleanup.policy`, passed to
    /// the topology as `var`.
    fn created(&mut self, var: &str, prefix: &str, cleanup: &str) -> String {
        let topic = unique(prefix);
        self.env(var, &topic);
        create_topic_on(
            &self.kafka.client(),
            &topic,
            PARTITIONS,
            &[("cleanup.policy", cleanup)],
        );
        topic
    }

    pub fn source(&mut self, var: &str, prefix: &str) -> String {
        let topic = unique(prefix);
        self.env(var, &topic);
        self.kafka.create_topic(&topic, PARTITIONS);
        self.sources.push(topic.clone());
        topic
    }

    /// A source read as a table: compacted, as production's are, and fed
    /// by murmur2 of the key (see [`Feed`]).
    pub fn table_source(&mut self, var: &str, prefix: &str) -> String {
        let topic = self.created(var, prefix, "compact");
        self.sources.push(topic.clone());
        self.tables.push(topic.clone());
        topic
    }

    /// A source read as a global table: a table every instance reads
    /// whole, outside the group, so no group offsets are waited for.
    pub fn global_table_source(&mut self, var: &str, prefix: &str) -> String {
        let topic = self.table_source(var, prefix);
        self.globals.push(topic.clone());
        topic
    }

    pub fn repartition(&mut self, node: &str) {
        self.repartitions
            .push(format!("{}-{node}-repartition", self.app));
    }

    /// Starts the instances of the scenario's settings.
    ///
    /// `CHAOS_SABOTAGE` runs them deliberately broken, to show that the
    /// judge fails when the property it checks does not hold:
    /// `at-least-once` (records of an aborted or killed transaction
    /// counted again), `no-dedup` (dedup remembers an id for 1 ms) or
    /// `short-grace` (page views: windows close 30 s sooner than the judge
    /// was told, so on-time views are dead-lettered as late).
    pub fn start(&mut self) -> Instances {
        if let Ok(sabotage) = std::env::var("CHAOS_SABOTAGE") {
            let (name, value) = match sabotage.as_str() {
                "at-least-once" => ("STREAMFOLD_GUARANTEE", "at_least_once"),
                "no-dedup" => ("DEDUP_RETENTION", "1ms"),
                "short-grace" => ("PAGE_VIEWS_GRACE", "10s"),
                other => panic!(
                    "CHAOS_SABOTAGE={other}: expected at-least-once, no-dedup or short-grace"
                ),
            };
            eprintln!("chaos: SABOTAGED with {name}={value}; the judge must fail");
            // Later entries win: the sabotage overrides the scenario's own.
            self.env(name, value);
        }
        self.env("STREAMFOLD_APP", &self.app.clone());
        let mut topology = repo().join("topologies").join(self.topology);
        if let Some(access) = &self.kafka.access {
            let sources: Vec<&str> = self.sources.iter().map(String::as_str).collect();
            let outputs: Vec<&str> = self.outputs.iter().map(String::as_str).collect();
            access.grant(
                &access.principal(),
                &application_acls(&self.app, &sources, &outputs),
            );
            topology = secured_topology(&format!("topologies/{}", self.topology), access.dir());
            self.env.extend(access.env());
        }
        self.env("KAFKA_BOOTSTRAP_SERVERS", &self.kafka.app_bootstrap());
        Instances::start(&self.kafka, &topology, self.env.clone(), &self.settings)
    }

    /// Waits until everything fed so far (`input`) is processed and
    /// committed.
    pub fn settle(&self, instances: &Instances, feed: &Feed, input: &[Event]) {
        for source in self.sources.iter().filter(|s| !self.globals.contains(s)) {
            instances.wait_committed(&self.kafka, &self.app, source, &feed.ends(source));
        }
        for topic in &self.repartitions {
            instances.wait_committed(
                &self.kafka,
                &self.app,
                topic,
                &self.kafka.record_ends(topic),
            );
        }
        // Incomplete outputs are for the judge to explain (what is missing,
        // where); waiting longer would not bring them.
        if !instances.wait_for(COMPLETE, |_| (self.finished)(&self.kafka, input)) {
            eprintln!(
                "{}: the outputs are not complete after {COMPLETE:?}",
                self.test
            );
        }
    }

    /// Runs the schedule against `instances` while `events` are fed; returns
    /// the producer once everything is delivered and the faults are over.
    fn chaos(&mut self, instances: &mut Instances, rng: &mut StdRng, events: Vec<Event>) -> Feed {
        let plan = schedule(rng, &self.settings);
        eprintln!("chaos plan ({} faults):", plan.len());
        for (gap, fault) in &plan {
            eprintln!("  after {gap:?}: {fault:?}");
        }
        let planned: Duration = plan
            .iter()
            .map(|(gap, fault)| {
                *gap + match fault {
                    Fault::Kill { down, .. } => *down,
                    Fault::Freeze(pause) | Fault::LongFreeze(pause) => *pause,
                    Fault::BrokerRestart { down, .. } | Fault::ControllerKill { down } => *down,
                    Fault::Partition(cut) => *cut,
                    _ => Duration::from_secs(1),
                }
            })
            .sum();
        let over = match self.settings.rate {
            Some(rate) => Duration::from_secs_f64(events.len() as f64 / rate as f64),
            None => planned,
        };
        let feeding = feed_during(&self.kafka.client(), &self.tables, events, over);
        let started = Instant::now();
        for (i, (gap, fault)) in plan.iter().enumerate() {
            std::thread::sleep(*gap);
            instances.assert_running();
            let done = instances.apply(&self.kafka, fault, rng);
            eprintln!(
                "  [{:>6.1}s] fault {}: {done}",
                started.elapsed().as_secs_f64(),
                i + 1
            );
        }
        let (feed, stamps) = feeding.join().expect("the producer delivered every record");
        self.stamps.extend(stamps);
        instances.assert_running();
        feed
    }

    /// The whole run: chaos while `input` is fed, judge; membership changes
    /// timed one at a time; then every state directory wiped, `tail` fed to
    /// state restored from scratch, judge everything again. The judge reads
    /// the outputs under read_committed and decides from them and the input
    /// alone: nothing is excused.
    pub fn run(
        mut self,
        rng: &mut StdRng,
        input: Vec<Event>,
        tail: Vec<Event>,
        judge: impl Fn(&Scenario, &[Event]),
    ) {
        // Written before the instances start, so a global table holds it
        // before they process anything (they are not in the group's
        // offsets to wait for).
        let preload = std::mem::take(&mut self.preload);
        let preloaded = (!preload.is_empty()).then(|| {
            feed_during(
                &self.kafka.client(),
                &self.tables,
                preload.clone(),
                Duration::from_secs(1),
            )
            .join()
            .unwrap()
            .0
        });
        let mut instances = self.start();
        if let Some(feed) = preloaded {
            self.settle(&instances, &feed, &preload);
            eprintln!("{}: {} records preloaded", self.test, preload.len());
        }
        let feed = self.chaos(&mut instances, rng, input.clone());
        self.settle(&instances, &feed, &input);
        judge(&self, &input);
        eprintln!(
            "{}: judged {} input records strictly: nothing lost, nothing twice",
            self.test,
            input.len(),
        );
        let refused = ZOMBIE_SIGNS
            .iter()
            .map(|sign| instances.log_lines(sign).len())
            .sum::<usize>();
        eprintln!(
            "{}: {refused} log lines of zombies told they were fenced or revoked",
            self.test
        );

        let startup = instances.startup_seconds();
        if !startup.is_empty() {
            eprintln!(
                "{}: start to first task running, {} processes: median {:.1} s, max {:.1} s",
                self.test,
                startup.len(),
                startup[startup.len() / 2],
                startup[startup.len() - 1]
            );
        }
        let settling = instances.measure_settling(rng, self.settings.settle_rounds);
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
                    if self.settings.static_membership {
                        "on"
                    } else {
                        "off"
                    },
                    seconds.len()
                );
            }
        }
        instances.restart_from_scratch(self.settings.instances.min(2));
        let (feed, stamps) = feed_during(
            &self.kafka.client(),
            &self.tables,
            tail.clone(),
            Duration::from_secs(1),
        )
        .join()
        .unwrap();
        self.stamps.extend(stamps);
        let all: Vec<Event> = input.into_iter().chain(tail).collect();
        self.settle(&instances, &feed, &all);
        judge(&self, &all);
        eprintln!(
            "{}: after a from-scratch restore and {} more records: judged again, all well",
            self.test,
            all.len()
        );
        drop(instances);
    }
}

/// A seeded generator for a run's input and schedule.
pub fn rng(settings: &Settings) -> StdRng {
    StdRng::seed_from_u64(settings.seed)
}
