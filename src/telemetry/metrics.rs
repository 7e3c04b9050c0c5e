//! The Prometheus exporter behind `--metrics-addr`.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Commit latencies worth telling apart, in seconds.
const COMMIT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Serves `/metrics` on `addr` from a background thread.
pub fn install(addr: SocketAddr) -> Result<(), String> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Full(super::COMMIT_DURATION.to_string()),
            COMMIT_BUCKETS,
        )
        .map_err(|e| e.to_string())?
        .install()
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))
}
