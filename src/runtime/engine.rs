//! The processing loop of `streamfold run`.
//!
//! One thread polls the group consumer and drives every task of this
//! instance: decode, process, produce, punctuate, commit. Tasks are
//! created on assignment and closed on revocation, from the consumer's
//! rebalance callback (which runs inside `poll`, on this thread).
//!
//! **Assignment.** The group assigns partitions of the first source topic
//! (cooperative-sticky, optionally static membership). A task is a
//! partition number: with partition `p` of the first source, the instance
//! also takes partition `p` of every other source and of every repartition
//! topic, so records of a key meet in one task whatever topic they come
//! from (Kafka Streams' co-partitioning, without a custom assignor).
//!
//! **Restore.** A new task's partitions stay paused while its stores
//! replay their changelog tails ([`super::restore`]); then the task starts
//! and its partitions resume.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Message, Statistics};

use serde_json::Value;

use super::admin::Layout;
use super::changelog::{
    CHANGELOG_OFFSETS, ChangelogOffsets, EVENT_TIME, POSITION_HEADER, Positions,
};
use super::commit::{CommitError, Produce, Transactions, offsets_list};
use super::config::{self, RunOptions};
use super::partitioner::partition_for;
use super::restore::Restorer;
use super::task::{Output, Routing, Task, Upstream};
use super::{RuntimeError, admin};
use crate::formats::{CodecError, Codecs, json};
use crate::record::{Origin, Record};
use crate::state::ChangelogEntry;
use crate::state::rocks::RocksBackend;
use crate::telemetry::{self, NodeCounter, NodeGauge, NodeStats};
use crate::topology::Topology;
use crate::topology::model::{Guarantee, KeyFormat, OffsetReset};

/// Header naming which input of a node a repartition record is for.
const INPUT_HEADER: &str = "streamfold.input";
/// Header naming where a repartition record came from:
/// `<topic>/<partition>/<offset>/<seq>`.
const SOURCE_HEADER: &str = "streamfold.src";

/// Messages handled between housekeeping rounds.
const HOUSEKEEPING_EVERY: u32 = 256;

/// Runs `topology` until `shutdown` is set, then commits, closes the
/// tasks and leaves the group. A fenced or fatally failed producer closes
/// the tasks and rejoins, a few times, before giving up.
pub fn run(
    topology: Arc<Topology>,
    options: RunOptions,
    shutdown: Arc<AtomicBool>,
) -> Result<(), RuntimeError> {
    let layout = admin::prepare(&topology, &config::admin_config(&topology, &options))?;
    tracing::info!(
        topology = %topology.name,
        instance = %options.instance_id,
        partitions = layout.partitions,
        guarantee = ?topology.processing.guarantee,
        "Starting."
    );
    let mut failures = 0;
    loop {
        match run_member(&topology, &options, &layout, &shutdown) {
            Err(RuntimeError::Commit(CommitError::Fatal(reason)))
                if failures < 5 && !shutdown.load(Ordering::Relaxed) =>
            {
                failures += 1;
                tracing::error!(%reason, attempt = failures, "The producer is unusable; closing the tasks and rejoining the group.");
                std::thread::sleep(Duration::from_secs(failures));
            }
            Err(RuntimeError::Commit(CommitError::Fenced(reason))) => {
                return Err(RuntimeError::Fenced {
                    transactional_id: format!("{}-{}", topology.name, options.instance_id),
                    instance: options.instance_id.clone(),
                    reason,
                });
            }
            other => return other,
        }
    }
}

/// One membership in the group: from joining to leaving.
fn run_member(
    topology: &Arc<Topology>,
    options: &RunOptions,
    layout: &Layout,
    shutdown: &AtomicBool,
) -> Result<(), RuntimeError> {
    let exactly_once = topology.processing.guarantee == Guarantee::ExactlyOnce;
    let txn = Transactions::new(
        &config::producer_config(topology, options),
        exactly_once,
        options.txn_header,
    )
    .map_err(|e| RuntimeError::Startup(format!("cannot start the transactional producer: {e}")))?;
    tracing::info!(run = %txn.run_id(), "Producer ready; joining the group.");
    let changelogs: Vec<String> = topology
        .stores()
        .map(|s| s.changelog_topic.clone())
        .collect();
    let restorer = Restorer::new(
        &config::restore_config(topology, options),
        &topology.name,
        &changelogs,
    )?;
    let codecs = Codecs::new(topology).map_err(|e| RuntimeError::Startup(e.to_string()))?;
    let engine = Engine::new(Arc::clone(topology), options, layout, codecs, txn, restorer);
    let context = EngineContext {
        engine: Mutex::new(engine),
        app: topology.name.clone(),
        sources: topology
            .sources
            .iter()
            .map(|s| (s.config.topic.clone(), s.name.clone()))
            .collect(),
    };
    let consumer: BaseConsumer<EngineContext> =
        config::consumer_config(topology, options).create_with_context(context)?;
    let primary = topology.sources[0].config.topic.clone();
    consumer.subscribe(&[primary.as_str()])?;

    let result = main_loop(&consumer, shutdown);
    let closed = consumer
        .context()
        .lock()
        .shutdown(&consumer, result.is_ok());
    // Dropping the consumer leaves the group; its revoke callback finds no
    // task left.
    drop(consumer);
    result.and(closed)
}

fn main_loop(
    consumer: &BaseConsumer<EngineContext>,
    shutdown: &AtomicBool,
) -> Result<(), RuntimeError> {
    let context = consumer.context();
    let mut handled = 0u32;
    let mut timeout = Duration::from_millis(10);
    loop {
        if shutdown.load(Ordering::Relaxed) {
            tracing::info!("Shutting down: committing and leaving the group.");
            return Ok(());
        }
        match consumer.poll(timeout) {
            Some(Ok(message)) => {
                let mut engine = context.lock();
                engine.on_message(&message)?;
                handled += 1;
                if handled < HOUSEKEEPING_EVERY {
                    continue;
                }
            }
            // Fatal: the consumer cannot go on (fenced static member...).
            Some(Err(error @ KafkaError::MessageConsumptionFatal(_))) => {
                return Err(RuntimeError::Kafka(error));
            }
            Some(Err(error)) => tracing::warn!(%error, "Consumer error."),
            None => {}
        }
        handled = 0;
        let mut engine = context.lock();
        engine.housekeeping(consumer)?;
        timeout = engine.poll_timeout();
    }
}

/// The consumer context: owns the engine so rebalance callbacks can
/// commit and close tasks.
struct EngineContext {
    engine: Mutex<Engine>,
    app: String,
    /// Source topic → source name, for lag metrics.
    sources: HashMap<String, String>,
}

impl EngineContext {
    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ClientContext for EngineContext {
    fn stats(&self, statistics: Statistics) {
        for (topic, stats) in &statistics.topics {
            let node = self
                .sources
                .get(topic)
                .cloned()
                .unwrap_or_else(|| topic.clone());
            for (partition, p) in &stats.partitions {
                if *partition < 0 || p.app_offset < 0 {
                    continue;
                }
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                metrics::gauge!(telemetry::CONSUMER_LAG, "topology" => self.app.clone(), "node" => node.clone(), "partition" => partition.to_string())
                    .set((end - p.app_offset).max(0) as f64);
            }
        }
    }
}

impl ConsumerContext for EngineContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let mut engine = self.lock();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                let full = engine.partitions_of(&tasks);
                let result = if cooperative {
                    consumer.incremental_assign(&full)
                } else {
                    consumer.assign(&full)
                };
                if let Err(e) = result {
                    engine.fail(RuntimeError::Kafka(e));
                    return;
                }
                engine.assigned(consumer, &tasks);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                let lost = consumer.assignment_lost();
                engine.revoked(consumer, &tasks, lost);
                let full = engine.partitions_of(&tasks);
                let result = if cooperative {
                    consumer.incremental_unassign(&full)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    engine.fail(RuntimeError::Kafka(e));
                }
            }
            other => {
                tracing::error!(error = ?other, "Rebalance failed; dropping the assignment.");
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                engine.revoked(consumer, &tasks, true);
                let _ = consumer.unassign();
            }
        }
    }
}

/// An input topic of this topology.
struct Input {
    topic: String,
    kind: InputKind,
}

enum InputKind {
    /// Sources reading the topic (usually one).
    Source(Vec<usize>),
    /// The repartition topic of a `key_by` node.
    Repartition { node: usize },
}

/// One task and its bookkeeping.
struct Slot {
    task: Task,
    running: bool,
    /// Next offset to read, per input (index into `Engine::inputs`).
    positions: Vec<Option<i64>>,
    /// Positions as of the last commit (to rewind to on abort).
    committed: Vec<Option<i64>>,
    /// First offset fetched per input while the task was still restoring;
    /// the consumer is rewound there when the task starts.
    missed: Vec<Option<i64>>,
    changelog_offsets: ChangelogOffsets,
    /// Stats already published as metrics.
    published: Vec<NodeStats>,
}

struct Engine {
    topology: Arc<Topology>,
    partitions: i32,
    state_root: PathBuf,
    inputs: Vec<Input>,
    /// Store index → changelog topic and its tracked-topic index.
    changelogs: Vec<(String, usize)>,
    tasks: BTreeMap<i32, Slot>,
    codecs: Codecs,
    txn: Transactions,
    restorer: Restorer,
    outputs: Vec<Output>,
    /// Records consumed since the last metrics update and since the last
    /// commit.
    consumed_unreported: u64,
    consumed_uncommitted: u64,
    now: i64,
    last_commit: Instant,
    next_punctuation: Instant,
    next_metrics: Instant,
    fatal: Option<RuntimeError>,
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Engine {
    fn new(
        topology: Arc<Topology>,
        options: &RunOptions,
        layout: &Layout,
        codecs: Codecs,
        mut txn: Transactions,
        restorer: Restorer,
    ) -> Engine {
        let mut inputs = Vec::new();
        for (index, source) in topology.sources.iter().enumerate() {
            match inputs
                .iter_mut()
                .find(|i: &&mut Input| i.topic == source.config.topic)
            {
                Some(Input {
                    kind: InputKind::Source(list),
                    ..
                }) => list.push(index),
                _ => inputs.push(Input {
                    topic: source.config.topic.clone(),
                    kind: InputKind::Source(vec![index]),
                }),
            }
        }
        for (node, def) in topology.nodes.iter().enumerate() {
            if let Some(topic) = &def.repartition_topic {
                inputs.push(Input {
                    topic: topic.clone(),
                    kind: InputKind::Repartition { node },
                });
            }
        }

        let changelogs = topology
            .stores()
            .map(|s| (s.changelog_topic.clone(), txn.track(&s.changelog_topic)))
            .collect();
        let state_dir = options
            .state_dir
            .clone()
            .unwrap_or_else(|| topology.processing.state_dir.clone());
        let now = Instant::now();
        Engine {
            state_root: state_dir.join(&topology.name),
            partitions: layout.partitions,
            inputs,
            changelogs,
            tasks: BTreeMap::new(),
            codecs,
            txn,
            restorer,
            outputs: Vec::with_capacity(64),
            consumed_unreported: 0,
            consumed_uncommitted: 0,
            now: wall_clock_ms(),
            last_commit: now,
            next_punctuation: now,
            next_metrics: now,
            fatal: None,
            topology,
        }
    }

    /// The input a topic is, by a scan: a topology has a handful of
    /// inputs, and comparing names beats hashing them per record.
    fn input_of(&self, topic: &str) -> Option<usize> {
        self.inputs.iter().position(|i| i.topic == topic)
    }

    fn fail(&mut self, error: RuntimeError) {
        if self.fatal.is_none() {
            self.fatal = Some(error);
        }
    }

    /// Every input partition of `tasks`.
    fn partitions_of(&self, tasks: &[i32]) -> TopicPartitionList {
        let mut list = TopicPartitionList::new();
        for &task in tasks {
            for input in &self.inputs {
                list.add_partition(&input.topic, task);
            }
        }
        list
    }

    fn poll_timeout(&self) -> Duration {
        if self.restorer.is_restoring() || self.txn.in_transaction() {
            Duration::from_millis(10)
        } else {
            Duration::from_millis(100)
        }
    }

    /// New tasks: open their state, pause their partitions, start
    /// restoring.
    fn assigned(&mut self, consumer: &BaseConsumer<EngineContext>, tasks: &[i32]) {
        for &task in tasks {
            if self.tasks.contains_key(&task) {
                continue;
            }
            if let Err(e) = self.open_task(consumer, task) {
                self.fail(e);
                return;
            }
        }
    }

    fn open_task(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        task: i32,
    ) -> Result<(), RuntimeError> {
        let partitions = self.partitions_of(&[task]);
        consumer.pause(&partitions)?;
        let stores: Vec<String> = self.topology.stores().map(|s| s.name.clone()).collect();
        let path = self.state_root.join(task.to_string());
        let backend = RocksBackend::open(&path, &stores)?;
        let mut state_task = Task::new(
            Arc::clone(&self.topology),
            Box::new(backend),
            Routing::Partitioned {
                partition: task,
                partitions: self.partitions,
            },
        )?;
        let changelog_offsets = state_task
            .state()
            .meta(CHANGELOG_OFFSETS)?
            .and_then(|b| ChangelogOffsets::decode(&b))
            .unwrap_or_default();
        // The group's committed offsets: where processing resumes, and the
        // yardstick of the position rule.
        let committed_list =
            consumer.committed_offsets(partitions.clone(), Duration::from_secs(10))?;
        let mut committed = vec![None; self.inputs.len()];
        let mut committed_positions = Positions::default();
        for element in committed_list.elements() {
            if let (Offset::Offset(o), Some(i)) = (element.offset(), self.input_of(element.topic()))
            {
                committed[i] = Some(o);
                committed_positions
                    .0
                    .insert((element.topic().to_string(), task), o);
            }
        }
        self.restorer
            .add(task, &changelog_offsets.0, committed_positions)?;
        let slot = Slot {
            task: state_task,
            running: false,
            positions: committed.clone(),
            committed,
            missed: vec![None; self.inputs.len()],
            changelog_offsets,
            published: vec![NodeStats::default(); self.topology.nodes.len()],
        };
        self.tasks.insert(task, slot);
        Ok(())
    }

    fn start_task(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        task: i32,
    ) -> Result<(), RuntimeError> {
        let now = self.now;
        let Some(slot) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        slot.task.set_processing_time(now);
        let event_time = slot
            .task
            .state()
            .meta(EVENT_TIME)?
            .and_then(|b| String::from_utf8(b).ok()?.parse::<i64>().ok());
        if let Some(ts) = event_time {
            slot.task.resume_event_time(ts);
        }
        slot.task
            .start()
            .map_err(|source| RuntimeError::Task { task, source })?;
        // Re-read what was fetched before the partitions were paused.
        for (i, missed) in slot.missed.iter_mut().enumerate() {
            if let Some(offset) = missed.take() {
                let target = slot.positions[i].unwrap_or(offset).min(offset);
                consumer.seek(
                    &self.inputs[i].topic,
                    task,
                    Offset::Offset(target),
                    Duration::from_secs(10),
                )?;
            }
        }
        slot.running = true;
        let partitions = self.partitions_of(&[task]);
        consumer.resume(&partitions)?;
        tracing::info!(task, "Task running.");
        metrics::gauge!(telemetry::TASKS_RUNNING, "topology" => self.topology.name.clone())
            .set(self.tasks.values().filter(|s| s.running).count() as f64);
        Ok(())
    }

    /// Revoked tasks: commit what they did (unless the assignment was
    /// lost, when committing would fail) and close them.
    fn revoked(&mut self, consumer: &BaseConsumer<EngineContext>, tasks: &[i32], lost: bool) {
        if lost {
            if let Err(e) = self.txn.abort() {
                self.fail(RuntimeError::Commit(e));
            }
            for slot in self.tasks.values_mut() {
                slot.task.abort();
            }
        } else if let Err(e) = self.commit(consumer) {
            self.fail(e);
        }
        for task in tasks {
            if let Some(mut slot) = self.tasks.remove(task) {
                publish_task_metrics(&self.topology.name, *task, &mut slot, true);
                tracing::info!(task, "Task closed.");
            }
            if let Err(e) = self.restorer.remove(*task) {
                self.fail(RuntimeError::Kafka(e));
            }
        }
        metrics::gauge!(telemetry::TASKS_RUNNING, "topology" => self.topology.name.clone())
            .set(self.tasks.values().filter(|s| s.running).count() as f64);
    }

    fn on_message(&mut self, message: &BorrowedMessage<'_>) -> Result<(), RuntimeError> {
        let partition = message.partition();
        let Some(input) = self.input_of(message.topic()) else {
            return Ok(());
        };
        let Some(slot) = self.tasks.get_mut(&partition) else {
            return Ok(());
        };
        if !slot.running {
            slot.missed[input].get_or_insert(message.offset());
            return Ok(());
        }
        self.txn.begin().map_err(RuntimeError::Commit)?;
        let headers: Vec<(String, Vec<u8>)> = match message.headers() {
            Some(h) => h
                .iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                    )
                })
                .collect(),
            None => Vec::new(),
        };
        let origin = Origin {
            topic: message.topic(),
            partition,
            offset: message.offset(),
            key: message.key(),
            payload: message.payload(),
            headers: &headers,
        };
        let timestamp = message.timestamp().to_millis().unwrap_or(self.now);
        slot.task.set_processing_time(self.now);
        let mut outputs = std::mem::take(&mut self.outputs);
        let result = match &self.inputs[input].kind {
            InputKind::Source(sources) => {
                let mut result = Ok(());
                for &source in sources {
                    let config = &self.topology.sources[source].config;
                    let key = match (config.key_format, message.key()) {
                        (KeyFormat::None, _) | (_, None) => Ok(None),
                        (_, Some(key)) => self.codecs.decode_key(source, key).map(Some),
                    };
                    let decoded = key.and_then(|key| {
                        let value = match message.payload() {
                            Some(payload) => self.codecs.decode(source, payload)?,
                            None => {
                                return Err(CodecError::record(
                                    "record has no value (a tombstone)",
                                ));
                            }
                        };
                        Ok(Record {
                            key,
                            value,
                            timestamp,
                            headers: headers.clone(),
                        })
                    });
                    result = slot
                        .task
                        .process_source(source, &origin, decoded, &mut outputs);
                    if result.is_err() {
                        break;
                    }
                }
                result
            }
            InputKind::Repartition { node } => {
                let mut node_input = 0;
                let mut upstream = None;
                let mut record_headers = Vec::with_capacity(headers.len());
                for (name, value) in &headers {
                    match name.as_str() {
                        INPUT_HEADER => {
                            node_input = std::str::from_utf8(value)
                                .ok()
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0);
                        }
                        SOURCE_HEADER => upstream = parse_upstream(value),
                        _ => record_headers.push((name.clone(), value.clone())),
                    }
                }
                match message.payload().map(json::decode) {
                    Some(Ok(value)) => {
                        let record = Record {
                            key: message.key().map(Box::from),
                            value,
                            timestamp,
                            headers: record_headers,
                        };
                        slot.task.process_repartitioned(
                            *node,
                            node_input,
                            upstream,
                            &origin,
                            record,
                            &mut outputs,
                        )
                    }
                    _ => {
                        tracing::error!(
                            topic = message.topic(),
                            partition,
                            offset = message.offset(),
                            "Skipping an undecodable record on a repartition topic."
                        );
                        Ok(())
                    }
                }
            }
        };
        result.map_err(|source| RuntimeError::Task {
            task: partition,
            source,
        })?;
        slot.positions[input] = Some(message.offset() + 1);
        self.consumed_unreported += 1;
        self.consumed_uncommitted += 1;
        let produced = self.produce(&mut outputs, Some(&origin));
        self.outputs = outputs;
        produced
    }

    /// Sends what tasks emitted: sink records, repartition records and dead
    /// letters, inside the open transaction.
    fn produce(
        &mut self,
        outputs: &mut Vec<Output>,
        origin: Option<&Origin<'_>>,
    ) -> Result<(), RuntimeError> {
        let mut seq = 0u32;
        for output in outputs.drain(..) {
            match output {
                Output::Sink { sink, record } => {
                    // A null value is a tombstone: no payload, so a
                    // compacted topic forgets the key.
                    let payload = match record.value {
                        Value::Null => Ok(None),
                        ref value => self.codecs.encode(sink, value).map(Some),
                    };
                    let encoded = payload.and_then(|payload| {
                        let key = match record.key.as_deref() {
                            Some(key) => Some(self.codecs.encode_key(sink, key)?),
                            None => None,
                        };
                        Ok((key, payload))
                    });
                    let (key, payload) = match encoded {
                        Ok(encoded) => encoded,
                        Err(reason) => {
                            let name = &self.topology.sinks[sink].name;
                            metrics::counter!(telemetry::DEAD_LETTERS, "topology" => self.topology.name.clone(), "node" => name.clone())
                                .increment(1);
                            let letter =
                                super::task::sink_dead_letter(origin, name, &reason, &record);
                            self.send_dead_letter(&letter)?;
                            continue;
                        }
                    };
                    self.txn
                        .send(Produce {
                            topic: &self.topology.sinks[sink].config.topic,
                            partition: None,
                            key: key.as_deref(),
                            payload: payload.as_deref(),
                            headers: &record.headers,
                            timestamp: Some(record.timestamp),
                            tracked: 0,
                        })
                        .map_err(RuntimeError::Commit)?;
                }
                Output::Repartition {
                    node,
                    input,
                    mut record,
                } => {
                    let payload = json::encode(&record.value);
                    record
                        .headers
                        .push((INPUT_HEADER.into(), input.to_string().into_bytes()));
                    if let Some(o) = origin {
                        let src = format!("{}/{}/{}/{seq}", o.topic, o.partition, o.offset);
                        record
                            .headers
                            .push((SOURCE_HEADER.into(), src.into_bytes()));
                        seq += 1;
                    }
                    let key = record.key.as_deref().unwrap_or_default();
                    let topic = self.topology.nodes[node]
                        .repartition_topic
                        .as_deref()
                        .unwrap_or_default();
                    self.txn
                        .send(Produce {
                            topic,
                            partition: Some(partition_for(key, self.partitions)),
                            key: Some(key),
                            payload: Some(&payload),
                            headers: &record.headers,
                            timestamp: Some(record.timestamp),
                            tracked: 0,
                        })
                        .map_err(RuntimeError::Commit)?;
                }
                Output::DeadLetter(letter) => self.send_dead_letter(&letter)?,
            }
        }
        Ok(())
    }

    fn send_dead_letter(&mut self, letter: &super::task::DeadLetter) -> Result<(), RuntimeError> {
        tracing::debug!(node = %letter.node, reason = letter.header(super::task::dlq_headers::REASON), "Dead letter.");
        self.txn
            .send(Produce {
                topic: &self.topology.dead_letter_topic,
                partition: None,
                key: letter.key.as_deref(),
                payload: letter.payload.as_deref(),
                headers: &letter.headers,
                timestamp: None,
                tracked: 0,
            })
            .map_err(RuntimeError::Commit)
    }

    /// Between messages: restore progress, punctuation, commits, metrics.
    fn housekeeping(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        if let Some(error) = self.fatal.take() {
            return Err(error);
        }
        self.now = wall_clock_ms();
        let now = Instant::now();
        self.txn.poll();
        if self.restorer.is_restoring() {
            self.restore_step(consumer)?;
        }
        if now >= self.next_punctuation {
            self.next_punctuation = now + self.topology.processing.punctuation_interval.0;
            self.punctuate()?;
        }
        if self.txn.in_transaction()
            && now.duration_since(self.last_commit) >= self.topology.processing.commit_interval().0
        {
            self.commit(consumer)?;
        }
        if self.consumed_unreported > 0 {
            metrics::counter!(telemetry::RECORDS_CONSUMED, "topology" => self.topology.name.clone())
                .increment(std::mem::take(&mut self.consumed_unreported));
        }
        if now >= self.next_metrics {
            self.next_metrics = now + Duration::from_secs(1);
            for (&task, slot) in &mut self.tasks {
                publish_task_metrics(&self.topology.name, task, slot, false);
            }
        }
        Ok(())
    }

    fn restore_step(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        let progress = self.restorer.poll(Duration::from_millis(50))?;
        for (task, progress) in progress {
            let Some(slot) = self.tasks.get_mut(&task) else {
                continue;
            };
            slot.changelog_offsets.0.extend(progress.offsets);
            let meta = [(
                CHANGELOG_OFFSETS.to_string(),
                slot.changelog_offsets.encode(),
            )];
            slot.task.state().restore(&progress.writes, &meta)?;
            if progress.done {
                self.start_task(consumer, task)?;
            }
        }
        Ok(())
    }

    /// Fires wall-clock timers of every running task.
    fn punctuate(&mut self) -> Result<(), RuntimeError> {
        let now = self.now;
        let mut outputs = std::mem::take(&mut self.outputs);
        let tasks: Vec<i32> = self
            .tasks
            .iter()
            .filter(|(_, s)| s.running)
            .map(|(t, _)| *t)
            .collect();
        for task in tasks {
            if let Some(slot) = self.tasks.get_mut(&task) {
                slot.task.set_processing_time(now);
                slot.task
                    .punctuate(&mut outputs)
                    .map_err(|source| RuntimeError::Task { task, source })?;
                let dirty = slot.task.state().has_pending();
                if !outputs.is_empty() || dirty {
                    self.txn.begin().map_err(RuntimeError::Commit)?;
                }
                self.produce(&mut outputs, None)?;
            }
        }
        self.outputs = outputs;
        Ok(())
    }

    /// Commits the open transaction with every running task's changelogs
    /// and positions; on abort rewinds to the last commit.
    fn commit(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        if !self.txn.in_transaction() {
            return Ok(());
        }
        let mut pending: Vec<(i32, Vec<ChangelogEntry>)> = Vec::new();
        let mut offsets = Vec::new();
        for (&task, slot) in &mut self.tasks {
            if !slot.running {
                continue;
            }
            let entries = slot.task.state().changelog()?;
            let positions = Positions(
                slot.positions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.map(|p| ((self.inputs[i].topic.clone(), task), p)))
                    .collect(),
            );
            if !entries.is_empty() {
                let header = [(POSITION_HEADER.to_string(), positions.encode())];
                for entry in &entries {
                    let (topic, tracked) = &self.changelogs[entry.store];
                    self.txn
                        .send(Produce {
                            topic,
                            partition: Some(task),
                            key: Some(&entry.key),
                            payload: entry.value.as_deref(),
                            headers: &header,
                            timestamp: Some(self.now),
                            tracked: *tracked,
                        })
                        .map_err(RuntimeError::Commit)?;
                }
            }
            offsets.extend(positions.0.into_iter().map(|((topic, p), o)| (topic, p, o)));
            pending.push((task, entries));
        }
        let list = offsets_list(offsets);
        match self.txn.commit(consumer, &list) {
            Ok(delivered) => {
                for (task, entries) in pending {
                    let Some(slot) = self.tasks.get_mut(&task) else {
                        continue;
                    };
                    for (topic, _) in &self.changelogs {
                        if let Some(offset) = delivered.get(&(topic.clone(), task)) {
                            slot.changelog_offsets.0.insert(topic.clone(), offset + 1);
                        }
                    }
                    let meta = [
                        (
                            CHANGELOG_OFFSETS.to_string(),
                            slot.changelog_offsets.encode(),
                        ),
                        (
                            EVENT_TIME.to_string(),
                            slot.task.clocks().event.to_string().into_bytes(),
                        ),
                    ];
                    slot.task.state().committed(entries, &meta)?;
                    slot.committed = slot.positions.clone();
                }
                self.last_commit = Instant::now();
                metrics::counter!(telemetry::RECORDS_COMMITTED, "topology" => self.topology.name.clone())
                    .increment(std::mem::take(&mut self.consumed_uncommitted));
                Ok(())
            }
            Err(CommitError::Aborted(reason)) => {
                tracing::warn!(%reason, "Transaction aborted; rewinding to the last commit.");
                self.abort(consumer)
            }
            Err(fatal) => Err(RuntimeError::Commit(fatal)),
        }
    }

    fn abort(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        self.txn.abort().map_err(RuntimeError::Commit)?;
        // They will be consumed again.
        self.consumed_uncommitted = 0;
        let reset = match self.topology.sources[0].config.offset_reset {
            OffsetReset::Earliest => Offset::Beginning,
            OffsetReset::Latest => Offset::End,
        };
        for (&task, slot) in &mut self.tasks {
            slot.task.abort();
            if !slot.running {
                continue;
            }
            for (i, committed) in slot.committed.iter().enumerate() {
                let offset = committed.map_or(reset, Offset::Offset);
                consumer.seek(&self.inputs[i].topic, task, offset, Duration::from_secs(10))?;
            }
            slot.positions = slot.committed.clone();
        }
        self.last_commit = Instant::now();
        Ok(())
    }

    /// Graceful end: commit (when the loop ended cleanly) and close every
    /// task.
    fn shutdown(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        clean: bool,
    ) -> Result<(), RuntimeError> {
        let result = if clean {
            self.commit(consumer)
        } else {
            self.txn.abort().map_err(RuntimeError::Commit)
        };
        let tasks: Vec<i32> = self.tasks.keys().copied().collect();
        for task in tasks {
            if let Some(mut slot) = self.tasks.remove(&task) {
                publish_task_metrics(&self.topology.name, task, &mut slot, true);
            }
            let _ = self.restorer.remove(task);
        }
        self.txn.flush();
        result
    }
}

/// Publishes a task's counter deltas since the last call; `closing` zeroes
/// its gauges.
fn publish_task_metrics(app: &str, task: i32, slot: &mut Slot, closing: bool) {
    let partition = task.to_string();
    for (index, (node, stats)) in slot.task.stats().enumerate() {
        let before = &slot.published[index];
        for counter in NodeCounter::ALL {
            let delta = stats.get(counter) - before.get(counter);
            if delta > 0 {
                metrics::counter!(counter.metric(), "topology" => app.to_string(), "node" => node.to_string())
                    .increment(delta);
            }
        }
        for gauge in NodeGauge::ALL {
            let value = if closing { 0 } else { stats.gauge(gauge) };
            metrics::gauge!(gauge.metric(), "topology" => app.to_string(), "node" => node.to_string(), "partition" => partition.clone())
                .set(value as f64);
        }
        if let Some(ratio) = stats.folding_ratio() {
            metrics::gauge!(telemetry::FOLD_RATIO, "topology" => app.to_string(), "node" => node.to_string(), "partition" => partition.clone())
                .set(ratio);
        }
    }
    slot.published = slot.task.stats().map(|(_, s)| s.clone()).collect();
}

/// Parses `topic/partition/offset/seq`.
fn parse_upstream(value: &[u8]) -> Option<Upstream> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.rsplitn(3, '/');
    let seq = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    let source = parts.next()?.to_string();
    Some(Upstream {
        source,
        offset,
        seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_headers_parse_from_the_right() {
        let parsed = parse_upstream(b"post-metric-updated/3/1042/0").unwrap();
        assert_eq!(parsed.source, "post-metric-updated/3");
        assert_eq!(parsed.offset, 1042);
        assert_eq!(parsed.seq, 0);
        assert_eq!(parse_upstream(b"garbage"), None);
    }
}
