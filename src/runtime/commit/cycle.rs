//! The commit cycle ([`CommitCycle`]): per task, the input positions and
//! changelog offsets a transaction covers; the commit of every running
//! task's changelogs and positions, its abort and the rewind to the last
//! commit, and the seek of a task that starts to its committed offsets.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::runtime::RuntimeError;
use crate::runtime::changelog::{
    CHANGELOG_OFFSETS, ChangelogOffsets, EVENT_TIME, EVENT_TIME_HEADER, GAUGES,
};
use crate::state::StateError;
use crate::task::Task;
use crate::task::limits::{TooLarge, record_size};
use crate::telemetry::CommitPhase;
use crate::topology::Topology;

use super::CommitError;
use super::hooks::FaultPoint;
use super::transactions::{Produce, Transactions};

/// Where one task stands in the cycle.
#[derive(Clone, Debug, Default)]
pub(crate) struct TaskCursor {
    /// Next offset to read, per input (index into the cycle's inputs).
    pub(crate) positions: Vec<Option<i64>>,
    /// Positions as of the last commit (to rewind to on abort).
    pub(crate) committed: Vec<Option<i64>>,
    /// Next changelog offset per changelog topic, stored with the state.
    pub(crate) changelog_offsets: ChangelogOffsets,
}

/// The store and key of each state value dropped on its way to the
/// changelog ([`CommitCycle::drop_state`]).
type Dropped = Vec<(usize, Box<[u8]>)>;

/// One task as the cycle sees it.
pub(crate) struct CycleTask<'a> {
    pub(crate) id: i32,
    pub(crate) task: &'a mut Task,
    pub(crate) cursor: &'a mut TaskCursor,
    /// Restoring tasks hold nothing to commit and are not rewound.
    pub(crate) running: bool,
}

/// The commit cycle of the processing loop: the producer, and the topics
/// whose positions and changelogs it commits.
pub(crate) struct CommitCycle {
    pub(crate) txn: Transactions,
    /// Input topics, in the order of [`TaskCursor::positions`].
    inputs: Vec<String>,
    /// Store index → changelog topic and its tracked index.
    changelogs: Vec<(String, usize)>,
    /// Store index → store name, for dead letters.
    stores: Vec<String>,
    /// Where each input without a committed offset starts, in the order
    /// of `inputs`: a source's `offset_reset`; a repartition topic's
    /// beginning, whatever the sources' (its records were written by this
    /// application, and their sources' offsets are committed).
    resets: Vec<Offset>,
    app: String,
    dead_letter_topic: String,
}

impl CommitCycle {
    /// The cycle of `topology`'s stores over `inputs`.
    pub(crate) fn new(
        mut txn: Transactions,
        inputs: Vec<String>,
        topology: &Topology,
        resets: Vec<Offset>,
    ) -> CommitCycle {
        let changelogs = topology
            .stores()
            .map(|s| (s.changelog_topic.clone(), txn.track(&s.changelog_topic)))
            .collect();
        CommitCycle {
            txn,
            inputs,
            changelogs,
            stores: topology.stores().map(|s| s.name.clone()).collect(),
            resets,
            app: topology.name.clone(),
            dead_letter_topic: topology.dead_letter_topic.clone(),
        }
    }

    /// A state value too large for its changelog topic can never be
    /// committed; keeping it would fail every transaction from now on. It
    /// goes to the dead-letter topic instead, and the key's state is
    /// deleted: `entry` becomes a tombstone, committed like any other
    /// change, so the store stays writable and a restore agrees with it.
    fn drop_state(
        &mut self,
        entry: &mut crate::state::ChangelogEntry,
        too_large: &TooLarge,
    ) -> Result<(), CommitError> {
        let store = &self.stores[entry.store];
        let reason = format!(
            "{}; the key's state was dropped",
            too_large.reason(&format!("the state of store `{store}`"))
        );
        tracing::error!(
            store = %store,
            size = too_large.size,
            limit = too_large.limit,
            "A state value is too large for its changelog topic; the key's state was dropped and sent to the dead-letter topic."
        );
        metrics::counter!(crate::telemetry::RECORDS_TOO_LARGE, "topology" => self.app.clone(), "store" => store.clone())
            .increment(1);
        let mut letter = crate::task::dead_letter(
            None,
            store,
            crate::telemetry::DeadLetterReason::TooLarge,
            &reason,
            1,
        );
        letter.key = Some(entry.key.to_vec());
        letter.payload = entry.value.take().map(Vec::from);
        self.txn.send_dead_letter(&self.dead_letter_topic, &letter)
    }

    /// Commits the open transaction with the tasks' changelogs and
    /// positions, then applies their state. An `Aborted` error leaves the
    /// transaction open for [`CommitCycle::rewind`]. The tasks collect
    /// their changes, and later write them to their stores, side by side
    /// on `pool`'s threads; everything sent is sent from this one.
    pub(crate) fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tasks: Vec<CycleTask<'_>>,
        now: i64,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<(), RuntimeError> {
        if !self.txn.in_transaction() {
            return Ok(());
        }
        let started = Instant::now();
        let mut collected: Vec<_> = tasks
            .into_iter()
            .filter(|t| t.running)
            .map(|t| (t, Ok(Vec::new())))
            .collect();
        crate::runtime::threads::for_each(pool, &mut collected, |(item, entries)| {
            *entries = item.task.state().changelog();
        });
        let mut pending = Vec::with_capacity(collected.len());
        let mut offsets = Vec::new();
        for (item, entries) in collected {
            let mut entries = entries?;
            let dropped = self.send_changelog(&item, &mut entries, now)?;
            offsets.extend(
                item.cursor
                    .positions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.map(|p| (self.inputs[i].clone(), item.id, p))),
            );

            pending.push((item, entries, dropped));
        }
        self.txn
            .metrics
            .took(CommitPhase::Changelog, started.elapsed());
        let delivered = self
            .txn
            .commit(consumer, |_| offsets_list(offsets))
            .map_err(RuntimeError::Commit)?;
        // Committed in Kafka; a crash from here on leaves local state one
        // commit behind, which restore replays.
        self.txn
            .fault(FaultPoint::Committed)
            .map_err(RuntimeError::Commit)?;
        let applying = Instant::now();
        let (changelogs, stores, app) = (&self.changelogs, &self.stores, &self.app);
        let mut applied: Vec<_> = pending.into_iter().map(|p| (p, Ok(()))).collect();
        crate::runtime::threads::for_each(
            pool,
            &mut applied,
            |((item, entries, dropped), result)| {
                *result =
                    apply_committed(item, entries, dropped, &delivered, changelogs, stores, app);
            },
        );
        for (_, result) in applied {
            result?;
        }
        self.txn
            .metrics
            .took(CommitPhase::Apply, applying.elapsed());
        self.txn
            .metrics
            .duration
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Sends the changelog records of task `item`'s `entries`, stamped
    /// with its event time, in the open transaction; a state value too
    /// large for its changelog is dropped on the way ([`Self::drop_state`]).
    /// Returns the store and key of each one dropped.
    fn send_changelog(
        &mut self,
        item: &CycleTask<'_>,
        entries: &mut [crate::state::ChangelogEntry],
        now: i64,
    ) -> Result<Dropped, RuntimeError> {
        let mut dropped = Vec::new();
        if !entries.is_empty() {
            // The task's event time, so a restore elsewhere resumes
            // its clock. (A stamping run adds the transaction last,
            // which the size check reserves room for.)
            let header = [(
                EVENT_TIME_HEADER.to_string(),
                item.task.clocks().event.to_string().into_bytes(),
            )];
            for entry in entries.iter_mut() {
                let (topic, tracked) = self.changelogs[entry.store].clone();
                let size = record_size(Some(&entry.key), entry.value.as_deref(), &header);
                if let Err(too_large) = self.txn.limits.check(&topic, size) {
                    self.drop_state(entry, &too_large)
                        .map_err(RuntimeError::Commit)?;
                    dropped.push((entry.store, entry.key.clone()));
                }
                self.txn
                    .send(Produce {
                        topic: &topic,
                        partition: Some(item.id),
                        key: Some(&entry.key),
                        payload: entry.value.as_deref(),
                        headers: &header,
                        timestamp: Some(now),
                        tracked,
                    })
                    .map_err(RuntimeError::Commit)?;
            }
        }
        Ok(dropped)
    }

    /// Aborts the open transaction and returns every task to its last
    /// commit: state, timers and clocks ([`Task::abort`]), and the
    /// consumer's positions.
    pub(crate) fn rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tasks: Vec<CycleTask<'_>>,
    ) -> Result<(), RuntimeError> {
        self.txn.abort().map_err(RuntimeError::Commit)?;
        for item in tasks {
            item.task.abort();
            if !item.running {
                continue;
            }
            self.seek_to_committed(consumer, item.id, item.cursor)?;
        }
        Ok(())
    }

    /// With `offset_reset: latest`, makes the end of each of task `task`'s
    /// source inputs without a committed offset, as it is now, the offset
    /// the task starts from and goes back to until its first commit. The
    /// end is the last stable offset, as the read_committed consumer sees
    /// it. Repartition inputs start at their beginning: their records
    /// were written by this application, and none may be skipped.
    ///
    /// A logical end would be resolved again at each seek: a rewind after
    /// the task's first transaction aborted would land past the records
    /// that transaction had read, and the seek at the task's start was
    /// resolved half a second late (librdkafka asks again when a resume
    /// outdates its query), past records written meanwhile.
    pub(crate) fn anchor_latest<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        task: i32,
        committed: &mut [Option<i64>],
        timeout: Duration,
    ) -> Result<(), KafkaError> {
        let inputs = self.inputs.iter().zip(&self.resets);
        for ((topic, reset), committed) in inputs.zip(committed) {
            if committed.is_none() && *reset == Offset::End {
                let (_, end) = consumer.fetch_watermarks(topic, task, timeout)?;
                *committed = Some(end);
            }
        }
        Ok(())
    }

    /// Seeks task `task`'s inputs to its committed offsets (the input's
    /// reset where it has none), and makes them its positions.
    pub(crate) fn seek_to_committed<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        task: i32,
        cursor: &mut TaskCursor,
    ) -> Result<(), RuntimeError> {
        for (i, committed) in cursor.committed.iter().enumerate() {
            let offset = committed.map_or(self.resets[i], Offset::Offset);
            seek(consumer, &self.inputs[i], task, offset)?;
        }
        cursor.positions = cursor.committed.clone();
        Ok(())
    }
}

/// Applies to task `item`, once its transaction committed, the changes
/// `entries` that transaction carried, saved with the changelog offsets
/// `delivered` gave its changelogs; forgets the state of the keys
/// `dropped` for being too large (counted as dead letters now); and makes
/// its positions the committed ones.
fn apply_committed(
    item: &mut CycleTask<'_>,
    entries: &mut Vec<crate::state::ChangelogEntry>,
    dropped: &mut Dropped,
    delivered: &HashMap<(String, i32), i64>,
    changelogs: &[(String, usize)],
    stores: &[String],
    app: &str,
) -> Result<(), StateError> {
    for (topic, _) in changelogs {
        if let Some(offset) = delivered.get(&(topic.clone(), item.id)) {
            item.cursor
                .changelog_offsets
                .0
                .insert(topic.clone(), offset + 1);
        }
    }
    let meta = [
        (
            CHANGELOG_OFFSETS.to_string(),
            item.cursor.changelog_offsets.encode(),
        ),
        (
            EVENT_TIME.to_string(),
            item.task.clocks().event.to_string().into_bytes(),
        ),
        (GAUGES.to_string(), item.task.gauges_meta()),
    ];
    item.task.committed(std::mem::take(entries), &meta)?;
    for (store, key) in dropped.drain(..) {
        item.task.state().forget(store, &key);
        // Counted once its transaction committed, like the task's
        // own dead letters.
        let code = crate::telemetry::DeadLetterReason::TooLarge.code();
        metrics::counter!(crate::telemetry::DEAD_LETTERS, "topology" => app.to_string(), "node" => stores[store].clone(), "reason" => code)
        .increment(1);
    }
    item.cursor.committed = item.cursor.positions.clone();
    Ok(())
}

/// Seeks `topic` `partition` to `offset`. librdkafka refuses a seek of a
/// partition it is not fetching (`Erroneous state`): one the group took
/// away (a rebalance, or a fenced or expired member) is left alone, since
/// its task is closed when the revocation is served and nothing of it is
/// processed meanwhile; one still assigned but not fetching yet (an
/// assignment being applied) is asked again for a while.
fn seek<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<(), KafkaError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let error = match consumer.seek(topic, partition, offset, Duration::from_secs(10)) {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let assigned = consumer
            .assignment()
            .is_ok_and(|list| list.find_partition(topic, partition).is_some());
        if !assigned {
            tracing::info!(topic, partition, %error, "Not seeking a partition no longer assigned; its task closes with the revocation.");
            return Ok(());
        }
        let state = matches!(
            &error,
            KafkaError::Seek(message) if message.contains("Erroneous state")
        );
        if !state || Instant::now() >= deadline {
            return Err(error);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The offsets list for `send_offsets_to_transaction`.
pub(crate) fn offsets_list(
    positions: impl IntoIterator<Item = (String, i32, i64)>,
) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for (topic, partition, offset) in positions {
        // Adding to a fresh list cannot fail for a valid offset.
        let _ = list.add_partition_offset(&topic, partition, Offset::Offset(offset));
    }
    list
}
