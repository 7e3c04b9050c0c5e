//! Point lookups and scans: which tasks to ask, reading the local ones,
//! asking the owners of the others (all at once, see [`super::forward`])
//! and shaping the answer.
//!
//! A scan reads at most `limit + 1` entries of each task from where the
//! page starts; merged in key order, the first `limit` are the page, and
//! an entry left over means more remain: the page then carries `next`, a
//! cursor that starts the following page just after its last key. So
//! following `next` until it is absent walks every key of the store once,
//! in key order, across every partition.
//!
//! A window store (`window` nodes) is keyed by a group key and a window
//! start: a lookup of a key is a page of its windows, oldest first, whose
//! start is within `from` and `to` (times, RFC 3339 or epoch
//! milliseconds), read as a scan of the key's store keys; a scan pages
//! through every key's windows. Either shows each entry under its group
//! key, the window's bounds in its value.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{Value, json};

use super::forward::fan_out;
use super::keys::{KeyEncoding, Params, ScanBounds, percent_decode};
use super::server::{Context, Refusal, Reply, error, reply};
use super::{Local, MAX_SCAN_LIMIT, QueryableStore, ReadError, window_ranges};
use crate::task::partitioner::partition_for;

/// Entries a scan returns when the request names no `limit`.
const DEFAULT_SCAN_LIMIT: usize = 100;

/// What a request asks of each task.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Get(Vec<u8>),
    /// A page of at most `limit` entries within `bounds`.
    Scan {
        bounds: ScanBounds,
        limit: usize,
    },
    /// A page of at most `limit` windows of a window store whose group
    /// keys are within `bounds` (group keys; the cursor a store key).
    Windows {
        bounds: ScanBounds,
        limit: usize,
    },
}

/// The parameter that marks a forwarded scan's bounds as group keys
/// ([`Op::Windows`]); without it a forwarded window store's bounds are
/// store keys (a key's windows).
pub(crate) const GROUP_BOUNDS: &str = "bounds=groups";

/// One entry found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Found {
    pub(crate) key: Vec<u8>,
    pub(crate) partition: i32,
    pub(crate) value: Value,
}

/// `GET /v1/stores/<store>/keys/<key>`.
pub(crate) async fn lookup(
    context: &Arc<Context>,
    store: &QueryableStore,
    key: &str,
    encoding: KeyEncoding,
    params: &Params,
    forwarded: bool,
) -> Reply {
    let key = match encoding.decode(&percent_decode(key)) {
        Ok(key) => key,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if store.windowed {
        return windows(context, store, key, encoding, params, forwarded).await;
    }
    let op = Op::Get(key.clone());
    match ask(context, store, &op, params, forwarded).await {
        Err(refusal) => refusal.reply(),
        Ok(found) if forwarded => entries(&found, encoding),
        Ok(found) => match found.into_iter().next() {
            Some(found) => {
                let mut body = json!({
                    "store": store.name,
                    "partition": found.partition,
                    "value": found.value,
                });
                encoding.put(&mut body, &found.key);
                reply(StatusCode::OK, &body)
            }
            None => {
                let mut body = json!({ "error": "no such key", "store": store.name });
                encoding.put(&mut body, &key);
                reply(StatusCode::NOT_FOUND, &body)
            }
        },
    }
}

/// `limit` of `params`: a page's size.
fn page_limit(params: &Params) -> Result<usize, String> {
    match params
        .get("limit")
        .map(|l| String::from_utf8_lossy(l).parse())
    {
        None => Ok(DEFAULT_SCAN_LIMIT),
        Some(Ok(limit)) if (1..=MAX_SCAN_LIMIT).contains(&limit) => Ok(limit),
        Some(_) => Err(format!("limit must be a number from 1 to {MAX_SCAN_LIMIT}")),
    }
}

/// `GET /v1/stores/<store>?…`: one page.
pub(crate) async fn scan(
    context: &Arc<Context>,
    store: &QueryableStore,
    params: &Params,
    encoding: KeyEncoding,
    forwarded: bool,
) -> Reply {
    let limit = match page_limit(params) {
        Ok(limit) => limit,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let bounds = match ScanBounds::from_params(params, encoding) {
        Ok(bounds) => bounds,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    // A client's bounds on a window store are group keys, walked length
    // by length; a forwarded scan's are too when it says so, and otherwise
    // the store keys of a key's windows.
    let groups = params.get("bounds").is_some_and(|b| b == b"groups");
    let op = if store.windowed && (!forwarded || groups) {
        Op::Windows {
            bounds: bounds.clone(),
            limit,
        }
    } else {
        Op::Scan {
            bounds: bounds.clone(),
            limit,
        }
    };
    match ask(context, store, &op, params, forwarded).await {
        Err(refusal) => refusal.reply(),
        Ok(found) if forwarded => entries(&found, encoding),
        Ok(found) => page_reply(store, found, limit, encoding, |body| {
            body["prefix"] = json!(encoding.show(&bounds.prefix));
            if let Some(from) = &bounds.from {
                body["from"] = json!(encoding.show(from));
            }
            if let Some(to) = &bounds.to {
                body["to"] = json!(encoding.show(to));
            }
        }),
    }
}

/// `GET /v1/stores/<windows>/keys/<key>?from=&to=&limit=&cursor=`: a
/// page of the key's windows that start within `[from, to]`.
async fn windows(
    context: &Arc<Context>,
    store: &QueryableStore,
    key: Vec<u8>,
    encoding: KeyEncoding,
    params: &Params,
    forwarded: bool,
) -> Reply {
    let limit = match page_limit(params) {
        Ok(limit) => limit,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let time = |name: &str| {
        params
            .get(name)
            .map(|text| {
                let text = String::from_utf8_lossy(text);
                window_time(&text).ok_or_else(|| {
                    format!("`{name}` must be an RFC 3339 time or epoch milliseconds, not `{text}`")
                })
            })
            .transpose()
    };
    let (from, to) = match (time("from"), time("to")) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(message), _) | (_, Err(message)) => return error(StatusCode::BAD_REQUEST, message),
    };
    let after = match ScanBounds::cursor_of(params) {
        Ok(after) => after,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let (prefix, first, last) = crate::operators::window::window_key_bounds(&key, from, to);
    let op = Op::Scan {
        bounds: ScanBounds {
            prefix,
            from: first,
            to: last,
            after,
        },
        limit,
    };
    let tasks = match tasks_for(context, store, Some(&key), params, forwarded) {
        Ok(tasks) => tasks,
        Err(refusal) => return refusal.reply(),
    };
    match answer(context, store, &op, &tasks, forwarded).await {
        Err(refusal) => refusal.reply(),
        Ok(found) if forwarded => entries(&found, encoding),
        Ok(found) => page_reply(store, found, limit, encoding, |body| {
            encoding.put(body, &key);
            if let Some(from) = from {
                body["from"] = json!(crate::record::json::rfc3339_millis(from));
            }
            if let Some(to) = to {
                body["to"] = json!(crate::record::json::rfc3339_millis(to));
            }
        }),
    }
}

/// The first `limit` of `found` as an answer: the entries (a window
/// store's under their group keys), the store, what `asked` adds (the
/// request's bounds), and whether more remain (`truncated`, `next`).
fn page_reply(
    store: &QueryableStore,
    found: Vec<Found>,
    limit: usize,
    encoding: KeyEncoding,
    asked: impl FnOnce(&mut Value),
) -> Reply {
    let (page, next) = page(found, limit);
    let mut body = entries_json(&as_windows(store, page), encoding);
    body["store"] = json!(store.name);
    asked(&mut body);
    body["truncated"] = json!(next.is_some());
    body["next"] = json!(next);
    reply(StatusCode::OK, &body)
}

/// A window bound of a request: RFC 3339 (any offset) or epoch
/// milliseconds.
fn window_time(text: &str) -> Option<crate::record::Timestamp> {
    if let Ok(millis) = text.parse::<i64>() {
        return Some(millis);
    }
    crate::record::json::rfc3339_instant(text).map(|instant| instant.as_millisecond())
}

/// The entries of a window store under their group keys (their store keys
/// add the window start); other stores' as they are.
fn as_windows(store: &QueryableStore, found: Vec<Found>) -> Vec<Found> {
    if !store.windowed {
        return found;
    }
    found
        .into_iter()
        .filter_map(|mut f| {
            f.key = crate::operators::window::window_group(&f.key)?.to_vec();
            Some(f)
        })
        .collect()
}

/// The first `limit` of `found` in key order, and the cursor after them
/// when more remain.
///
/// A page never ends between two entries of one key (a store keyed by
/// the record key may hold a key on two partitions, if its producer
/// changed partitioner): the cursor resumes after the key, so the page
/// takes them all, one more than `limit` if need be.
fn page(mut found: Vec<Found>, limit: usize) -> (Vec<Found>, Option<String>) {
    found.sort_by(|a, b| (&a.key, a.partition).cmp(&(&b.key, b.partition)));
    let mut keep = limit.min(found.len());
    while keep > 0 && keep < found.len() && found[keep].key == found[keep - 1].key {
        keep += 1;
    }
    let more = found.len() > keep;
    found.truncate(keep);
    let next = more
        .then(|| found.last().map(|f| ScanBounds::cursor(&f.key)))
        .flatten();
    (found, next)
}

/// The tasks to ask: those a forwarding instance named, the key's task
/// when the runtime routes the store's keys, every task otherwise.
fn tasks_for(
    context: &Context,
    store: &QueryableStore,
    key: Option<&[u8]>,
    params: &Params,
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
    Ok(match key {
        Some(key) if store.routed => vec![partition_for(key, partitions)],
        _ => (0..partitions).collect(),
    })
}

/// Entries of `tasks` matching `op`, from local tasks and their owners.
///
/// A lookup that finds its key answers it even when another task could
/// not be asked (a key lives on one task); otherwise any task that could
/// not be asked makes the answer a refusal, never a partial one.
/// The entries the tasks that can hold `op`'s keys answer with.
async fn ask(
    context: &Arc<Context>,
    store: &QueryableStore,
    op: &Op,
    params: &Params,
    forwarded: bool,
) -> Result<Vec<Found>, Refusal> {
    let key = match op {
        Op::Get(key) => Some(key.as_slice()),
        Op::Scan { .. } | Op::Windows { .. } => None,
    };
    let tasks = tasks_for(context, store, key, params, forwarded)?;
    answer(context, store, op, &tasks, forwarded).await
}

async fn answer(
    context: &Arc<Context>,
    store: &QueryableStore,
    op: &Op,
    tasks: &[i32],
    forwarded: bool,
) -> Result<Vec<Found>, Refusal> {
    let mut found = Vec::new();
    let mut refusal: Option<Refusal> = None;
    let mut remote: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for &task in tasks {
        match read_local(context, store, op, task) {
            Ok(entries) => found.extend(entries),
            Err(ReadError::Failed(message)) => {
                tracing::warn!(task, store = %store.name, %message, "A query read failed.");
                return Err(Refusal::Status(StatusCode::INTERNAL_SERVER_ERROR, message));
            }
            Err(ReadError::Unavailable(Local::Restoring)) => {
                refusal.get_or_insert(Refusal::Unavailable(format!(
                    "partition {task} is restoring"
                )));
            }
            Err(ReadError::Unavailable(Local::Absent)) if forwarded => {
                refusal.get_or_insert(Refusal::Unavailable(format!(
                    "partition {task} does not run on this instance (it moved)"
                )));
            }
            Err(ReadError::Unavailable(Local::Absent)) => {
                match context.directory.owner(task, &context.instance) {
                    Some(address) => remote.entry(address).or_default().push(task),
                    None => {
                        refusal.get_or_insert(Refusal::Unavailable(format!(
                            "partition {task} runs on no instance right now (rebalancing or restoring)"
                        )));
                    }
                }
            }
        }
    }
    let lookup = matches!(op, Op::Get(_));
    if lookup && !found.is_empty() {
        return Ok(found);
    }
    if refusal.is_none() || lookup {
        for result in fan_out(context, store, op, remote).await {
            match result {
                Ok(entries) => found.extend(entries),
                Err(why) => {
                    refusal.get_or_insert(why);
                }
            }
        }
    }
    match refusal {
        Some(_) if lookup && !found.is_empty() => Ok(found),
        Some(refusal) => Err(refusal),
        None => Ok(found),
    }
}

/// `op` on `task`, if it runs here.
fn read_local(
    context: &Context,
    store: &QueryableStore,
    op: &Op,
    task: i32,
) -> Result<Vec<Found>, ReadError> {
    let entries = match op {
        Op::Get(key) => context
            .state
            .get(task, &store.name, key)?
            .map(|v| vec![(key.clone(), v)])
            .unwrap_or_default(),
        // One more than the page: a leftover says more remain.
        Op::Scan { bounds, limit } => {
            context
                .state
                .scan(task, &store.name, &bounds.range(), limit + 1)?
        }
        Op::Windows { bounds, limit } => {
            let start = bounds.after.as_ref().map_or_else(Vec::new, |after| {
                let mut next = after.clone();
                next.push(0);
                next
            });
            context
                .state
                .walk(task, &store.name, &start, limit + 1, |key| {
                    window_ranges::step(bounds, key)
                })?
        }
    };
    let spec = context.topology.nodes[store.node].kind.spec();
    Ok(entries
        .into_iter()
        .map(|(key, value)| Found {
            key,
            partition: task,
            value: spec.query_view(value),
        })
        .collect())
}

pub(crate) fn entries_json(found: &[Found], encoding: KeyEncoding) -> Value {
    let entries: Vec<Value> = found
        .iter()
        .map(|f| {
            let mut entry = json!({ "partition": f.partition, "value": f.value });
            encoding.put(&mut entry, &f.key);
            entry
        })
        .collect();
    json!({ "entries": entries })
}

fn entries(found: &[Found], encoding: KeyEncoding) -> Reply {
    reply(StatusCode::OK, &entries_json(found, encoding))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_the_first_keys_and_its_cursor_resumes_after_the_last() {
        let found = |key: &str, partition| Found {
            key: key.as_bytes().to_vec(),
            partition,
            value: Value::Null,
        };
        let (page_of_two, next) = page(vec![found("c", 0), found("a", 1), found("b", 0)], 2);
        let keys: Vec<&[u8]> = page_of_two.iter().map(|f| f.key.as_slice()).collect();
        assert_eq!(keys, [b"a", b"b"]);
        assert_eq!(next, Some(ScanBounds::cursor(b"b")));
        let (all, next) = page(vec![found("a", 1), found("b", 0)], 2);
        assert_eq!(all.len(), 2);
        assert_eq!(next, None, "nothing left over: the last page");
        // One key on two partitions is not split across pages.
        let (both, next) = page(vec![found("b", 1), found("a", 0), found("b", 0)], 2);
        let entries: Vec<(&[u8], i32)> = both
            .iter()
            .map(|f| (f.key.as_slice(), f.partition))
            .collect();
        assert_eq!(entries, [(&b"a"[..], 0), (&b"b"[..], 0), (&b"b"[..], 1)]);
        assert_eq!(next, None);
    }
}
