//! streamfold: a Kafka Streams-style stateful stream processor.
//!
//! A topology file ([`topology`]) describes sources, operators
//! ([`operators`]) and sinks; tasks ([`runtime::task`]) run it per
//! partition over typed state ([`state`]); the offline driver
//! ([`testkit`]) runs it against fixture records with a virtual clock.
//! Topology files and operator options share one configuration language
//! ([`config`]).

pub mod config;
pub mod formats;
pub mod operators;
pub mod record;
pub mod runtime;
pub mod secrets;
pub mod state;
pub mod telemetry;
pub mod testkit;
pub mod topology;
