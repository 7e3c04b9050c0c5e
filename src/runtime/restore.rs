//! Restoring task state from changelogs.
//!
//! When a task is assigned, its store already holds everything up to the
//! changelog offsets saved with its last commit (nothing, for a new or
//! wiped state directory). The restorer replays each changelog partition of
//! the task from there to its end, skipping records of transactions that
//! did not commit by the position rule ([`super::changelog`]).
//!
//! There is one read_committed consumer per changelog topic, with
//! `enable.partition.eof`: reaching the end of a partition (its last stable
//! offset) is reported by librdkafka, without blocking watermark queries,
//! and is unambiguous because each consumer reads a single topic. Tasks
//! restore independently and in small steps between processing, so a
//! restoring task never blocks the others. Remaining records come from the
//! consumers' statistics.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, Message, Statistics};

use super::changelog::{EVENT_TIME_HEADER, POSITION_HEADER, Positions, Verdict};
use crate::state::RawWrite;
use crate::telemetry;

/// Records handled per call, so processing resumes quickly.
const BATCH: usize = 10_000;

/// Records left per `(topic, partition)`, from librdkafka statistics.
#[derive(Default)]
struct Remaining(Mutex<HashMap<i32, i64>>);

struct StatsContext {
    remaining: Arc<Remaining>,
}

impl ClientContext for StatsContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // Reaching the end of a changelog is how a restore finishes.
        let end_of_partition = matches!(
            error,
            KafkaError::PartitionEOF(_)
                | KafkaError::Global(rdkafka::error::RDKafkaErrorCode::PartitionEOF)
        );
        if !end_of_partition {
            tracing::warn!(%error, reason, "Restore consumer error.");
        }
    }

    fn stats(&self, statistics: Statistics) {
        let mut remaining = self.remaining.0.lock().unwrap_or_else(|e| e.into_inner());
        for topic in statistics.topics.values() {
            for (partition, p) in &topic.partitions {
                if *partition >= 0 && p.app_offset >= 0 {
                    let end = if p.ls_offset >= 0 {
                        p.ls_offset
                    } else {
                        p.hi_offset
                    };
                    remaining.insert(*partition, (end - p.app_offset).max(0));
                }
            }
        }
    }
}

impl ConsumerContext for StatsContext {}

/// The restore consumer of one changelog topic.
struct ChangelogReader {
    topic: String,
    store: usize,
    consumer: BaseConsumer<StatsContext>,
    remaining: Arc<Remaining>,
    /// Partitions (tasks) being replayed, with the next offset to apply.
    replaying: BTreeMap<i32, i64>,
}

impl ChangelogReader {
    /// Starts replaying `task`'s partition from `from`.
    ///
    /// Assignments change one partition at a time (incremental assign and
    /// unassign): a full `assign()` stops and restarts every partition, and
    /// several in quick succession trip librdkafka 2.12's duplicate
    /// FETCH_STOP race (`rd_kafka_assignment_partition_stopped: Assertion
    /// rktp->rktp_started failed`, librdkafka issue 5573), which aborts the
    /// process. It also spares the other partitions a refetch.
    fn start(&mut self, task: i32, from: i64) -> Result<(), KafkaError> {
        if self.replaying.contains_key(&task) {
            self.stop(task)?;
        }
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic, task, Offset::Offset(from))?;
        self.consumer.incremental_assign(&list)?;
        self.replaying.insert(task, from);
        Ok(())
    }

    /// Stops replaying `task`'s partition; returns its next offset.
    fn stop(&mut self, task: i32) -> Result<Option<i64>, KafkaError> {
        let Some(next) = self.replaying.remove(&task) else {
            return Ok(None);
        };
        let mut list = TopicPartitionList::new();
        list.add_partition(&self.topic, task);
        self.consumer.incremental_unassign(&list)?;
        Ok(Some(next))
    }
}

/// What one call to [`Restorer::poll`] produced for a task.
#[derive(Debug, Default)]
pub struct Progress {
    pub writes: Vec<RawWrite>,
    /// Next changelog offset per changelog topic, to save with the writes.
    pub offsets: BTreeMap<String, i64>,
    pub restored: u64,
    pub skipped: u64,
    /// Of the skipped, those whose input has no committed offset at all.
    pub never_committed: u64,
    /// Records applied although their transaction could not be verified.
    pub unverified: u64,
    /// Every changelog partition of the task is caught up.
    pub done: bool,
    /// The latest event time stamped on an applied record.
    pub event_time: Option<i64>,
}

/// A task being restored.
struct Restoring {
    committed: Positions,
    /// The task's current input topics.
    inputs: Vec<String>,
    started: Instant,
    restored: u64,
    skipped: u64,
    never_committed: u64,
    unverified: u64,
}

pub struct Restorer {
    readers: Vec<ChangelogReader>,
    tasks: HashMap<i32, Restoring>,
    app: String,
}

impl Restorer {
    /// One reader per changelog topic; `changelogs[i]` belongs to store `i`.
    pub fn new(
        config: &ClientConfig,
        app: &str,
        changelogs: &[String],
    ) -> Result<Restorer, KafkaError> {
        let mut config = config.clone();
        config.set("enable.partition.eof", "true");
        config.set("statistics.interval.ms", "1000");
        let readers = changelogs
            .iter()
            .enumerate()
            .map(|(store, topic)| {
                let remaining = Arc::new(Remaining::default());
                let consumer = config.create_with_context(StatsContext {
                    remaining: Arc::clone(&remaining),
                })?;
                Ok(ChangelogReader {
                    topic: topic.clone(),
                    store,
                    consumer,
                    remaining,
                    replaying: BTreeMap::new(),
                })
            })
            .collect::<Result<_, KafkaError>>()?;
        Ok(Restorer {
            readers,
            tasks: HashMap::new(),
            app: app.to_string(),
        })
    }

    /// The changelog partitions of `task` whose `saved` offset (as stored
    /// with its state) lies outside what the topic holds now: the topic
    /// was re-created, or truncated past it (DeleteRecords, retention on a
    /// changelog that is not compacted). Local state is then not a prefix
    /// of the changelog, and only a full restore can be trusted.
    pub fn out_of_range(
        &self,
        task: i32,
        saved: &BTreeMap<String, i64>,
    ) -> Result<Vec<String>, KafkaError> {
        let mut out = Vec::new();
        for reader in &self.readers {
            let Some(&from) = saved.get(&reader.topic) else {
                continue;
            };
            let (low, high) =
                reader
                    .consumer
                    .fetch_watermarks(&reader.topic, task, Duration::from_secs(10))?;
            if from < low || from > high {
                out.push(format!(
                    "{} partition {task}: state is at offset {from}, the topic holds {low}..{high}",
                    reader.topic
                ));
            }
        }
        Ok(out)
    }

    /// Starts restoring `task` from `saved` (next offset per changelog
    /// topic, as stored with its state); `committed` are the group's
    /// committed offsets of its `inputs`, the yardstick of the position
    /// rule.
    pub fn add(
        &mut self,
        task: i32,
        saved: &BTreeMap<String, i64>,
        committed: Positions,
        inputs: Vec<String>,
    ) -> Result<(), KafkaError> {
        for reader in &mut self.readers {
            let from = saved.get(&reader.topic).copied().unwrap_or(0);
            tracing::debug!(task, changelog = %reader.topic, from, "Replaying changelog.");
            reader.start(task, from)?;
        }
        self.tasks.insert(
            task,
            Restoring {
                committed,
                inputs,
                started: Instant::now(),
                restored: 0,
                skipped: 0,
                never_committed: 0,
                unverified: 0,
            },
        );
        Ok(())
    }

    /// Stops restoring `task` (revoked before it finished).
    pub fn remove(&mut self, task: i32) -> Result<(), KafkaError> {
        if self.tasks.remove(&task).is_none() {
            return Ok(());
        }
        for reader in &mut self.readers {
            reader.stop(task)?;
        }
        Ok(())
    }

    pub fn is_restoring(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Replays what is available within `budget`; returns progress per task.
    pub fn poll(&mut self, budget: Duration) -> Result<BTreeMap<i32, Progress>, KafkaError> {
        let mut progress: BTreeMap<i32, Progress> = BTreeMap::new();
        if self.tasks.is_empty() {
            return Ok(progress);
        }
        let deadline = Instant::now() + budget;
        for reader in &mut self.readers {
            let mut handled = 0;
            while !reader.replaying.is_empty() && handled < BATCH {
                let wait = deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(5));
                let Some(result) = reader.consumer.poll(wait) else {
                    break;
                };
                handled += 1;
                let message = match result {
                    Ok(message) => message,
                    Err(KafkaError::PartitionEOF(task)) => {
                        if let Some(next) = reader.stop(task)? {
                            progress
                                .entry(task)
                                .or_default()
                                .offsets
                                .insert(reader.topic.clone(), next);
                        }
                        continue;
                    }
                    Err(e @ KafkaError::MessageConsumptionFatal(_)) => return Err(e),
                    // Transient (a broker restarting, a connection reset):
                    // librdkafka reconnects and resumes the fetch on its
                    // own; the restore goes on where it was.
                    Err(error) => {
                        tracing::debug!(%error, "Restore consumer error; retrying.");
                        break;
                    }
                };
                let task = message.partition();
                let Some(next) = reader.replaying.get_mut(&task) else {
                    continue;
                };
                *next = message.offset() + 1;
                let entry = progress.entry(task).or_default();
                entry.offsets.insert(reader.topic.clone(), *next);
                let position = message
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == POSITION_HEADER))
                    .and_then(|h| h.value)
                    .and_then(Positions::decode);
                let verdict = match (&position, self.tasks.get(&task)) {
                    (Some(position), Some(restoring)) => {
                        position.verdict(&restoring.committed, &restoring.inputs)
                    }
                    _ => Verdict::Committed,
                };
                match verdict {
                    Verdict::Committed => {}
                    Verdict::Uncommitted => {
                        entry.skipped += 1;
                        continue;
                    }
                    Verdict::NeverCommitted => {
                        entry.skipped += 1;
                        entry.never_committed += 1;
                        continue;
                    }
                    Verdict::Unknown => entry.unverified += 1,
                }
                let event_time = message
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == EVENT_TIME_HEADER))
                    .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse::<i64>().ok());
                if let Some(ts) = event_time {
                    entry.event_time = Some(entry.event_time.map_or(ts, |t| t.max(ts)));
                }
                let Some(key) = message.key() else { continue };
                entry.restored += 1;
                entry.writes.push(RawWrite {
                    store: reader.store,
                    key: key.into(),
                    value: message.payload().map(Box::from),
                });
                if Instant::now() > deadline {
                    break;
                }
            }
            let remaining = reader.remaining.0.lock().unwrap_or_else(|e| e.into_inner());
            for task in reader.replaying.keys() {
                if let Some(left) = remaining.get(task) {
                    metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => reader.topic.clone(), "partition" => task.to_string())
                        .set(*left as f64);
                }
            }
        }
        for (task, p) in &mut progress {
            if let Some(restoring) = self.tasks.get_mut(task) {
                restoring.restored += p.restored;
                restoring.skipped += p.skipped;
                restoring.unverified += p.unverified;
                restoring.never_committed += p.never_committed;
            }
            if p.restored > 0 {
                metrics::counter!(telemetry::RESTORE_RECORDS, "topology" => self.app.clone(), "partition" => task.to_string())
                    .increment(p.restored);
            }
            if p.unverified > 0 {
                metrics::counter!(telemetry::RESTORE_UNVERIFIED, "topology" => self.app.clone(), "partition" => task.to_string())
                    .increment(p.unverified);
            }
            if p.skipped > 0 {
                metrics::counter!(telemetry::RESTORE_SKIPPED, "topology" => self.app.clone(), "partition" => task.to_string())
                    .increment(p.skipped);
            }
        }
        let finished: Vec<i32> = self
            .tasks
            .keys()
            .copied()
            .filter(|task| self.readers.iter().all(|r| !r.replaying.contains_key(task)))
            .collect();
        for task in finished {
            if let Some(done) = self.tasks.remove(&task) {
                if done.never_committed > 0 {
                    tracing::warn!(
                        task,
                        skipped = done.never_committed,
                        "Restore skipped changelog records stamped with input partitions that have \
                         no committed offset. That is right after a crash before the first commit; \
                         if the group's offsets expired (offsets.retention.minutes), the state they \
                         held is gone and the inputs are re-read from auto.offset.reset."
                    );
                }
                if done.unverified > 0 {
                    tracing::warn!(
                        task,
                        unverified = done.unverified,
                        "Restore applied changelog records whose transaction could not be verified: \
                         an input partition they were stamped with has no committed offset (an input \
                         left the topology, or the group's offsets expired). They are kept, since \
                         dropping committed state would be worse; on a broker that hides aborted \
                         transactions (Apache Kafka) they are all committed."
                    );
                }
                tracing::info!(
                    task,
                    restored = done.restored,
                    skipped = done.skipped,
                    millis = done.started.elapsed().as_millis() as u64,
                    "Restore finished."
                );
                for reader in &self.readers {
                    metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => reader.topic.clone(), "partition" => task.to_string())
                        .set(0.0);
                }
            }
            progress.entry(task).or_default().done = true;
        }
        Ok(progress)
    }
}
