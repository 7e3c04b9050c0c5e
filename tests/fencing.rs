//! Fencing on a real broker. An instance frozen mid-stream (by SIGSTOP,
//! or by a `freeze` fault inside a transaction) and replaced by a process
//! with its instance id finds itself fenced when it wakes and stops —
//! static or dynamic member, frozen within or past its transaction
//! timeout — without rejoining the group or fencing its successor in
//! turn; nothing is lost or doubled beyond its own never-committed
//! transaction. An instance alone in its group, whose overdue transaction
//! the coordinator aborted, was not fenced: it goes on.
//!
//! The fixture (names, events, the exact folds) is `social_metrics`.

mod social_metrics;
mod support;

use std::time::Duration;

use social_metrics::*;
use support::*;

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

/// A dynamic member frozen inside a transaction past its session timeout
/// (but not its transaction timeout) loses its assignment, and its
/// transaction fails on waking; librdkafka rejoins the group for it at
/// once, under a new member id. That member, with this instance's client
/// id, is this very process, not a successor that took its id over: the
/// instance must go on with a new producer, and the output be exact.
#[test]
fn a_dynamic_member_frozen_past_its_session_timeout_rejoins_and_loses_nothing() {
    let _serial = serial();
    let names = Names::new("past-session");
    let accounts = 300;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total / 2, accounts);
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    config
        .args
        .extend(["--inject-fault".into(), "commit:freeze@2".into()]);
    let app = App::start(&config, dir.path());
    app.wait_frozen(Duration::from_secs(120));
    // Past the session timeout (10 s), well within the transaction's (60 s).
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
                with_transaction_timeout(&mut frozen, dir.path(), "2s");
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
