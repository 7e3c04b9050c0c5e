//! Running topologies against Kafka: the consumer group, tasks per
//! partition ([`crate::task`]), transactions, restore, punctuation and
//! shutdown. Only this module talks to Kafka.
//!
//! - [`engine`]: the processing loop and rebalance handling;
//! - [`commit`]: the transactional producer and the commit protocol, the
//!   only user of transactions;
//! - [`batch`] and [`threads`]: a task's share of a polled batch, and the
//!   processing threads that handle the shares;
//! - [`restore`]: replaying changelogs into a task's store;
//! - [`connect`]: the first contact, and why it failed;
//! - [`admin`]: startup checks and topic creation;
//! - [`changelog`]: the stamps on changelog records and what is stored
//!   with state;
//! - [`replay`]: `streamfold dlq replay`; [`query`]: interactive queries;
//! - [`health`] and [`ops_server`]: liveness, readiness and metrics over
//!   HTTP.

pub mod admin;
pub(crate) mod batch;
pub(crate) mod changelog;
pub mod cluster_check;
pub mod commit;
pub mod connect;
pub mod engine;
pub(crate) mod fetch;
pub(crate) mod global_tables;
pub mod health;
pub mod metrics;
pub mod ops_server;
pub(crate) mod permissions;
pub mod properties_check;
pub mod query;
pub mod replay;
pub mod reset;
pub(crate) mod restore;
pub mod settings;
pub(crate) mod source_watch;
pub(crate) mod threads;
pub(crate) mod wire;

use std::time::{SystemTime, UNIX_EPOCH};

pub use fetch::RawHeaders;
use rdkafka::error::KafkaError;

use crate::state::StateError;

/// Why `streamfold run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The broker did not answer.
    #[error("cannot reach Kafka at {servers}: {error}")]
    Unreachable { servers: String, error: String },
    /// The broker refused this client's credentials (SASL).
    #[error(
        "authentication failed: Kafka at {servers} refused {login}; check the user name, the password and the mechanism (kafka.security.sasl): {reason}"
    )]
    Authentication {
        servers: String,
        /// The mechanism and user name tried.
        login: String,
        /// librdkafka's words.
        reason: String,
    },
    /// The TLS handshake with the broker failed (most often: its
    /// certificate is not signed by a trusted CA).
    #[error("TLS handshake with Kafka at {servers} failed: {reason}{hint}")]
    Tls {
        servers: String,
        /// librdkafka's words.
        reason: String,
        /// What to check, or empty.
        hint: String,
    },
    /// A source topic was deleted (and maybe created again) while the
    /// application ran: what it committed, stored and wrote to its
    /// changelogs describes records the topic no longer holds.
    #[error(
        "source topic `{topic}` was deleted{} while the application ran (its id was {id}{}): the committed positions, the local state and the changelogs describe records it no longer holds. Stop every instance, then start the application over with `streamfold reset` (its internal topics, offsets and local state go; the sources are read again from where you choose)",
        if recreated.is_some() { " and created again" } else { "" },
        recreated.as_ref().map_or(String::new(), |now| format!(", it is {now} now"))
    )]
    SourceReplaced {
        topic: String,
        /// The topic's id when `run` started.
        id: String,
        /// The new topic's id, when one was created under the name.
        recreated: Option<String>,
    },
    /// The cluster refuses this client an operation the application needs
    /// (an ACL is missing).
    #[error(
        "not authorized: Kafka at {servers} does not allow {principal}: {missing}. Grant the missing ACLs (docs/security.md lists every ACL an application needs) and start again"
    )]
    NotAuthorized {
        servers: String,
        /// Who asked, as the client knows itself.
        principal: String,
        /// Each operation refused, with its resource and why it is needed.
        missing: String,
    },
    /// The cluster does not fit the topology, or would not be made to fit
    /// it: a missing or mismatched topic, a topic it refused to create or
    /// delete, a changelog that is not compacted.
    #[error("{0}")]
    Cluster(String),
    /// A setting cannot work as given (librdkafka refused a property, a
    /// query address other instances cannot reach).
    #[error("{0}")]
    Settings(String),
    /// A source or sink format cannot be set up (a schema, a registry).
    #[error(transparent)]
    Format(#[from] crate::formats::FormatError),
    /// An address to listen on is taken or not this host's.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        addr: std::net::SocketAddr,
        /// What would have listened there.
        what: &'static str,
        source: std::io::Error,
    },
    /// The process could not start a thread or a runtime it needs (this
    /// host's limits).
    #[error("cannot start {what}: {source}")]
    Resources {
        what: String,
        source: std::io::Error,
    },
    /// The transactional producer could not start (its id refused, the
    /// transaction coordinator unreachable).
    #[error("cannot start the transactional producer: {0}")]
    Producer(KafkaError),
    /// A Kafka client call failed.
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// A task's local state could not be opened, read or written.
    #[error("state: {0}")]
    State(#[from] StateError),
    /// A task stopped on an internal error.
    #[error("task {task}: {source}")]
    Task {
        task: i32,
        source: crate::task::TaskError,
    },
    /// A transaction could not be committed: see [`commit::CommitError`]
    /// for what each case means for the tasks.
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

/// The wall clock, in epoch milliseconds: processing time, and the time
/// answers and broker checks are made at.
pub(crate) fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
