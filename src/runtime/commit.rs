//! The commit protocol. Nothing else in streamfold begins, commits or
//! aborts a transaction.
//!
//! Under `exactly_once` a transaction begins lazily with the first record
//! consumed or produced, and at each commit:
//!
//! 1. every task's pending state changes go to its changelog partitions,
//!    collapsed per key, stamped with the task's input positions;
//! 2. the tasks' input positions are added to the transaction
//!    (`send_offsets_to_transaction` with the consumer's group metadata);
//! 3. the transaction commits; only then are the pending changes applied
//!    to each task's store, in one batch with the changelog offsets they
//!    reached (so local state never holds uncommitted data).
//!
//! Under `at_least_once` the same steps run without a transaction: outputs
//! and changelogs are flushed, state applied, then offsets committed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::changelog::TXN_HEADER;

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

/// Delivery reports: the highest offset produced per tracked partition, and
/// the first failure.
#[derive(Default)]
pub struct Deliveries {
    offsets: HashMap<(usize, i32), i64>,
    failure: Option<String>,
}

pub struct DeliveryContext {
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
                    let slot = deliveries
                        .offsets
                        .entry((tracked, message.partition()))
                        .or_insert(-1);
                    *slot = (*slot).max(message.offset());
                }
            }
            Err((error, _)) => {
                if deliveries.failure.is_none() {
                    deliveries.failure = Some(error.to_string());
                }
            }
        }
    }
}

/// One record to produce.
pub struct Produce<'a> {
    pub topic: &'a str,
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    pub headers: &'a [(String, Vec<u8>)],
    pub timestamp: Option<i64>,
    /// Tracked topic index (see [`Transactions::track`]), 0 if untracked.
    pub tracked: usize,
}

/// The producer and the transaction state of one instance.
pub struct Transactions {
    producer: BaseProducer<DeliveryContext>,
    exactly_once: bool,
    in_transaction: bool,
    run_id: String,
    sequence: u64,
    stamp: bool,
    tracked: Vec<String>,
    pub committed: u64,
    pub aborted: u64,
}

fn is_fatal(error: &KafkaError) -> bool {
    match error {
        KafkaError::Transaction(e) => e.is_fatal() || !e.txn_requires_abort() && !e.is_retriable(),
        _ => false,
    }
}

fn classify(error: KafkaError) -> CommitError {
    let fenced = matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::Fenced
        )
    );
    if fenced {
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
    pub fn new(
        config: &ClientConfig,
        exactly_once: bool,
        stamp: bool,
    ) -> Result<Transactions, KafkaError> {
        let producer: BaseProducer<DeliveryContext> =
            config.create_with_context(DeliveryContext {
                deliveries: Mutex::new(Deliveries::default()),
            })?;
        if exactly_once {
            producer.init_transactions(TXN_TIMEOUT)?;
        }
        let run_id = format!("{:016x}", rand_u64());
        Ok(Transactions {
            producer,
            exactly_once,
            in_transaction: false,
            run_id,
            sequence: 0,
            stamp,
            tracked: vec![String::new()],
            committed: 0,
            aborted: 0,
        })
    }

    /// Registers a topic whose delivered offsets are reported at commit;
    /// returns its index for [`Produce::tracked`].
    pub fn track(&mut self, topic: &str) -> usize {
        match self.tracked.iter().position(|t| t == topic) {
            Some(i) => i,
            None => {
                self.tracked.push(topic.to_string());
                self.tracked.len() - 1
            }
        }
    }

    /// Identifies this producer's run in `streamfold.txn` headers and logs.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// The `streamfold.txn` value of the current transaction.
    pub fn txn_label(&self) -> String {
        format!("{}:{}", self.run_id, self.sequence)
    }

    /// Starts a transaction if none is open (a no-op at least once).
    pub fn begin(&mut self) -> Result<(), CommitError> {
        if self.in_transaction {
            return Ok(());
        }
        if self.exactly_once {
            self.producer.begin_transaction().map_err(classify)?;
        }
        self.sequence += 1;
        self.in_transaction = true;
        Ok(())
    }

    /// Produces one record in the current transaction, waiting for queue
    /// space if the producer is full.
    pub fn send(&mut self, record: Produce<'_>) -> Result<(), CommitError> {
        self.begin()?;
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 1);
        for (key, value) in record.headers {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        let label;
        if self.stamp {
            label = self.txn_label();
            headers = headers.insert(Header {
                key: TXN_HEADER,
                value: Some(label.as_bytes()),
            });
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
        loop {
            match self.producer.send(base) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    base = returned;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((error, _)) => return Err(classify(error)),
            }
        }
    }

    /// Serves delivery reports without blocking.
    pub fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// Commits what was produced and `offsets` (next offsets to read).
    /// Returns the highest delivered offset per tracked `(topic, partition)`.
    pub fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        offsets: &TopicPartitionList,
    ) -> Result<HashMap<(String, i32), i64>, CommitError> {
        if !self.in_transaction {
            return Ok(HashMap::new());
        }
        let started = Instant::now();
        let result = if self.exactly_once {
            self.commit_transaction(consumer, offsets)
        } else {
            self.commit_at_least_once(consumer, offsets)
        };
        let mut deliveries = std::mem::take(&mut *self.deliveries());
        match (result, deliveries.failure.take()) {
            (Ok(()), None) => {
                self.in_transaction = false;
                self.committed += 1;
                metrics::histogram!(crate::telemetry::COMMIT_DURATION)
                    .record(started.elapsed().as_secs_f64());
                metrics::counter!(crate::telemetry::TRANSACTIONS_COMMITTED).increment(1);
                Ok(deliveries
                    .offsets
                    .into_iter()
                    .map(|((topic, partition), offset)| {
                        ((self.tracked[topic].clone(), partition), offset)
                    })
                    .collect())
            }
            (Ok(()), Some(failure)) => {
                // At least once: a record was not delivered; redo the work.
                self.in_transaction = false;
                Err(CommitError::Aborted(format!(
                    "a record was not delivered: {failure}"
                )))
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Waits until every produced record is acknowledged, serving
    /// delivery reports. rust-rdkafka's own `flush` (also called by
    /// `commit_transaction`) polls in 100 ms slices that run to their end
    /// even once the queue is empty, which would add ~100 ms to every
    /// commit; this loop returns as soon as the queue drains.
    fn flush_promptly(&self, timeout: Duration) -> Result<(), KafkaError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.producer.flush(Duration::ZERO) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                    if Instant::now() < deadline =>
                {
                    self.producer.poll(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
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
                .map_err(classify)?;
        }
        let offsets_sent = started.elapsed();
        self.flush_promptly(TXN_TIMEOUT).map_err(classify)?;
        let mut attempts = 0;
        loop {
            match self.producer.commit_transaction(TXN_TIMEOUT) {
                Ok(()) => break,
                Err(KafkaError::Transaction(e)) if e.is_retriable() && attempts < 3 => {
                    attempts += 1;
                    tracing::warn!(error = %e, attempts, "Commit failed with a retriable error; retrying.");
                }
                Err(e) => return Err(classify(e)),
            }
        }
        tracing::debug!(
            offsets_ms = offsets_sent.as_millis() as u64,
            commit_ms = (started.elapsed() - offsets_sent).as_millis() as u64,
            "Transaction committed."
        );
        // A delivery failure inside a committed transaction cannot happen:
        // the commit fails instead.
        Ok(())
    }

    fn commit_at_least_once<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        offsets: &TopicPartitionList,
    ) -> Result<(), CommitError> {
        self.flush_promptly(TXN_TIMEOUT)
            .map_err(|e| CommitError::Aborted(e.to_string()))?;
        if self.deliveries().failure.is_some() {
            return Ok(());
        }
        if offsets.count() > 0 {
            consumer
                .commit(offsets, rdkafka::consumer::CommitMode::Sync)
                .map_err(|e| CommitError::Aborted(format!("offset commit failed: {e}")))?;
        }
        Ok(())
    }

    /// Aborts the open transaction (if any). Fails only when the producer
    /// is unusable.
    pub fn abort(&mut self) -> Result<(), CommitError> {
        if !self.in_transaction {
            return Ok(());
        }
        self.in_transaction = false;
        self.aborted += 1;
        metrics::counter!(crate::telemetry::TRANSACTIONS_ABORTED).increment(1);
        *self.deliveries() = Deliveries::default();
        if self.exactly_once {
            self.producer.abort_transaction(TXN_TIMEOUT).map_err(|e| {
                let e = classify(e);
                match e {
                    CommitError::Aborted(m) => CommitError::Fatal(format!("abort failed: {m}")),
                    fatal => fatal,
                }
            })?;
        }
        Ok(())
    }

    /// Flushes outstanding records (shutdown at least once).
    pub fn flush(&self) {
        let _ = self.producer.flush(TXN_TIMEOUT);
    }
}

/// The offsets list for `send_offsets_to_transaction`.
pub fn offsets_list(positions: impl IntoIterator<Item = (String, i32, i64)>) -> TopicPartitionList {
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
