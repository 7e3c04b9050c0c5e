//! The one path from a task's outputs to the wire, which `run` and the
//! offline driver both take ([`Writer::write`]): a sink record is encoded
//! by its sink's codecs, a re-keyed record in the repartition format
//! ([`super::repartition`]), and each is checked against what its topic
//! takes ([`Outlet::check`]) before it is sent. A record that does not
//! encode, or that its topic would refuse, becomes a dead letter carrying
//! its value as JSON and the reason, counted on the task with the sink or
//! node that made it, so nothing is lost and nothing stalls.
//!
//! Where the records go is the [`Outlet`]'s business: the open transaction
//! in `run`, the collected topics of `streamfold test`.

use super::limits::TooLarge;
use super::partitioner::partition_for;
use super::{DeadLetter, DeadLetterAt, Output, Task, repartition, sink_dead_letter};
use crate::formats::{Codecs, Wire};
use crate::record::{Origin, Record};
use crate::telemetry::DeadLetterReason;
use crate::topology::Topology;

/// Why a record must not be sent: it would fail its transaction, and the
/// transaction's replay again.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Over the producer's or the topic's size limit.
    TooLarge(TooLarge),
    /// The broker refused this very record before, for good, or its topic
    /// refuses every record like it; the reason is the broker's.
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
    pub(crate) fn code(&self) -> DeadLetterReason {
        match self {
            Refusal::TooLarge(_) => DeadLetterReason::TooLarge,
            Refusal::Refused(_) => DeadLetterReason::RefusedByBroker,
        }
    }
}

/// A record encoded for the wire: its bytes, and the record it was written
/// from, whose headers and timestamp it carries as they are.
#[derive(Debug)]
pub(crate) struct Written<'a> {
    /// The sink, or the node whose repartition topic it is for.
    pub(crate) at: DeadLetterAt,
    pub(crate) topic: &'a str,
    /// Set for a repartition record (its key's task); `None` leaves a
    /// sink record to the producer's partitioner, murmur2 like Java's.
    pub(crate) partition: Option<i32>,
    pub(crate) key: Option<&'a [u8]>,
    /// `None`: a tombstone.
    pub(crate) payload: Option<&'a [u8]>,
    /// The record it was written from.
    pub(crate) from: &'a Record,
}

/// Where a task's written outputs go.
pub(crate) trait Outlet {
    /// Why sending failed; it ends the whole write.
    type Error;

    /// Whether `record` may be sent; a refused record becomes a dead
    /// letter instead.
    fn check(&mut self, record: &Written<'_>) -> Result<(), Refusal>;

    /// Sends `record`, which [`Outlet::check`] accepted.
    fn send(&mut self, record: Written<'_>) -> Result<(), Self::Error>;

    /// Sends a dead letter to the topology's dead-letter topic, its payload
    /// cut to fit that topic when it is too large
    /// ([`super::limits::Limits::fit_dead_letter`]).
    fn send_dead_letter(&mut self, letter: &DeadLetter) -> Result<(), Self::Error>;
}

/// What a task's outputs are written with.
pub(crate) struct Writer<'a> {
    pub(crate) topology: &'a Topology,
    pub(crate) codecs: &'a Codecs,
    /// The number of tasks: the partitions of every repartition topic.
    pub(crate) partitions: i32,
}

impl Writer<'_> {
    /// Writes what `task` emitted while processing the record at `origin`
    /// (`None`: a punctuation) to `outlet`, in order. Dead letters made on
    /// the way are counted on `task`, as of its next commit like the rest.
    pub(crate) fn write<O: Outlet>(
        &self,
        task: &mut Task,
        outputs: impl Iterator<Item = Output>,
        origin: Option<&Origin<'_>>,
        outlet: &mut O,
    ) -> Result<(), O::Error> {
        // The position of each repartition record among the outputs of its
        // source record, which lets the receiving task drop a copy re-sent
        // after a failure.
        let mut seq = 0u32;
        for output in outputs {
            match output {
                Output::Sink { sink, record } => {
                    self.write_sink(task, sink, &record, origin, outlet)?;
                }
                Output::Repartition {
                    node,
                    input,
                    mut record,
                } => {
                    let payload = repartition::write(&mut record, input, origin, seq);
                    if origin.is_some() {
                        seq += 1;
                    }
                    let key = record.key.as_deref().unwrap_or_default();
                    let written = Written {
                        at: DeadLetterAt::Node(node),
                        topic: self.topology.nodes[node]
                            .repartition_topic
                            .as_deref()
                            .unwrap_or_default(),
                        partition: Some(partition_for(key, self.partitions)),
                        key: Some(key),
                        payload: Some(&payload),
                        from: &record,
                    };
                    self.send_checked(task, written, origin, outlet)?;
                }
                Output::DeadLetter(letter) => outlet.send_dead_letter(&letter)?,
            }
        }
        Ok(())
    }

    /// Encodes `record` for sink `sink` and sends it; a value or key the
    /// sink's codecs cannot write is a dead letter.
    fn write_sink<O: Outlet>(
        &self,
        task: &mut Task,
        sink: usize,
        record: &Record,
        origin: Option<&Origin<'_>>,
        outlet: &mut O,
    ) -> Result<(), O::Error> {
        let Wire { key, payload } = match self.codecs.encode_record(sink, record) {
            Ok(wire) => wire,
            Err(reason) => {
                let code = DeadLetterReason::Unencodable;
                let name = &self.topology.sinks[sink].name;
                task.count_dead_letter(DeadLetterAt::Sink(sink), code);
                let letter = sink_dead_letter(origin, name, code, &reason, record);
                return outlet.send_dead_letter(&letter);
            }
        };
        let written = Written {
            at: DeadLetterAt::Sink(sink),
            topic: &self.topology.sinks[sink].config.topic,
            partition: None,
            key: key.as_deref(),
            payload: payload.as_deref(),
            from: record,
        };
        self.send_checked(task, written, origin, outlet)
    }

    /// Sends `written` if its topic will take it, and otherwise its dead
    /// letter, with the value as JSON and the reason.
    fn send_checked<O: Outlet>(
        &self,
        task: &mut Task,
        written: Written<'_>,
        origin: Option<&Origin<'_>>,
        outlet: &mut O,
    ) -> Result<(), O::Error> {
        let Err(refusal) = outlet.check(&written) else {
            return outlet.send(written);
        };
        let (name, what) = match written.at {
            DeadLetterAt::Sink(sink) => {
                let name = &self.topology.sinks[sink].name;
                (name, format!("the record of sink `{name}`"))
            }
            DeadLetterAt::Node(node) => {
                let name = &self.topology.nodes[node].name;
                (name, format!("the record for node `{name}`"))
            }
        };
        let code = refusal.code();
        task.count_dead_letter(written.at, code);
        let reason = refusal.reason(&what);
        let letter = sink_dead_letter(origin, name, code, &reason, written.from);
        outlet.send_dead_letter(&letter)
    }
}
