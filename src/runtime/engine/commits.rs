//! Committing the open transaction with every task's changelogs and
//! positions ([`crate::runtime::commit::CommitCycle`]), and what an abort
//! costs: every task rewound to its last commit, with a pause that grows
//! while aborts repeat; the graceful end of a membership.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;

use super::context::EngineContext;
use super::housekeeping::publish_task_metrics;
use super::{AssignedTask, Engine};
use crate::runtime::RuntimeError;
use crate::runtime::commit::{CommitError, CycleTask};
use crate::telemetry;

/// Aborts in a row, without a commit between them, after which each one
/// is logged as an error: something keeps failing every transaction.
const ABORTS_BEFORE_ERROR: u32 = 5;

/// The longest pause before a transaction is tried again.
const LONGEST_ABORT_PAUSE: Duration = Duration::from_secs(30);

/// The pause after the `n`th abort in a row: none after the first (an
/// abort is usually a one-off), then 100 ms, doubling up to
/// [`LONGEST_ABORT_PAUSE`], so a failure that repeats costs the broker and
/// the machine little while it lasts.
fn abort_backoff(n: u32) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    Duration::from_millis(100)
        .saturating_mul(1 << (n - 2).min(16))
        .min(LONGEST_ABORT_PAUSE)
}

impl Engine {
    /// Every task, for the commit cycle.
    pub(super) fn cycle_tasks(tasks: &mut BTreeMap<i32, AssignedTask>) -> Vec<CycleTask<'_>> {
        tasks
            .iter_mut()
            .map(|(&id, assigned)| CycleTask {
                id,
                task: &mut assigned.task,
                cursor: &mut assigned.cursor,
                running: assigned.running,
            })
            .collect()
    }

    /// Commits the open transaction with every running task's changelogs
    /// and positions; when it aborts, rewinds to the last commit.
    pub(super) fn commit(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
    ) -> Result<(), RuntimeError> {
        if !self.cycle.txn.in_transaction() {
            return Ok(());
        }
        let tasks = Self::cycle_tasks(&mut self.tasks);
        let result = self
            .cycle
            .commit(consumer, tasks, self.now, self.pool.as_ref());
        if result.is_ok() {
            self.last_commit = Instant::now();
            self.aborts_in_a_row = 0;
            metrics::counter!(telemetry::RECORDS_COMMITTED, "topology" => self.topology.name.clone())
                .increment(std::mem::take(&mut self.consumed_uncommitted));
        }
        self.recover(consumer, result)
    }

    /// An abortable failure anywhere in the cycle (a produce the broker
    /// refused, a failed offsets send or commit, an injected fault) aborts
    /// the transaction and rewinds every task; anything else stops the
    /// loop.
    pub(super) fn recover(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        result: Result<(), RuntimeError>,
    ) -> Result<(), RuntimeError> {
        match result {
            Err(RuntimeError::Commit(CommitError::Aborted(reason))) => {
                self.aborts_in_a_row += 1;
                let pause = abort_backoff(self.aborts_in_a_row);
                if self.aborts_in_a_row >= ABORTS_BEFORE_ERROR {
                    tracing::error!(%reason, aborts_in_a_row = self.aborts_in_a_row, pause_ms = pause.as_millis() as u64, "Transactions keep failing; aborting, rewinding and trying again after a pause.");
                } else {
                    tracing::warn!(%reason, aborts_in_a_row = self.aborts_in_a_row, "The transaction failed; aborting and rewinding to the last commit.");
                }
                let rewound = self.rewind(consumer);
                std::thread::sleep(pause);
                rewound
            }
            other => other,
        }
    }

    pub(super) fn rewind(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
    ) -> Result<(), RuntimeError> {
        // They will be consumed again.
        self.consumed_uncommitted = 0;
        // A new epoch: messages polled before it, prefetched ones too, are
        // skipped.
        self.rewound_at = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let tasks = Self::cycle_tasks(&mut self.tasks);
        self.cycle.rewind(consumer, tasks)?;
        self.last_commit = Instant::now();
        Ok(())
    }

    /// Graceful end: commit (when the loop ended cleanly) and close every
    /// task.
    pub(super) fn shutdown(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        clean: bool,
    ) -> Result<(), RuntimeError> {
        let result = if clean {
            self.commit(consumer)
        } else {
            self.cycle.txn.abort().map_err(RuntimeError::Commit)
        };
        let tasks: Vec<i32> = self.tasks.keys().copied().collect();
        for task in tasks {
            if let Some(mut assigned) = self.tasks.remove(&task) {
                publish_task_metrics(&self.topology, task, &mut assigned, true);
                metrics::counter!(telemetry::TASKS_CLOSED, "topology" => self.topology.name.clone())
                    .increment(1);
                tracing::info!(task, "Task closed.");
            }
            let _ = self.restorer.remove(task);
        }
        self.publish_task_gauges();
        self.cycle.txn.flush();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::{LONGEST_ABORT_PAUSE, abort_backoff};

    /// A failure that repeats backs off: no pause after the first abort,
    /// then 100 ms doubling, never more than the longest pause.
    #[test]
    fn aborts_in_a_row_back_off_up_to_a_bound() {
        let pauses: Vec<u64> = (1..=12)
            .map(|n| abort_backoff(n).as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [
                0, 100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000
            ]
        );
        assert_eq!(abort_backoff(u32::MAX), LONGEST_ABORT_PAUSE);
    }
}
