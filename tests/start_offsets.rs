//! Where a task starts reading its partitions, on a real broker.
//!
//! - With `offset_reset: latest` and nothing committed: at the partitions'
//!   end as the task started, and there again when its first transaction
//!   aborts, not at the end as it is by then; a repartition topic, which
//!   holds what the application itself wrote, still from its beginning.
//! - A seek to a task's start position is not undone by a late answer to
//!   an offset query made before it (the vendored librdkafka fix).
//! - Committed offsets that a previous owner's open transaction withholds:
//!   the tasks concerned wait for the transaction without holding up the
//!   others, and start from what it commits.
//!
//! The fixture (names, events, the exact folds) is `social_metrics`.

mod social_metrics;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;
use social_metrics::*;
use support::*;

/// `offset_reset: latest` on a group without committed offsets: what the
/// source held before the application started is not processed, and
/// everything written once its tasks run is, once.
#[test]
fn offset_reset_latest_skips_what_was_there_and_processes_all_that_comes_after() {
    latest_from_the_start(None);
}

/// The same when the first transaction aborts: the tasks go back to where
/// they started, not to the end of the partitions as it is by then.
#[test]
fn offset_reset_latest_goes_back_to_where_it_started_when_its_first_transaction_aborts() {
    latest_from_the_start(Some("sent:abort@1"));
}

fn latest_from_the_start(fault: Option<&str>) {
    let _serial = serial();
    let names = Names::new("latest");
    let accounts = 40;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    // Events of the same accounts: folded too, they would change every
    // account's fold.
    produce_range(&producer, &names.source, 0..400, accounts);
    let dir = temp_dir();
    let topology = dir.path().join("latest.yaml");
    let text = std::fs::read_to_string(repo().join("topologies/social-metrics.yaml")).unwrap();
    let latest = text.replace(
        "    format: json\n",
        "    format: json\n    offset_reset: latest\n",
    );
    assert_ne!(latest, text, "the source's options were found");
    std::fs::write(&topology, latest).unwrap();
    let mut config = names.app("a", dir.path().join("state"), true);
    config.topology = topology;
    if let Some(fault) = fault {
        config.args = vec!["--inject-fault".into(), fault.into()];
    }
    let app = App::start(&config, dir.path());
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    produce_range(
        &producer,
        &names.source,
        0..accounts * PER_ACCOUNT,
        accounts,
    );
    assert_exact(&read_folded(&names, accounts), accounts);
    if fault.is_some() {
        assert!(
            app.metric("streamfold_transactions_aborted_total") >= 1.0,
            "the first transaction aborted"
        );
    }
    app.stop();
}

/// `offset_reset: latest` is for the sources only: a repartition topic
/// holds records the application itself wrote, whose sources' offsets
/// are committed. Two instances share a fresh application; `b` is killed
/// at its first commit, so its task never commits an offset. `a`, which
/// wrote records to that task's repartition partition meanwhile, takes the
/// task over: it must read the repartition partition from its beginning,
/// not from its end (Kafka Streams does the same with its internal
/// topics), or the records `a` wrote there are skipped for good.
#[test]
fn offset_reset_latest_still_reads_a_repartition_topic_from_its_beginning() {
    let _serial = serial();
    let dir = temp_dir();
    let source = unique("latest-events");
    let out = unique("latest-by-user");
    create_topic(&source, 2);
    let topology = dir.path().join("latest-repartition.yaml");
    write_json_topology(
        &topology,
        "    offset_reset: latest\n",
        "nodes:
  by_user:
    type: dedup
    input: events
    key_by: /user
    id_field: /n
    retention: 1h
sinks:
  out:
    topic: ${OUT_TOPIC}
    input: by_user
    create: true
",
    );
    let env = env_vars(&[
        ("STREAMFOLD_APP", &unique("sf-latest-repartition")),
        ("EVENTS_TOPIC", &source),
        ("OUT_TOPIC", &out),
        ("DEAD_LETTER_TOPIC", &unique("latest-dlq")),
    ]);
    let config = |instance: &str, fault: Option<&str>| {
        let mut args = vec![
            "--txn-journal".to_string(),
            dir.path()
                .join(format!("journal-{instance}"))
                .display()
                .to_string(),
        ];
        if let Some(fault) = fault {
            args.extend(["--inject-fault".to_string(), fault.to_string()]);
        }
        AppConfig {
            topology: topology.clone(),
            instance: instance.into(),
            state_dir: dir.path().join(format!("state-{instance}")),
            env: env.clone(),
            txn_header: true,
            args,
        }
    };
    let tasks = "streamfold_runtime_tasks_running";
    let a = App::start(&config("a", None), dir.path());
    a.wait_metric(tasks, Duration::from_secs(120), |n| n == 2.0);
    let b = App::start(&config("b", Some("commit:kill")), dir.path());
    b.wait_metric(tasks, Duration::from_secs(120), |n| n == 1.0);
    a.wait_metric(tasks, Duration::from_secs(120), |n| n == 1.0);
    let running = b.wait_log_lines("Task running.", 1, Duration::from_secs(10));
    let b_task: i32 = running[0]
        .split_whitespace()
        .find_map(|word| word.strip_prefix("task="))
        .and_then(|task| task.parse().ok())
        .unwrap_or_else(|| panic!("no task in `{}`", running[0]));

    // Nothing was committed yet: the records come after both started.
    let count = 200u64;
    let producer = TestProducer::new();
    for n in 0..count {
        let value = json!({"user": format!("u{}", n % 8), "n": n});
        producer.send(
            &source,
            Some(format!("k{n}").as_bytes()),
            value.to_string().as_bytes(),
            &[],
        );
    }
    producer.flush();
    let (status, b_log) = b.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "b was to be killed at its first commit");
    assert!(
        b_log.contains("Injected fault: killing the process."),
        "{b_log}"
    );
    // `a` takes over b's task once the group gives up on b.
    a.wait_metric(tasks, Duration::from_secs(120), |n| n == 2.0);
    // `b` comes back: its producer's first act aborts the transaction its
    // kill left open (until then a read_committed reader sees nothing past
    // it).
    let b = App::start(&config("b", None), dir.path());
    b.wait_metric(tasks, Duration::from_secs(120), |n| n >= 1.0);

    // Every record of a's own source partition went out in a committed
    // transaction of a's, whichever repartition partition it went through.
    let inputs = read_topic(
        &source,
        count as usize,
        Duration::ZERO,
        Duration::from_secs(30),
    );
    assert_eq!(inputs.len(), count as usize);
    let expected: BTreeSet<u64> = inputs
        .iter()
        .filter(|r| r.partition != b_task)
        .map(|r| r.json()["n"].as_u64().unwrap())
        .collect();
    assert!(!expected.is_empty(), "a's partition got no records");
    let journal_a = dir.path().join("journal-a");
    let outputs = read_topic(
        &out,
        expected.len(),
        Duration::from_secs(2),
        Duration::from_secs(60),
    );
    let mut journal = TxnJournal::read(&journal_a);
    journal.merge(TxnJournal::read(&dir.path().join("journal-b")));
    let committed = journal.committed_or_resolved();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for record in &outputs {
        let label = record
            .header("streamfold.txn")
            .expect("a transaction label");
        if committed.contains(label) {
            *seen
                .entry(record.json()["n"].as_u64().unwrap())
                .or_default() += 1;
        }
    }
    let missing: Vec<u64> = expected
        .iter()
        .filter(|n| !seen.contains_key(n))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "{} of the {} records of a's partition never went out: {missing:?}",
        missing.len(),
        expected.len()
    );
    let twice: Vec<(&u64, &usize)> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "out more than once: {twice:?}");
    b.stop();
    a.stop();
}

/// The consumer going back by itself, made deterministic: a
/// partition waits for the answer to a query of its end offset (what
/// `offset_reset: latest` or an assignment without a committed offset
/// asks) when a seek to a concrete offset supersedes it, as a task's start
/// does. The late answer is outdated and must change nothing. librdkafka
/// 2.12.1 took it as a reason to ask again: it stopped fetching the
/// partition and 500 ms later moved it to the end offset of that moment,
/// past records never delivered.
#[test]
fn an_offset_query_answered_after_a_seek_does_not_move_the_consumer() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    let _serial = serial();
    let names = Names::new("outdated-query");
    create_topic(&names.source, 1);
    let producer = TestProducer::new();
    let send = |range: std::ops::Range<u32>| {
        for i in range {
            producer.send(&names.source, None, format!("record {i}").as_bytes(), &[]);
        }
        producer.flush();
    };
    send(0..10);
    let consumer: BaseConsumer = plain_client()
        .set("group.id", &names.app)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "latest")
        .create()
        .unwrap();
    let mut start = TopicPartitionList::new();
    start
        .add_partition_offset(&names.source, 0, Offset::Offset(0))
        .unwrap();
    consumer.assign(&start).unwrap();
    // The first record says the connection to the partition's leader is up.
    let timeout = Duration::from_secs(20);
    let deadline = std::time::Instant::now() + timeout;
    loop {
        assert!(std::time::Instant::now() < deadline, "record 0 never came");
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            assert_eq!(message.unwrap().offset(), 0);
            break;
        }
    }
    broker().freeze();
    // The query of the end offset goes out and is not answered...
    consumer
        .seek(&names.source, 0, Offset::End, Duration::from_secs(5))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // ...when a seek to offset 1 supersedes it.
    consumer
        .seek(&names.source, 0, Offset::Offset(1), Duration::from_secs(5))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    broker().thaw();
    // Records written after the late answer came, before 500 ms passed.
    std::thread::sleep(Duration::from_millis(200));
    send(10..20);
    let mut offsets = Vec::new();
    let deadline = std::time::Instant::now() + timeout;
    while offsets.len() < 19 && std::time::Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            offsets.push(message.unwrap().offset());
        }
    }
    assert_eq!(
        offsets,
        (1..20).collect::<Vec<i64>>(),
        "after a seek to offset 1 the consumer delivers offsets 1 to 19 once each, in order"
    );
}

/// The offsets `group` committed on `partition` of `topic`, or `None`
/// while the broker does not give them (a transaction holding offsets of
/// that partition is still open: "unstable offset").
fn committed_on(group: &str, topic: &str, partition: i32) -> Option<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = plain_client()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition(topic, partition);
    let committed = consumer
        .committed_offsets(list, Duration::from_secs(2))
        .ok()?;
    match committed.elements().first()?.offset() {
        rdkafka::Offset::Offset(o) => Some(o),
        _ => None,
    }
}

/// Tasks taken over from a member frozen inside a transaction that holds
/// their offsets wait for that transaction to end (the broker withholds
/// their committed offsets until then), and the member's other tasks go on
/// meanwhile: the offsets are asked for on the processing loop, a short
/// question each round, never in the rebalance callback, which would hold
/// up every task of the instance.
#[test]
fn tasks_waiting_for_a_frozen_owners_transaction_do_not_hold_up_the_others() {
    let _serial = serial();
    let names = Names::new("unstable-offsets");
    let accounts = 300;
    let partitions = 4;
    create_topic(&names.source, partitions);
    let producer = TestProducer::new();
    let dir = temp_dir();
    let survivor = App::start(
        &names.app("b", dir.path().join("state-b"), true),
        dir.path(),
    );
    survivor.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == partitions as f64,
    );

    // A second member with a transaction timeout long enough to watch,
    // frozen once it has sent the offsets of its first transaction.
    let mut config = names.app("a", dir.path().join("state-a"), true);
    with_transaction_timeout(&mut config, dir.path(), "150s");
    config
        .args
        .extend(["--inject-fault".into(), "offsets:freeze@1".into()]);
    let frozen = App::start(&config, dir.path());
    frozen.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n > 0.0,
    );
    produce_range(
        &producer,
        &names.source,
        0..accounts * PER_ACCOUNT / 2,
        accounts,
    );
    frozen.wait_frozen(Duration::from_secs(120));

    // The survivor takes the frozen member's tasks once its session ends;
    // their offsets stay withheld until its transaction times out.
    produce_range(
        &producer,
        &names.source,
        accounts * PER_ACCOUNT / 2..accounts * PER_ACCOUNT,
        accounts,
    );
    let end = producer.ends(&names.source, partitions);
    survivor.wait_log_lines(
        "The committed offsets of new tasks are not available yet",
        1,
        Duration::from_secs(120),
    );
    // Well inside the transaction timeout: a partition still withheld at
    // the end is waiting for the frozen transaction, not for its records.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let split = loop {
        let committed: Vec<Option<i64>> = (0..partitions)
            .map(|p| committed_on(&names.app, &names.source, p))
            .collect();
        let done = committed
            .iter()
            .zip(&end)
            .filter(|(c, e)| c.is_some_and(|c| c >= **e))
            .count();
        let withheld = committed.iter().filter(|c| c.is_none()).count();
        if done > 0 && withheld > 0 {
            break committed;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no partition committed to its end while others waited for the frozen transaction \
             (committed {committed:?}, ends {end:?}); log:\n{}",
            survivor.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("while the frozen transaction was open: committed {split:?}, ends {end:?}");

    // Once the coordinator aborts the frozen transaction, every task runs.
    wait_committed_to(
        &survivor,
        &names.app,
        &names.source,
        &end,
        Duration::from_secs(300),
    );
    drop(frozen);
    survivor.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == 0.0
    });
    let outputs = read_to_end(&names.folded, Duration::from_secs(60));
    assert_exact(&outputs, accounts);
    survivor.stop();
}

/// A task whose committed offsets a previous owner's open transaction
/// holds starts only once that transaction has ended, and from the offsets
/// it committed. The broker answers such a question with
/// UNSTABLE_OFFSET_COMMIT per partition. Taken for "nothing committed",
/// the task would start from its `offset_reset` and process again what
/// the previous owner's transaction had covered.
///
/// The previous owner here is a transactional producer of the test's that
/// commits offsets for the application's group, as a member's transaction
/// does: it covers the first accounts' events, stays open while the
/// application starts, then commits. Only the later accounts may be
/// folded.
#[test]
fn a_task_starts_from_the_offsets_a_previous_owner_s_open_transaction_commits() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, Producer};

    let _serial = serial();
    let names = Names::new("pending-offsets");
    let partitions = 4;
    let accounts = 2 * ACTIVE;
    create_topic(&names.source, partitions);
    let producer = TestProducer::new();
    // Block 0 (the first `ACTIVE` accounts), then block 1 (the others).
    let covered = ACTIVE * PER_ACCOUNT;
    produce_range(&producer, &names.source, 0..covered, accounts);
    let covered_ends = producer.ends(&names.source, partitions);
    produce_range(
        &producer,
        &names.source,
        covered..accounts * PER_ACCOUNT,
        accounts,
    );
    let end = producer.ends(&names.source, partitions);

    let previous: BaseProducer = plain_client()
        .set("transactional.id", unique("previous-owner"))
        .create()
        .unwrap();
    previous.init_transactions(Duration::from_secs(30)).unwrap();
    previous.begin_transaction().unwrap();
    let group: BaseConsumer = plain_client()
        .set("group.id", &names.app)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut offsets = rdkafka::TopicPartitionList::new();
    for (partition, offset) in covered_ends.iter().enumerate() {
        offsets
            .add_partition_offset(
                &names.source,
                partition as i32,
                rdkafka::Offset::Offset(*offset),
            )
            .unwrap();
    }
    previous
        .send_offsets_to_transaction(
            &offsets,
            &group.group_metadata().unwrap(),
            Duration::from_secs(30),
        )
        .unwrap();

    let dir = temp_dir();
    let app = App::start(&names.app("a", dir.path().join("state"), true), dir.path());
    app.wait_log_lines(
        "The committed offsets of new tasks are not available yet",
        1,
        Duration::from_secs(120),
    );
    // Long enough for many questions, each answered "unstable".
    std::thread::sleep(Duration::from_secs(15));
    previous
        .commit_transaction(Duration::from_secs(30))
        .unwrap();

    let outputs = folded_once_committed(&app, &names, &end);
    let folded: BTreeSet<String> = outputs
        .iter()
        .map(|r| r.key.clone().unwrap_or_default())
        .collect();
    let want: BTreeSet<String> = (ACTIVE..accounts).map(|a| format!("account_{a}")).collect();
    assert_eq!(
        folded,
        want,
        "only the accounts after the offsets the previous owner committed are folded, once \
         each ({} folded records); log:\n{}",
        outputs.len(),
        app.log_text()
    );
    assert_eq!(outputs.len(), want.len(), "one fold per account");
    app.stop();
}
