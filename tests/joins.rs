//! Joins against Apache Kafka, end to end: orders, keyed by order id,
//! re-keyed by customer (`key_by`, through the repartition topic) and
//! joined with a customers table (`kind: table`), exactly once under
//! read_committed — across a kill -9 in the middle of a batch and a restart
//! whose state directory was wiped, so the table comes back from its
//! changelog. A tombstone deletes a customer; orders without a customer
//! are dead-lettered, each exactly once.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const PARTITIONS: i32 = 2;
const CUSTOMERS: u64 = 40;
/// Deleted by a tombstone after the first profiles, back in the second.
const DELETED: u64 = 39;

fn topology(dir: &Path, app: &str, orders: &str, customers: &str) -> PathBuf {
    let path = dir.join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 100ms }}
sources:
  orders: {{ topic: {orders} }}
  customers: {{ topic: {customers}, kind: table }}
nodes:
  enrich:
    type: join
    input: [orders, customers]
    key_by: /customer_id
    how: left
    fields:
      order_id: /orders/order_id
      customer: /customers/name
      version: /customers/version
sinks:
  enriched: {{ topic: {app}-enriched, input: enrich, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

fn customer(n: u64) -> String {
    format!("c-{n}")
}

/// Every customer's profile at `version`; the end offsets of the topic.
fn profiles(producer: &TestProducer, topic: &str, version: u64) -> Vec<i64> {
    for n in 0..CUSTOMERS {
        let value = json!({"name": format!("customer {n}"), "version": version});
        producer.send_json(topic, &customer(n), &value);
    }
    producer.flush();
    producer.ends(topic, PARTITIONS)
}

/// Orders `from..to`, keyed by order id; every 101st has no customer.
fn orders(producer: &TestProducer, topic: &str, from: u64, to: u64) -> Vec<i64> {
    for i in from..to {
        let value = if i % 101 == 100 {
            json!({"order_id": i})
        } else {
            json!({"order_id": i, "customer_id": customer(i % CUSTOMERS)})
        };
        producer.send_json(topic, &format!("o-{i}"), &value);
    }
    producer.flush();
    producer.ends(topic, PARTITIONS)
}

#[test]
fn a_stream_table_join_is_exact_across_a_kill_and_a_wiped_state() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-joins");
    let orders_topic = unique("orders");
    let customers_topic = unique("customers");
    create_topic(&orders_topic, PARTITIONS);
    create_topic_with(
        &customers_topic,
        PARTITIONS,
        &[("cleanup.policy", "compact")],
    );
    let config = AppConfig {
        topology: topology(dir.path(), &app, &orders_topic, &customers_topic),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let producer = TestProducer::new();

    // Version 1 of every profile, then one customer deleted; the table is
    // in place (its offsets committed) before any order is written, so
    // what each order joins is known.
    profiles(&producer, &customers_topic, 1);
    producer.send_maybe(&customers_topic, Some(customer(DELETED).as_bytes()), None);
    producer.flush();
    let table_end = producer.ends(&customers_topic, PARTITIONS);
    let first = App::start(&config, dir.path());
    wait_committed_to(
        &first,
        &app,
        &customers_topic,
        &table_end,
        Duration::from_secs(120),
    );

    // 1,000 orders, then 2,000 more, killed -9 while it works through them.
    let end = orders(&producer, &orders_topic, 0, 1_000);
    wait_committed_to(&first, &app, &orders_topic, &end, Duration::from_secs(120));
    // Metrics are published every few seconds: wait for the first batch.
    let before = first.wait_metric(
        "streamfold_node_records_out_total",
        Duration::from_secs(60),
        |n| n >= 991.0,
    );
    orders(&producer, &orders_topic, 1_000, 3_000);
    first.wait_metric(
        "streamfold_node_records_out_total",
        Duration::from_secs(60),
        |n| n > before + 500.0,
    );
    first.kill();
    std::fs::remove_dir_all(&config.state_dir).unwrap();

    // Restored from the changelog, the table joins the rest of the batch.
    let second = App::start(&config, dir.path());
    let end = producer.ends(&orders_topic, PARTITIONS);
    wait_committed_to(&second, &app, &orders_topic, &end, Duration::from_secs(120));
    // Version 2 of every profile (the deleted customer back), committed,
    // then 1,000 more orders.
    let table_end = profiles(&producer, &customers_topic, 2);
    wait_committed_to(
        &second,
        &app,
        &customers_topic,
        &table_end,
        Duration::from_secs(120),
    );
    let end = orders(&producer, &orders_topic, 3_000, 4_000);
    wait_committed_to(&second, &app, &orders_topic, &end, Duration::from_secs(120));
    let log = second.stop();
    assert!(log.contains("Restore finished"), "no restore in:\n{log}");

    // What each order must have joined: nothing for the deleted customer
    // before version 2.
    let mut expected: BTreeMap<u64, Value> = BTreeMap::new();
    let mut without_customer = 0;
    for i in 0..4_000u64 {
        if i % 101 == 100 {
            without_customer += 1;
            continue;
        }
        let n = i % CUSTOMERS;
        let version = if i >= 3_000 { 2 } else { 1 };
        let row = if n == DELETED && version == 1 {
            json!({"order_id": i, "customer": null, "version": null})
        } else {
            json!({"order_id": i, "customer": format!("customer {n}"), "version": version})
        };
        expected.insert(i, row);
    }
    let mut joined: BTreeMap<u64, Value> = BTreeMap::new();
    for record in read_to_end(&format!("{app}-enriched"), Duration::from_secs(60)) {
        let value = record.json();
        let id = value["order_id"].as_u64().unwrap();
        assert_eq!(
            record.key.as_deref(),
            Some(customer(id % CUSTOMERS).as_str()),
            "keyed by customer"
        );
        let again = joined.insert(id, value);
        assert!(again.is_none(), "order {id} joined twice");
    }
    assert_eq!(joined.len(), expected.len(), "orders joined");
    for (id, row) in &expected {
        assert_eq!(joined.get(id), Some(row), "order {id}");
    }

    // Each order without a customer dead-lettered once, with the reason.
    let letters = read_to_end(&format!("{app}-dlq"), Duration::from_secs(60));
    let mut positions: Vec<(String, String)> = letters
        .iter()
        .map(|l| {
            assert_eq!(
                l.header("streamfold.dlq.reason_code"),
                Some("missing_key_field")
            );
            (
                l.header("streamfold.dlq.partition").unwrap().to_string(),
                l.header("streamfold.dlq.offset").unwrap().to_string(),
            )
        })
        .collect();
    positions.sort();
    positions.dedup();
    assert_eq!(letters.len(), without_customer);
    assert_eq!(positions.len(), without_customer, "each letter once");
}

fn streams_topology(dir: &Path, app: &str, clicks: &str, views: &str) -> PathBuf {
    let path = dir.join("streams.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 100ms }}
sources:
  clicks: {{ topic: {clicks}, timestamp: /at }}
  views: {{ topic: {views}, timestamp: /at }}
nodes:
  paired:
    type: join
    input: [clicks, views]
    how: outer
    window: 2s
    grace: 1h
    value: '{{click: .clicks.id, view: .views.id}}'
sinks:
  pairs: {{ topic: {app}-pairs, input: paired, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

const USERS: u64 = 300;
const AT: i64 = 1_735_689_600_000;

/// Click `i` (id `c<i>`): its user and time, spread over the first minute.
fn click(i: u64) -> (String, i64) {
    (
        format!("u{}", i % USERS),
        AT + ((i * 7_919) % 60_000) as i64,
    )
}

/// View `i` (id `v<i>`), spread differently: about half of the records of
/// either side have a partner 2 s or less apart.
fn view(i: u64) -> (String, i64) {
    (
        format!("u{}", (i * 7) % USERS),
        AT + ((i * 6_151 + 31) % 60_000) as i64,
    )
}

/// Clicks and views `from..to`, in turn; the end offsets of both topics.
fn clicks_and_views(
    producer: &TestProducer,
    clicks: &str,
    views: &str,
    from: u64,
    to: u64,
) -> (Vec<i64>, Vec<i64>) {
    for i in from..to {
        let (user, at) = click(i);
        producer.send_json(clicks, &user, &json!({"id": format!("c{i}"), "at": at}));
        let (user, at) = view(i);
        producer.send_json(views, &user, &json!({"id": format!("v{i}"), "at": at}));
    }
    producer.flush();
    (
        producer.ends(clicks, PARTITIONS),
        producer.ends(views, PARTITIONS),
    )
}

/// The outer join of clicks and views `0..n`, the slow way: every pair of
/// a user's records at most 2 s apart, then each record that has none.
fn outer_join(n: u64) -> Vec<(Option<String>, Option<String>)> {
    let clicks: Vec<(String, i64, String)> = (0..n)
        .map(|i| {
            let (user, at) = click(i);
            (user, at, format!("c{i}"))
        })
        .collect();
    let views: Vec<(String, i64, String)> = (0..n)
        .map(|i| {
            let (user, at) = view(i);
            (user, at, format!("v{i}"))
        })
        .collect();
    let near = |a: &(String, i64, String), b: &(String, i64, String)| {
        a.0 == b.0 && (a.1 - b.1).abs() <= 2_000
    };
    let mut out = Vec::new();
    for c in &clicks {
        for v in &views {
            if near(c, v) {
                out.push((Some(c.2.clone()), Some(v.2.clone())));
            }
        }
        if !views.iter().any(|v| near(c, v)) {
            out.push((Some(c.2.clone()), None));
        }
    }
    for v in &views {
        if !clicks.iter().any(|c| near(c, v)) {
            out.push((None, Some(v.2.clone())));
        }
    }
    out.sort();
    out
}

#[test]
fn a_stream_stream_outer_join_is_exact_across_a_kill_and_a_wiped_state() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-stream-join");
    let clicks = unique("clicks");
    let views = unique("views");
    create_topic(&clicks, PARTITIONS);
    create_topic(&views, PARTITIONS);
    let config = AppConfig {
        topology: streams_topology(dir.path(), &app, &clicks, &views),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let producer = TestProducer::new();

    // 1,500 of each, then 1,500 more, killed -9 while it works through
    // them: the buffered records (and their timers) come back from the
    // changelogs after the state is wiped.
    let (clicks_end, views_end) = clicks_and_views(&producer, &clicks, &views, 0, 1_500);
    let first = App::start(&config, dir.path());
    wait_committed_to(&first, &app, &clicks, &clicks_end, Duration::from_secs(120));
    wait_committed_to(&first, &app, &views, &views_end, Duration::from_secs(120));
    let before = first.wait_metric(
        "streamfold_node_records_in_total",
        Duration::from_secs(60),
        |n| n >= 3_000.0,
    );
    clicks_and_views(&producer, &clicks, &views, 1_500, 3_000);
    first.wait_metric(
        "streamfold_node_records_in_total",
        Duration::from_secs(60),
        |n| n > before + 500.0,
    );
    first.kill();
    std::fs::remove_dir_all(&config.state_dir).unwrap();

    // Once every click and view is in (the two topics are read side by
    // side, not in time order: a record far ahead on one would make the
    // other's unread records late), a click two hours later on every
    // partition's users moves stream time past every window, and the
    // records that never matched are emitted.
    let second = App::start(&config, dir.path());
    let clicks_end = producer.ends(&clicks, PARTITIONS);
    let views_end = producer.ends(&views, PARTITIONS);
    wait_committed_to(
        &second,
        &app,
        &clicks,
        &clicks_end,
        Duration::from_secs(120),
    );
    wait_committed_to(&second, &app, &views, &views_end, Duration::from_secs(120));
    for user in 0..USERS {
        let flush = json!({"id": "flush", "at": AT + 7_200_000});
        producer.send_json(&clicks, &format!("u{user}"), &flush);
    }
    producer.flush();
    let clicks_end = producer.ends(&clicks, PARTITIONS);
    let views_end = producer.ends(&views, PARTITIONS);
    wait_committed_to(
        &second,
        &app,
        &clicks,
        &clicks_end,
        Duration::from_secs(120),
    );
    wait_committed_to(&second, &app, &views, &views_end, Duration::from_secs(120));
    // Every click and view leaves its buffer (timers fire in rounds, after
    // the flush's offsets may have committed).
    second.wait_metric(
        "streamfold_join_expired_records_total",
        Duration::from_secs(60),
        |n| n >= 6_000.0,
    );
    second.wait_metric(
        "streamfold_join_late_records_total",
        Duration::from_secs(10),
        |n| n == 0.0,
    );
    let log = second.stop();
    assert!(log.contains("Restore finished"), "no restore in:\n{log}");

    let mut pairs: Vec<(Option<String>, Option<String>)> =
        read_to_end(&format!("{app}-pairs"), Duration::from_secs(60))
            .iter()
            .map(|r| {
                let value = r.json();
                let id = |v: &Value| v.as_str().map(String::from);
                (id(&value["click"]), id(&value["view"]))
            })
            .filter(|(click, _)| click.as_deref() != Some("flush"))
            .collect();
    pairs.sort();
    let expected = outer_join(3_000);
    assert!(expected.iter().any(|(c, v)| c.is_some() && v.is_some()));
    assert!(expected.iter().any(|(c, _)| c.is_none()), "a lonely view");
    assert!(expected.iter().any(|(_, v)| v.is_none()), "a lonely click");
    assert_eq!(pairs.len(), expected.len(), "pairs emitted");
    assert_eq!(pairs, expected);
    assert!(read_to_end(&format!("{app}-dlq"), Duration::from_secs(30)).is_empty());
}

fn tables_topology(dir: &Path, app: &str, accounts: &str, limits: &str) -> PathBuf {
    let path = dir.join("tables.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 100ms }}
sources:
  accounts: {{ topic: {accounts}, kind: table }}
  limits: {{ topic: {limits}, kind: table }}
nodes:
  joined:
    type: join
    input: [accounts, limits]
    how: outer
    fields:
      account: /accounts/v
      limit: /limits/v
sinks:
  rows: {{ topic: {app}-rows, input: joined, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

const ACCOUNTS: u64 = 50;

/// Updates `from..to` of both tables: update `i` writes version `i` of key
/// `a<i % ACCOUNTS>` to one table or the other, every 7th a tombstone.
fn table_updates(producer: &TestProducer, accounts: &str, limits: &str, from: u64, to: u64) {
    for i in from..to {
        let topic = if (i * 31) % 3 == 0 { limits } else { accounts };
        let key = format!("a{}", i % ACCOUNTS);
        let value = (i % 7 != 6).then(|| json!({"v": i}).to_string());
        producer.send_maybe(
            topic,
            Some(key.as_bytes()),
            value.as_deref().map(str::as_bytes),
        );
    }
    producer.flush();
}

/// A table's updates per key, in offset order (`None`: a tombstone).
fn updates_by_key(topic: &str) -> BTreeMap<String, Vec<Option<u64>>> {
    let mut out: BTreeMap<String, Vec<(i64, Option<u64>)>> = BTreeMap::new();
    for record in read_to_end(topic, Duration::from_secs(60)) {
        let value = record
            .payload
            .as_ref()
            .map(|_| record.json()["v"].as_u64().unwrap());
        out.entry(record.key.clone().unwrap())
            .or_default()
            .push((record.offset, value));
    }
    out.into_iter()
        .map(|(k, mut v)| {
            v.sort();
            (k, v.into_iter().map(|(_, v)| v).collect())
        })
        .collect()
}

/// One output row of the table join: `None` a tombstone, else
/// `(account, limit)`.
type Row = Option<(Option<u64>, Option<u64>)>;

/// Whether `rows` (one key's outputs, in order) is what an outer join
/// emits for some interleaving of the key's account and limit updates,
/// each applied once in order.
fn explains(accounts: &[Option<u64>], limits: &[Option<u64>], rows: &[Row]) -> bool {
    // Reachable (accounts applied, limits applied, rows matched).
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![(0usize, 0usize, 0usize)];
    let latest = |updates: &[Option<u64>], n: usize| n.checked_sub(1).and_then(|i| updates[i]);
    while let Some((i, j, o)) = stack.pop() {
        if !seen.insert((i, j, o)) {
            continue;
        }
        if i == accounts.len() && j == limits.len() && o == rows.len() {
            return true;
        }
        for (ni, nj) in [(i + 1, j), (i, j + 1)] {
            if ni > accounts.len() || nj > limits.len() {
                continue;
            }
            let before = (latest(accounts, i), latest(limits, j));
            let after = (latest(accounts, ni), latest(limits, nj));
            let row = if after.0.is_some() || after.1.is_some() {
                Some(Some(after))
            } else if before.0.is_some() || before.1.is_some() {
                Some(None)
            } else {
                None
            };
            match row {
                None => stack.push((ni, nj, o)),
                Some(row) if rows.get(o) == Some(&row) => stack.push((ni, nj, o + 1)),
                Some(_) => {}
            }
        }
    }
    false
}

#[test]
fn a_table_table_outer_join_emits_one_change_per_update_across_a_kill_and_a_wiped_state() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-table-join");
    let accounts = unique("accounts");
    let limits = unique("limits");
    create_topic(&accounts, PARTITIONS);
    create_topic(&limits, PARTITIONS);
    let config = AppConfig {
        topology: tables_topology(dir.path(), &app, &accounts, &limits),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let producer = TestProducer::new();

    table_updates(&producer, &accounts, &limits, 0, 1_500);
    let first = App::start(&config, dir.path());
    wait_committed_to(
        &first,
        &app,
        &accounts,
        &producer.ends(&accounts, PARTITIONS),
        Duration::from_secs(120),
    );
    wait_committed_to(
        &first,
        &app,
        &limits,
        &producer.ends(&limits, PARTITIONS),
        Duration::from_secs(120),
    );
    let before = first.wait_metric(
        "streamfold_node_records_in_total",
        Duration::from_secs(60),
        |n| n >= 1_500.0,
    );
    table_updates(&producer, &accounts, &limits, 1_500, 10_000);
    first.wait_metric(
        "streamfold_node_records_in_total",
        Duration::from_secs(60),
        |n| n > before + 300.0,
    );
    first.kill();
    std::fs::remove_dir_all(&config.state_dir).unwrap();

    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == f64::from(PARTITIONS),
    );
    wait_committed_to(
        &second,
        &app,
        &accounts,
        &producer.ends(&accounts, PARTITIONS),
        Duration::from_secs(120),
    );
    wait_committed_to(
        &second,
        &app,
        &limits,
        &producer.ends(&limits, PARTITIONS),
        Duration::from_secs(120),
    );
    let log = second.stop();
    assert!(log.contains("Restore finished"), "no restore in:\n{log}");

    let account_updates = updates_by_key(&accounts);
    let limit_updates = updates_by_key(&limits);
    let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for record in read_to_end(&format!("{app}-rows"), Duration::from_secs(60)) {
        let row = record.payload.as_ref().map(|_| {
            let value = record.json();
            (value["account"].as_u64(), value["limit"].as_u64())
        });
        rows.entry(record.key.clone().unwrap())
            .or_default()
            .push(row);
    }
    let none = Vec::new();
    for n in 0..ACCOUNTS {
        let key = format!("a{n}");
        let a = account_updates.get(&key).unwrap_or(&none);
        let l = limit_updates.get(&key).unwrap_or(&none);
        let r = rows.get(&key).map_or(&[][..], Vec::as_slice);
        assert!(
            !r.is_empty() && explains(a, l, r),
            "the rows of {key} are not one outer join of its updates, each applied once:\naccounts {a:?}\nlimits {l:?}\nrows {r:?}"
        );
    }
    assert!(read_to_end(&format!("{app}-dlq"), Duration::from_secs(30)).is_empty());
}

/// The instance read all `records` of its global table before the group
/// gave it tasks (the orders' outputs cannot show it: joining the group
/// takes longer than reading a small table).
fn restored_before_assigned(log: &str, records: u64) {
    let restored = log.lines().position(|l| {
        l.contains("Global table restored.") && l.contains(&format!("read={records}"))
    });
    let assigned = log.lines().position(|l| l.contains("Tasks assigned."));
    assert!(
        restored.is_some() && assigned.is_some() && restored < assigned,
        "the global table's {records} records were not read before tasks were assigned:\n{log}"
    );
}

fn global_topology(dir: &Path, app: &str, orders: &str, customers: &str) -> PathBuf {
    let path = dir.join("global.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: 100ms }}
sources:
  orders: {{ topic: {orders} }}
  customers: {{ topic: {customers}, kind: global_table }}
nodes:
  enrich:
    type: join
    input: [orders, customers]
    table_key: /customer_id
    how: left
    fields:
      order_id: /orders/order_id
      customer: /customers/name
      version: /customers/version
sinks:
  enriched: {{ topic: {app}-enriched, input: enrich, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

/// Customers on a topic of its own partition count, read whole by the
/// instance (`kind: global_table`), joined by orders that name their
/// customer in a field and keep their own key: no repartition, no
/// co-partitioning. The table is restored from its topic before any order
/// is processed — at the first start, and after a kill -9 with the state
/// wiped — and follows updates while the instance runs.
#[test]
fn a_global_table_join_is_exact_across_a_kill_and_a_wiped_state() {
    const TABLE_PARTITIONS: i32 = 3;
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-global");
    let orders_topic = unique("orders");
    let customers_topic = unique("customers");
    create_topic(&orders_topic, PARTITIONS);
    create_topic_with(
        &customers_topic,
        TABLE_PARTITIONS,
        &[("cleanup.policy", "compact")],
    );
    let config = AppConfig {
        topology: global_topology(dir.path(), &app, &orders_topic, &customers_topic),
        instance: "a".into(),
        state_dir: dir.path().join("state"),
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    };
    let producer = TestProducer::new();
    let metric = "streamfold_global_table_records_total";

    // Version 1 of every profile, one deleted, and a value that is not
    // JSON, which the table cannot hold (skipped and counted): 42 records.
    profiles(&producer, &customers_topic, 1);
    producer.send_maybe(&customers_topic, Some(customer(DELETED).as_bytes()), None);
    producer.send_maybe(&customers_topic, Some(b"c-bad"), Some(b"{not json"));
    producer.flush();
    let table_records = 42.0;

    // Orders written before the first start: the table is restored before
    // the first of them is processed, or some would join `null`.
    let end = orders(&producer, &orders_topic, 0, 1_000);
    let first = App::start(&config, dir.path());
    wait_committed_to(&first, &app, &orders_topic, &end, Duration::from_secs(120));
    assert_eq!(first.metric(metric), table_records);
    assert_eq!(
        first.metric("streamfold_global_table_skipped_records_total"),
        1.0
    );
    let before = first.wait_metric(
        "streamfold_node_records_out_total",
        Duration::from_secs(60),
        |n| n >= 991.0,
    );
    orders(&producer, &orders_topic, 1_000, 3_000);
    first.wait_metric(
        "streamfold_node_records_out_total",
        Duration::from_secs(60),
        |n| n > before + 500.0,
    );
    restored_before_assigned(&first.log_text(), 42);
    first.kill();
    std::fs::remove_dir_all(&config.state_dir).unwrap();

    // The wiped table is read again from its topic before the rest of the
    // batch is processed.
    let second = App::start(&config, dir.path());
    let end = producer.ends(&orders_topic, PARTITIONS);
    // Tasks come once the table is read: only then do its updates begin.
    second.wait_log_lines("Tasks assigned.", 1, Duration::from_secs(60));
    wait_committed_to(&second, &app, &orders_topic, &end, Duration::from_secs(120));
    // Version 2 of every profile (the deleted customer back), applied
    // while the instance runs, then 1,000 more orders.
    profiles(&producer, &customers_topic, 2);
    second.wait_metric(metric, Duration::from_secs(60), |n| {
        n >= table_records + CUSTOMERS as f64
    });
    let end = orders(&producer, &orders_topic, 3_000, 4_000);
    wait_committed_to(&second, &app, &orders_topic, &end, Duration::from_secs(120));
    let log = second.stop();
    restored_before_assigned(&log, 42);

    let mut expected: BTreeMap<u64, Value> = BTreeMap::new();
    let mut without_customer = 0;
    for i in 0..4_000u64 {
        if i % 101 == 100 {
            without_customer += 1;
            continue;
        }
        let n = i % CUSTOMERS;
        let version = if i >= 3_000 { 2 } else { 1 };
        let row = if n == DELETED && version == 1 {
            json!({"order_id": i, "customer": null, "version": null})
        } else {
            json!({"order_id": i, "customer": format!("customer {n}"), "version": version})
        };
        expected.insert(i, row);
    }
    let mut joined: BTreeMap<u64, Value> = BTreeMap::new();
    for record in read_to_end(&format!("{app}-enriched"), Duration::from_secs(60)) {
        let value = record.json();
        let id = value["order_id"].as_u64().unwrap();
        let key = format!("o-{id}");
        assert_eq!(
            record.key.as_deref(),
            Some(key.as_str()),
            "the order's own key"
        );
        let again = joined.insert(id, value);
        assert!(again.is_none(), "order {id} joined twice");
    }
    assert_eq!(joined.len(), expected.len(), "orders joined");
    for (id, row) in &expected {
        assert_eq!(joined.get(id), Some(row), "order {id}");
    }
    let letters = read_to_end(&format!("{app}-dlq"), Duration::from_secs(60));
    let mut positions: Vec<(String, String)> = letters
        .iter()
        .map(|l| {
            assert_eq!(l.header("streamfold.dlq.reason_code"), Some("rejected"));
            (
                l.header("streamfold.dlq.partition").unwrap().to_string(),
                l.header("streamfold.dlq.offset").unwrap().to_string(),
            )
        })
        .collect();
    positions.sort();
    positions.dedup();
    assert_eq!(letters.len(), without_customer);
    assert_eq!(positions.len(), without_customer, "each letter once");
}
