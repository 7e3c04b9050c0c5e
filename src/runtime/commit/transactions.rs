//! The transactional producer of one instance ([`Transactions`]): begin,
//! check and send records, commit or abort, with a journal and injected
//! faults in test runs. At least once, the same calls without a
//! transaction: sends, flushes, and commits offsets through the consumer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::TopicPartitionList;

use crate::runtime::changelog::TXN_HEADER;
use crate::runtime::{RuntimeError, wall_clock_ms};
use crate::task::limits::{Acceptance, Limits, TopicLimits, record_size};
use crate::task::output::Refusal;
use crate::task::{DeadLetter, dlq_headers};
use crate::telemetry::{CommitMetrics, CommitPhase};

use super::delivery::{
    Deliveries, DeliveryContext, NAP, Served, fingerprint, flushing_nap, is_fencing, serve,
    serve_then_nap,
};
use super::hooks::{FaultPoint, TestHooks};
use super::hooks::{Faults, Journal};
use super::{CommitError, TXN_TIMEOUT};

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
    pub(super) producer: BaseProducer<DeliveryContext>,
    pub(super) exactly_once: bool,
    pub(super) in_transaction: bool,
    pub(super) run_id: String,
    pub(super) sequence: u64,
    pub(super) stamp: bool,
    pub(super) journal: Option<Journal>,
    pub(super) faults: Faults,
    /// When the open transaction began, and how long the coordinator lets
    /// one stay open (`transaction.timeout.ms`).
    pub(super) began: Option<Instant>,
    pub(super) timeout: Duration,
    pub(super) tracked: Vec<String>,
    /// What the producer and each topic accept ([`crate::task::limits`]).
    pub(super) limits: Limits,
    /// What each written topic accepts besides size.
    pub(super) acceptance: HashMap<String, Acceptance>,
    /// Records the broker refused for good, by [`fingerprint`], with its
    /// reason, in the order learnt.
    pub(super) refusals: HashMap<u64, String>,
    pub(super) refusal_order: std::collections::VecDeque<u64>,
    pub(crate) committed: u64,
    pub(crate) aborted: u64,
    pub(super) metrics: CommitMetrics,
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
    /// [`Transactions::check`] measures records against them.
    ///
    /// A coordinator that does not answer (a broker down, a coordinator
    /// moving) is waited for, however long, until `shutdown` is set.
    ///
    /// Its metrics are labelled with `app`, the topology's name.
    pub(crate) fn new(
        app: &str,
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
            .map_err(RuntimeError::Settings)?;
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
            metrics: CommitMetrics::new(app),
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
    /// where this transaction's changelog records end ([`crate::runtime::changelog`]).
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
        self.metrics.took(CommitPhase::Flush, started.elapsed());
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
        self.metrics.committed.increment(1);
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
        self.metrics.took(CommitPhase::Offsets, offsets_sent);
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
        self.metrics
            .took(CommitPhase::Commit, started.elapsed() - offsets_sent);
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
        self.metrics.took(CommitPhase::Offsets, started.elapsed());
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
        self.metrics.aborted.increment(1);
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
        self.metrics.abort_duration.record(took.as_secs_f64());
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

/// A random 64-bit value (run ids, process ids), without a dependency:
/// the standard library's per-process random hash keys.
pub(crate) fn rand_u64() -> u64 {
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
mod tests;
