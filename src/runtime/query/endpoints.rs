//! Which instance runs which task, and where it answers queries.
//!
//! Each instance with `--query-addr` writes `instance id → {address,
//! running tasks}` to the compacted, one-partition topic
//! `<app>-query-endpoints` whenever its running tasks change (and every
//! [`REFRESH`]; a tombstone when it stops), and tails the topic from
//! the beginning. The group protocol cannot carry it: rust-rdkafka exposes
//! no member metadata of our own.
//!
//! An entry may be stale for a moment (a task moved and its new owner has
//! not published yet): a request forwarded to an instance that does not
//! run the task is answered `503`, never with another instance's value.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use serde::{Deserialize, Serialize};

use super::QueryState;
use crate::runtime::RuntimeError;

/// How often an instance republishes its entry even when nothing changed.
pub(crate) const REFRESH: Duration = Duration::from_secs(30);

/// The directory topic of app `app`.
pub(crate) fn topic(app: &str) -> String {
    format!("{app}-query-endpoints")
}

/// One instance's entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Endpoint {
    /// Where the instance answers queries (`host:port`).
    pub(crate) address: String,
    /// Tasks it runs (restoring ones are not listed).
    pub(crate) running: Vec<i32>,
    /// When it was published (ms since the epoch): of two claims on a
    /// task, the newer is the task's current owner (the older may be an
    /// instance that died without withdrawing its entry).
    pub(crate) at: i64,
}

/// The instances' entries, by instance id, and where this one answers.
#[derive(Default)]
pub struct Directory {
    entries: RwLock<HashMap<String, Endpoint>>,
    /// This instance's advertised address, once known.
    own_address: OnceLock<String>,
}

/// Another instance that runs a task, as the directory knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) instance: String,
    pub(crate) address: String,
}

impl Directory {
    /// The address of another instance that runs `task`.
    pub(crate) fn owner(&self, task: i32, me: &str) -> Option<String> {
        self.owner_of(task, me).map(|o| o.address)
    }

    /// The other instance that runs `task`: of several claims, the newest.
    pub(crate) fn owner_of(&self, task: i32, me: &str) -> Option<Owner> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        newest_claim(&entries, task, me).map(|(id, e)| Owner {
            instance: id.clone(),
            address: e.address.clone(),
        })
    }

    /// Every other instance's entry, by id, with its `running` list cut to
    /// the tasks it is the owner of (the newest claim).
    pub(crate) fn others(&self, me: &str) -> Vec<(String, Endpoint)> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(String, Endpoint)> = entries
            .iter()
            .filter(|(id, _)| id.as_str() != me)
            .map(|(id, e)| {
                let mut owned = e.clone();
                owned.running.retain(|&task| {
                    newest_claim(&entries, task, me).is_some_and(|(owner, _)| owner == id)
                });
                (id.clone(), owned)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Records where this instance answers (for the instance list).
    pub(crate) fn set_own_address(&self, address: String) {
        let _ = self.own_address.set(address);
    }

    pub(crate) fn own_address(&self) -> Option<&str> {
        self.own_address.get().map(String::as_str)
    }

    pub(crate) fn set(&self, instance: String, endpoint: Option<Endpoint>) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match endpoint {
            Some(endpoint) => entries.insert(instance, endpoint),
            None => entries.remove(&instance),
        };
    }
}

/// The newest claim on `task` among instances other than `me`.
fn newest_claim<'a>(
    entries: &'a HashMap<String, Endpoint>,
    task: i32,
    me: &str,
) -> Option<(&'a String, &'a Endpoint)> {
    entries
        .iter()
        .filter(|(id, e)| id.as_str() != me && e.running.contains(&task))
        .max_by_key(|(id, e)| (e.at, id.as_str()))
}

/// Creates the directory topic if it is missing.
pub(crate) fn ensure_topic(config: &ClientConfig, app: &str) -> Result<(), RuntimeError> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let name = topic(app);
    let new = NewTopic::new(&name, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError::Resources {
            what: "the admin runtime".into(),
            source,
        })?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in runtime.block_on(admin.create_topics(&[new], &options))? {
        match result {
            Ok(_) => tracing::info!(topic = %name, "Created the query endpoints topic."),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(RuntimeError::Cluster(format!(
                    "cannot create topic `{name}` (query endpoints): {code}"
                )));
            }
        }
    }
    Ok(())
}

/// Publishes this instance's entry and tails everyone's, on a thread,
/// until [`Advertiser::stop`].
pub(crate) struct Advertiser {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Advertiser {
    pub(crate) fn start(
        config: &ClientConfig,
        app: &str,
        instance: String,
        address: String,
        state: Arc<QueryState>,
        directory: Arc<Directory>,
    ) -> Result<Advertiser, RuntimeError> {
        let topic = topic(app);
        let producer: BaseProducer = config.clone().set("linger.ms", "0").create()?;
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", format!("{app}-query-endpoints-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .create()?;
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&topic, 0, Offset::Beginning)?;
        consumer.assign(&list)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("query-endpoints".into())
            .spawn(move || {
                let publish = |running: Vec<i32>| {
                    let entry = Endpoint {
                        address: address.clone(),
                        running,
                        at: crate::runtime::wall_clock_ms(),
                    };
                    // Serializing a struct of a string and integers cannot
                    // fail.
                    let payload = serde_json::to_vec(&entry).unwrap_or_default();
                    if let Err((error, _)) =
                        producer.send(BaseRecord::to(&topic).key(&instance).payload(&payload))
                    {
                        tracing::warn!(%error, "Cannot publish this instance's query endpoint.");
                    }
                };
                let mut published: Option<u64> = None;
                let mut last = Instant::now();
                while !stopping.load(Ordering::Relaxed) {
                    let generation = state.generation();
                    if published != Some(generation) || last.elapsed() >= REFRESH {
                        publish(state.running());
                        published = Some(generation);
                        last = Instant::now();
                    }
                    producer.poll(Duration::ZERO);
                    while let Some(message) = consumer.poll(Duration::from_millis(100)) {
                        match message {
                            Ok(m) => {
                                let Some(key) = m.key().and_then(|k| std::str::from_utf8(k).ok())
                                else {
                                    continue;
                                };
                                let endpoint =
                                    m.payload().and_then(|p| serde_json::from_slice(p).ok());
                                directory.set(key.to_string(), endpoint);
                            }
                            Err(error) => {
                                tracing::debug!(%error, "Query endpoints consumer.");
                                break;
                            }
                        }
                    }
                }
                // Stopping: the entry goes (a tombstone), so no task is
                // asked here and the instance leaves the instance list.
                let gone = BaseRecord::<String, [u8]>::to(&topic).key(&instance);
                if let Err((error, _)) = producer.send(gone) {
                    tracing::warn!(%error, "Cannot withdraw this instance's query endpoint.");
                }
                let _ = producer.flush(Duration::from_secs(5));
            })
            .map_err(|source| RuntimeError::Resources {
                what: "the query endpoints' advertiser".into(),
                source,
            })?;
        Ok(Advertiser {
            stop,
            thread: Some(thread),
        })
    }

    /// Withdraws this instance's entry and stops.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_other_instances_running_the_task() {
        let directory = Directory::default();
        let entry = |address: &str, running: Vec<i32>, at: i64| {
            Some(Endpoint {
                address: address.into(),
                running,
                at,
            })
        };
        directory.set("a".into(), entry("a:1", vec![0, 1], 10));
        directory.set("b".into(), entry("b:1", vec![2], 10));
        assert_eq!(directory.owner(2, "a").as_deref(), Some("b:1"));
        assert_eq!(directory.owner(0, "a"), None, "itself is asked locally");
        assert_eq!(directory.owner(0, "b").as_deref(), Some("a:1"));
        assert_eq!(directory.owner(3, "b"), None);
        // A dead instance's entry loses to the newer claim.
        directory.set("c".into(), entry("c:1", vec![2], 20));
        assert_eq!(directory.owner(2, "a").as_deref(), Some("c:1"));
        assert_eq!(
            directory.owner_of(2, "a"),
            Some(Owner {
                instance: "c".into(),
                address: "c:1".into()
            })
        );
        // The instance list gives each task to its newest claim only.
        let others = directory.others("a");
        let running: Vec<(&str, &[i32])> = others
            .iter()
            .map(|(id, e)| (id.as_str(), e.running.as_slice()))
            .collect();
        assert_eq!(running, [("b", &[][..]), ("c", &[2][..])]);
        directory.set("c".into(), None);
        directory.set("b".into(), None);
        assert_eq!(directory.owner(2, "a"), None);
    }
}
