//! The offline driver behind `streamfold test`.
//!
//! A case is a folder:
//!
//! ```text
//! my-case/
//!   input.jsonl              fixture records and clock steps, in order
//!   expected/<topic>.jsonl   what each sink topic (and the dead-letter
//!                            topic) must receive
//! ```
//!
//! Input lines are records, `{"topic": "posts", "key": "a", "value": {...}}`
//! with optional `timestamp` (epoch ms or RFC 3339; default: the virtual
//! clock), `headers` (`{"name": "text"}`), `raw` instead of `value` for
//! bytes that are not JSON, and `raw_key` instead of `key` for key bytes as
//! they are (`key` is written as a producer would in the source's key
//! format). `"value": null` is a tombstone, a record without a payload.
//! Records go through the same decoding and encoding as in `run`
//! ([`Codecs::decode_record`], [`Codecs::encode_record`]); or clock steps, `{"advance": "5m"}`, which move
//! the virtual wall clock forward one punctuation tick at a time, firing
//! timers as the runtime would. Blank lines and lines starting with `#` are
//! ignored. The virtual clock starts at 2025-01-01T00:00:00Z.
//!
//! Expected lines are `{"key": "a", "value": {...}}`, optionally with
//! `headers` (each listed header must be present with that value) and
//! `timestamp`. Outputs are compared per key in order; the order between
//! keys does not matter. A topic without an expected file must receive
//! nothing.
//!
//! The task runs on the in-memory state backend and commits after every
//! step, so state goes through its encoding exactly as in production.

pub mod article;
mod collected;
mod diff;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::types::HumanDuration;
use crate::formats::{Codecs, Wire};
use crate::record::json;
use crate::record::{Origin, Timestamp};
use crate::state::StateError;
use crate::state::global::{Change, Globals, MemoryGlobal};
use crate::state::memory::MemoryBackend;
use crate::task::limits::Limits;
use crate::task::output::Writer;
use crate::task::{Output, Routing, Task, TaskError};
use crate::telemetry::{NodeCounter, NodeStats};
use crate::topology::Topology;
use collected::Collected;

/// Where the virtual clock starts: 2025-01-01T00:00:00Z.
pub const VIRTUAL_EPOCH: Timestamp = 1_735_689_600_000;

/// Problems with the cases themselves (not mismatches).
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A case file is unusable as a whole (unreadable, no topology).
    #[error("{path}: {message}")]
    Case { path: String, message: String },
    /// A line of a case file is unusable.
    #[error("{path}:{line}: {message}")]
    Line {
        path: String,
        line: usize,
        message: String,
    },
    /// The topology stopped on an internal error.
    #[error("the topology stopped: {0}")]
    Task(#[from] TaskError),
    /// The in-memory state failed.
    #[error("state: {0}")]
    State(#[from] StateError),
    /// A format of the topology cannot be set up.
    #[error("formats: {0}")]
    Format(#[from] crate::formats::FormatError),
}

/// One record a topic received.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub key: Option<String>,
    /// The value as JSON, or the raw text when it is not JSON.
    pub value: Result<Value, String>,
    pub headers: Vec<(String, String)>,
    pub(crate) timestamp: Option<Timestamp>,
}

/// The outcome of one case.
#[derive(Debug)]
pub struct CaseReport {
    pub name: String,
    /// Human-readable differences; empty when the case passed.
    pub failures: Vec<String>,
    pub records_in: usize,
    pub records_out: usize,
    pub stats: Vec<(String, NodeStats)>,
}

impl CaseReport {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// "fold_account: 4 of 6 events folded (folding ratio 66.7%)".
    pub fn folding_summary(&self) -> Vec<String> {
        self.stats
            .iter()
            .filter_map(|(node, stats)| {
                let ratio = stats.folding_ratio()?;
                Some(format!(
                    "{node}: {} of {} events folded into an open fold (folding ratio {:.1}%)",
                    stats.get(NodeCounter::FoldFolded),
                    stats.get(NodeCounter::FoldEligible),
                    ratio * 100.0
                ))
            })
            .collect()
    }
}

/// Runs every case under `dir` (or `dir` itself when it holds an
/// `input.jsonl`). With `bless`, writes what each case produced as its
/// expected output instead of comparing.
pub fn run_cases(
    topology: &Arc<Topology>,
    dir: &Path,
    bless: bool,
) -> Result<Vec<CaseReport>, TestkitError> {
    let case_error = |message: String| TestkitError::Case {
        path: dir.display().to_string(),
        message,
    };
    let mut case_dirs = Vec::new();
    if dir.join("input.jsonl").is_file() {
        case_dirs.push(dir.to_path_buf());
    } else {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| case_error(format!("cannot read the folder: {e}")))?;
        for entry in entries {
            let path = entry.map_err(|e| case_error(e.to_string()))?.path();
            if path.join("input.jsonl").is_file() {
                case_dirs.push(path);
            }
        }
        case_dirs.sort();
    }
    if case_dirs.is_empty() {
        return Err(case_error(
            "no cases here: a case is a folder with input.jsonl and expected/<topic>.jsonl".into(),
        ));
    }
    case_dirs
        .iter()
        .map(|case| run_case(topology, case, bless))
        .collect()
}

/// Runs one case folder.
pub fn run_case(
    topology: &Arc<Topology>,
    dir: &Path,
    bless: bool,
) -> Result<CaseReport, TestkitError> {
    let input_path = dir.join("input.jsonl");
    let mut driver = Driver::new(Arc::clone(topology))?;
    let text = read(&input_path)?;
    let mut records_in = 0;
    for (number, line) in text.lines().enumerate() {
        let line_error = |message: String| TestkitError::Line {
            path: input_path.display().to_string(),
            line: number + 1,
            message,
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let step: Value = serde_json::from_str(trimmed)
            .map_err(|e| line_error(format!("not a JSON object: {e}")))?;
        match parse_step(&step).map_err(line_error)? {
            Step::Advance(by) => driver.advance(by)?,
            Step::Record(fixture) => {
                records_in += 1;
                driver.feed(fixture).map_err(|e| match e {
                    DriverError::Fixture(message) => line_error(message),
                    DriverError::Task(e) => TestkitError::Task(e),
                    DriverError::State(e) => TestkitError::State(e),
                })?;
            }
        }
    }

    let name = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let stats = driver.stats();
    let received = driver.received;
    let records_out = received.values().map(Vec::len).sum();
    let expected_dir = dir.join("expected");
    let output_topics = topology
        .sinks
        .iter()
        .map(|s| s.config.topic.clone())
        .chain([topology.dead_letter_topic.clone()]);
    let mut failures = Vec::new();
    if bless {
        bless_outputs(&expected_dir, &received)?;
    } else {
        let mut known_topics = Vec::new();
        for topic in output_topics {
            let expected_path = expected_dir.join(format!("{topic}.jsonl"));
            let expected = if expected_path.is_file() {
                read_expected(&expected_path)?
            } else {
                Vec::new()
            };
            let actual = received.get(&topic).cloned().unwrap_or_default();
            if let Some(report) = diff::compare(&topic, &expected, &actual) {
                failures.push(report);
            }
            known_topics.push(format!("{topic}.jsonl"));
        }
        if let Ok(entries) = std::fs::read_dir(&expected_dir) {
            for entry in entries.flatten() {
                let file = entry.file_name().to_string_lossy().into_owned();
                if !known_topics.contains(&file) {
                    failures.push(format!(
                        "expected/{file} names no sink topic or dead-letter topic of this topology (outputs: {})",
                        known_topics.join(", ")
                    ));
                }
            }
        }
    }
    Ok(CaseReport {
        name,
        failures,
        records_in,
        records_out,
        stats,
    })
}

fn read(path: &Path) -> Result<String, TestkitError> {
    std::fs::read_to_string(path).map_err(|e| TestkitError::Case {
        path: path.display().to_string(),
        message: format!("cannot read: {e}"),
    })
}

enum Step {
    Record(Fixture),
    Advance(HumanDuration),
}

struct Fixture {
    topic: String,
    key: Option<FixtureBytes>,
    value: FixtureBytes,
    timestamp: Option<Timestamp>,
    headers: Vec<(String, Vec<u8>)>,
}

/// A fixture's key or value: JSON (or text, for keys) that each source
/// writes as a producer would in its own format, or `raw` bytes as given.
/// A `null` value is a tombstone: no payload at all.
enum FixtureBytes {
    Json(Value),
    Raw(Vec<u8>),
}

fn parse_step(step: &Value) -> Result<Step, String> {
    let Some(object) = step.as_object() else {
        return Err("each line is a JSON object: a record or {\"advance\": \"5m\"}".into());
    };
    if let Some(advance) = object.get("advance") {
        let text = advance
            .as_str()
            .ok_or("`advance` takes a duration such as \"5m\"")?;
        return HumanDuration::parse(text).map(Step::Advance);
    }
    const FIELDS: &[&str] = &[
        "topic",
        "key",
        "raw_key",
        "value",
        "raw",
        "timestamp",
        "headers",
    ];
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(crate::config::de::unknown_name("field", unknown, FIELDS));
    }
    let topic = object
        .get("topic")
        .and_then(Value::as_str)
        .ok_or(
            "a record needs `topic` (or the line must be a clock step like {\"advance\": \"5m\"})",
        )?
        .to_string();
    let key = match (object.get("key"), object.get("raw_key")) {
        (None | Some(Value::Null), None) => None,
        (Some(key), None) => Some(FixtureBytes::Json(key.clone())),
        (None, Some(Value::String(raw))) => Some(FixtureBytes::Raw(raw.as_bytes().to_vec())),
        (None, Some(_)) => {
            return Err("`raw_key` takes a string: the key's bytes as text".into());
        }
        (Some(_), Some(_)) => return Err("a record has `key` or `raw_key`, not both".into()),
    };
    let value = match (object.get("value"), object.get("raw")) {
        (Some(value), None) => FixtureBytes::Json(value.clone()),
        (None, Some(Value::String(raw))) => FixtureBytes::Raw(raw.as_bytes().to_vec()),
        (None, Some(_)) => return Err("`raw` takes a string: the record's bytes as text".into()),
        (Some(_), Some(_)) => return Err("a record has `value` or `raw`, not both".into()),
        (None, None) => {
            return Err(
                "a record needs `value` (JSON, `null` for a tombstone) or `raw` (bytes as text)"
                    .into(),
            );
        }
    };
    let timestamp = match object.get("timestamp") {
        None => None,
        Some(ts) => Some(
            json::parse_timestamp(ts)
                .ok_or("`timestamp` is epoch milliseconds or an RFC 3339 time")?,
        ),
    };
    let headers = match object.get("headers") {
        None => Vec::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.as_bytes().to_vec())),
                _ => Err(format!("header `{k}` must be a string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`headers` is an object of strings".into()),
    };
    Ok(Step::Record(Fixture {
        topic,
        key,
        value,
        timestamp,
        headers,
    }))
}

/// Why the offline driver stopped a case.
enum DriverError {
    /// The case's fixture is unusable (an input it cannot encode).
    Fixture(String),
    /// The topology stopped on an internal error.
    Task(TaskError),
    /// The in-memory state failed.
    State(StateError),
}

impl From<TaskError> for DriverError {
    fn from(e: TaskError) -> Self {
        DriverError::Task(e)
    }
}

impl From<StateError> for DriverError {
    fn from(e: StateError) -> Self {
        DriverError::State(e)
    }
}

/// One task on the in-memory backend with a virtual clock: what
/// `streamfold test` runs, usable from Rust tests too.
pub struct Driver {
    topology: Arc<Topology>,
    codecs: Codecs,
    task: Task,
    /// What the producer accepts (`kafka.producer`'s `message.max.bytes`).
    limits: Limits,
    now: Timestamp,
    tick: i64,
    offsets: BTreeMap<String, i64>,
    received: BTreeMap<String, Vec<Received>>,
    /// The global tables, by source index: a fixture for one is applied
    /// to it at once, as the instance's reader would.
    globals: BTreeMap<usize, Arc<MemoryGlobal>>,
}

impl Driver {
    pub fn new(topology: Arc<Topology>) -> Result<Driver, TestkitError> {
        let stores = topology.stores().count();
        let mut globals = BTreeMap::new();
        let mut tables = Globals::default();
        for (index, source) in topology.sources.iter().enumerate() {
            if source.global() {
                let table = Arc::new(MemoryGlobal::default());
                tables.insert(&source.name, Arc::clone(&table) as _);
                globals.insert(index, table);
            }
        }
        let mut task = Task::with_globals(
            Arc::clone(&topology),
            Box::new(MemoryBackend::new(stores)),
            Routing::Direct,
            tables,
        )?;
        task.set_processing_time(VIRTUAL_EPOCH);
        task.start(None)?;
        let tick = topology.processing.punctuation_interval.as_millis().max(1);
        let codecs = Codecs::offline(&topology)?;
        Ok(Driver {
            codecs,
            limits: Limits::new(topology.kafka.max_record_bytes()),
            topology,
            task,
            now: VIRTUAL_EPOCH,
            tick,
            offsets: BTreeMap::new(),
            received: BTreeMap::new(),
            globals,
        })
    }

    fn feed(&mut self, fixture: Fixture) -> Result<(), DriverError> {
        let sources: Vec<usize> = (0..self.topology.sources.len())
            .filter(|&i| self.topology.sources[i].config.topic == fixture.topic)
            .collect();
        if sources.is_empty() {
            let topics: Vec<&str> = self
                .topology
                .sources
                .iter()
                .map(|s| s.config.topic.as_str())
                .collect();
            return Err(DriverError::Fixture(format!(
                "topic `{}` is not read by this topology (its sources read: {})",
                fixture.topic,
                topics.join(", ")
            )));
        }
        let offset = *self.offsets.entry(fixture.topic.clone()).or_insert(0);
        self.offsets.insert(fixture.topic.clone(), offset + 1);
        let mut outputs = Vec::new();
        let mut last = Wire::default();
        for source in sources.iter().copied() {
            let wire = self.wire(source, &fixture)?;
            if let Some(table) = self.globals.get(&source) {
                let change = self.codecs.decode_table_change(
                    source,
                    wire.key.as_deref(),
                    wire.payload.as_deref(),
                );
                match change {
                    Ok((key, value)) => table.apply(Change {
                        key: &key,
                        value: value.as_ref(),
                    }),
                    Err(error) => {
                        return Err(DriverError::Fixture(format!(
                            "global table `{}` would skip this record: {}",
                            self.topology.sources[source].name, error.reason
                        )));
                    }
                }
                continue;
            }
            let origin = Origin {
                topic: &fixture.topic,
                partition: 0,
                offset,
                key: wire.key.as_deref(),
                payload: wire.payload.as_deref(),
                headers: &fixture.headers,
            };
            self.task.records().process_source_bytes(
                source,
                &origin,
                &self.codecs,
                fixture.timestamp.unwrap_or(self.now),
                &mut outputs,
            )?;
            last = wire;
        }
        let origin = Origin {
            topic: &fixture.topic,
            partition: 0,
            offset,
            key: last.key.as_deref(),
            payload: last.payload.as_deref(),
            headers: &fixture.headers,
        };
        self.collect(outputs, Some(&origin));
        self.commit()?;
        Ok(())
    }

    /// The fixture's bytes on the wire as a producer wrote them for
    /// source `source`: JSON values and keys in the source's formats (Avro
    /// with its schemas), raw ones as given, a `null` value as a tombstone.
    fn wire(&self, source: usize, fixture: &Fixture) -> Result<Wire, DriverError> {
        let name = &self.topology.sources[source].name;
        let key = match &fixture.key {
            None => None,
            Some(FixtureBytes::Raw(bytes)) => Some(bytes.clone()),
            Some(FixtureBytes::Json(key)) => {
                let text = match key {
                    Value::String(text) => text.clone(),
                    other => String::from_utf8_lossy(&json::encode(other)).into_owned(),
                };
                let bytes = self.codecs.encode_key_as_producer(source, &text);
                Some(bytes.map_err(|e| {
                    DriverError::Fixture(format!("the key does not fit source `{name}`: {e}"))
                })?)
            }
        };
        let payload = match &fixture.value {
            FixtureBytes::Raw(bytes) => Some(bytes.clone()),
            FixtureBytes::Json(Value::Null) => None,
            FixtureBytes::Json(value) => {
                Some(self.codecs.encode_as_producer(source, value).map_err(|e| {
                    DriverError::Fixture(format!("the value does not fit source `{name}`: {e}"))
                })?)
            }
        };
        Ok(Wire { key, payload })
    }

    /// Feeds one record with a JSON value to every source reading `topic`
    /// (written as a producer would for each source's format; `null` is a
    /// tombstone), timestamped now on the virtual clock.
    pub fn feed_json(
        &mut self,
        topic: &str,
        key: Option<&str>,
        value: &Value,
    ) -> Result<(), TestkitError> {
        self.feed_now(topic, key, FixtureBytes::Json(value.clone()))
    }

    /// Feeds one record with `payload` as its bytes, whatever the sources'
    /// formats (to see what bad bytes do), timestamped now.
    pub fn feed_raw(
        &mut self,
        topic: &str,
        key: Option<&str>,
        payload: &[u8],
    ) -> Result<(), TestkitError> {
        self.feed_now(topic, key, FixtureBytes::Raw(payload.to_vec()))
    }

    fn feed_now(
        &mut self,
        topic: &str,
        key: Option<&str>,
        value: FixtureBytes,
    ) -> Result<(), TestkitError> {
        let fixture = Fixture {
            topic: topic.to_string(),
            key: key.map(|k| FixtureBytes::Json(Value::String(k.to_string()))),
            value,
            timestamp: None,
            headers: Vec::new(),
        };
        self.feed(fixture).map_err(|e| match e {
            DriverError::Fixture(message) => TestkitError::Case {
                path: topic.to_string(),
                message,
            },
            DriverError::Task(e) => TestkitError::Task(e),
            DriverError::State(e) => TestkitError::State(e),
        })
    }

    /// What `topic` (a sink topic or the dead-letter topic) received so far.
    pub fn received(&self, topic: &str) -> &[Received] {
        self.received.get(topic).map_or(&[], Vec::as_slice)
    }

    /// Per node, then source, then sink: its name and counters.
    pub fn stats(&self) -> Vec<(String, NodeStats)> {
        self.task
            .stats()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect()
    }

    /// Moves the wall clock forward tick by tick, firing timers as the
    /// runtime's punctuation would.
    pub fn advance(&mut self, by: HumanDuration) -> Result<(), TestkitError> {
        let target = self.now.saturating_add(by.as_millis());
        while self.now < target {
            self.now = (self.now + self.tick).min(target);
            self.task.set_processing_time(self.now);
            // Bounded rounds, committed one by one, as the runtime does.
            loop {
                let mut outputs = Vec::new();
                let more = self.task.punctuate(&mut outputs)?;
                if !outputs.is_empty() {
                    self.collect(outputs, None);
                }
                self.commit()?;
                if !more {
                    break;
                }
            }
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), StateError> {
        if self.task.state().has_pending() {
            let entries = self.task.state().changelog()?;
            self.task.committed(entries, &[])?;
        }
        Ok(())
    }

    /// What the task emitted, through the one output path `run` takes
    /// ([`Writer::write`]), as a consumer of each topic would read it.
    fn collect(&mut self, outputs: Vec<Output>, origin: Option<&Origin<'_>>) {
        let writer = Writer {
            topology: &self.topology,
            codecs: &self.codecs,
            partitions: 1,
        };
        let mut outlet = Collected {
            topology: &self.topology,
            codecs: &self.codecs,
            limits: &self.limits,
            received: &mut self.received,
        };
        let Ok(()) = writer.write(&mut self.task, outputs.into_iter(), origin, &mut outlet);
    }
}

/// An expected record, as read from `expected/<topic>.jsonl`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Expected {
    pub(crate) line: usize,
    pub(crate) key: Option<String>,
    pub(crate) value: Result<Value, String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timestamp: Option<Timestamp>,
}

fn read_expected(path: &Path) -> Result<Vec<Expected>, TestkitError> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let error = |message: String| TestkitError::Line {
            path: path.display().to_string(),
            line: number + 1,
            message,
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let record: Map<String, Value> =
            serde_json::from_str(trimmed).map_err(|e| error(format!("not a JSON object: {e}")))?;
        const FIELDS: &[&str] = &["key", "value", "raw", "headers", "timestamp"];
        if let Some(unknown) = record.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(error(crate::config::de::unknown_name(
                "field", unknown, FIELDS,
            )));
        }
        let key = match record.get("key") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        let value = match (record.get("value"), record.get("raw")) {
            (Some(v), None) => Ok(v.clone()),
            (None, Some(Value::String(raw))) => Err(raw.clone()),
            _ => {
                return Err(error(
                    "an expected record has `value` (JSON) or `raw` (text)".into(),
                ));
            }
        };
        let headers = match record.get("headers") {
            None => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_string),
                    )
                })
                .collect(),
            Some(_) => return Err(error("`headers` is an object of strings".into())),
        };
        let timestamp = match record.get("timestamp") {
            None => None,
            Some(ts) => Some(json::parse_timestamp(ts).ok_or_else(|| {
                error("`timestamp` is epoch milliseconds or an RFC 3339 time".into())
            })?),
        };
        out.push(Expected {
            line: number + 1,
            key,
            value,
            headers,
            timestamp,
        });
    }
    Ok(out)
}

/// Writes what each topic received as its expected file. Dead letters keep
/// only the headers that explain them.
fn bless_outputs(
    dir: &Path,
    received: &BTreeMap<String, Vec<Received>>,
) -> Result<(), TestkitError> {
    let error = |e: std::io::Error| TestkitError::Case {
        path: dir.display().to_string(),
        message: format!("cannot write: {e}"),
    };
    if dir.is_dir() {
        std::fs::remove_dir_all(dir).map_err(error)?;
    }
    std::fs::create_dir_all(dir).map_err(error)?;
    for (topic, records) in received {
        let mut text = String::new();
        for r in records {
            let mut line = Map::new();
            line.insert(
                "key".into(),
                r.key.clone().map_or(Value::Null, Value::String),
            );
            match &r.value {
                Ok(v) => line.insert("value".into(), v.clone()),
                Err(raw) => line.insert("raw".into(), Value::String(raw.clone())),
            };
            let headers: Map<String, Value> = r
                .headers
                .iter()
                .filter(|(k, _)| {
                    use crate::task::dlq_headers::*;
                    [NODE, CLASS, REASON].contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            if !headers.is_empty() {
                line.insert("headers".into(), Value::Object(headers));
            }
            let _ = writeln!(text, "{}", Value::Object(line));
        }
        std::fs::write(dir.join(format!("{topic}.jsonl")), text).map_err(error)?;
    }
    Ok(())
}
