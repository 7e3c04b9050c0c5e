//! The commit cycle: the only module that begins, commits or aborts a
//! transaction, sends offsets, stamps changelog records, applies task state
//! after a commit, and rewinds the consumer after an abort.
//!
//! # The cycle (`exactly_once`)
//!
//! 1. **begin** — lazily, with the first record consumed or produced;
//! 2. **produce** — sink records, repartition records and dead letters as
//!    the tasks emit them;
//! 3. **changelog** — at commit, every running task's pending state changes
//!    go to its changelog partitions, collapsed per key, each stamped with
//!    the task's event time (see [`super::changelog`]);
//! 4. **offsets** — once every record is acknowledged, the tasks' input
//!    positions join the transaction (`send_offsets_to_transaction` with
//!    the consumer's group metadata);
//! 5. **commit** — the transaction commits;
//! 6. **apply** — only now are each task's pending changes written to its
//!    store, in one RocksDB batch with the changelog offsets they reached
//!    and the task's event time.
//!
//! Under `at_least_once` the same steps run without a transaction: outputs
//! and changelogs are flushed, offsets committed, then state applied.
//!
//! # Invariants
//!
//! - Local state is never ahead of Kafka: a store holds only changes whose
//!   transaction committed (step 6 follows step 5).
//! - Every piece of per-task memory (pending writes, the timer cache, the
//!   event clock, counters) returns to its state at the last commit when a
//!   transaction aborts ([`crate::task::Task::abort`]), and the consumer is rewound to
//!   the committed positions, so re-consumed records meet exactly the state
//!   the first attempt met.
//! - An abortable error anywhere in the cycle (a produce the broker
//!   refused, a failed offsets send, a flush timeout) aborts and rewinds;
//!   only fencing and fatal producer errors end the member.
//!
//! # What a crash at each step leaves
//!
//! | crash after | Kafka | local state | on restart |
//! |---|---|---|---|
//! | begin, produce, changelog, offsets, flush | an open transaction | last commit | `init_transactions` with the same transactional id aborts it; input is re-read from the committed offsets |
//! | commit | committed | one commit behind | restore replays the changelog tail from the stored changelog offsets, so the store catches up |
//! | apply | committed | current | nothing to do |
//!
//! Read_committed readers (downstream consumers, and the restore of
//! [`super::restore`]) never see anything of an aborted transaction:
//! Apache Kafka hides its records and compacts below the last stable
//! offset only. streamfold relies on that; a broker that shows aborted
//! records to read_committed readers cannot give exactly-once.
//!
//! # Testing hooks
//!
//! [`TestHooks`] (hidden `run` flags) stamp every record with its
//! transaction, keep a journal of which transactions began and committed,
//! and inject faults (abort, or kill the process) at named points of the
//! cycle, so tests know exactly which transaction was open at a kill.

mod cycle;
mod delivery;
mod hooks;
mod transactions;

use std::time::Duration;

pub(crate) use cycle::{CommitCycle, CycleTask, TaskCursor, offsets_list};
pub(crate) use hooks::Faults;
pub use hooks::{Fault, FaultAction, FaultPoint, TestHooks};
pub(crate) use transactions::{Produce, Transactions, rand_u64};

/// How long a transactional call may take before we give up on it.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the commit protocol, by what must happen next.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The transaction was aborted: pending state must be dropped and the
    /// consumer rewound to the committed offsets.
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// A newer process initialised our transactional id: this one is a
    /// zombie and must stop (rejoining would fence the newer one in turn).
    #[error("fenced: {0}")]
    Fenced(String),
    /// This producer can no longer be used (a fatal error): close the tasks
    /// and start over.
    #[error("producer unusable: {0}")]
    Fatal(String),
}
