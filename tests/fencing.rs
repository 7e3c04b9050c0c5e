//! Fencing on a real broker. An instance frozen mid-stream (by SIGSTOP,
//! or by a `freeze` fault inside a transaction) and replaced by a process
//! with its instance id finds itself fenced when it wakes and stops —
//! static or dynamic member, frozen within or past its transaction
//! timeout — without rejoining the group or fencing its successor in
//! turn; nothing is lost or doubled beyond its own never-committed
//! transaction. An instance alone in its group, whose overdue transaction
//! the coordinator aborted, was not fenced: it goes on. Nor does a process
//! take a member of its own, or an earlier process's, that the group lists
//! under an id it was never given, for a successor.
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

/// A member with this process's own client id that the process was never
/// told of: librdkafka rejoining for it after a session timeout, whose
/// JoinGroup answer has not reached it yet when a failed transaction asks
/// the group who holds the instance. That member is this process, not a
/// successor: the instance rejoins and goes on, and the output is exact.
/// (Here the member is another consumer, given the instance's client id,
/// so the answer does not depend on timing.)
#[test]
fn a_member_under_this_process_s_own_client_id_is_not_taken_for_a_successor() {
    let (app, log, names, _dir) = failure_beside_a_member("own-client-id", |own| own.to_string());
    assert_rejoined(app, &log, &names);
}

/// A member left by an earlier process with this instance id (killed, its
/// session not over yet) is not a successor either: this process replaced
/// it, and goes on after a failed transaction.
#[test]
fn a_member_of_an_earlier_process_with_this_instance_id_is_not_taken_for_a_successor() {
    let (app, log, names, _dir) =
        failure_beside_a_member("earlier-process", |own| shifted_process(own, -60_000));
    assert_rejoined(app, &log, &names);
}

/// A member of a process with this instance id started after this one is
/// its successor: after a failed transaction the instance stops as
/// fenced, and does not rejoin (which would fence the successor in turn).
#[test]
fn a_member_of_a_later_process_with_this_instance_id_is_a_successor() {
    let (app, log, _, _dir) =
        failure_beside_a_member("later-process", |own| shifted_process(own, 60_000));
    assert!(log.contains("Task running."), "{log}");
    expect_fenced(app);
}

/// The client id of a process of the same instance started `shift_ms`
/// milliseconds from the one whose group consumer has `own`
/// (`<app>-<instance>-p<start, 12 hex digits of Unix milliseconds><4 hex
/// digits>`).
fn shifted_process(own: &str, shift_ms: i64) -> String {
    let (instance, process) = own.rsplit_once("-p").expect("a process suffix");
    assert_eq!(process.len(), 16, "{own}");
    let started = i64::from_str_radix(&process[..12], 16).expect("hex milliseconds");
    format!("{instance}-p{:012x}{}", started + shift_ms, &process[12..])
}

/// Starts an instance whose first transaction will fail fatally, waits
/// until it runs its four tasks, then has another consumer join its group
/// with the client id `impostor` makes of the instance's consumer's (that
/// consumer subscribes to a topic of its own, so it takes no task), and
/// sends the input once the group holds both. Returns the instance (the
/// other consumer gone), its log once it has either stopped or committed
/// every input record, the test's names, and the directory of its state
/// and log.
fn failure_beside_a_member(
    name: &str,
    impostor: impl Fn(&str) -> String,
) -> (App, String, Names, tempfile::TempDir) {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    let _serial = serial();
    let names = Names::new(name);
    let accounts = 300;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 4);
    let elsewhere = unique("elsewhere");
    create_topic(&elsewhere, 1);
    let dir = temp_dir();
    let mut config = names.app("v", dir.path().join("state"), true);
    config
        .args
        .extend(["--inject-fault".into(), "commit:fatal@1".into()]);
    let app = App::start(&config, dir.path());
    app.wait_log_lines("Task running.", 4, Duration::from_secs(120));

    let group = |client: &BaseConsumer| {
        let groups = client
            .fetch_group_list(Some(&names.app), Duration::from_secs(10))
            .expect("the group is described");
        let group = groups.groups().first().expect("the group exists");
        let members: Vec<String> = group
            .members()
            .iter()
            .map(|m| m.client_id().to_string())
            .collect();
        (group.state().to_string(), members)
    };
    let observer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .create()
        .unwrap();
    let (_, members) = group(&observer);
    let prefix = format!("{}-{}", names.app, config.instance);
    let own = members
        .iter()
        .find(|c| c.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no member of the group is the instance: {members:?}"))
        .clone();

    let impostor_id = impostor(&own);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let member = {
        let (stop, group_id, topic, client_id) = (
            stop.clone(),
            names.app.clone(),
            elsewhere.clone(),
            impostor_id.clone(),
        );
        std::thread::spawn(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &broker().bootstrap)
                .set("group.id", &group_id)
                .set("client.id", &client_id)
                .set("partition.assignment.strategy", "cooperative-sticky")
                .set("enable.auto.commit", "false")
                .create()
                .unwrap();
            consumer.subscribe(&[topic.as_str()]).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = consumer.poll(Duration::from_millis(100));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (state, members) = group(&observer);
        if state == "Stable" && members.len() == 2 && members.contains(&impostor_id) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle with the impostor: {state} {members:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total, accounts);
    let ends = producer.ends(&names.source, 4);
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let log = app.log_text();
        if log.contains("this instance was fenced")
            || group_committed(&names.app, &names.source, 4) == ends
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    member.join().unwrap();
    let log = app.log_text();
    eprintln!("the instance's client id {own}, the other member's {impostor_id}");
    (app, log, names, dir)
}

/// The instance's transaction failed, it rejoined with a new producer and
/// went on; every account folded exactly once.
fn assert_rejoined(app: App, log: &str, names: &Names) {
    assert!(!log.contains("this instance was fenced"), "{log}");
    app.assert_running();
    assert!(
        log.contains("The producer is unusable; closing the tasks and rejoining the group."),
        "the injected failure happened: {log}"
    );
    app.wait_metric("streamfold_fold_open_folds", Duration::from_secs(60), |n| {
        n == 0.0
    });
    let outputs = read_to_end(&names.folded, Duration::from_secs(60));
    assert_exact(&outputs, 300);
    app.stop();
}
