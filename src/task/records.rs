//! A run of records handed to a task ([`Records`]): source records,
//! decoded whole or a field at a time, and records read back from a
//! repartition topic.

use std::sync::Arc;

use super::fields::FieldsRead;
use super::{Output, Seen, TIMERS_PER_RECORD, Task, TaskError, Upstream, dead_letter};
use crate::formats::{CodecError, Codecs};
use crate::record::{Origin, Record, Timestamp};
use crate::state::timers::Clock;
use crate::telemetry::{DeadLetterReason, NodeCounter};
use crate::topology::Topology;

/// A task taking a run of records ([`Task::records`]), such as its share
/// of a polled batch. The topology is held once for the run: cloning its
/// `Arc` for every record made the threads processing different tasks
/// contend on its count (BENCHMARKS.md, "The topology held once per batch").
pub struct Records<'t> {
    pub(super) task: &'t mut Task,
    pub(super) topology: Arc<Topology>,
}

impl Records<'_> {
    /// One record from source `source`: `decoded` is the decoded record or
    /// why decoding failed.
    pub fn process_source(
        &mut self,
        source: usize,
        origin: &Origin<'_>,
        decoded: Result<Record, CodecError>,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        self.task
            .source_record(&self.topology, source, origin, decoded, out)
    }

    /// One record from source `source` as read (`origin` has its key,
    /// payload and headers), decoded by `codecs`: what the runtime and the
    /// offline driver call.
    ///
    /// A plain JSON record whose source feeds a single operator that reads
    /// only some fields of a value ([`crate::operators::FieldwiseOperator`]) is not decoded
    /// whole: one pass over it builds only the fields the operator reads
    /// and its `key_by` field ([`crate::record::json::Projection`]; BENCHMARKS.md, "Only
    /// the fields an operator reads"). A record that way cannot take
    /// exactly as [`Records::process_source`] would (a value that is not
    /// JSON, a missing `key_by` field, a record bound for another
    /// partition's task) is taken whole, so the two ways differ in cost
    /// only. A source most of whose records are bound for other tasks is
    /// taken whole from the start, as that costs less ([`super::fields::FieldwiseSource`]).
    pub fn process_source_bytes(
        &mut self,
        source: usize,
        origin: &Origin<'_>,
        codecs: &Codecs,
        timestamp: Timestamp,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let decoded =
            match self
                .task
                .source_fields(&self.topology, source, origin, codecs, timestamp, out)?
            {
                FieldsRead::Taken => return Ok(()),
                FieldsRead::Whole => codecs.decode_record(
                    source,
                    origin.key,
                    origin.payload,
                    timestamp,
                    origin.headers.to_vec(),
                ),
            };
        self.process_source(source, origin, decoded, out)
    }

    /// One record read back from node `node`'s repartition topic, for its
    /// `input`-th input. A record whose `upstream` position was already
    /// seen is a re-delivery (a broker that shows aborted transactions) and
    /// is dropped, counted.
    pub(crate) fn process_repartitioned(
        &mut self,
        node: usize,
        input: usize,
        upstream: Option<Upstream>,
        origin: &Origin<'_>,
        record: Record,
        out: &mut Vec<Output>,
    ) -> Result<(), TaskError> {
        let task = &mut *self.task;
        if let (Some(upstream), Some(seen)) = (upstream, task.nodes[node].seen) {
            let current = Seen {
                offset: upstream.offset,
                seq: upstream.seq,
            };
            let mut view = task.state.view(seen);
            let duplicate = view
                .get(upstream.source.as_bytes())?
                .is_some_and(|last| (current.offset, current.seq) <= (last.offset, last.seq));
            if duplicate {
                task.nodes[node]
                    .stats
                    .add(NodeCounter::RepartitionDuplicates, 1);
                return Ok(());
            }
            view.put(upstream.source.as_bytes(), current);
        }
        task.advance_event_time(record.timestamp);
        task.last_record = Some((task.clocks.processing, task.clocks.event));
        task.run_node(&self.topology, node, input, record, Some(origin), out)?;
        task.fire_timers(Clock::Event, out, TIMERS_PER_RECORD)?;
        Ok(())
    }

    /// A record on node `node`'s repartition topic that cannot be read
    /// back (not written by streamfold, or damaged): it goes to the
    /// dead-letter topic as read, counted on the node.
    pub(crate) fn unreadable_repartitioned(
        &mut self,
        node: usize,
        origin: &Origin<'_>,
        reason: &str,
        out: &mut Vec<Output>,
    ) {
        let name = &self.topology.nodes[node].name;
        self.task.nodes[node]
            .stats
            .dead_letter(DeadLetterReason::UndecodableValue);
        out.push(Output::DeadLetter(dead_letter(
            Some(origin),
            name,
            DeadLetterReason::UndecodableValue,
            reason,
            1,
        )));
    }
}
