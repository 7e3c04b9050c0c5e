//! The HTTP side of `run --query-addr`: the server, its routes and the
//! bearer token.
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
//! Other methods are `405` with `Allow: GET`. With `queries.token` set,
//! every request needs `Authorization: Bearer <token>` (`401` otherwise),
//! forwarded ones included: only a holder of the token can send the
//! [`FORWARDED`] header that makes an instance answer from its own tasks.
//! Without a token the header is trusted, and the port must be private.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::{Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use super::endpoints::Directory;
use super::keys::{KeyEncoding, percent_decode, query_params};
use super::{QueryState, QueryableStore, metadata, queryable_stores, reads};
use crate::runtime::RuntimeError;
use crate::secrets::Secret;
use crate::topology::Topology;

/// Marks a request one instance forwarded to another.
pub(crate) const FORWARDED: &str = "x-streamfold-forwarded";

/// Everything a request needs.
pub struct Context {
    pub(crate) topology: Arc<Topology>,
    pub(crate) instance: String,
    pub(crate) state: Arc<QueryState>,
    pub(crate) directory: Arc<Directory>,
    pub(crate) stores: Vec<QueryableStore>,
    pub(crate) client: Client<HttpConnector, Empty<Bytes>>,
    /// `queries.token`: required of every request, sent with every
    /// forwarded one.
    pub(crate) token: Option<Secret>,
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
            client: Client::builder(TokioExecutor::new()).build_http(),
            token: None,
        }
    }

    /// Requires `token` of every request (none: requests are not checked).
    pub fn with_token(mut self, token: Option<Secret>) -> Context {
        self.token = token;
        self
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
        let context = Arc::new(context);
        let thread = std::thread::Builder::new()
            .name("query-server".into())
            .spawn(move || {
                runtime.block_on(accept(listener, context, stopped));
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(startup)?;
        tracing::info!(%addr, "Serving interactive queries.");
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

/// Serves each connection `listener` accepts until `stopped`.
async fn accept(
    listener: tokio::net::TcpListener,
    context: Arc<Context>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "Cannot accept a query connection.");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let context = Arc::clone(&context);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let context = Arc::clone(&context);
                async move { Ok::<_, Infallible>(serve(&context, request).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
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

async fn serve(context: &Arc<Context>, request: Request<Incoming>) -> Reply {
    if request.method() != Method::GET {
        let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "only GET is served");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    if !authorized(context.token.as_ref(), request.headers()) {
        let mut response = error(
            StatusCode::UNAUTHORIZED,
            "this server needs `Authorization: Bearer <queries.token>`",
        );
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    let params = query_params(request.uri());
    let encoding = match KeyEncoding::from_params(&params) {
        Ok(encoding) => encoding,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let forwarded = request.headers().contains_key(FORWARDED);
    // Owned: nothing of the request is borrowed across an await.
    let path = request.uri().path().to_string();
    drop(request);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "stores"] => list_stores(context),
        ["v1", "instances"] => metadata::instances(context),
        ["v1", "stores", name, rest @ ..] => {
            let Some(store) = find_store(context, name) else {
                return unknown_store(context, name);
            };
            match rest {
                [] => reads::scan(context, store, &params, encoding, forwarded).await,
                ["keys", key] => {
                    reads::lookup(context, store, key, encoding, &params, forwarded).await
                }
                ["keys", key, "metadata"] => metadata::key(context, store, key, encoding),
                _ => no_such_path(),
            }
        }
        _ => no_such_path(),
    }
}

fn no_such_path() -> Reply {
    error(
        StatusCode::NOT_FOUND,
        "not found; try /v1/stores, /v1/instances, /v1/stores/<store>, /v1/stores/<store>/keys/<key> or /v1/stores/<store>/keys/<key>/metadata",
    )
}

/// Whether `headers` carry the bearer `token` (always, without one).
fn authorized(token: Option<&Secret>, headers: &HeaderMap) -> bool {
    let Some(token) = token else {
        return true;
    };
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, given)| given.trim());
    given.is_some_and(|given| same_bytes(given.as_bytes(), token.expose().as_bytes()))
}

/// Equality that takes as long whichever byte differs, so that the time
/// of a refusal says nothing of the token.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn list_stores(context: &Context) -> Reply {
    let stores: Vec<Value> = context
        .stores
        .iter()
        .map(|s| {
            let node = &context.topology.nodes[s.node];
            json!({
                "name": s.name,
                "node": node.name,
                "type": node.kind.type_name(),
                "keyed_by": node.common.key_by.as_ref().map_or_else(
                    || "the record key".to_string(),
                    |p| p.to_string(),
                ),
            })
        })
        .collect();
    reply(
        StatusCode::OK,
        &json!({
            "topology": context.topology.name,
            "instance": context.instance,
            "partitions": context.state.partitions(),
            "running": context.state.running(),
            "stores": stores,
        }),
    )
}

fn find_store<'a>(context: &'a Context, name: &str) -> Option<&'a QueryableStore> {
    let name = String::from_utf8_lossy(&percent_decode(name)).into_owned();
    context.stores.iter().find(|s| s.name == name)
}

fn unknown_store(context: &Context, name: &str) -> Reply {
    let names: Vec<&str> = context.stores.iter().map(|s| s.name.as_str()).collect();
    reply(
        StatusCode::NOT_FOUND,
        &json!({
            "error": format!("no queryable store `{}`", String::from_utf8_lossy(&percent_decode(name))),
            "stores": names,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_token_is_authorized() {
        let token = Secret::new("s3cret");
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert!(authorized(None, &HeaderMap::new()));
        assert!(!authorized(Some(&token), &HeaderMap::new()));
        assert!(authorized(Some(&token), &headers("Bearer s3cret")));
        assert!(authorized(Some(&token), &headers("bearer s3cret")));
        assert!(!authorized(Some(&token), &headers("Bearer s3cre")));
        assert!(!authorized(Some(&token), &headers("Bearer s3cret!")));
        assert!(!authorized(Some(&token), &headers("Basic s3cret")));
    }
}
