//! Restoring task state from changelogs.
//!
//! When a task is assigned, its store already holds everything up to the
//! changelog offsets saved with its last commit (nothing, for a new or
//! wiped state directory). The restorer replays each changelog partition of
//! the task from there to its end, with a read_committed consumer of its
//! own, skipping records of transactions that did not commit by the
//! position rule ([`super::changelog`]). Tasks restore independently and in
//! small steps between processing, so a restoring task never blocks the
//! others.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::changelog::{POSITION_HEADER, Positions};
use crate::state::RawWrite;
use crate::telemetry;

/// A partition that stays idle this long below its end offset has nothing
/// more to deliver (its tail is transaction markers, or a transaction that
/// never completes holds it back).
const IDLE_DONE: Duration = Duration::from_secs(3);

/// Records handled per call, so processing resumes quickly.
const BATCH: usize = 10_000;

/// One changelog partition being replayed.
struct Replay {
    task: i32,
    topic: String,
    store: usize,
    /// End offset when the restore started.
    end: i64,
    /// Next offset to apply.
    position: i64,
    last_progress: Instant,
}

/// What one call to [`Restorer::poll`] produced for a task.
#[derive(Debug, Default)]
pub struct Progress {
    pub writes: Vec<RawWrite>,
    /// Next changelog offset per changelog topic, to save with the writes.
    pub offsets: BTreeMap<String, i64>,
    pub restored: u64,
    pub skipped: u64,
    /// Every changelog partition of the task is caught up.
    pub done: bool,
}

pub struct Restorer {
    consumer: BaseConsumer,
    replays: Vec<Replay>,
    /// Per restoring task: the group's committed input offsets.
    committed: HashMap<i32, Positions>,
    app: String,
}

impl Restorer {
    pub fn new(config: &ClientConfig, app: &str) -> Result<Restorer, KafkaError> {
        Ok(Restorer {
            consumer: config.create()?,
            replays: Vec::new(),
            committed: HashMap::new(),
            app: app.to_string(),
        })
    }

    /// Starts restoring `task`. `changelogs` lists, per store, the
    /// changelog topic and the offset saved with the store. Returns
    /// `false` when there is nothing to replay.
    pub fn add(
        &mut self,
        task: i32,
        changelogs: &[(usize, String, i64)],
        committed: Positions,
    ) -> Result<bool, KafkaError> {
        let mut added = false;
        for (store, topic, saved) in changelogs {
            let (low, high) =
                self.consumer
                    .fetch_watermarks(topic, task, Duration::from_secs(10))?;
            let start = (*saved).max(low);
            if start >= high {
                continue;
            }
            tracing::info!(task, changelog = %topic, from = start, to = high, "Restoring state.");
            metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => topic.clone(), "partition" => task.to_string())
                .set((high - start) as f64);
            self.replays.push(Replay {
                task,
                topic: topic.clone(),
                store: *store,
                end: high,
                position: start,
                last_progress: Instant::now(),
            });
            added = true;
        }
        if added {
            self.committed.insert(task, committed);
            self.reassign()?;
        }
        Ok(added)
    }

    /// Stops restoring `task` (revoked before it finished).
    pub fn remove(&mut self, task: i32) -> Result<(), KafkaError> {
        let before = self.replays.len();
        self.replays.retain(|r| r.task != task);
        self.committed.remove(&task);
        if self.replays.len() != before {
            self.reassign()?;
        }
        Ok(())
    }

    pub fn is_restoring(&self) -> bool {
        !self.replays.is_empty()
    }

    fn reassign(&self) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        for r in &self.replays {
            list.add_partition_offset(&r.topic, r.task, Offset::Offset(r.position))?;
        }
        self.consumer.assign(&list)
    }

    /// Replays what is available within `budget`; returns progress per task.
    pub fn poll(&mut self, budget: Duration) -> Result<BTreeMap<i32, Progress>, KafkaError> {
        let mut progress: BTreeMap<i32, Progress> = BTreeMap::new();
        if self.replays.is_empty() {
            return Ok(progress);
        }
        let deadline = Instant::now() + budget;
        let mut handled = 0;
        while handled < BATCH {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let Some(message) = self.consumer.poll(remaining.min(Duration::from_millis(50))) else {
                break;
            };
            let message = message?;
            handled += 1;
            let Some(replay) = self
                .replays
                .iter_mut()
                .find(|r| r.task == message.partition() && r.topic == message.topic())
            else {
                continue;
            };
            let entry = progress.entry(replay.task).or_default();
            replay.position = message.offset() + 1;
            replay.last_progress = Instant::now();
            entry.offsets.insert(replay.topic.clone(), replay.position);
            let position = message
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == POSITION_HEADER))
                .and_then(|h| h.value)
                .and_then(Positions::decode);
            let committed = self.committed.get(&replay.task);
            let applies = match (position, committed) {
                (Some(position), Some(committed)) => position.committed_under(committed),
                _ => true,
            };
            if !applies {
                entry.skipped += 1;
                continue;
            }
            let Some(key) = message.key() else { continue };
            entry.restored += 1;
            entry.writes.push(RawWrite {
                store: replay.store,
                key: key.into(),
                value: message.payload().map(Box::from),
            });
            if Instant::now() > deadline {
                break;
            }
        }
        // Decide which partitions are done.
        let now = Instant::now();
        let mut finished = Vec::new();
        let positions = self.consumer.position().ok();
        for (index, replay) in self.replays.iter_mut().enumerate() {
            // The consumer's position moves past transaction markers that
            // are never delivered as records.
            if let Some(Offset::Offset(p)) = positions
                .as_ref()
                .and_then(|l| l.find_partition(&replay.topic, replay.task))
                .map(|e| e.offset())
                && p > replay.position
                && now.duration_since(replay.last_progress) > Duration::from_millis(200)
            {
                replay.position = p;
                progress
                    .entry(replay.task)
                    .or_default()
                    .offsets
                    .insert(replay.topic.clone(), p);
            }
            let idle = now.duration_since(replay.last_progress) > IDLE_DONE;
            if replay.position >= replay.end || idle {
                if replay.position < replay.end {
                    tracing::warn!(
                        task = replay.task,
                        changelog = %replay.topic,
                        position = replay.position,
                        end = replay.end,
                        "Changelog stopped short of its end offset (an open transaction?); continuing with what was committed."
                    );
                }
                finished.push(index);
            }
            metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => replay.topic.clone(), "partition" => replay.task.to_string())
                .set((replay.end - replay.position).max(0) as f64);
        }
        for (task, p) in &progress {
            if p.restored > 0 {
                metrics::counter!(telemetry::RESTORE_RECORDS, "topology" => self.app.clone(), "partition" => task.to_string())
                    .increment(p.restored);
            }
            if p.skipped > 0 {
                metrics::counter!(telemetry::RESTORE_SKIPPED, "topology" => self.app.clone(), "partition" => task.to_string())
                    .increment(p.skipped);
            }
        }
        if !finished.is_empty() {
            for index in finished.into_iter().rev() {
                self.replays.remove(index);
            }
            let tasks: Vec<i32> = self.committed.keys().copied().collect();
            for task in tasks {
                if !self.replays.iter().any(|r| r.task == task) {
                    self.committed.remove(&task);
                    progress.entry(task).or_default().done = true;
                }
            }
            self.reassign()?;
        }
        Ok(progress)
    }
}
