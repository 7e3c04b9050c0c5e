//! `streamfold run` as a child process of the real binary: start, stop,
//! kill, pause; its log and metrics.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::broker::broker;
use super::metrics::find_metric;
use super::netns::Netns;
use super::process::{process_state, signal, stacks};
use super::{free_port, unique};

/// `streamfold run` as a child process.
pub struct App {
    child: Option<Child>,
    /// Where its metrics server listens: loopback, or its network
    /// namespace's address.
    pub metrics_host: String,
    pub metrics_port: u16,
    pub log: PathBuf,
}

/// How to start an [`App`].
#[derive(Clone, Debug)]
pub struct AppConfig {
    pub topology: PathBuf,
    pub instance: String,
    pub state_dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub txn_header: bool,
    /// More `run` arguments (`--txn-journal`, `--inject-fault`...).
    pub args: Vec<String>,
}

impl AppConfig {
    /// The changelog topics of the topology's stores, named as the
    /// compiler names them (`StoreDef`) with this config's environment.
    #[allow(dead_code)] // not every test binary reads changelogs
    pub fn changelog_topics(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.topology).expect("topology file");
        let env = |name: &str| {
            self.env
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(name).ok())
        };
        let topology =
            streamfold::topology::load_str(&self.topology.display().to_string(), &text, &env)
                .unwrap_or_else(|e| panic!("the topology loads: {e:?}"));
        topology
            .stores()
            .map(|s| s.changelog_topic.clone())
            .collect()
    }
}

/// How long a stop may take before [`App::stop`] takes the process's
/// stacks.
const SLOW_STOP: Duration = Duration::from_secs(30);

/// The binary instances run: the one cargo built with these tests, or
/// `STREAMFOLD_BIN`'s (a copy kept for a long run while the tree is
/// rebuilt, or another commit's build).
pub fn streamfold_binary() -> PathBuf {
    std::env::var_os("STREAMFOLD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_streamfold")))
}

impl App {
    pub fn start(config: &AppConfig, log_dir: &Path) -> App {
        App::start_on(&broker().bootstrap, config, log_dir)
    }

    /// [`App::start`] against the broker at `bootstrap`.
    pub fn start_on(bootstrap: &str, config: &AppConfig, log_dir: &Path) -> App {
        App::start_in(bootstrap, config, log_dir, None)
    }

    /// [`App::start`] of the streamfold binary at `binary` (another build,
    /// for a comparison).
    #[allow(dead_code)] // the benchmarks' comparison of builds
    pub fn start_binary(binary: &Path, config: &AppConfig, log_dir: &Path) -> App {
        App::start_with(binary, &broker().bootstrap, config, log_dir, None)
    }

    /// [`App::start_on`], inside the network namespace `netns` when given
    /// (see [`Netns::cut`]).
    pub fn start_in(
        bootstrap: &str,
        config: &AppConfig,
        log_dir: &Path,
        netns: Option<&Netns>,
    ) -> App {
        App::start_with(&streamfold_binary(), bootstrap, config, log_dir, netns)
    }

    fn start_with(
        binary: &Path,
        bootstrap: &str,
        config: &AppConfig,
        log_dir: &Path,
        netns: Option<&Netns>,
    ) -> App {
        let metrics_port = free_port();
        let metrics_host = netns.map_or("127.0.0.1".to_string(), |n| n.ip.clone());
        let log = log_dir.join(format!("{}-{}.log", config.instance, unique("run")));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = match netns {
            Some(netns) => {
                let prefix = netns.exec_prefix();
                let mut command = Command::new(&prefix[0]);
                command.args(&prefix[1..]).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg("run")
            .arg(&config.topology)
            .arg("--bootstrap-servers")
            .arg(bootstrap)
            .arg("--instance-id")
            .arg(&config.instance)
            .arg("--state-dir")
            .arg(&config.state_dir)
            .arg("--metrics-addr")
            .arg(format!("{metrics_host}:{metrics_port}"))
            .env("RUST_LOG", "warn,streamfold=info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(file.try_clone().unwrap());
        if config.txn_header {
            command.arg("--txn-header");
        }
        command.args(&config.args);
        for (k, v) in &config.env {
            command.env(k, v);
        }
        let child = command.spawn().expect("streamfold starts");
        App {
            child: Some(child),
            metrics_host,
            metrics_port,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Prometheus text from `/metrics`, or empty while it is not up.
    pub fn metrics_text(&self) -> String {
        let Ok(mut stream) = TcpStream::connect((self.metrics_host.as_str(), self.metrics_port))
        else {
            return String::new();
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut body = String::new();
        let _ = stream.read_to_string(&mut body);
        body.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }

    /// Sum of a metric over its label sets. A metric `/metrics` does not
    /// export (or a `/metrics` that does not answer) fails the test: a
    /// missing counter is not a zero.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics_text();
        find_metric(&text, name).unwrap_or_else(|| {
            panic!(
                "metric {name} is not exported ({}); log:\n{}",
                if text.is_empty() {
                    "/metrics did not answer"
                } else {
                    "/metrics answered without it"
                },
                self.log_text()
            )
        })
    }

    /// The metric, or `None` while it (or `/metrics`) is not there yet:
    /// for a poll that starts before the process serves its metrics.
    pub fn metric_if_exported(&self, name: &str) -> Option<f64> {
        find_metric(&self.metrics_text(), name)
    }

    /// Waits until the metric `name` is exported and `condition` holds on
    /// it; an absent metric never counts as 0.
    pub fn wait_metric(
        &self,
        name: &str,
        timeout: Duration,
        condition: impl Fn(f64) -> bool,
    ) -> f64 {
        self.wait_for_metric(name, timeout, |text| find_metric(text, name), condition)
    }

    /// Scrapes until `read` finds a value that meets `condition`, checking
    /// the process stays up.
    fn wait_for_metric(
        &self,
        name: &str,
        timeout: Duration,
        read: impl Fn(&str) -> Option<f64>,
        condition: impl Fn(f64) -> bool,
    ) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let value = read(&self.metrics_text());
            if let Some(value) = value.filter(|v| condition(*v)) {
                return value;
            }
            if Instant::now() > deadline {
                panic!(
                    "metric {name} = {value:?} (None: not exported) did not reach the expected value within {timeout:?}; log:\n{}",
                    self.log_text()
                );
            }
            self.assert_running();
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the log holds `times` lines containing `text`; returns
    /// those lines.
    pub fn wait_log_lines(&self, text: &str, times: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let lines: Vec<String> = self
                .log_text()
                .lines()
                .filter(|l| l.contains(text))
                .map(str::to_string)
                .collect();
            if lines.len() >= times {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {times} log lines with `{text}` within {timeout:?}; log:\n{}",
                lines.len(),
                self.log_text()
            );
            self.assert_running();
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn assert_running(&self) {
        if let Some(child) = &self.child {
            // `try_wait` needs `&mut`; check /proc instead.
            let alive = process_state(child.id()).is_some_and(|state| state != "Z");
            assert!(alive, "streamfold exited early; log:\n{}", self.log_text());
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits for a clean exit. A process still running after
    /// [`SLOW_STOP`] has its threads' stacks taken then, before its stop
    /// timeout (45 s) ends it, so that a stop that fails says what it
    /// waited in.
    pub fn stop(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let signalled = Instant::now();
            let mut slow = None;
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    let stacks = slow.as_deref().unwrap_or("(it stopped within 30 s)");
                    assert!(
                        status.success(),
                        "streamfold exited with {status} after SIGTERM; log:\n{}\nits threads {:?} \
                         after the signal:\n{stacks}",
                        self.log_text(),
                        SLOW_STOP
                    );
                    break;
                }
                if slow.is_none() && signalled.elapsed() >= SLOW_STOP {
                    slow = Some(stacks(child.id()));
                }
                if signalled.elapsed() >= Duration::from_secs(60) {
                    panic!(
                        "streamfold did not stop within 60s; log:\n{}\nits threads:\n{}",
                        self.log_text(),
                        stacks(child.id())
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.log_text()
    }

    /// Waits until the process has stopped itself (a `freeze` fault: state
    /// `T` in `/proc/<pid>/stat`).
    pub fn wait_frozen(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let state = process_state(self.pid());
            if state.as_deref() == Some("T") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the process did not freeze within {timeout:?} (state {state:?}):\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP: the process freezes (a zombie in the making).
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }

    /// Waits for the process to exit on its own; its status and log.
    pub fn wait_exit(mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut().expect("the process was started");
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return (status, self.log_text());
            }
            // On failure the process is still ours: dropping `self` kills
            // it rather than leave it running after the test.
            assert!(
                Instant::now() < deadline,
                "streamfold did not exit within {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL: no commit, no goodbye.
    pub fn kill(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "KILL");
            let _ = child.wait();
        }
        self.log_text()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Environment variables for an app, owned.
#[allow(dead_code)] // not every test binary writes its own topology
pub fn env_vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Writes at `path` an exactly-once topology (`${STREAMFOLD_APP}`, commit
/// interval 100 ms) with one JSON source `events` on `${EVENTS_TOPIC}`,
/// `source_options` (lines indented as the source's own keys), then
/// `body` (its `nodes:` and `sinks:`), and the dead-letter topic
/// `${DEAD_LETTER_TOPIC}`.
#[allow(dead_code)] // not every test binary writes its own topology
pub fn write_json_topology(path: &Path, source_options: &str, body: &str) {
    let text = format!(
        "name: ${{STREAMFOLD_APP}}
kafka:
  bootstrap_servers: 127.0.0.1:9092
processing:
  guarantee: exactly_once
  commit_interval: 100ms
sources:
  events:
    topic: ${{EVENTS_TOPIC}}
    format: json
{source_options}{body}dead_letter:
  topic: ${{DEAD_LETTER_TOPIC}}
"
    );
    std::fs::write(path, text).expect("write the topology");
}

/// The run id a streamfold log announced at startup.
pub fn run_ids(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split("run=").nth(1))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}
