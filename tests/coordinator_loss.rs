//! A consumer group's coordinator dies inside a transaction: the offsets
//! the transaction sends (`send_offsets_to_transaction`) go to the group's
//! next coordinator, and the transaction commits, on a three-node Apache
//! Kafka cluster whose dead node stays down. (The vendored librdkafka
//! fix, vendor/README.md: "Offsets sent to a transaction waited for a
//! dead group coordinator".)

mod support;

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use support::*;

/// The partitions of `__consumer_offsets` and `__transaction_state` the
/// test brokers are started with (scripts/kafka-broker.sh).
const COORDINATOR_PARTITIONS: i32 = 10;

/// The partition of a coordinator topic that holds `id`: Kafka's
/// `Utils.abs(id.hashCode()) % partitions`, with Java's `String.hashCode`.
fn coordinator_partition(id: &str) -> i32 {
    let hash = id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % COORDINATOR_PARTITIONS
}

/// The node leading `partition` of `topic`, as `client` sees it now.
fn leader(client: &ClientConfig, topic: &str, partition: i32) -> Option<i32> {
    let consumer: BaseConsumer = client.create().unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .ok()?;
    metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions())
        .find(|p| p.id() == partition)
        .map(|p| p.leader())
        .filter(|&leader| leader >= 0)
}

/// Waits until `partition` of `topic` has a leader other than `not`.
fn wait_leader(client: &ClientConfig, topic: &str, partition: i32, not: Option<i32>) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(leader) = leader(client, topic, partition)
            && Some(leader) != not
        {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} [{partition}] got no leader (other than {not:?}) in 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The producer knows the group's coordinator (a first transaction sent
/// the group's offsets to it) when that node is killed (SIGKILL) and stays
/// down. Once the cluster has fenced it, the producer's next metadata
/// leaves it out, and librdkafka decommissions the node: its broker thread
/// stops connecting, while the coordinator cache still names it. The
/// second transaction's offsets wait for that node: the published
/// librdkafka asked for the coordinator again only on a broker's state
/// change, which neither the decommissioned node nor the two healthy
/// ones make, and did not apply the request's timeout, so
/// `send_offsets_to_transaction` never returned. Patched, the request
/// looks again each second, finds the group's new coordinator and
/// commits there.
///
/// The transaction coordinator is on another node, so only the group
/// coordinator's loss is met.
#[test]
fn offsets_sent_to_a_transaction_reach_the_groups_next_coordinator_when_its_coordinator_dies() {
    let kafka = Broker::start(BrokerOptions {
        nodes: 3,
        ..BrokerOptions::default()
    });
    let client = kafka.client();
    let input = unique("coordinator-input");
    let output = unique("coordinator-output");
    create_topic_on(&client, &input, 1, &[]);
    create_topic_on(&client, &output, 1, &[]);

    // The coordinator topics exist once something asks for a coordinator.
    let group = unique("coordinator-group");
    group_committed_on(&client, &group, &input, 1);
    let warm_up: BaseProducer = client
        .clone()
        .set("transactional.id", unique("coordinator-warm-up"))
        .create()
        .unwrap();
    warm_up.init_transactions(Duration::from_secs(60)).unwrap();
    drop(warm_up);
    let group_partition = coordinator_partition(&group);
    let coordinator = wait_leader(&client, "__consumer_offsets", group_partition, None);
    let transactional_id = (0..)
        .map(|i| format!("{group}-txn-{i}"))
        .find(|id| {
            wait_leader(
                &client,
                "__transaction_state",
                coordinator_partition(id),
                None,
            ) != coordinator
        })
        .unwrap();
    eprintln!("group coordinator: node {coordinator}; transactional id {transactional_id}");

    // The group's offsets are those of a consumer outside group
    // management (generation -1), which the group takes while it is empty.
    let consumer: BaseConsumer = client
        .clone()
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer.group_metadata().unwrap();
    let producer: Arc<BaseProducer> = Arc::new(
        client
            .clone()
            .set("transactional.id", &transactional_id)
            .set("reconnect.backoff.max.ms", "1000")
            .create()
            .unwrap(),
    );
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    let transaction = |n: i64| {
        producer.begin_transaction().unwrap();
        producer
            .send(
                BaseRecord::<str, str>::to(&output)
                    .key("k")
                    .payload(&format!("record {n}")),
            )
            .unwrap();
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&input, 0, Offset::Offset(n))
            .unwrap();
        offsets
    };
    let offsets = transaction(1);
    producer
        .send_offsets_to_transaction(&offsets, &metadata, timeout)
        .unwrap();
    producer.commit_transaction(timeout).unwrap();
    assert_eq!(group_committed_on(&client, &group, &input, 1), vec![1]);

    kafka.node(coordinator as u32).stop(true);
    let successor = wait_leader(
        &client,
        "__consumer_offsets",
        group_partition,
        Some(coordinator),
    );
    // The producer's own metadata without the dead node decommissions it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let nodes: Vec<i32> = producer
            .client()
            .fetch_metadata(None, Duration::from_secs(5))
            .map(|m| m.brokers().iter().map(|b| b.id()).collect())
            .unwrap_or_default();
        if !nodes.is_empty() && !nodes.contains(&coordinator) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster still lists node {coordinator} 60 s after it was killed"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("node {coordinator} killed; node {successor} coordinates the group now");

    let offsets = transaction(2);
    let started = Instant::now();
    let (sent, answer) = mpsc::channel();
    // A thread of its own, not joined: a call that never returns must not
    // hold the test.
    let calling = Arc::clone(&producer);
    std::thread::spawn(move || {
        let _ = sent.send(calling.send_offsets_to_transaction(&offsets, &metadata, timeout));
    });
    // Twice the call's timeout: a call that has not returned by then waits
    // for something that does not come.
    let result = answer.recv_timeout(2 * timeout).unwrap_or_else(|_| {
        panic!(
            "send_offsets_to_transaction has not returned {:?} after it was called with a \
             {timeout:?} timeout: it waits for the dead coordinator, node {coordinator}",
            started.elapsed()
        )
    });
    eprintln!(
        "send_offsets_to_transaction returned {result:?} after {:?}",
        started.elapsed()
    );
    result.expect("the offsets reach the group's new coordinator");
    producer.commit_transaction(timeout).unwrap();

    // The judges' clients know only the live nodes: a reader treats an
    // error reaching the dead one as fatal.
    let mut live = ClientConfig::new();
    live.set(
        "bootstrap.servers",
        kafka
            .nodes
            .iter()
            .filter(|n| n.id != coordinator as u32)
            .map(|n| format!("{}:{}", n.host, n.port))
            .collect::<Vec<_>>()
            .join(","),
    );
    assert_eq!(
        group_committed_on(&live, &group, &input, 1),
        vec![2],
        "the second transaction's offsets are the group's"
    );
    let records: Vec<String> = read_to_end_on(&live, &output, Duration::from_secs(60))
        .iter()
        .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(
        records,
        ["record 1", "record 2"],
        "both transactions committed once"
    );
}
