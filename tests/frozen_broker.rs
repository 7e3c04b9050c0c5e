//! A broker that stops answering without closing its connections (frozen
//! with SIGSTOP, as a stalled machine or a long pause of its JVM leaves
//! it) while records wait for its acknowledgements: librdkafka's producer
//! waits for it without spinning (the vendored fix), and a commit waiting
//! on it commits once the broker wakes, losing and doubling nothing. (A
//! broker that goes down, its connections refused, is
//! `broker_outages.rs`.)
//!
//! The fixture (names, events, the exact folds) is `social_metrics`.

mod social_metrics;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use social_metrics::*;
use support::*;

/// The longest a broker thread of the patched librdkafka sleeps while a
/// partition has a batch ready behind a full in-flight window
/// (`rd_kafka_toppar_blocked_wakeup`, vendor/README.md). Waiting, the
/// thread turns its loop at most once per this, and once per response,
/// request or timer of its own.
const BLOCKED_LOOK_EVERY: Duration = Duration::from_millis(10);

/// The turns of each broker thread's loop (`wakeups` in librdkafka's
/// statistics), by broker, at librdkafka's monotonic clock `ts`
/// (microseconds).
#[derive(Clone, Debug, Default)]
struct Turns {
    ts: i64,
    by_broker: BTreeMap<String, u64>,
}

/// A producer context that keeps the latest [`Turns`] librdkafka
/// reported, and how many reports came.
#[derive(Default)]
struct CountsTurns(Mutex<(u64, Turns)>);

impl CountsTurns {
    fn latest(&self) -> (u64, Turns) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ClientContext for CountsTurns {
    fn stats(&self, statistics: Statistics) {
        let turns = Turns {
            ts: statistics.ts,
            by_broker: statistics
                .brokers
                .iter()
                .map(|(name, broker)| (name.clone(), broker.wakeups.unwrap_or(0)))
                .collect(),
        };
        let mut latest = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *latest = (latest.0 + 1, turns);
    }
}

impl ProducerContext for CountsTurns {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Serves `producer`'s events until librdkafka has reported statistics
/// taken after this call began; those.
fn next_turns(producer: &BaseProducer<CountsTurns>) -> Turns {
    let (seen, _) = producer.context().latest();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        producer.poll(Duration::from_millis(20));
        let (now_seen, turns) = producer.context().latest();
        // The second report since the call: the first may have been taken
        // before it and waited in the queue.
        if now_seen >= seen + 2 {
            return turns;
        }
        assert!(
            Instant::now() < deadline,
            "librdkafka reported no statistics for 10 s"
        );
    }
}

/// The producer half of the test below, made deterministic: a
/// transactional producer with streamfold's properties has records of one
/// partition in flight when the broker freezes, and one more record queued
/// behind them. librdkafka sends a partition nothing more while five of
/// its messages are unacknowledged, yet its broker thread used to schedule
/// its next look for the moment the queued record's `linger.ms` ran out,
/// that is at once, again and again: it turned its loop, polling its
/// socket with a zero timeout, until the broker answered (a full core,
/// seen in CI before the vendored fix).
///
/// Judged by librdkafka's own count of those turns, not by time: waiting,
/// a broker thread turns at most once per [`BLOCKED_LOOK_EVERY`], and once
/// per event of its own, which a frozen broker and an idle producer do
/// not make; the bound allows ten times the first. A turn of a spinning
/// thread takes microseconds: to stay within the bound, it would have to
/// be given less than a thousandth of a core for the whole freeze.
#[test]
fn a_producer_waiting_for_a_frozen_broker_to_acknowledge_does_not_spin() {
    let _serial = serial();
    let names = Names::new("frozen-producer");
    create_topic(&names.source, 1);
    let me = std::process::id();
    let threads_before = thread_cpu_seconds(me);
    let producer: BaseProducer<CountsTurns> = plain_client()
        .set("enable.idempotence", "true")
        .set("transactional.id", format!("{}-txn", names.source))
        .set("linger.ms", "5")
        .set("statistics.interval.ms", "100")
        .create_with_context(CountsTurns::default())
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
    let cpu_start = thread_cpu_seconds(me);
    let start = next_turns(&producer);
    let freeze = Duration::from_secs(3);
    let until = Instant::now() + freeze;
    while Instant::now() < until {
        producer.poll(Duration::from_millis(100));
    }
    let end = next_turns(&producer);
    let cpu_end = thread_cpu_seconds(me);
    broker().thaw();
    let producer_threads = |all: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        all.into_iter()
            .filter(|(thread, _)| !threads_before.contains_key(thread))
            .collect()
    };
    let busiest = busiest_threads(&producer_threads(cpu_start), &producer_threads(cpu_end));
    // librdkafka's clock, so the bound follows the window measured.
    let window = Duration::from_micros((end.ts - start.ts).max(0) as u64);
    let allowed = 10 * (window.as_micros() / BLOCKED_LOOK_EVERY.as_micros()) as u64;
    let turns: BTreeMap<&String, u64> = end
        .by_broker
        .iter()
        .map(|(broker, &at_end)| {
            let at_start = start.by_broker.get(broker).copied().unwrap_or(0);
            (broker, at_end.saturating_sub(at_start))
        })
        .collect();
    eprintln!(
        "broker threads' turns in {window:?} of freeze: {turns:?}, at most {allowed} allowed \
         (CPU by thread: {busiest})"
    );
    producer.flush(timeout).unwrap();
    producer.commit_transaction(timeout).unwrap();
    assert!(
        window >= freeze && !turns.is_empty(),
        "the statistics did not cover the freeze ({window:?}: {turns:?}), so nothing was measured"
    );
    for (broker, turns) in &turns {
        assert!(
            *turns <= allowed,
            "{broker}'s thread turned its loop {turns} times in {window:?} waiting for a frozen \
             broker's acknowledgements, more than the {allowed} its timers allow: it spins \
             (CPU by thread: {busiest})"
        );
    }
    assert_eq!(
        read_to_end(&names.source, timeout).len(),
        21,
        "every record committed once"
    );
}

/// A broker that stops answering (frozen with SIGSTOP: connections stay
/// open, nothing is acknowledged) while a transaction is open: the commit
/// waits for the acknowledgements, and once the broker wakes, the
/// transaction commits and nothing is lost or doubled. What the wait costs
/// in CPU is printed, not judged (benches/frozen_broker.rs measures it): a
/// wait that spins in the process makes no system call or context switch
/// that a count from outside could catch.
#[test]
fn a_commit_waiting_on_a_frozen_broker_commits_once_it_wakes_and_loses_nothing() {
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
    let mut caught = 0;
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
        let deadline = Instant::now() + Duration::from_secs(30);
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
                Instant::now() < deadline,
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
        let threads = thread_cpu_seconds(app.pid());
        std::thread::sleep(freeze);
        let busiest = busiest_threads(&threads, &thread_cpu_seconds(app.pid()));
        // Still open after three seconds with a commit interval of 100 ms:
        // the commit was waiting for the broker all along.
        let waited = open.is_subset(&open_transactions(&journal));
        broker().thaw();
        eprintln!(
            "slice {slice}: froze the broker for {freeze:?} with {open:?} open; the commit \
             waited: {waited}; CPU by thread: {busiest}"
        );
        caught += usize::from(waited);
    }
    assert!(
        caught > 0,
        "no freeze caught a commit waiting for the broker; log:\n{}",
        app.log_text()
    );
    let outputs = read_folded(&names, accounts);
    assert_exact_naming_transactions(&outputs, &TxnJournal::read(&journal), accounts);
    app.stop();
}

/// Thaws the broker when dropped, so that a failing test does not leave it
/// frozen for the next.
struct ThawOnDrop;

impl Drop for ThawOnDrop {
    fn drop(&mut self) {
        broker().thaw();
    }
}

/// SIGTERM while the broker, frozen, acknowledges nothing and the
/// producer's queue is full of records waiting for it: the instance stops
/// within the minute a supervisor gives it (the chaos harness's 60 s,
/// deploy/statefulset.yaml's) rather than wait out its records' timeout
/// (`transaction.timeout.ms`) and then an abort the broker does not answer
/// either: at the stop timeout (`--stop-timeout`, 45 s) it exits with
/// status 130. What it left open costs nothing: once the broker wakes, the
/// next instance folds every account exactly once.
#[test]
fn sigterm_with_the_producer_queue_full_behind_a_frozen_broker_stops_the_instance() {
    let _serial = serial();
    let names = Names::new("frozen-sigterm");
    let accounts = 400;
    let total = accounts * PER_ACCOUNT;
    create_topic(&names.source, 1);
    let dir = temp_dir();
    let mut config = names.app("a", dir.path().join("state"), true);
    // A queue of a few records is full as soon as nothing is acknowledged.
    config.args = vec!["-X".into(), "queue.buffering.max.messages=5".into()];
    let app = App::start(&config, dir.path());
    app.wait_metric(
        "streamfold_runtime_tasks_running",
        Duration::from_secs(120),
        |n| n == 1.0,
    );
    let producer = TestProducer::new();
    produce_range(&producer, &names.source, 0..total, accounts);
    let ends = producer.ends(&names.source, 1);
    // Input read, more of it fetched ahead: frozen, the broker stops the
    // acknowledgements, not the processing of what was fetched.
    app.wait_metric(
        "streamfold_runtime_records_consumed_total",
        Duration::from_secs(60),
        |n| n >= 1_000.0,
    );
    let thaw = ThawOnDrop;
    broker().freeze();
    std::thread::sleep(Duration::from_secs(3));
    signal(app.pid(), "TERM");
    let signalled = Instant::now();
    let (status, log) = app.wait_exit(Duration::from_secs(60));
    let took = signalled.elapsed();
    drop(thaw);
    let heeded = log
        .lines()
        .find(|l| l.contains("Shutting down"))
        .unwrap_or("(no `Shutting down` line)");
    eprintln!("stopped {took:?} after SIGTERM with {status}; {heeded}");
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("Not stopped within the stop timeout"), "{log}");

    // The broker back, the successor aborts what was left open and
    // processes it again.
    let successor = App::start(&config, dir.path());
    wait_committed_to(
        &successor,
        &names.app,
        &names.source,
        &ends,
        Duration::from_secs(180),
    );
    let outputs = read_folded(&names, accounts);
    assert_exact(&outputs, accounts);
    successor.stop();
}

/// The whole lines of the transaction journal at `path` (the process may
/// be writing the next).
fn journal_lines(path: &Path) -> Vec<String> {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').unwrap_or(0));
    text.lines().map(str::to_string).collect()
}

/// The transactions the journal at `path` shows begun, and those of them
/// not yet ended, by label, from one read.
fn transactions(path: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
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
fn open_transactions(path: &Path) -> BTreeSet<String> {
    transactions(path).1
}
