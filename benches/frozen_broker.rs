//! What a commit waiting on a frozen broker costs in CPU. A `streamfold
//! run` instance works through a backlog when the broker freezes (SIGSTOP:
//! connections stay open, nothing is answered), so its commit waits for
//! acknowledgements that do not come; the instance's CPU over the freeze
//! is read per thread from `/proc`.
//!
//! ```text
//! cargo bench --bench frozen_broker -- [--events N] [--freezes F] [--freeze-secs S]
//! ```
//!
//! 1. N post-metric events (default 1,000,000) over 20,000 accounts on a
//!    4-partition topic of a one-node broker started for the run; one
//!    instance of the social-metrics topology (exactly_once, a commit
//!    every 100 ms) folds them.
//! 2. F times (default 5), a second apart, while the instance is still
//!    consuming: the broker freezes for S seconds (default 3). A freeze
//!    counts if the instance committed no transaction while it lasted: a
//!    commit waited for the broker all along.
//! 3. Per counted freeze, the instance's CPU seconds per second of freeze
//!    and its busiest threads, as a Markdown table, then the median, with
//!    `uptime`'s load averages (the machine is shared).
//!
//! A wait that sleeps costs a few hundredths of a core; a thread that
//! spins costs a whole one, which on a shared machine starves the broker
//! it waits for. This is a measurement, not a test, because no count
//! taken from outside the process tells the two apart: a wait spinning on
//! librdkafka's queues makes no system call and no context switch.
//! (librdkafka's own broker threads count their turns, which
//! `tests/frozen_broker.rs` judges.)
//!
//! Under `cargo test` (no `--bench` argument) it runs one freeze of a
//! second over 100,000 events, as a smoke test of the harness: its figures
//! mean nothing, its check does (the instance commits the whole backlog
//! once the broker wakes).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

const ACCOUNTS: u64 = 20_000;
const PARTITIONS: i32 = 4;
const COMMITTED: &str = "streamfold_transactions_committed_total";
const CONSUMED: &str = "streamfold_runtime_records_consumed_total";

struct Options {
    events: u64,
    freezes: usize,
    freeze: Duration,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench");
    let mut o = Options {
        events: if benchmarking { 1_000_000 } else { 100_000 },
        freezes: if benchmarking { 5 } else { 1 },
        freeze: Duration::from_secs(if benchmarking { 3 } else { 1 }),
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--events" => o.events = value.parse().expect("--events N"),
            "--freezes" => o.freezes = value.parse().expect("--freezes N"),
            "--freeze-secs" => {
                o.freeze = Duration::from_secs(value.parse().expect("--freeze-secs S"));
            }
            // cargo passes `--bench`; ignore what is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

fn main() {
    let options = options();
    let app = unique("sf-frozen-bench");
    let topic = unique("post-metric-updated");
    create_topic(&topic, PARTITIONS);
    let producer = TestProducer::new();
    for i in 0..options.events {
        let account = format!("account_{}", i % ACCOUNTS);
        let value = json!({
            "post_id": format!("post_{}", i % 37),
            "account_id": account,
            "metrics": {"likes": i},
        });
        producer.send_json(&topic, &account, &value);
    }
    producer.flush();
    let end = producer.ends(&topic, PARTITIONS);

    let dir = temp_dir();
    let config = AppConfig {
        topology: repo().join("topologies/social-metrics.yaml"),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: env_vars(&[
            ("STREAMFOLD_APP", &app),
            ("POST_METRICS_TOPIC", &topic),
            ("FOLDED_TOPIC", &format!("{app}-folded")),
            ("DEAD_LETTER_TOPIC", &format!("{app}-dlq")),
        ]),
        txn_header: false,
        args: Vec::new(),
    };
    let instance = App::start(&config, dir.path());
    instance.wait_metric(COMMITTED, Duration::from_secs(240), |n| n > 0.0);

    println!(
        "| freeze | CPU s per s of freeze | busiest threads (CPU s) | load averages |\n|---|---|---|---|"
    );
    let mut per_second = Vec::new();
    for freeze in 0..options.freezes {
        // Frozen in full swing: consuming right up to the freeze, so a
        // transaction is open.
        let consumed = instance.metric(CONSUMED);
        std::thread::sleep(Duration::from_millis(200));
        if instance.metric(CONSUMED) <= consumed {
            println!("\nThe backlog ran out before freeze {freeze}.");
            break;
        }
        let load = load_average();
        broker().freeze();
        // What the broker answered before it froze has arrived by then.
        std::thread::sleep(Duration::from_millis(100));
        let committed = instance.metric(COMMITTED);
        let before = thread_cpu_seconds(instance.pid());
        std::thread::sleep(options.freeze);
        let after = thread_cpu_seconds(instance.pid());
        // The instance serves its metrics itself: the broker is not asked.
        let waited = instance.metric(COMMITTED) == committed;
        broker().thaw();
        let used = after.values().sum::<f64>() - before.values().sum::<f64>();
        let busiest = busiest_threads(&before, &after);
        if waited {
            let rate = used / options.freeze.as_secs_f64();
            per_second.push(rate);
            println!("| {freeze} | {rate:.3} | {busiest} | {load} |");
        } else {
            println!("| {freeze} | (a transaction committed: not counted) | {busiest} | {load} |");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    if !per_second.is_empty() {
        println!(
            "\nmedian: {:.3} CPU s per s of freeze over {} freezes of {:?}",
            median(&per_second),
            per_second.len(),
            options.freeze
        );
    }
    wait_committed_to(&instance, &app, &topic, &end, Duration::from_secs(600));
    instance.stop();
}
