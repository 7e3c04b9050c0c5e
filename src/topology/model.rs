//! The topology file format: what a user writes in `topology.yaml`.
//!
//! These are plain serde types with a doc comment on every field; `streamfold
//! schema` prints them as JSON Schema. The loader ([`super::load`]) reads
//! each section separately so every mistake in a file is reported at once.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::queries::{QueriesConfig, QueryTlsConfig};
use crate::config::types::{HumanBytes, HumanDuration, Inputs, JsonPointer};
use crate::operators::registry::NodeKind;
use crate::secrets::Secret;
use crate::state::rocks::RocksResources;

/// A streamfold topology: where records come from, what happens to them,
/// and where they go.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct TopologyFile {
    /// Application id. Names the consumer group, the transactional id prefix
    /// and every internal topic (`<name>-<store>-changelog`). Letters, digits,
    /// `.`, `_` and `-`.
    pub(crate) name: String,
    /// Free text shown by `streamfold describe`.
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// How to reach Kafka.
    pub(crate) kafka: KafkaConfig,
    /// Delivery guarantee, commit cadence and local state.
    #[serde(default)]
    pub(crate) processing: ProcessingConfig,
    /// Input topics, by name.
    pub(crate) sources: BTreeMap<String, SourceConfig>,
    /// Operators, by name. Each reads from `input` (a source or node).
    #[serde(default)]
    pub(crate) nodes: BTreeMap<String, NodeConfig>,
    /// Output topics, by name. Each writes what its `input` emits.
    pub(crate) sinks: BTreeMap<String, SinkConfig>,
    /// Where records that cannot be processed go, with the reason in their
    /// headers. Defaults to the topic `<name>-dlq`.
    #[serde(default)]
    pub(crate) dead_letter: Option<DeadLetterConfig>,
    /// The Confluent-compatible schema registry behind `avro` sources and
    /// sinks. Required when any of them uses Avro.
    #[serde(default)]
    pub(crate) schema_registry: Option<SchemaRegistryConfig>,
    /// Memory and open files of the local state, for the whole instance.
    #[serde(default)]
    pub(crate) state: StateConfig,
    /// Interactive queries: serve the stores' committed state over HTTP
    /// (see docs/queries.md). Off unless `addr` or `run --query-addr` is
    /// set.
    #[serde(default)]
    pub(crate) queries: Option<QueriesConfig>,
}

/// Connection to Kafka. Values may use `${VAR}` or `${VAR:-default}`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list (librdkafka `bootstrap.servers`).
    pub(crate) bootstrap_servers: String,
    /// Authentication (SASL) and encryption (TLS) of the connection. Its
    /// passwords are shown as `***` and masked in logs and errors.
    #[serde(default)]
    pub security: Option<super::security::SecurityConfig>,
    /// Any librdkafka property for every client (consumer, producer, admin),
    /// for what `security` does not cover (`ssl.key.pem`, ...); `check`
    /// has librdkafka validate them.
    /// Values of credential properties (`sasl.password`, ...) are masked
    /// like `security`'s passwords.
    #[serde(default)]
    pub(crate) properties: BTreeMap<String, String>,
    /// librdkafka properties for the consumer only (`fetch.max.bytes`, ...).
    #[serde(default)]
    pub(crate) consumer: BTreeMap<String, String>,
    /// librdkafka properties for the producer only (`linger.ms`, ...).
    #[serde(default)]
    pub(crate) producer: BTreeMap<String, String>,
    /// Use static group membership (`group.instance.id` = the instance id),
    /// so a restarted instance gets its partitions back without waiting
    /// for a rebalance (it then rejoins once; see `EngineContext::rejoin_once`).
    #[serde(default)]
    pub(crate) static_membership: bool,
    /// `true` (default): when a source topic does not exist yet, `run`
    /// waits for it to be created, logging the missing topics every 10 s
    /// and exporting their number as `streamfold_runtime_missing_source_topics`.
    /// `false`: a missing source topic stops `run` at once.
    #[serde(default = "default_wait_for_sources")]
    pub(crate) wait_for_sources: bool,
    /// Replication of the topics `run` creates for the topology (state
    /// changelogs, repartition topics, the dead-letter topic, and sinks
    /// with `create: true`). Unset: the broker's defaults.
    #[serde(default)]
    pub(crate) internal_topics: InternalTopicsConfig,
}

fn default_wait_for_sources() -> bool {
    true
}

/// How the topics `run` creates are replicated. In production set
/// `replication_factor: 3` and `min_insync_replicas: 2`: a changelog is the
/// only durable copy of a task's state, and with the transactional
/// producer's `acks=all` a commit then survives the loss of any one broker
/// while one broker may be down for maintenance.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct InternalTopicsConfig {
    /// Replicas of each created topic. Default: the broker's
    /// `default.replication.factor`. Applies when a topic is created;
    /// an existing topic keeps its replicas.
    #[serde(default)]
    pub(crate) replication_factor: Option<std::num::NonZeroU16>,
    /// `min.insync.replicas` of each created topic: the replicas that must
    /// have a record before a write (and so a commit) succeeds. Default:
    /// the broker's `min.insync.replicas`. At most `replication_factor`.
    #[serde(default)]
    pub(crate) min_insync_replicas: Option<std::num::NonZeroU16>,
}

impl InternalTopicsConfig {
    /// Settings that contradict each other: `(field, message)`.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        match (self.replication_factor, self.min_insync_replicas) {
            (Some(replicas), Some(min)) if min > replicas => vec![(
                "min_insync_replicas",
                format!(
                    "{min} in-sync replicas cannot be required of {replicas} replicas (replication_factor); no write would ever succeed"
                ),
            )],
            _ => Vec::new(),
        }
    }
}

pub(crate) use crate::record::DEFAULT_MESSAGE_MAX_BYTES;

impl KafkaConfig {
    /// The producer's `message.max.bytes`: from `producer`, else
    /// `properties`, else librdkafka's default. A value that is not a
    /// number is librdkafka's to reject when the producer starts.
    pub(crate) fn max_record_bytes(&self) -> usize {
        self.producer
            .get("message.max.bytes")
            .or_else(|| self.properties.get("message.max.bytes"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES)
    }
}

/// A Confluent-compatible schema registry (Confluent Schema Registry,
/// Karapace, Redpanda, Apicurio in Confluent mode). Values may use `${VAR}`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct SchemaRegistryConfig {
    /// Base URL, such as `http://schema-registry:8081`. Several URLs,
    /// comma-separated, are tried in order.
    pub url: String,
    /// Basic-auth user name (on Confluent Cloud, the API key). Empty means
    /// no authentication, so `${SCHEMA_REGISTRY_USERNAME:-}` may leave it
    /// unset.
    #[serde(default)]
    pub username: Option<String>,
    /// Basic-auth password (on Confluent Cloud, the API secret); write
    /// `${VAR}`. Requires `username`. Shown as `***` and masked in logs
    /// and errors.
    #[serde(default)]
    pub password: Option<Secret>,
}

impl SchemaRegistryConfig {
    /// The URLs and the user, the password as `***`: what `check` and
    /// `describe` show.
    pub fn summary(&self) -> String {
        let mut out = self.url.clone();
        if let Some(user) = self.username.as_deref().filter(|u| !u.is_empty()) {
            out.push_str(&format!(" as user `{user}`"));
            if self.password.as_ref().is_some_and(|p| !p.is_empty()) {
                out.push_str(&format!(" (password {})", crate::secrets::MASK));
            }
        }
        out
    }

    /// Problems with these settings, as (field, message).
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for url in self.url.split(',').map(str::trim) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                out.push((
                    "url",
                    format!("`{url}` is not an http(s) URL such as `http://schema-registry:8081`"),
                ));
            }
        }
        let username_set = self.username.as_deref().is_some_and(|v| !v.is_empty());
        let password_set = self.password.as_ref().is_some_and(|p| !p.is_empty());
        if password_set && !username_set {
            out.push(("password", "`password` needs `username`".to_string()));
        }
        out
    }
}

/// Delivery guarantee.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Guarantee {
    /// Outputs, state changelogs, dead letters and consumer offsets are
    /// committed in one Kafka transaction.
    #[default]
    ExactlyOnce,
    /// Offsets are committed after outputs are acknowledged; a crash may
    /// repeat outputs.
    AtLeastOnce,
}

/// How records are processed and committed.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct ProcessingConfig {
    /// `exactly_once` (default) or `at_least_once`.
    #[serde(default)]
    pub(crate) guarantee: Guarantee,
    /// How often to commit. Defaults to 100ms under exactly_once (the Kafka
    /// Streams default) and 5s under at_least_once.
    #[serde(default)]
    pub(crate) commit_interval: Option<HumanDuration>,
    /// Directory for local state (one RocksDB per task under
    /// `<state_dir>/<name>/<task>/`).
    #[serde(default = "default_state_dir")]
    pub(crate) state_dir: PathBuf,
    /// How often wall-clock (`processing`) timers are checked, so a fold
    /// closes when its key goes quiet even with no new input.
    #[serde(default = "default_punctuation_interval")]
    pub punctuation_interval: HumanDuration,
    /// Kafka transaction timeout (`transaction.timeout.ms`).
    #[serde(default = "default_transaction_timeout")]
    pub(crate) transaction_timeout: HumanDuration,
    /// Retries of external failures (a schema registry that does not
    /// answer while a record is decoded), for sources without their own.
    #[serde(default)]
    pub(crate) retry: RetryConfig,
    /// For `clock: event` operators: once a task has seen no record for
    /// this long (wall clock), its event time moves forward with the wall
    /// clock, so an idle partition still closes its event-time folds and
    /// windows. Unset: event time moves only with records.
    #[serde(default)]
    pub(crate) idle_advance: Option<HumanDuration>,
    /// Threads that process records: each task runs on one thread at a
    /// time, in offset order, and the tasks of an instance spread over
    /// them. Unset: the number of cores.
    #[serde(default)]
    pub(crate) threads: Option<usize>,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("./streamfold-state")
}

fn default_punctuation_interval() -> HumanDuration {
    HumanDuration::from_millis(250)
}

fn default_transaction_timeout() -> HumanDuration {
    HumanDuration::from_secs(60)
}

impl Default for ProcessingConfig {
    fn default() -> Self {
        ProcessingConfig {
            guarantee: Guarantee::default(),
            commit_interval: None,
            state_dir: default_state_dir(),
            punctuation_interval: default_punctuation_interval(),
            transaction_timeout: default_transaction_timeout(),
            retry: RetryConfig::default(),
            idle_advance: None,
            threads: None,
        }
    }
}

impl ProcessingConfig {
    /// Problems with these settings, as (field, message). The retry
    /// settings are checked with the sources' ([`RetryConfig::problems`]).
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        [
            ("commit_interval", self.commit_interval()),
            ("punctuation_interval", self.punctuation_interval),
            ("transaction_timeout", self.transaction_timeout),
        ]
        .into_iter()
        .filter(|(_, value)| value.under_a_millisecond())
        .map(|(field, _)| (field, "must be at least 1ms".to_string()))
        .chain((self.threads == Some(0)).then(|| ("threads", "must be at least 1".to_string())))
        .collect()
    }

    /// How many threads process records: `threads`, or the number of
    /// cores.
    pub(crate) fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    pub(crate) fn commit_interval(&self) -> HumanDuration {
        self.commit_interval.unwrap_or(match self.guarantee {
            Guarantee::ExactlyOnce => HumanDuration::from_millis(100),
            Guarantee::AtLeastOnce => HumanDuration::from_secs(5),
        })
    }
}

/// How much memory and how many files the local state of one instance may
/// use. RocksDB's block cache and write buffers are shared by every store
/// of every task of the instance (the bounded-memory setup Kafka Streams
/// documents for its `RocksDBConfigSetter`), so they do not grow with the
/// number of partitions or keys; nor does the record cache of decoded
/// entries (`record_cache`), shared evenly by every cached store of every
/// task.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct StateConfig {
    /// RocksDB's block cache: data, index and filter blocks of every store,
    /// one LRU cache for the instance.
    #[serde(default = "default_block_cache")]
    pub(crate) block_cache: HumanBytes,
    /// RocksDB's write buffers (memtables) of every store together: when
    /// they reach this much, the largest is flushed to disk.
    #[serde(default = "default_write_buffers")]
    pub(crate) write_buffers: HumanBytes,
    /// Files each task's database keeps open (RocksDB `max_open_files`).
    #[serde(default = "default_max_open_files")]
    pub(crate) max_open_files: u32,
    /// The record cache: committed entries kept decoded in memory between
    /// commits, a read cache over RocksDB, for every store of every task
    /// together (each cached store gets an equal share; an entry is
    /// counted at an estimate of its decoded size). Pending writes are
    /// kept whatever the bound. `0` caches nothing.
    #[serde(default = "default_record_cache")]
    pub(crate) record_cache: HumanBytes,
    /// At most this many committed entries cached per store of a task,
    /// whatever their size.
    #[serde(default = "default_cache_entries")]
    pub(crate) cache_entries: usize,
}

fn default_record_cache() -> HumanBytes {
    HumanBytes::mib(64)
}

fn default_block_cache() -> HumanBytes {
    HumanBytes(RocksResources::BLOCK_CACHE as u64)
}

fn default_write_buffers() -> HumanBytes {
    HumanBytes(RocksResources::WRITE_BUFFERS as u64)
}

fn default_max_open_files() -> u32 {
    RocksResources::MAX_OPEN_FILES
}

fn default_cache_entries() -> usize {
    crate::state::StateSet::CACHE_ENTRIES
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            block_cache: default_block_cache(),
            write_buffers: default_write_buffers(),
            max_open_files: default_max_open_files(),
            record_cache: default_record_cache(),
            cache_entries: default_cache_entries(),
        }
    }
}

impl StateConfig {
    /// Problems with these settings, as (field, message).
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        // RocksDB shards its cache in 64 parts of at least 512 KiB each
        // under 32 MiB; a write buffer budget smaller than one memtable
        // block flushes after every write.
        for (field, size) in [
            ("block_cache", self.block_cache),
            ("write_buffers", self.write_buffers),
        ] {
            if size < HumanBytes::mib(1) {
                problems.push((field, format!("{size} is too small: at least 1MiB")));
            }
        }
        // RocksDB keeps a few files open itself (the WAL, the manifest, the
        // info log) and needs room for each level.
        if self.max_open_files < 16 {
            problems.push(("max_open_files", "must be at least 16".to_string()));
        }
        problems
    }
}

/// Retries with exponential backoff for failures of the outside world. A
/// record that still fails goes to the dead-letter topic with class
/// `external` and the number of attempts; `streamfold dlq replay` sends it
/// back once the cause is fixed.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct RetryConfig {
    /// Attempts in all, the first included (1: no retry).
    #[serde(default = "default_max_attempts")]
    pub(crate) max_attempts: NonZeroU32,
    /// Wait before the second attempt.
    #[serde(default = "default_initial_backoff")]
    pub(crate) initial_backoff: HumanDuration,
    /// Longest wait between two attempts.
    #[serde(default = "default_max_backoff")]
    pub(crate) max_backoff: HumanDuration,
    /// Factor applied to the wait after each attempt (at least 1).
    #[serde(default = "default_multiplier")]
    pub(crate) multiplier: f64,
    /// Random share of each wait added or removed, 0 to 1, so instances do
    /// not retry in step.
    #[serde(default = "default_jitter")]
    pub(crate) jitter: f64,
}

fn default_max_attempts() -> NonZeroU32 {
    NonZeroU32::new(4).unwrap_or(NonZeroU32::MIN)
}

fn default_initial_backoff() -> HumanDuration {
    HumanDuration::from_millis(100)
}

fn default_max_backoff() -> HumanDuration {
    HumanDuration::from_secs(2)
}

fn default_multiplier() -> f64 {
    2.0
}

fn default_jitter() -> f64 {
    0.2
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: default_max_attempts(),
            initial_backoff: default_initial_backoff(),
            max_backoff: default_max_backoff(),
            multiplier: default_multiplier(),
            jitter: default_jitter(),
        }
    }
}

impl RetryConfig {
    /// The longest the retries of one record can take, saturating at
    /// `Duration::MAX`. Settings [`Self::problems`] rejects (a jitter or
    /// multiplier that is not a number) count as their worst.
    pub(crate) fn worst_case(&self) -> Duration {
        let jitter = if self.jitter.is_nan() {
            1.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        // `f64::max` ignores NaN, so a NaN multiplier counts as 1.
        let multiplier = self.multiplier.max(1.0);
        let max_backoff = self.max_backoff.0.as_secs_f64();
        let wait_of = |seconds: f64| {
            Duration::try_from_secs_f64(seconds.min(max_backoff) * (1.0 + jitter))
                .unwrap_or(Duration::MAX)
        };
        let mut total = Duration::ZERO;
        let mut wait = self.initial_backoff.0.as_secs_f64();
        let retries = self.max_attempts.get() - 1;
        for done in 0..retries {
            if wait >= max_backoff {
                // Every wait from here on is the capped one.
                let capped = wait_of(wait)
                    .checked_mul(retries - done)
                    .unwrap_or(Duration::MAX);
                return total.saturating_add(capped);
            }
            total = total.saturating_add(wait_of(wait));
            wait *= multiplier;
        }
        total
    }

    /// Why these retries cannot run within a transaction of `timeout`:
    /// they block processing, so they must end well within it.
    pub(crate) fn timeout_problem(&self, timeout: Duration) -> Option<String> {
        let worst = self.worst_case();
        (worst > timeout / 2).then(|| {
            format!(
                "these retries can take {} per record, more than half the transaction timeout ({}); lower `max_attempts` or `max_backoff`",
                HumanDuration(Duration::from_millis(worst.as_millis() as u64)),
                HumanDuration(timeout)
            )
        })
    }

    /// Problems with these settings, as (field, message).
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(self.multiplier >= 1.0 && self.multiplier.is_finite()) {
            out.push((
                "multiplier",
                format!("must be at least 1, found {}", self.multiplier),
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            out.push((
                "jitter",
                format!("must be between 0 and 1, found {}", self.jitter),
            ));
        }
        if self.max_backoff < self.initial_backoff {
            out.push((
                "max_backoff",
                format!(
                    "`max_backoff` ({}) is shorter than `initial_backoff` ({})",
                    self.max_backoff, self.initial_backoff
                ),
            ));
        }
        out
    }
}

/// Encoding of record values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Format {
    /// UTF-8 JSON.
    #[default]
    Json,
    /// Avro in the Confluent wire format (a zero byte, the 4-byte schema id,
    /// the Avro body), through `schema_registry`.
    Avro,
}

/// Encoding of record keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KeyFormat {
    /// UTF-8 text (the common case: `account_1`).
    #[default]
    String,
    /// JSON; grouping uses the key's bytes as written.
    Json,
    /// Opaque bytes.
    Bytes,
    /// Avro in the Confluent wire format, schema subject `<topic>-key`.
    /// Decoded keys group as text when they are strings, as compact JSON
    /// otherwise.
    Avro,
    /// Records carry no meaningful key: stateful nodes must set `key_by`.
    None,
}

/// How a source's records are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SourceKind {
    /// Every record is an event.
    #[default]
    Stream,
    /// A changelog of a table (Kafka Streams' `KTable`, usually a
    /// compacted topic): each record is the latest value of its key, a
    /// tombstone (no value) deletes the key. Read by `join` nodes (which
    /// materialize it) and sinks.
    Table,
    /// A table every instance holds whole (Kafka Streams' `GlobalKTable`):
    /// each instance reads every partition of the topic, outside the
    /// group, and restores it before processing starts. Joined by a
    /// stream on a key the stream record names (`join`'s `table_key`), so
    /// it need not be co-partitioned with anything.
    GlobalTable,
}

impl SourceKind {
    /// Whether each record is the latest value of its key (a tombstone
    /// deletes it).
    pub(crate) fn is_table(self) -> bool {
        matches!(self, SourceKind::Table | SourceKind::GlobalTable)
    }
}

/// Where to start reading a partition that has no committed offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OffsetReset {
    #[default]
    Earliest,
    Latest,
}

impl OffsetReset {
    /// Its name in a topology, which is also librdkafka's
    /// `auto.offset.reset` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        }
    }
}

/// An input topic.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct SourceConfig {
    /// Kafka topic to read.
    pub topic: String,
    /// `stream` (default): every record is an event. `table`: each record
    /// is the latest value of its key and a tombstone deletes it; `join`
    /// nodes and sinks read tables. `global_table`: a table every instance
    /// holds whole, read outside the group, joined by a stream on a key
    /// the stream record names (`table_key`).
    #[serde(default)]
    pub(crate) kind: SourceKind,
    /// Value encoding.
    #[serde(default)]
    pub(crate) format: Format,
    /// Key encoding.
    #[serde(default)]
    pub(crate) key_format: KeyFormat,
    /// Field holding the record's event time (epoch milliseconds or an
    /// RFC 3339 string). Defaults to the Kafka record timestamp.
    #[serde(default)]
    pub(crate) timestamp: Option<JsonPointer>,
    /// Where to start when the group has no committed offset.
    #[serde(default)]
    pub(crate) offset_reset: OffsetReset,
    /// Avro only: the reader schema, an `.avsc` file (relative to the
    /// directory streamfold runs in). Records are decoded with the schema
    /// whose id they carry and resolved to this one, so producers may evolve
    /// their schema compatibly. Without it, records read as written.
    #[serde(default)]
    pub(crate) schema: Option<PathBuf>,
    /// Retries of external failures while decoding this source's records;
    /// defaults to `processing.retry`.
    #[serde(default)]
    pub(crate) retry: Option<RetryConfig>,
}

/// An output topic.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct SinkConfig {
    /// Kafka topic to write.
    pub(crate) topic: String,
    /// What feeds this sink: a node or source name.
    pub(crate) input: Inputs,
    /// Value encoding.
    #[serde(default)]
    pub(crate) format: Format,
    /// Key encoding.
    #[serde(default)]
    pub(crate) key_format: KeyFormat,
    /// Create the topic at startup if it does not exist (otherwise a
    /// missing topic is a startup error).
    #[serde(default)]
    pub(crate) create: bool,
    /// Partitions when created; defaults to the sources' partition count.
    /// Only with `create: true`.
    #[serde(default)]
    pub(crate) partitions: Option<NonZeroU32>,
    /// Create the topic compacted (`cleanup.policy=compact`), for read
    /// models and checkpoints keyed by entity. Only with `create: true`.
    #[serde(default)]
    pub(crate) compact: bool,
    /// Avro only (required): the `.avsc` file values are written with,
    /// relative to the directory streamfold runs in.
    #[serde(default)]
    pub(crate) schema: Option<PathBuf>,
    /// With `key_format: avro` (required): the `.avsc` file keys are written
    /// with.
    #[serde(default)]
    pub(crate) key_schema: Option<PathBuf>,
    /// Avro only. `true` (default): register the schema under the subject
    /// `<topic>-value` (and `<topic>-key`) at startup. `false`: use the
    /// subject's latest registered version, which must exist.
    #[serde(default)]
    pub(crate) register: Option<bool>,
}

impl SinkConfig {
    /// Problems with these settings, as (field, message): the formats and
    /// schemas are checked with the sources' and the registry.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        if self.create {
            return Vec::new();
        }
        [
            ("partitions", self.partitions.is_some()),
            ("compact", self.compact),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(field, _)| {
            (
                field,
                format!("`{field}` only applies when the sink creates its topic (`create: true`)"),
            )
        })
        .collect()
    }
}

/// The dead-letter topic.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct DeadLetterConfig {
    /// Kafka topic for dead letters; created at startup when missing.
    pub(crate) topic: String,
}

/// Fields every node has, beside its `type` and the operator's own options.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct NodeCommon {
    /// What feeds this node: a source or node name (`node.output` for a
    /// node with named outputs), or a list of them.
    pub(crate) input: Inputs,
    /// Group by this field of the value instead of the record key. The
    /// runtime routes records through the internal topic
    /// `<name>-<node>-repartition` so each group lives on one task.
    #[serde(default)]
    pub key_by: Option<JsonPointer>,
    /// Free text shown by `streamfold describe`.
    #[serde(default)]
    pub(crate) description: Option<String>,
}

/// Names of the [`NodeCommon`] fields, which the loader reads apart from
/// the operator's own options.
pub(crate) const NODE_COMMON_FIELDS: &[&str] = &["type", "input", "key_by", "description"];

/// A node: the common fields plus one operator, chosen by `type`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[schemars(extend("unevaluatedProperties" = false))]
pub(crate) struct NodeConfig {
    #[serde(flatten)]
    pub(crate) common: NodeCommon,
    #[serde(flatten)]
    pub(crate) kind: NodeKind,
}
