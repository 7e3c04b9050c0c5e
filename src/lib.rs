//! streamfold: a Kafka Streams-style stateful stream processor.
//!
//! A topology file ([`topology`]) describes sources, operators
//! ([`operators`]) and sinks; tasks ([`task`]) run it per partition over
//! typed state ([`state`]). The Kafka runtime ([`runtime`]) and the offline
//! driver ([`testkit`], fixture records and a virtual clock) both drive
//! tasks and read and write records through the same codecs ([`formats`]).
//! Topology files and operator options share one configuration language
//! ([`config`]).

pub mod config;
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
