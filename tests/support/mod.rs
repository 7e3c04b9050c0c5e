//! Shared helpers for the integration tests against a real broker.
//!
//! - One broker per test binary: nisshi 0.7.0 on a free port (installed by
//!   `scripts/install-nisshi.sh`), or the broker in
//!   `STREAMFOLD_TEST_BOOTSTRAP` (Apache Kafka from docker compose), in
//!   which case exactly-once checks are strict: a broker that hides aborted
//!   transactions must show no duplicate at all.
//! - Random topic and application names per test.
//! - Producing and reading (read_committed) with rdkafka.
//! - `streamfold run` as a child process of the real binary, with its
//!   metrics scraped over HTTP.
//!
//! Tests in one binary run one at a time ([`serial`]): each starts
//! processes that compete for the machine's two cores.

#![allow(dead_code)]

pub mod fastavro;
pub mod registry;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

pub struct Broker {
    pub bootstrap: String,
    /// Whether the broker hides records of aborted transactions from
    /// read_committed consumers (Apache Kafka does; nisshi 0.7.0 does not).
    pub strict: bool,
    /// The nisshi this test binary started (none for an external broker).
    nisshi: Option<Nisshi>,
}

/// A nisshi process of this test binary, and what it takes to start it
/// again on the same port and storage.
struct Nisshi {
    port: u16,
    storage: String,
    /// Its working directory (where the SQLite file lives).
    dir: PathBuf,
    /// The broker's pid, written by the watchdog shell.
    pid_file: PathBuf,
    _scratch: Option<tempfile::TempDir>,
    watchdog: Mutex<Child>,
}

static BROKER: OnceLock<Broker> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs tests of one binary one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn nisshi_binary() -> PathBuf {
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo")
        });
    let installed = home.join("bin/nisshi");
    if installed.exists() {
        installed
    } else {
        PathBuf::from("nisshi")
    }
}

/// The broker of this test binary, started on first use (in memory).
pub fn broker() -> &'static Broker {
    BROKER.get_or_init(|| start_broker(false))
}

/// The broker of this test binary, started on first use with its data in
/// a SQLite file, so that [`Broker::restart`] keeps topics, offsets and
/// groups. Call it before anything else uses [`broker`].
pub fn persistent_broker() -> &'static Broker {
    let broker = BROKER.get_or_init(|| start_broker(true));
    assert!(
        broker
            .nisshi
            .as_ref()
            .is_none_or(|n| n.storage.starts_with("sqlite")),
        "the in-memory broker was started first"
    );
    broker
}

fn start_broker(persistent: bool) -> Broker {
    if let Ok(bootstrap) = std::env::var("STREAMFOLD_TEST_BOOTSTRAP") {
        return Broker {
            bootstrap,
            strict: true,
            nisshi: None,
        };
    }
    let port = free_port();
    let scratch = persistent.then(temp_dir);
    // nisshi 0.7.0 reads the SQLite path relative to its working
    // directory, even an absolute one: run it in the scratch directory.
    let storage = match &scratch {
        Some(_) => "sqlite://nisshi.db".to_string(),
        None => "memory://nisshi/".to_string(),
    };
    let pid_file = std::env::temp_dir().join(unique("nisshi-pid"));
    let dir = scratch
        .as_ref()
        .map_or_else(std::env::temp_dir, |d| d.path().to_path_buf());
    let watchdog = spawn_nisshi(port, &storage, &dir, &pid_file);
    let bootstrap = format!("127.0.0.1:{port}");
    wait_for_broker(&bootstrap);
    Broker {
        bootstrap,
        strict: false,
        nisshi: Some(Nisshi {
            port,
            storage,
            dir,
            pid_file,
            _scratch: scratch,
            watchdog: Mutex::new(watchdog),
        }),
    }
}

/// nisshi under a watchdog shell that stops it when this test process
/// ends, however it ends; the shell itself ends with the broker.
fn spawn_nisshi(port: u16, storage: &str, dir: &Path, pid_file: &Path) -> Child {
    let url = format!("tcp://127.0.0.1:{port}");
    let script = format!(
        "{nisshi} broker --listener-url {url} --advertised-listener-url {url} \
         --storage-engine {storage} --group-initial-rebalance-delay 0s --silent & \
         child=$!; echo $child > {pid_file}; \
         while kill -0 {parent} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done; \
         kill -0 {parent} 2>/dev/null || kill $child 2>/dev/null",
        nisshi = nisshi_binary().display(),
        pid_file = pid_file.display(),
        parent = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nisshi starts (run scripts/install-nisshi.sh)")
}

impl Broker {
    /// Whether [`Broker::restart`] can restart this broker: a nisshi of
    /// this test binary with persistent storage.
    pub fn restartable(&self) -> bool {
        self.nisshi
            .as_ref()
            .is_some_and(|n| n.storage.starts_with("sqlite"))
    }

    /// Stops the broker (SIGKILL when `crash`, else SIGTERM), keeps it down
    /// for `down`, and starts it again on the same port and storage; returns
    /// once it answers metadata requests.
    pub fn restart(&self, crash: bool, down: Duration) {
        let nisshi = self.nisshi.as_ref().expect("a broker of this test binary");
        assert!(
            self.restartable(),
            "an in-memory broker would lose its data"
        );
        let mut watchdog = nisshi.watchdog.lock().unwrap();
        let pid = std::fs::read_to_string(&nisshi.pid_file).unwrap();
        signal(
            pid.trim().parse().unwrap(),
            if crash { "KILL" } else { "TERM" },
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while watchdog.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "nisshi did not stop within 30s");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(down);
        *watchdog = spawn_nisshi(nisshi.port, &nisshi.storage, &nisshi.dir, &nisshi.pid_file);
        wait_for_broker(&self.bootstrap);
    }
}

impl Broker {
    /// The nisshi of this test binary, if it has one: an external broker
    /// (`STREAMFOLD_TEST_BOOTSTRAP`) is not a test's to freeze or restart.
    pub fn owned(&self) -> bool {
        self.nisshi.is_some()
    }

    /// SIGSTOP: the broker keeps its connections open and answers nothing
    /// (a stalled broker, a long GC pause) until [`Broker::thaw`].
    pub fn freeze(&self) {
        signal(self.nisshi_pid(), "STOP");
    }

    /// SIGCONT after [`Broker::freeze`].
    pub fn thaw(&self) {
        signal(self.nisshi_pid(), "CONT");
    }

    /// The process id of this test binary's nisshi; `None` for an
    /// external broker.
    pub fn pid(&self) -> Option<u32> {
        self.owned().then(|| self.nisshi_pid())
    }

    fn nisshi_pid(&self) -> u32 {
        let nisshi = self.nisshi.as_ref().expect("a broker of this test binary");
        let pid = std::fs::read_to_string(&nisshi.pid_file).unwrap();
        pid.trim().parse().unwrap()
    }
}

/// A `/proc/.../stat` line, `pid (name) state ...`, split into the name
/// (which may hold spaces and `)`) and the fields from `state` (field 3) on.
fn parse_stat(stat: &str) -> Option<(&str, Vec<&str>)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(').map_or("?", |(_, name)| name);
    Some((name, rest.split_whitespace().collect()))
}

/// User + system CPU seconds from a stat line's fields: utime and stime
/// are fields 14 and 15, in USER_HZ ticks, which Linux fixes at 100.
fn cpu_of(fields: &[&str]) -> Option<f64> {
    let ticks = |field: usize| fields.get(field - 3)?.parse::<f64>().ok();
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z` zombie…);
/// `None` once the process is gone.
fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat(&stat)?.1.first()?.to_string())
}

/// CPU time (user + system) process `pid` has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    parse_stat(&stat)
        .and_then(|(_, fields)| cpu_of(&fields))
        .expect("a stat line")
}

/// CPU time (user + system) each thread of process `pid` has used so far,
/// in seconds, by `name/tid`: to tell which thread burned it.
pub fn thread_cpu_seconds(pid: u32) -> BTreeMap<String, f64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return BTreeMap::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let (name, fields) = parse_stat(&stat)?;
            let tid = task.file_name().to_string_lossy().into_owned();
            Some((format!("{name}/{tid}"), cpu_of(&fields)?))
        })
        .collect()
}

/// The threads that used CPU between two [`thread_cpu_seconds`] readings,
/// busiest first, as `name/tid=seconds`.
pub fn busiest_threads(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let mut used: Vec<(&String, f64)> = after
        .iter()
        .map(|(thread, &t)| (thread, t - before.get(thread).copied().unwrap_or(0.0)))
        .filter(|(_, used)| *used > 0.0)
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    used.iter()
        .take(6)
        .map(|(thread, used)| format!("{thread}={used:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn wait_for_broker(bootstrap: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect(bootstrap).is_ok() {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .create()
                .unwrap();
            if consumer
                .fetch_metadata(None, Duration::from_secs(2))
                .is_ok()
            {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the test broker at {bootstrap} did not answer within 30s");
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

/// A scratch directory for a test's state and logs.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("streamfold-it-")
        .tempdir()
        .unwrap()
}

/// A name unique to this run: `prefix-<random>`.
pub fn unique(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id()));
    format!("{prefix}-{:08x}", h.finish() as u32)
}

/// Client settings for the broker of this test binary.
pub fn plain_client() -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &broker().bootstrap);
    config
}

pub fn create_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[]);
}

/// Creates `name` with explicit topic configs (`cleanup.policy`...).
pub fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    create_topic_on(&plain_client(), name, partitions, configs);
}

/// [`create_topic_with`] through a client with `client`'s settings.
pub fn create_topic_on(
    client: &ClientConfig,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = client.create().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = runtime
        .block_on(admin.create_topics(
            &[configs.iter().fold(
                NewTopic::new(name, partitions, TopicReplication::Fixed(-1)),
                |topic, (k, v)| topic.set(k, v),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .unwrap();
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((n, code)) => panic!("cannot create {n}: {code}"),
        }
    }
}

/// Where each delivered record went: the end offset (last offset + 1)
/// per `(topic, partition)`. nisshi 0.7.0 answers ListOffsets with the
/// last batch's base offset + 1, not the high watermark, so tests learn
/// the end of an input topic from the producer that wrote it.
#[derive(Default)]
pub struct Delivered(Mutex<BTreeMap<(String, i32), i64>>);

impl Delivered {
    /// The end offset of each `(topic, partition)` delivered to so far.
    pub fn ends(&self) -> BTreeMap<(String, i32), i64> {
        self.0.lock().unwrap().clone()
    }
}

impl rdkafka::ClientContext for Delivered {}

impl rdkafka::producer::ProducerContext for Delivered {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        let message = result
            .as_ref()
            .unwrap_or_else(|(e, _)| panic!("a test record was not delivered: {e}"));
        let mut ends = self.0.lock().unwrap();
        let end = ends
            .entry((message.topic().to_string(), message.partition()))
            .or_insert(0);
        *end = (*end).max(message.offset() + 1);
    }
}

/// A producer with the Java client's partitioner.
pub struct TestProducer {
    inner: BaseProducer<Delivered>,
}

impl TestProducer {
    pub fn new() -> TestProducer {
        TestProducer::on(&plain_client())
    }

    /// A producer with `client`'s settings (servers, security).
    pub fn on(client: &ClientConfig) -> TestProducer {
        TestProducer {
            inner: client
                .clone()
                .set("partitioner", "murmur2_random")
                .set("linger.ms", "10")
                .set("enable.idempotence", "true")
                .create_with_context(Delivered::default())
                .unwrap(),
        }
    }

    /// The end offset of each of `partitions` partitions of `topic`, as
    /// far as this producer wrote it (flush first).
    pub fn ends(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let ends = self.inner.context().0.lock().unwrap();
        (0..partitions)
            .map(|p| ends.get(&(topic.to_string(), p)).copied().unwrap_or(0))
            .collect()
    }

    pub fn send(&self, topic: &str, key: Option<&[u8]>, payload: &[u8], headers: &[(&str, &str)]) {
        self.send_with(topic, key, Some(payload), headers);
    }

    /// Sends a record whose payload may be absent (a tombstone).
    pub fn send_maybe(&self, topic: &str, key: Option<&[u8]>, payload: Option<&[u8]>) {
        self.send_with(topic, key, payload, &[]);
    }

    fn send_with(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) {
        let mut owned = OwnedHeaders::new();
        for (k, v) in headers {
            owned = owned.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).headers(owned);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        if let Some(key) = key {
            record = record.key(key);
        }
        loop {
            match self.inner.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    self.inner.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce failed: {e}"),
            }
        }
    }

    /// Sends a record whose header names are any bytes, which rust-rdkafka's
    /// `Header` (a `&str` name) cannot carry: through librdkafka's
    /// `rd_kafka_produceva`, as another client could write them.
    pub fn send_raw_headers(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        payload: &[u8],
        headers: &[(&[u8], &[u8])],
    ) {
        use rdkafka::bindings as rd;
        use std::ffi::{CStr, CString};
        let topic = CString::new(topic).unwrap();
        // SAFETY: every pointer handed to librdkafka lives until the call
        // returns, and the payload and key are copied (`RD_KAFKA_MSG_F_COPY`);
        // the headers list is librdkafka's own, which it takes on success and
        // which is destroyed here on failure.
        unsafe {
            let list = rd::rd_kafka_headers_new(headers.len());
            for (name, value) in headers {
                let added = rd::rd_kafka_header_add(
                    list,
                    name.as_ptr().cast(),
                    name.len() as isize,
                    value.as_ptr().cast(),
                    value.len() as isize,
                );
                assert_eq!(added, rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
            }
            let vu = |vtype, u| rd::rd_kafka_vu_t { vtype, u };
            let mem = |bytes: &[u8]| rd::rd_kafka_vu_s__bindgen_ty_1 {
                mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                    ptr: bytes.as_ptr().cast_mut().cast(),
                    size: bytes.len(),
                },
            };
            use rd::rd_kafka_vtype_t::*;
            let values = [
                vu(
                    RD_KAFKA_VTYPE_TOPIC,
                    rd::rd_kafka_vu_s__bindgen_ty_1 {
                        cstr: topic.as_ptr(),
                    },
                ),
                vu(
                    RD_KAFKA_VTYPE_PARTITION,
                    rd::rd_kafka_vu_s__bindgen_ty_1 {
                        // -1: librdkafka's `RD_KAFKA_PARTITION_UA`, the partitioner's choice.
                        i32_: partition.unwrap_or(-1),
                    },
                ),
                vu(RD_KAFKA_VTYPE_KEY, mem(key)),
                vu(RD_KAFKA_VTYPE_VALUE, mem(payload)),
                vu(
                    RD_KAFKA_VTYPE_MSGFLAGS,
                    rd::rd_kafka_vu_s__bindgen_ty_1 {
                        i: rd::RD_KAFKA_MSG_F_COPY,
                    },
                ),
                vu(
                    RD_KAFKA_VTYPE_HEADERS,
                    rd::rd_kafka_vu_s__bindgen_ty_1 { headers: list },
                ),
            ];
            let client = self.inner.client().native_ptr();
            let error = rd::rd_kafka_produceva(client, values.as_ptr(), values.len());
            if !error.is_null() {
                let text = CStr::from_ptr(rd::rd_kafka_error_string(error)).to_string_lossy();
                let text = text.into_owned();
                rd::rd_kafka_error_destroy(error);
                rd::rd_kafka_headers_destroy(list);
                panic!("produce failed: {text}");
            }
        }
    }

    pub fn send_json(&self, topic: &str, key: &str, value: &serde_json::Value) {
        self.send(
            topic,
            Some(key.as_bytes()),
            &serde_json::to_vec(value).unwrap(),
            &[],
        );
    }

    pub fn flush(&self) {
        self.inner.flush(Duration::from_secs(60)).unwrap();
    }
}

/// A record as a read_committed consumer sees it.
#[derive(Clone, Debug)]
pub struct Consumed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<String>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
}

impl From<&rdkafka::message::BorrowedMessage<'_>> for Consumed {
    fn from(message: &rdkafka::message::BorrowedMessage<'_>) -> Consumed {
        let headers = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_string(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Consumed {
            topic: message.topic().to_string(),
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp().to_millis(),
            key: message
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
        }
    }
}

impl Consumed {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(self.payload.as_deref().unwrap_or(b"null")).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads every partition of `topic` from the beginning (read_committed)
/// until `want` records arrived and then `settle` passed without more, or
/// `timeout` passed.
pub fn read_topic(topic: &str, want: usize, settle: Duration, timeout: Duration) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let deadline = Instant::now() + timeout;
    // The topic may not exist yet (the app creates its outputs).
    let partitions = loop {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let n = metadata
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len());
        if n > 0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p as i32, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut out = Vec::new();
    let mut last = Instant::now();
    while Instant::now() < deadline {
        if out.len() >= want && last.elapsed() >= settle {
            break;
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message.unwrap();
        last = Instant::now();
        out.push(Consumed::from(&message));
    }
    out
}

/// The number of partitions of `topic` (0 while it does not exist).
pub fn partition_count(topic: &str) -> i32 {
    partition_count_on(&plain_client(), topic)
}

/// [`partition_count`] through a client with `client`'s settings.
pub fn partition_count_on(client: &ClientConfig, topic: &str) -> i32 {
    let consumer: BaseConsumer = client.create().unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32)
}

/// Total records in `topic` (high watermarks), counting markers too.
/// nisshi 0.7.0 answers ListOffsets with the last batch's base offset + 1,
/// so there this is a lower bound (see [`Delivered`]).
pub fn topic_end_offsets(topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .create()
        .unwrap();
    (0..partition_count(topic))
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .sum()
}

/// `streamfold run` as a child process.
pub struct App {
    child: Option<Child>,
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

/// A process's peak resident set (VmHWM) so far, in MiB.
#[allow(dead_code)] // the benches' helper
pub fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

pub fn streamfold_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_streamfold"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl App {
    pub fn start(config: &AppConfig, log_dir: &Path) -> App {
        App::start_on(&broker().bootstrap, config, log_dir)
    }

    /// [`App::start`] against the broker at `bootstrap`.
    pub fn start_on(bootstrap: &str, config: &AppConfig, log_dir: &Path) -> App {
        let metrics_port = free_port();
        let log = log_dir.join(format!("{}-{}.log", config.instance, unique("run")));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(streamfold_binary());
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
            .arg(format!("127.0.0.1:{metrics_port}"))
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
            metrics_port,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Prometheus text from `/metrics`, or empty while it is not up.
    pub fn metrics_text(&self) -> String {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.metrics_port)) else {
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

    /// Sum of a metric over its label sets (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        parse_metric(&self.metrics_text(), name)
    }

    /// Waits until `condition` holds on the metric `name`.
    pub fn wait_metric(
        &self,
        name: &str,
        timeout: Duration,
        condition: impl Fn(f64) -> bool,
    ) -> f64 {
        self.wait_for_metric(
            name,
            timeout,
            |text| Some(parse_metric(text, name)),
            condition,
        )
    }

    /// Waits until the metric `name` is exported and `condition` holds on
    /// it; unlike [`App::wait_metric`], an absent metric never counts as 0.
    pub fn wait_metric_present(
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

    /// SIGTERM, then waits for a clean exit.
    pub fn stop(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(
                        status.success(),
                        "streamfold exited with {status} after SIGTERM; log:\n{}",
                        self.log_text()
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "streamfold did not stop within 60s; log:\n{}",
                    self.log_text()
                );
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

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
}

/// Sum of the samples of `name` in Prometheus text.
pub fn parse_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name)
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Sum of the samples of `name` in Prometheus text, or `None` when no
/// sample of it is there.
pub fn find_metric(text: &str, name: &str) -> Option<f64> {
    let samples: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name)
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum())
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

/// Per key: the values that arrived, in order.
pub fn by_key(records: &[Consumed]) -> BTreeMap<String, Vec<&Consumed>> {
    let mut out: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
    for r in records {
        out.entry(r.key.clone().unwrap_or_default())
            .or_default()
            .push(r);
    }
    out
}

/// What a `--txn-journal` file says: which transactions (`<run>:<seq>`)
/// began, committed and were aborted. A transaction that began and neither
/// committed nor aborted was open when its process died.
#[derive(Debug, Default)]
pub struct TxnJournal {
    pub begun: std::collections::BTreeSet<String>,
    /// Asked the broker to commit (`committed` follows once it answered).
    pub committing: std::collections::BTreeSet<String>,
    pub committed: std::collections::BTreeSet<String>,
    pub aborted: std::collections::BTreeSet<String>,
    /// Per transaction asked to commit: when, and the offsets it commits.
    pub offsets: BTreeMap<String, JournaledOffsets>,
    /// The group's committed offsets as each new task read them, and when.
    pub fetched: Vec<JournaledOffsets>,
}

/// A journal line's time (unix ms) and `(topic, partition) → offset`.
#[derive(Clone, Debug, Default)]
pub struct JournaledOffsets {
    pub at: u128,
    pub offsets: BTreeMap<(String, i32), i64>,
}

impl JournaledOffsets {
    fn parse(line: &str, words: std::str::SplitWhitespace<'_>) -> JournaledOffsets {
        let mut words = words;
        let at = words
            .next()
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("journal line `{line}` has no time"));
        let offsets = words
            .map(|word| {
                let mut parts = word.rsplitn(3, ':');
                let (offset, partition, topic) = (parts.next(), parts.next(), parts.next());
                match (topic, partition.map(str::parse), offset.map(str::parse)) {
                    (Some(topic), Some(Ok(partition)), Some(Ok(offset))) => {
                        ((topic.to_string(), partition), offset)
                    }
                    _ => panic!("journal line `{line}`: bad offset `{word}`"),
                }
            })
            .collect();
        JournaledOffsets { at, offsets }
    }
}

/// What became of a transaction in doubt at a kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Committed,
    NotCommitted,
    /// No new owner read the offsets of its partitions afterwards.
    Unknown,
}

impl TxnJournal {
    pub fn read(path: &Path) -> TxnJournal {
        let mut journal = TxnJournal::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(event), Some(label)) = (words.next(), words.next()) else {
                panic!("journal line `{line}`");
            };
            match event {
                "offsets" => {
                    let offsets = JournaledOffsets::parse(line, words);
                    journal.offsets.insert(label.to_string(), offsets);
                    continue;
                }
                "fetched" => {
                    journal.fetched.push(JournaledOffsets::parse(line, words));
                    continue;
                }
                _ => {}
            }
            let set = match event {
                "begin" => &mut journal.begun,
                "committing" => &mut journal.committing,
                "committed" => &mut journal.committed,
                "aborted" => &mut journal.aborted,
                other => panic!("unknown journal event `{other}`"),
            };
            assert!(
                set.insert(label.to_string()),
                "`{line}` twice in the journal"
            );
        }
        for label in journal.committed.iter().chain(&journal.aborted) {
            assert!(
                journal.begun.contains(label),
                "{label} ended without beginning"
            );
        }
        assert!(
            journal.committed.is_disjoint(&journal.aborted),
            "a transaction both committed and aborted"
        );
        journal
    }

    /// Began and did not commit: aborted, or open at a kill.
    pub fn uncommitted(&self) -> std::collections::BTreeSet<String> {
        self.begun.difference(&self.committed).cloned().collect()
    }

    /// Killed between asking the broker to commit and hearing back: it may
    /// have committed or not.
    pub fn in_doubt(&self) -> std::collections::BTreeSet<String> {
        self.committing
            .difference(&self.committed)
            .filter(|label| !self.aborted.contains(*label))
            .cloned()
            .collect()
    }

    /// The journals of several processes as one.
    pub fn merge(&mut self, other: TxnJournal) {
        self.begun.extend(other.begun);
        self.committing.extend(other.committing);
        self.committed.extend(other.committed);
        self.aborted.extend(other.aborted);
        self.offsets.extend(other.offsets);
        self.fetched.extend(other.fetched);
        self.fetched.sort_by_key(|f| f.at);
    }

    /// The fate of `label`, a transaction in doubt, told by the broker:
    /// the first owner of each of its partitions to read the group's
    /// committed offsets after it asked to commit resumed at or past its
    /// offsets (committed) or before them (not committed). Every
    /// transaction moves at least one offset (an input it consumed, or a
    /// changelog it wrote), so had it not committed, one of its partitions
    /// would show the older offset.
    pub fn fate(&self, label: &str) -> Fate {
        let Some(asked) = self.offsets.get(label) else {
            return Fate::Unknown;
        };
        let mut all_seen = true;
        for (partition, &offset) in &asked.offsets {
            let next = self
                .fetched
                .iter()
                .filter(|f| f.at >= asked.at)
                .find_map(|f| f.offsets.get(partition));
            match next {
                Some(&resumed) if resumed < offset => return Fate::NotCommitted,
                Some(_) => {}
                None => all_seen = false,
            }
        }
        if all_seen && !asked.offsets.is_empty() {
            Fate::Committed
        } else {
            Fate::Unknown
        }
    }

    /// The transactions that committed: those the journal saw commit, and
    /// those in doubt at a kill whose fate the broker's answer tells was a
    /// commit ([`Self::fate`]). One whose fate no later owner's offsets
    /// tell (a fenced process stopped in its commit) is left out: a judge
    /// counting only these fails if its records were the only copy, and
    /// names it with [`Self::describe`].
    pub fn committed_or_resolved(&self) -> std::collections::BTreeSet<String> {
        let mut committed = self.committed.clone();
        committed.extend(
            self.in_doubt()
                .into_iter()
                .filter(|label| self.fate(label) == Fate::Committed),
        );
        committed
    }

    /// What the journal tells of `label`, for a failure message.
    pub fn describe(&self, label: &str) -> String {
        if self.committed.contains(label) {
            "committed".into()
        } else if self.aborted.contains(label) {
            "aborted".into()
        } else if self.committing.contains(label) {
            format!("in doubt at a kill, {:?}", self.fate(label))
        } else if self.begun.contains(label) {
            "open at a kill".into()
        } else {
            "not in the journal".into()
        }
    }

    /// Began, and neither committed nor aborted.
    pub fn open_at_kill(&self) -> std::collections::BTreeSet<String> {
        self.uncommitted()
            .difference(&self.aborted)
            .cloned()
            .collect()
    }
}

/// The offsets `group` committed on each partition of `topic` (-1: none).
pub fn group_committed(group: &str, topic: &str, partitions: usize) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p as i32);
    }
    let Ok(committed) = consumer.committed_offsets(list, Duration::from_secs(10)) else {
        return vec![-1; partitions];
    };
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

/// Waits until `group` has committed `topic` up to `end` (per partition),
/// checking `app` is alive meanwhile.
pub fn wait_committed_to(app: &App, group: &str, topic: &str, end: &[i64], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let committed = group_committed(group, topic, end.len());
        if committed
            .iter()
            .zip(end)
            .all(|(c, e)| *c == *e || *e == 0 && *c == -1)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{group} committed {committed:?} of {topic}, whose end is {end:?}, within {timeout:?}; log:\n{}",
            app.log_text()
        );
        app.assert_running();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every record of `topic` (read_committed). Call it once nothing writes
/// the topic any more: the read of each partition ends when the consumer
/// reaches its end (end-of-partition from the fetch responses), not after
/// a quiet period.
pub fn read_to_end(topic: &str, timeout: Duration) -> Vec<Consumed> {
    read_to_end_on(&plain_client(), topic, timeout)
}

/// [`read_to_end`] through a client with `client`'s settings.
pub fn read_to_end_on(client: &ClientConfig, topic: &str, timeout: Duration) -> Vec<Consumed> {
    let partitions = partition_count_on(client, topic);
    let consumer: BaseConsumer = client
        .clone()
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut done: Vec<bool> = vec![false; partitions as usize];
    let mut out = Vec::new();
    let deadline = Instant::now() + timeout;
    while done.iter().any(|d| !d) {
        assert!(
            Instant::now() < deadline,
            "{topic}: partitions {done:?} not read to their ends within {timeout:?}"
        );
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            // EOF comes once the fetch reached the partition's last stable
            // offset; nothing writes the topic any more, so that is the
            // end it had when the read began (transaction markers
            // included, which no record reports).
            Some(Err(KafkaError::PartitionEOF(p))) => {
                done[p as usize] = true;
                continue;
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(m)) => m,
        };
        out.push(Consumed::from(&message));
    }
    out
}

/// An admin client of the test broker, with a runtime to wait on its
/// requests and options giving each 10 s.
pub struct Admin {
    pub client: AdminClient<DefaultClientContext>,
    pub runtime: tokio::runtime::Runtime,
    pub options: AdminOptions,
}

pub fn admin() -> Admin {
    Admin {
        client: plain_client().create().unwrap(),
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        options: AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    }
}

/// Deletes a consumer group and its committed offsets, as an operator
/// would (or as `offsets.retention.minutes` does for an idle group).
pub fn delete_group(group: &str) {
    let admin = admin();
    let results = admin
        .runtime
        .block_on(admin.client.delete_groups(&[group], &admin.options))
        .unwrap();
    for r in results {
        if let Err((n, code)) = r {
            panic!("cannot delete group {n}: {code}");
        }
    }
}

/// The high watermark of one partition.
pub fn partition_end(topic: &str, partition: i32) -> i64 {
    let consumer: BaseConsumer = plain_client().create().unwrap();
    consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .unwrap()
        .1
}

/// Deletes the records of `topic`'s partitions below `before[p]`
/// (DeleteRecords), as an operator or retention would.
pub fn delete_records(topic: &str, before: &[i64]) {
    let admin = admin();
    let mut list = TopicPartitionList::new();
    for (p, offset) in before.iter().enumerate() {
        list.add_partition_offset(topic, p as i32, Offset::Offset(*offset))
            .unwrap();
    }
    let result = admin
        .runtime
        .block_on(admin.client.delete_records(&list, &admin.options))
        .unwrap();
    for element in result.elements() {
        if let Err(e) = element.error() {
            panic!("cannot delete records of {topic}: {e}");
        }
    }
    let consumer: BaseConsumer = plain_client().create().unwrap();
    for (p, offset) in before.iter().enumerate() {
        let (low, _) = consumer
            .fetch_watermarks(topic, p as i32, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            low, *offset,
            "{topic} partition {p} starts where it was truncated"
        );
    }
}

/// Deletes `topic` and waits until the broker no longer lists it.
pub fn delete_topic(name: &str) {
    let admin = admin();
    let results = admin
        .runtime
        .block_on(admin.client.delete_topics(&[name], &admin.options))
        .unwrap();
    for r in results {
        if let Err((n, code)) = r {
            panic!("cannot delete {n}: {code}");
        }
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .map(|m| m.topics().iter().any(|t| t.name() == name))
            .unwrap_or(true);
        if !listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} still exists after deletion"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A read_committed reader of every partition of a topic from the
/// beginning, to follow what an application writes while it runs.
pub struct Follower {
    consumer: BaseConsumer,
    pub records: Vec<Consumed>,
}

impl Follower {
    pub fn new(topic: &str, partitions: i32) -> Follower {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &broker().bootstrap)
            .set("group.id", unique("follower"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        Follower {
            consumer,
            records: Vec::new(),
        }
    }

    /// Reads what arrived within `wait`.
    pub fn poll(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while let Some(message) = self
            .consumer
            .poll(deadline.saturating_duration_since(Instant::now()))
        {
            let Ok(message) = message else { continue };
            self.records.push(Consumed::from(&message));
            if Instant::now() >= deadline {
                break;
            }
        }
    }
}

/// Every sample of `name` in Prometheus text: its labels and value. Label
/// values are unescaped (`\"`, `\\`, `\n`).
pub fn series(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, labels) = match series.split_once('{') {
            Some((metric, rest)) => (metric, rest.strip_suffix('}').unwrap_or(rest)),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        out.push((parse_labels(labels), value));
    }
    out
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

// ---------------------------------------------------------------------------
// A broker that requires SASL/SCRAM over TLS (tests/security.rs).
//
// nisshi 0.7.0 takes `--authentication` (SCRAM users) and `--cert/--key`
// (a TLS-only listener), but `nisshi user create` speaks plaintext and
// sends an unauthenticated AlterUserScramCredentials, which an
// authenticating broker refuses; and the in-memory storage keeps no SCRAM
// credentials at all. So the user is created on a plaintext broker over a
// SQLite file, which then stops, and the secured broker starts on the same
// file. The CA and the broker's certificate are made here, at test time.
// ---------------------------------------------------------------------------

/// A nisshi that accepts only SASL/SCRAM-SHA-512 over TLS.
pub struct SecureBroker {
    /// `127.0.0.1:<port>`: the broker's certificate names `127.0.0.1` and
    /// `localhost`.
    pub bootstrap: String,
    pub username: String,
    /// Distinctive, so a test can look for it anywhere.
    pub password: String,
    /// PEM of the CA that signed the broker's certificate.
    pub ca: PathBuf,
    /// PEM of another CA, which signed nothing the broker shows.
    pub other_ca: PathBuf,
    _dir: tempfile::TempDir,
    _watchdog: Mutex<Child>,
}

static SECURE_BROKER: OnceLock<SecureBroker> = OnceLock::new();

/// The secured broker of this test binary, started on first use.
pub fn secure_broker() -> &'static SecureBroker {
    SECURE_BROKER.get_or_init(start_secure_broker)
}

/// Whether a nisshi binary is there to start (the secured broker is always
/// one of ours, even when `STREAMFOLD_TEST_BOOTSTRAP` names another broker
/// for the other tests).
pub fn nisshi_available() -> bool {
    let binary = nisshi_binary();
    binary.is_absolute() && binary.exists()
        || Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

impl SecureBroker {
    /// Client settings that pass: SASL_SSL, SCRAM-SHA-512, the right CA.
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap)
            .set("security.protocol", "sasl_ssl")
            .set("sasl.mechanisms", "SCRAM-SHA-512")
            .set("sasl.username", &self.username)
            .set("sasl.password", &self.password)
            .set("ssl.ca.location", self.ca.display().to_string());
        config
    }

    /// The environment a secured topology (see [`secured_topology`]) reads
    /// its servers and credentials from.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("KAFKA_BOOTSTRAP_SERVERS".into(), self.bootstrap.clone()),
            ("KAFKA_USERNAME".into(), self.username.clone()),
            ("KAFKA_PASSWORD".into(), self.password.clone()),
            ("KAFKA_CA".into(), self.ca.display().to_string()),
        ]
    }
}

/// The text of `topology` (a file under the repository) with a
/// `kafka.security` section that takes its credentials from
/// `${KAFKA_USERNAME}`, `${KAFKA_PASSWORD}` and `${KAFKA_CA}`, written to
/// `dir`; returns its path.
pub fn secured_topology(topology: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join(topology)).unwrap();
    let security = "kafka:
  security:
    protocol: sasl_ssl
    sasl:
      mechanism: SCRAM-SHA-512
      username: ${KAFKA_USERNAME}
      password: ${KAFKA_PASSWORD}
    tls:
      ca: ${KAFKA_CA}
";
    assert!(
        text.contains("\nkafka:\n"),
        "{topology} has a kafka section"
    );
    let secured = text.replacen("\nkafka:\n", &format!("\n{security}"), 1);
    let path = dir.join(format!(
        "secured-{}",
        Path::new(topology).file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, secured).unwrap();
    path
}

fn start_secure_broker() -> SecureBroker {
    let dir = temp_dir();
    let certificates = TestCertificates::new();
    let ca = dir.path().join("ca.pem");
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&ca, &certificates.ca).unwrap();
    std::fs::write(&other_ca, &certificates.other_ca).unwrap();
    std::fs::write(dir.path().join("broker.pem"), &certificates.broker).unwrap();
    std::fs::write(dir.path().join("broker.key"), &certificates.broker_key).unwrap();
    let username = unique("streamfold");
    let password = format!(
        "pw-{}-{}",
        unique("x").trim_start_matches("x-"),
        unique("y").trim_start_matches("y-")
    );
    let storage = "sqlite://nisshi.db";

    // The user, made on a plaintext broker over the same storage.
    {
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let broker = KillOnDrop(
            Command::new(nisshi_binary())
                .args([
                    "broker",
                    "--listener-url",
                    &url,
                    "--advertised-listener-url",
                    &url,
                ])
                .args(["--storage-engine", storage, "--silent"])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nisshi starts (run scripts/install-nisshi.sh)"),
        );
        wait_for_broker(&format!("127.0.0.1:{port}"));
        let created = Command::new(nisshi_binary())
            .args(["user", "create", &username, &password, "--broker", &url])
            .args(["--mechanism", "scram512"])
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "nisshi user create: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        drop(broker);
    }

    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let script = format!(
        "{nisshi} broker --listener-url {url} --advertised-listener-url {url} \
         --storage-engine {storage} --authentication --cert broker.pem --key broker.key \
         --group-initial-rebalance-delay 0s --silent & \
         child=$!; \
         while kill -0 {parent} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done; \
         kill $child 2>/dev/null",
        nisshi = nisshi_binary().display(),
        parent = std::process::id(),
    );
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nisshi starts");
    let broker = SecureBroker {
        bootstrap: format!("127.0.0.1:{port}"),
        username,
        password,
        ca,
        other_ca,
        _dir: dir,
        _watchdog: Mutex::new(watchdog),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let consumer: BaseConsumer = broker.client().create().unwrap();
        if consumer
            .fetch_metadata(None, Duration::from_secs(2))
            .is_ok()
        {
            return broker;
        }
        assert!(
            Instant::now() < deadline,
            "the secured broker at {} did not answer within 30s",
            broker.bootstrap
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A child process killed when this goes out of scope, even on a panic.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// PEM texts: a CA, a broker certificate it signed for `127.0.0.1` and
/// `localhost` with the broker's key (PKCS#8), and an unrelated CA.
struct TestCertificates {
    ca: Vec<u8>,
    broker: Vec<u8>,
    broker_key: Vec<u8>,
    other_ca: Vec<u8>,
}

impl TestCertificates {
    fn new() -> TestCertificates {
        use openssl::asn1::Asn1Time;
        use openssl::bn::{BigNum, MsbOption};
        use openssl::ec::{EcGroup, EcKey};
        use openssl::hash::MessageDigest;
        use openssl::nid::Nid;
        use openssl::pkey::{PKey, Private};
        use openssl::x509::extension::{
            BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
        };
        use openssl::x509::{X509, X509NameBuilder};

        fn key() -> PKey<Private> {
            let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
            PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
        }
        fn certificate(
            name: &str,
            key: &PKey<Private>,
            issuer: Option<(&X509, &PKey<Private>)>,
        ) -> X509 {
            let mut subject = X509NameBuilder::new().unwrap();
            subject.append_entry_by_nid(Nid::COMMONNAME, name).unwrap();
            let subject = subject.build();
            let mut builder = X509::builder().unwrap();
            builder.set_version(2).unwrap();
            let mut serial = BigNum::new().unwrap();
            serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
            builder
                .set_serial_number(&serial.to_asn1_integer().unwrap())
                .unwrap();
            builder.set_subject_name(&subject).unwrap();
            builder.set_pubkey(key).unwrap();
            builder
                .set_not_before(&Asn1Time::days_from_now(0).unwrap())
                .unwrap();
            builder
                .set_not_after(&Asn1Time::days_from_now(2).unwrap())
                .unwrap();
            match issuer {
                None => {
                    builder.set_issuer_name(&subject).unwrap();
                    builder
                        .append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                        .unwrap();
                    builder
                        .append_extension(
                            KeyUsage::new()
                                .critical()
                                .key_cert_sign()
                                .crl_sign()
                                .build()
                                .unwrap(),
                        )
                        .unwrap();
                    builder.sign(key, MessageDigest::sha256()).unwrap();
                }
                Some((ca, ca_key)) => {
                    builder.set_issuer_name(ca.subject_name()).unwrap();
                    builder
                        .append_extension(BasicConstraints::new().build().unwrap())
                        .unwrap();
                    builder
                        .append_extension(
                            KeyUsage::new()
                                .critical()
                                .digital_signature()
                                .key_agreement()
                                .build()
                                .unwrap(),
                        )
                        .unwrap();
                    builder
                        .append_extension(ExtendedKeyUsage::new().server_auth().build().unwrap())
                        .unwrap();
                    let san = SubjectAlternativeName::new()
                        .dns("localhost")
                        .ip("127.0.0.1")
                        .build(&builder.x509v3_context(Some(ca), None))
                        .unwrap();
                    builder.append_extension(san).unwrap();
                    builder.sign(ca_key, MessageDigest::sha256()).unwrap();
                }
            }
            builder.build()
        }

        let ca_key = key();
        let ca = certificate("streamfold test CA", &ca_key, None);
        let broker_key = key();
        let broker = certificate("localhost", &broker_key, Some((&ca, &ca_key)));
        let other_key = key();
        let other_ca = certificate("streamfold other CA", &other_key, None);
        TestCertificates {
            ca: ca.to_pem().unwrap(),
            broker: broker.to_pem().unwrap(),
            broker_key: broker_key.private_key_to_pem_pkcs8().unwrap(),
            other_ca: other_ca.to_pem().unwrap(),
        }
    }
}

/// Every store's contents in a stopped application's state directory
/// (`<state_dir>/<app>/<task>`): `"<task>/<store>"` → key → value, read straight from RocksDB (each
/// task's column families but the default one, which holds only the
/// runtime's metadata: changelog offsets, event time).
pub type StateDump = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

pub fn dump_state(state_dir: &Path, app: &str) -> StateDump {
    let mut dump = StateDump::new();
    let Ok(tasks) = std::fs::read_dir(state_dir.join(app)) else {
        return dump;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = task.file_name().to_string_lossy().to_string();
        let options = rocksdb::Options::default();
        let Ok(families) = rocksdb::DB::list_cf(&options, &path) else {
            continue;
        };
        let db = rocksdb::DB::open_cf_for_read_only(&options, &path, &families, false)
            .unwrap_or_else(|e| panic!("cannot open the state at {}: {e}", path.display()));
        for family in families
            .iter()
            .filter(|f| *f != rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
        {
            let cf = db.cf_handle(family).unwrap();
            let entries: BTreeMap<Vec<u8>, Vec<u8>> = db
                .iterator_cf(cf, rocksdb::IteratorMode::Start)
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            if !entries.is_empty() {
                dump.insert(format!("{name}/{family}"), entries);
            }
        }
    }
    dump
}

/// Fails, naming the first differences, unless `restored` holds exactly
/// what `live` holds (callers check `live` is not empty where it must
/// hold something, so the comparison is not vacuous).
pub fn assert_same_state(live: &StateDump, restored: &StateDump, what: &str) {
    let mut differences = Vec::new();
    let stores: std::collections::BTreeSet<&String> = live.keys().chain(restored.keys()).collect();
    let empty = BTreeMap::new();
    for store in stores {
        let a = live.get(store).unwrap_or(&empty);
        let b = restored.get(store).unwrap_or(&empty);
        for key in a
            .keys()
            .chain(b.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let (x, y) = (a.get(key), b.get(key));
            if x != y {
                let show = |v: Option<&Vec<u8>>| {
                    v.map_or("(absent)".to_string(), |v| {
                        String::from_utf8_lossy(v).to_string()
                    })
                };
                differences.push(format!(
                    "{store} {:?}: live {} / restored {}",
                    String::from_utf8_lossy(key),
                    show(x),
                    show(y)
                ));
            }
        }
    }
    let keys: usize = live.values().map(BTreeMap::len).sum();
    assert!(
        differences.is_empty(),
        "{what}: a from-scratch restore does not reproduce the state ({} differences over {keys} live keys), first ones:\n{}",
        differences.len(),
        differences
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
