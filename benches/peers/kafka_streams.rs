//! The Kafka Streams peer (`benches/peers/kafka-streams/`) as a child
//! process, for the benchmarks and the test that checks it does
//! streamfold's work: `scripts/kafka-streams-peer.sh` in the foreground
//! (it builds the jar first when it is missing or stale), its status lines
//! read from stdout, its log in a file.
//!
//! The including crate provides `support` (tests/support/mod.rs).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support::{broker, process_state, repo, signal, unique};

/// Which of the peer's applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerApp {
    /// `topologies/social-metrics.yaml`.
    Fold,
    /// `topologies/question-feed.yaml`.
    QuestionFeed,
    /// `topologies/page-views.yaml`.
    PageViews,
    /// `topologies/orders-enriched.yaml`.
    OrdersEnriched,
}

impl PeerApp {
    fn command(self) -> &'static str {
        match self {
            PeerApp::Fold => "fold",
            PeerApp::QuestionFeed => "question-feed",
            PeerApp::PageViews => "page-views",
            PeerApp::OrdersEnriched => "orders-enriched",
        }
    }
}

/// How to start the peer.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    pub app: PeerApp,
    /// Also its consumer group and the prefix of its internal topics.
    pub application_id: String,
    pub state_dir: PathBuf,
    /// The topics and parameters (`--input`, `--output`, `--quiet-for` …);
    /// the servers, application id and state directory are added.
    pub args: Vec<String>,
    /// The JVM's heap (`KAFKA_STREAMS_PEER_HEAP`; none: the script's).
    pub heap: Option<String>,
}

/// Builds the peer's jar once per process (Maven; the script skips the
/// build when the jar is current and serialises concurrent builds).
pub fn build_peer() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(repo().join("scripts/kafka-streams-peer.sh"))
            .arg("--build-only")
            .status()
            .expect("scripts/kafka-streams-peer.sh runs");
        assert!(status.success(), "building the Kafka Streams peer failed");
    });
}

/// The peer running as a child process.
pub struct KafkaStreamsPeer {
    child: Option<Child>,
    /// Status lines from stdout (`started …`, `running …`, `stopped …`).
    status: Mutex<Receiver<String>>,
    seen: Mutex<Vec<String>>,
    pub log: PathBuf,
}

impl KafkaStreamsPeer {
    /// Starts the peer against the broker of this process.
    pub fn start(config: &PeerConfig, log_dir: &Path) -> KafkaStreamsPeer {
        build_peer();
        let log = log_dir.join(format!("{}.log", unique(&config.application_id)));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(repo().join("scripts/kafka-streams-peer.sh"));
        command
            .arg(config.app.command())
            .args(["--bootstrap-servers", &broker().bootstrap])
            .args(["--application-id", &config.application_id])
            .arg("--state-dir")
            .arg(&config.state_dir)
            .args(&config.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file);
        if let Some(heap) = &config.heap {
            command.env("KAFKA_STREAMS_PEER_HEAP", heap);
        }
        let mut child = command.spawn().expect("the Kafka Streams peer starts");
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        KafkaStreamsPeer {
            child: Some(child),
            status: Mutex::new(receiver),
            seen: Mutex::new(Vec::new()),
            log,
        }
    }

    /// The JVM's process id (the script `exec`s it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for a status line starting with `prefix` (`running`: tasks
    /// assigned and restored), failing with the log when the peer exits
    /// or `timeout` passes.
    pub fn wait_status(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self
                .seen
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.starts_with(prefix))
            {
                return line.clone();
            }
            let next = self
                .status
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_millis(100));
            match next {
                Ok(line) => self.seen.lock().unwrap().push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    assert!(
                        Instant::now() < deadline,
                        "the Kafka Streams peer printed no `{prefix}` line within {timeout:?}; log:\n{}",
                        self.log_tail(80)
                    );
                    self.assert_running();
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!(
                        "the Kafka Streams peer exited before `{prefix}`; log:\n{}",
                        self.log_tail(80)
                    );
                }
            }
        }
    }

    /// Waits until the peer processes (its `running` line).
    pub fn wait_running(&self, timeout: Duration) {
        self.wait_status("running ", timeout);
    }

    pub fn assert_running(&self) {
        if let Some(child) = &self.child {
            let alive = process_state(child.id()).is_some_and(|state| state != "Z");
            assert!(
                alive,
                "the Kafka Streams peer exited early; log:\n{}",
                self.log_tail(80)
            );
        }
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM: Kafka Streams commits, leaves the group and closes; the
    /// peer must exit 0 having printed `stopped … clean=true`.
    pub fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal(child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "the Kafka Streams peer did not stop within 90 s; log:\n{}",
                    self.log_tail(80)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            status.success(),
            "the Kafka Streams peer exited with {status} after SIGTERM; log:\n{}",
            self.log_tail(80)
        );
        let stopped = self.wait_status("stopped ", Duration::from_secs(5));
        assert!(stopped.contains("clean=true"), "{stopped}");
    }

    /// SIGKILL: no commit, no goodbye.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }
}

impl Drop for KafkaStreamsPeer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
