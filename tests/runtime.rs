//! `streamfold run` against a real broker: the social-metrics topology as a
//! consumer group with RocksDB state, changelogs and transactions, checked
//! through read_committed consumers.
//!
//! Most tests close folds only by `max_events` (every account gets exactly
//! 100 events, and quiet/max-wait are set far away), so the expected output
//! is exact: one folded event per account, whatever restarts, rebalances or
//! crashes happen on the way. Events come in blocks of 20 interleaved
//! accounts, so folds complete all along the stream.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

use streamfold::testkit::article::{self as example, METRICS};
const PER_ACCOUNT: u64 = 100;
/// Accounts receiving events at the same time.
const ACTIVE: u64 = 20;

/// Names of one test's topics and application.
struct Names {
    app: String,
    source: String,
    folded: String,
    dlq: String,
}

impl Names {
    fn new(test: &str) -> Names {
        Names {
            app: unique(&format!("sf-{test}")),
            source: unique("post-metric-updated"),
            folded: unique("account-metrics-folded"),
            dlq: unique("dlq"),
        }
    }

    fn env(&self, exact: bool) -> Vec<(String, String)> {
        let mut env = vec![
            ("STREAMFOLD_APP".to_string(), self.app.clone()),
            ("POST_METRICS_TOPIC".to_string(), self.source.clone()),
            ("FOLDED_TOPIC".to_string(), self.folded.clone()),
            ("DEAD_LETTER_TOPIC".to_string(), self.dlq.clone()),
        ];
        if exact {
            // Folds close only when they hold 100 events.
            env.push(("FOLD_QUIET_FOR".into(), "10m".into()));
            env.push(("FOLD_MAX_WAIT".into(), "1h".into()));
            env.push(("FOLD_MAX_EVENTS".into(), PER_ACCOUNT.to_string()));
        }
        env
    }

    fn app(&self, instance: &str, state_dir: PathBuf, exact: bool) -> AppConfig {
        AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: instance.to_string(),
            state_dir,
            env: self.env(exact),
            txn_header: true,
            args: Vec::new(),
        }
    }
}

/// The account of event `i`: blocks of `ACTIVE` accounts, each block
/// getting `PER_ACCOUNT` events per account, interleaved.
fn account_of(i: u64, accounts: u64) -> u64 {
    let block = i / (ACTIVE * PER_ACCOUNT);
    (block * ACTIVE + i % ACTIVE) % accounts
}

/// Event `i` of a stream over `accounts` accounts.
fn event(i: u64, accounts: u64) -> (String, Value) {
    let account = format!("account_{}", account_of(i, accounts));
    let value = json!({
        "post_id": format!("post_{}", i % 37),
        "account_id": account,
        "metrics": {METRICS[(i % 6) as usize]: i},
    });
    (account, value)
}

fn produce_range(producer: &TestProducer, topic: &str, range: std::ops::Range<u64>, accounts: u64) {
    for i in range {
        let (key, value) = event(i, accounts);
        producer.send_json(topic, &key, &value);
    }
    producer.flush();
}

/// What each account's single folded event must hold.
fn expected_folds(accounts: u64) -> BTreeMap<String, Value> {
    let mut metrics: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let mut posts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for i in 0..accounts * PER_ACCOUNT {
        let account = format!("account_{}", account_of(i, accounts));
        metrics
            .entry(account.clone())
            .or_default()
            .insert(METRICS[(i % 6) as usize]);
        posts
            .entry(account)
            .or_default()
            .insert(format!("post_{}", i % 37));
    }
    metrics
        .into_iter()
        .map(|(account, metrics)| {
            let posts: Vec<&String> = posts[&account].iter().collect();
            let value = json!({
                "account_id": account,
                "metrics": metrics.into_iter().collect::<Vec<_>>(),
                "posts": posts,
                "folded_count": PER_ACCOUNT,
                "closed_by": "max_events",
            });
            (account, value)
        })
        .collect()
}

/// The folded event without its timestamps, for comparison.
fn content(record: &Consumed) -> Value {
    let mut value = record.json();
    if let Some(map) = value.as_object_mut() {
        map.remove("first_event_at");
        map.remove("last_event_at");
    }
    value
}

/// Reads the folded topic until every account has its event.
fn read_folded(names: &Names, accounts: u64) -> Vec<Consumed> {
    read_topic(
        &names.folded,
        accounts as usize,
        Duration::from_secs(3),
        Duration::from_secs(240),
    )
}

/// Exactly one folded event per account, each exactly as expected.
fn assert_exact(outputs: &[Consumed], accounts: u64) {
    let expected = expected_folds(accounts);
    let grouped = by_key(outputs);
    let missing: Vec<&String> = expected
        .keys()
        .filter(|k| !grouped.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} accounts have no folded event, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    for (account, records) in &grouped {
        assert_eq!(
            records.len(),
            1,
            "{account} was published {} times: {:?}",
            records.len(),
            records.iter().map(|r| r.json()).collect::<Vec<_>>()
        );
        assert_eq!(content(records[0]), expected[account], "{account}");
    }
    assert_eq!(outputs.len(), accounts as usize);
}

/// [`assert_exact`], a failure naming each copy's transaction as the
/// processes' journal describes it. The journal only explains: the verdict
/// is the topic's, read under read_committed.
fn assert_exact_naming_transactions(outputs: &[Consumed], journal: &TxnJournal, accounts: u64) {
    let expected = expected_folds(accounts);
    let grouped = by_key(outputs);
    assert_eq!(grouped.len(), accounts as usize, "nothing missing");
    for (account, records) in grouped {
        assert_eq!(
            records.len(),
            1,
            "{account}: {} copies: {:?}",
            records.len(),
            records
                .iter()
                .map(|r| {
                    let label = r.header("streamfold.txn").unwrap_or_default();
                    (label, journal.describe(label), r.json())
                })
                .collect::<Vec<_>>()
        );
        assert_eq!(content(records[0]), expected[&account], "{account}");
    }
}

/// `run` arguments that keep a transaction journal at `path`.
fn journal_args(path: &std::path::Path) -> Vec<String> {
    vec!["--txn-journal".into(), path.display().to_string()]
}

/// Creates the source with 4 partitions and produces every event of
/// `accounts` to it at once (a backlog); the partitions' end offsets.
fn produce_backlog(names: &Names, accounts: u64) -> Vec<i64> {
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(
        &producer,
        &names.source,
        0..accounts * PER_ACCOUNT,
        accounts,
    );
    producer.ends(&names.source, 4)
}

/// Waits until the group has committed the source up to `end`, then reads
/// the folded topic to its end.
fn folded_once_committed(app: &App, names: &Names, end: &[i64]) -> Vec<Consumed> {
    wait_committed_to(
        app,
        &names.app,
        &names.source,
        end,
        Duration::from_secs(300),
    );
    read_to_end(&names.folded, Duration::from_secs(60))
}

#[test]
fn the_article_s_six_events_fold_into_two_after_the_key_goes_quiet() {
    let _serial = serial();
    let names = Names::new("article");
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    for event in example::events() {
        let post = event["post_id"].as_str().unwrap().to_string();
        producer.send_json(&names.source, &post, &event);
    }
    producer.flush();
    let inputs = read_topic(&names.source, 6, Duration::ZERO, Duration::from_secs(30));
    let last_input = inputs.iter().filter_map(|r| r.timestamp).max().unwrap();

    let dir = temp_dir();
    let app = App::start(&names.app("a", dir.path().join("state"), false), dir.path());
    let outputs = read_topic(
        &names.folded,
        2,
        Duration::from_secs(2),
        Duration::from_secs(60),
    );
    let grouped = by_key(&outputs);
    assert_eq!(
        outputs.len(),
        2,
        "{:?}",
        outputs.iter().map(Consumed::json).collect::<Vec<_>>()
    );
    assert_eq!(
        grouped["account_1"][0].json()["metrics"],
        json!(["comments", "impressions", "likes", "shares"])
    );
    assert_eq!(grouped["account_1"][0].json()["folded_count"], json!(4));
    assert_eq!(
        grouped["account_2"][0].json()["metrics"],
        json!(["likes", "shares"])
    );
    assert_eq!(grouped["account_2"][0].json()["folded_count"], json!(2));
    for record in &outputs {
        assert_eq!(record.json()["closed_by"], json!("quiet"));
        // Published once the account had been quiet for quiet_for (5s),
        // with no further input.
        let published = record.timestamp.unwrap();
        assert!(
            published - last_input >= 5_000,
            "published {}ms after the last event",
            published - last_input
        );
    }
    assert_eq!(app.metric("streamfold_fold_eligible_events_total"), 6.0);
    assert_eq!(app.metric("streamfold_fold_folded_events_total"), 4.0);
    app.stop();
}

#[test]
fn a_graceful_restart_mid_stream_loses_and_repeats_nothing_and_restores_only_the_tail() {
    let _serial = serial();
    let names = Names::new("restart");
    let accounts = 500;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total / 2, accounts);

    let dir = temp_dir();
    let config = names.app("a", dir.path().join("state"), true);
    let first = App::start(&config, dir.path());
    first.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(120),
        |n| n >= (total / 4) as f64,
    );
    first.stop();
    let changelog_records: i64 = config
        .changelog_topics()
        .iter()
        .map(|t| topic_end_offsets(t))
        .sum();
    assert!(
        changelog_records > accounts as i64,
        "the first run wrote its state to the changelogs ({changelog_records} records)"
    );

    let second = App::start(&config, dir.path());
    produce_range(&producer, &names.source, total / 2..total, accounts);
    let outputs = read_folded(&names, accounts);
    assert_exact(&outputs, accounts);
    // Local state was current: nothing to replay from the changelogs.
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(10),
        |n| n == 4.0,
    );
    assert_eq!(
        second.metric("streamfold_restore_records_restored_total"),
        0.0
    );
    let log = second.stop();
    let restores: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Restore finished."))
        .collect();
    assert_eq!(restores.len(), 4, "{log}");
    assert!(
        restores.iter().all(|l| l.contains("restored=0")),
        "the restart replayed changelog records:\n{log}"
    );
}

#[test]
fn a_second_instance_joining_and_the_first_leaving_mid_stream_changes_nothing() {
    let _serial = serial();
    let names = Names::new("rebalance");
    let accounts = 500;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    let dir = temp_dir();

    let first = App::start(
        &names.app("a", dir.path().join("state-a"), true),
        dir.path(),
    );
    produce_range(&producer, &names.source, 0..total / 3, accounts);
    first.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(120),
        |n| n >= (total / 3) as f64,
    );

    // A second member joins: some tasks move to it and restore there.
    let second = App::start(
        &names.app("b", dir.path().join("state-b"), true),
        dir.path(),
    );
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n >= 1.0,
    );
    produce_range(&producer, &names.source, total / 3..2 * total / 3, accounts);
    second.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(120),
        |n| n > 0.0,
    );

    // The first leaves: the second takes every task.
    first.stop();
    produce_range(&producer, &names.source, 2 * total / 3..total, accounts);
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    let outputs = read_folded(&names, accounts);
    assert_exact(&outputs, accounts);
    assert!(
        second.metric("streamfold_restore_records_restored_total") > 0.0,
        "the moved tasks were restored from the changelogs"
    );
    second.stop();
}

/// A static member killed after a cooperative rebalance took tasks from it
/// and before it rejoined (the rejoin is what lets the group hand those
/// tasks to another member), then restarted at once with its id: the group
/// gives the restarted member its cached assignment without a rebalance,
/// so unless someone rejoins, the tasks it gave up belong to nobody. Every
/// partition's input must be committed again, and every fold exact.
#[test]
fn a_static_member_killed_while_handing_over_tasks_and_restarted_leaves_no_task_unowned() {
    let _serial = serial();
    let names = Names::new("handover");
    let accounts = 200;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    let dir = temp_dir();
    let config = |instance: &str| {
        let mut config = names.app(instance, dir.path().join(format!("state-{instance}")), true);
        config
            .env
            .push(("STREAMFOLD_STATIC_MEMBERSHIP".into(), "true".into()));
        config
    };
    let mut dying = config("a");
    dying
        .args
        .extend(["--inject-fault".into(), "revoked:kill".into()]);
    let first = App::start(&dying, dir.path());
    produce_range(&producer, &names.source, 0..total / 2, accounts);
    wait_committed_to(
        &first,
        &names.app,
        &names.source,
        &producer.ends(&names.source, 4),
        Duration::from_secs(120),
    );

    // A second member joins: the first closes the tasks it gives up and
    // dies before it rejoins.
    let second = App::start(&config("b"), dir.path());
    let (status, log) = first.wait_exit(Duration::from_secs(120));
    assert!(
        !status.success() && log.contains("Injected fault: killing the process."),
        "the first member was to die at its first revocation ({status}); log:\n{log}"
    );
    // Restarted at once, well within its session timeout (10 s): the group
    // still holds its membership and gives it back what it kept.
    let first = App::start(&config("a"), dir.path());
    produce_range(&producer, &names.source, total / 2..total, accounts);
    wait_committed_to(
        &first,
        &names.app,
        &names.source,
        &producer.ends(&names.source, 4),
        Duration::from_secs(120),
    );
    let outputs = read_folded(&names, accounts);
    assert_exact(&outputs, accounts);
    first.stop();
    second.stop();
}

/// Folds the first half of `accounts`' events with `config`, runs
/// `while_first_runs` on that process, stops it, runs `between`, folds the second half with a new process and
/// checks every account's folds are exact; returns that process, running.
fn fold_in_two_runs(
    names: &Names,
    accounts: u64,
    config: &AppConfig,
    dir: &Path,
    while_first_runs: impl FnOnce(&App),
    between: impl FnOnce(),
) -> App {
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total / 2, accounts);
    let first = App::start(config, dir);
    first.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(120),
        |n| n >= (total / 2) as f64,
    );
    while_first_runs(&first);
    first.stop();
    between();

    let second = App::start(config, dir);
    produce_range(&producer, &names.source, total / 2..total, accounts);
    let outputs = read_folded(names, accounts);
    assert_exact(&outputs, accounts);
    second
}

/// A record cache far too small for the open folds (a few entries per
/// store): every commit evicts, so most reads go to RocksDB; the folds stay
/// exact, across a restart too. The gauge of the cache shows it in use and
/// within its budget.
#[test]
fn a_record_cache_smaller_than_the_open_folds_loses_nothing() {
    const BUDGET: f64 = 16.0 * 1024.0;
    let _serial = serial();
    let names = Names::new("tiny-cache");
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    config
        .env
        .push(("STREAMFOLD_RECORD_CACHE".into(), "16KiB".into()));
    let check_gauge = |app: &App| {
        app.wait_metric_present(
            "streamfold_state_record_cache_bytes",
            Duration::from_secs(30),
            |bytes| bytes > 0.0 && bytes <= BUDGET,
        );
    };
    fold_in_two_runs(&names, 300, &config, dir.path(), check_gauge, || {}).stop();
}

#[test]
fn a_deleted_state_directory_is_rebuilt_from_the_changelogs() {
    let _serial = serial();
    let names = Names::new("wipe");
    let accounts = 300;
    let dir = temp_dir();
    let state = dir.path().join("state");
    let config = names.app("a", state.clone(), true);
    let second = fold_in_two_runs(
        &names,
        accounts,
        &config,
        dir.path(),
        |_| {},
        || {
            std::fs::remove_dir_all(&state).unwrap();
        },
    );
    // Every open fold came back from the changelog.
    assert!(second.metric("streamfold_restore_records_restored_total") >= accounts as f64);
    second.stop();
}

#[test]
fn kill_9_at_random_points_loses_and_doubles_nothing() {
    let _serial = serial();
    let names = Names::new("crash");
    let accounts = 600;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    let journal = dir.path().join("journal");
    config.args = journal_args(&journal);
    // The restarted instance takes its member's place at once.
    config
        .env
        .push(("STREAMFOLD_STATIC_MEMBERSHIP".into(), "true".into()));

    // Events keep arriving while the instance is killed and restarted.
    let source = names.source.clone();
    let feeder = std::thread::spawn(move || {
        let producer = TestProducer::new();
        let chunk = total / 40;
        for c in 0..40 {
            produce_range(&producer, &source, c * chunk..(c + 1) * chunk, accounts);
            std::thread::sleep(Duration::from_millis(400));
        }
        producer.ends(&source, 4)
    });
    let mut killed = 0;
    let mut seed = std::process::id() as u64;
    for kill in 0..5 {
        let app = App::start(&config, dir.path());
        app.wait_metric(
            "streamfold_runtime_tasks_running",
            Duration::from_secs(120),
            |n| n == 4.0,
        );
        // A random point while it processes: 200..2200 ms after it starts.
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(200 + (seed >> 33) % 2000));
        let log = app.kill();
        assert_eq!(
            run_ids(&log).len(),
            1,
            "kill {kill}: one run id in the log:\n{log}"
        );
        killed += 1;
    }
    let end = feeder.join().unwrap();
    let last = App::start(&config, dir.path());
    wait_committed_to(
        &last,
        &names.app,
        &names.source,
        &end,
        Duration::from_secs(240),
    );
    let outputs = read_to_end(&names.folded, Duration::from_secs(60));
    let journal = TxnJournal::read(&journal);
    assert_exact_naming_transactions(&outputs, &journal, accounts);
    let in_doubt: Vec<String> = journal
        .in_doubt()
        .iter()
        .map(|label| format!("{label} {}", journal.describe(label)))
        .collect();
    eprintln!(
        "{} folded events after {killed} kills, {} transactions open at a kill ({in_doubt:?} in doubt)",
        outputs.len(),
        journal.open_at_kill().len(),
    );
    // Final state: every fold closed.
    last.wait_metric("streamfold_fold_open_folds", Duration::from_secs(30), |n| {
        n == 0.0
    });
    last.stop();
}

#[test]
fn bad_records_go_to_the_dead_letter_topic_and_processing_continues() {
    let _serial = serial();
    let names = Names::new("dlq");
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    producer.send(
        &names.source,
        Some(b"account_1"),
        b"{not json",
        &[("trace", "t-1")],
    );
    producer.send_json(
        &names.source,
        "account_9",
        &json!({"post_id": "post_9", "metrics": {"likes": 1}}),
    );
    producer.send_json(
        &names.source,
        "account_1",
        &json!({"post_id": "post_1", "account_id": "account_1", "metrics": {"likes": 1}}),
    );
    producer.send_json(
        &names.source,
        "account_2",
        &json!({"post_id": "post_2", "account_id": "account_2", "metrics": {"shares": 1}}),
    );
    producer.flush();
    let inputs = read_topic(&names.source, 4, Duration::ZERO, Duration::from_secs(30));

    let dir = temp_dir();
    let app = App::start(&names.app("a", dir.path().join("state"), false), dir.path());
    let letters = read_topic(
        &names.dlq,
        2,
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    assert_eq!(letters.len(), 2, "{letters:?}");
    let not_json = letters
        .iter()
        .find(|l| l.payload.as_deref() == Some(b"{not json"))
        .expect("the non-JSON record");
    let origin = inputs
        .iter()
        .find(|r| r.payload.as_deref() == Some(b"{not json"))
        .unwrap();
    assert_eq!(
        not_json.header("streamfold.dlq.topic"),
        Some(names.source.as_str())
    );
    assert_eq!(
        not_json.header("streamfold.dlq.partition"),
        Some(origin.partition.to_string().as_str())
    );
    assert_eq!(
        not_json.header("streamfold.dlq.offset"),
        Some(origin.offset.to_string().as_str())
    );
    assert_eq!(not_json.header("streamfold.dlq.node"), Some("post_metrics"));
    assert!(
        not_json
            .header("streamfold.dlq.reason")
            .unwrap()
            .starts_with("value is not valid JSON"),
        "{not_json:?}"
    );
    assert_eq!(
        not_json.header("trace"),
        Some("t-1"),
        "original headers are kept"
    );
    let no_key = letters
        .iter()
        .find(|l| l.key.as_deref() == Some("account_9"))
        .expect("the record without account_id");
    assert_eq!(no_key.header("streamfold.dlq.node"), Some("fold_account"));
    assert_eq!(
        no_key.header("streamfold.dlq.reason"),
        Some("key field /account_id is missing or null")
    );
    assert_eq!(no_key.header("streamfold.dlq.class"), Some("record"));

    // The good records after them were folded.
    let outputs = read_topic(
        &names.folded,
        2,
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    let keys: BTreeSet<String> = outputs.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["account_1".to_string(), "account_2".to_string()])
    );
    // Each dead letter is counted where it happened (the source's
    // went uncounted before, and this sum was 1 against 2 letters).
    let text = app.metrics_text();
    let counted = |node: &str, reason: &str| {
        series(&text, "streamfold_node_dead_letters_total")
            .into_iter()
            .find(|(l, _)| {
                l.get("node").map(String::as_str) == Some(node)
                    && l.get("reason").map(String::as_str) == Some(reason)
            })
            .map(|(_, v)| v)
    };
    assert_eq!(
        counted("fold_account", "missing_key_field"),
        Some(1.0),
        "the fold counted its dead letter"
    );
    assert_eq!(
        counted("post_metrics", "undecodable_value"),
        Some(1.0),
        "the source counted its dead letter"
    );
    assert_eq!(
        parse_metric(&text, "streamfold_node_dead_letters_total"),
        letters.len() as f64,
        "the counters add up to the dead-letter topic"
    );
    app.stop();
}

#[test]
fn a_frozen_instance_replaced_by_a_new_one_with_its_id_stops_when_it_wakes_and_loses_nothing() {
    replaced_while_frozen("zombie", None, true);
}

/// The same without static membership: the group lets the woken process
/// back in as a new member, so only its producer, fenced by the
/// successor's, can stop it, and only once it has something to produce.
/// It must stop then, not start a producer of its own again (which would
/// fence the successor in turn). Frozen inside a transaction (`batch`),
/// not by a SIGSTOP at any moment, so the test is deterministic.
#[test]
fn a_frozen_dynamic_member_replaced_by_a_new_one_with_its_id_stops_once_it_has_work_and_loses_nothing()
 {
    replaced_while_frozen("zombied", Some(("batch:freeze@20", false)), false);
}

/// The same, frozen inside a transaction for longer than its
/// `transaction.timeout.ms`: on waking, the producer's fencing error cannot
/// tell a successor from the coordinator's abort of an overdue
/// transaction, which streamfold classes as a producer failure (a new
/// producer, a new membership). The consumer knows better: the group gave
/// its static membership away. CI found a fenced instance rejoining (there
/// after an abort that timed out), which fences its successor in turn.
#[test]
fn a_frozen_instance_whose_transaction_timed_out_stops_when_it_wakes_and_does_not_rejoin() {
    replaced_while_frozen("zombiet", Some(("batch:freeze@2", true)), true);
}

/// The same with dynamic membership: no group answer tells the woken
/// zombie that its instance id was taken, and its producer's fencing looks
/// like the coordinator's abort of an overdue transaction. It must still
/// not start a producer again (which would fence its successor, who would
/// then stop for good): the group's members tell it another process runs
/// with its id.
#[test]
fn a_frozen_dynamic_member_whose_transaction_timed_out_stops_and_its_successor_goes_on() {
    replaced_while_frozen("zombiedt", Some(("batch:freeze@2", true)), false);
}

/// Alone in its group, an instance frozen inside a transaction for longer
/// than `transaction.timeout.ms` finds, on waking, its producer fenced by the coordinator's abort of the overdue
/// transaction. No other process took its id: that is a failure of this
/// producer, which a new one survives, not a fencing to stop for. The
/// instance goes on, and the output is exact: the aborted transaction is
/// hidden from read_committed readers and its records are processed again.
#[test]
fn a_lone_instance_frozen_past_its_transaction_timeout_goes_on_and_loses_nothing() {
    let _serial = serial();
    let names = Names::new("overdue-txn");
    let accounts = 300;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total / 2, accounts);
    let dir = temp_dir();
    let mut config = names.app("lone", dir.path().join("state"), true);
    config
        .env
        .push(("STREAMFOLD_STATIC_MEMBERSHIP".into(), "true".into()));
    with_transaction_timeout(&mut config, dir.path(), "2s");
    config
        .args
        .extend(["--inject-fault".into(), "commit:freeze@2".into()]);
    let app = App::start(&config, dir.path());
    app.wait_frozen(Duration::from_secs(120));
    // Past the transaction timeout and the coordinator's check for overdue
    // transactions (every 10 s by default), so the coordinator has aborted
    // the transaction and bumped the producer's epoch by the time it wakes.
    std::thread::sleep(Duration::from_secs(15));
    app.resume();
    produce_range(&producer, &names.source, total / 2..total, accounts);
    wait_committed_to(
        &app,
        &names.app,
        &names.source,
        &producer.ends(&names.source, 4),
        Duration::from_secs(240),
    );
    app.assert_running();
    let log = app.log_text();
    assert!(
        log.contains("open longer than transaction.timeout.ms"),
        "the overdue transaction was told apart from a fencing:\n{log}"
    );
    assert!(!log.contains("this instance was fenced"), "{log}");
    app.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == 0.0
    });
    let outputs = read_to_end(&names.folded, Duration::from_secs(60));
    assert_exact(&outputs, accounts);
    app.stop();
}

/// A static member frozen mid-stream (by SIGSTOP once it has folded
/// something, or by `freeze`, a fault injected into its commit cycle) and
/// replaced by a process with the same instance id; when it wakes it must
/// find itself fenced and stop, and nothing may be lost or doubled beyond
/// its own never-committed transaction. The events come in three parts:
/// before the freeze, while frozen, and after the wake-up (which a woken
/// member that rejoined must meet with its fenced producer).
/// `freeze`: the fault that freezes it, and whether for longer than its
/// transaction timeout (else by SIGSTOP once it has folded something).
fn replaced_while_frozen(name: &str, freeze: Option<(&str, bool)>, static_membership: bool) {
    let _serial = serial();
    let names = Names::new(name);
    let accounts = 300;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total / 2, accounts);
    let dir = temp_dir();
    let mut config = names.app("z", dir.path().join("state-a"), true);
    let journal = dir.path().join("journal");
    config.args = journal_args(&journal);
    config.env.push((
        "STREAMFOLD_STATIC_MEMBERSHIP".into(),
        static_membership.to_string(),
    ));

    // The first process freezes mid-stream (a long GC pause, a stalled VM)...
    let zombie = match freeze {
        None => {
            let zombie = App::start(&config, dir.path());
            zombie.wait_metric(
                "streamfold_fold_eligible_events_total",
                Duration::from_secs(120),
                |n| n > 0.0,
            );
            zombie.pause();
            zombie
        }
        Some((fault, past_timeout)) => {
            let mut frozen = config.clone();
            if past_timeout {
                // A transaction timeout shorter than the freeze.
                let topology = std::fs::read_to_string(&config.topology).unwrap().replace(
                    "  commit_interval: ${STREAMFOLD_COMMIT_INTERVAL:-100ms}\n",
                    "  commit_interval: ${STREAMFOLD_COMMIT_INTERVAL:-100ms}\n  transaction_timeout: 2s\n",
                );
                assert!(topology.contains("transaction_timeout: 2s"));
                frozen.topology = dir.path().join("short-transactions.yaml");
                std::fs::write(&frozen.topology, topology).unwrap();
            }
            frozen.args.extend(["--inject-fault".into(), fault.into()]);
            let zombie = App::start(&frozen, dir.path());
            zombie.wait_frozen(Duration::from_secs(120));
            if past_timeout {
                // Frozen past the transaction timeout in any case.
                std::thread::sleep(Duration::from_secs(3));
            }
            zombie
        }
    };
    // ...and its replacement starts with the same instance id on another
    // machine (here: another state directory), fencing it.
    config.state_dir = dir.path().join("state-b");
    let successor = App::start(&config, dir.path());
    let (woken, last) = (total / 2..total * 3 / 4, total * 3 / 4..total);
    let successor_commits = |range: std::ops::Range<u64>| {
        produce_range(&producer, &names.source, range, accounts);
        wait_committed_to(
            &successor,
            &names.app,
            &names.source,
            &producer.ends(&names.source, 4),
            Duration::from_secs(240),
        );
    };
    successor_commits(woken);

    // The zombie wakes up, finds itself fenced, and stops on its own: a
    // static member at once (the group refuses its id), a dynamic one once
    // the last part gives it something to produce.
    let started = zombie.log_text().matches("Task running.").count();
    zombie.resume();
    if static_membership {
        expect_fenced(zombie);
        successor_commits(last);
    } else {
        // Back in the group as a new member: it stops at once if it woke
        // inside a transaction, else once it runs tasks of its own again
        // and the last part gives them work.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let log = zombie.log_text();
            if log.contains("this instance was fenced")
                || log.matches("Task running.").count() > started
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the woken member neither stopped nor took tasks:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        successor_commits(last);
        expect_fenced(zombie);
    }
    successor.assert_running();
    let outputs = read_to_end(&names.folded, Duration::from_secs(60));

    // Nothing lost; a duplicate can only come from the zombie's last,
    // never-committed transaction (none where aborted records are hidden).
    assert_exact_naming_transactions(&outputs, &TxnJournal::read(&journal), accounts);
    successor.wait_metric("streamfold_fold_open_folds", Duration::from_secs(30), |n| {
        n == 0.0
    });
    successor.stop();
}

/// A zombie stops by itself, fenced, without rejoining the group.
fn expect_fenced(zombie: App) {
    let (status, log) = zombie.wait_exit(Duration::from_secs(90));
    assert!(!status.success(), "{log}");
    assert!(log.contains("this instance was fenced"), "{log}");
    assert!(
        !log.contains("rejoining the group"),
        "a fenced instance rejoined the group:\n{log}"
    );
    let tasks = log.matches("Task running.").count();
    let stopped = log.lines().find(|l| l.contains("this instance was fenced"));
    eprintln!("the zombie started {tasks} tasks in all, then: {stopped:?}");
}

/// `streamfold run` on `topology`, expecting a quick failure; returns
/// stderr and how long it took.
fn run_expecting_failure(
    topology: &std::path::Path,
    env: &[(String, String)],
    bootstrap: &str,
) -> (String, Duration) {
    let dir = temp_dir();
    let started = std::time::Instant::now();
    let output = std::process::Command::new(streamfold_binary())
        .arg("run")
        .arg(topology)
        .arg("--bootstrap-servers")
        .arg(bootstrap)
        .arg("--state-dir")
        .arg(dir.path())
        .envs(env.iter().cloned())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    (
        String::from_utf8_lossy(&output.stderr).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn an_unreachable_broker_or_a_missing_source_topic_fails_fast_and_says_so() {
    let _serial = serial();
    let names = Names::new("startup");
    let topology = repo().join("topologies/social-metrics.yaml");
    let (stderr, took) = run_expecting_failure(
        &topology,
        &names.env(false),
        &format!("127.0.0.1:{}", free_port()),
    );
    assert!(
        stderr.contains("cannot reach Kafka at 127.0.0.1:"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Fail-fast is opt-in since run waits for missing sources by default.
    let mut env = names.env(false);
    env.push(("STREAMFOLD_WAIT_FOR_SOURCES".into(), "false".into()));
    let (stderr, took) = run_expecting_failure(&topology, &env, &broker().bootstrap);
    assert!(
        stderr.contains(&format!(
            "source topic `{}` (source `post_metrics`) does not exist",
            names.source
        )),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_missing_sink_topic_or_unequal_source_partitions_stop_startup_with_the_topics_named() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new("sinks");
    create_topic(&names.source, 4);
    let original = std::fs::read_to_string(repo().join("topologies/social-metrics.yaml")).unwrap();

    // The sink does not create its topic: a missing one is an error.
    let no_create = dir.path().join("no-create.yaml");
    std::fs::write(&no_create, original.replace("    create: true\n", "")).unwrap();
    let (stderr, _) = run_expecting_failure(&no_create, &names.env(false), &broker().bootstrap);
    assert!(
        stderr.contains(&format!(
            "sink `folded` writes topic `{}`, which does not exist on {}; create it or set `create: true` on the sink",
            names.folded,
            broker().bootstrap
        )),
        "{stderr}"
    );

    // Two sources with 4 and 2 partitions cannot be co-partitioned.
    let other = unique("reads");
    create_topic(&other, 2);
    let two_sources = dir.path().join("two-sources.yaml");
    let text = original
        .replace(
            "sources:\n",
            &format!("sources:\n  reads:\n    topic: {other}\n"),
        )
        .replace(
            "    input: post_metrics\n",
            "    input: [post_metrics, reads]\n",
        );
    std::fs::write(&two_sources, text).unwrap();
    let (stderr, _) = run_expecting_failure(&two_sources, &names.env(false), &broker().bootstrap);
    assert!(
        stderr.contains("source topics must have the same number of partitions"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("`{}` has 4", names.source)),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("`{other}` has 2")), "{stderr}");
}

#[test]
fn at_least_once_folds_exactly_when_nothing_fails() {
    let _serial = serial();
    let names = Names::new("alo");
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..20 * PER_ACCOUNT, 20);
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    config
        .env
        .push(("STREAMFOLD_GUARANTEE".into(), "at_least_once".into()));
    let app = App::start(&config, dir.path());
    let outputs = read_folded(&names, 20);
    assert_exact(&outputs, 20);
    assert_eq!(app.metric("streamfold_transactions_aborted_total"), 0.0);
    app.stop();
}

/// The whole lines of the transaction journal at `path` (the process may
/// be writing the next).
fn journal_lines(path: &std::path::Path) -> Vec<String> {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').unwrap_or(0));
    text.lines().map(str::to_string).collect()
}

/// The transactions the journal at `path` shows begun, and those of them
/// not yet ended, by label, from one read.
fn transactions(path: &std::path::Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut begun, mut open) = (BTreeSet::new(), BTreeSet::new());
    for line in journal_lines(path) {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["begin", label, ..] => {
                begun.insert(label.to_string());
                open.insert(label.to_string());
            }
            ["committed" | "aborted", label, ..] => {
                open.remove(label);
            }
            _ => {}
        }
    }
    (begun, open)
}

/// Transactions begun and not yet ended in the journal at `path`, by
/// label.
fn open_transactions(path: &std::path::Path) -> BTreeSet<String> {
    transactions(path).1
}

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

/// The producer half of the test below, made deterministic: a
/// transactional producer with streamfold's properties has records of one
/// partition in flight when the broker freezes, and one more record queued
/// behind them. librdkafka sends a partition nothing more while five of its
/// messages are unacknowledged, yet its broker thread used to schedule its
/// next look for the moment the queued record's `linger.ms` ran out, that
/// is at once, again and again: a full core spun until the broker answered
/// (the CPU seen in CI before the vendored fix).
#[test]
fn a_producer_waiting_for_a_frozen_broker_to_acknowledge_uses_no_cpu() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let _serial = serial();
    let names = Names::new("frozen-producer");
    create_topic(&names.source, 1);
    let me = std::process::id();
    let threads_before = thread_cpu_seconds(me);
    let producer: BaseProducer = plain_client()
        .set("enable.idempotence", "true")
        .set("transactional.id", format!("{}-txn", names.source))
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    producer.begin_transaction().unwrap();
    let send = |from: usize, to: usize| {
        for i in from..to {
            let value = format!("record {i}");
            producer
                .send(
                    BaseRecord::<str, str>::to(&names.source)
                        .key("k")
                        .payload(&value),
                )
                .unwrap();
        }
    };
    // The partition joins the transaction while the broker still answers.
    send(0, 10);
    producer.flush(timeout).unwrap();
    broker().freeze();
    // Ten records in one request, sent and never acknowledged...
    send(10, 20);
    std::thread::sleep(Duration::from_millis(200));
    // ...and one more behind them, whose linger runs out while they wait.
    send(20, 21);
    std::thread::sleep(Duration::from_millis(50));
    let producer_threads = |all: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        all.into_iter()
            .filter(|(thread, _)| !threads_before.contains_key(thread))
            .collect()
    };
    let start = producer_threads(thread_cpu_seconds(me));
    let freeze = Duration::from_secs(3);
    std::thread::sleep(freeze);
    let end = producer_threads(thread_cpu_seconds(me));
    broker().thaw();
    let used: f64 = end.values().sum::<f64>() - start.values().sum::<f64>();
    let busiest = busiest_threads(&start, &end);
    eprintln!("the producer used {used:.2} s of CPU in {freeze:?} of freeze ({busiest})");
    producer.flush(timeout).unwrap();
    producer.commit_transaction(timeout).unwrap();
    assert!(
        !start.is_empty(),
        "no producer thread found, so nothing was measured"
    );
    assert!(
        used < freeze.as_secs_f64() / 4.0,
        "waiting {freeze:?} for a frozen broker's acknowledgements took {used:.2} s of CPU \
         ({busiest}): librdkafka's broker thread spins"
    );
    assert_eq!(
        read_to_end(&names.source, timeout).len(),
        21,
        "every record committed once"
    );
}

/// A broker that stops answering (frozen with SIGSTOP: connections stay
/// open, nothing is acknowledged) while a transaction is open: the
/// instance waits for the acknowledgements without burning a core, which
/// on a shared machine would starve the broker it waits for, and once the
/// broker wakes, the transaction commits and nothing is lost or doubled.
#[test]
fn a_commit_waiting_on_a_frozen_broker_uses_no_cpu_and_loses_nothing() {
    let _serial = serial();
    let names = Names::new("frozen");
    let accounts = 200;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    let journal = dir.path().join("journal");
    config.args = journal_args(&journal);
    let app = App::start(&config, dir.path());
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    let producer = TestProducer::new();
    let freeze = Duration::from_secs(3);
    let slices = 5;
    let mut caught = Vec::new();
    for slice in 0..slices {
        let (begun_before, _) = transactions(&journal);
        produce_range(
            &producer,
            &names.source,
            slice * total / slices..(slice + 1) * total / slices,
            accounts,
        );
        // Freeze the broker the moment a transaction with this slice's
        // records is open. It can also begin and commit within the
        // producer's flush, before the test looks (an idle instance
        // commits right after its first batch): then this slice has
        // nothing to freeze.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let open = loop {
            let (begun, open) = transactions(&journal);
            let new: BTreeSet<String> = begun.difference(&begun_before).cloned().collect();
            if !new.is_empty() {
                break new
                    .intersection(&open)
                    .cloned()
                    .collect::<BTreeSet<String>>();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "slice {slice}: no transaction began in 30 s; log:\n{}",
                app.log_text()
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        if open.is_empty() {
            eprintln!(
                "slice {slice}: its transactions began and ended before the test looked; not frozen"
            );
            continue;
        }
        broker().freeze();
        let cpu = cpu_seconds(app.pid());
        let threads = thread_cpu_seconds(app.pid());
        std::thread::sleep(freeze);
        let used = cpu_seconds(app.pid()) - cpu;
        // Which threads used it: librdkafka's broker thread once spun here
        // (the vendored fix, and the test above).
        let busiest = busiest_threads(&threads, &thread_cpu_seconds(app.pid()));
        // Still open after three seconds with a commit interval of 100 ms:
        // the commit was waiting for the broker all along.
        let waited = open.is_subset(&open_transactions(&journal));
        broker().thaw();
        eprintln!(
            "slice {slice}: froze the broker with {open:?} open; {used:.2} s of CPU in {freeze:?} \
             ({busiest}); the commit waited: {waited}"
        );
        if waited {
            caught.push((used, busiest));
        }
    }
    assert!(
        !caught.is_empty(),
        "no freeze caught a commit waiting for the broker, so nothing was measured; log:\n{}",
        app.log_text()
    );
    for (used, busiest) in &caught {
        assert!(
            *used < freeze.as_secs_f64() / 4.0,
            "waiting {freeze:?} for a frozen broker took {used:.2} s of CPU ({busiest}): \
             the instance spins; log:\n{}",
            app.log_text()
        );
    }
    let outputs = read_folded(&names, accounts);
    assert_exact_naming_transactions(&outputs, &TxnJournal::read(&journal), accounts);
    app.stop();
}

/// Aborts with a backlog: while a batch processes, the polling thread
/// polls the next one ahead, so at each abort a batch polled before the
/// rewind waits. Processed after the rewind, it would move the tasks past
/// the records between their last commit and it, which come again and are
/// skipped as processed: lost. Every record must count once.
#[test]
fn aborts_with_a_batch_polled_ahead_lose_and_double_nothing() {
    let _serial = serial();
    let names = Names::new("ahead");
    let accounts = 2_000;
    // The whole backlog first, so batches are full and the next is always
    // there to poll ahead.
    let end = produce_backlog(&names, accounts);
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    let journal = dir.path().join("journal");
    config.args = journal_args(&journal);
    config.args.extend([
        "--inject-fault".into(),
        "sent:abort@2,sent:abort@3,sent:abort@5,sent:abort@8".into(),
    ]);
    let app = App::start(&config, dir.path());
    let outputs = folded_once_committed(&app, &names, &end);
    assert_exact_naming_transactions(&outputs, &TxnJournal::read(&journal), accounts);
    // Every injected abort happened. (The broker can fail a transaction
    // of its own accord too: an abort with records in flight can leave the
    // next one out of sequence, which librdkafka then fails.)
    let log = app.log_text();
    let injected = log.matches("Injected fault: aborting.").count();
    assert_eq!(injected, 4, "every injected abort happened; log:\n{log}");
    let aborted = app.metric("streamfold_transactions_aborted_total");
    assert!(
        aborted >= 4.0,
        "{aborted} transactions aborted, fewer than injected; log:\n{log}"
    );
    app.stop();
}

/// A member that joins while the first works through a backlog gets its
/// share of that backlog, not only what comes after it: the first serves
/// the rebalance while records still wait on its tasks' queues, and the
/// move loses and doubles nothing.
#[test]
fn a_member_joining_during_a_backlog_takes_a_share_of_it() {
    let _serial = serial();
    let names = Names::new("backlog-join");
    let accounts = 30_000;
    let total = accounts * PER_ACCOUNT;
    let end = produce_backlog(&names, accounts);
    let dir = temp_dir();
    let first = App::start(
        &names.app("a", dir.path().join("state-a"), true),
        dir.path(),
    );
    first.wait_metric(
        "streamfold_runtime_records_consumed_total",
        Duration::from_secs(120),
        |n| n > 0.0,
    );
    let second = App::start(
        &names.app("b", dir.path().join("state-b"), true),
        dir.path(),
    );
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(240),
        |n| n >= 1.0,
    );
    let consumed_by_first = first.metric("streamfold_runtime_records_consumed_total");
    eprintln!(
        "the first had consumed {consumed_by_first} of {total} when the second started a task"
    );
    let outputs = folded_once_committed(&second, &names, &end);
    let consumed_by_second = second.metric("streamfold_runtime_records_consumed_total");
    assert!(
        consumed_by_second > 0.0,
        "the second member ran tasks only once the backlog was gone: the first had consumed \
         {consumed_by_first} of {total} records when the second started its first task; \
         first's log:\n{}",
        first.log_text()
    );
    assert_exact(&outputs, accounts);
    second.stop();
    first.stop();
}

/// A commit sends the records `linger.ms` holds back at once instead of
/// waiting the linger out: with a linger of 5 s, each commit's wait for
/// acknowledgements (the `flush` phase) takes far less than the linger.
/// librdkafka ignores the linger only while a call of `rd_kafka_flush`
/// lasts, and rust-rdkafka's `flush` makes its calls last no time.
#[test]
fn a_commit_does_not_wait_out_the_producer_s_linger() {
    let _serial = serial();
    let names = Names::new("linger");
    let accounts = 200;
    let end = produce_backlog(&names, accounts);
    let dir = temp_dir();
    let linger = Duration::from_secs(5);
    let mut config = names.app("a", dir.path().join("state"), true);
    config.args = vec!["-X".into(), format!("linger.ms={}", linger.as_millis())];
    let app = App::start(&config, dir.path());
    let outputs = folded_once_committed(&app, &names, &end);
    assert_exact(&outputs, accounts);
    let text = app.metrics_text();
    let flush = |series: &str| {
        let name = format!("streamfold_commit_phase_duration_seconds_{series}");
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains("phase=\"flush\""))
            .find_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no `{name}` of the flush phase in:\n{text}"))
    };
    let (count, sum) = (flush("count"), flush("sum"));
    assert!(count >= 1.0, "no commit was timed:\n{text}");
    let mean = sum / count;
    eprintln!("{count} flushes, mean {:.1} ms", mean * 1000.0);
    assert!(
        mean < linger.as_secs_f64() / 5.0,
        "a commit's flush took {mean:.2} s on average with a linger of {linger:?}: it waits \
         the linger out; log:\n{}",
        app.log_text()
    );
    app.stop();
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

/// Points `config` at a copy of its topology, written to `dir`, whose
/// transactions time out after `timeout`.
fn with_transaction_timeout(config: &mut AppConfig, dir: &Path, timeout: &str) {
    let topology = std::fs::read_to_string(&config.topology).unwrap().replace(
        "  commit_interval: ${STREAMFOLD_COMMIT_INTERVAL:-100ms}\n",
        &format!("  commit_interval: ${{STREAMFOLD_COMMIT_INTERVAL:-100ms}}\n  transaction_timeout: {timeout}\n"),
    );
    assert!(topology.contains(&format!("transaction_timeout: {timeout}")));
    config.topology = dir.join(format!("transactions-{timeout}.yaml"));
    std::fs::write(&config.topology, topology).unwrap();
}
