//! Batches of messages, handled by the tasks they belong to on the
//! processing threads (`processing.threads`).
//!
//! The polling thread owns the consumer and the transactional producer
//! and runs everything that talks to Kafka: polling, rebalances, restore,
//! producing, the commit. What it polls it hands out by task: each task
//! with messages in the batch decodes and processes them, in offset
//! order, on one of the processing threads (the polling thread is one of
//! them, see [`for_each`]), into its own [`Scratch`]; then
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
use crate::task::{Output, Task};

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
pub(super) struct Scratch {
    /// The task's messages, as (index in the batch, input), in offset
    /// order.
    pub(super) messages: Vec<(usize, usize)>,
    /// The messages handled, in order, each with where its outputs end.
    pub(super) handled: Vec<Handled>,
    /// Every output of the handled messages, or of the task's timers.
    pub(super) outputs: Vec<Output>,
    /// Whether the task has more timers due than one round fires.
    pub(super) more_due: bool,
    /// The failure that stopped the task's share, if one did.
    pub(super) error: Option<RuntimeError>,
    /// Messages skipped because they lie behind the task's position.
    pub(super) behind: Option<Behind>,
}

/// Messages a task skipped in one round because they lie behind its
/// position: the first of them, and how many.
pub(super) struct Behind {
    pub(super) topic: String,
    pub(super) offset: i64,
    pub(super) position: i64,
    pub(super) count: u64,
}

/// One message a task handled.
pub(super) struct Handled {
    pub(super) index: usize,
    /// The input it was read from.
    pub(super) input: usize,
    /// The message's headers (the record's, and its dead letters').
    pub(super) headers: Vec<(String, Vec<u8>)>,
    /// End of its outputs in [`Scratch::outputs`].
    pub(super) end: usize,
}

impl Scratch {
    pub(super) fn clear(&mut self) {
        self.messages.clear();
        self.handled.clear();
        self.outputs.clear();
        self.more_due = false;
        self.error = None;
        self.behind = None;
    }
}

/// Runs `work` on every item: with a pool and more than one item, this
/// thread and the pool's threads each take the next item not yet taken
/// (the pool's from the front, this thread from the back) until none is
/// left, so a thread that finishes early (or the pool's, still waking up)
/// does not leave the others waiting at the end; else all on this thread.
/// Each item is worked on by one thread.
pub(super) fn for_each<T: Send>(
    pool: Option<&rayon::ThreadPool>,
    items: &mut [T],
    work: impl Fn(&mut T) + Sync + Send,
) {
    for_each_after(pool, items, None::<fn()>, work);
}

/// [`for_each`], with this thread doing `first` before it takes items:
/// with a pool, the pool's threads start on the items meanwhile.
pub(super) fn for_each_after<T: Send>(
    pool: Option<&rayon::ThreadPool>,
    items: &mut [T],
    first: Option<impl FnOnce()>,
    work: impl Fn(&mut T) + Sync + Send,
) {
    // Items this thread leaves to the pool's: all but one, or all while it
    // does `first`.
    let shared = (items.len() + usize::from(first.is_some())).saturating_sub(1);
    match pool {
        Some(pool) if shared > 0 => {
            let helpers = pool.current_num_threads().min(shared);
            let next = std::sync::Mutex::new(items.iter_mut());
            // The lock is held only to take an item, not while it is
            // worked on. The pool's threads take from the front, this
            // thread from the back: from one batch to the next, a task
            // tends to stay on the same thread, its state in that core's
            // caches.
            let take = |back: bool| {
                let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
                if back { next.next_back() } else { next.next() }
            };
            let drain = |back: bool| {
                while let Some(item) = take(back) {
                    work(item);
                }
            };
            let drain = &drain;
            pool.in_place_scope(|scope| {
                for _ in 0..helpers {
                    scope.spawn(move |_| drain(false));
                }
                if let Some(first) = first {
                    first();
                }
                drain(true);
            });
        }
        _ => {
            if let Some(first) = first {
                first();
            }
            items.iter_mut().for_each(work);
        }
    }
}

/// The processing threads besides the polling thread (which processes
/// too), or none when there is to be one: then every task runs on the
/// polling thread.
pub(super) fn pool(threads: usize, app: &str) -> Result<Option<rayon::ThreadPool>, RuntimeError> {
    if threads <= 1 {
        return Ok(None);
    }
    let app = app.to_string();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads - 1)
        .thread_name(move |i| format!("{app}-processing-{i}"))
        .build()
        .map(Some)
        .map_err(|e| {
            RuntimeError::Startup(format!("cannot start {threads} processing threads: {e}"))
        })
}

/// What every task of a batch reads.
pub(super) struct Shared<'a, 'c> {
    /// The polled messages.
    pub(super) batch: &'a [Polled<'c>],
    pub(super) inputs: &'a [Input],
    pub(super) codecs: &'a Codecs,
    pub(super) now: Timestamp,
}

/// Task `id` decodes and processes its messages of the batch, in order,
/// moving its positions past each one; it stops at a failure.
pub(super) fn handle(
    shared: &Shared<'_, '_>,
    id: i32,
    task: &mut Task,
    cursor: &mut TaskCursor,
    scratch: &mut Scratch,
) {
    task.set_processing_time(shared.now);
    let mut records = task.records();
    for &(index, input) in &scratch.messages {
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
            scratch
                .behind
                .get_or_insert_with(|| Behind {
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
        let outputs = &mut scratch.outputs;
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
                let read =
                    wire::read_repartitioned(message.key(), message.payload(), timestamp, &headers);
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
            scratch.error = Some(RuntimeError::Task { task: id, source });
            return;
        }
        cursor.positions[input] = Some(message.offset() + 1);
        let end = scratch.outputs.len();
        scratch.handled.push(Handled {
            index,
            input,
            headers,
            end,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    use super::{for_each, for_each_after, pool};

    /// Every item is worked on once, by one thread, with or without a
    /// pool, and the work spreads over the pool's thread and this one.
    #[test]
    fn for_each_works_every_item_once() {
        let pool = pool(2, "test").unwrap();
        let caller = std::thread::current().id();
        for pool in [None, pool.as_ref()] {
            for len in [0, 1, 2, 3, 64] {
                // (visits, the thread of the last visit)
                let mut items: Vec<(u32, Option<ThreadId>)> = vec![(0, None); len];
                let threads = Mutex::new(HashSet::new());
                let both_wanted = pool.is_some() && len > 1;
                for_each(pool, &mut items, |(visits, by)| {
                    *visits += 1;
                    *by = Some(std::thread::current().id());
                    threads.lock().unwrap().insert(std::thread::current().id());
                    // Hold this item until the other thread has taken one
                    // (for at most 10 s): both must take part.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while both_wanted
                        && threads.lock().unwrap().len() < 2
                        && Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                assert!(items.iter().all(|&(visits, _)| visits == 1), "{items:?}");
                let threads = threads.into_inner().unwrap().len();
                if both_wanted {
                    assert_eq!(threads, 2, "both threads should take items");
                    // Each holds its first item until the other has one:
                    // the pool's thread took the first, this one the last.
                    assert_ne!(
                        items[0].1,
                        Some(caller),
                        "the pool's thread takes from the front"
                    );
                    assert_eq!(
                        items[len - 1].1,
                        Some(caller),
                        "this thread takes from the back"
                    );
                } else {
                    assert!(threads <= 1);
                }
            }
        }
    }

    /// `first` runs on the calling thread, once, while the pool's thread
    /// starts on the items (even on a single one); then every item is
    /// worked on once.
    #[test]
    fn for_each_after_overlaps_first_with_the_items() {
        let pool = pool(2, "test").unwrap();
        for pool in [None, pool.as_ref()] {
            for len in [0, 1, 3] {
                let mut items: Vec<u32> = vec![0; len];
                let taken = Mutex::new(0);
                let mut ran = None;
                let caller = std::thread::current().id();
                let overlap_wanted = pool.is_some() && len > 0;
                for_each_after(
                    pool,
                    &mut items,
                    Some(|| {
                        // Waits (for at most 10 s) until the pool's thread
                        // has taken an item.
                        let deadline = Instant::now() + Duration::from_secs(10);
                        while overlap_wanted
                            && *taken.lock().unwrap() == 0
                            && Instant::now() < deadline
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        ran = Some((std::thread::current().id(), *taken.lock().unwrap()));
                    }),
                    |visits| {
                        *visits += 1;
                        *taken.lock().unwrap() += 1;
                    },
                );
                assert!(items.iter().all(|&visits| visits == 1), "{items:?}");
                let (thread, taken_meanwhile) = ran.expect("`first` ran");
                assert_eq!(thread, caller, "`first` runs on the calling thread");
                if overlap_wanted {
                    assert!(taken_meanwhile > 0, "the pool started while `first` ran");
                } else {
                    assert_eq!(taken_meanwhile, 0, "without a pool, `first` runs first");
                }
            }
        }
    }
}
