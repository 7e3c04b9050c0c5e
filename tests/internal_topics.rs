//! `kafka.internal_topics` against Apache Kafka: the topics `run` creates
//! carry the topology's `min.insync.replicas` and replication factor, and a
//! replication factor the cluster cannot give stops `run` with the
//! broker's reason and the configuration exit status.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rdkafka::admin::{ConfigSource, ResourceSpecifier};
use support::*;

fn write_topology(dir: &Path, app: &str, source: &str, internal_topics: &str) -> PathBuf {
    let path = dir.join(format!("{app}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka:
  bootstrap_servers: 'unused:9092'
  internal_topics: {internal_topics}
sources:
  events: {{ topic: {source}, format: json }}
nodes:
  per_key:
    type: fold
    input: events
    fields: {{ n: {{ rule: count }} }}
    quiet_for: 1m
sinks:
  out: {{ topic: {app}-out, input: per_key, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

fn config(topology: PathBuf, dir: &Path) -> AppConfig {
    AppConfig {
        topology,
        instance: "a".into(),
        state_dir: dir.join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    }
}

/// `min.insync.replicas` of `topic` and whether the topic sets it itself
/// (rather than inheriting the broker's).
fn min_insync(topic: &str) -> (String, bool) {
    let admin = admin();
    let results = admin
        .runtime
        .block_on(
            admin
                .client
                .describe_configs(&[ResourceSpecifier::Topic(topic)], &admin.options),
        )
        .unwrap();
    let resource = results.into_iter().next().unwrap().unwrap();
    let entry = resource
        .entries
        .into_iter()
        .find(|e| e.name == "min.insync.replicas")
        .unwrap();
    (
        entry.value.unwrap_or_default(),
        entry.source == ConfigSource::DynamicTopic,
    )
}

#[test]
fn created_topics_carry_the_topology_s_min_insync_replicas() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-isr");
    let source = unique("events");
    create_topic(&source, 2);
    let path = write_topology(
        dir.path(),
        &app,
        &source,
        "{ replication_factor: 1, min_insync_replicas: 1 }",
    );
    let run = App::start(&config(path, dir.path()), dir.path());
    run.wait_log_lines("Task running.", 2, Duration::from_secs(120));
    run.stop();
    for topic in [
        format!("{app}-per_key-open-changelog"),
        format!("{app}-dlq"),
        format!("{app}-out"),
    ] {
        assert_eq!(min_insync(&topic), ("1".to_string(), true), "{topic}");
    }
    // Without the setting, a created topic takes the broker's.
    let dir = temp_dir();
    let app = unique("sf-isr");
    let path = write_topology(dir.path(), &app, &source, "{}");
    let run = App::start(&config(path, dir.path()), dir.path());
    run.wait_log_lines("Task running.", 2, Duration::from_secs(120));
    run.stop();
    let (_, own) = min_insync(&format!("{app}-per_key-open-changelog"));
    assert!(!own, "the broker's default");
}

#[test]
fn a_replication_factor_the_cluster_cannot_give_stops_run_with_the_broker_s_reason() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-rf");
    let source = unique("events");
    create_topic(&source, 1);
    // The test cluster has one broker.
    let path = write_topology(dir.path(), &app, &source, "{ replication_factor: 3 }");
    let run = App::start(&config(path, dir.path()), dir.path());
    let (status, log) = run.wait_exit(Duration::from_secs(120));
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains(&format!(
            "cannot create topic `{app}-per_key-open-changelog`"
        )),
        "{log}"
    );
}
