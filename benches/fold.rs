//! The fold operator on the in-memory store: post-metric events over 1,000
//! accounts folded with the social-metrics rules (key_union of metric
//! names, set of post ids, closing after 100 events), committing state
//! every 5,000 records as the runtime does about every 100 ms. In
//! `json_bytes_new_posts` every event names a new post, so the sets grow
//! to 100 ids; in the others 50 posts repeat. The `json_bytes_*` cases
//! take the events as the runtime does, a field at a time
//! (`process_source_bytes`); their `_whole` twins decode each event whole
//! first, as before. `json_bytes_rekeyed` has the fold re-key events keyed
//! by their post (`key_by`), for the task of partition 0 of 4: three in
//! four go to the repartition topic, so read a field at a time they are
//! parsed twice.
//!
//! `cargo bench --bench fold`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use streamfold::formats::{CodecError, Codecs};
use streamfold::record::json as json_format;
use streamfold::record::{Origin, Record};
use streamfold::state::memory::MemoryBackend;
use streamfold::task::{Routing, Task};
use streamfold::testkit::article::METRICS;
use streamfold::topology::{self, Topology};

/// The allocator the `streamfold` binary runs with, so the fold is
/// measured as users run it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOPOLOGY: &str = "
name: bench
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  post_metrics: { topic: post-metric-updated }
nodes:
  fold_account:
    type: fold
    input: post_metrics
    key_field: account_id
    fields:
      metrics: { rule: key_union, from: /metrics }
      posts: { rule: set, from: /post_id }
    quiet_for: 5s
    max_wait: 1m
    max_events: 100
sinks:
  folded: { topic: folded, input: fold_account }
";

const EVENTS: usize = 100_000;
const ACCOUNTS: usize = 1_000;
const COMMIT_EVERY: usize = 5_000;

/// The events; `new_posts`: every event names a post of its own, the
/// ids ascending (zero-padded, as time-ordered ids are), so each event
/// grows its fold's set; otherwise 50 posts repeat.
fn events(new_posts: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..EVENTS)
        .map(|i| {
            let account = format!("account_{}", (i * 7919) % ACCOUNTS);
            let post = if new_posts {
                format!("post_{i:07}")
            } else {
                format!("post_{}", i % 50)
            };
            let value = json!({
                "post_id": post,
                "account_id": account,
                "metrics": {METRICS[i % 6]: i % 97, METRICS[(i / 6) % 6]: i % 13},
            });
            (account.into_bytes(), json_format::encode(&value))
        })
        .collect()
}

/// The events keyed by their post, not their account: a source the fold
/// re-keys (`key_by: /account_id`), three in four of whose records belong
/// to another partition's task of four and go to the repartition topic.
fn keyed_by_post(events: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    events
        .iter()
        .map(|(_, payload)| {
            let value = json_format::decode(payload).unwrap();
            (
                value["post_id"].as_str().unwrap().as_bytes().to_vec(),
                payload.clone(),
            )
        })
        .collect()
}

fn task(topology: &Arc<Topology>) -> Task {
    routed_task(topology, Routing::Direct)
}

fn routed_task(topology: &Arc<Topology>, routing: Routing) -> Task {
    let stores = topology.stores().count();
    let mut task = Task::new(
        Arc::clone(topology),
        Box::new(MemoryBackend::new(stores)),
        routing,
    )
    .unwrap();
    task.start(None).unwrap();
    task
}

/// How the events reach the task.
enum Feed<'a> {
    /// Decoded outside the timing (moved in), to isolate the operator.
    Decoded(Vec<serde_json::Value>),
    /// Decoded whole, then processed (`process_source`).
    Whole,
    /// As the runtime takes them (`process_source_bytes`): a fold's
    /// events are read a field at a time.
    AsRead(&'a Codecs),
}

/// Feeds every event.
fn run(task: &mut Task, events: &[(Vec<u8>, Vec<u8>)], feed: Feed<'_>) -> usize {
    let (mut decoded, codecs) = match feed {
        Feed::Decoded(values) => (Some(values.into_iter()), None),
        Feed::Whole => (None, None),
        Feed::AsRead(codecs) => (None, Some(codecs)),
    };
    let mut outputs = Vec::with_capacity(1024);
    let mut emitted = 0;
    for (i, (key, payload)) in events.iter().enumerate() {
        let origin = Origin {
            topic: "post-metric-updated",
            partition: 0,
            offset: i as i64,
            key: Some(key),
            payload: Some(payload),
            headers: &[],
        };
        if let Some(codecs) = codecs {
            task.records()
                .process_source_bytes(0, &origin, codecs, 0, &mut outputs)
                .unwrap();
        } else {
            let value = match &mut decoded {
                Some(values) => Ok(values.next().unwrap()),
                None => json_format::decode(payload).map_err(CodecError::from),
            };
            let record =
                value.map(|value| Record::new(Some(key.clone().into_boxed_slice()), value, 0));
            task.records()
                .process_source(0, &origin, record, &mut outputs)
                .unwrap();
        }
        if i % COMMIT_EVERY == COMMIT_EVERY - 1 {
            emitted += outputs.len();
            outputs.clear();
            let state = task.state();
            let entries = state.changelog().unwrap();
            state.committed(entries, &[]).unwrap();
        }
    }
    emitted + outputs.len()
}

fn fold(c: &mut Criterion) {
    let topology = Arc::new(topology::load_str("bench.yaml", TOPOLOGY, &|_| None).unwrap());
    let codecs = Codecs::offline(&topology).unwrap();
    let rekeyed_topology = Arc::new(
        topology::load_str(
            "bench.yaml",
            &TOPOLOGY.replace("key_field: account_id", "key_by: /account_id"),
            &|_| None,
        )
        .unwrap(),
    );
    let rekeyed_codecs = Codecs::offline(&rekeyed_topology).unwrap();
    let partitioned = Routing::Partitioned {
        partition: 0,
        partitions: 4,
    };
    let new_posts = events(true);
    let events = events(false);
    let decoded: Vec<serde_json::Value> = events
        .iter()
        .map(|(_, p)| json_format::decode(p).unwrap())
        .collect();
    let mut group = c.benchmark_group("fold");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.sample_size(20);
    group.bench_function("decoded_events", |b| {
        b.iter_batched(
            || (task(&topology), decoded.clone()),
            |(mut task, decoded)| black_box(run(&mut task, &events, Feed::Decoded(decoded))),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("json_bytes_events", |b| {
        b.iter_batched(
            || task(&topology),
            |mut task| black_box(run(&mut task, &events, Feed::AsRead(&codecs))),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("json_bytes_events_whole", |b| {
        b.iter_batched(
            || task(&topology),
            |mut task| black_box(run(&mut task, &events, Feed::Whole)),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("json_bytes_new_posts", |b| {
        b.iter_batched(
            || task(&topology),
            |mut task| black_box(run(&mut task, &new_posts, Feed::AsRead(&codecs))),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("json_bytes_new_posts_whole", |b| {
        b.iter_batched(
            || task(&topology),
            |mut task| black_box(run(&mut task, &new_posts, Feed::Whole)),
            BatchSize::PerIteration,
        )
    });
    let rekeyed = keyed_by_post(&events);
    group.bench_function("json_bytes_rekeyed", |b| {
        b.iter_batched(
            || routed_task(&rekeyed_topology, partitioned),
            |mut task| black_box(run(&mut task, &rekeyed, Feed::AsRead(&rekeyed_codecs))),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("json_bytes_rekeyed_whole", |b| {
        b.iter_batched(
            || routed_task(&rekeyed_topology, partitioned),
            |mut task| black_box(run(&mut task, &rekeyed, Feed::Whole)),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, fold);
criterion_main!(benches);
