//! Topics, groups and records as an operator manages them: create, delete,
//! truncate.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::broker::{broker, plain_client};

pub fn create_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[]);
}

/// Creates `name` with explicit topic configs (`cleanup.policy`...).
pub fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    create_topic_on(&plain_client(), name, partitions, configs);
}

/// [`create_topic_with`] through a client with `client`'s settings.
pub fn create_topic_on(
    client: &ClientConfig,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = client.create().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = runtime
        .block_on(admin.create_topics(
            &[configs.iter().fold(
                NewTopic::new(name, partitions, TopicReplication::Fixed(-1)),
                |topic, (k, v)| topic.set(k, v),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .unwrap();
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((n, code)) => panic!("cannot create {n}: {code}"),
        }
    }
}

/// An admin client of the test broker, with a runtime to wait on its
/// requests and options giving each 10 s.
pub struct Admin {
    pub client: AdminClient<DefaultClientContext>,
    pub runtime: tokio::runtime::Runtime,
    pub options: AdminOptions,
}

pub fn admin() -> Admin {
    Admin {
        client: plain_client().create().unwrap(),
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        options: AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    }
}

/// Deletes a consumer group and its committed offsets, as an operator
/// would (or as `offsets.retention.minutes` does for an idle group).
pub fn delete_group(group: &str) {
    let admin = admin();
    let results = admin
        .runtime
        .block_on(admin.client.delete_groups(&[group], &admin.options))
        .unwrap();
    for r in results {
        if let Err((n, code)) = r {
            panic!("cannot delete group {n}: {code}");
        }
    }
}

/// The high watermark of one partition.
pub fn partition_end(topic: &str, partition: i32) -> i64 {
    let consumer: BaseConsumer = plain_client().create().unwrap();
    consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .unwrap()
        .1
}

/// Deletes the records of `topic`'s partitions below `before[p]`
/// (DeleteRecords), as an operator or retention would.
pub fn delete_records(topic: &str, before: &[i64]) {
    let admin = admin();
    let mut list = TopicPartitionList::new();
    for (p, offset) in before.iter().enumerate() {
        list.add_partition_offset(topic, p as i32, Offset::Offset(*offset))
            .unwrap();
    }
    let result = admin
        .runtime
        .block_on(admin.client.delete_records(&list, &admin.options))
        .unwrap();
    for element in result.elements() {
        if let Err(e) = element.error() {
            panic!("cannot delete records of {topic}: {e}");
        }
    }
    let consumer: BaseConsumer = plain_client().create().unwrap();
    for (p, offset) in before.iter().enumerate() {
        let (low, _) = consumer
            .fetch_watermarks(topic, p as i32, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            low, *offset,
            "{topic} partition {p} starts where it was truncated"
        );
    }
}

/// Sets topic configs of `topic` (AlterConfigs: the ones not given go
/// back to their defaults).
pub fn alter_topic_config(topic: &str, configs: &[(&str, &str)]) {
    use rdkafka::admin::{AlterConfig, ResourceSpecifier};
    let admin = admin();
    let alter = configs.iter().fold(
        AlterConfig::new(ResourceSpecifier::Topic(topic)),
        |alter, (k, v)| alter.set(k, v),
    );
    let results = admin
        .runtime
        .block_on(admin.client.alter_configs(&[alter], &admin.options))
        .unwrap();
    for r in results {
        if let Err((resource, code)) = r {
            panic!("cannot alter {resource:?}: {code}");
        }
    }
}

/// Deletes `topic` and waits until the broker no longer lists it.
pub fn delete_topic(name: &str) {
    let admin = admin();
    let results = admin
        .runtime
        .block_on(admin.client.delete_topics(&[name], &admin.options))
        .unwrap();
    for r in results {
        if let Err((n, code)) = r {
            panic!("cannot delete {n}: {code}");
        }
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .map(|m| m.topics().iter().any(|t| t.name() == name))
            .unwrap_or(true);
        if !listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} still exists after deletion"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
