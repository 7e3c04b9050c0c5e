//! Latency of the social-metrics fold, the same way for every system: on a
//! fresh 4-partition topic, with the system running and its tasks ready,
//! bursts of 100 events for one new account each are sent every 20 ms; a
//! fold closes at its 100th event (`max_events`), so each burst makes one
//! folded event. Latency is from the burst's last event (its timestamp, the
//! folded event's `last_event_at`) to the folded event reaching a
//! read_committed consumer. The first bursts warm the system up (a JVM
//! compiles its hot paths) and are not counted.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::{Value, json};

use crate::support::*;
use crate::systems::Launch;

pub const PARTITIONS: i32 = 4;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Latencies in ms, sorted, of `bursts` bursts after `warmup` bursts, for
/// the system `launch` starts (made over the topic `launch_on` is given).
pub fn latencies(
    launch_on: impl Fn(&str) -> Launch,
    warmup: usize,
    bursts: usize,
    dir: &Path,
) -> Vec<f64> {
    let topic = unique("bench-latency");
    create_topic(&topic, PARTITIONS);
    let launch = launch_on(&topic);
    let running = launch.start(dir);
    running.wait_ready(PARTITIONS);

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("group.id", unique("bench-reader"))
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        .create()
        .unwrap();
    // Each system creates its output topic when it starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while partition_count(&launch.output) < PARTITIONS {
        assert!(
            Instant::now() < deadline,
            "no output topic {}",
            launch.output
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition_offset(&launch.output, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();

    let sent = topic.clone();
    let sender = std::thread::spawn(move || {
        let producer = TestProducer::new();
        for b in 0..warmup + bursts {
            let account = format!("latency_{b}");
            for i in 0..100 {
                producer.send_json(
                    &sent,
                    &account,
                    &json!({"post_id": format!("post_{i}"), "account_id": account, "metrics": {"likes": i}}),
                );
            }
            producer.flush();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut out = Vec::with_capacity(bursts);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut folds = 0;
    while folds < warmup + bursts && Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let received = now_ms();
        let value: Value =
            serde_json::from_slice(message.payload().unwrap_or_default()).unwrap_or_default();
        let burst: Option<usize> = value["account_id"]
            .as_str()
            .and_then(|a| a.strip_prefix("latency_")?.parse().ok());
        let last = value["last_event_at"]
            .as_str()
            .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
            .map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64);
        if let (Some(burst), Some(last)) = (burst, last) {
            folds += 1;
            if burst >= warmup {
                out.push((received - last) as f64);
            }
        }
    }
    sender.join().unwrap();
    running.stop();
    assert_eq!(
        out.len(),
        bursts,
        "{}: every burst was folded within 5 minutes",
        launch.label
    );
    out.sort_by(f64::total_cmp);
    out
}

/// The nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}
