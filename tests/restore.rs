//! Restore when the world changed under the state: a topology whose input
//! left (a `key_by` removed) restoring from scratch, a changelog that was
//! re-created behind the state's back, and a changelog holding a
//! transaction the broker has not decided yet.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use support::*;

use streamfold::testkit::article::METRICS;

const ACCOUNTS: u64 = 60;
const EVENTS: u64 = 600;

/// The social-metrics fold, with or without `key_by`.
fn topology(dir: &Path, app: &str, source: &str, key_by: bool) -> PathBuf {
    topology_with(dir, app, source, key_by, "100ms", "earliest")
}

/// [`topology`] with its commit interval and the source's `offset_reset`.
fn topology_with(
    dir: &Path,
    app: &str,
    source: &str,
    key_by: bool,
    commit_interval: &str,
    offset_reset: &str,
) -> PathBuf {
    let path = dir.join(format!("topology-{key_by}.yaml"));
    let key_by = if key_by { "key_by: /account_id" } else { "" };
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ commit_interval: {commit_interval} }}
sources:
  post_metrics: {{ topic: {source}, format: json, offset_reset: {offset_reset} }}
nodes:
  fold_account:
    type: fold
    input: post_metrics
    {key_by}
    fields:
      metrics: {{ rule: key_union, from: /metrics }}
    quiet_for: 10m
    max_wait: 1h
    max_events: 1000
sinks:
  folded: {{ topic: {app}-folded, input: fold_account, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    path
}

fn config(topology: PathBuf, state: PathBuf) -> AppConfig {
    AppConfig {
        topology,
        instance: "a".into(),
        state_dir: state,
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    }
}

/// Events keyed by their post, not their account: `key_by` must send
/// every one through the repartition topic to reach its account's task.
fn produce_by_post(source: &str) -> Vec<i64> {
    let producer = TestProducer::new();
    for i in 0..EVENTS {
        let value = json!({
            "post_id": format!("post_{i}"),
            "account_id": format!("account_{}", i % ACCOUNTS),
            "metrics": {METRICS[(i % 6) as usize]: i},
        });
        producer.send_json(source, &format!("post_{i}"), &value);
    }
    producer.flush();
    producer.ends(source, 4)
}

/// State a `key_by` fold built, restored from scratch by a topology
/// without that `key_by` (its repartition topic no longer an input): the
/// restore applies every committed changelog record whatever input it came
/// from, and every open fold comes back.
#[test]
fn a_removed_key_by_does_not_drop_the_state_it_built() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-keyby");
    let source = unique("post-metric-updated");
    create_topic(&source, 4);
    let end = produce_by_post(&source);

    let with_key_by = App::start(
        &config(
            topology(dir.path(), &app, &source, true),
            dir.path().join("state"),
        ),
        dir.path(),
    );
    wait_committed_to(&with_key_by, &app, &source, &end, Duration::from_secs(120));
    // Every event went through the repartition topic and was folded in a
    // committed transaction (counters are published as of commits).
    with_key_by.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(120),
        |n| n == EVENTS as f64,
    );
    let open = with_key_by.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(120),
        |n| n == ACCOUNTS as f64,
    );
    with_key_by.stop();

    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    let without = App::start(
        &config(
            topology(dir.path(), &app, &source, false),
            dir.path().join("state"),
        ),
        dir.path(),
    );
    // Every open fold comes back (a restore that dropped some never gets
    // there, and the wait fails with the value it saw).
    without.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(120),
        |n| n == open,
    );
    without.stop();
}

/// Keyed by account (no repartition needed): every account's events,
/// folded by a first run that stops with every fold open; the config to
/// start the next run with.
fn run_until_every_account_has_an_open_fold(dir: &Path, app: &str) -> AppConfig {
    let source = unique("post-metric-updated");
    create_topic(&source, 4);
    let config = config(topology(dir, app, &source, true), dir.join("state"));
    run_over(&config, app, &source, 0..EVENTS);
    config
}

/// Produces `events` keyed by account (`<prefix>_<i % ACCOUNTS>`); the
/// end offsets of the 4 partitions.
fn produce_accounts(source: &str, prefix: &str, events: std::ops::Range<u64>) -> Vec<i64> {
    let producer = TestProducer::new();
    for i in events {
        let account = format!("{prefix}_{}", i % ACCOUNTS);
        let value = json!({"account_id": account, "metrics": {METRICS[(i % 6) as usize]: i}});
        producer.send_json(source, &account, &value);
    }
    producer.flush();
    producer.ends(source, 4)
}

/// Runs `config` until it has folded `events` (keyed by account) and
/// every account has an open fold, then stops it.
fn run_over(config: &AppConfig, app: &str, source: &str, events: std::ops::Range<u64>) {
    let end = produce_accounts(source, "account", events);
    let first = App::start(config, config.state_dir.parent().unwrap());
    wait_committed_to(&first, app, source, &end, Duration::from_secs(120));
    first.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(120),
        |n| n == ACCOUNTS as f64,
    );
    first.stop();
}

/// A changelog re-created (empty) while the local
/// state still holds offsets into the old one. The restore consumer must
/// not jump to the end and keep the stale state: it warns and restores in
/// full from the earliest offset.
#[test]
fn a_re_created_changelog_means_a_full_restore_with_a_warning() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-recreated");
    let config = run_until_every_account_has_an_open_fold(dir.path(), &app);

    // Someone deletes and re-creates the changelogs.
    let changelogs: Vec<String> = ["open", "timers", "repartition-seen"]
        .iter()
        .map(|s| format!("{app}-fold_account-{s}-changelog"))
        .collect();
    for topic in &changelogs {
        delete_topic(topic);
        create_topic_with(topic, 4, &[("cleanup.policy", "compact")]);
    }

    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    // Each running task publishes its gauge (restoring ones publish none).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let open = loop {
        let text = second.metrics_text();
        let series = text
            .lines()
            .filter(|l| l.starts_with("streamfold_fold_open_folds{"))
            .count();
        if series == 4 {
            break parse_metric(&text, "streamfold_fold_open_folds");
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = second.stop();
    assert!(
        log.contains("wiping the local state and restoring it in full"),
        "the restore warned; log:\n{log}"
    );
    assert_eq!(
        open, 0.0,
        "the state is what the changelog holds, not what the old one held"
    );
}

/// Truncated: the changelog was truncated
/// (DeleteRecords, or retention on a changelog that is not compacted) past
/// where an old copy of the local state stopped. The state is no prefix of
/// the changelog any more: the restore warns, wipes it and restores in
/// full from the earliest offset the topic still holds, instead of keeping
/// the stale state (the restore consumer used to jump to the end).
#[test]
fn a_changelog_truncated_past_the_state_means_a_full_restore_with_a_warning() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-truncated");
    let source = unique("post-metric-updated");
    create_topic(&source, 4);
    let config = config(
        topology(dir.path(), &app, &source, true),
        dir.path().join("state"),
    );
    run_over(&config, &app, &source, 0..EVENTS);
    let old = dir.path().join("state-then");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&config.state_dir)
        .arg(&old)
        .status()
        .unwrap();
    assert!(copied.success());
    // More events reach every account's fold: the changelog grows.
    run_over(&config, &app, &source, EVENTS..EVENTS + ACCOUNTS);

    // The open-fold changelog is truncated to its end (by an operator:
    // Kafka refuses DeleteRecords on a topic that is only compacted, so
    // its policy allows deletion for the while), and the old copy of the
    // state comes back.
    let changelog = format!("{app}-fold_account-open-changelog");
    let ends: Vec<i64> = (0..4).map(|p| partition_end(&changelog, p)).collect();
    alter_topic_config(&changelog, &[("cleanup.policy", "compact,delete")]);
    delete_records(&changelog, &ends);
    alter_topic_config(&changelog, &[("cleanup.policy", "compact")]);
    std::fs::remove_dir_all(&config.state_dir).unwrap();
    std::fs::rename(&old, &config.state_dir).unwrap();

    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    let log = second.stop();
    assert!(
        log.contains("wiping the local state and restoring it in full"),
        "the restore warned; log:\n{log}"
    );
    let open: usize = dump_state(&config.state_dir, &app)
        .iter()
        .filter(|(store, _)| store.ends_with("/fold_account-open"))
        .map(|(_, entries)| entries.len())
        .sum();
    assert_eq!(
        open, 0,
        "the state is what the truncated changelog holds (nothing), not the stale copy's {ACCOUNTS} folds"
    );
}

/// The other side of the re-created changelog: a plain restart over the
/// same state directory keeps the local state and replays nothing.
#[test]
fn a_restart_over_its_own_state_keeps_it() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-restart");
    let config = run_until_every_account_has_an_open_fold(dir.path(), &app);

    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    second.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == ACCOUNTS as f64
    });
    let log = second.stop();
    assert!(
        !log.contains("wiping the local state"),
        "the state was kept; log:\n{log}"
    );
    assert_eq!(
        restored(&log),
        0,
        "nothing to replay: the local state was up to date; log:\n{log}"
    );
    // The open folds above came from the gauges saved at the
    // last commit; no task counted its stores.
    let started: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Task running."))
        .collect();
    assert_eq!(started.len(), 4, "log:\n{log}");
    assert!(
        started.iter().all(|l| l.contains("gauges_counted=false")),
        "a task counted its stores; log:\n{log}"
    );
}

/// The gauges saved with a task's state describe that state
/// only. Local state a restore moves forward (here, a copy taken before a
/// later run opened folds for more accounts) has its stores counted again
/// at start: the open folds are all of them, not what the copy saved.
#[test]
fn a_restore_that_replays_records_counts_the_stores_again() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-recount");
    let source = unique("post-metric-updated");
    create_topic(&source, 4);
    let config = config(
        topology(dir.path(), &app, &source, false),
        dir.path().join("state"),
    );
    run_over(&config, &app, &source, 0..EVENTS);
    let behind = dir.path().join("state-behind");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&config.state_dir)
        .arg(&behind)
        .status()
        .unwrap();
    assert!(copied.success());

    // A later run opens a fold for as many accounts again.
    let end = produce_accounts(&source, "late_account", 0..EVENTS);
    let later = App::start(&config, dir.path());
    wait_committed_to(&later, &app, &source, &end, Duration::from_secs(120));
    later.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(120),
        |n| n == 2.0 * ACCOUNTS as f64,
    );
    later.stop();

    // Back to the state (and saved gauges) from before that run.
    std::fs::remove_dir_all(&config.state_dir).unwrap();
    std::fs::rename(&behind, &config.state_dir).unwrap();
    let third = App::start(&config, dir.path());
    third.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(120),
        |n| n == 2.0 * ACCOUNTS as f64,
    );
    let log = third.stop();
    assert!(
        restored(&log) >= ACCOUNTS,
        "the later run's folds came from the changelog; log:\n{log}"
    );
    assert!(
        log.lines()
            .filter(|l| l.contains("Task running."))
            .any(|l| l.contains("gauges_counted=true")),
        "no task counted its stores; log:\n{log}"
    );
}

/// Changelog records the restores of a run applied.
fn restored(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("Restore finished."))
        .filter_map(|l| l.split("restored=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A changelog whose cleanup policy lets retention delete records
/// (`delete`, or `compact,delete`) loses old state, so a restore from it
/// would be silently incomplete. Startup refuses it and says how to fix it.
#[test]
fn a_changelog_that_is_not_compacted_is_refused_at_startup() {
    // `compact,delete` compacts, and also deletes by retention what a
    // restore from scratch needs.
    for policy in ["compact,delete", "delete"] {
        let _serial = serial();
        let dir = temp_dir();
        let app = unique("sf-delete-policy");
        let source = unique("post-metric-updated");
        create_topic(&source, 4);
        let changelog = format!("{app}-fold_account-open-changelog");
        create_topic_with(&changelog, 4, &[("cleanup.policy", policy)]);
        let started = App::start(
            &config(
                topology(dir.path(), &app, &source, true),
                dir.path().join("state"),
            ),
            dir.path(),
        );
        let (status, log) = started.wait_exit(Duration::from_secs(60));
        assert!(!status.success(), "{policy}: {log}");
        assert!(
            log.contains(&format!(
                "changelog topics must be compacted only, or retention deletes state a restore needs: `{changelog}` (cleanup.policy={policy})"
            )) && log.contains("cleanup.policy=compact"),
            "{policy}: the error names the topic and the fix; log:\n{log}"
        );
    }
}

/// Event time travels with the changelog. An
/// event-clock fold on a partition that goes idle is closed by
/// `idle_advance` on whichever host runs the task next, even one whose
/// state came from a from-scratch restore, with no record arriving there.
#[test]
fn event_time_resumes_on_a_new_host_and_idle_folds_close() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-event-time");
    let source = unique("timed-events");
    create_topic(&source, 2);
    let path = dir.path().join("topology.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing:
  commit_interval: 100ms
  idle_advance: ${{IDLE_ADVANCE}}
sources:
  events: {{ topic: {source}, format: json, timestamp: /at }}
nodes:
  fold:
    type: fold
    input: events
    fields: {{ n: {{ rule: count }} }}
    quiet_for: 10s
    clock: event
sinks:
  out: {{ topic: {app}-out, input: fold, create: true }}
dead_letter: {{ topic: {app}-dlq }}
"
        ),
    )
    .unwrap();
    let at = 1_735_689_600_000i64;
    let producer = TestProducer::new();
    for k in 0..20 {
        producer.send_json(&source, &format!("k{k}"), &json!({"at": at}));
    }
    producer.flush();
    let end = producer.ends(&source, 2);
    let host = |state: &str, idle_advance: &str| {
        let mut config = config(path.clone(), dir.path().join(state));
        config
            .env
            .push(("IDLE_ADVANCE".into(), idle_advance.into()));
        config
    };
    // The first host would move event time only after an hour idle.
    let first = App::start(&host("state-a", "1h"), dir.path());
    wait_committed_to(&first, &app, &source, &end, Duration::from_secs(120));
    first.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == 20.0
    });
    first.stop();

    // A new host, no local state: the changelogs restore the folds, and
    // event time resumes where the last commit left it, so after 2 s idle
    // it runs with the wall clock and the folds go quiet 10 s later.
    let second = App::start(&host("state-b", "2s"), dir.path());
    let closed = second.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(60),
        |n| n == 20.0,
    );
    second.stop();
    assert_eq!(closed, 20.0);
}

/// The group's offsets are gone (deleted, or expired after
/// `offsets.retention.minutes`) and the state is restored from scratch:
/// read_committed shows the restore only what committed, so it restores
/// all of it, the last transaction of each changelog partition included.
#[test]
fn deleted_group_offsets_lose_no_state() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-offsets-gone");
    let source = unique("post-metric-updated");
    create_topic(&source, 4);
    // A commit interval long enough that the last round of events is
    // mostly one transaction per task.
    let topology = topology_with(dir.path(), &app, &source, true, "3s", "earliest");
    let config = config(topology, dir.path().join("state"));
    let first = App::start(&config, dir.path());
    first.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    let producer = TestProducer::new();
    let round = |from: u64, to: u64| {
        for i in from..to {
            let account = format!("account_{}", i % ACCOUNTS);
            let value = json!({"account_id": account, "metrics": {METRICS[(i % 6) as usize]: i}});
            producer.send_json(&source, &account, &value);
        }
        producer.flush();
        let end = producer.ends(&source, 4);
        wait_committed_to(&first, &app, &source, &end, Duration::from_secs(120));
    };
    round(0, EVENTS);
    // The last round: one more event for every account.
    round(EVENTS, EVENTS + ACCOUNTS);
    first.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(60),
        |n| n == (EVENTS + ACCOUNTS) as f64,
    );
    first.stop();
    let live = dump_state(&dir.path().join("state"), &app);

    delete_group(&app);
    // From `latest` now, so that nothing is read again once the offsets
    // are gone and the restored state can be looked at as it was restored.
    topology_with(dir.path(), &app, &source, true, "3s", "latest");
    assert_eq!(
        group_committed(&app, &source, 4),
        vec![-1; 4],
        "the offsets are gone"
    );
    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 4.0,
    );
    let log = second.stop();
    let restored = dump_state(&dir.path().join("state"), &app);

    assert!(!live.is_empty(), "the live run left state");
    assert_same_state(&live, &restored, "restored after the group was deleted");
    let _ = log;
}

/// A changelog record with a header name that is not UTF-8 (another client
/// wrote to the changelog topic; Kafka allows any bytes, rust-rdkafka's
/// header reader panics on them) does not stop a restore: here a copy of
/// a real changelog record with such a header added, restored from scratch.
#[test]
fn a_changelog_header_name_that_is_not_utf8_does_not_stop_a_restore() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-raw-changelog-header");
    let config = run_until_every_account_has_an_open_fold(dir.path(), &app);
    let changelog = format!("{app}-fold_account-open-changelog");
    let records = read_to_end(&changelog, Duration::from_secs(30));
    let last = records
        .iter()
        .rfind(|r| r.partition == 0 && r.key.is_some() && r.payload.is_some())
        .expect("a changelog record of partition 0");
    let mut headers: Vec<(&[u8], &[u8])> = last
        .headers
        .iter()
        .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
        .collect();
    headers.push((b"tr\xffce", b"t"));
    let producer = TestProducer::new();
    producer.send_raw_headers(
        &changelog,
        Some(0),
        last.key.as_deref().unwrap().as_bytes(),
        last.payload.as_deref().unwrap(),
        &headers,
    );
    producer.flush();

    std::fs::remove_dir_all(&config.state_dir).unwrap();
    let second = App::start(&config, dir.path());
    second.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(120),
        |n| n == ACCOUNTS as f64,
    );
    let log = second.stop();
    assert!(
        restored(&log) >= ACCOUNTS,
        "restored from the changelog; log:\n{log}"
    );
}

/// The application of the undecided-transaction test: per-account order
/// with Lamport clocks (a state that lost updates repeats clocks).
fn payments_config(dir: &Path, names: &PaymentNames, state: &str) -> AppConfig {
    AppConfig {
        topology: repo().join("topologies/partitioned-processing.yaml"),
        instance: "a".into(),
        state_dir: dir.join(state),
        env: env_vars(&[
            ("STREAMFOLD_APP", &names.app),
            ("PAYMENTS_TOPIC", &names.payments),
            ("BALANCES_TOPIC", &names.balances),
            ("DEAD_LETTER_TOPIC", &names.dlq),
            ("STREAMFOLD_STATIC_MEMBERSHIP", "false"),
        ]),
        txn_header: false,
        args: Vec::new(),
    }
}

struct PaymentNames {
    app: String,
    payments: String,
    balances: String,
    dlq: String,
}

const PAYMENT_ACCOUNTS: u64 = 10;

/// Settled payments `range`, the accounts taking turns, each with its
/// account's next sequence.
fn produce_payments(producer: &TestProducer, topic: &str, range: std::ops::Range<u64>) {
    for i in range {
        let account = format!("acc-{}", i % PAYMENT_ACCOUNTS);
        let value = json!({"payment_id": format!("p{i}"), "account_id": account,
            "status": "settled", "amount": 1 + i % 7, "balance_cents": i,
            "sequence": 1 + i / PAYMENT_ACCOUNTS});
        producer.send_json(topic, &account, &value);
    }
    producer.flush();
}

/// A changelog partition can end, for a read_committed reader, before
/// records the task's state already holds: a transaction is still
/// undecided there. The broker has accepted a commit and not yet written
/// its markers (it restarted in between), or an abandoned owner's
/// transaction awaits its timeout. Here a stranger's transaction, left
/// open on every partition of the changelog, stands in for it, and the
/// application commits more state after it.
///
/// Restarted with its state, the task must not take the short end for a
/// truncated changelog and wipe its state; restarted with none, its
/// restore must not stop at that end. Either would leave committed updates
/// out of the state, and the Lamport clocks of the accounts would repeat.
/// The restores wait for the verdict (here an abort), then every payment
/// is in exactly one committed balance, with clocks 1, 2, 3 ….
#[test]
fn a_restore_waits_for_a_transaction_undecided_on_its_changelog() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    let _serial = serial();
    let dir = temp_dir();
    let names = PaymentNames {
        app: unique("sf-undecided"),
        payments: unique("payments"),
        balances: unique("balances"),
        dlq: unique("dlq"),
    };
    let partitions = 2;
    create_topic(&names.payments, partitions);
    let producer = TestProducer::new();
    // Payments `range`, then the wait until `app` has committed them all.
    let pay = |app: &App, range: std::ops::Range<u64>| {
        produce_payments(&producer, &names.payments, range);
        let end = producer.ends(&names.payments, partitions);
        wait_committed_to(
            app,
            &names.app,
            &names.payments,
            &end,
            Duration::from_secs(180),
        );
    };

    let first = App::start(&payments_config(dir.path(), &names, "state"), dir.path());
    pay(&first, 0..200);

    let changelog = format!("{}-account_balance-latest-changelog", names.app);
    let stranger: BaseProducer = plain_client()
        .set("transactional.id", unique("undecided"))
        .create()
        .unwrap();
    stranger.init_transactions(Duration::from_secs(30)).unwrap();
    stranger.begin_transaction().unwrap();
    for partition in 0..partitions {
        stranger
            .send(
                BaseRecord::to(&changelog)
                    .partition(partition)
                    .key("undecided")
                    .payload("never applied"),
            )
            .unwrap();
    }
    stranger.flush(Duration::from_secs(30)).unwrap();

    pay(&first, 200..400);
    first.stop();

    // With its state: the changelog ends (read_committed) before it.
    let kept = App::start(&payments_config(dir.path(), &names, "state"), dir.path());
    std::thread::sleep(Duration::from_secs(8));
    let kept_log = kept.stop();
    // Without state: the restore reaches that end.
    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    let fresh = App::start(&payments_config(dir.path(), &names, "state"), dir.path());
    // It waits, and says so (every 15 s), naming the changelog.
    let said = fresh.wait_log_lines(
        "The restore is waiting for a transaction on the changelog",
        1,
        Duration::from_secs(60),
    );
    assert!(said[0].contains(&changelog), "{said:?}");
    stranger.abort_transaction(Duration::from_secs(30)).unwrap();

    pay(&fresh, 400..600);
    let balances = read_to_end(&names.balances, Duration::from_secs(60));
    for (account, records) in by_key(&balances) {
        let got: Vec<(String, u64)> = records
            .iter()
            .map(|r| {
                let v = r.json();
                (
                    v["payment_id"].as_str().unwrap().to_string(),
                    v["lamport"].as_u64().unwrap(),
                )
            })
            .collect();
        let number: u64 = account.trim_start_matches("acc-").parse().unwrap();
        let want: Vec<(String, u64)> = (0..600)
            .filter(|i| i % PAYMENT_ACCOUNTS == number)
            .enumerate()
            .map(|(n, i)| (format!("p{i}"), n as u64 + 1))
            .collect();
        assert_eq!(
            got,
            want,
            "{account}: its committed balances (payment, Lamport clock); log:\n{}",
            fresh.log_text()
        );
    }
    assert_eq!(by_key(&balances).len() as u64, PAYMENT_ACCOUNTS);
    fresh.stop();
    assert!(
        !kept_log.contains("wiping the local state"),
        "state wiped for a changelog that only had a transaction open:\n{kept_log}"
    );
}
