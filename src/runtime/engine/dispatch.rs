//! A polled batch, from messages to produced outputs: each running task
//! with messages in the batch processes its share on a processing thread
//! ([`crate::runtime::batch`]); then its sink records, repartition records
//! and dead letters go out in the open transaction, task by task, in the
//! order of the messages that made them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::{AssignedTask, Engine};
use crate::record::Origin;
use crate::runtime::batch::{self, BatchInputs, Polled};
use crate::runtime::commit::{FaultPoint, Produce, Transactions};
use crate::runtime::{RuntimeError, wall_clock_ms, wire};
use crate::task::output::{Outlet, Refusal, Writer, Written};
use crate::task::{DeadLetter, DeadLetterAt, Output};
use crate::telemetry;
use crate::topology::Topology;

impl Engine {
    /// Handles a batch of polled messages: every running task with
    /// messages in it processes them on a processing thread, then its
    /// outputs go out in the open transaction, task by task, each
    /// message's in order.
    pub(super) fn on_batch(
        &mut self,
        polled: &[Polled<'_>],
        prefetch: Option<impl FnOnce()>,
    ) -> Result<(), RuntimeError> {
        self.busy.clear();
        // Messages come in runs of one topic: its input is looked up by
        // name once a run, not once a message.
        let mut last_topic: Option<(*const (), Option<usize>)> = None;
        for (index, (message, epoch)) in polled.iter().enumerate() {
            // Fetched before a rewind sought the task back: it comes again.
            if *epoch < self.rewound_at {
                continue;
            }
            let handle = message.topic_handle();
            let input = match last_topic {
                Some((last, input)) if last == handle => input,
                _ => {
                    let input = self.input_of(message.topic());
                    last_topic = Some((handle, input));
                    input
                }
            };
            let Some(input) = input else {
                continue;
            };
            let Some(assigned) = self.tasks.get_mut(&message.partition()) else {
                continue;
            };
            // Fetched before the task's partitions were paused, or before
            // it started (a prefetch for the task it was before a
            // rebalance): the task seeks to its committed offsets when it
            // starts.
            if !assigned.running || *epoch < assigned.since {
                continue;
            }
            if assigned.share.messages.is_empty() {
                self.busy.push(message.partition());
            }
            assigned.share.messages.push((index, input));
        }
        if self.busy.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.cycle.txn.begin() {
            clear_shares(&mut self.tasks, &self.busy);
            return Err(RuntimeError::Commit(error));
        }
        let started = Instant::now();
        let shared = BatchInputs {
            batch: polled,
            inputs: &self.inputs,
            codecs: &self.codecs,
            now: self.now,
        };
        let mut work: Vec<(&i32, &mut AssignedTask)> = self
            .tasks
            .iter_mut()
            .filter(|(_, s)| !s.share.messages.is_empty())
            .collect();
        crate::runtime::threads::for_each_after(
            self.pool.as_ref(),
            &mut work,
            prefetch,
            |(id, assigned)| {
                let started = Instant::now();
                batch::handle(
                    &shared,
                    **id,
                    &mut assigned.task,
                    &mut assigned.cursor,
                    &mut assigned.share,
                );
                assigned
                    .metrics
                    .processed(assigned.share.handled.len(), started.elapsed());
            },
        );
        drop(work);
        let busy = std::mem::take(&mut self.busy);
        let result = busy
            .iter()
            .try_for_each(|&task| self.produce_batch(task, polled));
        clear_shares(&mut self.tasks, &busy);
        self.busy = busy;
        result?;
        self.batch_duration.record(started.elapsed());
        self.cycle
            .txn
            .fault(FaultPoint::Batch)
            .map_err(RuntimeError::Commit)
    }

    /// Sends what task `task` made of its messages of the batch.
    pub(super) fn produce_batch(
        &mut self,
        task: i32,
        polled: &[Polled<'_>],
    ) -> Result<(), RuntimeError> {
        let Some(assigned) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        let mut share = std::mem::take(&mut assigned.share);
        let handled = share.handled.len() as u64;
        self.consumed_unreported += handled;
        self.consumed_uncommitted += handled;
        if let Some(behind) = share.behind.take() {
            let crate::runtime::batch::SkippedBehind {
                topic,
                offset,
                position,
                count: skipped,
            } = behind;
            tracing::warn!(task, %topic, offset, position, skipped, "The consumer delivered records behind the task's position again (processed already); skipped them.");
            // Or the topic is a new one under the old name, whose offsets
            // start over: its id tells.
            if let Some(watch) = &self.source_watch {
                watch.check_now();
            }
            metrics::counter!(telemetry::RECORDS_BEHIND, "topology" => self.topology.name.clone())
                .increment(skipped);
        }
        // The handled messages' topics, borrowed while `produce` borrows
        // the engine.
        let inputs = Arc::clone(&self.inputs);
        let mut outputs = share.outputs.drain(..);
        let mut start = 0;
        let mut result = Ok(());
        for message in &share.handled {
            let count = message.end - start;
            start = message.end;
            // Most records emit nothing (a fold's events until it closes).
            if count == 0 {
                continue;
            }
            let topic = &inputs[message.input].topic;
            let origin = wire::origin(&polled[message.index].0, topic, &message.headers);
            let these = outputs.by_ref().take(count);
            result = self.produce(task, these, Some(&origin));
            if result.is_err() {
                break;
            }
        }
        drop(outputs);
        if let Some(error) = share.error.take() {
            result = result.and(Err(error));
        }
        if let Some(assigned) = self.tasks.get_mut(&task) {
            assigned.share = share;
        }
        result
    }

    /// Sends what task `task` emitted: sink records, repartition records
    /// and dead letters, inside the open transaction, through the one
    /// output path ([`Writer::write`]).
    pub(super) fn produce(
        &mut self,
        task: i32,
        outputs: impl Iterator<Item = Output>,
        origin: Option<&Origin<'_>>,
    ) -> Result<(), RuntimeError> {
        let Some(assigned) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        let writer = Writer {
            topology: &self.topology,
            codecs: &self.codecs,
            partitions: self.partitions,
        };
        let mut outlet = InTransaction {
            txn: &mut self.cycle.txn,
            topology: &self.topology,
            sink_latency: &self.sink_latency,
            now: wall_clock_ms(),
        };
        writer.write(&mut assigned.task, outputs, origin, &mut outlet)
    }
}

/// The open transaction, as where a task's outputs go.
struct InTransaction<'a> {
    txn: &'a mut Transactions,
    topology: &'a Topology,
    /// Each sink's end-to-end latency histogram, by sink index.
    sink_latency: &'a [metrics::Histogram],
    /// Wall-clock milliseconds when these outputs were handed over.
    now: i64,
}

impl Outlet for InTransaction<'_> {
    type Error = RuntimeError;

    /// The producer's check: the topic's size limit and what the broker
    /// refused for good before. A record too large is counted by the node
    /// or sink it was for.
    fn check(&mut self, record: &Written<'_>) -> Result<(), Refusal> {
        let checked = self.txn.check(&produce(record));
        if let Err(refusal) = &checked {
            let name = match record.at {
                DeadLetterAt::Sink(sink) => &self.topology.sinks[sink].name,
                DeadLetterAt::Node(node) => &self.topology.nodes[node].name,
            };
            tracing::debug!(node = %name, ?refusal, "The broker will not take a record; sending it to the dead-letter topic.");
            if let Refusal::TooLarge(_) = refusal {
                metrics::counter!(telemetry::RECORDS_TOO_LARGE, "topology" => self.topology.name.clone(), "node" => name.clone())
                    .increment(1);
            }
        }
        checked
    }

    /// Sends `record`; a sink record's end-to-end latency is its
    /// timestamp's age now (as Kafka Streams' `record-e2e-latency` at a
    /// terminal node).
    fn send(&mut self, record: Written<'_>) -> Result<(), RuntimeError> {
        self.txn
            .send(produce(&record))
            .map_err(RuntimeError::Commit)?;
        if let DeadLetterAt::Sink(sink) = record.at {
            let age_ms = (self.now - record.from.timestamp).max(0);
            self.sink_latency[sink].record(age_ms as f64 / 1000.0);
        }
        Ok(())
    }

    fn send_dead_letter(&mut self, letter: &DeadLetter) -> Result<(), RuntimeError> {
        self.txn
            .send_dead_letter(&self.topology.dead_letter_topic, letter)
            .map_err(RuntimeError::Commit)
    }
}

/// `record` as the producer takes it.
fn produce<'a>(record: &Written<'a>) -> Produce<'a> {
    Produce {
        topic: record.topic,
        partition: record.partition,
        key: record.key,
        payload: record.payload,
        headers: &record.from.headers,
        timestamp: Some(record.from.timestamp),
        tracked: 0,
    }
}

/// Empties the batch buffers of `busy` tasks, whatever became of their
/// work: the next batch starts from nothing.
pub(super) fn clear_shares(tasks: &mut BTreeMap<i32, AssignedTask>, busy: &[i32]) {
    for task in busy {
        if let Some(assigned) = tasks.get_mut(task) {
            assigned.share.clear();
        }
    }
}
