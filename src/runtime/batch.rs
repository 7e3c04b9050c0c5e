//! Batches of messages, handled by the tasks they belong to on the
//! processing threads (`processing.threads`).
//!
//! The polling thread owns the consumer and the transactional producer
//! and runs everything that talks to Kafka: polling, rebalances, restore,
//! producing, the commit. What it polls it hands out by task: each task
//! with messages in the batch decodes and processes them, in offset
//! order, on one of the processing threads (the polling thread is one of
//! them, see [`super::threads::for_each`]), into its own [`BatchShare`]; then
//! the polling thread produces every task's outputs inside the open
//! transaction. A task is on one thread at a time and its records stay in
//! order; no two threads ever touch one task, and the consumer and
//! producer stay on one thread, so the exactly-once cycle is the same
//! whatever the number of threads (`docs/exactly-once.md`, "Threads").

use super::commit::TaskCursor;
use super::fetch::Fetched;
use super::{RuntimeError, wire};
use crate::formats::Codecs;
use crate::record::Timestamp;
use crate::task::{Output, Task, repartition};

/// Messages taken from the consumer at once: the tasks among them run
/// side by side.
pub(super) const BATCH: usize = 512;

/// A polled message and the epoch (rebalance callbacks and rewinds so
/// far) after the poll that returned it (see `Engine::rewound_at`).
pub(super) type Polled<'c> = (Fetched<'c>, u64);

/// An input topic of this topology.
pub(super) struct Input {
    pub(super) topic: String,
    pub(super) kind: InputKind,
}

pub(super) enum InputKind {
    /// Sources reading the topic (usually one).
    Source(Vec<usize>),
    /// The repartition topic of a `key_by` node.
    Repartition { node: usize },
}

/// A task's share of a batch and what it made of it. Kept with the task
/// between batches so its buffers keep their capacity.
#[derive(Default)]
pub(super) struct BatchShare {
    /// The task's messages, as (index in the batch, input), in offset
    /// order.
    pub(super) messages: Vec<(usize, usize)>,
    /// The messages handled, in order, each with where its outputs end.
    pub(super) handled: Vec<HandledMessage>,
    /// Every output of the handled messages, or of the task's timers.
    pub(super) outputs: Vec<Output>,
    /// Whether the task has more timers due than one round fires.
    pub(super) more_due: bool,
    /// The failure that stopped the task's share, if one did.
    pub(super) error: Option<RuntimeError>,
    /// Messages skipped because they lie behind the task's position.
    pub(super) behind: Option<SkippedBehind>,
}

/// Messages a task skipped in one round because they lie behind its
/// position: the first of them, and how many.
pub(super) struct SkippedBehind {
    pub(super) topic: String,
    pub(super) offset: i64,
    pub(super) position: i64,
    pub(super) count: u64,
}

/// One message a task handled.
pub(super) struct HandledMessage {
    pub(super) index: usize,
    /// The input it was read from.
    pub(super) input: usize,
    /// The message's headers (the record's, and its dead letters').
    pub(super) headers: Vec<(String, Vec<u8>)>,
    /// End of its outputs in [`BatchShare::outputs`].
    pub(super) end: usize,
}

impl BatchShare {
    pub(super) fn clear(&mut self) {
        self.messages.clear();
        self.handled.clear();
        self.outputs.clear();
        self.more_due = false;
        self.error = None;
        self.behind = None;
    }
}

/// What every task of a batch reads.
pub(super) struct BatchInputs<'a, 'c> {
    /// The polled messages.
    pub(super) batch: &'a [Polled<'c>],
    pub(super) inputs: &'a [Input],
    pub(super) codecs: &'a Codecs,
    pub(super) now: Timestamp,
}

/// Task `id` decodes and processes its messages of the batch, in order,
/// moving its positions past each one; it stops at a failure.
pub(super) fn handle(
    shared: &BatchInputs<'_, '_>,
    id: i32,
    task: &mut Task,
    cursor: &mut TaskCursor,
    share: &mut BatchShare,
) {
    task.set_processing_time(shared.now);
    let mut records = task.records();
    for &(index, input) in &share.messages {
        let message = &shared.batch[index].0;
        // Behind the task's position: processed already. Only the engine
        // moves a task back (a rewind seeks it, and its state, to the last
        // commit), but librdkafka can move a partition back on its own: an
        // offset query its timer resends after an outdated reply resets an
        // active partition to `auto.offset.reset` without a version barrier
        // (fixed in the vendored librdkafka; this guard stays for any other
        // path that moves a partition back). Processed again, such a record
        // would count twice.
        if let Some(next) = cursor.positions[input]
            && message.offset() < next
        {
            share
                .behind
                .get_or_insert_with(|| SkippedBehind {
                    topic: message.topic().to_string(),
                    offset: message.offset(),
                    position: next,
                    count: 0,
                })
                .count += 1;
            continue;
        }
        let headers = message.headers();
        let origin = wire::origin(message, &shared.inputs[input].topic, &headers);
        let timestamp = wire::timestamp(message, shared.now);
        let outputs = &mut share.outputs;
        let result = match &shared.inputs[input].kind {
            InputKind::Source(sources) => {
                let mut result = Ok(());
                for &source in sources {
                    result = records.process_source_bytes(
                        source,
                        &origin,
                        shared.codecs,
                        timestamp,
                        outputs,
                    );
                    if result.is_err() {
                        break;
                    }
                }
                result
            }
            InputKind::Repartition { node } => {
                let read = repartition::read(message.key(), message.payload(), timestamp, &headers);
                match read.record {
                    Ok(record) => records.process_repartitioned(
                        *node,
                        read.input,
                        read.upstream,
                        &origin,
                        record,
                        outputs,
                    ),
                    Err(reason) => {
                        records.unreadable_repartitioned(*node, &origin, &reason, outputs);
                        Ok(())
                    }
                }
            }
        };
        if let Err(source) = result {
            share.error = Some(RuntimeError::Task { task: id, source });
            return;
        }
        cursor.positions[input] = Some(message.offset() + 1);
        let end = share.outputs.len();
        share.handled.push(HandledMessage {
            index,
            input,
            headers,
            end,
        });
    }
}
