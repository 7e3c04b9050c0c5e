//! The field-at-a-time path: a source whose every record goes to one
//! fold-like node that reads only some fields of the value has just those
//! fields built from the bytes ([`FieldwiseSource`]), unless most of its records
//! are bound for other tasks, when building the whole record costs less.

use std::borrow::Cow;

use serde_json::Value;
use smallvec::SmallVec;

use super::routing::{Rekeyed, rekey};
use super::{Output, TIMERS_PER_RECORD, Task, TaskError};
use crate::formats::Codecs;
use crate::operators::OpError;
use crate::record::json::{self};
use crate::record::{Origin, Timestamp};
use crate::state::timers::Clock;
use crate::topology::Topology;

/// What [`Task::source_fields`] did with a record.
pub(super) enum FieldsRead {
    /// Its operator took the fields it reads.
    Taken,
    /// It is to be taken whole.
    Whole,
}

/// A source whose records may be read a field at a time: the node and
/// input they go to, that node being its only target and reading only
/// some fields of a value ([`crate::operators::FieldwiseOperator`]).
pub(super) struct FieldwiseSource {
    pub(super) node: usize,
    pub(super) input: usize,
    /// The node's `key_by` pointer, if any, then the pointers it reads.
    pub(super) projection: json::Projection,
    pub(super) keyed: bool,
    /// How many of the latest records read this way were bound for
    /// another partition's task, in 1,024ths (a moving average). Such a
    /// record is parsed twice, so above [`ELSEWHERE_LIMIT`] records are
    /// taken whole, all but one in [`ELSEWHERE_PROBE`], which keeps the
    /// average current.
    pub(super) elsewhere: u16,
    /// Records taken whole unread since the last probe.
    pub(super) skipped: u16,
    /// Records whose fields were read (taken or not), for tests to see
    /// which way was taken.
    #[cfg(test)]
    pub(super) read: usize,
}

/// The share of records bound elsewhere, in 1,024ths, above which reading
/// a field at a time costs more than it saves (BENCHMARKS.md, "Only those
/// fields built, in one pass": a record bound elsewhere costs about three
/// times what a local one saves).
pub(super) const ELSEWHERE_LIMIT: u16 = 200;
/// While above the limit, one record in this many is still read a field
/// at a time.
pub(super) const ELSEWHERE_PROBE: u16 = 16;

impl Task {
    /// The way of [`super::Records::process_source_bytes`] that builds only the
    /// fields the operator reads, or says that the record is to be taken
    /// whole (and nothing was done).
    pub(super) fn source_fields(
        &mut self,
        topology: &Topology,
        source: usize,
        origin: &Origin<'_>,
        codecs: &Codecs,
        timestamp: Timestamp,
        out: &mut Vec<Output>,
    ) -> Result<FieldsRead, TaskError> {
        let Some(path) = &mut self.field_paths[source] else {
            return Ok(FieldsRead::Whole);
        };
        if path.elsewhere > ELSEWHERE_LIMIT {
            path.skipped += 1;
            if path.skipped < ELSEWHERE_PROBE {
                return Ok(FieldsRead::Whole);
            }
            path.skipped = 0;
        }
        let Some(keyless) = codecs.plain_json_keyless(source) else {
            return Ok(FieldsRead::Whole);
        };
        #[cfg(test)]
        {
            path.read += 1;
        }
        let path = &*path;
        let (node, input, projection) = (path.node, path.input, &path.projection);
        let Some(values) = origin.payload.and_then(|payload| projection.read(payload)) else {
            return Ok(FieldsRead::Whole);
        };
        let read_key = match origin.key {
            Some(key) if !keyless => Some(key),
            _ => None,
        };
        let mut key: Option<Cow<'_, [u8]>> = read_key.map(Cow::Borrowed);
        // As `deliver_one` re-keys and routes a record. A record without
        // its key, or bound for another partition's task, is taken whole:
        // parsed again.
        if path.keyed {
            match rekey(key.as_deref(), values[projection.slot(0)].as_ref()) {
                Rekeyed::Kept => {}
                Rekeyed::New(new) => key = Some(Cow::Owned(new.into())),
                Rekeyed::Missing => return Ok(FieldsRead::Whole),
            }
            if let Some(key) = &key
                && !self.routing.is_here(key)
            {
                self.note_elsewhere(source, true);
                return Ok(FieldsRead::Whole);
            }
        }
        let keyed = path.keyed;
        let fields: SmallVec<[Option<&Value>; 8]> = (usize::from(keyed)..projection.len())
            .map(|pointer| values[projection.slot(pointer)].as_ref())
            .collect();
        if keyed {
            self.note_elsewhere(source, false);
        }
        self.advance_event_time(timestamp);
        self.last_record = Some((self.clocks.processing, self.clocks.event));
        self.run_operator(topology, node, input, Some(origin), out, |operator, ctx| {
            match operator.fieldwise() {
                Some(fieldwise) => {
                    fieldwise.process_fields(key.as_deref(), timestamp, &fields, ctx)
                }
                // A source is read a field at a time only for a node that
                // declared the way (`Task::new`).
                None => Err(OpError::Internal(
                    "a record was read a field at a time for an operator that takes whole records"
                        .into(),
                )),
            }
        })?;
        self.fire_timers(Clock::Event, out, TIMERS_PER_RECORD)?;
        #[cfg(test)]
        {
            self.fields_taken += 1;
        }
        Ok(FieldsRead::Taken)
    }

    /// Moves source `source`'s average of records bound elsewhere
    /// ([`FieldwiseSource::elsewhere`]) by one record.
    ///
    /// Above the limit only probes are counted, so each weighs more: a
    /// source whose records turn local is read a field at a time again
    /// after about six probes.
    fn note_elsewhere(&mut self, source: usize, elsewhere: bool) {
        if let Some(path) = &mut self.field_paths[source] {
            let shift = if path.elsewhere > ELSEWHERE_LIMIT {
                2
            } else {
                4
            };
            if elsewhere {
                path.elsewhere += (1024 - path.elsewhere) >> shift;
            } else {
                path.elsewhere -= path.elsewhere >> shift;
            }
        }
    }
}
