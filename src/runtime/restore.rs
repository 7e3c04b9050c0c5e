//! Restoring task state from changelogs.
//!
//! When a task is assigned, its store already holds everything up to the
//! changelog offsets saved with its last commit (nothing, for a new or
//! wiped state directory). The restorer replays each changelog partition of
//! the task from there to its end, skipping records of transactions that
//! did not commit ([`super::changelog`]): the records of a partition's
//! newest transaction are held back until the next transaction's
//! `streamfold.base`, or at the end the group's committed offset of the
//! changelog partition, decides them; records without the writer chain's
//! stamps are decided by the position rule. The offset saved with the
//! restored state is the one after the last record applied, so a restore
//! that stops midway resumes before the records it still held.
//!
//! There is one read_committed consumer per changelog topic, with
//! `enable.partition.eof`: reaching the end of a partition (its last stable
//! offset) is reported by librdkafka, without blocking watermark queries,
//! and is unambiguous because each consumer reads a single topic. A
//! partition that reaches its end is unassigned alone (incrementally); the
//! others keep their fetch position. Tasks restore independently and in
//! steps between processing, so a restoring task never blocks the others.
//! Remaining records come from the consumers' statistics.
//!
//! **Speed.** A restore is bulk work: each step uses its whole time budget
//! rather than a fixed count of records, taking turns between changelogs;
//! the consumers prefetch in large fetches without librdkafka's one-second
//! back-off when their queue fills up ([`Restorer::new`]); a record's
//! stamps are read in one pass over its headers, and the position rule's
//! verdict is decoded once per transaction, not once per record (every
//! record of a transaction carries the same stamp); and the store writes
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

use super::changelog::{
    BASE_HEADER, ChangelogOffsets, EVENT_TIME_HEADER, POSITION_HEADER, Positions, TXN_HEADER,
    Verdict,
};
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
    /// Records not decided yet, per transaction, in changelog order.
    held: Vec<Held>,
    /// The last position stamp seen and the position rule's verdict on
    /// it: a transaction's records all carry the same stamp.
    stamp: Option<(Vec<u8>, Verdict)>,
    /// The highest base of this changelog seen in the replay.
    base: Option<i64>,
}

/// `base`, a new transaction's base of the partition being replayed, as
/// the writer chain may use it. Bases only grow along a partition (each
/// names where the last committed writer before its transaction ended,
/// and that writer is never older than the one an earlier transaction
/// named), so one behind a base seen before is wrong and decides nothing
/// (`Err`): streamfold before RELIABILITY.md finding 16 wrote 0 after a
/// changelog record acknowledged without its offset, which would disown
/// the committed records held before it.
fn chain_base(seen: &mut Option<i64>, base: Option<i64>) -> Result<Option<i64>, i64> {
    match (base, *seen) {
        (Some(base), Some(before)) if base < before => Err(base),
        (Some(base), _) => {
            *seen = Some(base);
            Ok(Some(base))
        }
        (None, _) => Ok(None),
    }
}

impl Replay {
    fn new(resume: i64) -> Replay {
        Replay {
            resume,
            held: Vec::new(),
            stamp: None,
            base: None,
        }
    }

    /// The position rule's verdict on a record stamped `position`.
    fn verdict(&mut self, position: &[u8], restoring: &Restoring) -> Verdict {
        match &self.stamp {
            Some((stamp, verdict)) if stamp.as_slice() == position => *verdict,
            _ => {
                let verdict = Positions::decode(position).map_or(Verdict::Committed, |p| {
                    p.verdict(&restoring.committed, &restoring.inputs)
                });
                self.stamp = Some((position.to_vec(), verdict));
                verdict
            }
        }
    }
}

/// The runtime's stamps on a changelog record, read in one pass.
struct Stamps<'a> {
    position: Option<&'a [u8]>,
    event_time: Option<&'a [u8]>,
    txn: Option<&'a [u8]>,
    base: Option<&'a [u8]>,
}

impl<'a> Stamps<'a> {
    fn of(message: &'a BorrowedMessage<'_>) -> Stamps<'a> {
        Stamps::from_headers(RawHeaders::of_message(message))
    }

    /// The value of the first header of each name, as a lookup by name
    /// finds it. Names are compared as bytes: a changelog topic another
    /// client wrote to may carry any.
    fn from_headers(headers: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Stamps<'a> {
        const NAMES: [&str; 4] = [POSITION_HEADER, EVENT_TIME_HEADER, TXN_HEADER, BASE_HEADER];
        let mut first: [Option<Option<&'a [u8]>>; 4] = [None; 4];
        for (name, value) in headers {
            let Some(slot) = NAMES.iter().position(|n| n.as_bytes() == name) else {
                continue;
            };
            first[slot].get_or_insert(value);
        }
        let [position, event_time, txn, base] = first.map(Option::flatten);
        Stamps {
            position,
            event_time,
            txn,
            base,
        }
    }
}

/// The records of one transaction, held until it is decided.
struct Held {
    txn: Vec<u8>,
    records: Vec<Record>,
}

/// One changelog record as the restore keeps it.
struct Record {
    offset: i64,
    /// `None` for a record without a key (nothing to write).
    write: Option<RawWrite>,
    event_time: Option<i64>,
    /// What the position rule says of it.
    verdict: Verdict,
}

/// Applies or skips records of one changelog partition for one task.
struct Decide<'a> {
    progress: &'a mut Progress,
    resume: &'a mut i64,
}

impl Decide<'_> {
    fn apply(&mut self, record: Record) {
        *self.resume = record.offset + 1;
        if let Some(ts) = record.event_time {
            self.progress.event_time = Some(self.progress.event_time.map_or(ts, |t| t.max(ts)));
        }
        if let Some(write) = record.write {
            self.progress.restored += 1;
            self.progress.writes.push(write);
        }
    }

    /// Decided by the writer chain: a record before `end` (the offset
    /// after the last committed writer's records) committed, one at or
    /// beyond it did not.
    fn by_chain(&mut self, held: Vec<Held>, end: i64) {
        for record in held.into_iter().flat_map(|h| h.records) {
            if record.offset < end {
                self.apply(record);
            } else {
                self.progress.skipped += 1;
            }
        }
    }

    /// Decided by the position rule, where the chain is silent.
    fn by_position(&mut self, record: Record) {
        match record.verdict {
            Verdict::Committed => self.apply(record),
            Verdict::Uncommitted => self.progress.skipped += 1,
            Verdict::NeverCommitted => {
                self.progress.skipped += 1;
                self.progress.never_committed += 1;
            }
            Verdict::Unknown => {
                self.progress.unverified += 1;
                self.apply(record);
            }
        }
    }

    /// Decides every held record: by the chain when `end` (where the last
    /// committed writer ended) is known; otherwise a record before `claim`
    /// (a base some record of the task names) committed, and the position
    /// rule decides the rest.
    fn all(&mut self, held: Vec<Held>, end: Option<i64>, claim: Option<i64>) {
        match end {
            Some(end) => self.by_chain(held, end),
            None => {
                for record in held.into_iter().flat_map(|h| h.records) {
                    if claim.is_some_and(|claim| record.offset < claim) {
                        self.apply(record);
                    } else {
                        self.by_position(record);
                    }
                }
            }
        }
    }
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
        self.replaying.insert(task, Replay::new(from));
        Ok(())
    }

    /// Holds, applies or skips one changelog record.
    fn handle(
        (topic, store): (&str, usize),
        replaying: &mut BTreeMap<i32, Replay>,
        message: &BorrowedMessage<'_>,
        tasks: &mut HashMap<i32, Restoring>,
        progress: &mut BTreeMap<i32, Progress>,
    ) {
        let task = message.partition();
        let Some(replay) = replaying.get_mut(&task) else {
            return;
        };
        let stamps = Stamps::of(message);
        let verdict = match (stamps.position, tasks.get(&task)) {
            (Some(position), Some(restoring)) => replay.verdict(position, restoring),
            _ => Verdict::Committed,
        };
        let record = Record {
            offset: message.offset(),
            write: message.key().map(|key| RawWrite {
                store,
                key: key.into(),
                value: message.payload().map(Box::from),
            }),
            event_time: stamps
                .event_time
                .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok()),
            verdict,
        };
        let entry = progress.entry(task).or_default();
        let mut decide = Decide {
            progress: entry,
            resume: &mut replay.resume,
        };
        match stamps.txn {
            // Written before the writer chain existed.
            None => {
                decide.all(std::mem::take(&mut replay.held), None, None);
                decide.by_position(record);
            }
            // Most records belong to the newest transaction held.
            Some(txn) => match replay.held.iter_mut().rev().find(|h| h.txn == txn) {
                Some(held) => held.records.push(record),
                None => {
                    // A new transaction: its base decides every one held
                    // before it, and its bases of the task's other
                    // changelogs are claims for them.
                    let bases = stamps.base.and_then(ChangelogOffsets::decode);
                    let base = bases.as_ref().and_then(|b| b.0.get(topic).copied());
                    // A wrong base leaves the held records to the position
                    // rule.
                    let base = chain_base(&mut replay.base, base).unwrap_or_else(|_| {
                        decide.progress.distrusted_bases += 1;
                        None
                    });
                    if let (Some(bases), Some(restoring)) = (bases, tasks.get_mut(&task)) {
                        for (topic, base) in bases.0 {
                            let claim = restoring.claims.entry(topic).or_insert(base);
                            *claim = (*claim).max(base);
                        }
                    }
                    decide.all(std::mem::take(&mut replay.held), base, None);
                    replay.held.push(Held {
                        txn: txn.to_vec(),
                        records: vec![record],
                    });
                }
            },
        }
        match entry.offsets.get_mut(topic) {
            Some(offset) => *offset = replay.resume,
            None => {
                entry.offsets.insert(topic.to_string(), replay.resume);
            }
        }
    }

    /// Stops replaying `task`'s partition; returns what it still held.
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

/// What one call to [`Restorer::poll`] produced for a task.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) writes: Vec<RawWrite>,
    /// Next changelog offset per changelog topic, to save with the writes.
    pub(crate) offsets: BTreeMap<String, i64>,
    pub(crate) restored: u64,
    pub(crate) skipped: u64,
    /// Of the skipped, those whose input has no committed offset at all.
    pub(crate) never_committed: u64,
    /// Records applied although their transaction could not be verified.
    pub(crate) unverified: u64,
    /// Bases behind an earlier one of the same partition, not trusted.
    pub(crate) distrusted_bases: u64,
    /// Every changelog partition of the task is caught up.
    pub(crate) done: bool,
    /// The latest event time stamped on an applied record.
    pub(crate) event_time: Option<i64>,
}

/// A task being restored.
struct Restoring {
    committed: Positions,
    /// The group's committed offset per changelog topic: where the last
    /// committed writer's records end.
    ends: BTreeMap<String, i64>,
    /// The highest base any record of the task named, per changelog topic.
    claims: BTreeMap<String, i64>,
    /// Changelog partitions read to their end, with what they still hold
    /// until every partition of the task is (a later one may name a base
    /// that decides them).
    finished: Vec<(String, Replay)>,
    /// The task's current input topics.
    inputs: Vec<String>,
    started: Instant,
    restored: u64,
    skipped: u64,
    never_committed: u64,
    unverified: u64,
    distrusted_bases: u64,
}

pub(crate) struct Restorer {
    readers: Vec<ChangelogReader>,
    tasks: HashMap<i32, Restoring>,
    app: String,
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
    pub(crate) fn out_of_range(
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
    /// rule, and `ends` its committed offsets of the changelog partitions,
    /// which decide each partition's last transaction.
    pub(crate) fn add(
        &mut self,
        task: i32,
        saved: &BTreeMap<String, i64>,
        committed: Positions,
        ends: BTreeMap<String, i64>,
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
                ends,
                claims: BTreeMap::new(),
                finished: Vec::new(),
                inputs,
                started: Instant::now(),
                restored: 0,
                skipped: 0,
                never_committed: 0,
                unverified: 0,
                distrusted_bases: 0,
            },
        );
        Ok(())
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
        let deadline = Instant::now() + budget;
        let mut wait = Duration::ZERO;
        loop {
            let mut handled_any = false;
            for reader in &mut self.readers {
                let mut handled = 0;
                while handled < TURN && !reader.replaying.is_empty() {
                    let first = if handled == 0 { wait } else { Duration::ZERO };
                    let Some(result) = reader.consumer.poll(first) else {
                        break;
                    };
                    handled += 1;
                    match result {
                        // Fields apart: the message borrows the consumer.
                        Ok(message) => ChangelogReader::handle(
                            (&reader.topic, reader.store),
                            &mut reader.replaying,
                            &message,
                            &mut self.tasks,
                            &mut progress,
                        ),
                        Err(KafkaError::PartitionEOF(task)) => {
                            // Decided once every partition of the task is read.
                            if let (Some(replay), Some(restoring)) =
                                (reader.stop(task)?, self.tasks.get_mut(&task))
                            {
                                restoring.finished.push((reader.topic.clone(), replay));
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
        for reader in &self.readers {
            let remaining = reader.remaining.0.lock().unwrap_or_else(|e| e.into_inner());
            for task in reader.replaying.keys() {
                if let Some(left) = remaining.get(task) {
                    metrics::gauge!(telemetry::RESTORE_REMAINING, "topology" => self.app.clone(), "store" => reader.topic.clone(), "partition" => task.to_string())
                        .set(*left as f64);
                }
            }
        }
        let finished: Vec<i32> = self
            .tasks
            .keys()
            .copied()
            .filter(|task| self.readers.iter().all(|r| !r.replaying.contains_key(task)))
            .collect();
        for task in &finished {
            let Some(restoring) = self.tasks.get_mut(task) else {
                continue;
            };
            let entry = progress.entry(*task).or_default();
            for (topic, replay) in std::mem::take(&mut restoring.finished) {
                let mut resume = replay.resume;
                Decide {
                    progress: entry,
                    resume: &mut resume,
                }
                .all(
                    replay.held,
                    restoring.ends.get(&topic).copied(),
                    restoring.claims.get(&topic).copied(),
                );
                entry.offsets.insert(topic, resume);
            }
            entry.done = true;
        }
        for (task, p) in &mut progress {
            if let Some(restoring) = self.tasks.get_mut(task) {
                restoring.restored += p.restored;
                restoring.skipped += p.skipped;
                restoring.unverified += p.unverified;
                restoring.never_committed += p.never_committed;
                restoring.distrusted_bases += p.distrusted_bases;
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
                if done.distrusted_bases > 0 {
                    tracing::warn!(
                        task,
                        bases = done.distrusted_bases,
                        "Restore found changelog records naming a last committed writer behind one \
                         named before them (written by streamfold before RELIABILITY.md finding 16, \
                         after a record acknowledged without its offset); the records they would \
                         have disowned were decided by their input positions instead."
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
        }
        Ok(progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, verdict: Verdict) -> Record {
        Record {
            offset,
            write: Some(RawWrite {
                store: 0,
                key: offset.to_string().into_bytes().into(),
                value: Some(Box::from(&b"v"[..])),
            }),
            event_time: Some(offset * 10),
            verdict,
        }
    }

    fn held(txn: &str, offsets: std::ops::Range<i64>) -> Held {
        Held {
            txn: txn.as_bytes().to_vec(),
            records: offsets.map(|o| record(o, Verdict::Committed)).collect(),
        }
    }

    #[test]
    fn stamps_are_the_first_header_of_each_name() {
        let header = |key: &'static str, value: Option<&'static [u8]>| (key.as_bytes(), value);
        let stamps = Stamps::from_headers(
            [
                header("other", Some(b"x")),
                header(TXN_HEADER, None),
                header(POSITION_HEADER, Some(b"[]")),
                header(TXN_HEADER, Some(b"run:2")),
                header(EVENT_TIME_HEADER, Some(b"12")),
                header(POSITION_HEADER, Some(b"ignored")),
            ]
            .into_iter(),
        );
        assert_eq!(stamps.position, Some(&b"[]"[..]));
        assert_eq!(stamps.event_time, Some(&b"12"[..]));
        assert_eq!(stamps.txn, None, "the first `streamfold.txn` has no value");
        assert_eq!(stamps.base, None);
    }

    /// The verdict is kept per stamp, not per partition: a record with
    /// another stamp is decided again.
    #[test]
    fn the_position_verdict_is_decoded_once_per_stamp() {
        let restoring = Restoring {
            committed: Positions([(("in".to_string(), 0), 10)].into()),
            ends: BTreeMap::new(),
            claims: BTreeMap::new(),
            finished: Vec::new(),
            inputs: vec!["in".to_string()],
            started: Instant::now(),
            restored: 0,
            skipped: 0,
            never_committed: 0,
            unverified: 0,
            distrusted_bases: 0,
        };
        let stamp = |offset: i64| Positions([(("in".to_string(), 0), offset)].into()).encode();
        let mut replay = Replay::new(0);
        assert_eq!(replay.verdict(&stamp(10), &restoring), Verdict::Committed);
        assert_eq!(replay.verdict(&stamp(10), &restoring), Verdict::Committed);
        assert_eq!(replay.verdict(&stamp(11), &restoring), Verdict::Uncommitted);
        assert_eq!(replay.verdict(&stamp(9), &restoring), Verdict::Committed);
        assert_eq!(replay.verdict(b"not json", &restoring), Verdict::Committed);
    }

    fn applied(progress: &Progress) -> Vec<String> {
        progress
            .writes
            .iter()
            .map(|w| String::from_utf8(w.key.to_vec()).unwrap())
            .collect()
    }

    /// Scenario 10 of the exactly-once issue: a transaction aborted at a
    /// lower input position than a later committed one. The position rule
    /// alone would apply it; the writer chain does not.
    #[test]
    fn the_chain_skips_an_older_aborted_transaction_the_position_rule_would_apply() {
        let mut progress = Progress::default();
        let mut resume = 0;
        let mut decide = Decide {
            progress: &mut progress,
            resume: &mut resume,
        };
        // Committed `a` wrote 0..3 (base 0). Then `b` (base 3) wrote 4..6
        // and aborted; its retry `c` (base 3, the same last committed
        // writer) follows at 7: `b` is decided by `c`'s base.
        decide.by_chain(vec![held("a", 0..3)], 4);
        decide.by_chain(vec![held("b", 4..6)], 3);
        assert_eq!(applied(&progress), ["0", "1", "2"]);
        assert_eq!(progress.skipped, 2);
        assert_eq!(
            resume, 3,
            "a resumed restore starts after the last applied record"
        );
        assert_eq!(progress.event_time, Some(20));
    }

    #[test]
    fn the_group_s_committed_offset_decides_the_last_transaction() {
        let mut progress = Progress::default();
        let mut resume = 0;
        let mut decide = Decide {
            progress: &mut progress,
            resume: &mut resume,
        };
        // `c` (7..9) committed: the group's changelog offset is 9.
        decide.all(vec![held("b", 4..6), held("c", 7..9)], Some(9), None);
        assert_eq!(applied(&progress), ["4", "5", "7", "8"]);
        // Where it is 7, `c` did not commit.
        let mut progress = Progress::default();
        let mut resume = 0;
        Decide {
            progress: &mut progress,
            resume: &mut resume,
        }
        .all(vec![held("c", 7..9)], Some(7), Some(9));
        assert!(applied(&progress).is_empty());
        assert_eq!((progress.skipped, resume), (2, 0));
    }

    #[test]
    fn without_the_chain_the_position_rule_decides_and_undecidable_records_are_applied() {
        let mut progress = Progress::default();
        let mut resume = 0;
        let mut decide = Decide {
            progress: &mut progress,
            resume: &mut resume,
        };
        for (offset, verdict) in [
            (0, Verdict::Committed),
            (1, Verdict::Uncommitted),
            (2, Verdict::NeverCommitted),
            (3, Verdict::Unknown),
        ] {
            decide.by_position(record(offset, verdict));
        }
        assert_eq!(applied(&progress), ["0", "3"]);
        assert_eq!(
            (
                progress.skipped,
                progress.never_committed,
                progress.unverified
            ),
            (2, 1, 1)
        );
        assert_eq!(resume, 4);
    }

    /// Finding 16: a transaction committed records at 90 (its base 89);
    /// the next one, written by a version that lost the offset of its
    /// acknowledgement, names base 0. That base would disown offset 90;
    /// it is behind the one before it, so the position rule decides.
    #[test]
    fn a_base_behind_an_earlier_one_decides_nothing() {
        let mut seen = None;
        assert_eq!(chain_base(&mut seen, Some(89)), Ok(Some(89)));
        assert_eq!(chain_base(&mut seen, None), Ok(None));
        assert_eq!(chain_base(&mut seen, Some(0)), Err(0));
        assert_eq!(seen, Some(89), "a wrong base does not lower the floor");
        assert_eq!(chain_base(&mut seen, Some(89)), Ok(Some(89)));
        assert_eq!(chain_base(&mut seen, Some(134)), Ok(Some(134)));

        let mut progress = Progress::default();
        let mut resume = 0;
        let mut decide = Decide {
            progress: &mut progress,
            resume: &mut resume,
        };
        let base = chain_base(&mut Some(89), Some(0)).unwrap_or(None);
        decide.all(vec![held("a", 90..91)], base, None);
        assert_eq!(applied(&progress), ["90"], "its stamp says it committed");
    }

    /// The group's offsets are gone: a base named by any record of the
    /// task still proves what lies before it committed.
    #[test]
    fn without_the_group_s_offsets_a_named_base_decides_what_precedes_it() {
        let mut progress = Progress::default();
        let mut resume = 0;
        let mut held = held("a", 0..4);
        held.records[2].verdict = Verdict::NeverCommitted;
        held.records[3].verdict = Verdict::NeverCommitted;
        Decide {
            progress: &mut progress,
            resume: &mut resume,
        }
        .all(vec![held], None, Some(3));
        assert_eq!(applied(&progress), ["0", "1", "2"]);
        assert_eq!((progress.skipped, progress.never_committed), (1, 1));
    }
}
