//! The HTTP side of `run --query-addr`: routes, local reads, forwarding.
//!
//! - `GET /v1/stores`: the queryable stores.
//! - `GET /v1/stores/<store>/keys/<key>`: `{store, key, partition, value}`
//!   or `404`.
//! - `GET /v1/stores/<store>?prefix=…&limit=…`: `{store, prefix, entries:
//!   [{key, partition, value}], truncated}`, in key order.
//!
//! A task that restores here, or whose owner is unknown, answers `503`
//! with `Retry-After: 1`. Tasks of other instances are asked over HTTP
//! with the header [`FORWARDED`] and `tasks=<list>`: such a request is
//! answered from local tasks only (never forwarded again), always as an
//! entry list. Forwarding uses hyper's client (hyper-util's legacy
//! pool): hyper already serves; a second HTTP stack would add weight for
//! nothing.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use percent_encoding::{NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::{Value, json};

use super::endpoints::Directory;
use super::{Local, MAX_SCAN_LIMIT, QueryState, QueryableStore, ReadError, queryable_stores};
use crate::runtime::RuntimeError;
use crate::task::partitioner::partition_for;
use crate::topology::Topology;

/// Marks a request one instance forwarded to another.
pub(crate) const FORWARDED: &str = "x-streamfold-forwarded";

/// Entries a scan returns when the request names no `limit`.
const DEFAULT_SCAN_LIMIT: usize = 100;

/// How long a forwarded request may take before the answer is `503`.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything a request needs.
pub struct Context {
    pub(crate) topology: Arc<Topology>,
    pub(crate) instance: String,
    pub(crate) state: Arc<QueryState>,
    pub(crate) directory: Arc<Directory>,
    stores: Vec<QueryableStore>,
    client: Client<HttpConnector, Empty<Bytes>>,
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
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let context = Arc::new(context);
        let thread = std::thread::Builder::new()
            .name("query-server".into())
            .spawn(move || {
                runtime.block_on(async move {
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
                });
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

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, body: &Value) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error(status: StatusCode, message: impl Into<String>) -> Reply {
    reply(status, &json!({ "error": message.into() }))
}

/// `503` with `Retry-After: 1`: the answer exists but cannot be given
/// now.
fn unavailable(message: impl Into<String>) -> Reply {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, message);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A request that gets no value: an error answer, built late so that
/// results stay small.
enum Refusal {
    /// `503` with `Retry-After`.
    Unavailable(String),
    Status(StatusCode, String),
}

impl Refusal {
    fn reply(self) -> Reply {
        match self {
            Refusal::Unavailable(message) => unavailable(message),
            Refusal::Status(status, message) => error(status, message),
        }
    }
}

/// What a request asks of each task.
#[derive(Clone, Debug)]
enum Op {
    Get(Vec<u8>),
    Scan { prefix: Vec<u8>, limit: usize },
}

/// One entry found, as JSON-ready parts.
struct Found {
    key: String,
    partition: i32,
    value: Value,
}

fn decode(text: &str) -> Vec<u8> {
    percent_decode_str(text).collect()
}

fn query_params(uri: &Uri) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        // `+` is a space in query strings.
        let value = value.replace('+', " ");
        out.insert(
            String::from_utf8_lossy(&decode(name)).into_owned(),
            decode(&value),
        );
    }
    out
}

async fn serve(context: &Context, request: Request<Incoming>) -> Reply {
    if request.method() != Method::GET {
        return error(StatusCode::METHOD_NOT_ALLOWED, "only GET is served");
    }
    let path = request.uri().path().to_string();
    let params = query_params(request.uri());
    let forwarded = request.headers().contains_key(FORWARDED);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "stores"] => list_stores(context),
        ["v1", "stores", store] => {
            let Some(store) = find_store(context, store) else {
                return unknown_store(context, store);
            };
            let limit = match params
                .get("limit")
                .map(|l| String::from_utf8_lossy(l).parse())
            {
                None => DEFAULT_SCAN_LIMIT,
                Some(Ok(limit)) if (1..=MAX_SCAN_LIMIT).contains(&limit) => limit,
                Some(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be a number from 1 to {MAX_SCAN_LIMIT}"),
                    );
                }
            };
            let prefix = params.get("prefix").cloned().unwrap_or_default();
            let op = Op::Scan {
                prefix: prefix.clone(),
                limit,
            };
            let tasks = match tasks_for(context, store, &op, &params, forwarded) {
                Ok(tasks) => tasks,
                Err(refusal) => return refusal.reply(),
            };
            match answer(context, store, &op, &tasks, forwarded).await {
                Err(refusal) => refusal.reply(),
                Ok(found) if forwarded => entries(&found),
                Ok(mut found) => {
                    found.sort_by(|a, b| a.key.cmp(&b.key));
                    let truncated = found.len() > limit;
                    found.truncate(limit);
                    let mut body = entries_json(&found);
                    body["store"] = json!(store.name);
                    body["prefix"] = json!(String::from_utf8_lossy(&prefix));
                    body["truncated"] = json!(truncated);
                    reply(StatusCode::OK, &body)
                }
            }
        }
        ["v1", "stores", store, "keys", key] => {
            let Some(store) = find_store(context, store) else {
                return unknown_store(context, store);
            };
            let key = decode(key);
            let op = Op::Get(key.clone());
            let tasks = match tasks_for(context, store, &op, &params, forwarded) {
                Ok(tasks) => tasks,
                Err(refusal) => return refusal.reply(),
            };
            match answer(context, store, &op, &tasks, forwarded).await {
                Err(refusal) => refusal.reply(),
                Ok(found) if forwarded => entries(&found),
                Ok(found) => match found.into_iter().next() {
                    Some(found) => reply(
                        StatusCode::OK,
                        &json!({
                            "store": store.name,
                            "key": found.key,
                            "partition": found.partition,
                            "value": found.value,
                        }),
                    ),
                    None => reply(
                        StatusCode::NOT_FOUND,
                        &json!({
                            "error": "no such key",
                            "store": store.name,
                            "key": String::from_utf8_lossy(&key),
                        }),
                    ),
                },
            }
        }
        _ => error(
            StatusCode::NOT_FOUND,
            "not found; try /v1/stores, /v1/stores/<store>/keys/<key> or /v1/stores/<store>?prefix=",
        ),
    }
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
    let name = String::from_utf8_lossy(&decode(name)).into_owned();
    context.stores.iter().find(|s| s.name == name)
}

fn unknown_store(context: &Context, name: &str) -> Reply {
    let names: Vec<&str> = context.stores.iter().map(|s| s.name.as_str()).collect();
    reply(
        StatusCode::NOT_FOUND,
        &json!({
            "error": format!("no queryable store `{}`", String::from_utf8_lossy(&decode(name))),
            "stores": names,
        }),
    )
}

/// The tasks to ask: those a forwarding instance named, the key's task
/// when the runtime routes the store's keys, every task otherwise.
fn tasks_for(
    context: &Context,
    store: &QueryableStore,
    op: &Op,
    params: &BTreeMap<String, Vec<u8>>,
    forwarded: bool,
) -> Result<Vec<i32>, Refusal> {
    let partitions = context.state.partitions();
    if partitions <= 0 {
        return Err(Refusal::Unavailable("the instance is starting".into()));
    }
    if forwarded {
        let list = String::from_utf8_lossy(params.get("tasks").map_or(&[][..], |t| t));
        return list
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| {
                t.parse::<i32>()
                    .ok()
                    .filter(|t| (0..partitions).contains(t))
            })
            .collect::<Option<Vec<i32>>>()
            .ok_or_else(|| Refusal::Status(StatusCode::BAD_REQUEST, "bad `tasks` list".into()));
    }
    Ok(match op {
        Op::Get(key) if store.routed => vec![partition_for(key, partitions)],
        _ => (0..partitions).collect(),
    })
}

/// Entries of `tasks` matching `op`, from local tasks and their owners.
async fn answer(
    context: &Context,
    store: &QueryableStore,
    op: &Op,
    tasks: &[i32],
    forwarded: bool,
) -> Result<Vec<Found>, Refusal> {
    let view = |value: Value| {
        context.topology.nodes[store.node]
            .kind
            .spec()
            .query_view(value)
    };
    let mut found = Vec::new();
    let mut remote: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for &task in tasks {
        let read = match op {
            Op::Get(key) => context
                .state
                .get(task, &store.name, key)
                .map(|v| v.map(|v| vec![(key.clone(), v)]).unwrap_or_default()),
            Op::Scan { prefix, limit } => context.state.scan(task, &store.name, prefix, *limit),
        };
        match read {
            Ok(entries) => found.extend(entries.into_iter().map(|(key, value)| Found {
                key: String::from_utf8_lossy(&key).into_owned(),
                partition: task,
                value: view(value),
            })),
            Err(ReadError::Failed(message)) => {
                tracing::warn!(task, store = %store.name, %message, "A query read failed.");
                return Err(Refusal::Status(StatusCode::INTERNAL_SERVER_ERROR, message));
            }
            Err(ReadError::Unavailable(Local::Restoring)) => {
                return Err(Refusal::Unavailable(format!(
                    "partition {task} is restoring"
                )));
            }
            Err(ReadError::Unavailable(_)) if forwarded => {
                return Err(Refusal::Unavailable(format!(
                    "partition {task} does not run on this instance (it moved)"
                )));
            }
            Err(ReadError::Unavailable(_)) => {
                match context.directory.owner(task, &context.instance) {
                    Some(address) => remote.entry(address).or_default().push(task),
                    None => {
                        return Err(Refusal::Unavailable(format!(
                            "partition {task} runs on no instance right now (rebalancing or restoring)"
                        )));
                    }
                }
            }
        }
        if matches!(op, Op::Get(_)) && !found.is_empty() {
            return Ok(found);
        }
    }
    // Sequential: a request spans a handful of instances at most.
    for (address, tasks) in &remote {
        found.extend(forward(context, address, store, op, tasks).await?);
    }
    Ok(found)
}

async fn forward(
    context: &Context,
    address: &str,
    store: &QueryableStore,
    op: &Op,
    tasks: &[i32],
) -> Result<Vec<Found>, Refusal> {
    let enc =
        |b: &[u8]| utf8_percent_encode(&String::from_utf8_lossy(b), NON_ALPHANUMERIC).to_string();
    let list: Vec<String> = tasks.iter().map(i32::to_string).collect();
    let path = match op {
        Op::Get(key) => format!(
            "/v1/stores/{}/keys/{}?tasks={}",
            enc(store.name.as_bytes()),
            enc(key),
            list.join(",")
        ),
        Op::Scan { prefix, limit } => format!(
            "/v1/stores/{}?prefix={}&limit={limit}&tasks={}",
            enc(store.name.as_bytes()),
            enc(prefix),
            list.join(",")
        ),
    };
    let failed = |why: String| {
        tracing::debug!(%address, %why, "A forwarded query failed.");
        Refusal::Unavailable(format!(
            "the owner of partitions {tasks:?} ({address}) did not answer: {why}"
        ))
    };
    let uri: Uri = format!("http://{address}{path}")
        .parse()
        .map_err(|e| failed(format!("bad address: {e}")))?;
    let request = Request::get(uri)
        .header(FORWARDED, &context.instance)
        .body(Empty::new())
        .map_err(|e| failed(e.to_string()))?;
    let response = tokio::time::timeout(FORWARD_TIMEOUT, context.client.request(request))
        .await
        .map_err(|_| failed("timed out".into()))?
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status();
    let body = tokio::time::timeout(FORWARD_TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| failed("timed out".into()))?
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))?;
    if status != StatusCode::OK {
        let message = body["error"].as_str().unwrap_or("no reason").to_string();
        return Err(if status == StatusCode::SERVICE_UNAVAILABLE {
            Refusal::Unavailable(message)
        } else {
            failed(format!("{status}: {message}"))
        });
    }
    let entries = body["entries"].as_array().cloned().unwrap_or_default();
    Ok(entries
        .into_iter()
        .map(|mut e| Found {
            key: e["key"].as_str().unwrap_or_default().to_string(),
            partition: e["partition"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(-1),
            value: e["value"].take(),
        })
        .collect())
}

fn entries_json(found: &[Found]) -> Value {
    let entries: Vec<Value> = found
        .iter()
        .map(|f| json!({ "key": f.key, "partition": f.partition, "value": f.value }))
        .collect();
    json!({ "entries": entries })
}

fn entries(found: &[Found]) -> Reply {
    reply(StatusCode::OK, &entries_json(found))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::state::rocks::{RocksBackend, RocksResources};
    use crate::state::{RawWrite, StateBackend};

    const TOPOLOGY: &str = "
name: q
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  updates: { topic: updates }
nodes:
  by_id:
    type: ordered
    input: updates
    key_by: /id
    order_by: /seq
sinks:
  latest: { topic: latest, input: by_id }
";

    /// `GET path` on `addr`: status, whether `Retry-After: 1` came, body.
    fn get(addr: SocketAddr, path: &str, forwarded: bool) -> (u16, bool, Value) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let extra = if forwarded {
            "x-streamfold-forwarded: t\r\n"
        } else {
            ""
        };
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head[9..12].parse().unwrap();
        let retry = head.to_lowercase().contains("retry-after: 1");
        (
            status,
            retry,
            serde_json::from_str(body).unwrap_or(Value::Null),
        )
    }

    #[test]
    fn a_restoring_or_unowned_task_answers_503_and_a_running_one_its_committed_value() {
        let topology = Arc::new(crate::topology::load_str("q.yaml", TOPOLOGY, &|_| None).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let stores: Vec<String> = topology.stores().map(|s| s.name.clone()).collect();
        let mut backend =
            RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
        // Two partitions; find a key of each.
        let key_of = |task: i32| {
            (0..)
                .map(|i| format!("k{i}"))
                .find(|k| partition_for(k.as_bytes(), 2) == task)
                .unwrap()
        };
        let (mine, theirs) = (key_of(0), key_of(1));
        backend
            .apply(
                &[RawWrite {
                    store: 0,
                    key: mine.as_bytes().into(),
                    value: Some(
                        br#"{"version":{"order":1},"value":{"n":1},"clock":1}"#
                            .as_slice()
                            .into(),
                    ),
                }],
                &[],
            )
            .unwrap();
        let state = QueryState::new();
        state.set_partitions(2);
        state.opened(0, backend.shared());
        let context = Context::new(
            Arc::clone(&topology),
            "a".into(),
            Arc::clone(&state),
            Arc::new(Directory::default()),
        );
        let server = QueryServer::start("127.0.0.1:0".parse().unwrap(), context).unwrap();
        let path = |key: &str| format!("/v1/stores/by_id-latest/keys/{key}");

        let (status, retry, _) = get(server.addr, &path(&mine), false);
        assert_eq!((status, retry), (503, true), "restoring");
        state.started(0);
        let (status, _, body) = get(server.addr, &path(&mine), false);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["value"]["value"], json!({"n": 1}));
        assert_eq!(body["partition"], json!(0));
        let (status, _, _) = get(server.addr, &path("nobody-at-all"), false);
        assert!(status == 404 || status == 503, "{status}");
        // Partition 1 runs nowhere this instance knows of.
        let (status, retry, body) = get(server.addr, &path(&theirs), false);
        assert_eq!((status, retry), (503, true), "{body}");
        // A forwarded request for a task not running here is never
        // forwarded again.
        let (status, retry, _) = get(server.addr, &format!("{}?tasks=1", path(&theirs)), true);
        assert_eq!((status, retry), (503, true));
        let (status, _, body) = get(server.addr, &format!("{}?tasks=0", path(&mine)), true);
        assert_eq!(status, 200);
        assert_eq!(body["entries"][0]["key"], json!(mine));
        let (status, _, body) = get(server.addr, "/v1/stores/nope/keys/x", false);
        assert_eq!(status, 404);
        assert_eq!(body["stores"], json!(["by_id-latest"]));
        server.stop();
    }

    #[test]
    fn query_strings_decode() {
        let uri: Uri = "/v1/stores/a?prefix=q%2F1+x&limit=5&tasks=0,2"
            .parse()
            .unwrap();
        let params = query_params(&uri);
        assert_eq!(params["prefix"], b"q/1 x");
        assert_eq!(params["limit"], b"5");
        assert_eq!(params["tasks"], b"0,2");
    }
}
