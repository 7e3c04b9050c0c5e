//! The commit cycle: the only module that begins, commits or aborts a
//! transaction, sends offsets, stamps changelog records, applies task state
//! after a commit, and rewinds the consumer after an abort.
//!
//! # The cycle (`exactly_once`)
//!
//! 1. **begin** — lazily, with the first record consumed or produced;
//! 2. **produce** — sink records, repartition records and dead letters as
//!    the tasks emit them;
//! 3. **changelog** — at commit, every running task's pending state changes
//!    go to its changelog partitions, collapsed per key, each stamped with
//!    the task's event time (see [`super::changelog`]);
//! 4. **offsets** — once every record is acknowledged, the tasks' input
//!    positions join the transaction (`send_offsets_to_transaction` with
//!    the consumer's group metadata);
//! 5. **commit** — the transaction commits;
//! 6. **apply** — only now are each task's pending changes written to its
//!    store, in one RocksDB batch with the changelog offsets they reached
//!    and the task's event time.
//!
//! Under `at_least_once` the same steps run without a transaction: outputs
//! and changelogs are flushed, offsets committed, then state applied.
//!
//! # Invariants
//!
//! - Local state is never ahead of Kafka: a store holds only changes whose
//!   transaction committed (step 6 follows step 5).
//! - Every piece of per-task memory (pending writes, the timer cache, the
//!   event clock, counters) returns to its state at the last commit when a
//!   transaction aborts ([`Task::abort`]), and the consumer is rewound to
//!   the committed positions, so re-consumed records meet exactly the state
//!   the first attempt met.
//! - An abortable error anywhere in the cycle (a produce the broker
//!   refused, a failed offsets send, a flush timeout) aborts and rewinds;
//!   only fencing and fatal producer errors end the member.
//!
//! # What a crash at each step leaves
//!
//! | crash after | Kafka | local state | on restart |
//! |---|---|---|---|
//! | begin, produce, changelog, offsets, flush | an open transaction | last commit | `init_transactions` with the same transactional id aborts it; input is re-read from the committed offsets |
//! | commit | committed | one commit behind | restore replays the changelog tail from the stored changelog offsets, so the store catches up |
//! | apply | committed | current | nothing to do |
//!
//! Read_committed readers (downstream consumers, and the restore of
//! [`super::restore`]) never see anything of an aborted transaction:
//! Apache Kafka hides its records and compacts below the last stable
//! offset only. streamfold relies on that; a broker that shows aborted
//! records to read_committed readers cannot give exactly-once.
//!
//! # Testing hooks
//!
//! [`TestHooks`] (hidden `run` flags) stamp every record with its
//! transaction, keep a journal of which transactions began and committed,
//! and inject faults (abort, or kill the process) at named points of the
//! cycle, so tests know exactly which transaction was open at a kill.

mod hooks;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::RuntimeError;
use super::changelog::{
    CHANGELOG_OFFSETS, ChangelogOffsets, EVENT_TIME, EVENT_TIME_HEADER, GAUGES, TXN_HEADER,
};
use crate::task::limits::{Acceptance, Limits, TooLarge, TopicLimits, record_size};
use crate::task::{DeadLetter, Task, dlq_headers};
use crate::telemetry::CommitPhase;
use crate::topology::Topology;

pub(crate) use hooks::Faults;
use hooks::Journal;
pub use hooks::{Fault, FaultAction, FaultPoint, TestHooks};

/// How long a transactional call may take before we give up on it.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the commit protocol, by what must happen next.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The transaction was aborted: pending state must be dropped and the
    /// consumer rewound to the committed offsets.
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// A newer process initialised our transactional id: this one is a
    /// zombie and must stop (rejoining would fence the newer one in turn).
    #[error("fenced: {0}")]
    Fenced(String),
    /// This producer can no longer be used (a fatal error): close the tasks
    /// and start over.
    #[error("producer unusable: {0}")]
    Fatal(String),
}

/// librdkafka's `RD_KAFKA_OFFSET_INVALID`: the offset of a delivered
/// record it does not know.
const OFFSET_INVALID: i64 = -1001;

/// Delivery reports: the highest offset produced per tracked partition,
/// the first failure, and the records the broker refused as too large.
#[derive(Default)]
pub(crate) struct Deliveries {
    offsets: HashMap<(usize, i32), i64>,
    failure: Option<String>,
    /// The first failure that said another producer with this
    /// transactional id took over (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH).
    fenced: Option<String>,
    /// Topic and [`record_size`] of each record refused as too large.
    refused: Vec<(String, usize)>,
    /// Each record the broker refused for good for another reason (see
    /// [`refused_for_good`]): its [`fingerprint`] and the broker's reason.
    refused_for_good: Vec<(u64, String)>,
    /// The first tracked partition a record was acknowledged in without
    /// its offset: librdkafka does so for a record a retried produce
    /// found persisted already (its first reply lost, e.g. in a broker
    /// restart). Where this transaction's changelog records end is then
    /// unknown, and the next transaction could not name it.
    offsetless: Option<(usize, i32)>,
    /// Test fault `offsetless`: report every tracked record of this
    /// transaction as librdkafka does one whose offset it does not know.
    forget_offsets: bool,
}

pub(crate) struct DeliveryContext {
    deliveries: Mutex<Deliveries>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    /// Index of a tracked topic (changelogs), 0 for untracked records.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, tracked: usize) {
        let mut deliveries = self.deliveries.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(message) => {
                if tracked > 0 {
                    use rdkafka::Message;
                    let offset = if deliveries.forget_offsets {
                        OFFSET_INVALID
                    } else {
                        message.offset()
                    };
                    if offset < 0 {
                        deliveries
                            .offsetless
                            .get_or_insert((tracked, message.partition()));
                    }
                    let slot = deliveries
                        .offsets
                        .entry((tracked, message.partition()))
                        .or_insert(-1);
                    *slot = (*slot).max(offset);
                }
            }
            Err((error, message)) => {
                if deliveries.failure.is_none() {
                    deliveries.failure = Some(error.to_string());
                }
                if deliveries.fenced.is_none() && error.rdkafka_error_code().is_some_and(is_fencing)
                {
                    deliveries.fenced = Some(error.to_string());
                }
                if let Some(code) = error.rdkafka_error_code().filter(|c| refused_for_good(*c)) {
                    use rdkafka::Message;
                    let reason = format!(
                        "the broker refused the record for topic `{}` for good: {error} ({code:?})",
                        message.topic()
                    );
                    let print = fingerprint(message.topic(), message.key(), message.payload());
                    deliveries.refused_for_good.push((print, reason));
                }
                if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) {
                    use rdkafka::Message;
                    use rdkafka::message::Headers;
                    // Measured as it was checked: without the stamp,
                    // which the size always reserves room for.
                    let headers: Vec<(String, Vec<u8>)> = message
                        .headers()
                        .map(|h| {
                            h.iter()
                                .filter(|h| h.key != TXN_HEADER)
                                .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                                .collect()
                        })
                        .unwrap_or_default();
                    let size = record_size(message.key(), message.payload(), &headers);
                    deliveries.refused.push((message.topic().to_string(), size));
                }
            }
        }
    }
}

/// One record to produce.
pub(crate) struct Produce<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: Option<i32>,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) payload: Option<&'a [u8]>,
    pub(crate) headers: &'a [(String, Vec<u8>)],
    pub(crate) timestamp: Option<i64>,
    /// Tracked topic index (see [`Transactions::track`]), 0 if untracked.
    pub(crate) tracked: usize,
}

/// The producer and the transaction state of one instance.
pub(crate) struct Transactions {
    producer: BaseProducer<DeliveryContext>,
    exactly_once: bool,
    in_transaction: bool,
    run_id: String,
    sequence: u64,
    stamp: bool,
    journal: Option<Journal>,
    faults: Faults,
    /// When the open transaction began, and how long the coordinator lets
    /// one stay open (`transaction.timeout.ms`).
    began: Option<Instant>,
    timeout: Duration,
    tracked: Vec<String>,
    /// What the producer and each topic accept ([`crate::task::limits`]).
    limits: Limits,
    /// What each written topic accepts besides size.
    acceptance: HashMap<String, Acceptance>,
    /// Records the broker refused for good, by [`fingerprint`], with its
    /// reason, in the order learnt.
    refusals: HashMap<u64, String>,
    refusal_order: std::collections::VecDeque<u64>,
    pub(crate) committed: u64,
    pub(crate) aborted: u64,
}

/// How long a wait for delivery reports sleeps between looks: the first
/// nap, and the longest, for a wait that goes on.
const NAP: Duration = Duration::from_micros(200);
const LONGEST_NAP: Duration = Duration::from_millis(1);

/// One look of a wait for the broker's acknowledgements: serves the
/// delivery reports that are ready, then sleeps `nap`, twice as long as
/// the last time up to [`LONGEST_NAP`]. Not `producer.poll(timeout)`:
/// rust-rdkafka polls until its deadline and hands librdkafka what remains
/// in whole milliseconds, so the last millisecond of every call (all of a
/// 1 ms call) is a busy loop, and a commit waiting on a slow broker burned
/// a core, starving the broker it waited for on a shared machine
/// (`tests/runtime.rs::a_commit_waiting_on_a_frozen_broker_uses_no_cpu_and_loses_nothing`).
/// A commit that is acknowledged at once still hears of it within a
/// fraction of a millisecond; a long wait costs about 1,000 looks a second.
///
/// `poll(0)` serves one event, and a transaction's acknowledgements come
/// as one event per partition and request, so each look serves events as
/// long as they lower what is in flight, and a look that served some
/// starts the naps over.
fn serve_then_nap(producer: &BaseProducer<DeliveryContext>, nap: &mut Duration) {
    match serve(producer) {
        Served::AllDelivered => return,
        Served::Reports => *nap = NAP,
        Served::Nothing => {}
    }
    std::thread::sleep(*nap);
    *nap = (*nap * 2).min(LONGEST_NAP);
}

/// What one [`serve`] did.
enum Served {
    /// Nothing is in flight any more.
    AllDelivered,
    /// Reports served, records still in flight.
    Reports,
    /// No report was ready.
    Nothing,
}

/// Serves the delivery reports that are ready, one event after the other
/// as long as they lower what is in flight.
fn serve(producer: &BaseProducer<DeliveryContext>) -> Served {
    let mut in_flight = producer.in_flight_count();
    let mut served = Served::Nothing;
    loop {
        producer.poll(Duration::ZERO);
        let left = producer.in_flight_count();
        if left >= in_flight {
            return served;
        }
        if left == 0 {
            return Served::AllDelivered;
        }
        served = Served::Reports;
        in_flight = left;
    }
}

/// Waits [`LONGEST_NAP`] for acknowledgements with the producer flushing.
/// librdkafka sends a partition's records without waiting out
/// `linger.ms` only while a call of `rd_kafka_flush` lasts, and
/// rust-rdkafka's `flush` makes its calls last no time at all (a timeout
/// of 0), so the changelog records a commit produces waited out their
/// linger before they left. The wait does not use the CPU: delivery
/// reports are events, which librdkafka leaves to this thread, so it
/// sleeps on a condition variable for the whole millisecond.
fn flushing_nap(producer: &BaseProducer<DeliveryContext>) {
    let millis = LONGEST_NAP.as_millis().max(1) as i32;
    // SAFETY: the handle is the live producer's own for the whole call;
    // with delivery reports as events, rd_kafka_flush serves no queue and
    // runs no callback, it only raises the flushing flag, wakes the
    // broker threads and waits.
    unsafe {
        rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), millis);
    }
}

/// Initialises transactions, waiting out a coordinator that does not
/// answer: librdkafka reports that as a retriable timeout, and a call again
/// resumes where the last one stopped.
fn init_patiently(
    producer: &BaseProducer<DeliveryContext>,
    shutdown: &AtomicBool,
) -> Result<(), KafkaError> {
    let started = Instant::now();
    loop {
        match producer.init_transactions(TXN_TIMEOUT) {
            Err(KafkaError::Transaction(e))
                if e.is_retriable() && !shutdown.load(Ordering::Relaxed) =>
            {
                tracing::warn!(
                    error = %e,
                    waited_s = started.elapsed().as_secs(),
                    "The transaction coordinator does not answer; waiting for it."
                );
            }
            result => return result,
        }
    }
}

/// A refusal that a retry of the same record meets again, and that names
/// the record: `INVALID_RECORD`, which the broker reports for the records
/// it found invalid (the others of their batch come back as
/// `INVALID_DIFFERENT_RECORD`, fine on their own). The causes a topic's
/// configuration tells (a keyless record for a compacted topic, a
/// timestamp past its limits) are checked before sending
/// ([`Acceptance`]); this catches the rest, and a configuration changed
/// since startup. (`INVALID_TIMESTAMP` comes back for every record of the
/// batch, so it cannot name one; records too large are learnt by size,
/// [`Limits::refused`].)
fn refused_for_good(code: RDKafkaErrorCode) -> bool {
    code == RDKafkaErrorCode::InvalidRecord
}

/// The wall clock, in epoch milliseconds.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What tells one output record from another when its transaction is
/// redone: the same input makes the same record, with the same topic, key
/// and value (its headers may carry another transaction's stamp, and its
/// partition follows from the key). Not its timestamp: librdkafka reports
/// none for a record that failed. So a later record with the very same
/// topic, key and value as one refused is refused before it is sent too
/// (a dead letter with the broker's reason, which `dlq replay` can send
/// again), the price of never sending a refused record twice.
fn fingerprint(topic: &str, key: Option<&[u8]>, payload: Option<&[u8]>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (topic, key, payload).hash(&mut hasher);
    hasher.finish()
}

/// Why a record must not be sent: it would fail its transaction, and the
/// transaction's replay again.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Over the producer's or the topic's size limit.
    TooLarge(TooLarge),
    /// The broker refused this very record before, for good; the reason is
    /// the broker's.
    Refused(String),
}

impl Refusal {
    /// The dead-letter reason for `what` (`the record of sink \`x\``).
    pub(crate) fn reason(&self, what: &str) -> String {
        match self {
            Refusal::TooLarge(too_large) => too_large.reason(what),
            Refusal::Refused(reason) => format!("{what}: {reason}"),
        }
    }

    /// The dead-letter reason code.
    pub(crate) fn code(&self) -> crate::telemetry::DeadLetterReason {
        match self {
            Refusal::TooLarge(_) => crate::telemetry::DeadLetterReason::TooLarge,
            Refusal::Refused(_) => crate::telemetry::DeadLetterReason::RefusedByBroker,
        }
    }
}

/// How many refused records a process remembers; past it, the oldest
/// half is forgotten (a record forgotten and met again costs one more
/// abort, nothing else).
const REFUSALS_KEPT: usize = 100_000;

fn is_fatal(error: &KafkaError) -> bool {
    match error {
        KafkaError::Transaction(e) => e.is_fatal() || !e.txn_requires_abort() && !e.is_retriable(),
        _ => false,
    }
}

fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
    )
}

fn classify(error: KafkaError) -> CommitError {
    if error.rdkafka_error_code().is_some_and(is_fencing) {
        CommitError::Fenced(error.to_string())
    } else if is_fatal(&error) {
        CommitError::Fatal(error.to_string())
    } else {
        CommitError::Aborted(error.to_string())
    }
}

impl Transactions {
    /// Creates the producer; under exactly-once, initialises transactions,
    /// which fences any earlier instance with the same transactional id
    /// and aborts what it left open.
    ///
    /// `topic_limits` are the `max.message.bytes` of the topics it will
    /// write, as far as the cluster reported them: no batch of several
    /// records is made larger than the smallest (`batch.size`), and
    /// [`Transactions::check_size`] measures records against them.
    ///
    /// A coordinator that does not answer (a broker down, a coordinator
    /// moving) is waited for, however long, until `shutdown` is set.
    pub(crate) fn new(
        config: &ClientConfig,
        exactly_once: bool,
        hooks: &TestHooks,
        topic_limits: TopicLimits,
        shutdown: &AtomicBool,
    ) -> Result<Transactions, RuntimeError> {
        let mut limits = Limits::new(
            config
                .get("message.max.bytes")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(crate::topology::model::DEFAULT_MESSAGE_MAX_BYTES),
        );
        limits.set_topics(topic_limits.max_message_bytes);
        let mut config = config.clone();
        if let Some(smallest) = limits.smallest_topic_limit() {
            let batch = config
                .get("batch.size")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(crate::topology::model::DEFAULT_MESSAGE_MAX_BYTES);
            if smallest < batch {
                config.set("batch.size", smallest.to_string());
            }
        }
        let config = &config;
        let journal = hooks
            .journal
            .as_deref()
            .map(Journal::open)
            .transpose()
            .map_err(RuntimeError::Startup)?;
        let producer: BaseProducer<DeliveryContext> =
            config.create_with_context(DeliveryContext {
                deliveries: Mutex::new(Deliveries::default()),
            })?;
        if exactly_once {
            init_patiently(&producer, shutdown)?;
        }
        let run_id = format!("{:016x}", rand_u64());
        let timeout = config
            .get("transaction.timeout.ms")
            .and_then(|ms| ms.parse().ok())
            .map_or(Duration::from_secs(60), Duration::from_millis);
        Ok(Transactions {
            producer,
            exactly_once,
            began: None,
            timeout,
            in_transaction: false,
            run_id,
            sequence: 0,
            stamp: hooks.stamp || journal.is_some(),
            journal,
            faults: Faults::new(hooks),
            tracked: vec![String::new()],
            limits,
            acceptance: topic_limits.acceptance,
            refusals: HashMap::new(),
            refusal_order: std::collections::VecDeque::new(),
            committed: 0,
            aborted: 0,
        })
    }

    /// Whether the broker will take `record`: it fits its topic, and the
    /// broker did not refuse it for good before. A record it will not take
    /// must not be sent (it would fail the transaction, and its replay
    /// again).
    pub(crate) fn check(&self, record: &Produce<'_>) -> Result<(), Refusal> {
        self.limits
            .check(
                record.topic,
                record_size(record.key, record.payload, record.headers),
            )
            .map_err(Refusal::TooLarge)?;
        if let Some(acceptance) = self.acceptance.get(record.topic)
            && let Some(reason) = acceptance.refusal(
                record.topic,
                record.key.is_some(),
                record.timestamp,
                wall_clock_ms(),
            )
        {
            return Err(Refusal::Refused(reason));
        }
        if self.refusals.is_empty() {
            return Ok(());
        }
        let print = fingerprint(record.topic, record.key, record.payload);
        match self.refusals.get(&print) {
            Some(reason) => Err(Refusal::Refused(reason.clone())),
            None => Ok(()),
        }
    }

    /// Sends `letter` to the dead-letter topic `topic`, its payload cut to
    /// fit the topic when it is too large ([`Limits::fit_dead_letter`]).
    pub(crate) fn send_dead_letter(
        &mut self,
        topic: &str,
        letter: &DeadLetter,
    ) -> Result<(), CommitError> {
        tracing::debug!(node = %letter.node, reason = letter.header(dlq_headers::REASON), "Dead letter.");
        let record = Produce {
            topic,
            partition: None,
            key: letter.key.as_deref(),
            payload: letter.payload.as_deref(),
            headers: &letter.headers,
            timestamp: None,
            tracked: 0,
        };
        // Dead letters are rare: cut a copy.
        let (mut key, mut payload, mut headers) = (
            letter.key.clone(),
            letter.payload.clone(),
            letter.headers.clone(),
        );
        let Some(too_large) =
            self.limits
                .fit_dead_letter(topic, &mut key, &mut payload, &mut headers)
        else {
            return self.send(record);
        };
        tracing::error!(
            node = %letter.node,
            topic,
            size = too_large.size,
            limit = too_large.limit,
            "A dead letter is too large for the dead-letter topic; its payload was cut (header streamfold.dlq.truncated holds its length)."
        );
        self.send(Produce {
            topic,
            partition: None,
            key: key.as_deref(),
            payload: payload.as_deref(),
            headers: &headers,
            timestamp: None,
            tracked: 0,
        })
    }

    /// Records the broker refused as too large lower their topic's limit,
    /// and records it refused for good otherwise are remembered, so the
    /// replay of the aborted transaction dead-letters them.
    fn learn_refusals(&mut self, deliveries: &Deliveries) {
        for (print, reason) in &deliveries.refused_for_good {
            if self.refusals.insert(*print, reason.clone()).is_none() {
                tracing::warn!(%reason, "The broker refused a record for good; when the transaction is redone it goes to the dead-letter topic.");
                self.refusal_order.push_back(*print);
            }
        }
        if self.refusals.len() > REFUSALS_KEPT {
            for print in self.refusal_order.drain(..REFUSALS_KEPT / 2) {
                self.refusals.remove(&print);
            }
        }
        for (topic, size) in &deliveries.refused {
            if self.limits.refused(topic, *size) {
                tracing::error!(
                    topic = %topic,
                    size,
                    "The broker refused a record as too large (the topic's max.message.bytes was not reported at startup, or changed since); records this large now go to the dead-letter topic."
                );
            }
        }
    }

    /// A fencing error: another producer took this transactional id, or,
    /// for a transaction open longer than its timeout, the coordinator
    /// aborted it (reported the same way), which a new producer survives.
    fn fenced(&self, reason: String) -> CommitError {
        if self.began.is_some_and(|t| t.elapsed() >= self.timeout) {
            CommitError::Fatal(format!(
                "the transaction was open longer than transaction.timeout.ms ({} ms) and the \
                 coordinator aborted it: {reason}",
                self.timeout.as_millis()
            ))
        } else {
            CommitError::Fenced(reason)
        }
    }

    /// What an error from the producer means: its fatal error, when it has
    /// one, tells fencing (another process took our transactional id) from
    /// other fatal failures; otherwise the error's own class, or a fencing
    /// the delivery reports tell of.
    ///
    /// A transaction that stayed open past `transaction.timeout.ms` is
    /// aborted by the coordinator, which bumps the producer epoch: the
    /// producer then reports itself fenced although no other process took
    /// its id. That is a fatal error of this producer (the member rejoins
    /// with a new one), not a reason to stop for good.
    fn error(&self, error: KafkaError) -> CommitError {
        match self.producer.client().fatal_error() {
            Some((code, reason)) => {
                let reason = format!("{reason} (after: {error})");
                if is_fencing(code) {
                    self.fenced(reason)
                } else {
                    CommitError::Fatal(reason)
                }
            }
            None => match (classify(error), self.fenced_delivery()) {
                (CommitError::Fenced(reason), _) => self.fenced(reason),
                // A produce the broker refused as fenced puts the
                // transaction in an abortable state, and the calls after
                // it fail with that state, not with the cause: the delivery
                // reports have it.
                (other, Some(cause)) => self.fenced(format!("{cause} (after: {other})")),
                (other, None) => other,
            },
        }
    }

    /// Why a record of the open transaction was refused as fenced, if one
    /// was (serving the delivery reports already waiting first).
    fn fenced_delivery(&self) -> Option<String> {
        self.producer.poll(Duration::ZERO);
        self.deliveries().fenced.clone()
    }

    /// Registers a topic whose delivered offsets are reported at commit;
    /// returns its index for [`Produce::tracked`].
    pub(crate) fn track(&mut self, topic: &str) -> usize {
        match self.tracked.iter().position(|t| t == topic) {
            Some(i) => i,
            None => {
                self.tracked.push(topic.to_string());
                self.tracked.len() - 1
            }
        }
    }

    /// Identifies this producer's run in `streamfold.txn` headers and logs.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    pub(crate) fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// The `streamfold.txn` value of the current transaction.
    pub(crate) fn txn_label(&self) -> String {
        format!("{}:{}", self.run_id, self.sequence)
    }

    fn journal(&mut self, event: &str) {
        if self.journal.is_some() {
            let label = self.txn_label();
            if let Some(journal) = &mut self.journal {
                journal.record(event, &label);
            }
        }
    }

    /// Journals the offsets the transaction asks to commit, and that it
    /// asks: from here until `committed` the outcome is in doubt, as a
    /// process killed meanwhile may or may not have committed.
    fn journal_committing(&mut self, offsets: &TopicPartitionList) {
        if self.journal.is_some() {
            let label = self.txn_label();
            if let Some(journal) = &mut self.journal {
                journal.offsets("offsets", &label, offsets);
            }
        }
        self.journal("committing");
    }

    /// Journals the group's committed offsets as a new task read them.
    pub(crate) fn journal_fetched(&mut self, offsets: &TopicPartitionList) {
        if let Some(journal) = &mut self.journal {
            journal.offsets("fetched", &self.run_id, offsets);
        }
    }

    /// Reaches `point` of the cycle: an injected fault there fires.
    pub(crate) fn fault(&mut self, point: FaultPoint) -> Result<(), CommitError> {
        let result = self.faults.check(point);
        if self.faults.take_offsetless() {
            self.deliveries().forget_offsets = true;
        }
        result
    }

    /// Whether an injected `rewind` fault asks the engine to move the
    /// consumer back (test hook).
    pub(crate) fn take_consumer_rewind(&mut self) -> bool {
        self.faults.take_rewind()
    }

    /// Starts a transaction if none is open (a no-op at least once).
    pub(crate) fn begin(&mut self) -> Result<(), CommitError> {
        if self.in_transaction {
            return Ok(());
        }
        if self.exactly_once {
            self.producer
                .begin_transaction()
                .map_err(|e| self.error(e))?;
        }
        self.sequence += 1;
        self.in_transaction = true;
        self.began = Some(Instant::now());
        self.journal("begin");
        self.fault(FaultPoint::Begin)
    }

    /// Produces one record in the current transaction, waiting for queue
    /// space if the producer is full.
    pub(crate) fn send(&mut self, record: Produce<'_>) -> Result<(), CommitError> {
        self.begin()?;
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 1);
        for (key, value) in record.headers {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        // Changelog records carry this transaction's stamp whatever the
        // run's settings; other records carry it, last, in a stamping run.
        // (A record may carry an upstream transaction's stamp among the
        // headers it inherited from its input: readers take the last one.)
        if self.stamp {
            let label = self.txn_label();
            let stamped = record
                .headers
                .iter()
                .any(|(key, value)| key == TXN_HEADER && value == label.as_bytes());
            if !stamped {
                headers = headers.insert(Header {
                    key: TXN_HEADER,
                    value: Some(label.as_bytes()),
                });
            }
        }
        let mut base: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(record.topic, record.tracked);
        base = base.headers(headers);
        if let Some(partition) = record.partition {
            base = base.partition(partition);
        }
        if let Some(key) = record.key {
            base = base.key(key);
        }
        if let Some(payload) = record.payload {
            base = base.payload(payload);
        }
        if let Some(ts) = record.timestamp {
            base = base.timestamp(ts);
        }
        let mut nap = NAP;
        loop {
            match self.producer.send(base) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    base = returned;
                    serve_then_nap(&self.producer, &mut nap);
                }
                Err((error, _)) => return Err(self.error(error)),
            }
        }
    }

    /// Serves delivery reports without blocking.
    pub(crate) fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until every record produced is acknowledged, then commits
    /// them with the offsets `offsets` builds from where the tracked
    /// topics' records landed (the highest delivered offset per tracked
    /// `(topic, partition)`), which it also returns.
    ///
    /// The offsets go after the flush, not beside it, because they name
    /// where this transaction's changelog records end ([`super::changelog`]).
    pub(crate) fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        offsets: impl FnOnce(&HashMap<(String, i32), i64>) -> TopicPartitionList,
    ) -> Result<HashMap<(String, i32), i64>, CommitError> {
        if !self.in_transaction {
            return Ok(HashMap::new());
        }
        let started = Instant::now();
        self.fault(FaultPoint::Sent)?;
        let flushed = self.flush_promptly(TXN_TIMEOUT, true);
        CommitPhase::Flush.took(started.elapsed());
        let mut deliveries = std::mem::take(&mut *self.deliveries());
        self.learn_refusals(&deliveries);
        flushed.map_err(|e| self.error(e))?;
        if let Some(cause) = deliveries.fenced.take() {
            // Kept for the abort that follows, which then has nothing to do.
            self.deliveries().fenced = Some(cause.clone());
            return Err(self.fenced(cause));
        }
        if let Some(failure) = deliveries.failure.take() {
            // Redo the work: a transaction with a lost record must not
            // commit, and at least once it has to be produced again.
            return Err(CommitError::Aborted(format!(
                "a record was not delivered: {failure}"
            )));
        }
        if let Some((topic, partition)) = deliveries.offsetless {
            // Redo the work too: committed, its changelog records would end
            // at an unknown offset, and the next transaction's base (where
            // the last committed writer ended) would disown them in a
            // restore.
            return Err(CommitError::Aborted(format!(
                "the broker acknowledged a record of {} [{partition}] without its offset (a \
                 produce retried after its reply was lost)",
                self.tracked[topic]
            )));
        }
        let delivered: HashMap<(String, i32), i64> = deliveries
            .offsets
            .into_iter()
            .map(|((topic, partition), offset)| ((self.tracked[topic].clone(), partition), offset))
            .collect();
        let offsets = offsets(&delivered);
        if self.exactly_once {
            self.commit_transaction(consumer, &offsets)?;
        } else {
            self.commit_at_least_once(consumer, &offsets)?;
        }
        self.fault(FaultPoint::Acked)?;
        self.in_transaction = false;
        self.began = None;
        self.committed += 1;
        self.journal("committed");
        metrics::counter!(crate::telemetry::TRANSACTIONS_COMMITTED).increment(1);
        Ok(delivered)
    }

    /// Waits until every produced record is acknowledged, serving
    /// delivery reports, one [`flushing_nap`] after the other: so what
    /// `linger.ms` holds back is sent at once, and the wait ends within a
    /// millisecond of the last acknowledgement. Not rust-rdkafka's own
    /// `flush` (also called by `commit_transaction`): it polls in 100 ms
    /// slices that run to their end even once the queue is empty, which
    /// would add ~100 ms to every commit.
    ///
    /// `until_a_failure`: stop at the first record not delivered. The
    /// transaction cannot commit then, and the rest need not be waited
    /// for here: the abort that follows waits for them. When librdkafka
    /// fails a transaction (say OUT_OF_ORDER_SEQUENCE_NUMBER after an abort
    /// with records in flight), it purges what is queued, and records it
    /// holds back for an epoch bump would otherwise keep the commit
    /// waiting until `timeout`.
    fn flush_promptly(&self, timeout: Duration, until_a_failure: bool) -> Result<(), KafkaError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Served::AllDelivered = serve(&self.producer) {
                return Ok(());
            }
            if self.producer.in_flight_count() == 0 {
                return Ok(());
            }
            if until_a_failure && self.deliveries().failure.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
            }
            flushing_nap(&self.producer);
        }
    }

    fn deliveries(&self) -> std::sync::MutexGuard<'_, Deliveries> {
        self.producer
            .context()
            .deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn commit_transaction<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        offsets: &TopicPartitionList,
    ) -> Result<(), CommitError> {
        let started = Instant::now();
        if offsets.count() > 0 {
            let metadata = consumer.group_metadata().ok_or_else(|| {
                CommitError::Aborted("the consumer has no group metadata yet".into())
            })?;
            self.producer
                .send_offsets_to_transaction(offsets, &metadata, TXN_TIMEOUT)
                .map_err(|e| self.error(e))?;
        }
        let offsets_sent = started.elapsed();
        CommitPhase::Offsets.took(offsets_sent);
        self.fault(FaultPoint::Offsets)?;
        self.fault(FaultPoint::Commit)?;
        self.journal_committing(offsets);
        let mut attempts = 0;
        loop {
            match self.producer.commit_transaction(TXN_TIMEOUT) {
                Ok(()) => break,
                Err(KafkaError::Transaction(e)) if e.is_retriable() && attempts < 3 => {
                    attempts += 1;
                    tracing::warn!(error = %e, attempts, "Commit failed with a retriable error; retrying.");
                }
                Err(e) => return Err(self.error(e)),
            }
        }
        CommitPhase::Commit.took(started.elapsed() - offsets_sent);
        tracing::debug!(
            offsets_ms = offsets_sent.as_millis() as u64,
            commit_ms = (started.elapsed() - offsets_sent).as_millis() as u64,
            "Transaction committed."
        );
        Ok(())
    }

    fn commit_at_least_once<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        offsets: &TopicPartitionList,
    ) -> Result<(), CommitError> {
        // Without a transaction, offsets are committed last: both points
        // are "records acknowledged, offsets not committed".
        self.fault(FaultPoint::Offsets)?;
        self.fault(FaultPoint::Commit)?;
        self.journal_committing(offsets);
        let started = Instant::now();
        if offsets.count() > 0 {
            consumer
                .commit(offsets, rdkafka::consumer::CommitMode::Sync)
                .map_err(|e| CommitError::Aborted(format!("offset commit failed: {e}")))?;
        }
        CommitPhase::Offsets.took(started.elapsed());
        Ok(())
    }

    /// Aborts the open transaction (if any). Fails only when the producer
    /// is unusable.
    ///
    /// librdkafka's abort purges what is still queued and then waits until
    /// the delivery report of every outstanding record has been *served*
    /// by the application; rust-rdkafka's `abort_transaction`, unlike its
    /// `commit_transaction`, serves none, so a plain call waits out the
    /// whole timeout whenever a record is outstanding. A scoped thread
    /// serves them while the abort runs, as librdkafka asks of
    /// applications that take delivery reports as events. (Purging the
    /// queue ourselves first would be quicker to write but wrong: without
    /// librdkafka's internal abort flag it leaves gaps in the idempotent
    /// producer's sequence numbers, and the next transaction fails with
    /// OUT_OF_ORDER_SEQUENCE_NUMBER.)
    pub(crate) fn abort(&mut self) -> Result<(), CommitError> {
        if !self.in_transaction {
            return Ok(());
        }
        let started = Instant::now();
        // Fenced by another producer with this transactional id: nothing to
        // abort (its `init_transactions` aborted this transaction), and
        // librdkafka would wait out the whole timeout trying.
        if self.exactly_once
            && let Some(cause) = self.fenced_delivery()
            && let fenced @ CommitError::Fenced(_) = self.fenced(cause)
        {
            self.in_transaction = false;
            return Err(fenced);
        }
        self.in_transaction = false;
        self.aborted += 1;
        metrics::counter!(crate::telemetry::TRANSACTIONS_ABORTED).increment(1);
        if self.exactly_once {
            let aborted = AtomicBool::new(false);
            let result = std::thread::scope(|scope| {
                scope.spawn(|| {
                    let mut nap = NAP;
                    while !aborted.load(Ordering::Acquire) {
                        serve_then_nap(&self.producer, &mut nap);
                    }
                });
                // A coordinator that does not answer (a broker down) is
                // waited out: the abort times out as a retriable error,
                // and a call again resumes it.
                let result = loop {
                    match self.producer.abort_transaction(TXN_TIMEOUT) {
                        Err(KafkaError::Transaction(e)) if e.is_retriable() => {
                            tracing::warn!(
                                error = %e,
                                waited_s = started.elapsed().as_secs(),
                                "The transaction coordinator does not answer; waiting for it to abort the transaction."
                            );
                        }
                        result => break result,
                    }
                };
                aborted.store(true, Ordering::Release);
                result
            });
            result.map_err(|e| match self.error(e) {
                CommitError::Aborted(m) => CommitError::Fatal(format!("abort failed: {m}")),
                fatal => fatal,
            })?;
        } else if self.flush_promptly(TXN_TIMEOUT, false).is_err() {
            // Without a transaction there is nothing to abort, but what the
            // failed cycle sent is still in flight: its delivery reports
            // belong to this cycle, not to the next one, which they would
            // fail (or whose changelog offsets they would move). Records
            // still unanswered after the wait (a broker down) are reported
            // later; at least once, the worst they do is fail a cycle that
            // is then redone.
            tracing::warn!("Records of the failed cycle are still unacknowledged after 30 s.");
        }
        self.began = None;
        let deliveries = std::mem::take(&mut *self.deliveries());
        self.learn_refusals(&deliveries);
        self.journal("aborted");
        let took = started.elapsed();
        metrics::histogram!(crate::telemetry::ABORT_DURATION).record(took.as_secs_f64());
        tracing::info!(
            txn = %self.txn_label(),
            millis = took.as_millis() as u64,
            "Transaction aborted."
        );
        Ok(())
    }

    /// Flushes outstanding records (shutdown at least once).
    pub(crate) fn flush(&self) {
        let _ = self.producer.flush(TXN_TIMEOUT);
    }
}

/// Where one task stands in the cycle.
#[derive(Clone, Debug, Default)]
pub(crate) struct TaskCursor {
    /// Next offset to read, per input (index into the cycle's inputs).
    pub(crate) positions: Vec<Option<i64>>,
    /// Positions as of the last commit (to rewind to on abort).
    pub(crate) committed: Vec<Option<i64>>,
    /// Next changelog offset per changelog topic, stored with the state.
    pub(crate) changelog_offsets: ChangelogOffsets,
}

/// One task as the cycle sees it.
pub(crate) struct CycleTask<'a> {
    pub(crate) id: i32,
    pub(crate) task: &'a mut Task,
    pub(crate) cursor: &'a mut TaskCursor,
    /// Restoring tasks hold nothing to commit and are not rewound.
    pub(crate) running: bool,
}

/// The commit cycle of the processing loop: the producer, and the topics
/// whose positions and changelogs it commits.
pub(crate) struct CommitCycle {
    pub(crate) txn: Transactions,
    /// Input topics, in the order of [`TaskCursor::positions`].
    inputs: Vec<String>,
    /// Store index → changelog topic and its tracked index.
    changelogs: Vec<(String, usize)>,
    /// Store index → store name, for dead letters.
    stores: Vec<String>,
    /// Where each input without a committed offset starts, in the order
    /// of `inputs`: a source's `offset_reset`; a repartition topic's
    /// beginning, whatever the sources' (its records were written by this
    /// application, and their sources' offsets are committed).
    resets: Vec<Offset>,
    app: String,
    dead_letter_topic: String,
}

impl CommitCycle {
    /// The cycle of `topology`'s stores over `inputs`.
    pub(crate) fn new(
        mut txn: Transactions,
        inputs: Vec<String>,
        topology: &Topology,
        resets: Vec<Offset>,
    ) -> CommitCycle {
        let changelogs = topology
            .stores()
            .map(|s| (s.changelog_topic.clone(), txn.track(&s.changelog_topic)))
            .collect();
        CommitCycle {
            txn,
            inputs,
            changelogs,
            stores: topology.stores().map(|s| s.name.clone()).collect(),
            resets,
            app: topology.name.clone(),
            dead_letter_topic: topology.dead_letter_topic.clone(),
        }
    }

    /// A state value too large for its changelog topic can never be
    /// committed; keeping it would fail every transaction from now on. It
    /// goes to the dead-letter topic instead, and the key's state is
    /// deleted: `entry` becomes a tombstone, committed like any other
    /// change, so the store stays writable and a restore agrees with it.
    fn drop_state(
        &mut self,
        entry: &mut crate::state::ChangelogEntry,
        too_large: &TooLarge,
    ) -> Result<(), CommitError> {
        let store = &self.stores[entry.store];
        let reason = format!(
            "{}; the key's state was dropped",
            too_large.reason(&format!("the state of store `{store}`"))
        );
        tracing::error!(
            store = %store,
            size = too_large.size,
            limit = too_large.limit,
            "A state value is too large for its changelog topic; the key's state was dropped and sent to the dead-letter topic."
        );
        metrics::counter!(crate::telemetry::RECORDS_TOO_LARGE, "topology" => self.app.clone(), "store" => store.clone())
            .increment(1);
        let mut letter = crate::task::dead_letter(
            None,
            store,
            crate::telemetry::DeadLetterReason::TooLarge,
            &reason,
            1,
        );
        letter.key = Some(entry.key.to_vec());
        letter.payload = entry.value.take().map(Vec::from);
        self.txn.send_dead_letter(&self.dead_letter_topic, &letter)
    }

    /// Commits the open transaction with the tasks' changelogs and
    /// positions, then applies their state. An `Aborted` error leaves the
    /// transaction open for [`CommitCycle::rewind`]. The tasks collect
    /// their changes, and later write them to their stores, side by side
    /// on `pool`'s threads; everything sent is sent from this one.
    pub(crate) fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tasks: Vec<CycleTask<'_>>,
        now: i64,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<(), RuntimeError> {
        if !self.txn.in_transaction() {
            return Ok(());
        }
        let started = Instant::now();
        let mut collected: Vec<_> = tasks
            .into_iter()
            .filter(|t| t.running)
            .map(|t| (t, Ok(Vec::new())))
            .collect();
        super::batch::for_each(pool, &mut collected, |(item, entries)| {
            *entries = item.task.state().changelog();
        });
        let mut pending = Vec::with_capacity(collected.len());
        let mut offsets = Vec::new();
        for (item, entries) in collected {
            let mut entries = entries?;
            let mut dropped = Vec::new();
            if !entries.is_empty() {
                // The task's event time, so a restore elsewhere resumes
                // its clock. (A stamping run adds the transaction last,
                // which the size check reserves room for.)
                let header = [(
                    EVENT_TIME_HEADER.to_string(),
                    item.task.clocks().event.to_string().into_bytes(),
                )];
                for entry in &mut entries {
                    let (topic, tracked) = self.changelogs[entry.store].clone();
                    let size = record_size(Some(&entry.key), entry.value.as_deref(), &header);
                    if let Err(too_large) = self.txn.limits.check(&topic, size) {
                        self.drop_state(entry, &too_large)
                            .map_err(RuntimeError::Commit)?;
                        dropped.push((entry.store, entry.key.clone()));
                    }
                    self.txn
                        .send(Produce {
                            topic: &topic,
                            partition: Some(item.id),
                            key: Some(&entry.key),
                            payload: entry.value.as_deref(),
                            headers: &header,
                            timestamp: Some(now),
                            tracked,
                        })
                        .map_err(RuntimeError::Commit)?;
                }
            }
            offsets.extend(
                item.cursor
                    .positions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.map(|p| (self.inputs[i].clone(), item.id, p))),
            );

            pending.push((item, entries, dropped));
        }
        CommitPhase::Changelog.took(started.elapsed());
        let delivered = self
            .txn
            .commit(consumer, |_| offsets_list(offsets))
            .map_err(RuntimeError::Commit)?;
        // Committed in Kafka; a crash from here on leaves local state one
        // commit behind, which restore replays.
        self.txn
            .fault(FaultPoint::Committed)
            .map_err(RuntimeError::Commit)?;
        let applying = Instant::now();
        let (changelogs, stores, app) = (&self.changelogs, &self.stores, &self.app);
        let mut applied: Vec<_> = pending.into_iter().map(|p| (p, Ok(()))).collect();
        super::batch::for_each(pool, &mut applied, |((item, entries, dropped), result)| {
            for (topic, _) in changelogs {
                if let Some(offset) = delivered.get(&(topic.clone(), item.id)) {
                    item.cursor
                        .changelog_offsets
                        .0
                        .insert(topic.clone(), offset + 1);
                }
            }
            let meta = [
                (
                    CHANGELOG_OFFSETS.to_string(),
                    item.cursor.changelog_offsets.encode(),
                ),
                (
                    EVENT_TIME.to_string(),
                    item.task.clocks().event.to_string().into_bytes(),
                ),
                (GAUGES.to_string(), item.task.gauges_meta()),
            ];
            *result = item.task.committed(std::mem::take(entries), &meta);
            if result.is_err() {
                return;
            }
            for (store, key) in dropped.drain(..) {
                item.task.state().forget(store, &key);
                // Counted once its transaction committed, like the task's
                // own dead letters.
                let code = crate::telemetry::DeadLetterReason::TooLarge.code();
                metrics::counter!(crate::telemetry::DEAD_LETTERS, "topology" => app.clone(), "node" => stores[store].clone(), "reason" => code)
                    .increment(1);
            }
            item.cursor.committed = item.cursor.positions.clone();
        });
        for (_, result) in applied {
            result?;
        }
        CommitPhase::Apply.took(applying.elapsed());
        metrics::histogram!(crate::telemetry::COMMIT_DURATION)
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Aborts the open transaction and returns every task to its last
    /// commit: state, timers and clocks ([`Task::abort`]), and the
    /// consumer's positions.
    pub(crate) fn rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tasks: Vec<CycleTask<'_>>,
    ) -> Result<(), RuntimeError> {
        self.txn.abort().map_err(RuntimeError::Commit)?;
        for item in tasks {
            item.task.abort();
            if !item.running {
                continue;
            }
            self.seek_to_committed(consumer, item.id, item.cursor)?;
        }
        Ok(())
    }

    /// With `offset_reset: latest`, makes the end of each of task `task`'s
    /// source inputs without a committed offset, as it is now, the offset
    /// the task starts from and goes back to until its first commit. The
    /// end is the last stable offset, as the read_committed consumer sees
    /// it. Repartition inputs start at their beginning: their records
    /// were written by this application, and none may be skipped.
    ///
    /// A logical end would be resolved again at each seek: a rewind after
    /// the task's first transaction aborted would land past the records
    /// that transaction had read, and the seek at the task's start was
    /// resolved half a second late (librdkafka asks again when a resume
    /// outdates its query), past records written meanwhile.
    pub(crate) fn anchor_latest<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        task: i32,
        committed: &mut [Option<i64>],
        timeout: Duration,
    ) -> Result<(), KafkaError> {
        let inputs = self.inputs.iter().zip(&self.resets);
        for ((topic, reset), committed) in inputs.zip(committed) {
            if committed.is_none() && *reset == Offset::End {
                let (_, end) = consumer.fetch_watermarks(topic, task, timeout)?;
                *committed = Some(end);
            }
        }
        Ok(())
    }

    /// Seeks task `task`'s inputs to its committed offsets (the input's
    /// reset where it has none), and makes them its positions.
    pub(crate) fn seek_to_committed<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        task: i32,
        cursor: &mut TaskCursor,
    ) -> Result<(), RuntimeError> {
        for (i, committed) in cursor.committed.iter().enumerate() {
            let offset = committed.map_or(self.resets[i], Offset::Offset);
            seek(consumer, &self.inputs[i], task, offset)?;
        }
        cursor.positions = cursor.committed.clone();
        Ok(())
    }
}

/// Seeks `topic` `partition` to `offset`. librdkafka refuses a seek of a
/// partition it is not fetching (`Erroneous state`): one the group took
/// away (a rebalance, or a fenced or expired member) is left alone, since
/// its task is closed when the revocation is served and nothing of it is
/// processed meanwhile; one still assigned but not fetching yet (an
/// assignment being applied) is asked again for a while.
fn seek<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<(), KafkaError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let error = match consumer.seek(topic, partition, offset, Duration::from_secs(10)) {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let assigned = consumer
            .assignment()
            .is_ok_and(|list| list.find_partition(topic, partition).is_some());
        if !assigned {
            tracing::info!(topic, partition, %error, "Not seeking a partition no longer assigned; its task closes with the revocation.");
            return Ok(());
        }
        let state = matches!(
            &error,
            KafkaError::Seek(message) if message.contains("Erroneous state")
        );
        if !state || Instant::now() >= deadline {
            return Err(error);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The offsets list for `send_offsets_to_transaction`.
pub(crate) fn offsets_list(
    positions: impl IntoIterator<Item = (String, i32, i64)>,
) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for (topic, partition, offset) in positions {
        // Adding to a fresh list cannot fail for a valid offset.
        let _ = list.add_partition_offset(&topic, partition, Offset::Offset(offset));
    }
    list
}

/// A random 64-bit value for the run id, without a dependency: the
/// standard library's per-process random hash keys.
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An at-least-once producer on `config`'s cluster, and a consumer of
    /// group `g` there for its commits.
    fn at_least_once(config: &ClientConfig) -> (Transactions, BaseConsumer) {
        let txn = Transactions::new(
            config,
            false,
            &TestHooks::default(),
            TopicLimits::default(),
            &AtomicBool::new(false),
        )
        .unwrap();
        let consumer = config.clone().set("group.id", "g").create().unwrap();
        (txn, consumer)
    }

    /// A broker refusing a record as too large (its `max.message.bytes`
    /// was not known) fails the transaction once; the topic's limit then
    /// drops below that record, so its replay is dead-lettered instead of
    /// being refused again.
    #[test]
    fn a_record_the_broker_refuses_as_too_large_lowers_its_topic_s_limit() {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("out", 1, 1).unwrap();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        let (mut txn, consumer) = at_least_once(&config);
        let payload = vec![b'x'; 5_000];
        let record = || Produce {
            topic: "out",
            partition: Some(0),
            key: Some(b"k"),
            payload: Some(&payload),
            headers: &[],
            timestamp: None,
            tracked: 0,
        };
        assert!(txn.check(&record()).is_ok());

        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
        );
        txn.send(record()).unwrap();
        let refused = txn.commit(&consumer, |_| TopicPartitionList::new());
        assert!(
            matches!(refused, Err(CommitError::Aborted(_))),
            "{refused:?}"
        );
        txn.abort().unwrap();

        let Err(Refusal::TooLarge(too_large)) = txn.check(&record()) else {
            panic!("the record is refused as too large");
        };
        assert_eq!(too_large.source, crate::task::limits::LimitSource::Refused);
        assert!(too_large.limit < too_large.size);
        let smaller = vec![b'x'; 4_000];
        assert!(
            txn.check(&Produce {
                payload: Some(&smaller),
                ..record()
            })
            .is_ok()
        );
        // The next transaction goes through.
        txn.send(Produce {
            payload: Some(&smaller),
            ..record()
        })
        .unwrap();
        assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());
    }

    /// At least once, an abort waits for the records still in flight, so
    /// their delivery reports (here a failure) belong to the attempt that
    /// sent them, not to the next cycle, which commits.
    #[test]
    fn an_at_least_once_abort_waits_for_what_is_in_flight() {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("out", 1, 1).unwrap();
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("message.send.max.retries", "0");
        let (mut txn, consumer) = at_least_once(&config);
        let record = |payload: &'static [u8]| Produce {
            topic: "out",
            partition: Some(0),
            key: Some(b"k"),
            payload: Some(payload),
            headers: &[],
            timestamp: None,
            tracked: 0,
        };
        // Connected, with the partition's leader known.
        txn.send(record(b"warm-up")).unwrap();
        assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());

        // The next produce fails, and its answer takes 500 ms.
        mock.broker_round_trip_time(1, Duration::from_millis(500))
            .unwrap();
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS],
        );
        txn.send(record(b"failed attempt")).unwrap();
        txn.abort().unwrap();

        mock.broker_round_trip_time(1, Duration::ZERO).unwrap();
        txn.send(record(b"next cycle")).unwrap();
        let next = txn.commit(&consumer, |_| TopicPartitionList::new());
        assert!(next.is_ok(), "the next cycle commits: {next:?}");
    }

    /// A record not delivered ends the wait for the others: the
    /// transaction cannot commit, and the commit says so while a record on
    /// a slow broker is still in flight (the abort waits for it).
    #[test]
    fn a_failed_record_ends_the_commit_without_waiting_for_the_others() {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

        let mock = MockCluster::new(2).unwrap();
        mock.create_topic("out", 2, 1).unwrap();
        mock.partition_leader("out", 0, Some(1)).unwrap();
        mock.partition_leader("out", 1, Some(2)).unwrap();
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("message.send.max.retries", "0");
        let (mut txn, consumer) = at_least_once(&config);
        let record = |partition: i32| Produce {
            topic: "out",
            partition: Some(partition),
            key: Some(b"k"),
            payload: Some(b"v"),
            headers: &[],
            timestamp: None,
            tracked: 0,
        };
        // Connected to both, with the leaders known.
        txn.send(record(0)).unwrap();
        txn.send(record(1)).unwrap();
        assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());

        // Partition 1's broker answers after 5 s; partition 0's record,
        // sent once partition 1's request is out, is refused.
        mock.broker_round_trip_time(2, Duration::from_secs(5))
            .unwrap();
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            ],
        );
        txn.send(record(1)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        txn.send(record(0)).unwrap();
        let failed = txn.commit(&consumer, |_| TopicPartitionList::new());
        assert!(
            matches!(&failed, Err(CommitError::Aborted(m)) if m.contains("not delivered")),
            "{failed:?}"
        );
        assert_eq!(
            txn.producer.in_flight_count(),
            1,
            "the commit gave up with partition 1's record still in flight"
        );
        txn.abort().unwrap();
        assert_eq!(txn.producer.in_flight_count(), 0, "the abort waited for it");
    }

    /// A record the broker refuses for good (INVALID_RECORD: a keyless
    /// record for a compacted topic) fails the transaction once; the same
    /// record is then known and refused before it is sent, while another
    /// record of the topic goes through.
    #[test]
    fn a_record_the_broker_refuses_for_good_is_known_when_it_comes_again() {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("out", 1, 1).unwrap();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        let (mut txn, consumer) = at_least_once(&config);
        let record = |payload: &'static [u8]| Produce {
            topic: "out",
            partition: Some(0),
            key: None,
            payload: Some(payload),
            headers: &[],
            timestamp: Some(1_700_000_000_000),
            tracked: 0,
        };
        assert!(txn.check(&record(b"bad")).is_ok());
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
        );
        txn.send(record(b"bad")).unwrap();
        let refused = txn.commit(&consumer, |_| TopicPartitionList::new());
        assert!(
            matches!(refused, Err(CommitError::Aborted(_))),
            "{refused:?}"
        );
        txn.abort().unwrap();

        let Err(Refusal::Refused(reason)) = txn.check(&record(b"bad")) else {
            panic!("the record is known as refused");
        };
        assert!(reason.contains("InvalidRecord"), "{reason}");
        assert_eq!(
            Refusal::Refused(reason).code(),
            crate::telemetry::DeadLetterReason::RefusedByBroker
        );
        assert!(txn.check(&record(b"good")).is_ok(), "another record is not");
        txn.send(record(b"good")).unwrap();
        assert!(txn.commit(&consumer, |_| TopicPartitionList::new()).is_ok());
    }
}
