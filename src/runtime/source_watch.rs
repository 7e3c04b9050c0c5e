//! The identity of the source topics while the application runs.
//!
//! A topic deleted and created again under the same name is a new log: its
//! offsets start over and hold other records. The group's positions, the
//! tasks' state and the changelogs all describe the old one. librdkafka
//! does not tell a consumer: a position past the new log's end is "out of
//! range" and reset to `auto.offset.reset`, one inside it simply goes on
//! reading. Kafka gives every topic an id (KIP-516) that a re-creation
//! changes, so the watch remembers each source topic's id when `run`
//! starts and compares it again, from a thread of its own so the
//! processing loop never waits on the broker: every [`INTERVAL`], and at
//! once when the engine asks ([`SourceWatch::check_now`]: records behind a
//! task's position, a new assignment). A changed or vanished id stops the
//! application ([`RuntimeError::SourceReplaced`]); the way on is
//! `streamfold reset`. An answer that is no answer (a timeout, a broker
//! away) decides nothing and is asked again later.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;

use super::RuntimeError;

/// How often the watch compares the ids unasked.
const INTERVAL: Duration = Duration::from_secs(10);

/// How long startup asks for the ids of a cluster that does not answer.
const STARTUP_PATIENCE: Duration = Duration::from_secs(60);

/// How long one DescribeTopics request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the cluster says of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identity {
    /// The topic exists with this id (base64, as Kafka's tools print it).
    Id(String),
    /// The cluster does not know the topic.
    Missing,
}

/// The watch over the source topics' ids; dropping it stops its thread.
pub(crate) struct SourceWatch {
    nudge: Sender<()>,
    verdict: Mutex<Receiver<RuntimeError>>,
}

impl SourceWatch {
    /// Reads each of `topics`' ids now (they exist: `run` checked) and
    /// starts watching them.
    pub(crate) fn start(
        settings: &ClientConfig,
        topics: &[String],
    ) -> Result<SourceWatch, RuntimeError> {
        let client: BaseConsumer = settings.create()?;
        // A broker restarting during startup does not answer for a while:
        // ask again, as the other startup checks do, before giving up.
        let deadline = std::time::Instant::now() + STARTUP_PATIENCE;
        let known = loop {
            match describe(&client, topics) {
                Ok(known) => break known,
                Err(reason) if std::time::Instant::now() < deadline => {
                    tracing::warn!(%reason, "Cannot read the source topics' ids yet; retrying.");
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(reason) => {
                    return Err(RuntimeError::Cluster(format!(
                        "cannot read the source topics' ids: {reason}"
                    )));
                }
            }
        };
        let mut baseline = BTreeMap::new();
        for topic in topics {
            match known.get(topic) {
                Some(Identity::Id(id)) => {
                    baseline.insert(topic.clone(), id.clone());
                }
                _ => {
                    return Err(RuntimeError::Cluster(format!(
                        "source topic `{topic}` does not exist"
                    )));
                }
            }
        }
        let (nudge, nudged) = mpsc::channel();
        let (judged, verdict) = mpsc::channel();
        std::thread::Builder::new()
            .name("source-watch".into())
            .spawn(move || watch(&client, &baseline, &nudged, &judged))
            .map_err(|source| RuntimeError::Resources {
                what: "the source watch".into(),
                source,
            })?;
        Ok(SourceWatch {
            nudge,
            verdict: Mutex::new(verdict),
        })
    }

    /// Compares the ids without waiting for the next round.
    pub(crate) fn check_now(&self) {
        // The thread is gone only after it sent its verdict, which
        // `replaced` hands over.
        let _ = self.nudge.send(());
    }

    /// The error to stop with, once a source topic is found replaced.
    pub(crate) fn replaced(&self) -> Option<RuntimeError> {
        self.verdict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_recv()
            .ok()
    }
}

/// The watch's thread: compares until a topic is replaced (and says so)
/// or the [`SourceWatch`] is dropped.
fn watch(
    client: &BaseConsumer,
    baseline: &BTreeMap<String, String>,
    nudged: &Receiver<()>,
    judged: &Sender<RuntimeError>,
) {
    let topics: Vec<String> = baseline.keys().cloned().collect();
    loop {
        match nudged.recv_timeout(INTERVAL) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        // Several nudges while a request was out: one more round answers
        // them all.
        while nudged.try_recv().is_ok() {}
        let now = match describe(client, &topics) {
            Ok(now) => now,
            Err(reason) => {
                tracing::debug!(%reason, "Cannot read the source topics' ids now; asking again later.");
                continue;
            }
        };
        for (topic, id) in baseline {
            let Some(identity) = now.get(topic) else {
                continue;
            };
            let recreated = match identity {
                Identity::Id(now) if now == id => continue,
                Identity::Id(now) => Some(now.clone()),
                Identity::Missing => None,
            };
            let _ = judged.send(RuntimeError::SourceReplaced {
                topic: topic.clone(),
                id: id.clone(),
                recreated,
            });
            return;
        }
    }
}

/// Each of `topics`' identity, by one DescribeTopics request. Topics the
/// answer leaves out, or reports with another error than "unknown", are
/// left out: nothing is known of them.
fn describe(
    client: &BaseConsumer,
    topics: &[String],
) -> Result<BTreeMap<String, Identity>, String> {
    let names: Vec<CString> = topics
        .iter()
        .map(|t| CString::new(t.as_str()).map_err(|_| format!("topic name `{t}` holds a NUL")))
        .collect::<Result<_, _>>()?;
    let mut pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let rk = client.client().native_ptr();
    // SAFETY: every pointer handed to librdkafka below is live for the
    // call (names and pointers outlive it, `rk` is the client's); each
    // object librdkafka returns is destroyed once, by the guard that owns
    // it; the result event's contents are read before the event goes.
    unsafe {
        let collection = Owned::new(
            rdsys::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len()),
            rdsys::rd_kafka_TopicCollection_destroy,
        )
        .ok_or("cannot build the topic collection")?;
        let options = Owned::new(
            rdsys::rd_kafka_AdminOptions_new(
                rk,
                rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
            ),
            rdsys::rd_kafka_AdminOptions_destroy,
        )
        .ok_or("cannot build the request options")?;
        let mut errstr = [0 as c_char; 256];
        let millis = REQUEST_TIMEOUT.as_millis() as i32;
        rdsys::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr(),
            millis,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = Owned::new(rdsys::rd_kafka_queue_new(rk), rdsys::rd_kafka_queue_destroy)
            .ok_or("cannot create a queue")?;
        rdsys::rd_kafka_DescribeTopics(rk, collection.ptr(), options.ptr(), queue.ptr());
        // The request times out on its own and is then answered with that
        // error: wait for the answer, whatever it is (a queue destroyed
        // while its request is outstanding trips an assertion in
        // librdkafka 2.12 when the request later times out).
        let event = loop {
            if let Some(event) = Owned::new(
                rdsys::rd_kafka_queue_poll(queue.ptr(), millis + 5_000),
                rdsys::rd_kafka_event_destroy,
            ) {
                break event;
            }
        };
        if rdsys::rd_kafka_event_type(event.ptr()) != rdsys::RD_KAFKA_EVENT_DESCRIBETOPICS_RESULT {
            return Err("an unexpected answer".into());
        }
        if rdsys::rd_kafka_event_error(event.ptr()) != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(text(rdsys::rd_kafka_event_error_string(event.ptr())));
        }
        let result = rdsys::rd_kafka_event_DescribeTopics_result(event.ptr());
        let mut count = 0;
        let descriptions = rdsys::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        let mut out = BTreeMap::new();
        for i in 0..count {
            let description = *descriptions.add(i);
            let name = text(rdsys::rd_kafka_TopicDescription_name(description));
            let error = rdsys::rd_kafka_TopicDescription_error(description);
            let code = if error.is_null() {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
            } else {
                rdsys::rd_kafka_error_code(error)
            };
            match code {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR => {
                    let id = rdsys::rd_kafka_TopicDescription_topic_id(description);
                    if !id.is_null() {
                        out.insert(name, Identity::Id(text(rdsys::rd_kafka_Uuid_base64str(id))));
                    }
                }
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                | RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_ID => {
                    out.insert(name, Identity::Missing);
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// A C string librdkafka owns, copied.
///
/// # Safety
/// `text` is null or a NUL-terminated string live for the call.
unsafe fn text(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: see the function's contract.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// An object librdkafka returned, destroyed with its destructor on drop.
struct Owned<T> {
    ptr: NonNull<T>,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Owned<T> {
    fn new(ptr: *mut T, destroy: unsafe extern "C" fn(*mut T)) -> Option<Owned<T>> {
        NonNull::new(ptr).map(|ptr| Owned { ptr, destroy })
    }

    fn ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from librdkafka with `destroy` as its
        // destructor, and is destroyed here only.
        unsafe { (self.destroy)(self.ptr.as_ptr()) }
    }
}
