//! Startup checks against the cluster: the broker answers, sources exist
//! and are co-partitioned, internal topics exist with the right partition
//! count (created when missing), sink topics exist (created only when the
//! topology opts in).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;

use super::RuntimeError;
use crate::topology::{InternalKind, Topology};

/// How long the broker gets to answer before we say it is unreachable.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// What startup learned about the cluster.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Partitions of every source (and so the number of tasks).
    pub partitions: i32,
}

struct Creation {
    topic: NewTopicSpec,
    why: String,
}

struct NewTopicSpec {
    name: String,
    partitions: i32,
    compact: bool,
}

fn topic_partitions(
    admin: &AdminClient<DefaultClientContext>,
    servers: &str,
) -> Result<HashMap<String, i32>, RuntimeError> {
    let metadata = admin
        .inner()
        .fetch_metadata(None, METADATA_TIMEOUT)
        .map_err(|e| RuntimeError::Unreachable {
            servers: servers.to_string(),
            error: e.to_string(),
        })?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect())
}

/// Checks the cluster and creates what is missing.
pub fn prepare(topology: &Topology, config: &ClientConfig) -> Result<Layout, RuntimeError> {
    let servers = config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string();
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let existing = topic_partitions(&admin, &servers)?;

    let mut missing = Vec::new();
    let mut counts = Vec::new();
    for source in &topology.sources {
        match existing.get(&source.config.topic) {
            Some(&n) => counts.push((source.config.topic.as_str(), n)),
            None => missing.push(format!(
                "`{}` (source `{}`)",
                source.config.topic, source.name
            )),
        }
    }
    if !missing.is_empty() {
        return Err(RuntimeError::Startup(format!(
            "source topic {} does not exist on {servers}; create it first",
            missing.join(", ")
        )));
    }
    let partitions = counts[0].1;
    if counts.iter().any(|(_, n)| *n != partitions) {
        let list: Vec<String> = counts
            .iter()
            .map(|(t, n)| format!("`{t}` has {n}"))
            .collect();
        return Err(RuntimeError::Startup(format!(
            "source topics must have the same number of partitions (records of a key meet in one task only if they are co-partitioned): {}",
            list.join(", ")
        )));
    }

    let mut create = Vec::new();
    for internal in topology.internal_topics() {
        let wanted = partitions;
        match existing.get(&internal.name) {
            Some(&n) if n != wanted && internal.kind != InternalKind::DeadLetter => {
                return Err(RuntimeError::Startup(format!(
                    "internal topic `{}` has {n} partitions but the sources have {wanted}; delete it (its data is derived) or fix the sources",
                    internal.name
                )));
            }
            Some(_) => {}
            None => create.push(Creation {
                topic: NewTopicSpec {
                    name: internal.name.clone(),
                    partitions: wanted,
                    compact: internal.kind == InternalKind::Changelog,
                },
                why: match internal.kind {
                    InternalKind::Changelog => "changelog".into(),
                    InternalKind::Repartition => "repartition".into(),
                    InternalKind::DeadLetter => "dead letters".into(),
                },
            }),
        }
    }
    let changelogs: Vec<String> = topology
        .internal_topics()
        .into_iter()
        .filter(|t| t.kind == InternalKind::Changelog && existing.contains_key(&t.name))
        .map(|t| t.name)
        .collect();
    refuse_uncompacted_changelogs(&admin, &changelogs)?;
    for sink in &topology.sinks {
        if existing.contains_key(&sink.config.topic)
            || create.iter().any(|c| c.topic.name == sink.config.topic)
        {
            continue;
        }
        if !sink.config.create {
            return Err(RuntimeError::Startup(format!(
                "sink `{}` writes topic `{}`, which does not exist on {servers}; create it or set `create: true` on the sink",
                sink.name, sink.config.topic
            )));
        }
        create.push(Creation {
            topic: NewTopicSpec {
                name: sink.config.topic.clone(),
                partitions: sink
                    .config
                    .partitions
                    .map_or(partitions, |p| p.get() as i32),
                compact: sink.config.compact,
            },
            why: format!("sink `{}`", sink.name),
        });
    }
    if !create.is_empty() {
        create_topics(&admin, &create)?;
        wait_for_topics(&admin, &servers, &create)?;
    }
    Ok(Layout { partitions })
}

fn create_topics(
    admin: &AdminClient<DefaultClientContext>,
    create: &[Creation],
) -> Result<(), RuntimeError> {
    let compact = [("cleanup.policy", "compact")];
    let new_topics: Vec<NewTopic<'_>> = create
        .iter()
        .map(|c| {
            let topic = NewTopic::new(
                &c.topic.name,
                c.topic.partitions,
                TopicReplication::Fixed(-1),
            );
            if c.topic.compact {
                compact.iter().fold(topic, |t, (k, v)| t.set(k, v))
            } else {
                topic
            }
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::Startup(format!("cannot start the admin runtime: {e}")))?;
    let options = AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT));
    let results = runtime.block_on(admin.create_topics(&new_topics, &options))?;
    for (result, creation) in results.into_iter().zip(create) {
        match result {
            Ok(name) => {
                tracing::info!(topic = %name, partitions = creation.topic.partitions, purpose = %creation.why, "Created topic.")
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(RuntimeError::Startup(format!(
                    "cannot create topic `{name}` ({}): {code}",
                    creation.why
                )));
            }
        }
    }
    Ok(())
}

fn wait_for_topics(
    admin: &AdminClient<DefaultClientContext>,
    servers: &str,
    create: &[Creation],
) -> Result<(), RuntimeError> {
    let deadline = Instant::now() + METADATA_TIMEOUT;
    loop {
        let existing = topic_partitions(admin, servers)?;
        let pending: Vec<&str> = create
            .iter()
            .map(|c| c.topic.name.as_str())
            .filter(|name| !existing.contains_key(*name))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RuntimeError::Startup(format!(
                "created topics do not show up in the cluster metadata: {}",
                pending.join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Refuses existing changelog topics whose `cleanup.policy` is not
/// `compact`: under `delete`, retention removes old records, and a restore
/// from scratch would silently rebuild only the state written within the
/// retention period. A broker that does not report the setting (nisshi
/// returns no entries for topics created without explicit configs) cannot
/// be checked, and is let through.
fn refuse_uncompacted_changelogs(
    admin: &AdminClient<DefaultClientContext>,
    changelogs: &[String],
) -> Result<(), RuntimeError> {
    if changelogs.is_empty() {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::Startup(format!("cannot start the admin runtime: {e}")))?;
    let resources: Vec<ResourceSpecifier<'_>> = changelogs
        .iter()
        .map(|t| ResourceSpecifier::Topic(t.as_str()))
        .collect();
    let options = AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT));
    let results = runtime.block_on(admin.describe_configs(&resources, &options))?;
    let mut refused = Vec::new();
    for (topic, result) in changelogs.iter().zip(results) {
        let policy = match result {
            Ok(resource) => resource
                .get("cleanup.policy")
                .and_then(|entry| entry.value.clone()),
            Err(code) => {
                tracing::debug!(topic, %code, "Cannot read the changelog's configuration.");
                None
            }
        };
        match policy {
            Some(policy) if !policy.split(',').any(|p| p.trim() == "compact") => {
                refused.push(format!("`{topic}` (cleanup.policy={policy})"));
            }
            Some(_) => {}
            None => {
                tracing::debug!(
                    topic,
                    "The broker does not report the changelog's cleanup.policy."
                );
            }
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    Err(RuntimeError::Startup(format!(
        "changelog topics must be compacted, or retention deletes state a restore needs: {}. \
         Fix each with `kafka-configs.sh --bootstrap-server <servers> --alter --entity-type topics \
         --entity-name <topic> --add-config cleanup.policy=compact` and start again.",
        refused.join(", ")
    )))
}
