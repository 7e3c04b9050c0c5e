//! The operations endpoint behind `--metrics-addr`: one small HTTP server
//! for whoever runs the process.
//!
//! - `GET /metrics`: Prometheus text ([`super::metrics`]);
//! - `GET /healthz`: `200` while the process is alive, `503` once its
//!   processing loop stalled ([`super::health`]);
//! - `GET /readyz`: `200` when every assigned task runs with a usable
//!   producer, `503` while one restores or the process starts or stops.
//!
//! Both health answers carry the [`super::health::Report`] as JSON, so a
//! `curl` says why. Other paths are `404`, other methods `405` with
//! `Allow` (axum's routing).

use std::net::SocketAddr;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use super::health::{Report, health};

/// How often the exporter's histograms drain their buckets.
const UPKEEP: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpsServerError {
    /// The address is taken or not this host's.
    #[error("cannot serve metrics and health on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The server's own thread or runtime could not start.
    #[error("cannot start the metrics and health server: {0}")]
    Runtime(std::io::Error),
}

/// Binds `addr` and serves the routes from a thread of its own for the
/// rest of the process's life; returns the bound address.
pub fn serve(addr: SocketAddr, metrics: PrometheusHandle) -> Result<SocketAddr, OpsServerError> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|source| OpsServerError::Bind { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| OpsServerError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| OpsServerError::Bind { addr, source })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OpsServerError::Runtime)?;
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(OpsServerError::Runtime)?
    };
    let upkeep = metrics.clone();
    let app = router(metrics);
    std::thread::Builder::new()
        .name("ops-server".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(UPKEEP);
                    loop {
                        tick.tick().await;
                        upkeep.run_upkeep();
                    }
                });
                if let Err(error) = axum::serve(listener, app).await {
                    tracing::error!(%error, "The metrics and health server stopped.");
                }
            });
        })
        .map_err(OpsServerError::Runtime)?;
    Ok(bound)
}

fn router(metrics: PrometheusHandle) -> Router {
    // The process metrics are read when scraped, as Prometheus' own
    // clients do.
    let process = std::sync::Arc::new(metrics_process::Collector::default());
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                let process = std::sync::Arc::clone(&process);
                async move {
                    process.collect();
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        metrics.render(),
                    )
                }
            }),
        )
        .route(
            "/healthz",
            get(|| async { answer(health().report(), |r| r.alive) }),
        )
        .route(
            "/readyz",
            get(|| async { answer(health().report(), |r| r.ready) }),
        )
}

/// `200` when `verdict` holds on the report, else `503`; the report as
/// JSON either way.
fn answer(report: Report, verdict: impl Fn(&Report) -> bool) -> Response {
    let status = if verdict(&report) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::to_string(&report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
