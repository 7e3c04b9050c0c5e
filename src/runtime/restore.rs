//! Restoring task state from changelogs.
//!
//! When a task is assigned, its store already holds everything up to the
//! changelog offsets saved with its last commit (nothing, for a new or
//! wiped state directory). The restorer replays each changelog partition of
//! the task from there to its end and applies every record it reads: it
//! reads under read_committed, so records of transactions that did not
//! commit never reach it. The offset saved with the restored state is the
//! one after the last record applied, so a restore that stops midway
//! resumes there.
//!
//! There is one read_committed consumer per changelog topic, with
//! `enable.partition.eof`: reaching the end of a partition (its last stable
//! offset) is reported by librdkafka, without blocking watermark queries,
//! and is unambiguous because each consumer reads a single topic. An end
//! with records past it (a transaction not decided yet, see
//! `ChangelogReader::undecided`) is not the end: the restore waits for the
//! verdict, so state another owner committed is never left out. A
//! partition that reaches its end is unassigned alone (incrementally); the
//! others keep their fetch position. Tasks restore independently and in
//! steps between processing, so a restoring task never blocks the others.
//! What is left to restore is known from where each changelog partition
//! ends when its replay starts, then from the consumers' statistics (which
//! say nothing before a partition's first fetch).
//!
//! **Speed.** A restore is bulk work: each step uses its whole time budget
//! rather than a fixed count of records, taking turns between changelogs;
//! the consumers prefetch in large fetches without librdkafka's one-second
//! back-off when their queue fills up ([`Restorer::new`]); and the store writes
//! restored batches in bulk, without its write-ahead log
//! ([`crate::state::StateBackend::apply_restored`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, Message, Statistics};

use super::changelog::EVENT_TIME_HEADER;
use super::fetch::RawHeaders;
use crate::state::RawWrite;
use crate::telemetry;

/// Records taken from one changelog's consumer before the next one's turn.
const TURN: usize = 2_000;

/// The longest a step waits for a record when none is ready.
const WAIT: Duration = Duration::from_millis(2);

/// librdkafka settings of the restore consumers, unless the topology sets
/// them (`kafka.consumer`). Memory first: there is one restore consumer per
/// store, each holding a prefetch queue per restoring partition, so
/// librdkafka's default queue (64 MiB per partition) would let a restore
/// of 3 stores over 4 partitions hold over 700 MiB outside the `state:`
/// budget. The bounds here cap that at 4 MiB queued + 1 MiB fetched per
/// store and partition (60 MiB for 12): still several hundred
/// milliseconds of records for a partition at full restore speed. (A
/// record larger than the fetch size is still fetched whole.)
/// Then speed: when a queue was full, fetch again after 10 ms rather than
/// librdkafka's default of one second (the setting the processing
/// consumer uses too; with the default, a restore waits on an empty queue
/// for most of every second); an empty fetch at the end of a changelog
/// returns after 50 ms, so a restore's end is seen soon.
const FETCH_DEFAULTS: [(&str, &str); 4] = [
    ("queued.max.messages.kbytes", "4096"),
    ("max.partition.fetch.bytes", "1048576"),
    ("fetch.queue.backoff.ms", "10"),
    ("fetch.wait.max.ms", "50"),
];

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

/// The offsets each changelog partition of a task holds, low to high
/// watermark ([`Restorer::ends`]).
pub(crate) struct ChangelogEnds {
    task: i32,
    held: BTreeMap<String, (i64, i64)>,
}

impl ChangelogEnds {
    /// The changelog partitions whose `saved` offset (as stored with the
    /// task's state) lies outside what the topic holds: the topic was
    /// re-created, or truncated past it (DeleteRecords, retention on a
    /// changelog that is not compacted). Local state is then not a prefix
    /// of the changelog, and only a full restore can be trusted. (Against
    /// the last stable offset, a transaction whose markers are not written
    /// yet would look like a truncation and throw good state away.)
    pub(crate) fn out_of_range(&self, saved: &BTreeMap<String, i64>) -> Vec<String> {
        let task = self.task;
        self.held
            .iter()
            .filter_map(|(topic, &(low, high))| {
                let from = *saved.get(topic)?;
                (from < low || from > high).then(|| {
                    format!(
                        "{topic} partition {task}: state is at offset {from}, the topic holds {low}..{high}"
                    )
                })
            })
            .collect()
    }
}

/// The restore consumer of one changelog topic.
struct ChangelogReader {
    topic: String,
    store: usize,
    consumer: BaseConsumer<StatsContext>,
    remaining: Arc<Remaining>,
    /// Partitions (tasks) being replayed.
    replaying: BTreeMap<i32, Replay>,
}

/// One changelog partition being replayed.
struct Replay {
    /// The offset after the last record applied: saved with the restored
    /// state, and where an interrupted restore resumes.
    resume: i64,
    /// Since when the replay has been at the end a read_committed reader
    /// sees, waiting for a transaction the broker has not decided yet.
    waiting: Option<Waiting>,
}

/// A replay waiting for a transaction's verdict ([`ChangelogReader::undecided`]).
struct Waiting {
    since: Instant,
    warned: Option<Instant>,
    position: i64,
    high: i64,
}

/// How long a replay waits for a verdict before it says so, and then how
/// often: a transaction the broker never decides (its coordinator
/// unavailable) would otherwise hold the task silently.
const WAITING_WARNING: Duration = Duration::from_secs(15);

/// How often a restore that goes on says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The event time a changelog record was stamped with, from the first
/// header of that name. Names are compared as bytes: a changelog topic
/// another client wrote to may carry any.
fn event_time<'a>(mut headers: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Option<i64> {
    let (_, value) = headers.find(|(name, _)| *name == EVENT_TIME_HEADER.as_bytes())?;
    std::str::from_utf8(value?).ok()?.parse().ok()
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
        self.replaying.insert(
            task,
            Replay {
                resume: from,
                waiting: None,
            },
        );
        Ok(())
    }

    /// Applies one changelog record.
    fn handle(
        (topic, store): (&str, usize),
        replaying: &mut BTreeMap<i32, Replay>,
        message: &BorrowedMessage<'_>,
        progress: &mut BTreeMap<i32, Progress>,
    ) {
        let task = message.partition();
        let Some(replay) = replaying.get_mut(&task) else {
            return;
        };
        let entry = progress.entry(task).or_default();
        replay.resume = message.offset() + 1;
        replay.waiting = None;
        if let Some(ts) = event_time(RawHeaders::of_message(message)) {
            entry.event_time = Some(entry.event_time.map_or(ts, |t| t.max(ts)));
        }
        if let Some(key) = message.key() {
            entry.restored += 1;
            entry.writes.push(RawWrite {
                store,
                key: key.into(),
                value: message.payload().map(Box::from),
            });
        }
        match entry.offsets.get_mut(topic) {
            Some(offset) => *offset = replay.resume,
            None => {
                entry.offsets.insert(topic.to_string(), replay.resume);
            }
        }
    }

    /// Applies up to [`TURN`] records that are ready, the first waited
    /// for up to `wait`, and stops the partitions that reach their end;
    /// returns how many messages (records or ends) it handled.
    fn take_turn(
        &mut self,
        wait: Duration,
        progress: &mut BTreeMap<i32, Progress>,
    ) -> Result<usize, KafkaError> {
        let mut handled = 0;
        while handled < TURN && !self.replaying.is_empty() {
            let first = if handled == 0 { wait } else { Duration::ZERO };
            let Some(result) = self.consumer.poll(first) else {
                break;
            };
            handled += 1;
            match result {
                // Fields apart: the message borrows the consumer.
                Ok(message) => ChangelogReader::handle(
                    (&self.topic, self.store),
                    &mut self.replaying,
                    &message,
                    progress,
                ),
                Err(KafkaError::PartitionEOF(task)) => {
                    if self.undecided(task) {
                        continue;
                    }
                    if let Some(replay) = self.stop(task)? {
                        progress
                            .entry(task)
                            .or_default()
                            .offsets
                            .insert(self.topic.clone(), replay.resume);
                    }
                }
                Err(e @ KafkaError::MessageConsumptionFatal(_)) => return Err(e),
                // Transient (a broker restarting, a connection reset):
                // librdkafka reconnects and resumes the fetch on its
                // own; the restore goes on where it was.
                Err(error) => {
                    tracing::debug!(%error, "Restore consumer error; retrying.");
                    break;
                }
            }
        }
        Ok(handled)
    }

    /// Whether `task`'s partition, at the end a read_committed reader
    /// sees (its last stable offset), still holds records past it: a
    /// transaction not decided yet. That is a previous owner's (or this
    /// instance's previous run's) whose commit the broker has accepted and
    /// not yet marked, or an abandoned one it will abort; only the owner
    /// of a task writes its changelog, and this task is not running. Its
    /// records may be committed state, so the restore waits for the
    /// verdict: ending here would leave them out of the local state for
    /// good, since the offset saved at the next commit lies past them.
    /// The high watermark is the one of the fetch that reached the end.
    fn undecided(&mut self, task: i32) -> bool {
        let Some(high) = cached_high_watermark(&self.consumer, &self.topic, task) else {
            return false;
        };
        let position = self.consumer.position().ok().and_then(|list| {
            match list.find_partition(&self.topic, task)?.offset() {
                Offset::Offset(offset) => Some(offset),
                _ => None,
            }
        });
        let Some(position) = position else {
            return false;
        };
        if high > position {
            tracing::debug!(changelog = %self.topic, task, position, high, "A transaction on the changelog is not decided yet; the restore waits for it.");
            if let Some(replay) = self.replaying.get_mut(&task) {
                let waiting = replay.waiting.get_or_insert(Waiting {
                    since: Instant::now(),
                    warned: None,
                    position,
                    high,
                });
                waiting.position = position;
                waiting.high = high;
            }
            return true;
        }
        false
    }

    /// Says which replays have waited long for a verdict.
    fn warn_waiting(&mut self) {
        let now = Instant::now();
        for (task, replay) in &mut self.replaying {
            let Some(waiting) = &mut replay.waiting else {
                continue;
            };
            let due = now.duration_since(waiting.since) >= WAITING_WARNING
                && waiting
                    .warned
                    .is_none_or(|at| now.duration_since(at) >= WAITING_WARNING);
            if due {
                waiting.warned = Some(now);
                tracing::warn!(
                    changelog = %self.topic,
                    task,
                    position = waiting.position,
                    high_watermark = waiting.high,
                    waited_s = now.duration_since(waiting.since).as_secs(),
                    "The restore is waiting for a transaction on the changelog that the broker has not decided yet."
                );
            }
        }
    }

    /// Stops replaying `task`'s partition; returns where it got to.
    fn stop(&mut self, task: i32) -> Result<Option<Replay>, KafkaError> {
        let Some(next) = self.replaying.remove(&task) else {
            return Ok(None);
        };
        let mut list = TopicPartitionList::new();
        list.add_partition(&self.topic, task);
        self.consumer.incremental_unassign(&list)?;
        Ok(Some(next))
    }
}

/// The high watermark of `topic` `partition` that the last fetch response
/// carried, as librdkafka keeps it (no request; rust-rdkafka does not wrap
/// `rd_kafka_get_watermark_offsets`). `None` before any fetch answered.
fn cached_high_watermark<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1_i64, -1_i64);
    // SAFETY: the client pointer is live for the consumer's lifetime, the
    // topic name is a NUL-terminated string that outlives the call, and
    // the out-parameters are valid for writes.
    let error = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (error == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}

/// What one call to [`Restorer::poll`] produced for a task.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) writes: Vec<RawWrite>,
    /// Next changelog offset per changelog topic, to save with the writes.
    pub(crate) offsets: BTreeMap<String, i64>,
    pub(crate) restored: u64,
    /// Every changelog partition of the task is caught up.
    pub(crate) done: bool,
    /// The latest event time stamped on an applied record.
    pub(crate) event_time: Option<i64>,
}

/// A task being restored.
struct Restoring {
    started: Instant,
    restored: u64,
}

pub(crate) struct Restorer {
    readers: Vec<ChangelogReader>,
    /// Asks where the changelogs end under read_uncommitted: their high
    /// watermarks, which a transaction still being decided does not hide
    /// (the readers' own answer would be the last stable offset).
    watermarks: BaseConsumer,
    tasks: HashMap<i32, Restoring>,
    app: String,
    /// Records restored since the restoring tasks began (a task that
    /// finishes leaves its count here), when the progress was last logged
    /// (or the restore began), and the records restored by then.
    restored: u64,
    last_progress: Instant,
    restored_at_last_progress: u64,
}

impl Restorer {
    /// One reader per changelog topic; `changelogs[i]` belongs to store `i`.
    pub(crate) fn new(
        config: &ClientConfig,
        app: &str,
        changelogs: &[String],
    ) -> Result<Restorer, KafkaError> {
        let mut config = config.clone();
        for (key, value) in FETCH_DEFAULTS {
            if config.get(key).is_none() {
                config.set(key, value);
            }
        }
        let watermarks = config
            .clone()
            .set("isolation.level", "read_uncommitted")
            .create()?;
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
            watermarks,
            tasks: HashMap::new(),
            app: app.to_string(),
            restored: 0,
            last_progress: Instant::now(),
            restored_at_last_progress: 0,
        })
    }

    /// What each changelog partition of `task` holds now, its low and
    /// high watermarks.
    ///
    /// The end is the high watermark, not the last stable offset: a
    /// transaction this task committed whose markers the broker has yet to
    /// write (it restarted between the commit and the markers) holds the
    /// last stable offset below records the state already has
    /// ([`ChangelogEnds::out_of_range`]).
    ///
    /// Each question waits `timeout` at most: it runs on the polling
    /// thread, and a broker that does not answer now is asked again at the
    /// next round while the other tasks go on. Only the changelogs with a
    /// `saved` offset must answer (their range decides whether local state
    /// can be kept); for the others the ends only seed what is left to
    /// restore, which the consumers' statistics give later anyway, so a
    /// question they leave unanswered does not hold the task back.
    pub(crate) fn ends(
        &self,
        task: i32,
        saved: &BTreeMap<String, i64>,
        timeout: Duration,
    ) -> Result<ChangelogEnds, KafkaError> {
        let mut held = BTreeMap::new();
        for reader in &self.readers {
            match self
                .watermarks
                .fetch_watermarks(&reader.topic, task, timeout)
            {
                Ok(range) => {
                    held.insert(reader.topic.clone(), range);
                }
                Err(error) if !saved.contains_key(&reader.topic) => {
                    tracing::debug!(task, changelog = %reader.topic, %error, "The changelog's ends are not known yet; the restore starts without them.");
                }
                Err(error) => return Err(error),
            }
        }
        Ok(ChangelogEnds { task, held })
    }

    /// Starts restoring `task` from `saved` (next offset per changelog
    /// topic, as stored with its state), with what is left to restore
    /// reckoned from `ends` until the consumers' statistics say.
    pub(crate) fn add(
        &mut self,
        task: i32,
        saved: &BTreeMap<String, i64>,
        ends: &ChangelogEnds,
    ) -> Result<(), KafkaError> {
        for reader in &mut self.readers {
            let from = saved.get(&reader.topic).copied().unwrap_or(0);
            tracing::debug!(task, changelog = %reader.topic, from, "Replaying changelog.");
            reader.start(task, from)?;
            if let Some(&(low, high)) = ends.held.get(&reader.topic) {
                let left = (high - from.max(low)).max(0);
                reader
                    .remaining
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(task, left);
            }
        }
        if self.tasks.is_empty() {
            // A restore that ends within the period says nothing but its
            // end.
            self.last_progress = Instant::now();
            self.restored = 0;
            self.restored_at_last_progress = 0;
        }
        self.tasks.insert(
            task,
            Restoring {
                started: Instant::now(),
                restored: 0,
            },
        );
        Ok(())
    }

    /// Every [`PROGRESS_EVERY`] while tasks restore: how many, the
    /// records restored and left, and the rate since the last line.
    fn log_progress(&mut self) {
        let now = Instant::now();
        let period = now.duration_since(self.last_progress);
        if self.tasks.is_empty() || period < PROGRESS_EVERY {
            return;
        }
        let restored = self.restored;
        let remaining: i64 = self
            .readers
            .iter()
            .map(|reader| {
                let remaining = reader.remaining.0.lock().unwrap_or_else(|e| e.into_inner());
                reader
                    .replaying
                    .keys()
                    .filter_map(|task| remaining.get(task))
                    .sum::<i64>()
            })
            .sum();
        let per_second =
            restored.saturating_sub(self.restored_at_last_progress) as f64 / period.as_secs_f64();
        tracing::info!(
            tasks = self.tasks.len(),
            restored,
            remaining,
            per_second = per_second.round() as u64,
            "Restoring."
        );
        self.restored_at_last_progress = restored;
        self.last_progress = now;
    }

    /// Stops restoring `task` (revoked before it finished).
    pub(crate) fn remove(&mut self, task: i32) -> Result<(), KafkaError> {
        if self.tasks.remove(&task).is_none() {
            return Ok(());
        }
        for reader in &mut self.readers {
            reader.stop(task)?;
        }
        Ok(())
    }

    pub(crate) fn is_restoring(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Replays what is available within `budget`; returns progress per task.
    pub(crate) fn poll(&mut self, budget: Duration) -> Result<BTreeMap<i32, Progress>, KafkaError> {
        let mut progress: BTreeMap<i32, Progress> = BTreeMap::new();
        if self.tasks.is_empty() {
            return Ok(progress);
        }
        self.replay_available(budget, &mut progress)?;
        for reader in &mut self.readers {
            reader.warn_waiting();
        }
        self.report_remaining();
        self.account(&mut progress);
        Ok(progress)
    }

    /// Gives each changelog reader its turn, again and again, until
    /// `budget` is spent or no partition is left to replay, adding what
    /// they apply to `progress`.
    fn replay_available(
        &mut self,
        budget: Duration,
        progress: &mut BTreeMap<i32, Progress>,
    ) -> Result<(), KafkaError> {
        let deadline = Instant::now() + budget;
        let mut wait = Duration::ZERO;
        loop {
            let mut handled_any = false;
            for reader in &mut self.readers {
                let handled = reader.take_turn(wait, progress)?;
                handled_any |= handled > 0;
            }
            let now = Instant::now();
            if now >= deadline || self.readers.iter().all(|r| r.replaying.is_empty()) {
                break;
            }
            // Nothing was ready: each consumer waits a little in its turn.
            wait = if handled_any {
                Duration::ZERO
            } else {
                deadline.saturating_duration_since(now).min(WAIT)
            };
        }
        Ok(())
    }

    /// Sets the gauge of the records left to restore, per changelog and
    /// task being replayed.
    fn report_remaining(&self) {
        for reader in &self.readers {
            let remaining = reader.remaining.0.lock().unwrap_or_else(|e| e.into_inner());
            for task in reader.replaying.keys() {
                if let Some(left) = remaining.get(task) {
                    metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => reader.topic.clone(), "partition" => task.to_string())
                        .set(*left as f64);
                }
            }
        }
    }

    /// Marks done in `progress` the tasks that no changelog replays any
    /// more, counts what each task restored, says how far the restore is,
    /// and ends the restore of the tasks done.
    fn account(&mut self, progress: &mut BTreeMap<i32, Progress>) {
        let finished: Vec<i32> = self
            .tasks
            .keys()
            .copied()
            .filter(|task| self.readers.iter().all(|r| !r.replaying.contains_key(task)))
            .collect();
        for task in &finished {
            progress.entry(*task).or_default().done = true;
        }
        for (task, p) in progress.iter_mut() {
            if let Some(restoring) = self.tasks.get_mut(task) {
                restoring.restored += p.restored;
            }
            self.restored += p.restored;
            if p.restored > 0 {
                metrics::counter!(telemetry::RESTORE_RECORDS, "topology" => self.app.clone(), "partition" => task.to_string())
                    .increment(p.restored);
            }
        }
        self.log_progress();
        for task in finished {
            if let Some(done) = self.tasks.remove(&task) {
                tracing::info!(
                    task,
                    restored = done.restored,
                    millis = done.started.elapsed().as_millis() as u64,
                    "Restore finished."
                );
                for reader in &self.readers {
                    metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => reader.topic.clone(), "partition" => task.to_string())
                        .set(0.0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `streamfold.event_time` header holds the event time; a
    /// header name that is not UTF-8 or a value that is not a number is
    /// no reason to stop.
    #[test]
    fn the_event_time_is_the_first_header_of_its_name() {
        let header = |key: &'static [u8], value: Option<&'static [u8]>| (key, value);
        let headers = [
            header(b"tr\xffce", Some(b"x")),
            header(EVENT_TIME_HEADER.as_bytes(), Some(b"12")),
            header(EVENT_TIME_HEADER.as_bytes(), Some(b"13")),
        ];
        assert_eq!(event_time(headers.into_iter()), Some(12));
        let bad = [header(EVENT_TIME_HEADER.as_bytes(), Some(b"soon"))];
        assert_eq!(event_time(bad.into_iter()), None);
        assert_eq!(event_time(std::iter::empty()), None);
    }
}
