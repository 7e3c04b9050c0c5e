//! Apache Kafka for the tests: one node per test binary, started on first
//! use ([`broker`]), or a cluster a test starts for itself
//! ([`Broker::start`]), every node a KRaft broker and controller on
//! loopback, run by `scripts/kafka-broker.sh` (which installs Kafka from
//! Maven Central when it is missing).
//!
//! Each node runs under a watchdog shell that kills it and removes its
//! directory when the test process ends, however it ends. A node that does
//! not come up says why: the test fails with the tail of its log.
//!
//! Settings (environment):
//! - `STREAMFOLD_KAFKA_HEAP`: each node's heap (default `512m`);
//! - `STREAMFOLD_KAFKA_START_TIMEOUT`: seconds a node may take to answer
//!   (default 120);
//! - `STREAMFOLD_KAFKA_LOGS`: a directory to keep every node's
//!   `server.log` in (copied when the test process ends); otherwise the
//!   logs go with the node's temporary directory.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::process::{process_state, signal};
use super::{free_port, repo, unique};

static BROKER: OnceLock<Broker> = OnceLock::new();

/// The one-node cluster of this test binary, started on first use.
pub fn broker() -> &'static Broker {
    BROKER.get_or_init(|| Broker::start(BrokerOptions::default()))
}

/// Client settings for the broker of this test binary.
pub fn plain_client() -> ClientConfig {
    broker().client()
}

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct BrokerOptions {
    /// Nodes, each a broker and a controller. With more than one, internal
    /// and new topics are replicated to 3 with `min.insync.replicas=2`.
    pub nodes: usize,
    /// More broker settings, `key=value`, after the defaults.
    pub configs: Vec<String>,
    /// More listeners, by name (each node gets a port for each; their
    /// protocol goes in `configs`' `listener.security.protocol.map`).
    pub listeners: Vec<String>,
    /// The address the extra listeners listen on (they advertise
    /// `127.0.0.1` whatever it is): `0.0.0.0` makes them answer on any
    /// loopback address. `None`: `127.0.0.1`.
    pub listener_bind: Option<String>,
    /// Arguments for the storage format (`--add-scram ...`).
    pub format_args: Vec<String>,
    /// The address the PLAINTEXT listeners bind and advertise: loopback,
    /// or a veth's local address that a network namespace reaches.
    pub host: String,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            nodes: 1,
            configs: Vec::new(),
            listeners: Vec::new(),
            listener_bind: None,
            format_args: Vec::new(),
            host: "127.0.0.1".into(),
        }
    }
}

/// A Kafka cluster on loopback.
pub struct Broker {
    /// Every node's PLAINTEXT listener, comma-separated.
    pub bootstrap: String,
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// One node of a [`Broker`].
pub struct Node {
    /// Its `node.id` (1, 2, 3 …).
    pub id: u32,
    pub port: u16,
    /// The address of its PLAINTEXT listener.
    pub host: String,
    /// The port of each extra listener, in [`BrokerOptions::listeners`]'
    /// order.
    pub listener_ports: Vec<u16>,
    pub dir: PathBuf,
    args: Vec<String>,
    /// The watchdog shell; `None` while the node is down.
    watchdog: Mutex<Option<Child>>,
}

impl Broker {
    /// Starts a cluster and waits until every node answers.
    pub fn start(options: BrokerOptions) -> Broker {
        assert!(options.nodes == 1 || options.nodes >= 3, "1 or ≥ 3 nodes");
        let dir = tempfile::Builder::new()
            .prefix("streamfold-kafka-")
            .tempdir()
            .unwrap();
        let ports: Vec<(u16, u16)> = (0..options.nodes)
            .map(|_| (free_port(), free_port()))
            .collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, (_, controller))| format!("{}@127.0.0.1:{controller}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_id = cluster_id();
        let nodes: Vec<Node> = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, controller))| {
                let id = i as u32 + 1;
                let node_dir = dir.path().join(format!("node-{id}"));
                let listener_ports: Vec<u16> =
                    options.listeners.iter().map(|_| free_port()).collect();
                let mut args = vec![
                    "--dir".to_string(),
                    node_dir.display().to_string(),
                    "--port".into(),
                    port.to_string(),
                    "--host".into(),
                    options.host.clone(),
                    "--controller-port".into(),
                    controller.to_string(),
                    "--node-id".into(),
                    id.to_string(),
                    "--voters".into(),
                    voters.clone(),
                    "--replication".into(),
                    if options.nodes > 1 { "3" } else { "1" }.into(),
                    "--cluster-id".into(),
                    cluster_id.clone(),
                ];
                for (name, port) in options.listeners.iter().zip(&listener_ports) {
                    args.extend(["--listener".into(), format!("{name}://127.0.0.1:{port}")]);
                }
                if let Some(bind) = &options.listener_bind {
                    args.extend(["--listener-bind".into(), bind.clone()]);
                }
                // Tests give records fixed event times (2025) as their
                // timestamps; time-based retention (7 days, checked every 5
                // minutes) would delete such records from a topic mid-test,
                // a whole segment at a time. Options given here come after,
                // and win.
                args.extend(["--config".into(), "log.retention.ms=-1".into()]);
                for config in &options.configs {
                    args.extend(["--config".into(), config.clone()]);
                }
                for arg in &options.format_args {
                    args.extend(["--format-arg".into(), arg.clone()]);
                }
                Node {
                    id,
                    port,
                    host: options.host.clone(),
                    listener_ports,
                    dir: node_dir,
                    args,
                    watchdog: Mutex::new(None),
                }
            })
            .collect();
        let broker = Broker {
            bootstrap: nodes
                .iter()
                .map(|n| format!("{}:{}", n.host, n.port))
                .collect::<Vec<_>>()
                .join(","),
            nodes,
            _dir: dir,
        };
        for node in &broker.nodes {
            node.spawn();
        }
        broker.wait_all_up();
        broker
    }

    /// Client settings for this cluster's PLAINTEXT listeners.
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        config
    }

    /// Stops every node (SIGKILL when `crash`, else SIGTERM), keeps them
    /// down for `down`, and starts them again on the same ports and data;
    /// returns once each answers metadata requests.
    pub fn restart(&self, crash: bool, down: Duration) {
        for node in &self.nodes {
            node.stop(crash);
        }
        std::thread::sleep(down);
        for node in &self.nodes {
            node.spawn();
        }
        self.wait_all_up();
    }

    /// Waits until every node answers a metadata request that lists them
    /// all; fails with every node's log (a node that never lists the
    /// others is often waiting on one of them).
    fn wait_all_up(&self) {
        for node in &self.nodes {
            if let Err(why) = node.wait_up(self.nodes.len()) {
                let logs: Vec<String> = self.nodes.iter().map(|n| n.log_tail(40)).collect();
                panic!("{why}; the nodes' logs:\n{}", logs.join("\n"));
            }
        }
    }

    /// SIGSTOP on every node: connections stay open and nothing answers
    /// (a stalled broker, a long GC pause) until [`Broker::thaw`].
    pub fn freeze(&self) {
        for node in &self.nodes {
            signal(node.pid(), "STOP");
        }
    }

    /// SIGCONT after [`Broker::freeze`].
    pub fn thaw(&self) {
        for node in &self.nodes {
            signal(node.pid(), "CONT");
        }
    }

    /// The first node's process id (the only one of a one-node cluster).
    pub fn pid(&self) -> u32 {
        self.nodes[0].pid()
    }

    /// The node that leads the controller quorum, from the quorum state a
    /// running node keeps on disk; `None` while no node knows a leader.
    pub fn active_controller(&self) -> Option<u32> {
        self.nodes
            .iter()
            .filter(|n| n.running())
            .find_map(|n| n.quorum_leader())
    }

    /// The node with `id`.
    pub fn node(&self, id: u32) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }
}

impl Node {
    /// Starts the node under a watchdog shell that kills it, and removes
    /// its directory, when this test process ends.
    fn spawn(&self) {
        let mut watchdog = self.watchdog.lock().unwrap();
        assert!(watchdog.is_none(), "node {} already runs", self.id);
        std::fs::create_dir_all(&self.dir).unwrap();
        let keep = std::env::var("STREAMFOLD_KAFKA_LOGS").ok();
        let keep_log = keep.map_or(String::new(), |logs| {
            format!(
                "mkdir -p {logs}; cp {dir}/server.log {logs}/{name}.log 2>/dev/null; ",
                dir = self.dir.display(),
                name = unique(&format!("kafka-node-{}", self.id)),
            )
        });
        let args: Vec<String> = self.args.iter().map(|a| shell_quote(a)).collect();
        let script = format!(
            "{script} {args} >{dir}/stdout.log 2>&1 & child=$!; echo $child >{dir}/pid; \
             while kill -0 {parent} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done; \
             if ! kill -0 {parent} 2>/dev/null; then kill -9 $child 2>/dev/null; wait $child; \
             {keep_log}rm -rf {dir}; fi",
            script = repo().join("scripts/kafka-broker.sh").display(),
            args = args.join(" "),
            dir = self.dir.display(),
            parent = std::process::id(),
        );
        let _ = std::fs::remove_file(self.dir.join("pid"));
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env(
                "KAFKA_HEAP",
                std::env::var("STREAMFOLD_KAFKA_HEAP").unwrap_or_else(|_| "512m".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh starts");
        *watchdog = Some(child);
    }

    /// Waits until the node answers a metadata request that lists all
    /// `nodes` brokers; fails saying why when it exits or times out.
    fn wait_up(&self, nodes: usize) -> Result<(), String> {
        let timeout = Duration::from_secs(
            std::env::var("STREAMFOLD_KAFKA_START_TIMEOUT")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(120),
        );
        let deadline = Instant::now() + timeout;
        let address = format!("{}:{}", self.host, self.port);
        loop {
            if TcpStream::connect(&address).is_ok() {
                let consumer: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &address)
                    .create()
                    .unwrap();
                if consumer
                    .fetch_metadata(None, Duration::from_secs(2))
                    .is_ok_and(|m| m.brokers().len() >= nodes)
                {
                    return Ok(());
                }
            }
            let exited = self
                .watchdog
                .lock()
                .unwrap()
                .as_mut()
                .is_none_or(|w| w.try_wait().unwrap().is_some());
            if exited {
                return Err(format!("Kafka node {} exited while starting", self.id));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "Kafka node {} did not list all {nodes} brokers on {address} within {timeout:?}",
                    self.id
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the node: SIGKILL when `crash` (no shutdown at all), else
    /// SIGTERM (a controlled shutdown); returns once it has exited.
    pub fn stop(&self, crash: bool) {
        let mut watchdog = self.watchdog.lock().unwrap();
        let Some(mut shell) = watchdog.take() else {
            return;
        };
        let pid = self.pid();
        signal(pid, "CONT");
        signal(pid, if crash { "KILL" } else { "TERM" });
        let deadline = Instant::now() + Duration::from_secs(60);
        while shell.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                signal(pid, "KILL");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the node again after [`Node::stop`] and waits until it
    /// answers.
    pub fn start_again(&self, nodes: usize) {
        self.spawn();
        if let Err(why) = self.wait_up(nodes) {
            panic!("{why}; its log:\n{}", self.log_tail(60));
        }
    }

    /// SIGSTOP: the node keeps its sockets and answers nothing.
    pub fn freeze(&self) {
        signal(self.pid(), "STOP");
    }

    /// SIGCONT after [`Node::freeze`].
    pub fn thaw(&self) {
        signal(self.pid(), "CONT");
    }

    pub fn running(&self) -> bool {
        self.watchdog.lock().unwrap().is_some()
    }

    /// The Java process's id.
    pub fn pid(&self) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = std::fs::read_to_string(self.dir.join("pid"))
                .ok()
                .and_then(|p| p.trim().parse().ok())
                .filter(|&pid| process_state(pid).is_some())
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "node {} has no pid", self.id);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The leader of the controller quorum as this node last recorded it.
    fn quorum_leader(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("data/__cluster_metadata-0/quorum-state"))
            .ok()?;
        let state: serde_json::Value = serde_json::from_str(&text).ok()?;
        let leader = state["leaderId"].as_i64()?;
        (leader > 0).then_some(leader as u32)
    }

    /// The last `lines` lines of the node's output and server log.
    pub fn log_tail(&self, lines: usize) -> String {
        let tail = |path: &Path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        };
        format!(
            "--- {}:\n{}\n--- {}:\n{}",
            self.dir.join("stdout.log").display(),
            tail(&self.dir.join("stdout.log")),
            self.dir.join("server.log").display(),
            tail(&self.dir.join("server.log")),
        )
    }
}

/// A KRaft cluster id: 16 random bytes in URL-safe base64, not starting
/// with `-` (which the storage tool would read as an option).
fn cluster_id() -> String {
    use base64::Engine;
    use rand::RngCore;
    loop {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        if !id.starts_with('-') {
            return id;
        }
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
