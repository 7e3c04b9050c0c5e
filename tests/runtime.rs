//! `streamfold run` of the social-metrics topology as a consumer group on
//! a real broker, judged by what read_committed readers see: one folded
//! event per account, exactly as expected, whatever happens to the group
//! on the way — a graceful restart, members joining and leaving, a static
//! member dying mid-handover, kill -9 at random points, injected aborts
//! with a batch polled ahead, a wiped state directory, a record cache far
//! too small — and bad records dead-lettered while processing goes on.
//! Commits send what `linger.ms` holds back instead of waiting it out.
//!
//! The fixture (names, events, the exact folds) is `social_metrics`.
//! Fencing, where tasks start reading, frozen brokers and startup have
//! files of their own.

mod social_metrics;
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use social_metrics::*;
use support::*;

use streamfold::testkit::article as example;

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
    // The first member timed its part in both rebalances: its join, and
    // giving tasks up to the second, from the revocation (or the loss of
    // its assignment, should its session have lapsed meanwhile) to the
    // assignment after it; and the callback that gave them up.
    first.wait_metric(
        "streamfold_runtime_rebalance_duration_seconds_count",
        Duration::from_secs(60),
        |n| n >= 2.0,
    );
    let text = first.metrics_text();
    // A series for each kind of callback that happened: one of the two
    // may have none.
    let callbacks = |event: &str| {
        find_metric(
            &text,
            &format!(
                r#"streamfold_runtime_rebalance_callback_duration_seconds_count{{event="{event}"}}"#
            ),
        )
        .unwrap_or(0.0)
    };
    assert!(callbacks("revoked") + callbacks("lost") >= 1.0, "{text}");
    assert!(parse_metric(&text, "streamfold_runtime_rebalance_duration_seconds_sum") > 0.0);
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
        app.wait_metric(
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
/// waiting the linger out. The linger here is twice as long as the test
/// waits for the group to commit its whole input: a commit that waited it
/// out would commit nothing in time, on any machine. librdkafka ignores
/// the linger only while a call of `rd_kafka_flush` lasts, and
/// rust-rdkafka's `flush` makes its calls last no time. (librdkafka wants
/// the linger below the message timeout, and a transactional producer's
/// message timeout within its transaction timeout: both 15 minutes here,
/// the longest transaction the broker allows.)
#[test]
fn a_commit_does_not_wait_out_the_producer_s_linger() {
    let _serial = serial();
    let names = Names::new("linger");
    let accounts = 200;
    let end = produce_backlog(&names, accounts);
    let dir = temp_dir();
    let linger = Duration::from_secs(600);
    let mut config = names.app("a", dir.path().join("state"), true);
    with_transaction_timeout(&mut config, dir.path(), "15m");
    config.args = vec![
        "-X".into(),
        format!("linger.ms={}", linger.as_millis()),
        "-X".into(),
        "message.timeout.ms=900000".into(),
    ];
    let app = App::start(&config, dir.path());
    wait_committed_to(&app, &names.app, &names.source, &end, linger / 2);
    let outputs = read_to_end(&names.folded, Duration::from_secs(60));
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
    eprintln!(
        "{count} flushes with a linger of {linger:?}, mean {:.1} ms",
        sum / count * 1000.0
    );
    app.stop();
}
