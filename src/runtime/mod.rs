//! Running topologies against Kafka: the consumer group, tasks per
//! partition, transactions, restore, punctuation and shutdown.
//!
//! - [`task`]: the topology over one partition number (also used offline);
//! - [`engine`]: the processing loop and rebalance handling;
//! - [`commit`]: the commit protocol, the only user of transactions;
//! - [`restore`]: replaying changelogs into a task's store;
//! - [`admin`]: startup checks and topic creation;
//! - [`changelog`]: the position rule and what is stored with state;
//! - [`limits`]: record sizes against what the producer and topics accept.

pub mod admin;
pub mod changelog;
pub mod commit;
pub mod config;
pub mod engine;
pub mod limits;
pub mod partitioner;
pub mod replay;
pub mod restore;
pub mod task;

use rdkafka::error::KafkaError;

use crate::state::StateError;

/// Why `streamfold run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The broker did not answer.
    #[error("cannot reach Kafka at {servers}: {error}")]
    Unreachable { servers: String, error: String },
    /// The cluster does not fit the topology (missing or mismatched topics).
    #[error("{0}")]
    Startup(String),
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("state: {0}")]
    State(#[from] StateError),
    /// A task stopped on an internal error.
    #[error("task {task}: {source}")]
    Task { task: i32, source: task::TaskError },
    #[error("commit: {0}")]
    Commit(commit::CommitError),
    /// Another process started with this instance's id and took over.
    #[error(
        "this instance was fenced: another process started with --instance-id `{instance}` (transactional id `{transactional_id}`) and took over its work, so this one stops ({reason})"
    )]
    Fenced {
        instance: String,
        transactional_id: String,
        reason: String,
    },
}
