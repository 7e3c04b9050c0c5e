//! Messages as the processing loop polls them: many at a time from a
//! task's own partition queue (`rd_kafka_consume_batch_queue`), or one at
//! a time from the consumer's queue, where rebalances are served.
//!
//! rust-rdkafka polls one message per call, and each call reads the clock
//! (librdkafka and rust-rdkafka both) and wraps the message in an event
//! kept alive by an `Arc`; polling and releasing messages that way took a
//! third of the polling thread's samples (BENCHMARKS.md). A batch from
//! librdkafka costs one call, and a message is released by one
//! `rd_kafka_message_destroy`. librdkafka applies the same version
//! barrier to a batch as to a single poll, so nothing fetched before a
//! seek comes back after it.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{BorrowedMessage, Timestamp};

/// The most messages one call takes from a task's queue.
pub(crate) const MAX_TAKE: usize = 512;

/// A task's partition split off the consumer's queue, so that its
/// messages are polled apart from every other partition's.
pub(crate) struct TaskQueue<C: ConsumerContext> {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// The consumer the queue belongs to, which must outlive it.
    _consumer: Arc<BaseConsumer<C>>,
}

// librdkafka's queues are thread-safe; the engine polls each from one
// thread.
unsafe impl<C: ConsumerContext> Send for TaskQueue<C> {}
unsafe impl<C: ConsumerContext> Sync for TaskQueue<C> {}

impl<C: ConsumerContext> TaskQueue<C> {
    /// `topic`'s partition `partition`, its queue forwarded to none but
    /// this handle; `None` when librdkafka does not know the partition.
    pub(crate) fn split(
        consumer: &Arc<BaseConsumer<C>>,
        topic: &str,
        partition: i32,
    ) -> Option<Self> {
        let topic = CString::new(topic).ok()?;
        // SAFETY: the client pointer is the live consumer's; the returned
        // queue is a new reference, released in `drop`.
        let queue = unsafe {
            rdsys::rd_kafka_queue_get_partition(
                consumer.client().native_ptr(),
                topic.as_ptr(),
                partition,
            )
        };
        let queue = NonNull::new(queue)?;
        // SAFETY: `queue` is valid; forwarding to null detaches it from the
        // consumer's queue.
        unsafe { rdsys::rd_kafka_queue_forward(queue.as_ptr(), ptr::null_mut()) };
        Some(TaskQueue {
            queue,
            _consumer: Arc::clone(consumer),
        })
    }

    /// Takes up to `max` (at most [`MAX_TAKE`]) messages without waiting,
    /// in offset order, each pushed with `epoch()` as it is after the
    /// call. A message carrying an error instead (librdkafka's, for the
    /// partition) is logged and released; a fatal one is returned, the
    /// consumer cannot go on.
    pub(crate) fn take<'q>(
        &'q self,
        max: usize,
        epoch: impl FnOnce() -> u64,
        into: &mut Vec<(Fetched<'q>, u64)>,
    ) -> Result<(), RDKafkaErrorCode> {
        let max = max.min(MAX_TAKE);
        let mut raw = [ptr::null_mut(); MAX_TAKE];
        // SAFETY: `raw` has room for `max` pointers; librdkafka fills the
        // first `count` with messages the caller owns.
        let count = unsafe {
            rdsys::rd_kafka_consume_batch_queue(self.queue.as_ptr(), 0, raw.as_mut_ptr(), max)
        };
        let Ok(count) = usize::try_from(count) else {
            return Ok(());
        };
        let epoch = epoch();
        let mut fatal = None;
        for &message in &raw[..count] {
            let Some(message) = NonNull::new(message) else {
                continue;
            };
            // Owned from here: released when dropped, taken or not.
            let fetched = Fetched(Kind::Task(message, PhantomData));
            let err = fetched.raw().err;
            if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                into.push((fetched, epoch));
                continue;
            }
            let error = RDKafkaErrorCode::from(err);
            if error == RDKafkaErrorCode::Fatal {
                fatal = Some(error);
            }
            tracing::warn!(topic = fetched.topic(), partition = fetched.partition(), %error, "Consumer error.");
        }
        fatal.map_or(Ok(()), Err)
    }
}

impl<C: ConsumerContext> Drop for TaskQueue<C> {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `split`, released once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// A polled message.
pub(crate) struct Fetched<'q>(Kind<'q>);

enum Kind<'q> {
    /// From the consumer's queue.
    Consumer(BorrowedMessage<'q>),
    /// From a task's queue: owned, destroyed on drop.
    Task(NonNull<rdsys::rd_kafka_message_t>, PhantomData<&'q ()>),
}

// Read-only once polled; librdkafka releases a message from any thread.
unsafe impl Send for Fetched<'_> {}
unsafe impl Sync for Fetched<'_> {}

impl<'q> From<BorrowedMessage<'q>> for Fetched<'q> {
    fn from(message: BorrowedMessage<'q>) -> Self {
        Fetched(Kind::Consumer(message))
    }
}

impl Drop for Fetched<'_> {
    fn drop(&mut self) {
        if let Kind::Task(message, _) = self.0 {
            // SAFETY: owned since `take`, destroyed once.
            unsafe { rdsys::rd_kafka_message_destroy(message.as_ptr()) };
        }
    }
}

impl Fetched<'_> {
    fn raw(&self) -> &rdsys::rd_kafka_message_t {
        // SAFETY: valid while the message is held.
        unsafe { &*self.raw_ptr() }
    }

    fn raw_ptr(&self) -> *mut rdsys::rd_kafka_message_t {
        match &self.0 {
            Kind::Consumer(message) => message.ptr(),
            Kind::Task(message, _) => message.as_ptr(),
        }
    }

    pub(crate) fn key(&self) -> Option<&[u8]> {
        let raw = self.raw();
        // SAFETY: librdkafka's key and its length, valid while held.
        unsafe { slice(raw.key.cast(), raw.key_len) }
    }

    pub(crate) fn payload(&self) -> Option<&[u8]> {
        let raw = self.raw();
        // SAFETY: as for the key.
        unsafe { slice(raw.payload.cast(), raw.len) }
    }

    /// The topic's name (Kafka's names are ASCII); empty for an error
    /// that names no topic.
    pub(crate) fn topic(&self) -> &str {
        let topic = self.raw().rkt;
        if topic.is_null() {
            return "";
        }
        // SAFETY: a message's topic handle lives as long as the message.
        let name = unsafe { CStr::from_ptr(rdsys::rd_kafka_topic_name(topic)) };
        name.to_str().unwrap_or_default()
    }

    /// The topic's handle, as an identity: while two messages are held,
    /// they are of one topic exactly when their handles are equal (each
    /// message holds a reference to its topic's handle).
    pub(crate) fn topic_handle(&self) -> *const () {
        self.raw().rkt.cast_const().cast()
    }

    pub(crate) fn partition(&self) -> i32 {
        self.raw().partition
    }

    pub(crate) fn offset(&self) -> i64 {
        self.raw().offset
    }

    pub(crate) fn timestamp(&self) -> Timestamp {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a valid message.
        let at = unsafe { rdsys::rd_kafka_message_timestamp(self.raw_ptr(), &mut kind) };
        match kind {
            _ if at == -1 => Timestamp::NotAvailable,
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => {
                Timestamp::NotAvailable
            }
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => {
                Timestamp::CreateTime(at)
            }
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                Timestamp::LogAppendTime(at)
            }
        }
    }

    /// The message's headers, owned, names read lossily ([`owned_headers`]).
    pub(crate) fn headers(&self) -> Vec<(String, Vec<u8>)> {
        // SAFETY: the message is valid while `self` is held.
        owned_headers(unsafe { RawHeaders::of(self.raw_ptr()) })
    }
}

/// A message's headers as librdkafka holds them, in order: each name as
/// bytes and its value (`None` for a null one). Kafka allows any bytes in
/// a name, and rust-rdkafka's reader panics on one that is not UTF-8, so
/// every reader of records that another client may have written (the
/// processing loop, `dlq replay`, the restore, `streamfold-loadgen read`)
/// reads headers this way.
pub struct RawHeaders<'m> {
    /// Null for a message without headers.
    headers: *const rdsys::rd_kafka_headers_t,
    next: usize,
    count: usize,
    message: PhantomData<&'m ()>,
}

impl<'m> RawHeaders<'m> {
    /// The headers of `message`.
    pub fn of_message(message: &'m BorrowedMessage<'_>) -> RawHeaders<'m> {
        // SAFETY: the message is valid for `'m`.
        unsafe { RawHeaders::of(message.ptr()) }
    }

    /// The headers of the message at `message`.
    ///
    /// # Safety
    /// `message` is valid for `'m`.
    unsafe fn of(message: *mut rdsys::rd_kafka_message_t) -> RawHeaders<'m> {
        let mut headers = ptr::null_mut();
        // SAFETY: the caller's promise; the headers belong to the message.
        let err = unsafe { rdsys::rd_kafka_message_headers(message, &mut headers) };
        let headers = if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            headers.cast_const()
        } else {
            ptr::null()
        };
        let count = if headers.is_null() {
            0
        } else {
            // SAFETY: valid headers, as above.
            unsafe { rdsys::rd_kafka_header_cnt(headers) }
        };
        RawHeaders {
            headers,
            next: 0,
            count,
            message: PhantomData,
        }
    }
}

impl<'m> Iterator for RawHeaders<'m> {
    type Item = (&'m [u8], Option<&'m [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        while self.next < self.count {
            let index = self.next;
            self.next += 1;
            let mut name = ptr::null();
            let mut value = ptr::null();
            let mut size = 0;
            // SAFETY: `index` is below the count; the outputs point into
            // the headers, which live as long as the message.
            let err = unsafe {
                rdsys::rd_kafka_header_get_all(
                    self.headers,
                    index,
                    &mut name,
                    &mut value,
                    &mut size,
                )
            };
            if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                // SAFETY: a NUL-terminated name and `size` bytes of value.
                let name = unsafe { CStr::from_ptr(name) }.to_bytes();
                return Some((name, unsafe { slice(value.cast(), size) }));
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.count - self.next))
    }
}

/// Headers as a record carries them: a name that is not UTF-8 read
/// lossily, a null value as an empty one.
pub(crate) fn owned_headers(headers: RawHeaders<'_>) -> Vec<(String, Vec<u8>)> {
    headers
        .map(|(name, value)| {
            (
                String::from_utf8_lossy(name).into_owned(),
                value.map(<[u8]>::to_vec).unwrap_or_default(),
            )
        })
        .collect()
}

/// `len` bytes at `data`, or `None` for a null pointer.
///
/// # Safety
/// A non-null `data` points to `len` readable bytes that outlive `'a`.
unsafe fn slice<'a>(data: *const u8, len: usize) -> Option<&'a [u8]> {
    if data.is_null() {
        None
    } else if len == 0 {
        Some(&[])
    } else {
        // SAFETY: the caller's promise.
        Some(unsafe { std::slice::from_raw_parts(data, len) })
    }
}
