//! An in-process schema registry that speaks the documented Confluent REST
//! API, for the integration tests (`streamfold test` needs none: offline,
//! schemas come from the topology's files, `Codecs::offline`).
//!
//! No Confluent-compatible registry can be installed from the package
//! registries the test machines reach, so tests start this one on a free
//! local port:
//!
//! ```ignore
//! use support::registry::SchemaRegistry;
//!
//! let registry = SchemaRegistry::start().unwrap();
//! let id = registry.register("orders-value", r#""string""#).unwrap();
//! // Point a topology at it: `topology.schema_registry = Some(registry.config())`.
//! # let _ = id;
//! ```
//!
//! It serves, with Confluent's JSON bodies and error codes:
//!
//! | request | answer |
//! |---|---|
//! | `POST /subjects/{s}/versions` `{"schema": ...}` | `{"id": n}`; the same schema gets the same id everywhere; 409 when not backward compatible with the latest version (while the compatibility level is `BACKWARD`) |
//! | `POST /subjects/{s}` `{"schema": ...}` | the version of `s` holding that schema, or 404 (40401 / 40403) |
//! | `GET /subjects`, `GET /subjects/{s}/versions` | names, version numbers |
//! | `GET /subjects/{s}/versions/{v\|latest}` | `{"subject", "version", "id", "schema"}`, or 404 (40401 / 40402) |
//! | `GET /subjects/{s}/versions/{v}/schema`, `GET /schemas/ids/{id}/schema` | the schema itself |
//! | `GET /schemas/ids/{id}` | `{"schema": ...}`, or 404 (40403) |
//! | `GET /schemas/ids/{id}/versions`, `GET /schemas/ids/{id}/subjects` | where the id is registered |
//! | `GET /schemas/types` | `["AVRO"]` |
//! | `GET /config`, `PUT /config` `{"compatibility": "NONE"}` | the compatibility level (`BACKWARD` or `NONE`) |
//!
//! Query strings (`?deleted=true`, ...) are accepted and ignored. Only Avro
//! schemas without references are stored. With basic auth configured, a
//! request without the right `Authorization` header gets 401. Test hooks:
//! [`SchemaRegistry::fail_next`] answers 503 to the next requests (to
//! exercise retries) and [`SchemaRegistry::requests`] counts what reached
//! it (to check caching).
//!
//! The server runs on its own thread with a single-threaded tokio runtime
//! and hyper (already in the dependency tree through the Prometheus
//! exporter, so it costs no extra build), and stops when the handle drops.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use apache_avro::Schema;
use apache_avro::schema_compatibility::{Compatibility, SchemaCompatibility};
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use streamfold::topology::model::SchemaRegistryConfig;

const CONTENT: &str = "application/vnd.schemaregistry.v1+json";

/// A running registry; dropping it stops the server.
pub struct SchemaRegistry {
    url: String,
    credentials: Option<(String, String)>,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRegistry")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A stored schema; its id is its index + 1.
struct Stored {
    /// As registered.
    text: String,
    /// Parsing Canonical Form: two registrations of one schema share an id.
    canonical: String,
    parsed: Schema,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Backward,
    None,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Backward => "BACKWARD",
            Level::None => "NONE",
        }
    }
}

struct State {
    schemas: Vec<Stored>,
    /// Subject → the schema id of each version (version = index + 1).
    subjects: BTreeMap<String, Vec<u32>>,
    level: Level,
    /// `Basic <base64>` every request must carry, when set.
    authorization: Option<String>,
    /// Requests still to answer with 503.
    fail_next: usize,
    requests: usize,
}

/// An answer: status and JSON body (or schema text for `/schema` paths).
struct Answer {
    status: StatusCode,
    body: String,
}

impl Answer {
    fn json(status: StatusCode, body: &Value) -> Answer {
        Answer {
            status,
            body: body.to_string(),
        }
    }

    fn ok(body: &Value) -> Answer {
        Answer::json(StatusCode::OK, body)
    }

    fn error(status: StatusCode, code: u32, message: impl Into<String>) -> Answer {
        Answer::json(
            status,
            &json!({"error_code": code, "message": message.into()}),
        )
    }
}

impl SchemaRegistry {
    /// Starts a registry on a free port of 127.0.0.1.
    pub fn start() -> std::io::Result<SchemaRegistry> {
        SchemaRegistry::launch(None)
    }

    /// Starts a registry that requires HTTP basic auth.
    pub fn start_with_basic_auth(
        username: &str,
        password: &str,
    ) -> std::io::Result<SchemaRegistry> {
        SchemaRegistry::launch(Some((username.to_string(), password.to_string())))
    }

    fn launch(credentials: Option<(String, String)>) -> std::io::Result<SchemaRegistry> {
        let authorization = credentials.as_ref().map(|(user, password)| {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            format!("Basic {token}")
        });
        let state = Arc::new(Mutex::new(State {
            schemas: Vec::new(),
            subjects: BTreeMap::new(),
            level: Level::Backward,
            authorization,
            fail_next: 0,
            requests: 0,
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let std_listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener)?
        };
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let served = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("schema-registry".into())
            .spawn(move || {
                runtime.block_on(async move {
                    loop {
                        let stream = tokio::select! {
                            _ = &mut stopped => break,
                            accepted = listener.accept() => match accepted {
                                Ok((stream, _)) => stream,
                                Err(_) => continue,
                            },
                        };
                        let state = Arc::clone(&served);
                        tokio::spawn(async move {
                            let service = service_fn(move |request| {
                                let state = Arc::clone(&state);
                                async move { Ok::<_, Infallible>(serve(&state, request).await) }
                            });
                            // A client hanging up mid-request is its business.
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                });
            })?;
        Ok(SchemaRegistry {
            url: format!("http://{addr}"),
            credentials,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A topology's `schema_registry` section pointing here (with the
    /// credentials, if any).
    pub fn config(&self) -> SchemaRegistryConfig {
        SchemaRegistryConfig {
            url: self.url.clone(),
            username: self.credentials.as_ref().map(|(u, _)| u.clone()),
            password: self
                .credentials
                .as_ref()
                .map(|(_, p)| streamfold::secrets::Secret::new(p.clone())),
        }
    }

    /// Registers an Avro schema under `subject` without HTTP, as
    /// `POST /subjects/{subject}/versions` would; returns its id.
    pub fn register(&self, subject: &str, schema: &str) -> Result<u32, String> {
        let mut state = self.lock();
        let answer = register(&mut state, subject, schema);
        if answer.status != StatusCode::OK {
            return Err(answer.body);
        }
        let body: Value = serde_json::from_str(&answer.body).map_err(|e| e.to_string())?;
        body.get("id")
            .and_then(Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| format!("no id in {body}"))
    }

    /// The schema text registered as `id`.
    pub fn schema(&self, id: u32) -> Option<String> {
        let state = self.lock();
        stored(&state, id).map(|s| s.text.clone())
    }

    /// `(version, id, schema)` of the latest version of `subject`.
    pub fn latest(&self, subject: &str) -> Option<(u32, u32, String)> {
        let state = self.lock();
        let ids = state.subjects.get(subject)?;
        let id = *ids.last()?;
        let version = u32::try_from(ids.len()).ok()?;
        Some((version, id, stored(&state, id)?.text.clone()))
    }

    /// Subjects with at least one version, sorted.
    pub fn subjects(&self) -> Vec<String> {
        self.lock().subjects.keys().cloned().collect()
    }

    /// HTTP requests received so far.
    pub fn requests(&self) -> usize {
        self.lock().requests
    }

    /// Answers the next `n` requests with 503, as a registry that is
    /// restarting would.
    pub fn fail_next(&self, n: usize) {
        self.lock().fail_next = n;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Drop for SchemaRegistry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may have stopped already; nothing else to do then.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Handlers do not panic while holding the lock; should one, the state
    // is still whole (each change is a single push or assignment).
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn stored(state: &State, id: u32) -> Option<&Stored> {
    let index = usize::try_from(id).ok()?.checked_sub(1)?;
    state.schemas.get(index)
}

async fn serve(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return respond(Answer::error(
                StatusCode::BAD_REQUEST,
                400,
                format!("cannot read the request body: {e}"),
            ));
        }
    };
    let authorization = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let answer = {
        let mut state = lock(state);
        state.requests += 1;
        if state.fail_next > 0 {
            state.fail_next -= 1;
            Answer::error(
                StatusCode::SERVICE_UNAVAILABLE,
                50301,
                "the schema registry is not available",
            )
        } else if state
            .authorization
            .as_deref()
            .is_some_and(|expected| authorization != Some(expected))
        {
            Answer::error(StatusCode::UNAUTHORIZED, 401, "Unauthorized")
        } else {
            route(&mut state, &parts.method, parts.uri.path(), &body)
        }
    };
    respond(answer)
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(answer.body)));
    *response.status_mut() = answer.status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT));
    response
}

/// `%2F` → `/`, the way subjects with slashes travel in paths.
pub fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn route(state: &mut State, method: &Method, path: &str, body: &[u8]) -> Answer {
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (method, segments.as_slice()) {
        (&Method::GET, []) => Answer::ok(&json!({})),
        (&Method::GET, ["subjects"]) => {
            Answer::ok(&json!(state.subjects.keys().collect::<Vec<_>>()))
        }
        (&Method::GET, ["schemas", "types"]) => Answer::ok(&json!(["AVRO"])),
        (&Method::GET, ["config"]) => {
            Answer::ok(&json!({"compatibilityLevel": state.level.name()}))
        }
        (&Method::PUT, ["config"]) => set_level(state, body),
        (&Method::POST, ["subjects", subject, "versions"]) => match schema_of(body) {
            Ok(schema) => register(state, subject, &schema),
            Err(answer) => answer,
        },
        (&Method::POST, ["subjects", subject]) => match schema_of(body) {
            Ok(schema) => lookup(state, subject, &schema),
            Err(answer) => answer,
        },
        (&Method::GET, ["subjects", subject, "versions"]) => match state.subjects.get(*subject) {
            Some(ids) => Answer::ok(&json!((1..=ids.len()).collect::<Vec<_>>())),
            None => subject_not_found(subject),
        },
        (&Method::GET, ["subjects", subject, "versions", version]) => {
            version_answer(state, subject, version, false)
        }
        (&Method::GET, ["subjects", subject, "versions", version, "schema"]) => {
            version_answer(state, subject, version, true)
        }
        (&Method::GET, ["schemas", "ids", id, rest @ ..]) => {
            let Some((id, schema)) = id
                .parse::<u32>()
                .ok()
                .and_then(|id| Some((id, stored(state, id)?)))
            else {
                return Answer::error(
                    StatusCode::NOT_FOUND,
                    40403,
                    format!("Schema {id} not found"),
                );
            };
            match rest {
                [] => Answer::ok(&json!({"schema": schema.text})),
                ["schema"] => Answer {
                    status: StatusCode::OK,
                    body: schema.text.clone(),
                },
                ["versions"] | ["subjects"] => {
                    let places: Vec<(String, usize)> = state
                        .subjects
                        .iter()
                        .flat_map(|(subject, ids)| {
                            ids.iter()
                                .enumerate()
                                .filter(|(_, i)| **i == id)
                                .map(move |(v, _)| (subject.clone(), v + 1))
                        })
                        .collect();
                    if rest == ["subjects"] {
                        Answer::ok(&json!(places.iter().map(|(s, _)| s).collect::<Vec<_>>()))
                    } else {
                        Answer::ok(&json!(
                            places
                                .iter()
                                .map(|(s, v)| json!({"subject": s, "version": v}))
                                .collect::<Vec<_>>()
                        ))
                    }
                }
                _ => not_found(path),
            }
        }
        (_, ["subjects" | "schemas" | "config", ..]) => Answer::error(
            StatusCode::METHOD_NOT_ALLOWED,
            405,
            format!("{method} is not supported on {path}"),
        ),
        _ => not_found(path),
    }
}

fn not_found(path: &str) -> Answer {
    Answer::error(
        StatusCode::NOT_FOUND,
        404,
        format!("HTTP 404 Not Found: {path}"),
    )
}

fn subject_not_found(subject: &str) -> Answer {
    Answer::error(
        StatusCode::NOT_FOUND,
        40401,
        format!("Subject '{subject}' not found."),
    )
}

/// The `schema` of a registration or lookup body, checked to be an Avro
/// schema without references.
fn schema_of(body: &[u8]) -> Result<String, Answer> {
    let invalid = |message: String| Answer::error(StatusCode::UNPROCESSABLE_ENTITY, 42201, message);
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("the request body is not JSON: {e}")))?;
    let schema_type = request
        .get("schemaType")
        .and_then(Value::as_str)
        .unwrap_or("AVRO");
    if schema_type != "AVRO" {
        return Err(invalid(format!(
            "this registry stores AVRO schemas, not {schema_type}"
        )));
    }
    if request
        .get("references")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
    {
        return Err(invalid(
            "this registry does not store schema references".into(),
        ));
    }
    request
        .get("schema")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| invalid("the request body has no `schema` string".into()))
}

fn register(state: &mut State, subject: &str, text: &str) -> Answer {
    let parsed = match Schema::parse_str(text) {
        Ok(parsed) => parsed,
        Err(e) => {
            return Answer::error(
                StatusCode::UNPROCESSABLE_ENTITY,
                42201,
                format!("Invalid schema: {e}"),
            );
        }
    };
    let canonical = parsed.canonical_form();
    let existing = state
        .schemas
        .iter()
        .position(|s| s.canonical == canonical)
        .and_then(|i| u32::try_from(i + 1).ok());
    let versions = state.subjects.get(subject).cloned().unwrap_or_default();
    if let Some(id) = existing
        && versions.contains(&id)
    {
        return Answer::ok(&json!({"id": id}));
    }
    if state.level == Level::Backward
        && let Some(latest) = versions.last().and_then(|&id| stored(state, id))
    {
        // BACKWARD: the new schema must read what the latest one wrote.
        let compatible = matches!(
            SchemaCompatibility::can_read(&latest.parsed, &parsed),
            Ok(Compatibility::Full)
        );
        if !compatible {
            return Answer::error(
                StatusCode::CONFLICT,
                409,
                format!(
                    "Schema being registered is incompatible with an earlier schema for subject \"{subject}\" (compatibility BACKWARD)"
                ),
            );
        }
    }
    let id = match existing {
        Some(id) => id,
        None => {
            state.schemas.push(Stored {
                text: text.to_string(),
                canonical,
                parsed,
            });
            u32::try_from(state.schemas.len()).unwrap_or(u32::MAX)
        }
    };
    state
        .subjects
        .entry(subject.to_string())
        .or_default()
        .push(id);
    Answer::ok(&json!({"id": id}))
}

fn lookup(state: &State, subject: &str, text: &str) -> Answer {
    let Some(ids) = state.subjects.get(subject) else {
        return subject_not_found(subject);
    };
    let canonical = Schema::parse_str(text).map(|s| s.canonical_form());
    let found = ids.iter().enumerate().find(|(_, id)| {
        stored(state, **id).is_some_and(|s| canonical.as_ref().is_ok_and(|c| *c == s.canonical))
    });
    match found {
        Some((index, &id)) => Answer::ok(&json!({
            "subject": subject,
            "version": index + 1,
            "id": id,
            "schema": stored(state, id).map(|s| s.text.as_str()).unwrap_or_default(),
        })),
        None => Answer::error(StatusCode::NOT_FOUND, 40403, "Schema not found"),
    }
}

fn version_answer(state: &State, subject: &str, version: &str, schema_only: bool) -> Answer {
    let Some(ids) = state.subjects.get(subject) else {
        return subject_not_found(subject);
    };
    let index = match version {
        "latest" | "-1" => ids.len().checked_sub(1),
        number => number
            .parse::<usize>()
            .ok()
            .and_then(|v| v.checked_sub(1))
            .filter(|&i| i < ids.len()),
    };
    let Some((index, schema)) = index.and_then(|i| Some((i, stored(state, ids[i])?))) else {
        return Answer::error(
            StatusCode::NOT_FOUND,
            40402,
            format!("Version {version} not found."),
        );
    };
    if schema_only {
        return Answer {
            status: StatusCode::OK,
            body: schema.text.clone(),
        };
    }
    Answer::ok(&json!({
        "subject": subject,
        "version": index + 1,
        "id": ids[index],
        "schema": schema.text,
    }))
}

fn set_level(state: &mut State, body: &[u8]) -> Answer {
    let level = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        v.get("compatibility")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    match level.as_deref() {
        Some("BACKWARD") => state.level = Level::Backward,
        Some("NONE") => state.level = Level::None,
        _ => {
            return Answer::error(
                StatusCode::UNPROCESSABLE_ENTITY,
                42203,
                "compatibility must be BACKWARD or NONE",
            );
        }
    }
    Answer::ok(&json!({"compatibility": state.level.name()}))
}

/// The registry's answers without its server, for its own tests
/// (`tests/schema_registry.rs`).
pub struct Routes(State);

impl Routes {
    pub fn new() -> Routes {
        Routes(State {
            schemas: Vec::new(),
            subjects: BTreeMap::new(),
            level: Level::Backward,
            authorization: None,
            fail_next: 0,
            requests: 0,
        })
    }

    /// Answers `method path` with JSON `body`: the status and the answer
    /// as JSON (or as a string when it is schema text).
    pub fn call(&mut self, method: Method, path: &str, body: Value) -> (u16, Value) {
        let answer = route(&mut self.0, &method, path, body.to_string().as_bytes());
        let body = serde_json::from_str(&answer.body).unwrap_or(Value::String(answer.body));
        (answer.status.as_u16(), body)
    }
}
