//! streamfold: a Kafka Streams-style stateful stream processor.
//!
//! A topology file ([`topology`]) describes sources, operators
//! ([`operators`]) and sinks; tasks ([`task`]) run it per partition over
//! typed state ([`state`]). The Kafka runtime ([`runtime`]) and the offline
//! driver ([`testkit`], fixture records and a virtual clock) both drive
//! tasks and read and write records through the same codecs ([`formats`]).
//! Topology files and operator options share one configuration language
//! ([`config`]).
//!
//! # The supported surface
//!
//! Items are `pub(crate)` unless something outside the library uses them:
//! the `streamfold` and `streamfold-loadgen` binaries, the integration
//! tests and the benchmarks. What stays `pub` is what those need, and is
//! what this library supports:
//!
//! - loading and checking topologies: [`topology::load_file`],
//!   [`topology::load_str`], [`topology::Topology`] and its parts,
//!   [`topology::describe`], the configuration value types
//!   ([`config::types::HumanDuration`]) and the YAML reader;
//! - running them: [`runtime::engine::run`] with
//!   [`runtime::settings::RunOptions`], [`runtime::replay::replay`] (`dlq
//!   replay`), the metrics exporter ([`runtime::metrics`]), the query
//!   server ([`runtime::query`]), and the commit cycle's test hooks
//!   ([`runtime::commit::TestHooks`]: faults and the journal);
//! - testing them offline: [`testkit::Driver`], [`testkit::run_cases`];
//! - the pieces the benchmarks drive directly: [`task::Task`], the state
//!   backends ([`state::memory::MemoryBackend`],
//!   [`state::rocks::RocksBackend`]), the codecs ([`formats::Codecs`]) and
//!   the value formats ([`record::json`], [`record::avro`]).
//!
//! Operators are not a public extension point: the list in the operator
//! registry is closed, and their traits are crate-private.

pub mod config;
pub mod exit_code;
pub mod formats;
pub mod operators;
pub mod record;
pub mod runtime;
pub mod secrets;
pub mod state;
pub mod task;
pub mod telemetry;
pub mod testkit;
pub mod topology;
