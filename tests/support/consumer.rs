//! Reading outputs under read_committed, and the group's committed
//! offsets.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::app::App;
use super::broker::{broker, plain_client};
use super::unique;

/// A record as a read_committed consumer sees it.
#[derive(Clone, Debug)]
pub struct Consumed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<String>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
}

impl From<&rdkafka::message::BorrowedMessage<'_>> for Consumed {
    fn from(message: &rdkafka::message::BorrowedMessage<'_>) -> Consumed {
        let headers = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_string(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Consumed {
            topic: message.topic().to_string(),
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp().to_millis(),
            key: message
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
        }
    }
}

impl Consumed {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(self.payload.as_deref().unwrap_or(b"null")).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads every partition of `topic` from the beginning (read_committed)
/// until `want` records arrived and then `settle` passed without more, or
/// `timeout` passed.
pub fn read_topic(topic: &str, want: usize, settle: Duration, timeout: Duration) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let deadline = Instant::now() + timeout;
    // The topic may not exist yet (the app creates its outputs).
    let partitions = loop {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let n = metadata
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len());
        if n > 0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p as i32, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut out = Vec::new();
    let mut last = Instant::now();
    while Instant::now() < deadline {
        if out.len() >= want && last.elapsed() >= settle {
            break;
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message.unwrap();
        last = Instant::now();
        out.push(Consumed::from(&message));
    }
    out
}

/// The number of partitions of `topic` (0 while it does not exist).
pub fn partition_count(topic: &str) -> i32 {
    partition_count_on(&plain_client(), topic)
}

/// [`partition_count`] through a client with `client`'s settings.
pub fn partition_count_on(client: &ClientConfig, topic: &str) -> i32 {
    let consumer: BaseConsumer = client.create().unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32)
}

/// Total offsets in `topic` (high watermarks), transaction markers
/// included.
pub fn topic_end_offsets(topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .create()
        .unwrap();
    (0..partition_count(topic))
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .sum()
}

/// Every record of `topic` (read_committed). Call it once nothing writes
/// the topic any more: the read of each partition ends when the consumer
/// reaches its end (end-of-partition from the fetch responses), not after
/// a quiet period.
pub fn read_to_end(topic: &str, timeout: Duration) -> Vec<Consumed> {
    read_to_end_on(&plain_client(), topic, timeout)
}

/// [`read_to_end`] through a client with `client`'s settings.
pub fn read_to_end_on(client: &ClientConfig, topic: &str, timeout: Duration) -> Vec<Consumed> {
    let partitions = partition_count_on(client, topic);
    let consumer: BaseConsumer = client
        .clone()
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut done: Vec<bool> = vec![false; partitions as usize];
    let mut out = Vec::new();
    let deadline = Instant::now() + timeout;
    while done.iter().any(|d| !d) {
        assert!(
            Instant::now() < deadline,
            "{topic}: partitions {done:?} not read to their ends within {timeout:?}"
        );
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            // EOF comes once the fetch reached the partition's last stable
            // offset; nothing writes the topic any more, so that is the
            // end it had when the read began (transaction markers
            // included, which no record reports).
            Some(Err(KafkaError::PartitionEOF(p))) => {
                done[p as usize] = true;
                continue;
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(m)) => m,
        };
        out.push(Consumed::from(&message));
    }
    out
}

/// A read_committed reader of every partition of a topic from the
/// beginning, to follow what an application writes while it runs.
pub struct Follower {
    consumer: BaseConsumer,
    pub records: Vec<Consumed>,
}

impl Follower {
    pub fn new(topic: &str, partitions: i32) -> Follower {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &broker().bootstrap)
            .set("group.id", unique("follower"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        Follower {
            consumer,
            records: Vec::new(),
        }
    }

    /// Reads what arrived within `wait`.
    pub fn poll(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while let Some(message) = self
            .consumer
            .poll(deadline.saturating_duration_since(Instant::now()))
        {
            let Ok(message) = message else { continue };
            self.records.push(Consumed::from(&message));
            if Instant::now() >= deadline {
                break;
            }
        }
    }
}

/// Per key: the values that arrived, in order.
pub fn by_key(records: &[Consumed]) -> BTreeMap<String, Vec<&Consumed>> {
    let mut out: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
    for r in records {
        out.entry(r.key.clone().unwrap_or_default())
            .or_default()
            .push(r);
    }
    out
}

/// The offsets `group` committed on each partition of `topic` (-1: none).
pub fn group_committed(group: &str, topic: &str, partitions: usize) -> Vec<i64> {
    group_committed_on(&plain_client(), group, topic, partitions)
}

/// [`group_committed`] through a client with `client`'s settings.
pub fn group_committed_on(
    client: &ClientConfig,
    group: &str,
    topic: &str,
    partitions: usize,
) -> Vec<i64> {
    let consumer: BaseConsumer = client
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p as i32);
    }
    let Ok(committed) = consumer.committed_offsets(list, Duration::from_secs(10)) else {
        return vec![-1; partitions];
    };
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

/// Waits until `group` has committed `topic` up to `end` (per partition),
/// checking `app` is alive meanwhile.
pub fn wait_committed_to(app: &App, group: &str, topic: &str, end: &[i64], timeout: Duration) {
    wait_group_committed_to(
        group,
        topic,
        end,
        timeout,
        &|| app.assert_running(),
        &|| app.log_text(),
    );
}

/// [`wait_committed_to`] for any process: `alive` asserts it still runs,
/// `log` is what a timeout shows of it.
pub fn wait_group_committed_to(
    group: &str,
    topic: &str,
    end: &[i64],
    timeout: Duration,
    alive: &dyn Fn(),
    log: &dyn Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let committed = group_committed(group, topic, end.len());
        if committed
            .iter()
            .zip(end)
            .all(|(c, e)| *c == *e || *e == 0 && *c == -1)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{group} committed {committed:?} of {topic}, whose end is {end:?}, within {timeout:?}; log:\n{}",
            log()
        );
        alive();
        std::thread::sleep(Duration::from_millis(200));
    }
}
