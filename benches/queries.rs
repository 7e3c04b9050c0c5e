//! Interactive queries: point reads over HTTP against a store of 1M keys.
//!
//! One task's RocksDB holds 1,000,000 `ordered` states (about 110 bytes of
//! JSON each) written as the runtime writes committed state; the query
//! server of `run --query-addr` serves it on 127.0.0.1. One client (hyper,
//! one keep-alive connection, one request at a time) asks for random keys;
//! criterion reports requests/s. No broker: forwarding is not measured,
//! only the local read path (HTTP parse, routing, RocksDB read, JSON).
//!
//! `cargo bench --bench queries`

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng};
use serde_json::json;
use streamfold::runtime::query::QueryState;
use streamfold::runtime::query::endpoints::Directory;
use streamfold::runtime::query::server::{Context, QueryServer};
use streamfold::state::rocks::{RocksBackend, RocksResources};
use streamfold::state::{RawWrite, StateBackend};
use streamfold::topology;

/// The allocator the `streamfold` binary runs with, so the reads are
/// measured as users run them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KEYS: usize = 1_000_000;
const BATCH: usize = 50_000;

const TOPOLOGY: &str = "
name: bench
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

fn key(i: usize) -> String {
    format!("user-{i:07}")
}

fn point_reads(c: &mut Criterion) {
    let topology = Arc::new(topology::load_str("bench.yaml", TOPOLOGY, &|_| None).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<String> = topology.stores().map(|s| s.name.clone()).collect();
    let store = stores.iter().position(|s| s == "by_id-latest").unwrap();
    let mut backend = RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
    for start in (0..KEYS).step_by(BATCH) {
        let writes: Vec<RawWrite> = (start..start + BATCH)
            .map(|i| {
                let value = json!({
                    "version": {"order": 3},
                    "value": {"id": key(i), "seq": 3, "score": i * 10 + 3, "name": "some name"},
                    "clock": 3,
                });
                RawWrite {
                    store,
                    key: key(i).into_bytes().into(),
                    value: Some(serde_json::to_vec(&value).unwrap().into()),
                }
            })
            .collect();
        backend.apply(&writes, &[]).unwrap();
    }

    let state = QueryState::new();
    state.set_partitions(1);
    state.opened(0, backend.shared());
    state.started(0);
    let context = Context::new(
        Arc::clone(&topology),
        "bench".into(),
        Arc::clone(&state),
        Arc::new(Directory::default()),
    );
    let server = QueryServer::start("127.0.0.1:0".parse().unwrap(), context).unwrap();
    let base = format!("http://{}", server.addr);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut group = c.benchmark_group("queries");
    group.throughput(Throughput::Elements(1));
    group.bench_function("point_read_1m_keys_one_client", |b| {
        b.iter(|| {
            let i = rng.random_range(0..KEYS);
            let uri = format!("{base}/v1/stores/by_id-latest/keys/{}", key(i))
                .parse()
                .unwrap();
            runtime.block_on(async {
                let response = client.get(uri).await.unwrap();
                assert_eq!(response.status(), 200);
                response.into_body().collect().await.unwrap().to_bytes()
            })
        });
    });
    group.finish();
    server.stop();
    drop(state);
    drop(backend);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = point_reads
}
criterion_main!(benches);
