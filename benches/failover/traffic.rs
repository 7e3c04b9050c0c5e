//! The traffic a failover is measured by: a producer that sends one
//! post-metric event a tick, each closing a fold the state already holds,
//! and a read_committed reader of the folded output that notes when each
//! folded event arrived.
//!
//! Account `account_k` holds one folded event from the state written before
//! (post `post_{1000 + k % 5000}`, as `streamfold-loadgen produce` sends
//! event k with as many accounts as events). Live event k goes to the same
//! account with post `live_post_k`; the topology runs with
//! `max_events: 2`, so processing it closes the fold at once: one folded
//! event of two events, whose posts are the restored one and the live one.
//! An output therefore shows that its task ran with its state restored,
//! and when.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::{Value, json};

use crate::support::plain_client;

/// The post a state event of account `k` carried.
pub fn state_post(k: u64) -> String {
    format!("post_{}", 1000 + k % 5000)
}

/// Live events sent one per tick until stopped.
pub struct Live {
    /// When each live event was handed to the producer, by its number.
    sent: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Live {
    /// Sends live events to `topic` at `rate` a second, up to `accounts`
    /// of them (one per account of the state).
    pub fn start(topic: &str, rate: f64, accounts: u64) -> Live {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let producer: BaseProducer = plain_client()
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "0")
            .set("enable.idempotence", "true")
            .create()
            .unwrap();
        let tick = Duration::from_secs_f64(1.0 / rate);
        let topic = topic.to_string();
        let thread = {
            let sent = Arc::clone(&sent);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut k = 0u64;
                while !stop.load(Ordering::Acquire) {
                    assert!(
                        k < accounts,
                        "{k} live events used every account of the state: give more --records or a lower --rate"
                    );
                    let account = format!("account_{k}");
                    let value = json!({
                        "post_id": format!("live_post_{k}"),
                        "account_id": account,
                        "metrics": {"likes": 1},
                    });
                    let payload = serde_json::to_vec(&value).unwrap();
                    // Noted before it is sent: an event noted after the
                    // kill was produced after it.
                    sent.lock().unwrap().push(Instant::now());
                    let mut record = BaseRecord::<str, [u8]>::to(&topic)
                        .key(&account)
                        .payload(&payload);
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((
                                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                                r,
                            )) => {
                                record = r;
                                producer.poll(Duration::from_millis(10));
                            }
                            Err((e, _)) => panic!("sending live event {k}: {e}"),
                        }
                    }
                    producer.poll(Duration::ZERO);
                    k += 1;
                    let next = start + tick.mul_f64(k as f64);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
                producer
                    .flush(Duration::from_secs(60))
                    .expect("the live events are delivered");
            })
        };
        Live {
            sent,
            stop,
            thread: Some(thread),
        }
    }

    /// Live events sent so far.
    pub fn count(&self) -> u64 {
        self.sent.lock().unwrap().len() as u64
    }

    /// The first live event handed to the producer after `at`.
    pub fn first_after(&self, at: Instant) -> u64 {
        let sent = self.sent.lock().unwrap();
        sent.partition_point(|t| *t <= at) as u64
    }

    /// Stops sending once every event sent is delivered; returns how many
    /// were sent.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the live producer did not fail");
        }
        self.count()
    }
}

/// A folded event read from the output, with when it arrived.
#[derive(Clone, Debug)]
pub struct Output {
    pub at: Instant,
    pub partition: i32,
    /// The live event it closed: `k` of its key `account_k`.
    pub k: u64,
    pub value: Value,
}

/// Reads every committed folded event from the beginning, as it comes.
pub struct Outputs {
    seen: Arc<Mutex<Vec<Output>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Outputs {
    pub fn follow(topic: &str, partitions: i32) -> Outputs {
        let consumer: BaseConsumer = plain_client()
            .set("group.id", crate::support::unique("bench-failover-reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            // A committed output is seen within a few milliseconds.
            .set("fetch.wait.max.ms", "10")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let seen = Arc::clone(&seen);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let Some(message) = consumer.poll(Duration::from_millis(50)) else {
                        continue;
                    };
                    let message = message.expect("reading the folded output");
                    let at = Instant::now();
                    let key = message
                        .key()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .unwrap_or_default();
                    let k = key
                        .strip_prefix("account_")
                        .and_then(|k| k.parse().ok())
                        .unwrap_or_else(|| panic!("an output keyed {key:?}"));
                    let value = serde_json::from_slice(message.payload().unwrap_or(b"null"))
                        .expect("a JSON folded event");
                    seen.lock().unwrap().push(Output {
                        at,
                        partition: message.partition(),
                        k,
                        value,
                    });
                }
            })
        };
        Outputs {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Outputs read so far.
    pub fn len(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The outputs read from index `from` on.
    pub fn since(&self, from: usize) -> Vec<Output> {
        self.seen.lock().unwrap()[from..].to_vec()
    }

    /// Waits until every live event below `k` has an output.
    pub fn wait_through(&self, k: u64, timeout: Duration, what: impl Fn() -> String) {
        let deadline = Instant::now() + timeout;
        loop {
            let covered = {
                let seen = self.seen.lock().unwrap();
                let mut got: Vec<u64> = seen.iter().map(|o| o.k).filter(|&x| x < k).collect();
                got.sort_unstable();
                got.dedup();
                got.len() as u64
            };
            if covered == k {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{covered} of the first {k} live events have an output after {timeout:?}; {}",
                what()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Fails unless the live events `0..sent` each have exactly one
    /// output, a fold of the restored event and the live one, and nothing
    /// else was output. Returns the outputs checked.
    pub fn assert_exactly_once(mut self, sent: u64) -> usize {
        self.stop_reading();
        let mut outputs = std::mem::take(&mut *self.seen.lock().unwrap());
        outputs.sort_by_key(|o| o.k);
        let mut by_k: BTreeMap<u64, Vec<&Output>> = BTreeMap::new();
        for o in &outputs {
            by_k.entry(o.k).or_default().push(o);
        }
        let missing: Vec<u64> = (0..sent).filter(|k| !by_k.contains_key(k)).collect();
        assert!(
            missing.is_empty(),
            "{} of {sent} live events have no output, the first {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        for (k, found) in &by_k {
            assert!(
                *k < sent,
                "an output for account_{k}, which no live event went to"
            );
            assert_eq!(
                found.len(),
                1,
                "account_{k}: {} outputs, not one: {:?}",
                found.len(),
                found.iter().map(|o| &o.value).collect::<Vec<_>>()
            );
            let value = &found[0].value;
            let mut posts: Vec<&str> = value["posts"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            posts.sort_unstable();
            let mut expected = vec![state_post(*k), format!("live_post_{k}")];
            expected.sort();
            assert_eq!(
                posts, expected,
                "account_{k}: the fold holds the restored event and the live one: {value}"
            );
            assert_eq!(value["folded_count"], 2, "account_{k}: {value}");
            assert_eq!(value["closed_by"], "max_events", "account_{k}: {value}");
        }
        outputs.len()
    }
}

impl Outputs {
    fn stop_reading(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the output reader did not fail");
        }
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
