//! Where state lives, as Kafka Streams' `queryMetadataForKey` and
//! `metadataForAllStreamsClients` tell it: which partition (task) holds a
//! key and which instance runs that task now; every instance with its
//! address, tasks and stores.
//!
//! Both answer from this instance's view: its own tasks as they are, the
//! others' from the directory topic ([`super::endpoints`]), which may lag a
//! moment behind a rebalance.

use hyper::StatusCode;
use serde_json::{Value, json};

use super::QueryableStore;
use super::endpoints::REFRESH;
use super::keys::{KeyEncoding, percent_decode};
use super::server::{Context, Reply, error, reply, unavailable};
use crate::task::partitioner::partition_for;

/// Why a store keyed by the record key has no known partition for a key.
const UNROUTED: &str = "the store is keyed by the record key: the partition is the one its producer chose, which streamfold cannot compute, so a lookup asks every partition";

/// `GET /v1/stores/<store>/keys/<key>/metadata`.
pub(crate) fn key(
    context: &Context,
    store: &QueryableStore,
    key: &str,
    encoding: KeyEncoding,
) -> Reply {
    let key = match encoding.decode(&percent_decode(key)) {
        Ok(key) => key,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let partitions = context.state.partitions();
    if partitions <= 0 {
        return unavailable("the instance is starting");
    }
    let mut body = json!({ "store": store.name });
    encoding.put(&mut body, &key);
    if store.routed {
        let task = partition_for(&key, partitions);
        let (status, active) = placement(context, task);
        body["partition"] = json!(task);
        body["status"] = json!(status);
        body["active"] = active;
    } else {
        body["partition"] = Value::Null;
        body["reason"] = json!(UNROUTED);
        let all: Vec<Value> = (0..partitions)
            .map(|task| {
                let (status, active) = placement(context, task);
                json!({ "partition": task, "status": status, "active": active })
            })
            .collect();
        body["partitions"] = json!(all);
    }
    reply(StatusCode::OK, &body)
}

/// Whether `task` is `running`, `restoring` (here) or `unknown`, and the
/// instance that runs it (`null` when unknown).
fn placement(context: &Context, task: i32) -> (&'static str, Value) {
    let me = || json!({ "instance": context.instance, "address": context.directory.own_address() });
    match context.state.local(task) {
        Some(true) => ("running", me()),
        Some(false) => ("restoring", me()),
        None => match context.directory.owner_of(task, &context.instance) {
            Some(owner) => (
                "running",
                json!({ "instance": owner.instance, "address": owner.address }),
            ),
            None => ("unknown", Value::Null),
        },
    }
}

/// `GET /v1/instances`: this instance first, then the others by id.
pub(crate) fn instances(context: &Context) -> Reply {
    let names: Vec<&str> = context.stores.iter().map(|s| s.name.as_str()).collect();
    let stores = |hosts: bool| if hosts { names.clone() } else { Vec::new() };
    let (running, restoring) = (context.state.running(), context.state.restoring());
    let mut list = vec![json!({
        "instance": context.instance,
        "address": context.directory.own_address(),
        "self": true,
        "stores": stores(!running.is_empty() || !restoring.is_empty()),
        "running": running,
        "restoring": restoring,
    })];
    // An entry that runs nothing and was not refreshed for a while is an
    // instance that died and whose tasks run elsewhere now.
    let stale_before = crate::runtime::wall_clock_ms()
        - i64::try_from(3 * REFRESH.as_millis()).unwrap_or(i64::MAX);
    for (id, entry) in context.directory.others(&context.instance) {
        if entry.running.is_empty() && entry.at < stale_before {
            continue;
        }
        list.push(json!({
            "instance": id,
            "address": entry.address,
            "self": false,
            "stores": stores(!entry.running.is_empty()),
            "running": entry.running,
            "published_at": entry.at,
        }));
    }
    reply(
        StatusCode::OK,
        &json!({
            "topology": context.topology.name,
            "partitions": context.state.partitions(),
            "instances": list,
        }),
    )
}
