//! Reading global tables: every partition of each `kind: global_table`
//! source, by every instance, outside the group.
//!
//! At startup, before the instance joins the group, each table is read
//! from the offsets its store saved (the beginning, for a new or wiped
//! state directory) to the end of every partition: its last stable
//! offset, as the reader is read_committed. Only then does processing
//! start, so a stream record never joins a table that is still loading
//! (Kafka Streams restores its global stores the same way). Then one
//! thread per table keeps reading, and applies what it reads with the
//! next offsets in one atomic write per batch.
//!
//! A record the table cannot hold (no key, a key or value its codec
//! refuses) is skipped, counted in
//! [`telemetry::GLOBAL_TABLE_SKIPPED`] and logged: every instance reads
//! every record, so a dead letter would be written once per instance.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, Message};
use serde_json::Value;

use super::RuntimeError;
use super::settings::{self, RunOptions};
use crate::formats::Codecs;
use crate::state::global::{Change, Globals, RocksGlobal};
use crate::telemetry;
use crate::topology::Topology;

/// Records applied in one write, at most.
const BATCH: usize = 2_000;

/// The longest one poll waits.
const POLL: Duration = Duration::from_millis(100);

/// How often a restore still under way says how far it is.
const PROGRESS: Duration = Duration::from_secs(10);

/// The instance's global tables and the threads that keep them current.
pub(crate) struct GlobalTables {
    pub(crate) tables: Globals,
    stop: Arc<AtomicBool>,
    readers: Vec<JoinHandle<()>>,
}

impl Drop for GlobalTables {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

/// Opens every global table of `topology` under `state_root`, reads each
/// to its end, and starts the threads that keep reading. Returns `None`
/// when `shutdown` is set first.
pub(crate) fn start(
    topology: &Topology,
    options: &RunOptions,
    state_root: &Path,
    shutdown: &AtomicBool,
) -> Result<Option<GlobalTables>, RuntimeError> {
    let mut tables = GlobalTables {
        tables: Globals::default(),
        stop: Arc::new(AtomicBool::new(false)),
        readers: Vec::new(),
    };
    for (index, source) in topology.sources.iter().enumerate() {
        if !source.global() {
            continue;
        }
        let path = state_root.join(format!("global-{}", source.name));
        std::fs::create_dir_all(state_root).map_err(|e| {
            RuntimeError::Settings(format!("cannot create {}: {e}", state_root.display()))
        })?;
        let store = Arc::new(RocksGlobal::open(&path)?);
        let mut reader = Reader::new(topology, options, index, Arc::clone(&store))?;
        if !reader.restore(shutdown)? {
            return Ok(None);
        }
        tables.tables.insert(&source.name, store);
        let stop = Arc::clone(&tables.stop);
        let thread = std::thread::Builder::new()
            .name(format!("global-{}", source.name))
            .spawn(move || reader.follow(&stop))
            .map_err(|e| RuntimeError::Settings(format!("cannot start a thread: {e}")))?;
        tables.readers.push(thread);
    }
    Ok(Some(tables))
}

/// The reader's client: reaching a partition's end is how a restore
/// finishes, not an error to log.
struct Quiet;

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        let end_of_partition = matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        );
        if !end_of_partition {
            tracing::warn!(%error, reason, "Global table consumer error.");
        }
    }
}

impl ConsumerContext for Quiet {}

/// One global table's consumer and store.
struct Reader {
    consumer: BaseConsumer<Quiet>,
    decoder: Decoder,
    name: String,
    topic: String,
    store: Arc<RocksGlobal>,
    /// The next offset of each partition, as last applied.
    next: BTreeMap<i32, i64>,
}

impl Reader {
    fn new(
        topology: &Topology,
        options: &RunOptions,
        source: usize,
        store: Arc<RocksGlobal>,
    ) -> Result<Reader, RuntimeError> {
        let mut config = settings::restore_config(topology, options);
        config.set("group.id", format!("{}-global", topology.name));
        config.set("enable.partition.eof", "true");
        let def = &topology.sources[source];
        Ok(Reader {
            consumer: config.create_with_context(Quiet)?,
            decoder: Decoder {
                codecs: Codecs::new(topology)?,
                source,
                name: def.name.clone(),
                topology: topology.name.clone(),
            },
            name: def.name.clone(),
            topic: def.config.topic.clone(),
            next: store.offsets()?,
            store,
        })
    }

    /// The topic's partition count, asked until the broker answers.
    fn partitions(&self, shutdown: &AtomicBool) -> Result<Option<i32>, RuntimeError> {
        loop {
            match self
                .consumer
                .fetch_metadata(Some(&self.topic), Duration::from_secs(5))
            {
                Ok(metadata) => {
                    if let Some(topic) = metadata.topics().first()
                        && topic.error().is_none()
                        && !topic.partitions().is_empty()
                    {
                        return Ok(Some(topic.partitions().len() as i32));
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, topic = %self.topic, "Cannot read the global table's partitions yet.");
                }
            }
            if shutdown.load(Ordering::Relaxed) {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Reads every partition to its end. `false` when `shutdown` came
    /// first.
    fn restore(&mut self, shutdown: &AtomicBool) -> Result<bool, RuntimeError> {
        let Some(partitions) = self.partitions(shutdown)? else {
            return Ok(false);
        };
        let mut list = TopicPartitionList::new();
        for partition in 0..partitions {
            let offset = self
                .next
                .get(&partition)
                .map_or(Offset::Beginning, |&o| Offset::Offset(o));
            list.add_partition_offset(&self.topic, partition, offset)?;
        }
        self.consumer.assign(&list)?;
        let started = Instant::now();
        let mut reported = started;
        let mut pending: HashSet<i32> = (0..partitions).collect();
        let mut read = 0u64;
        while !pending.is_empty() {
            if shutdown.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let (count, ends) = self.step()?;
            read += count as u64;
            for partition in ends {
                pending.remove(&partition);
            }
            if reported.elapsed() >= PROGRESS {
                reported = Instant::now();
                tracing::info!(table = %self.name, read, partitions_left = pending.len(), "Restoring a global table.");
            }
        }
        tracing::info!(
            table = %self.name,
            topic = %self.topic,
            partitions,
            read,
            seconds = started.elapsed().as_secs_f64(),
            "Global table restored."
        );
        Ok(true)
    }

    /// Keeps the table current until `stop` is set.
    fn follow(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if let Err(error) = self.step() {
                tracing::error!(table = %self.name, %error, "Cannot update the global table; trying again.");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }

    /// Polls once, then takes what else is ready, up to [`BATCH`], and
    /// applies it in one write. Returns the records read and the
    /// partitions that reached their end.
    fn step(&mut self) -> Result<(usize, Vec<i32>), RuntimeError> {
        let mut changes: Vec<(Box<[u8]>, Option<Value>)> = Vec::new();
        let mut ends = Vec::new();
        let mut read = 0;
        let mut wait = POLL;
        while read < BATCH {
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => {
                    read += 1;
                    self.next.insert(message.partition(), message.offset() + 1);
                    changes.extend(self.decoder.change(&message));
                }
                Some(Err(KafkaError::PartitionEOF(partition))) => ends.push(partition),
                Some(Err(error)) => {
                    tracing::warn!(table = %self.name, %error, "Global table consumer error.");
                    break;
                }
            }
            wait = Duration::ZERO;
        }
        if read > 0 {
            let changes = changes.iter().map(|(key, value)| Change {
                key,
                value: value.as_ref(),
            });
            self.store.apply(changes, &self.next)?;
            // Counted once applied: what the count says is in the table.
            metrics::counter!(
                telemetry::GLOBAL_TABLE_RECORDS,
                "topology" => self.decoder.topology.clone(),
                "table" => self.name.clone()
            )
            .increment(read as u64);
        }
        Ok((read, ends))
    }
}

/// What reads a table's records.
struct Decoder {
    codecs: Codecs,
    source: usize,
    name: String,
    topology: String,
}

impl Decoder {
    /// `message`'s change, or `None` (counted) when the table cannot hold
    /// it.
    fn change(&self, message: &BorrowedMessage<'_>) -> Option<(Box<[u8]>, Option<Value>)> {
        match self
            .codecs
            .decode_table_change(self.source, message.key(), message.payload())
        {
            Ok(change) => Some(change),
            Err(error) => {
                metrics::counter!(
                    telemetry::GLOBAL_TABLE_SKIPPED,
                    "topology" => self.topology.clone(),
                    "table" => self.name.clone(),
                    "reason" => error.dead_letter_reason().code()
                )
                .increment(1);
                tracing::warn!(
                    table = %self.name,
                    partition = message.partition(),
                    offset = message.offset(),
                    reason = %error.reason,
                    "Skipped a global table record it cannot hold."
                );
                None
            }
        }
    }
}
