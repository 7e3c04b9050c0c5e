//! The producer against librdkafka's mock cluster: refusals, aborts and
//! waits for what is in flight.

use super::*;

/// An at-least-once producer on `config`'s cluster, and a consumer of
/// group `g` there for its commits.
fn at_least_once(config: &ClientConfig) -> (Transactions, BaseConsumer) {
    let txn = Transactions::new(
        "test",
        config,
        false,
        &TestHooks::default(),
        TopicLimits::default(),
        &AtomicBool::new(false),
    )
    .unwrap();
    let consumer = config.clone().set("group.id", "g").create().unwrap();
    (txn, consumer)
}

/// A broker refusing a record as too large (its `max.message.bytes`
/// was not known) fails the transaction once; the topic's limit then
/// drops below that record, so its replay is dead-lettered instead of
/// being refused again.
#[test]
fn a_record_the_broker_refuses_as_too_large_lowers_its_topic_s_limit() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("out", 1, 1).unwrap();
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", mock.bootstrap_servers());
    let (mut txn, consumer) = at_least_once(&config);
    let payload = vec![b'x'; 5_000];
    let record = || Produce {
        topic: "out",
        partition: Some(0),
        key: Some(b"k"),
        payload: Some(&payload),
        headers: &[],
        timestamp: None,
        tracked: 0,
    };
    assert!(txn.check(&record()).is_ok());

    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    txn.send(record()).unwrap();
    let refused = txn.commit(&consumer, |_| TopicPartitionList::new());
    assert!(
        matches!(refused, Err(CommitError::Aborted(_))),
        "{refused:?}"
    );
    txn.abort().unwrap();

    let Err(Refusal::TooLarge(too_large)) = txn.check(&record()) else {
        panic!("the record is refused as too large");
    };
    assert_eq!(too_large.source, crate::task::limits::LimitSource::Refused);
    assert!(too_large.limit < too_large.size);
    let smaller = vec![b'x'; 4_000];
    assert!(
        txn.check(&Produce {
            payload: Some(&smaller),
            ..record()
        })
        .is_ok()
    );
    // The next transaction goes through.
    txn.send(Produce {
        payload: Some(&smaller),
        ..record()
    })
    .unwrap();
    assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());
}

/// At least once, an abort waits for the records still in flight, so
/// their delivery reports (here a failure) belong to the attempt that
/// sent them, not to the next cycle, which commits.
#[test]
fn an_at_least_once_abort_waits_for_what_is_in_flight() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("out", 1, 1).unwrap();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("message.send.max.retries", "0");
    let (mut txn, consumer) = at_least_once(&config);
    let record = |payload: &'static [u8]| Produce {
        topic: "out",
        partition: Some(0),
        key: Some(b"k"),
        payload: Some(payload),
        headers: &[],
        timestamp: None,
        tracked: 0,
    };
    // Connected, with the partition's leader known.
    txn.send(record(b"warm-up")).unwrap();
    assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());

    // The next produce fails, and its answer takes 500 ms.
    mock.broker_round_trip_time(1, Duration::from_millis(500))
        .unwrap();
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS],
    );
    txn.send(record(b"failed attempt")).unwrap();
    txn.abort().unwrap();

    mock.broker_round_trip_time(1, Duration::ZERO).unwrap();
    txn.send(record(b"next cycle")).unwrap();
    let next = txn.commit(&consumer, |_| TopicPartitionList::new());
    assert!(next.is_ok(), "the next cycle commits: {next:?}");
}

/// A record not delivered ends the wait for the others: the
/// transaction cannot commit, and the commit says so while a record on
/// a slow broker is still in flight (the abort waits for it).
#[test]
fn a_failed_record_ends_the_commit_without_waiting_for_the_others() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let mock = MockCluster::new(2).unwrap();
    mock.create_topic("out", 2, 1).unwrap();
    mock.partition_leader("out", 0, Some(1)).unwrap();
    mock.partition_leader("out", 1, Some(2)).unwrap();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("message.send.max.retries", "0");
    let (mut txn, consumer) = at_least_once(&config);
    let record = |partition: i32| Produce {
        topic: "out",
        partition: Some(partition),
        key: Some(b"k"),
        payload: Some(b"v"),
        headers: &[],
        timestamp: None,
        tracked: 0,
    };
    // Connected to both, with the leaders known.
    txn.send(record(0)).unwrap();
    txn.send(record(1)).unwrap();
    assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());

    // Partition 1's broker answers after 5 s; partition 0's record,
    // sent once partition 1's request is out, is refused.
    mock.broker_round_trip_time(2, Duration::from_secs(5))
        .unwrap();
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    txn.send(record(1)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    txn.send(record(0)).unwrap();
    let failed = txn.commit(&consumer, |_| TopicPartitionList::new());
    assert!(
        matches!(&failed, Err(CommitError::Aborted(m)) if m.contains("not delivered")),
        "{failed:?}"
    );
    assert_eq!(
        txn.producer.in_flight_count(),
        1,
        "the commit gave up with partition 1's record still in flight"
    );
    txn.abort().unwrap();
    assert_eq!(txn.producer.in_flight_count(), 0, "the abort waited for it");
}

/// A record the broker refuses for good (INVALID_RECORD: a keyless
/// record for a compacted topic) fails the transaction once; the same
/// record is then known and refused before it is sent, while another
/// record of the topic goes through.
#[test]
fn a_record_the_broker_refuses_for_good_is_known_when_it_comes_again() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("out", 1, 1).unwrap();
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", mock.bootstrap_servers());
    let (mut txn, consumer) = at_least_once(&config);
    let record = |payload: &'static [u8]| Produce {
        topic: "out",
        partition: Some(0),
        key: None,
        payload: Some(payload),
        headers: &[],
        timestamp: Some(1_700_000_000_000),
        tracked: 0,
    };
    assert!(txn.check(&record(b"bad")).is_ok());
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
    );
    txn.send(record(b"bad")).unwrap();
    let refused = txn.commit(&consumer, |_| TopicPartitionList::new());
    assert!(
        matches!(refused, Err(CommitError::Aborted(_))),
        "{refused:?}"
    );
    txn.abort().unwrap();

    let Err(Refusal::Refused(reason)) = txn.check(&record(b"bad")) else {
        panic!("the record is known as refused");
    };
    assert!(reason.contains("InvalidRecord"), "{reason}");
    assert_eq!(
        Refusal::Refused(reason).code(),
        crate::telemetry::DeadLetterReason::RefusedByBroker
    );
    assert!(txn.check(&record(b"good")).is_ok(), "another record is not");
    txn.send(record(b"good")).unwrap();
    assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());
}
