//! Writing test input: a producer with the Java client's partitioner that
//! remembers where each record went.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::broker::plain_client;

/// Where each delivered record went: the end offset (last offset + 1)
/// per `(topic, partition)`: the end of an input topic as its only writer
/// left it, known without asking the broker.
#[derive(Default)]
pub struct Delivered(
    Mutex<BTreeMap<(String, i32), i64>>,
    /// The first record that was not delivered, why. Reported by the
    /// reads, not by the delivery callback: a panic there can come while
    /// the producer is dropped (a test that failed first, its broker gone)
    /// and abort every test of the binary.
    Mutex<Option<String>>,
);

impl Delivered {
    /// The end offset of each `(topic, partition)` delivered to so far.
    pub fn ends(&self) -> BTreeMap<(String, i32), i64> {
        self.assert_delivered();
        self.0.lock().unwrap().clone()
    }

    /// Fails if a record was not delivered.
    pub fn assert_delivered(&self) {
        if let Some(why) = &*self.1.lock().unwrap() {
            panic!("a test record was not delivered: {why}");
        }
    }
}

impl rdkafka::ClientContext for Delivered {}

impl rdkafka::producer::ProducerContext for Delivered {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        let message = match result {
            Ok(message) => message,
            Err((e, _)) => {
                self.1.lock().unwrap().get_or_insert_with(|| e.to_string());
                return;
            }
        };
        let mut ends = self.0.lock().unwrap();
        let end = ends
            .entry((message.topic().to_string(), message.partition()))
            .or_insert(0);
        *end = (*end).max(message.offset() + 1);
    }
}

/// A producer with the Java client's partitioner.
pub struct TestProducer {
    inner: BaseProducer<Delivered>,
}

impl TestProducer {
    pub fn new() -> TestProducer {
        TestProducer::on(&plain_client())
    }

    /// A producer with `client`'s settings (servers, security).
    pub fn on(client: &ClientConfig) -> TestProducer {
        TestProducer {
            inner: client
                .clone()
                .set("partitioner", "murmur2_random")
                .set("linger.ms", "10")
                .set("enable.idempotence", "true")
                .create_with_context(Delivered::default())
                .unwrap(),
        }
    }

    /// The end offset of each of `partitions` partitions of `topic`, as
    /// far as this producer wrote it (flush first).
    pub fn ends(&self, topic: &str, partitions: i32) -> Vec<i64> {
        self.inner.context().assert_delivered();
        let ends = self.inner.context().0.lock().unwrap();
        (0..partitions)
            .map(|p| ends.get(&(topic.to_string(), p)).copied().unwrap_or(0))
            .collect()
    }

    pub fn send(&self, topic: &str, key: Option<&[u8]>, payload: &[u8], headers: &[(&str, &str)]) {
        self.send_with(topic, key, Some(payload), headers);
    }

    /// Sends a record whose payload may be absent (a tombstone).
    pub fn send_maybe(&self, topic: &str, key: Option<&[u8]>, payload: Option<&[u8]>) {
        self.send_with(topic, key, payload, &[]);
    }

    fn send_with(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) {
        let mut owned = OwnedHeaders::new();
        for (k, v) in headers {
            owned = owned.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).headers(owned);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        if let Some(key) = key {
            record = record.key(key);
        }
        loop {
            match self.inner.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    self.inner.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce failed: {e}"),
            }
        }
    }

    /// Sends a record whose header names are any bytes, which rust-rdkafka's
    /// `Header` (a `&str` name) cannot carry: through librdkafka's
    /// `rd_kafka_produceva`, as another client could write them.
    pub fn send_raw_headers(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        payload: &[u8],
        headers: &[(&[u8], &[u8])],
    ) {
        use rdkafka::bindings as rd;
        use std::ffi::{CStr, CString};
        let topic = CString::new(topic).unwrap();
        // SAFETY: every pointer handed to librdkafka lives until the call
        // returns, and the payload and key are copied (`RD_KAFKA_MSG_F_COPY`);
        // the headers list is librdkafka's own, which it takes on success and
        // which is destroyed here on failure.
        unsafe {
            let list = rd::rd_kafka_headers_new(headers.len());
            for (name, value) in headers {
                let added = rd::rd_kafka_header_add(
                    list,
                    name.as_ptr().cast(),
                    name.len() as isize,
                    value.as_ptr().cast(),
                    value.len() as isize,
                );
                assert_eq!(added, rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
            }
            let vu = |vtype, u| rd::rd_kafka_vu_t { vtype, u };
            let mem = |bytes: &[u8]| rd::rd_kafka_vu_s__bindgen_ty_1 {
                mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                    ptr: bytes.as_ptr().cast_mut().cast(),
                    size: bytes.len(),
                },
            };
            use rd::rd_kafka_vtype_t::*;
            let values = [
                vu(
                    RD_KAFKA_VTYPE_TOPIC,
                    rd::rd_kafka_vu_s__bindgen_ty_1 {
                        cstr: topic.as_ptr(),
                    },
                ),
                vu(
                    RD_KAFKA_VTYPE_PARTITION,
                    rd::rd_kafka_vu_s__bindgen_ty_1 {
                        // -1: librdkafka's `RD_KAFKA_PARTITION_UA`, the partitioner's choice.
                        i32_: partition.unwrap_or(-1),
                    },
                ),
                vu(RD_KAFKA_VTYPE_KEY, mem(key)),
                vu(RD_KAFKA_VTYPE_VALUE, mem(payload)),
                vu(
                    RD_KAFKA_VTYPE_MSGFLAGS,
                    rd::rd_kafka_vu_s__bindgen_ty_1 {
                        i: rd::RD_KAFKA_MSG_F_COPY,
                    },
                ),
                vu(
                    RD_KAFKA_VTYPE_HEADERS,
                    rd::rd_kafka_vu_s__bindgen_ty_1 { headers: list },
                ),
            ];
            let client = self.inner.client().native_ptr();
            let error = rd::rd_kafka_produceva(client, values.as_ptr(), values.len());
            if !error.is_null() {
                let text = CStr::from_ptr(rd::rd_kafka_error_string(error)).to_string_lossy();
                let text = text.into_owned();
                rd::rd_kafka_error_destroy(error);
                rd::rd_kafka_headers_destroy(list);
                panic!("produce failed: {text}");
            }
        }
    }

    pub fn send_json(&self, topic: &str, key: &str, value: &serde_json::Value) {
        self.send(
            topic,
            Some(key.as_bytes()),
            &serde_json::to_vec(value).unwrap(),
            &[],
        );
    }

    pub fn flush(&self) {
        self.inner.flush(Duration::from_secs(60)).unwrap();
        self.inner.context().assert_delivered();
    }
}
