//! Each operator on the in-memory store, driven through a task as the
//! runtime drives it: 100,000 decoded records per iteration (JSON parsing
//! is left out to isolate the operator), state committed every 5,000
//! records, the wall clock moving 1 ms per record with processing timers
//! fired every 100 records (a 100 ms punctuation).
//!
//! `cargo bench --bench operators`

#[path = "driver/mod.rs"]
mod driver;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use streamfold::state::memory::MemoryBackend;
use streamfold::task::{Routing, Task};

use driver::{Driver, projection_topology, topology, topology_with};
use streamfold::topology::Topology;

/// The allocator the `streamfold` binary runs with, so the operators are
/// measured as users run them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: usize = 100_000;
const KEYS: usize = 1_000;

fn task(topology: &Arc<Topology>) -> Task {
    let stores = topology.stores().count();
    let mut task = Task::new(
        Arc::clone(topology),
        Box::new(MemoryBackend::new(stores)),
        Routing::Direct,
    )
    .unwrap();
    task.start(None).unwrap();
    task
}

/// Records as (key, value, timestamp), fed to source 0.
type Workload = Vec<(Vec<u8>, Value, i64)>;

fn run(task: &mut Task, workload: Workload) -> u64 {
    let mut driver = Driver::new();
    for (key, value, timestamp) in workload {
        driver.feed(task, key, value, timestamp);
    }
    driver.finish(task)
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{}", (i * 7919) % KEYS).into_bytes()
}

/// 10% of the events are re-deliveries of an earlier one.
fn dedup_workload() -> Workload {
    (0..RECORDS)
        .map(|i| {
            let id = if i % 10 == 9 { i - 5 } else { i };
            (
                key(id),
                json!({"event_id": format!("evt-{id}"), "n": i}),
                i as i64,
            )
        })
        .collect()
}

/// Per key, versions grow; every 8th update of a key is stale.
fn ordered_workload() -> Workload {
    (0..RECORDS)
        .map(|i| {
            // A key's n-th update is record n * KEYS + its slot.
            let version = if (i / KEYS) % 8 == 7 { i - 2 * KEYS } else { i };
            (
                key(i),
                json!({"version": version, "total": i % 97, "writer": "w1"}),
                i as i64,
            )
        })
        .collect()
}

/// Question events per entity, one in 10 arriving 3 events late (the
/// `projection_in_order` bench renumbers them so none is late).
fn projection_workload() -> Workload {
    const NAMES: [&str; 3] = ["QuestionEdited", "AnswerAdded", "AnswerAdded"];
    (0..RECORDS)
        .map(|i| {
            // Every 10th event of an entity is 3 events late.
            let late_by = if (i / KEYS) % 10 == 9 { 3 * KEYS as i64 } else { 0 };
            let sequence = i as i64 - late_by;
            let name = if i < KEYS {
                "QuestionCreated"
            } else {
                NAMES[i % 3]
            };
            (
                key(i),
                json!({"event_id": format!("e{i}"), "type": name, "sequence": sequence, "title": format!("t{}", i % 13)}),
                i as i64,
            )
        })
        .collect()
}

/// Counter writes over 1,000 counters, 5% retried; event time = wall time.
fn rollup_workload() -> Workload {
    (0..RECORDS)
        .map(|i| {
            let token = if i % 20 == 19 { i - 1 } else { i };
            let at = token as i64;
            (
                key(token),
                json!({"token": format!("t{token}"), "delta": (token % 5) as i64 + 1}),
                at,
            )
        })
        .collect()
}

/// Feed events of mixed types for the stateless operators.
fn stateless_workload() -> Workload {
    const TYPES: [&str; 4] = [
        "QuestionCreated",
        "AnswerAdded",
        "ThanksForAnswerGiven",
        "QuestionViewed",
    ];
    (0..RECORDS)
        .map(|i| {
            (
                key(i),
                json!({"type": TYPES[i % 4], "question_id": format!("q{}", i % KEYS), "amount": i % 1000, "tags": ["rust", "kafka"]}),
                i as i64,
            )
        })
        .collect()
}

fn operators(c: &mut Criterion) {
    let cases: Vec<(&str, Arc<Topology>, Workload)> = vec![
        (
            "dedup",
            topology(
                "  dedup:\n    type: dedup\n    input: events\n    id_field: /event_id\n    retention: 1h\n",
                "dedup",
            ),
            dedup_workload(),
        ),
        (
            "ordered",
            topology(
                "  ordered:\n    type: ordered\n    input: events\n    order_by: /version\n    tie_break: /writer\n    lamport_field: lamport\n",
                "ordered",
            ),
            ordered_workload(),
        ),
        ("projection", projection_topology(), projection_workload()),
        (
            "projection_in_order",
            projection_topology(),
            projection_workload()
                .into_iter()
                .enumerate()
                .map(|(i, (key, mut value, at))| {
                    value["sequence"] = json!(i);
                    (key, value, at)
                })
                .collect(),
        ),
        (
            "rollup",
            topology(
                "  rollup:\n    type: rollup\n    input: [events, reads]\n    token: /token\n    delta: /delta\n    coalesce: 10s\n    accept_limit: 5s\n    batch_size: 256\n",
                "rollup",
            ),
            rollup_workload(),
        ),
        (
            "filter",
            topology(
                "  filter:\n    type: filter\n    input: events\n    condition: '.type == \"QuestionCreated\" or .amount > 500'\n",
                "filter",
            ),
            stateless_workload(),
        ),
        (
            "map",
            topology(
                "  map:\n    type: map\n    input: events\n    expression: '{question_id, kind: .type, cents: (.amount * 100)}'\n",
                "map",
            ),
            stateless_workload(),
        ),
        (
            "route",
            topology(
                "  route:\n    type: route\n    input: events\n    routes:\n      questions: '.type | startswith(\"Question\")'\n      answers: '.type == \"AnswerAdded\"'\n",
                "[route.questions, route.answers, route]",
            ),
            stateless_workload(),
        ),
    ];
    let mut group = c.benchmark_group("operators");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.sample_size(10);
    for (name, topology, workload) in cases {
        group.bench_function(name, |b| {
            b.iter_batched(
                || (task(&topology), workload.clone()),
                |(mut task, workload)| black_box(run(&mut task, workload)),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// Records as (source, key, value, timestamp).
type Sourced = Vec<(usize, Vec<u8>, Value, i64)>;

/// A table row for every key, then the stream: one in ten keys has no row.
fn stream_table_workload() -> Sourced {
    let rows = (0..KEYS).filter(|k| k % 10 != 9).map(|k| {
        (
            1,
            format!("key-{k}").into_bytes(),
            json!({"name": format!("n{k}"), "tier": k % 3}),
            0,
        )
    });
    let stream = (0..RECORDS).map(|i| (0, key(i), json!({"order": i, "total": i % 97}), i as i64));
    rows.chain(stream).collect()
}

/// Two streams of one key space, alternating, 1 ms apart in event time:
/// with a 2 s window each record meets about two of the other side.
fn stream_stream_workload() -> Sourced {
    (0..RECORDS)
        .map(|i| (i % 2, key(i / 2), json!({"n": i}), i as i64))
        .collect()
}

/// Page views over 1,000 pages, 1 ms apart in event time.
fn window_workload() -> Sourced {
    (0..RECORDS)
        .map(|i| (0, key(i), json!({"user": format!("u{}", i % 37)}), i as i64))
        .collect()
}

fn run_sourced(task: &mut Task, workload: Sourced) -> u64 {
    let mut driver = Driver::new();
    for (source, key, value, timestamp) in workload {
        driver.feed_source(task, source, key, value, timestamp);
    }
    driver.finish(task)
}

/// The operators on event time that read more than one source, or none of
/// the others' workloads: windows and joins (`RECORDS` stream records per
/// iteration; a stream–table join's table rows come first).
fn windows_and_joins(c: &mut Criterion) {
    let cases: Vec<(&str, Arc<Topology>, Sourced)> = vec![
        (
            "window_tumbling_count",
            topology(
                "  window:\n    type: window\n    input: events\n    window: tumbling\n    size: 10s\n    fields:\n      views: { rule: count }\n",
                "window",
            ),
            window_workload(),
        ),
        (
            "window_session_count",
            topology(
                "  window:\n    type: window\n    input: events\n    window: session\n    gap: 5s\n    fields:\n      views: { rule: count }\n",
                "window",
            ),
            window_workload(),
        ),
        (
            "join_stream_table",
            topology_with(
                "\n  customers: { topic: customers, kind: table }",
                "  join:\n    type: join\n    input: [events, customers]\n    how: left\n",
                "join",
            ),
            stream_table_workload(),
        ),
        (
            "join_stream_stream",
            topology_with(
                "\n  views: { topic: views }",
                "  join:\n    type: join\n    input: [events, views]\n    window: 2s\n",
                "join",
            ),
            stream_stream_workload(),
        ),
    ];
    let mut group = c.benchmark_group("operators");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.sample_size(10);
    for (name, topology, workload) in cases {
        group.bench_function(name, |b| {
            b.iter_batched(
                || (task(&topology), workload.clone()),
                |(mut task, workload)| black_box(run_sourced(&mut task, workload)),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, operators, windows_and_joins);
criterion_main!(benches);
