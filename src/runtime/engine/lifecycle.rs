//! A task from assignment to revocation: its partitions paused and its
//! RocksDB state opened; the group's committed offsets fetched (where it
//! resumes); its changelogs restored; then started, sought to those
//! offsets, and running until it is revoked or lost.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::context::EngineContext;
use super::housekeeping::publish_task_metrics;
use super::{AssignedTask, Engine};
use crate::runtime::RuntimeError;
use crate::runtime::batch::BatchShare;
use crate::runtime::changelog::{CHANGELOG_OFFSETS, ChangelogOffsets, EVENT_TIME, GAUGES};
use crate::runtime::commit::{FaultPoint, TaskCursor};
use crate::state::rocks::RocksBackend;
use crate::task::{Routing, Task};
use crate::telemetry;

impl Engine {
    /// New tasks: open their state, pause their partitions, start
    /// restoring.
    pub(super) fn assigned(&mut self, consumer: &BaseConsumer<EngineContext>, tasks: &[i32]) {
        // A source topic deleted and re-created between two rebalances
        // comes back as a new assignment: its id tells (the new tasks
        // restore first, which leaves the watch time to answer).
        if let Some(watch) = &self.source_watch {
            watch.check_now();
        }
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

    pub(super) fn open_task(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        task: i32,
    ) -> Result<(), RuntimeError> {
        let partitions = self.partitions_of(&[task]);
        consumer.pause(&partitions)?;
        let mut state_task = self.open_state(task)?;
        let changelog_offsets = state_task
            .state()
            .meta(CHANGELOG_OFFSETS)?
            .and_then(|b| ChangelogOffsets::decode(&b))
            .unwrap_or_default();
        let published = state_task
            .committed_stats()
            .map(|(_, s)| s.clone())
            .collect();
        let assigned = AssignedTask {
            task: state_task,
            running: false,
            since: 0,
            awaiting_offsets: true,
            cursor: TaskCursor {
                positions: vec![None; self.inputs.len()],
                committed: vec![None; self.inputs.len()],
                changelog_offsets,
            },
            published,
            cache_lookups_published: (0, 0),
            share: BatchShare::default(),
            metrics: telemetry::TaskMetrics::new(&self.topology.name, task),
        };
        self.tasks.insert(task, assigned);
        metrics::counter!(telemetry::TASKS_CREATED, "topology" => self.topology.name.clone())
            .increment(1);
        self.publish_task_gauges();
        self.next_offsets_fetch = Instant::now();
        Ok(())
    }

    /// Fetches the group's committed offsets of new tasks (where
    /// processing resumes) and starts their restore. Not in the assign
    /// callback: while a previous owner's transaction holding offsets of
    /// these partitions is open, the broker answers "unstable offset" until
    /// it ends, which can take until that owner restarts or the transaction
    /// times out. A short attempt per round keeps the other tasks
    /// processing meanwhile.
    pub(super) fn fetch_committed_offsets(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
    ) -> Result<(), RuntimeError> {
        let now = Instant::now();
        if now < self.next_offsets_fetch {
            return Ok(());
        }
        let awaiting: Vec<i32> = self
            .tasks
            .iter()
            .filter(|(_, s)| s.awaiting_offsets)
            .map(|(t, _)| *t)
            .collect();
        if awaiting.is_empty() {
            return Ok(());
        }
        let partitions = self.partitions_of(&awaiting);
        let list = match consumer.committed_offsets(partitions, Duration::from_millis(500)) {
            Ok(list) => list,
            Err(error) => {
                self.next_offsets_fetch = now + Duration::from_secs(1);
                if now >= self.next_offsets_warning {
                    self.next_offsets_warning = now + Duration::from_secs(10);
                    tracing::warn!(tasks = ?awaiting, %error, "The committed offsets of new tasks are not available yet (a previous owner's transaction may still be open); retrying.");
                }
                return Ok(());
            }
        };
        self.cycle.txn.journal_fetched(&list);
        for task in awaiting {
            self.resume_from_committed(consumer, &list, task, now)?;
        }
        Ok(())
    }

    /// Makes the committed offsets of task `task` in `list` (fetched at
    /// `now`) its positions and starts its restore, wiping its local state
    /// first when the changelogs no longer hold where it stopped. While
    /// any of that is not known yet, the task waits for the next round.
    fn resume_from_committed(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        list: &TopicPartitionList,
        task: i32,
        now: Instant,
    ) -> Result<(), RuntimeError> {
        // A partition can come back with an error of its own and no
        // offset: UNSTABLE_OFFSET_COMMIT, while a previous owner's
        // transaction holding its offsets is open. librdkafka asks
        // again until its request times out and hands that answer on
        // only if the caller still waits then, which these short
        // questions do not; a partition error of any kind is still
        // "not known yet", never "nothing committed": starting from
        // the input's reset would process again what that transaction
        // covers, over state restored without it.
        let unanswered = partition_errors(list, task);
        if !unanswered.is_empty() {
            self.next_offsets_fetch = now + Duration::from_secs(1);
            if now >= self.next_offsets_warning {
                self.next_offsets_warning = now + Duration::from_secs(10);
                tracing::warn!(task, errors = ?unanswered, "The committed offsets of new tasks are not available yet (a previous owner's transaction may still be open); retrying.");
            }
            return Ok(());
        }
        let mut committed = self.committed_inputs(list, task);
        if let Err(error) =
            self.cycle
                .anchor_latest(consumer, task, &mut committed, Duration::from_millis(500))
        {
            self.next_offsets_fetch = now + Duration::from_secs(1);
            tracing::warn!(task, %error, "Cannot read where the inputs end yet (offset_reset: latest); retrying.");
            return Ok(());
        }
        let saved = match self.tasks.get(&task) {
            Some(assigned) => assigned.cursor.changelog_offsets.0.clone(),
            None => return Ok(()),
        };
        let ends = match self.restorer.ends(task, &saved, Duration::from_millis(500)) {
            Ok(ends) => ends,
            // The broker did not answer (restarting, overloaded): this
            // task waits for the next round; the others go on.
            Err(error) => {
                self.next_offsets_fetch = now + Duration::from_secs(1);
                tracing::warn!(task, %error, "Cannot read the changelogs' offsets yet; retrying.");
                return Ok(());
            }
        };
        let out_of_range = ends.out_of_range(&saved);
        if !out_of_range.is_empty() {
            tracing::warn!(
                task,
                changelogs = ?out_of_range,
                "The changelog no longer holds where this task's local state stopped (re-created or \
                 truncated); wiping the local state and restoring it in full from the earliest offset."
            );
            self.wipe_state(task)?;
        }
        let Some(assigned) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        assigned.awaiting_offsets = false;
        assigned.cursor.positions.clone_from(&committed);
        assigned.cursor.committed = committed;
        self.restorer
            .add(task, &assigned.cursor.changelog_offsets.0, &ends)?;
        Ok(())
    }

    /// The committed offset of each input of task `task` in `list`, in the
    /// order of the engine's inputs; none where nothing is committed.
    fn committed_inputs(&self, list: &TopicPartitionList, task: i32) -> Vec<Option<i64>> {
        let mut committed = vec![None; self.inputs.len()];
        for element in list.elements().iter().filter(|e| e.partition() == task) {
            let Offset::Offset(o) = element.offset() else {
                continue;
            };
            if let Some(i) = self.input_of(element.topic()) {
                committed[i] = Some(o);
            }
        }
        committed
    }

    /// The task over its RocksDB state.
    pub(super) fn open_state(&self, task: i32) -> Result<Task, RuntimeError> {
        let stores: Vec<String> = self.topology.stores().map(|s| s.name.clone()).collect();
        let path = self.state_root.join(task.to_string());
        let mut backend = RocksBackend::open(&path, &stores, &self.rocks)?;
        if let Some(queries) = &self.queries {
            // Restoring until the task starts; gone before the database
            // closes, whatever closes it (revocation, wipe, shutdown).
            let db = backend.shared();
            queries.opened(task, Arc::clone(&db));
            let queries = Arc::clone(queries);
            backend.on_close(Box::new(move || queries.closing(task, &db)));
        }
        let mut task = Task::with_globals(
            Arc::clone(&self.topology),
            Box::new(backend),
            Routing::Partitioned {
                partition: task,
                partitions: self.partitions,
            },
            self.globals.clone(),
        )?;
        task.state().share_cache(Arc::clone(&self.record_cache));
        Ok(task)
    }

    /// Replaces a task's local state with an empty one, for a full
    /// restore.
    pub(super) fn wipe_state(&mut self, task: i32) -> Result<(), RuntimeError> {
        let path = self.state_root.join(task.to_string());
        // The database must be closed before its files go.
        let fresh = {
            let Some(assigned) = self.tasks.get_mut(&task) else {
                return Ok(());
            };
            let placeholder = Task::with_globals(
                Arc::clone(&self.topology),
                Box::new(crate::state::memory::MemoryBackend::new(
                    self.topology.stores().count(),
                )),
                Routing::Direct,
                self.globals.clone(),
            )?;
            drop(std::mem::replace(&mut assigned.task, placeholder));
            std::fs::remove_dir_all(&path).map_err(|e| {
                RuntimeError::State(crate::state::StateError::Backend(format!(
                    "cannot remove {}: {e}",
                    path.display()
                )))
            })?;
            self.open_state(task)?
        };
        if let Some(assigned) = self.tasks.get_mut(&task) {
            assigned.task = fresh;
            assigned.cursor.changelog_offsets = ChangelogOffsets::default();
        }
        Ok(())
    }

    pub(super) fn start_task(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        task: i32,
    ) -> Result<(), RuntimeError> {
        let now = self.now;
        let Some(assigned) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        assigned.task.set_processing_time(now);
        let event_time = assigned
            .task
            .state()
            .meta(EVENT_TIME)?
            .and_then(|b| String::from_utf8(b).ok()?.parse::<i64>().ok());
        if let Some(ts) = event_time {
            assigned.task.resume_event_time(ts);
        }
        let gauges = assigned
            .task
            .state()
            .meta(GAUGES)?
            .filter(|b| !b.is_empty());
        let gauges_counted = assigned
            .task
            .start(gauges.as_deref())
            .map_err(|source| RuntimeError::Task { task, source })?;
        // Consume from exactly the committed offsets the restore was
        // judged by, not from the consumer's own fetch of them at
        // assignment: should the two ever differ (a broker that lets a
        // fenced-out previous owner still commit), starting past what the
        // restore kept would lose the records in between.
        self.cycle
            .seek_to_committed(consumer, task, &mut assigned.cursor)?;
        assigned.running = true;
        assigned.since = self.epoch.load(Ordering::Acquire);
        if let Some(queries) = &self.queries {
            queries.started(task);
        }
        // Its partitions resume once they have their own queues.
        self.started.push(task);
        tracing::info!(task, gauges_counted, "Task running.");
        self.publish_task_gauges();
        Ok(())
    }

    /// Revoked tasks: commit what they did (unless the assignment was
    /// lost, when committing would fail) and close them.
    pub(super) fn revoked(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        tasks: &[i32],
        lost: bool,
    ) {
        // Lost partitions cannot be committed: the whole transaction is
        // abandoned and every task rewound. The lost tasks close right
        // after, so only the kept ones are sought back.
        let result = if lost {
            for task in tasks {
                if let Some(assigned) = self.tasks.get_mut(task) {
                    assigned.running = false;
                }
            }
            self.rewind(consumer)
        } else {
            self.commit(consumer)
        };
        if let Err(e) = result {
            self.fail(e);
        }
        for task in tasks {
            if let Some(mut assigned) = self.tasks.remove(task) {
                publish_task_metrics(&self.topology, *task, &mut assigned, true);
                metrics::counter!(telemetry::TASKS_CLOSED, "topology" => self.topology.name.clone())
                    .increment(1);
                tracing::info!(task, "Task closed.");
            }
            if let Err(e) = self.restorer.remove(*task) {
                self.fail(RuntimeError::Kafka(e));
            }
        }
        self.publish_task_gauges();
    }

    /// The running and the restoring tasks, as gauges.
    pub(super) fn publish_task_gauges(&self) {
        let running = self.tasks.values().filter(|s| s.running).count();
        let app = self.topology.name.clone();
        metrics::gauge!(telemetry::TASKS_RUNNING, "topology" => app.clone()).set(running as f64);
        metrics::gauge!(telemetry::TASKS_RESTORING, "topology" => app)
            .set((self.tasks.len() - running) as f64);
    }

    /// The tasks by what they do, for readiness.
    pub(super) fn task_counts(&self) -> crate::runtime::health::TaskCounts {
        let mut counts = crate::runtime::health::TaskCounts {
            assigned: self.tasks.len(),
            ..Default::default()
        };
        for assigned in self.tasks.values() {
            match (assigned.running, assigned.awaiting_offsets) {
                (true, _) => counts.running += 1,
                (false, true) => counts.awaiting_offsets += 1,
                (false, false) => counts.restoring += 1,
            }
        }
        counts
    }

    pub(super) fn restore_step(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
    ) -> Result<(), RuntimeError> {
        let progress = self.restorer.poll(Duration::from_millis(50))?;
        for (task, progress) in progress {
            let Some(assigned) = self.tasks.get_mut(&task) else {
                continue;
            };
            assigned.cursor.changelog_offsets.0.extend(progress.offsets);
            let mut meta = vec![(
                CHANGELOG_OFFSETS.to_string(),
                assigned.cursor.changelog_offsets.encode(),
            )];
            // The event clock travels with the changelog: the latest time
            // stamped on what was applied, never moving back.
            if let Some(restored) = progress.event_time {
                let saved = assigned
                    .task
                    .state()
                    .meta(EVENT_TIME)?
                    .and_then(|b| String::from_utf8(b).ok()?.parse::<i64>().ok());
                if saved.is_none_or(|saved| saved < restored) {
                    meta.push((EVENT_TIME.to_string(), restored.to_string().into_bytes()));
                }
            }
            if !progress.writes.is_empty() {
                // The saved gauges no longer describe the stores.
                meta.push((GAUGES.to_string(), Vec::new()));
            }
            assigned.task.state().restore(&progress.writes, &meta)?;
            if !progress.writes.is_empty() {
                self.cycle
                    .txn
                    .fault(FaultPoint::Restore)
                    .map_err(RuntimeError::Commit)?;
            }
            if progress.done {
                self.start_task(consumer, task)?;
            }
        }
        Ok(())
    }
}

/// The error of each partition of task `task` that `list` holds no
/// answer for, as `topic: error`.
fn partition_errors(list: &TopicPartitionList, task: i32) -> Vec<String> {
    list.elements()
        .iter()
        .filter(|e| e.partition() == task)
        .filter_map(|e| {
            e.error()
                .err()
                .map(|error| format!("{}: {error}", e.topic()))
        })
        .collect()
}
