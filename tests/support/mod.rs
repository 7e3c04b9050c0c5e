//! Shared helpers for the integration tests against Apache Kafka, in rooms:
//!
//! - [`broker`]: Kafka nodes in KRaft mode on loopback, one per test binary
//!   or a three-node cluster a test starts for itself;
//! - [`admin`]: topics, groups and records as an operator manages them;
//! - [`producer`] and [`consumer`]: test input, and outputs read under
//!   read_committed to the partitions' ends;
//! - [`chaos`]: the chaos harness: instances under seeded faults;
//! - [`app`]: `streamfold run` as a child process, its log and metrics;
//! - [`metrics`]: Prometheus text;
//! - [`process`]: `/proc` readings and signals;
//! - [`netns`]: network namespaces, for real network partitions;
//! - [`journal`]: the transaction journal a test process may keep;
//! - [`state`]: a stopped application's stores, read from RocksDB;
//! - [`tls`]: a Kafka that requires SASL/SCRAM over TLS, with ACLs;
//! - [`registry`] and [`fastavro`]: an in-process schema registry and a
//!   Python Avro reader.
//!
//! Random topic and application names per test. Tests in one binary run
//! one at a time ([`serial`]): each starts processes that compete for the
//! machine's two cores.

#![allow(dead_code)]
#![allow(unused_imports)]

pub mod admin;
pub mod app;
pub mod broker;
pub mod chaos;
pub mod consumer;
pub mod fastavro;
pub mod journal;
pub mod metrics;
pub mod netns;
pub mod process;
pub mod producer;
pub mod registry;
pub mod state;
pub mod tls;

pub use admin::*;
pub use app::*;
pub use broker::*;
pub use consumer::*;
pub use journal::*;
pub use metrics::*;
pub use netns::*;
pub use process::*;
pub use producer::*;
pub use state::*;
pub use tls::*;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs tests of one binary one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The short hash of the checkout's `HEAD` (empty outside git), which a
/// benchmark's table names.
pub fn head_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A scratch directory for a test's state and logs.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("streamfold-it-")
        .tempdir()
        .unwrap()
}

/// A name unique to this run: `prefix-<random>`.
pub fn unique(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id()));
    format!("{prefix}-{:08x}", h.finish() as u32)
}
