//! A consumer group's coordinator dies inside a transaction, on a
//! three-node Apache Kafka cluster whose dead node stays down: the offsets
//! the transaction sends (`send_offsets_to_transaction`) go to the group's
//! next coordinator, and the transaction commits; with no next
//! coordinator, the call fails once its timeout has passed, and the
//! transaction aborts. (The vendored librdkafka fix, vendor/README.md:
//! "Offsets sent to a transaction waited for a dead group coordinator".)

mod support;

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaResult;
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

/// A three-node cluster, a group whose offsets one transactional producer
/// has sent in a first, committed transaction (so the producer has the
/// group's coordinator cached), and that coordinator's node, which the
/// transaction coordinator is not on.
struct Scene {
    // Fields drop in order: the producer before the cluster.
    producer: Arc<BaseProducer>,
    kafka: Broker,
    client: ClientConfig,
    input: String,
    output: String,
    group: String,
    group_partition: i32,
    coordinator: i32,
    metadata: Arc<ConsumerGroupMetadata>,
    timeout: Duration,
    /// Three-node clusters one at a time: two of them side by side on a
    /// two-core machine (beside the other test lane) starve a node's
    /// heartbeats until its controller fences it.
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Scene {
    /// The scene on a cluster started with `configs` besides the test
    /// defaults, each call to the producer waiting `timeout` at most.
    fn start(configs: &[&str], timeout: Duration) -> Scene {
        let serial = serial();
        let kafka = Broker::start(BrokerOptions {
            nodes: 3,
            configs: configs.iter().map(|c| c.to_string()).collect(),
            ..BrokerOptions::default()
        });
        let client = kafka.client();
        let input = unique("coordinator-input");
        let output = unique("coordinator-output");
        create_topic_on(&client, &input, 1, &[]);
        create_topic_on(&client, &output, 1, &[]);

        // The coordinator topics exist once something asks for a
        // coordinator.
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
        // management (generation -1), which the group takes while it is
        // empty.
        let consumer: BaseConsumer = client
            .clone()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let metadata = Arc::new(consumer.group_metadata().unwrap());
        let producer: Arc<BaseProducer> = Arc::new(
            client
                .clone()
                .set("transactional.id", &transactional_id)
                .set("reconnect.backoff.max.ms", "1000")
                .create()
                .unwrap(),
        );
        producer.init_transactions(timeout).unwrap();
        let scene = Scene {
            kafka,
            client,
            input,
            output,
            group,
            group_partition,
            coordinator,
            producer,
            metadata,
            timeout,
            _serial: serial,
        };
        let offsets = scene.transaction(1);
        scene
            .producer
            .send_offsets_to_transaction(&offsets, &scene.metadata, timeout)
            .unwrap();
        scene.producer.commit_transaction(timeout).unwrap();
        assert_eq!(
            group_committed_on(&scene.client, &scene.group, &scene.input, 1),
            vec![1]
        );
        scene
    }

    /// Begins transaction `n`, with one record; returns the input offsets
    /// it is to commit.
    fn transaction(&self, n: i64) -> TopicPartitionList {
        self.producer.begin_transaction().unwrap();
        self.producer
            .send(
                BaseRecord::<str, str>::to(&self.output)
                    .key("k")
                    .payload(&format!("record {n}")),
            )
            .unwrap();
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&self.input, 0, Offset::Offset(n))
            .unwrap();
        offsets
    }

    /// Kills the group coordinator's node, which stays down, and waits
    /// until the producer's own metadata leaves it out (which
    /// decommissions the node in librdkafka).
    fn kill_coordinator(&self) {
        self.kafka.node(self.coordinator as u32).stop(true);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let nodes: Vec<i32> = self
                .producer
                .client()
                .fetch_metadata(None, Duration::from_secs(5))
                .map(|m| m.brokers().iter().map(|b| b.id()).collect())
                .unwrap_or_default();
            if !nodes.is_empty() && !nodes.contains(&self.coordinator) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster still lists node {} 60 s after it was killed",
                self.coordinator
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Sends `offsets` to the open transaction on a thread of its own,
    /// not joined (a call that never returns must not hold the test), and
    /// waits twice the call's timeout for its answer, and how long it took.
    fn send_offsets(&self, offsets: TopicPartitionList) -> (KafkaResult<()>, Duration) {
        let started = Instant::now();
        let (sent, answer) = mpsc::channel();
        let calling = Arc::clone(&self.producer);
        let (metadata, timeout) = (Arc::clone(&self.metadata), self.timeout);
        std::thread::spawn(move || {
            let _ = sent.send(calling.send_offsets_to_transaction(&offsets, &metadata, timeout));
        });
        // A call that has not returned by then waits for something that
        // does not come.
        let result = answer.recv_timeout(2 * self.timeout).unwrap_or_else(|_| {
            panic!(
                "send_offsets_to_transaction has not returned {:?} after it was called with a \
                 {:?} timeout: it waits for the dead coordinator, node {}",
                started.elapsed(),
                self.timeout,
                self.coordinator
            )
        });
        let took = started.elapsed();
        eprintln!("send_offsets_to_transaction returned {result:?} after {took:?}");
        (result, took)
    }

    /// A client of the live nodes only: the judges' readers treat an error
    /// reaching the dead one as fatal.
    fn live_client(&self) -> ClientConfig {
        let mut live = ClientConfig::new();
        live.set(
            "bootstrap.servers",
            self.kafka
                .nodes
                .iter()
                .filter(|n| n.id != self.coordinator as u32)
                .map(|n| format!("{}:{}", n.host, n.port))
                .collect::<Vec<_>>()
                .join(","),
        );
        live
    }

    /// The output's committed records.
    fn committed_output(&self) -> Vec<String> {
        read_to_end_on(&self.live_client(), &self.output, Duration::from_secs(60))
            .iter()
            .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
            .collect()
    }
}

/// The producer knows the group's coordinator (a first transaction sent
/// the group's offsets to it) when that node is killed (SIGKILL) and stays
/// down. Once the cluster has fenced it, the producer's next metadata
/// leaves it out, and librdkafka decommissions the node: its broker
/// thread stops connecting, while the coordinator cache still names it.
/// The second transaction's offsets wait for that node: the published
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
    let scene = Scene::start(&[], Duration::from_secs(30));
    scene.kill_coordinator();
    let successor = wait_leader(
        &scene.client,
        "__consumer_offsets",
        scene.group_partition,
        Some(scene.coordinator),
    );
    eprintln!(
        "node {} killed; node {successor} coordinates the group now",
        scene.coordinator
    );

    let offsets = scene.transaction(2);
    let (result, _) = scene.send_offsets(offsets);
    result.expect("the offsets reach the group's new coordinator");
    scene.producer.commit_transaction(scene.timeout).unwrap();

    assert_eq!(
        group_committed_on(&scene.live_client(), &scene.group, &scene.input, 1),
        vec![2],
        "the second transaction's offsets are the group's"
    );
    assert_eq!(
        scene.committed_output(),
        ["record 1", "record 2"],
        "both transactions committed once"
    );
}

/// A scene whose group nobody coordinates: the group offsets topic has a
/// single replica (`offsets.topic.replication.factor=1`), on the killed
/// node, so the group's partition has no leader while that node is down,
/// and each look for the coordinator finds none. The second transaction's
/// offsets are sent, and the call's answer returned with how long it took.
fn without_a_coordinator(timeout: Duration) -> (Scene, KafkaResult<()>, Duration) {
    let scene = Scene::start(&["offsets.topic.replication.factor=1"], timeout);
    scene.kill_coordinator();
    assert_eq!(
        leader(&scene.client, "__consumer_offsets", scene.group_partition),
        None,
        "the group's offsets partition has no other replica to lead it"
    );
    let offsets = scene.transaction(2);
    let (result, took) = scene.send_offsets(offsets);
    (scene, result, took)
}

/// Nothing takes the dead coordinator's place: the patched request fails
/// with `__TIMED_OUT` once its timeout has passed (the published one
/// waited for ever, as above); the call fails, and the transaction aborts
/// at its coordinator, which still answers: nothing of it is committed.
///
/// (Destroying the producer afterwards: the next test.)
#[test]
fn offsets_sent_to_a_transaction_time_out_while_nothing_coordinates_the_group() {
    let timeout = Duration::from_secs(10);
    let (scene, result, took) = without_a_coordinator(timeout);
    let error = result.expect_err("no node coordinates the group");
    assert!(
        took >= timeout - Duration::from_secs(1),
        "the call failed after {took:?}, before its {timeout:?} timeout: {error}"
    );
    // The record's delivery report is served before the abort, which
    // waits for every record in flight.
    scene
        .producer
        .flush(timeout)
        .expect("the record was delivered to the live nodes");
    scene
        .producer
        .abort_transaction(timeout)
        .unwrap_or_else(|e| panic!("the transaction aborts after {error}: {e}"));
    assert_eq!(
        scene.committed_output(),
        ["record 1"],
        "only the first transaction committed"
    );
}

/// Once a coordinator request has failed with `__TIMED_OUT` waiting for
/// a dead coordinator, the producer can still be destroyed. Before the
/// fix, `rd_kafka_destroy` waited for ever for the dead node's broker
/// thread: a `FindCoordinator` whose retries were spent kept its request,
/// and the request its hold on that node (vendor/README.md).
#[test]
fn a_producer_whose_offsets_timed_out_can_be_destroyed() {
    let timeout = Duration::from_secs(10);
    let (scene, result, _) = without_a_coordinator(timeout);
    result.expect_err("no node coordinates the group");
    scene.producer.flush(timeout).unwrap();
    scene.producer.abort_transaction(timeout).unwrap();
    // The two live nodes stay up while the producer is destroyed.
    let Scene {
        producer, kafka, ..
    } = scene;
    let (done, destroyed) = mpsc::channel();
    std::thread::spawn(move || {
        drop(producer);
        let _ = done.send(());
    });
    destroyed
        .recv_timeout(Duration::from_secs(60))
        .expect("the producer is destroyed within 60 s");
    drop(kafka);
}
