//! `streamfold dlq replay`: send dead letters back to their source topics.
//!
//! Reads the dead-letter topic from where the previous replay stopped
//! (consumer group `<app>-dlq-replay`; `--from-beginning` starts over) up
//! to the end it had when the replay started. Each letter whose original
//! topic is known (`streamfold.dlq.topic`) and that matches the `--filter`
//! jq condition is produced to that topic with its original key, value and
//! headers (the `streamfold.dlq.*` headers removed, and
//! `streamfold.replayed` naming the letter). A letter whose payload was cut
//! to fit the dead-letter topic (`streamfold.dlq.truncated`) is counted and
//! left: sending the start of a record would be worse than sending none. Sends and the replay's progress
//! commit in one transaction every thousand letters, so an interrupted
//! replay resumes without sending a letter twice. `--dry-run` only counts.
//!
//! The filter sees the letter's value as `.` (JSON, or the text when it is
//! not JSON) and `$key`, `$timestamp`, `$headers` (dead-letter headers
//! included), for example
//! `--filter '$headers["streamfold.dlq.node"] == "fold_account"'`.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::Value;

use super::RuntimeError;
use super::commit::{CommitError, Produce, Transactions};
use super::fetch::{RawHeaders, owned_headers};
use super::settings::{RunOptions, admin_config};
use crate::operators::expr::{Bindings, Program};
use crate::task::dlq_headers;
use crate::topology::Topology;

/// Header on replayed records: `<dead-letter topic>/<partition>/<offset>`.
pub(crate) const REPLAYED_HEADER: &str = "streamfold.replayed";

/// Letters per transaction.
const BATCH: usize = 1000;

/// A record's headers, name and value, in their order.
type Headers = Vec<(String, Vec<u8>)>;

pub struct ReplayOptions {
    pub filter: Option<Program>,
    pub dry_run: bool,
    pub from_beginning: bool,
}

/// What a replay did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Letters read.
    pub read: u64,
    /// Letters sent (or, in a dry run, that would be), per topic.
    pub replayed: BTreeMap<String, u64>,
    /// Letters the filter left out.
    pub filtered_out: u64,
    /// Letters with no original topic (raised by timers): cannot be
    /// replayed.
    pub no_origin: u64,
    /// Letters the filter failed on (counted, left in place).
    pub filter_errors: u64,
    /// Letters whose payload was cut to fit the dead-letter topic: the
    /// record is incomplete, so they cannot be replayed.
    pub truncated: u64,
}

impl ReplayReport {
    pub fn total_replayed(&self) -> u64 {
        self.replayed.values().sum()
    }
}

pub fn replay(
    topology: &Topology,
    options: &RunOptions,
    replay: ReplayOptions,
) -> Result<ReplayReport, RuntimeError> {
    let topic = topology.dead_letter_topic.as_str();
    let group = format!("{}-dlq-replay", topology.name);
    super::connect::verify(&admin_config(topology, options))?;
    let (consumer, partitions) = dead_letter_consumer(topology, options, &group)?;
    let (start, mut end) = unread(&consumer, topic, partitions, replay.from_beginning)?;
    let mut report = ReplayReport::default();
    if end.is_empty() {
        return Ok(report);
    }
    consumer.assign(&start)?;

    let mut txn = replay_transactions(topology, options, &group, replay.dry_run)?;
    let mut positions: BTreeMap<i32, i64> = BTreeMap::new();
    let mut in_batch = 0;
    while !end.is_empty() {
        let Some(message) = consumer.poll(Duration::from_secs(5)) else {
            // Transaction markers at the end of a partition are never
            // delivered; the position tells.
            let position = consumer.position()?;
            end.retain(|p, high| {
                !matches!(position.find_partition(topic, *p).map(|e| e.offset()), Some(Offset::Offset(o)) if o >= *high)
            });
            continue;
        };
        let message = message?;
        let partition = message.partition();
        positions.insert(partition, message.offset() + 1);
        if end
            .get(&partition)
            .is_some_and(|high| message.offset() + 1 >= *high)
        {
            end.remove(&partition);
        }
        report.read += 1;
        let Some((origin, headers)) =
            letter_to_replay(&message, replay.filter.as_ref(), &mut report)
        else {
            continue;
        };
        *report.replayed.entry(origin.clone()).or_default() += 1;
        let Some(txn) = &mut txn else { continue };
        send_letter(txn, topic, &message, &origin, headers)?;
        in_batch += 1;
        if in_batch >= BATCH {
            commit(txn, &consumer, topic, &positions)?;
            in_batch = 0;
        }
    }
    if let Some(txn) = &mut txn {
        // Progress commits even when everything was filtered out.
        txn.begin().map_err(RuntimeError::Commit)?;
        commit(txn, &consumer, topic, &positions)?;
    }
    Ok(report)
}

/// A consumer of the dead-letter topic in the replay's group, and how many
/// partitions the topic has (an error if it does not exist).
fn dead_letter_consumer(
    topology: &Topology,
    options: &RunOptions,
    group: &str,
) -> Result<(BaseConsumer, i32), RuntimeError> {
    let topic = topology.dead_letter_topic.as_str();
    let mut consumer_config = admin_config(topology, options);
    consumer_config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed");
    let consumer: BaseConsumer = consumer_config.create()?;
    let servers = consumer_config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| RuntimeError::Unreachable {
            servers: servers.clone(),
            error: e.to_string(),
        })?;
    let partitions = metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32);
    if partitions == 0 {
        return Err(RuntimeError::Cluster(format!(
            "the dead-letter topic `{topic}` does not exist on {servers}"
        )));
    }
    Ok((consumer, partitions))
}

/// Where to start reading each partition of `topic` (where the previous
/// replay stopped, or its beginning), and where to stop: its end as of
/// now. A partition with nothing left to read is in neither.
fn unread(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: i32,
    from_beginning: bool,
) -> Result<(TopicPartitionList, BTreeMap<i32, i64>), RuntimeError> {
    let mut wanted = TopicPartitionList::new();
    for p in 0..partitions {
        wanted.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(wanted, Duration::from_secs(10))?;
    let mut start = TopicPartitionList::new();
    let mut end: BTreeMap<i32, i64> = BTreeMap::new();
    for p in 0..partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        let from = match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) if !from_beginning => o,
            _ => low,
        };
        if from < high {
            start.add_partition_offset(topic, p, Offset::Offset(from))?;
            end.insert(p, high);
        }
    }
    Ok((start, end))
}

/// The transactional producer that sends the letters and commits the
/// replay's progress, none in a dry run.
fn replay_transactions(
    topology: &Topology,
    options: &RunOptions,
    group: &str,
    dry_run: bool,
) -> Result<Option<Transactions>, RuntimeError> {
    Ok(if dry_run {
        None
    } else {
        let mut config = admin_config(topology, options);
        config
            .set("transactional.id", group)
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random");
        Some(Transactions::new(
            &topology.name,
            &config,
            true,
            &super::commit::TestHooks::default(),
            crate::task::limits::TopicLimits::default(),
            // A replay is a command that ends: a coordinator that does not
            // answer within one wait (30 s) fails it.
            &std::sync::atomic::AtomicBool::new(true),
        )?)
    })
}

/// The original topic and the headers of a letter that is to be replayed;
/// none, counted in `report`, for one the filter leaves out or fails on,
/// one with no original topic and one whose payload was cut.
fn letter_to_replay(
    message: &BorrowedMessage<'_>,
    filter: Option<&Program>,
    report: &mut ReplayReport,
) -> Option<(String, Headers)> {
    let partition = message.partition();
    let headers = owned_headers(RawHeaders::of_message(message));
    if let Some(filter) = filter {
        let value = message
            .payload()
            .map(|p| {
                serde_json::from_slice(p)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(p).into_owned()))
            })
            .unwrap_or(Value::Null);
        let bindings = Bindings {
            key: message.key(),
            timestamp: message.timestamp().to_millis().unwrap_or(0),
            headers: &headers,
        };
        match filter.test(&value, &bindings) {
            Ok(true) => {}
            Ok(false) => {
                report.filtered_out += 1;
                return None;
            }
            Err(e) => {
                tracing::warn!(partition, offset = message.offset(), error = %e, "The filter failed on a dead letter; leaving it.");
                report.filter_errors += 1;
                return None;
            }
        }
    }
    let origin = headers
        .iter()
        .rev()
        .find(|(k, _)| k == dlq_headers::TOPIC)
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
    let Some(origin) = origin else {
        report.no_origin += 1;
        return None;
    };
    if headers
        .iter()
        .any(|(k, _)| k == crate::task::limits::TRUNCATED_HEADER)
    {
        report.truncated += 1;
        return None;
    }
    Some((origin, headers))
}

/// Sends a letter of `topic` back to `origin` in the open transaction,
/// with its original headers and one naming the letter.
fn send_letter(
    txn: &mut Transactions,
    topic: &str,
    message: &BorrowedMessage<'_>,
    origin: &str,
    headers: Headers,
) -> Result<(), RuntimeError> {
    let partition = message.partition();
    let mut original: Vec<(String, Vec<u8>)> = headers
        .into_iter()
        .filter(|(k, _)| !dlq_headers::ALL.contains(&k.as_str()) && k != REPLAYED_HEADER)
        .collect();
    original.push((
        REPLAYED_HEADER.into(),
        format!("{topic}/{partition}/{}", message.offset()).into_bytes(),
    ));
    txn.send(Produce {
        topic: origin,
        partition: None,
        key: message.key(),
        payload: message.payload(),
        headers: &original,
        timestamp: message.timestamp().to_millis(),
        tracked: 0,
    })
    .map_err(RuntimeError::Commit)
}

fn commit(
    txn: &mut Transactions,
    consumer: &BaseConsumer,
    topic: &str,
    positions: &BTreeMap<i32, i64>,
) -> Result<(), RuntimeError> {
    let offsets =
        super::commit::offsets_list(positions.iter().map(|(p, o)| (topic.to_string(), *p, *o)));
    match txn.commit(consumer, |_| offsets) {
        Ok(_) => Ok(()),
        Err(CommitError::Aborted(reason)) => {
            let _ = txn.abort();
            Err(RuntimeError::Commit(CommitError::Aborted(format!(
                "{reason}; nothing of the replay was sent, run it again"
            ))))
        }
        Err(fatal) => Err(RuntimeError::Commit(fatal)),
    }
}
