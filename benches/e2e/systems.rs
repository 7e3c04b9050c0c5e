//! The systems measured, started the same way: an application (a consumer
//! group, a state directory, output topics of its own) over the input
//! topic, run as child processes that can be stopped, killed and started
//! again on the same group and state directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::kafka_streams::{KafkaStreamsPeer, PeerConfig};
use crate::support::*;
use crate::workload::Workload;

/// The version of Quix Streams `scripts/quix-peer.sh` installs.
pub const QUIX_VERSION: &str = "3.28.1";

/// A system's processes while it runs.
pub trait Running {
    /// Its processes (several streamfold instances; one JVM; one Python).
    fn pids(&self) -> Vec<u32>;
    fn assert_running(&self);
    /// Waits until it processes: its tasks assigned and restored.
    fn wait_ready(&self, partitions: i32);
    /// What its own telemetry says of a run of `seconds`, for the log.
    fn detail(&self, _seconds: f64) -> String {
        String::new()
    }
    /// A clean stop (SIGTERM), checked.
    fn stop(self: Box<Self>);
    /// SIGKILL.
    fn kill(self: Box<Self>);
}

/// streamfold's instances of one application.
struct Instances(Vec<App>);

impl Running for Instances {
    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(App::pid).collect()
    }

    fn assert_running(&self) {
        self.0.iter().for_each(App::assert_running);
    }

    fn wait_ready(&self, partitions: i32) {
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        loop {
            let running: f64 = self
                .0
                .iter()
                // Not exported yet: the instance is not up, nothing runs.
                .map(|app| {
                    app.metric_if_exported("streamfold_runtime_tasks_running")
                        .unwrap_or(0.0)
                })
                .sum();
            if running >= f64::from(partitions) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "streamfold's tasks did not start; log:\n{}",
                self.0[0].log_text()
            );
            self.assert_running();
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn detail(&self, seconds: f64) -> String {
        let texts: Vec<String> = self.0.iter().map(App::metrics_text).collect();
        commit_summary(&texts, seconds)
    }

    fn stop(self: Box<Self>) {
        for app in self.0 {
            app.stop();
        }
    }

    fn kill(self: Box<Self>) {
        for app in self.0 {
            app.kill();
        }
    }
}

impl Running for KafkaStreamsPeer {
    fn pids(&self) -> Vec<u32> {
        vec![self.pid()]
    }

    fn assert_running(&self) {
        KafkaStreamsPeer::assert_running(self);
    }

    fn wait_ready(&self, _partitions: i32) {
        self.wait_running(Duration::from_secs(180));
    }

    fn stop(self: Box<Self>) {
        KafkaStreamsPeer::stop(*self);
    }

    fn kill(self: Box<Self>) {
        KafkaStreamsPeer::kill(*self);
    }
}

/// `scripts/quix-peer.sh` running until SIGTERM.
struct Quix {
    child: Option<Child>,
    log: PathBuf,
    group: String,
}

impl Quix {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Running for Quix {
    fn pids(&self) -> Vec<u32> {
        self.child.iter().map(Child::id).collect()
    }

    fn assert_running(&self) {
        for pid in self.pids() {
            let alive = process_state(pid).is_some_and(|s| s != "Z");
            assert!(
                alive,
                "Quix Streams exited early; log:\n{}",
                self.log_tail()
            );
        }
    }

    /// Quix Streams says nothing while it runs: it is taken to be ready
    /// once its consumer group has members.
    fn wait_ready(&self, _partitions: i32) {
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        while crate::measure::group_is_empty(&self.group) {
            assert!(
                std::time::Instant::now() < deadline,
                "Quix Streams did not join its group; log:\n{}",
                self.log_tail()
            );
            self.assert_running();
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stop(mut self: Box<Self>) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "Quix Streams exited with {status} after SIGTERM; log:\n{}",
                self.log_tail()
            );
        }
    }

    fn kill(mut self: Box<Self>) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }
}

impl Drop for Quix {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Installs Quix Streams into its venv when it is not there yet.
pub fn install_quix() {
    let status = Command::new(repo().join("scripts/quix-peer.sh"))
        .env("QUIX_VERSION", QUIX_VERSION)
        .arg("--install-only")
        .status()
        .unwrap();
    assert!(status.success(), "installing Quix Streams failed");
}

/// The three kinds of system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Streamfold,
    KafkaStreams,
    Quix,
}

/// An application of one system over the input topic, which can be
/// started (again).
#[derive(Clone)]
pub struct Launch {
    /// The row's name in the tables.
    pub label: String,
    /// Its consumer group (and the prefix of its internal topics).
    pub group: String,
    pub state_dir: PathBuf,
    /// Its first output topic (social-metrics: the folds).
    pub output: String,
    /// Its dead-letter topic.
    pub dead_letters: String,
    /// Whether a new start of it aborts what its killed instance left
    /// open: streamfold's transactional id is the application's and the
    /// instance's, so its next start fences the old producer at once; the
    /// peers' ids change when their state is gone (Kafka Streams keeps
    /// its process id in the state directory), so theirs wait out the
    /// transaction timeout.
    pub fences_on_restart: bool,
    how: How,
}

#[derive(Clone)]
enum How {
    Streamfold {
        config: AppConfig,
        instances: usize,
        /// Another build's binary (`--compare-builds`); `None`: this one's.
        binary: Option<PathBuf>,
    },
    KafkaStreams(PeerConfig),
    Quix(Vec<String>),
}

/// What a streamfold application runs with.
pub struct StreamfoldRun<'a> {
    pub guarantee: &'a str,
    pub commit_interval: Option<&'a str>,
    pub threads: Option<usize>,
    pub instances: usize,
    pub run_args: &'a [String],
    /// Another build to run, with its label (`--compare-builds`).
    pub build: Option<(&'a str, &'a Path)>,
}

impl Launch {
    /// A fresh streamfold application of `workload` over `topic`.
    pub fn streamfold(workload: Workload, topic: &str, run: &StreamfoldRun, dir: &Path) -> Launch {
        let app = unique("bench-sf");
        let topics = workload.streamfold_env(topic);
        let mut env = topics.settings;
        env.push(("STREAMFOLD_APP".into(), app.clone()));
        env.push(("STREAMFOLD_GUARANTEE".into(), run.guarantee.into()));
        if let Some(interval) = run.commit_interval {
            env.push(("STREAMFOLD_COMMIT_INTERVAL".into(), interval.into()));
        }
        let mut args: Vec<String> = run
            .threads
            .map(|t| format!("--threads={t}"))
            .into_iter()
            .collect();
        args.extend_from_slice(run.run_args);
        let config = AppConfig {
            topology: repo().join(format!("topologies/{}.yaml", workload.name())),
            instance: "bench".into(),
            state_dir: dir.join(&app),
            env,
            txn_header: false,
            args,
        };
        let mut label = format!("streamfold, {}", run.guarantee);
        if let Some(t) = run.threads {
            label += &format!(", {t} thread{}", if t == 1 { "" } else { "s" });
        }
        if run.instances != 1 {
            label += &format!(", {} instances", run.instances);
        }
        if let Some(interval) = run.commit_interval {
            label += &format!(", commits every {interval}");
        }
        if let Some((name, _)) = run.build {
            label += &format!(" [{name}]");
        }
        Launch {
            label,
            group: app,
            state_dir: config.state_dir.clone(),
            output: topics.output,
            dead_letters: topics.dead_letters,
            fences_on_restart: true,
            how: How::Streamfold {
                config,
                instances: run.instances,
                binary: run.build.map(|(_, path)| path.to_path_buf()),
            },
        }
    }

    /// A fresh application of the Kafka Streams peer doing `workload`'s
    /// work over `topic`.
    pub fn kafka_streams(
        workload: Workload,
        topic: &str,
        commit_interval: Option<&str>,
        dir: &Path,
    ) -> Launch {
        let app = unique("bench-ks");
        let topics = workload.peer_topics(topic);
        let mut args: Vec<String> = topics
            .settings
            .into_iter()
            .flat_map(|(flag, value)| [flag, value])
            .collect();
        let interval = commit_interval.unwrap_or("100ms");
        args.extend(["--commit-interval".into(), interval.into()]);
        let mut label = "Kafka Streams 4.4.0, exactly_once_v2".to_string();
        if let Some(interval) = commit_interval {
            label += &format!(", commits every {interval}");
        }
        let config = PeerConfig {
            app: workload.peer_app().expect("a Kafka Streams peer"),
            application_id: app.clone(),
            state_dir: dir.join(&app),
            args,
            heap: None,
        };
        Launch {
            label,
            group: app,
            state_dir: config.state_dir.clone(),
            output: topics.output,
            dead_letters: topics.dead_letters,
            fences_on_restart: false,
            how: How::KafkaStreams(config),
        }
    }

    /// A fresh Quix Streams application over `topic` (social-metrics'
    /// events: a per-account 10 s tumbling reduce), committing every
    /// `commit_interval`.
    pub fn quix(topic: &str, commit_interval: &str, dir: &Path) -> Launch {
        let group = unique("bench-quix");
        let output = unique("bench-quix-out");
        let state_dir = dir.join(&group);
        let seconds = humantime::parse_duration(commit_interval)
            .expect("a commit interval")
            .as_secs_f64();
        let args = vec![
            "--bootstrap-servers".to_string(),
            broker().bootstrap.clone(),
            "--topic".into(),
            topic.into(),
            "--output".into(),
            output.clone(),
            "--group".into(),
            group.clone(),
            "--state-dir".into(),
            state_dir.display().to_string(),
            "--commit-interval".into(),
            seconds.to_string(),
        ];
        let label =
            format!("Quix Streams {QUIX_VERSION}, exactly-once, commits every {commit_interval}");
        Launch {
            label,
            group,
            state_dir,
            output,
            // Quix Streams' peer writes none.
            dead_letters: String::new(),
            fences_on_restart: false,
            how: How::Quix(args),
        }
    }

    /// Starts the application's processes.
    pub fn start(&self, dir: &Path) -> Box<dyn Running> {
        match &self.how {
            How::Streamfold {
                config,
                instances,
                binary,
            } => Box::new(Instances(
                (0..*instances)
                    .map(|i| {
                        let mut config = config.clone();
                        config.instance = format!("bench-{i}");
                        config.state_dir = self.state_dir.join(&config.instance);
                        match binary {
                            Some(binary) => App::start_binary(binary, &config, dir),
                            None => App::start(&config, dir),
                        }
                    })
                    .collect(),
            )),
            How::KafkaStreams(config) => Box::new(KafkaStreamsPeer::start(config, dir)),
            How::Quix(args) => {
                let log = dir.join(format!("{}.log", unique(&self.group)));
                let child = Command::new(repo().join("scripts/quix-peer.sh"))
                    .env("QUIX_VERSION", QUIX_VERSION)
                    .args(args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .expect("scripts/quix-peer.sh starts");
                Box::new(Quix {
                    child: Some(child),
                    log,
                    group: self.group.clone(),
                })
            }
        }
    }
}

/// Where the commits of a streamfold run went, from the instances'
/// metrics: how many, their mean duration and that of each phase, and
/// the share of the run's time an instance spent committing (no record is
/// processed meanwhile).
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
