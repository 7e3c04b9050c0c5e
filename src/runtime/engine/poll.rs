//! The polling thread's loop: batches taken from the consumer's queue
//! (where rebalance callbacks run) and from each running task's own
//! queue, a share of each, the next batch prefetched while the current
//! one is processed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;

use super::Engine;
use super::context::EngineContext;
use crate::runtime::RuntimeError;
use crate::runtime::batch::{BATCH, Polled};
use crate::runtime::commit::CommitError;
use crate::runtime::fetch::TaskQueue;

pub(super) fn main_loop(
    consumer: &Arc<BaseConsumer<EngineContext>>,
    shutdown: &AtomicBool,
) -> Result<(), RuntimeError> {
    let mut queues = Queues::default();
    let mut timeout = Duration::from_millis(10);
    let poll_duration = {
        let engine = consumer.context().lock();
        metrics::histogram!(crate::telemetry::POLL_DURATION, "topology" => engine.topology.name.clone())
    };
    loop {
        // Polled messages borrow the queues, so they change only here,
        // with none held.
        {
            let mut engine = consumer.context().lock();
            queues.update(consumer, &mut engine)?;
        }
        if rounds(consumer, &queues, shutdown, &mut timeout, &poll_duration)? {
            tracing::info!("Shutting down: committing and leaving the group.");
            return Ok(());
        }
    }
}

/// Polls and processes batches, one after the other, while the tasks'
/// queues stay as they are; whether to shut down.
///
/// While the processing threads work on a batch, the polling thread polls
/// the next from the tasks' queues (a prefetch) before it joins them.
/// Those queues carry no rebalance callbacks, so the tasks stay as they
/// are meanwhile; prefetched messages a rewind or a rebalance made stale
/// are skipped like any others (their epoch is older, [`Engine::on_batch`]).
/// Left unprocessed at shutdown, they were not committed either, and come
/// again to whoever runs their task next. The polling thread also releases
/// the last batch's messages then, rather than alone after the batch.
fn rounds<'c>(
    consumer: &'c BaseConsumer<EngineContext>,
    queues: &'c Queues,
    shutdown: &AtomicBool,
    timeout: &mut Duration,
    poll_duration: &metrics::Histogram,
) -> Result<bool, RuntimeError> {
    let context = consumer.context();
    let mut next: Vec<Polled<'c>> = Vec::with_capacity(BATCH);
    // The last batch, handled, its messages not yet released.
    let mut handled: Vec<Polled<'c>> = Vec::new();
    // The queues must change: finish with what was prefetched first.
    let mut draining = false;
    loop {
        if shutdown.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let mut polled = std::mem::replace(&mut next, Vec::with_capacity(BATCH));
        let started = Instant::now();
        let consumed = poll_batch(consumer, queues, &mut polled, *timeout);
        poll_duration.record(started.elapsed());
        let mut prefetched = Ok(());
        if !polled.is_empty() {
            let last = std::mem::take(&mut handled);
            // Without a prefetch (or with no task to run), `last` goes
            // with the unused closure.
            let prefetch =
                (consumed.is_ok() && !draining && !queues.by_task.is_empty()).then_some(|| {
                    drop(last);
                    prefetched = poll_queues(queues, &mut next, &context.epoch);
                });
            let mut engine = context.lock();
            let result = engine.on_batch(&polled, prefetch);
            handled = polled;
            engine.recover(consumer, result)?;
        } else {
            // Idle: nothing to overlap the release with.
            handled.clear();
        }
        consumed?;
        prefetched?;
        let mut engine = context.lock();
        let result = engine.housekeeping(consumer);
        engine.recover(consumer, result)?;
        *timeout = engine.poll_timeout();
        if queues.stale(&engine) {
            if next.is_empty() {
                return Ok(false);
            }
            draining = true;
        }
    }
}

/// Each running task's partitions on queues of their own
/// ([`TaskQueue`], polled a share at a time), so that a batch takes a
/// share of every task with records waiting and the processing threads
/// all have work:
/// librdkafka queues a fetch response partition by partition, so the
/// consumer's one queue hands out long runs of a single partition, which
/// one thread processes while the others wait.
///
/// A task's partitions stay paused from assignment until it has started
/// (restored, and sought to its committed offsets); only then are they
/// split off and resumed, so every record the task processes comes from
/// its own queue, in order. What the consumer queue may still hold of them
/// was fetched before that seek, and librdkafka drops it (the seek's
/// version barrier).
#[derive(Default)]
struct Queues {
    by_task: BTreeMap<i32, Vec<TaskQueue<EngineContext>>>,
}

impl Queues {
    /// Whether a task stopped running or started since the last update.
    fn stale(&self, engine: &Engine) -> bool {
        !engine.started.is_empty()
            || self
                .by_task
                .keys()
                .any(|task| !engine.tasks.get(task).is_some_and(|s| s.running))
    }

    /// Drops the queues of tasks that stopped running; gives tasks that
    /// started queues of their own and resumes their partitions.
    fn update(
        &mut self,
        consumer: &Arc<BaseConsumer<EngineContext>>,
        engine: &mut Engine,
    ) -> Result<(), RuntimeError> {
        self.by_task
            .retain(|task, _| engine.tasks.get(task).is_some_and(|s| s.running));
        for task in std::mem::take(&mut engine.started) {
            if !engine.tasks.get(&task).is_some_and(|s| s.running) {
                continue;
            }
            let queues = engine
                .inputs
                .iter()
                .filter_map(|input| {
                    let queue = TaskQueue::split(consumer, &input.topic, task);
                    if queue.is_none() {
                        // It stays on the consumer's queue, still in order.
                        tracing::warn!(topic = %input.topic, partition = task, "No queue of its own for a partition.");
                    }
                    queue
                })
                .collect();
            self.by_task.insert(task, queues);
            consumer.resume(&engine.partitions_of(&[task]))?;
        }
        Ok(())
    }
}

/// The longest a poll waits on the consumer's queue when no task's queue
/// had anything: records arriving on a task's queue meanwhile wait that
/// long at most.
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// Fills the batch (which may hold a prefetch already) up to [`BATCH`]
/// messages: whatever the consumer's queue has (rebalance callbacks run
/// here), then from the tasks' queues ([`poll_queues`]). With nothing
/// anywhere it waits up to `timeout` (at most [`IDLE_WAIT`]) on the
/// consumer's queue. Each message comes with the epoch after the poll
/// that returned it.
fn poll_batch<'c>(
    consumer: &'c BaseConsumer<EngineContext>,
    queues: &'c Queues,
    polled: &mut Vec<Polled<'c>>,
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let epoch = &consumer.context().epoch;
    while polled.len() < BATCH && take(consumer.poll(Duration::ZERO), epoch, polled)? {}
    poll_queues(queues, polled, epoch)?;
    if polled.is_empty() && !timeout.is_zero() {
        let wait = if queues.by_task.is_empty() {
            timeout
        } else {
            timeout.min(IDLE_WAIT)
        };
        take(consumer.poll(wait), epoch, polled)?;
    }
    Ok(())
}

/// Fills the batch up to [`BATCH`] from the tasks' queues: a share from
/// each, round after round until it is full or they are empty.
fn poll_queues<'c>(
    queues: &'c Queues,
    polled: &mut Vec<Polled<'c>>,
    epoch: &AtomicU64,
) -> Result<(), RuntimeError> {
    let queues: Vec<&TaskQueue<EngineContext>> = queues.by_task.values().flatten().collect();
    let share = (BATCH / queues.len().max(1)).max(1);
    loop {
        let before = polled.len();
        for queue in &queues {
            let want = share.min(BATCH - polled.len());
            if want > 0 {
                queue
                    .take(want, || epoch.load(Ordering::Acquire), polled)
                    .map_err(|e| RuntimeError::Kafka(KafkaError::MessageConsumptionFatal(e)))?;
            }
        }
        if polled.len() == before || polled.len() >= BATCH {
            return Ok(());
        }
    }
}

/// Adds a polled message to the batch; whether to poll on.
fn take<'c>(
    result: Option<KafkaResult<BorrowedMessage<'c>>>,
    epoch: &AtomicU64,
    polled: &mut Vec<Polled<'c>>,
) -> Result<bool, RuntimeError> {
    match result {
        Some(Ok(message)) => {
            polled.push((message.into(), epoch.load(Ordering::Acquire)));
            Ok(true)
        }
        // A static member refused as fenced by another with its instance
        // id: whether that is another process is the group's to say
        // (`membership_verdict`).
        Some(Err(KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::FencedInstanceId))) => {
            Err(RuntimeError::Commit(CommitError::Fatal(
                "the group refused this static member as fenced".into(),
            )))
        }
        // Fatal: the consumer cannot go on.
        Some(Err(error @ KafkaError::MessageConsumptionFatal(_))) => {
            Err(RuntimeError::Kafka(error))
        }
        Some(Err(error)) => {
            tracing::warn!(%error, "Consumer error.");
            Ok(false)
        }
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
    use rdkafka::message::BorrowedMessage;

    use super::take;
    use crate::runtime::RuntimeError;
    use crate::runtime::batch::Polled;
    use crate::runtime::commit::CommitError;

    fn taken(result: Option<KafkaResult<BorrowedMessage<'static>>>) -> Result<bool, RuntimeError> {
        let mut polled: Vec<Polled<'static>> = Vec::new();
        let outcome = take(result, &AtomicU64::new(0), &mut polled);
        assert!(polled.is_empty());
        outcome
    }

    /// A static member refused as fenced is not stopped here: the failure
    /// is one the group judges (a rejoin unless a successor holds the id);
    /// any other fatal consumer error ends the membership as it is; an
    /// error the consumer recovers from, or nothing polled, ends the poll.
    #[test]
    fn a_fenced_static_member_is_left_to_the_groups_verdict() {
        let fenced = KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::FencedInstanceId);
        assert!(matches!(
            taken(Some(Err(fenced))),
            Err(RuntimeError::Commit(CommitError::Fatal(_)))
        ));
        let fatal =
            KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::InconsistentGroupProtocol);
        assert!(matches!(
            taken(Some(Err(fatal))),
            Err(RuntimeError::Kafka(KafkaError::MessageConsumptionFatal(
                RDKafkaErrorCode::InconsistentGroupProtocol
            )))
        ));
        let passing = KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure);
        assert!(matches!(taken(Some(Err(passing))), Ok(false)));
        assert!(matches!(taken(None), Ok(false)));
    }
}
