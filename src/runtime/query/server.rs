//! The HTTP side of `run --query-addr`: the server, what every request
//! shares ([`Context`]) and the shape of answers; `routes` routes the
//! requests (axum) and checks the bearer token.
//!
//! - `GET /v1/stores`: the queryable stores.
//! - `GET /v1/instances`: every instance the directory knows, with its
//!   address, tasks and stores ([`super::metadata`]).
//! - `GET /v1/stores/<store>/keys/<key>`: `{store, key, partition, value}`
//!   or `404` ([`super::reads`]).
//! - `GET /v1/stores/<store>/keys/<key>/metadata`: which partition and
//!   which instance hold the key.
//! - `GET /v1/stores/<store>?prefix=&from=&to=&limit=&cursor=`: one page
//!   of entries in key order, with the `next` cursor while more remain.
//!
//! Other paths are `404`, other methods `405` with `Allow`. With
//! `queries.token` set, every request needs `Authorization: Bearer
//! <token>` (`401` otherwise), forwarded ones included: only a holder of
//! the token can send the [`FORWARDED`] header that makes an instance
//! answer from its own tasks. Without a token the header is trusted, and
//! the port must be private.
//!
//! A request not answered within `queries.request_timeout` is `503`. With
//! `queries.tls` the server speaks HTTPS only and forwards over HTTPS
//! ([`super::tls`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::serve::ListenerExt;
use http_body_util::{Empty, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Response, StatusCode};
use hyper_tls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::endpoints::Directory;
use super::tls::{Tls, TlsListener};
use super::{QueryState, QueryableStore, queryable_stores, routes};
use crate::runtime::RuntimeError;
use crate::secrets::Secret;
use crate::topology::Topology;

/// How long requests in flight may take to finish once the server stops.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Marks a request one instance forwarded to another.
pub(crate) const FORWARDED: &str = "x-streamfold-forwarded";

/// Everything a request needs.
pub struct Context {
    pub(crate) topology: Arc<Topology>,
    pub(crate) instance: String,
    pub(crate) state: Arc<QueryState>,
    pub(crate) directory: Arc<Directory>,
    pub(crate) stores: Vec<QueryableStore>,
    pub(crate) client: Forwarding,
    /// `queries.token`: required of every request, sent with every
    /// forwarded one.
    pub(crate) token: Option<Secret>,
    /// `queries.request_timeout`.
    pub(crate) request_timeout: Duration,
    /// `queries.tls`: HTTPS, served and forwarded.
    tls: Option<Tls>,
}

impl Context {
    pub fn new(
        topology: Arc<Topology>,
        instance: String,
        state: Arc<QueryState>,
        directory: Arc<Directory>,
    ) -> Context {
        let stores = queryable_stores(&topology);
        Context {
            topology,
            instance,
            state,
            directory,
            stores,
            client: Forwarding::Http(Client::builder(TokioExecutor::new()).build_http()),
            token: None,
            request_timeout: Duration::from_secs(10),
            tls: None,
        }
    }

    /// Answers `503` to a request not answered within `timeout`.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Context {
        self.request_timeout = timeout;
        self
    }

    /// Serves HTTPS with `tls`, and forwards over HTTPS trusting its
    /// authorities.
    pub(crate) fn with_tls(mut self, tls: Tls) -> Context {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let https = HttpsConnector::from((http, tls.connector.clone()));
        self.client = Forwarding::Https(Client::builder(TokioExecutor::new()).build(https));
        self.tls = Some(tls);
        self
    }

    /// Requires `token` of every request (none: requests are not checked).
    pub fn with_token(mut self, token: Option<Secret>) -> Context {
        self.token = token;
        self
    }
}

/// How forwarded queries reach the other instances: the scheme every
/// instance serves (they share the topology's `queries.tls`).
pub(crate) enum Forwarding {
    Http(Client<HttpConnector, Empty<Bytes>>),
    Https(Client<HttpsConnector<HttpConnector>, Empty<Bytes>>),
}

impl Forwarding {
    pub(crate) fn scheme(&self) -> &'static str {
        match self {
            Forwarding::Http(_) => "http",
            Forwarding::Https(_) => "https",
        }
    }

    pub(crate) fn request(&self, request: Request<Empty<Bytes>>) -> ResponseFuture {
        match self {
            Forwarding::Http(client) => client.request(request),
            Forwarding::Https(client) => client.request(request),
        }
    }
}

/// The HTTP server, on its own threads, until [`QueryServer::stop`].
pub struct QueryServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl QueryServer {
    pub fn start(addr: SocketAddr, context: Context) -> Result<QueryServer, RuntimeError> {
        let startup = |source: std::io::Error| RuntimeError::Listen {
            addr,
            what: "the query server",
            source,
        };
        let listener = std::net::TcpListener::bind(addr).map_err(startup)?;
        listener.set_nonblocking(true).map_err(startup)?;
        let addr = listener.local_addr().map_err(startup)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("query")
            .enable_all()
            .build()
            .map_err(startup)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(startup)?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let tls = context.tls.clone();
        let scheme = context.client.scheme();
        let router = routes::router(Arc::new(context));
        let serving: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = match tls {
            Some(tls) => {
                let _entered = runtime.enter();
                let listener = TlsListener::new(listener, &tls).map_err(startup)?;
                Box::pin(accept(listener, router, stopped))
            }
            None => {
                let listener = listener.tap_io(|stream| {
                    let _ = stream.set_nodelay(true);
                });
                Box::pin(accept(listener, router, stopped))
            }
        };
        let thread = std::thread::Builder::new()
            .name("query-server".into())
            .spawn(move || {
                runtime.block_on(serving);
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(startup)?;
        tracing::info!(%addr, scheme, "Serving interactive queries.");
        Ok(QueryServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves `router` on `listener` until `stopped`, then lets the requests
/// in flight finish for at most [`STOP_GRACE`].
async fn accept<L>(listener: L, router: axum::Router, stopped: tokio::sync::oneshot::Receiver<()>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let (stopping, stop_seen) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = stopped.await;
        let _ = stopping.send(true);
    });
    let (mut signal, mut grace) = (stop_seen.clone(), stop_seen);
    let serving = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = signal.wait_for(|stop| *stop).await;
    });
    tokio::select! {
        result = serving => {
            if let Err(error) = result {
                tracing::warn!(%error, "The query server stopped.");
            }
        }
        () = async {
            let _ = grace.wait_for(|stop| *stop).await;
            tokio::time::sleep(STOP_GRACE).await;
        } => {}
    }
}

pub(crate) type Reply = Response<Full<Bytes>>;

pub(crate) fn reply(status: StatusCode, body: &Value) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Reply {
    reply(status, &json!({ "error": message.into() }))
}

/// `503` with `Retry-After: 1`: the answer exists but cannot be given
/// now.
pub(crate) fn unavailable(message: impl Into<String>) -> Reply {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, message);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A request that gets no value: an error answer, built late so that
/// results stay small.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// `503` with `Retry-After`.
    Unavailable(String),
    Status(StatusCode, String),
}

impl Refusal {
    pub(crate) fn reply(self) -> Reply {
        match self {
            Refusal::Unavailable(message) => unavailable(message),
            Refusal::Status(status, message) => error(status, message),
        }
    }
}
