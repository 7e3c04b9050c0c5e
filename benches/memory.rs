//! Peak memory of a task whose state outgrows memory: millions of
//! distinct keys through `dedup` or `projection` on RocksDB, with the
//! topology's default `state:` budget (block cache, write buffers and
//! record cache, as `run` gives an instance), in one process. Peak RSS
//! must stay within the budget plus a documented constant, whatever the
//! number of keys.
//!
//! The task is driven as the runtime drives it (records one by one, state
//! committed every 5,000 records: changelog entries encoded, then written
//! to RocksDB), without a broker: an end-to-end run with 10M keys needs a
//! broker that keeps tens of millions of records (nisshi's memory engine
//! holds them in RAM; its SQLite engine served 1.4k records/s here), and the
//! state's memory does not depend on where the records come from. Records
//! are generated one at a time, so the workload itself takes no memory.
//!
//! ```sh
//! MALLOC_ARENA_MAX=2 cargo bench --bench memory -- --records 10000000 --workload dedup
//! MALLOC_ARENA_MAX=2 cargo bench --bench memory -- --records 10000000 --workload projection
//! ```
//!
//! One workload per process, since the peak is the process's.
//! `MALLOC_ARENA_MAX=2` is what the `streamfold` binary sets for itself
//! (RocksDB allocates through glibc). In test mode (`cargo test --bench
//! memory`) it runs 20,000 records of each workload and checks every
//! record came out.

#[path = "driver/mod.rs"]
mod driver;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use streamfold::state::rocks::RocksBackend;
use streamfold::task::{Routing, Task};
use streamfold::topology::Topology;

use driver::{Driver, projection_topology, topology};
use support::peak_rss_mib;

/// The allocator the `streamfold` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIB: f64 = 1024.0 * 1024.0;

/// A workload: its topology, and the value of record `i` (keyed `k<i>`:
/// every record a key of its own).
struct Workload {
    name: &'static str,
    topology: Arc<Topology>,
    value: fn(u64) -> serde_json::Value,
}

fn workloads() -> Vec<Workload> {
    vec![
        Workload {
            name: "dedup",
            // A retention longer than the run: every id stays.
            topology: topology(
                "  dedup:\n    type: dedup\n    input: events\n    id_field: /event_id\n    retention: 30d\n",
                "dedup",
            ),
            value: |i| json!({"event_id": format!("evt-{i}"), "n": i}),
        },
        Workload {
            name: "projection",
            topology: projection_topology(),
            value: |i| json!({"event_id": format!("e{i}"), "type": "QuestionCreated", "sequence": 1, "title": format!("title {i}")}),
        },
    ]
}

/// Runs `records` records of `workload` through one task on RocksDB in a
/// fresh directory; returns the records emitted.
fn run(workload: &Workload, records: u64, report: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let topology = &workload.topology;
    let (resources, cache) = topology.state_resources();
    let stores: Vec<String> = topology.stores().map(|s| s.name.clone()).collect();
    let backend = RocksBackend::open(dir.path(), &stores, &resources).unwrap();
    let mut task = Task::new(Arc::clone(topology), Box::new(backend), Routing::Direct).unwrap();
    task.state().share_cache(Arc::clone(&cache));
    task.start(None).unwrap();

    let budget = topology.state_budget() as f64 / MIB;
    let started = Instant::now();
    let mut driver = Driver::new();
    for i in 0..records {
        let key = format!("k{i}").into_bytes();
        driver.feed(&mut task, key, (workload.value)(i), i as i64);
        if report && (i + 1) % 1_000_000 == 0 {
            eprintln!(
                "  {}: {} records, {:.0} records/s, peak RSS {:.0} MiB, record cache {:.0} MiB",
                workload.name,
                i + 1,
                (i + 1) as f64 / started.elapsed().as_secs_f64(),
                peak_rss_mib(std::process::id()),
                cache.used() as f64 / MIB,
            );
        }
    }
    let emitted = driver.finish(&mut task);
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_rss_mib(std::process::id());
    println!(
        "{}: {records} records, {} keys, in {seconds:.1} s ({:.0} records/s); peak RSS {peak:.0} MiB, \
         state budget {budget:.0} MiB (peak - budget = {:.0} MiB)",
        workload.name,
        records,
        records as f64 / seconds,
        peak - budget
    );
    emitted
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let records: u64 = option("--records")
        .map(|n| n.parse().expect("--records N"))
        .unwrap_or(if bench { 10_000_000 } else { 20_000 });
    let chosen = option("--workload").unwrap_or_else(|| "dedup,projection".into());
    let chosen: Vec<&str> = chosen.split(',').collect();
    for workload in workloads() {
        if !chosen.contains(&workload.name) {
            continue;
        }
        let emitted = run(&workload, records, bench);
        // Every key is new: each record passes dedup, and each event
        // yields its entity's read model.
        assert_eq!(emitted, records, "{}: records out", workload.name);
    }
}
