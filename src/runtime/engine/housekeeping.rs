//! What the polling thread does between batches: restore steps, the
//! group's committed offsets for new tasks, wall-clock timers
//! (punctuation), commits when the interval or a timer budget says so,
//! and metrics.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::Offset;

use super::context::EngineContext;
use super::dispatch::clear_shares;
use super::{AssignedTask, Engine};
use crate::runtime::commit::FaultPoint;
use crate::runtime::{RuntimeError, wall_clock_ms};
use crate::telemetry::{self, DeadLetterReason, NodeCounter};
use crate::topology::Topology;

impl Engine {
    /// Between messages: restore progress, punctuation, commits, metrics.
    pub(super) fn housekeeping(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
    ) -> Result<(), RuntimeError> {
        if let Some(error) = self.fatal.take() {
            return Err(error);
        }
        if let Some(error) = self.source_watch.as_ref().and_then(|w| w.replaced()) {
            return Err(error);
        }
        self.now = wall_clock_ms();
        let now = Instant::now();
        if self.cycle.txn.take_consumer_rewind() {
            // Test hook: the consumer alone goes back, as librdkafka's
            // offset-query timer could before the vendored fix.
            for (&task, _) in self.tasks.iter().filter(|(_, s)| s.running) {
                for input in self.inputs.iter() {
                    consumer.seek(
                        &input.topic,
                        task,
                        Offset::Beginning,
                        Duration::from_secs(10),
                    )?;
                }
            }
        }
        self.cycle.txn.poll();
        self.fetch_committed_offsets(consumer)?;
        if self.restorer.is_restoring() {
            self.restore_step(consumer)?;
        }
        if self.cycle.txn.in_transaction()
            && self
                .tasks
                .values()
                .any(|assigned| assigned.running && assigned.task.timer_budget_spent())
        {
            // Records fired all the timers a transaction may: commit it, and
            // punctuate at once to fire the next round.
            self.commit(consumer)?;
            self.next_punctuation = now;
        }
        if now >= self.next_punctuation {
            self.next_punctuation = now + self.topology.processing.punctuation_interval.0;
            if self.punctuate()? {
                // More timers are due than one round fires (after
                // downtime): commit this round and fire the next at once.
                self.commit(consumer)?;
                self.next_punctuation = now;
            }
        }
        if self.cycle.txn.in_transaction()
            && now.duration_since(self.last_commit) >= self.topology.processing.commit_interval().0
        {
            self.commit(consumer)?;
        }
        crate::runtime::health::health().round(self.task_counts());
        if self.consumed_unreported > 0 {
            metrics::counter!(telemetry::RECORDS_CONSUMED, "topology" => self.topology.name.clone())
                .increment(std::mem::take(&mut self.consumed_unreported));
        }
        if now >= self.next_metrics {
            self.next_metrics = now + Duration::from_secs(1);
            // A restoring task has no state to report yet: its gauges
            // appear once it runs, never as a misleading 0.
            for (&task, assigned) in self.tasks.iter_mut().filter(|(_, s)| s.running) {
                publish_task_metrics(&self.topology, task, assigned, false);
            }
            let app = self.topology.name.clone();
            metrics::gauge!(telemetry::STATE_BLOCK_CACHE, "topology" => app.clone())
                .set(self.rocks.block_cache_usage() as f64);
            metrics::gauge!(telemetry::STATE_WRITE_BUFFERS, "topology" => app.clone())
                .set(self.rocks.write_buffer_usage() as f64);
            metrics::gauge!(telemetry::STATE_RECORD_CACHE, "topology" => app)
                .set(self.record_cache.used() as f64);
        }
        Ok(())
    }

    /// Fires wall-clock timers of every running task, on the processing
    /// threads; returns whether a task has more due than one round fires.
    pub(super) fn punctuate(&mut self) -> Result<bool, RuntimeError> {
        let started = Instant::now();
        let now = self.now;
        let mut work: Vec<(&i32, &mut AssignedTask)> =
            self.tasks.iter_mut().filter(|(_, s)| s.running).collect();
        crate::runtime::threads::for_each(self.pool.as_ref(), &mut work, |(id, assigned)| {
            let task = **id;
            assigned.task.set_processing_time(now);
            match assigned.task.punctuate(&mut assigned.share.outputs) {
                Ok(more) => assigned.share.more_due = more,
                Err(source) => assigned.share.error = Some(RuntimeError::Task { task, source }),
            }
        });
        drop(work);
        let mut busy = std::mem::take(&mut self.busy);
        busy.clear();
        busy.extend(
            self.tasks
                .iter()
                .filter(|(_, s)| s.running)
                .map(|(t, _)| *t),
        );
        let mut more = false;
        let mut result = Ok(());
        for &task in &busy {
            if result.is_err() {
                break;
            }
            result = self.produce_timers(task, &mut more);
        }
        clear_shares(&mut self.tasks, &busy);
        self.busy = busy;
        self.punctuate_duration.record(started.elapsed());
        result.map(|()| more)
    }

    /// Sends what task `task`'s timers emitted.
    pub(super) fn produce_timers(
        &mut self,
        task: i32,
        more: &mut bool,
    ) -> Result<(), RuntimeError> {
        let Some(assigned) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        if let Some(error) = assigned.share.error.take() {
            return Err(error);
        }
        *more |= assigned.share.more_due;
        let mut outputs = std::mem::take(&mut assigned.share.outputs);
        let fired = !outputs.is_empty();
        if fired || assigned.task.state().has_pending() {
            self.cycle.txn.begin().map_err(RuntimeError::Commit)?;
        }
        let result = self.produce(task, outputs.drain(..), None);
        if let Some(assigned) = self.tasks.get_mut(&task) {
            assigned.share.outputs = outputs;
        }
        result?;
        if fired {
            self.cycle
                .txn
                .fault(FaultPoint::Timers)
                .map_err(RuntimeError::Commit)?;
        }
        Ok(())
    }
}

/// Publishes a task's counter deltas since the last call (as of its last
/// commit); `closing` zeroes its gauges.
pub(super) fn publish_task_metrics(
    topology: &Topology,
    task: i32,
    assigned: &mut AssignedTask,
    closing: bool,
) {
    let app = topology.name.as_str();
    let partition = task.to_string();
    for (index, (name, stats)) in assigned.task.committed_stats().enumerate() {
        let before = &assigned.published[index];
        for &counter in NodeCounter::ALL {
            let delta = stats.get(counter) - before.get(counter);
            if delta > 0 {
                telemetry::node_counter(app, name, counter).increment(delta);
            }
        }
        for &reason in DeadLetterReason::ALL {
            let delta = stats.dead_letters(reason) - before.dead_letters(reason);
            if delta > 0 {
                telemetry::dead_letter_counter(app, name, reason).increment(delta);
            }
        }
        // Stats of sources and sinks follow the nodes'.
        let Some(node) = topology.nodes.get(index) else {
            continue;
        };
        for &gauge in node.kind.gauges() {
            let value = if closing { 0 } else { stats.gauge(gauge) };
            metrics::gauge!(gauge.metric(), "topology" => app.to_string(), "node" => name.to_string(), "partition" => partition.clone())
                .set(value as f64);
        }
        if let Some(ratio) = stats.folding_ratio() {
            metrics::gauge!(telemetry::FOLD_RATIO, "topology" => app.to_string(), "node" => name.to_string(), "partition" => partition.clone())
                .set(ratio);
        }
    }
    assigned.published = assigned
        .task
        .committed_stats()
        .map(|(_, s)| s.clone())
        .collect();
    publish_state_metrics(app, &partition, assigned, closing);
}

/// Publishes the storage figures of `assigned`'s stores (RocksDB's), by
/// store, and its database's block cache lookups; a closing task's store
/// gauges go to 0, as its node gauges do.
fn publish_state_metrics(app: &str, partition: &str, assigned: &mut AssignedTask, closing: bool) {
    let Some((stats, names)) = assigned.task.state().statistics() else {
        return;
    };
    for (store, figures) in names.iter().zip(&stats.stores) {
        for (name, value) in [
            (telemetry::STATE_MEMTABLE, figures.memtable_bytes),
            (telemetry::STATE_SST, figures.sst_bytes),
            (
                telemetry::STATE_PENDING_COMPACTION,
                figures.pending_compaction_bytes,
            ),
            (telemetry::STATE_ESTIMATED_KEYS, figures.estimated_keys),
        ] {
            let value = if closing { 0 } else { value };
            metrics::gauge!(name, "topology" => app.to_string(), "store" => store.clone(), "partition" => partition.to_string())
                .set(value as f64);
        }
    }
    let (hits, misses) = assigned.cache_lookups_published;
    for (name, now, before) in [
        (telemetry::STATE_CACHE_HITS, stats.block_cache_hits, hits),
        (
            telemetry::STATE_CACHE_MISSES,
            stats.block_cache_misses,
            misses,
        ),
    ] {
        metrics::counter!(name, "topology" => app.to_string(), "partition" => partition.to_string())
            .increment(now.saturating_sub(before));
    }
    assigned.cache_lookups_published = (stats.block_cache_hits, stats.block_cache_misses);
}
