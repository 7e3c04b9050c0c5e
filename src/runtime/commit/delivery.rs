//! The transactional producer's delivery reports: what the broker
//! acknowledged (the last offset of each tracked partition), what it
//! refused and why, and the waits for them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

use crate::runtime::changelog::TXN_HEADER;
use crate::task::limits::record_size;

/// librdkafka's `RD_KAFKA_OFFSET_INVALID`: the offset of a delivered
/// record it does not know.
pub(super) const OFFSET_INVALID: i64 = -1001;

/// Delivery reports: the highest offset produced per tracked partition,
/// the first failure, and the records the broker refused as too large.
#[derive(Default)]
pub(crate) struct Deliveries {
    pub(super) offsets: HashMap<(usize, i32), i64>,
    pub(super) failure: Option<String>,
    /// The first failure that said another producer with this
    /// transactional id took over (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH).
    pub(super) fenced: Option<String>,
    /// Topic and [`record_size`] of each record refused as too large.
    pub(super) refused: Vec<(String, usize)>,
    /// Each record the broker refused for good for another reason (see
    /// [`refused_for_good`]): its [`fingerprint`] and the broker's reason.
    pub(super) refused_for_good: Vec<(u64, String)>,
    /// The first tracked partition a record was acknowledged in without
    /// its offset: librdkafka does so for a record a retried produce
    /// found persisted already (its first reply lost, e.g. in a broker
    /// restart). Where this transaction's changelog records end is then
    /// unknown, and the next transaction could not name it.
    pub(super) offsetless: Option<(usize, i32)>,
    /// Test fault `offsetless`: report every tracked record of this
    /// transaction as librdkafka does one whose offset it does not know.
    pub(super) forget_offsets: bool,
}

pub(crate) struct DeliveryContext {
    pub(super) deliveries: Mutex<Deliveries>,
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

/// How long a wait for delivery reports sleeps between looks: the first
/// nap, and the longest, for a wait that goes on.
pub(super) const NAP: Duration = Duration::from_micros(200);
pub(super) const LONGEST_NAP: Duration = Duration::from_millis(1);

/// One look of a wait for the broker's acknowledgements: serves the
/// delivery reports that are ready, then sleeps `nap`, twice as long as
/// the last time up to [`LONGEST_NAP`]. Not `producer.poll(timeout)`:
/// rust-rdkafka polls until its deadline and hands librdkafka what remains
/// in whole milliseconds, so the last millisecond of every call (all of a
/// 1 ms call) is a busy loop, and a commit waiting on a slow broker burned
/// a core, starving the broker it waited for on a shared machine
/// (`benches/frozen_broker.rs` measures the CPU such a wait costs).
/// A commit that is acknowledged at once still hears of it within a
/// fraction of a millisecond; a long wait costs about 1,000 looks a second.
///
/// `poll(0)` serves one event, and a transaction's acknowledgements come
/// as one event per partition and request, so each look serves events as
/// long as they lower what is in flight, and a look that served some
/// starts the naps over.
pub(super) fn serve_then_nap(producer: &BaseProducer<DeliveryContext>, nap: &mut Duration) {
    match serve(producer) {
        Served::AllDelivered => return,
        Served::Reports => *nap = NAP,
        Served::Nothing => {}
    }
    std::thread::sleep(*nap);
    *nap = (*nap * 2).min(LONGEST_NAP);
}

/// What one [`serve`] did.
pub(super) enum Served {
    /// Nothing is in flight any more.
    AllDelivered,
    /// Reports served, records still in flight.
    Reports,
    /// No report was ready.
    Nothing,
}

/// Serves the delivery reports that are ready, one event after the other
/// as long as they lower what is in flight.
pub(super) fn serve(producer: &BaseProducer<DeliveryContext>) -> Served {
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
pub(super) fn flushing_nap(producer: &BaseProducer<DeliveryContext>) {
    let millis = LONGEST_NAP.as_millis().max(1) as i32;
    // SAFETY: the handle is the live producer's own for the whole call;
    // with delivery reports as events, rd_kafka_flush serves no queue and
    // runs no callback, it only raises the flushing flag, wakes the
    // broker threads and waits.
    unsafe {
        rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), millis);
    }
}

/// A refusal that a retry of the same record meets again, and that names
/// the record: `INVALID_RECORD`, which the broker reports for the records
/// it found invalid (the others of their batch come back as
/// `INVALID_DIFFERENT_RECORD`, fine on their own). The causes a topic's
/// configuration tells (a keyless record for a compacted topic, a
/// timestamp past its limits) are checked before sending
/// ([`crate::task::limits::Acceptance`]); this catches the rest, and a configuration changed
/// since startup. (`INVALID_TIMESTAMP` comes back for every record of the
/// batch, so it cannot name one; records too large are learnt by size,
/// [`crate::task::limits::Limits::refused`].)
pub(super) fn refused_for_good(code: RDKafkaErrorCode) -> bool {
    code == RDKafkaErrorCode::InvalidRecord
}

/// What tells one output record from another when its transaction is
/// redone: the same input makes the same record, with the same topic, key
/// and value (its headers may carry another transaction's stamp, and its
/// partition follows from the key). Not its timestamp: librdkafka reports
/// none for a record that failed. So a later record with the very same
/// topic, key and value as one refused is refused before it is sent too
/// (a dead letter with the broker's reason, which `dlq replay` can send
/// again), the price of never sending a refused record twice.
pub(super) fn fingerprint(topic: &str, key: Option<&[u8]>, payload: Option<&[u8]>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (topic, key, payload).hash(&mut hasher);
    hasher.finish()
}

pub(super) fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
    )
}
