//! Record encodings: how bytes on a topic become [`Record`](crate::record::Record)
//! values and back.

pub mod json;
