//! `streamfold check --cluster` against Apache Kafka: what `run` would
//! trip on in the cluster is found before it runs.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;

fn write_topology(dir: &Path, app: &str, first: &str, second: &str) -> PathBuf {
    let path = dir.join(format!("{app}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: '{bootstrap}' }}
sources:
  orders: {{ topic: {first} }}
  payments: {{ topic: {second} }}
nodes:
  per_key:
    type: fold
    input: orders
    fields: {{ n: {{ rule: count }} }}
    quiet_for: 1m
  paid:
    type: filter
    input: payments
    condition: '.paid'
sinks:
  out: {{ topic: {app}-out, input: per_key, create: true }}
  paid_out: {{ topic: {app}-paid, input: paid, create: true }}
",
            bootstrap = broker().bootstrap
        ),
    )
    .unwrap();
    path
}

fn check(path: &Path, args: &[&str]) -> Output {
    Command::new(streamfold_binary())
        .arg("check")
        .arg(path)
        .arg("--cluster")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn list_topics() -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = plain_client().create().unwrap();
    let metadata = consumer
        .fetch_metadata(None, std::time::Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_cluster_finds_missing_and_unco_partitioned_sources() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-check");
    let (orders, payments) = (unique("orders"), unique("payments"));
    create_topic(&orders, 3);
    let path = write_topology(dir.path(), &app, &orders, &payments);

    let missing = check(&path, &[]);
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing.stderr));
    assert!(
        text(&missing.stderr).contains(&format!(
            "cluster: source `payments` reads topic `{payments}`, which does not exist"
        )),
        "{}",
        text(&missing.stderr)
    );
    // Checking did not create it.
    assert!(!list_topics().contains(&payments));

    create_topic(&payments, 2);
    let mismatched = check(&path, &[]);
    assert_eq!(mismatched.status.code(), Some(3));
    let stderr = text(&mismatched.stderr);
    assert!(
        stderr.contains("source topics must have the same number of partitions")
            && stderr.contains(&format!("`{orders}` has 3"))
            && stderr.contains(&format!("`{payments}` has 2")),
        "{stderr}"
    );

    let (first, second) = (unique("orders"), unique("payments"));
    create_topic(&first, 2);
    create_topic(&second, 2);
    let path = write_topology(dir.path(), &app, &first, &second);
    let fits = check(&path, &[]);
    assert!(fits.status.success(), "{}", text(&fits.stderr));
    assert!(
        text(&fits.stdout).contains("cluster: ok (2 partitions, 0 of 3 internal topics exist)"),
        "{}",
        text(&fits.stdout)
    );
    // An internal topic left over with another partition count.
    create_topic(&format!("{app}-per_key-open-changelog"), 3);
    let leftover = check(&path, &[]);
    assert_eq!(leftover.status.code(), Some(3));
    assert!(
        text(&leftover.stderr).contains("has 3 partitions but the sources have 2"),
        "{}",
        text(&leftover.stderr)
    );
}

#[test]
fn check_cluster_against_an_unreachable_broker_exits_4() {
    let dir = temp_dir();
    let path = write_topology(dir.path(), "sf-nowhere", "a", "b");
    let closed = format!("127.0.0.1:{}", free_port());
    let output = check(&path, &["--bootstrap-servers", &closed]);
    assert_eq!(output.status.code(), Some(4), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(&format!("cannot reach Kafka at {closed}")),
        "{}",
        text(&output.stderr)
    );
}
