//! The configuration language every part of a topology file is written in,
//! below both the topology compiler and the operators that define their
//! own options:
//!
//! - [`yaml`]: the YAML text as a tree that remembers positions, with
//!   `${VAR}` interpolated;
//! - [`de`]: a serde deserializer over that tree whose errors carry the
//!   position and path they concern, and "did you mean" suggestions;
//! - [`types`]: value types that fields share (human durations, JSON
//!   pointers, references to upstream nodes).

pub mod de;
pub mod types;
pub mod yaml;
