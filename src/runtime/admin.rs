//! Startup checks against the cluster: the broker answers, sources exist
//! and are co-partitioned, internal topics exist with the right partition
//! count (created when missing), sink topics exist (created only when the
//! topology opts in).
//!
//! Source topics are the user's, and are often created by whoever
//! produces to them, after streamfold started: [`wait_for_sources`] waits
//! for them (unless `kafka.wait_for_sources: false`), saying what it waits
//! for, before [`prepare`] checks the rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::RuntimeError;
use super::connect::unanswered;
use crate::task::limits::{Acceptance, TopicLimits};
use crate::telemetry;
use crate::topology::{InternalKind, Topology};

/// How long the broker gets to answer before we say it is unreachable.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the cluster is asked again while source topics are missing.
pub(super) const WAIT_POLL_EVERY: Duration = Duration::from_secs(1);
/// How often a shutdown request is looked for while waiting.
const WAIT_SHUTDOWN_EVERY: Duration = Duration::from_millis(100);
/// How often the topics still missing are logged.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(10);
/// How long startup's cluster checks are tried again while the broker does
/// not answer.
pub(super) const PREPARE_PATIENCE: Duration = Duration::from_secs(60);

/// What startup learned about the cluster.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// Partitions of every source (and so the number of tasks).
    pub(crate) partitions: i32,
    /// What the topics the topology writes (sinks, changelogs, repartition
    /// and dead-letter topics) accept, where the cluster reports it.
    pub(crate) topic_limits: TopicLimits,
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

pub(crate) fn topic_partitions(
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

fn bootstrap_servers(config: &ClientConfig) -> String {
    config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string()
}

/// The source topics not in `existing`, each once, in topology order.
fn missing_sources<'t>(topology: &'t Topology, existing: &HashMap<String, i32>) -> Vec<&'t str> {
    let mut missing: Vec<&str> = Vec::new();
    for source in &topology.sources {
        let topic = source.config.topic.as_str();
        if !existing.contains_key(topic) && !missing.contains(&topic) {
            missing.push(topic);
        }
    }
    missing
}

/// The startup error naming missing source topics and the sources that
/// read them.
fn missing_sources_error(topology: &Topology, missing: &[&str], servers: &str) -> RuntimeError {
    let named: Vec<String> = topology
        .sources
        .iter()
        .filter(|s| missing.contains(&s.config.topic.as_str()))
        .map(|s| format!("`{}` (source `{}`)", s.config.topic, s.name))
        .collect();
    let wait_hint = if topology.kafka.wait_for_sources {
        ""
    } else {
        ", or set `kafka.wait_for_sources: true` to wait for it"
    };
    RuntimeError::Cluster(format!(
        "source topic {} does not exist on {servers}; create it first{wait_hint}",
        named.join(", ")
    ))
}

/// How [`wait_for_sources`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcesWait {
    /// Every source topic exists.
    Ready,
    /// Shutdown was requested before they all existed.
    Stopped,
}

/// Waits until every source topic exists, so `run` may start before the
/// topics are created. While some are missing, logs them every 10 s and
/// exports their number as [`telemetry::MISSING_SOURCE_TOPICS`] (0 once
/// they exist); returns [`SourcesWait::Stopped`] soon after `shutdown` is
/// set. With `kafka.wait_for_sources: false` a missing topic is an error
/// at once. An unreachable broker, refused credentials or a failed TLS
/// handshake are errors at once too ([`super::connect::verify`]); once the
/// broker has answered, a failed metadata request while waiting is logged
/// and tried again.
pub fn wait_for_sources(
    topology: &Topology,
    config: &ClientConfig,
    shutdown: &AtomicBool,
) -> Result<SourcesWait, RuntimeError> {
    super::connect::verify(config)?;
    let servers = bootstrap_servers(config);
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let gauge =
        metrics::gauge!(telemetry::MISSING_SOURCE_TOPICS, "topology" => topology.name.clone());
    // The broker answered `verify`; one that stops answering right after
    // (a restart) is waited for as `prepare_patiently` waits for it.
    let deadline = Instant::now() + PREPARE_PATIENCE;
    let mut existing = loop {
        match topic_partitions(&admin, &servers) {
            Ok(existing) => break existing,
            Err(error) if Instant::now() < deadline => {
                tracing::warn!(%error, "Cannot read the cluster metadata; trying again.");
                if !nap_unless_stopped(shutdown) {
                    return Ok(SourcesWait::Stopped);
                }
            }
            Err(error) => return Err(error),
        }
    };
    let started = Instant::now();
    let mut last_logged: Option<Instant> = None;
    loop {
        let missing = missing_sources(topology, &existing);
        gauge.set(missing.len() as f64);
        // A topic this client may not describe is missing from the
        // metadata whether or not it exists: no wait would bring it.
        if !missing.is_empty() {
            super::permissions::refused_sources(&admin, config, topology, &missing)?;
        }
        if missing.is_empty() {
            if last_logged.is_some() {
                tracing::info!(
                    waited_s = started.elapsed().as_secs(),
                    "Every source topic exists; starting."
                );
            }
            return Ok(SourcesWait::Ready);
        }
        if !topology.kafka.wait_for_sources {
            return Err(missing_sources_error(topology, &missing, &servers));
        }
        if last_logged.is_none_or(|at| at.elapsed() >= WAIT_LOG_EVERY) {
            tracing::warn!(
                topics = %missing.join(", "),
                servers = %servers,
                waited_s = started.elapsed().as_secs(),
                "Waiting for the source topics to be created (`kafka.wait_for_sources: false` fails instead)."
            );
            last_logged = Some(Instant::now());
        }
        if !nap_unless_stopped(shutdown) {
            tracing::info!(
                topics = %missing.join(", "),
                "Stopping before the source topics exist."
            );
            return Ok(SourcesWait::Stopped);
        }
        match topic_partitions(&admin, &servers) {
            Ok(topics) => existing = topics,
            Err(error) => {
                tracing::warn!(%error, "Cannot read the cluster metadata while waiting for the source topics; trying again.");
            }
        }
    }
}

/// [`prepare`], tried again while the broker, which has answered before
/// (`connect::verify`), does not answer now: a broker restarting while a
/// process starts must not end the process, as it does not end one that
/// runs. Gives up after [`PREPARE_PATIENCE`] (Kafka Streams' admin calls
/// wait `default.api.timeout.ms`, 60 s), or at shutdown, with the last
/// error. Anything else (a missing topic, a refusal) is an error at once.
pub(crate) fn prepare_patiently(
    topology: &Topology,
    config: &ClientConfig,
    shutdown: &AtomicBool,
) -> Result<Layout, RuntimeError> {
    while_unanswered(
        shutdown,
        || prepare(topology, config),
        |error| tracing::warn!(%error, "The cluster checks failed on a broker that stopped answering; trying again."),
    )
}

/// `attempt`, made again every [`WAIT_POLL_EVERY`] while it fails because
/// the broker does not answer ([`is_transient`]), for at most
/// [`PREPARE_PATIENCE`] or until shutdown; then its last result. `retrying`
/// hears each error that is tried again.
pub(super) fn while_unanswered<T>(
    shutdown: &AtomicBool,
    mut attempt: impl FnMut() -> Result<T, RuntimeError>,
    retrying: impl Fn(&RuntimeError),
) -> Result<T, RuntimeError> {
    let deadline = Instant::now() + PREPARE_PATIENCE;
    loop {
        match attempt() {
            Err(error) if is_transient(&error) && Instant::now() < deadline => {
                retrying(&error);
                if !nap_unless_stopped(shutdown) {
                    return Err(error);
                }
            }
            result => return result,
        }
    }
}

/// Waits [`WAIT_POLL_EVERY`], looking for shutdown every
/// [`WAIT_SHUTDOWN_EVERY`]; false if it came.
fn nap_unless_stopped(shutdown: &AtomicBool) -> bool {
    let until = Instant::now() + WAIT_POLL_EVERY;
    while Instant::now() < until {
        if shutdown.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(WAIT_SHUTDOWN_EVERY);
    }
    !shutdown.load(Ordering::Relaxed)
}

/// Whether `error` says the broker did not answer (down, restarting,
/// unreachable for a moment), not that it refused something.
pub(super) fn is_transient(error: &RuntimeError) -> bool {
    match error {
        RuntimeError::Unreachable { .. } => true,
        RuntimeError::Kafka(e) => match e {
            // rdkafka gives no code for an admin operation's error.
            KafkaError::AdminOp(code) => unanswered(*code),
            e => e.rdkafka_error_code().is_some_and(unanswered),
        },
        _ => false,
    }
}

/// Checks the cluster and creates what is missing. Missing source topics
/// are an error here: [`wait_for_sources`] is what waits for them.
fn prepare(topology: &Topology, config: &ClientConfig) -> Result<Layout, RuntimeError> {
    let servers = bootstrap_servers(config);
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let existing = topic_partitions(&admin, &servers)?;

    let missing = missing_sources(topology, &existing);
    if !missing.is_empty() {
        return Err(missing_sources_error(topology, &missing, &servers));
    }
    let partitions = source_partitions(topology, &existing)?;
    let mut create = internal_creations(topology, &existing, partitions)?;
    let changelogs: Vec<String> = topology
        .internal_topics()
        .into_iter()
        .filter(|t| t.kind == InternalKind::Changelog && existing.contains_key(&t.name))
        .map(|t| t.name)
        .collect();
    refuse_uncompacted_changelogs(&admin, &changelogs)?;
    add_sink_creations(topology, &existing, partitions, &servers, &mut create)?;
    if !create.is_empty() {
        create_topics(&admin, config, &create, &topology.kafka.internal_topics)?;
        // A topic this client may not describe looks missing, and its
        // creation then finds it exists: the permissions say why it never
        // shows up.
        wait_for_topics(&admin, &servers, &create).map_err(|error| {
            super::permissions::check(&admin, config, topology)
                .err()
                .unwrap_or(error)
        })?;
    }
    super::permissions::check(&admin, config, topology)?;
    Ok(Layout {
        partitions,
        topic_limits: written_topic_limits(&admin, topology),
    })
}

/// How many partitions the sources of `topology` have, all alike (records
/// of a key meet in one task only if the sources are co-partitioned).
fn source_partitions(
    topology: &Topology,
    existing: &HashMap<String, i32>,
) -> Result<i32, RuntimeError> {
    // Global tables are read whole by every instance: any count will do.
    let counts: Vec<(&str, i32)> = topology
        .group_sources()
        .filter_map(|s| {
            let topic = s.config.topic.as_str();
            existing.get(topic).map(|&n| (topic, n))
        })
        .collect();
    // `check` refuses a topology without sources; say so rather than index.
    let Some(&(_, partitions)) = counts.first() else {
        return Err(RuntimeError::Settings(
            "the topology has no source to read".into(),
        ));
    };
    if counts.iter().any(|(_, n)| *n != partitions) {
        let list: Vec<String> = counts
            .iter()
            .map(|(t, n)| format!("`{t}` has {n}"))
            .collect();
        return Err(RuntimeError::Cluster(format!(
            "source topics must have the same number of partitions (records of a key meet in one task only if they are co-partitioned): {}",
            list.join(", ")
        )));
    }
    Ok(partitions)
}

/// The internal topics of `topology` to create, with the sources'
/// `partitions`; an error for one that exists with another count (the
/// dead-letter topic may have any).
fn internal_creations(
    topology: &Topology,
    existing: &HashMap<String, i32>,
    partitions: i32,
) -> Result<Vec<Creation>, RuntimeError> {
    let mut create = Vec::new();
    for internal in topology.internal_topics() {
        let wanted = partitions;
        match existing.get(&internal.name) {
            Some(&n) if n != wanted && internal.kind != InternalKind::DeadLetter => {
                return Err(RuntimeError::Cluster(format!(
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
    Ok(create)
}

/// Adds to `create` the sink topics that neither exist nor are in it; an
/// error for a missing one whose sink does not say `create: true`.
fn add_sink_creations(
    topology: &Topology,
    existing: &HashMap<String, i32>,
    partitions: i32,
    servers: &str,
    create: &mut Vec<Creation>,
) -> Result<(), RuntimeError> {
    for sink in &topology.sinks {
        if existing.contains_key(&sink.config.topic)
            || create.iter().any(|c| c.topic.name == sink.config.topic)
        {
            continue;
        }
        if !sink.config.create {
            return Err(RuntimeError::Cluster(format!(
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
    Ok(())
}

/// The limits of every topic `topology` writes (internal topics and
/// sinks); none but the producer's when the cluster does not tell them.
fn written_topic_limits(
    admin: &AdminClient<DefaultClientContext>,
    topology: &Topology,
) -> TopicLimits {
    let mut written: Vec<String> = topology
        .internal_topics()
        .into_iter()
        .map(|t| t.name)
        .chain(topology.sinks.iter().map(|s| s.config.topic.clone()))
        .collect();
    written.sort();
    written.dedup();
    // Without the topics' limits only the producer's applies; a broker
    // refusal for size then still ends in a dead letter (see `limits`).
    topic_limits(admin, &written).unwrap_or_else(|error| {
        tracing::warn!(%error, "Cannot read the output topics' configuration; checking records against the producer's message.max.bytes only.");
        TopicLimits::default()
    })
}

/// What `topics` accept, as the cluster reports their configuration:
/// `max.message.bytes`, compaction and timestamp limits. The runtime
/// checks records against them, so a record the broker would refuse for
/// good becomes a dead letter instead of failing the transaction, and its
/// replay, again and again.
fn topic_limits(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[String],
) -> Result<TopicLimits, RuntimeError> {
    let mut limits = TopicLimits::default();
    for (topic, configs) in describe_topics(admin, topics)? {
        if let Some(bytes) = configs
            .get("max.message.bytes")
            .and_then(|b| b.trim().parse().ok())
        {
            tracing::debug!(topic, bytes, "Topic record size limit.");
            limits.max_message_bytes.insert(topic.clone(), bytes);
        }
        limits
            .acceptance
            .insert(topic, Acceptance::from_configs(&configs));
    }
    Ok(limits)
}

/// The configuration entries of `topics` that have a value, per topic; a
/// topic the broker says nothing about has none.
fn describe_topics(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[String],
) -> Result<HashMap<String, HashMap<String, String>>, RuntimeError> {
    if topics.is_empty() {
        return Ok(HashMap::new());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError::Resources {
            what: "the admin runtime".into(),
            source,
        })?;
    let resources: Vec<ResourceSpecifier<'_>> = topics
        .iter()
        .map(|t| ResourceSpecifier::Topic(t.as_str()))
        .collect();
    let options = AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT));
    let results = runtime.block_on(admin.describe_configs(&resources, &options))?;
    let mut out = HashMap::new();
    for (topic, result) in topics.iter().zip(results) {
        match result {
            Ok(resource) => {
                let entries = resource
                    .entries
                    .into_iter()
                    .filter_map(|e| Some((e.name, e.value?)))
                    .collect();
                out.insert(topic.clone(), entries);
            }
            Err(code) => {
                tracing::debug!(topic, %code, "Cannot read the topic's configuration.");
            }
        }
    }
    Ok(out)
}

/// Creates the topics, replicated as `replication` says (the broker's
/// defaults where it says nothing).
fn create_topics(
    admin: &AdminClient<DefaultClientContext>,
    config: &ClientConfig,
    create: &[Creation],
    replication: &crate::topology::model::InternalTopicsConfig,
) -> Result<(), RuntimeError> {
    let compact = [("cleanup.policy", "compact")];
    // -1 asks the broker for its `default.replication.factor`.
    let replicas = replication
        .replication_factor
        .map_or(-1, |r| i32::from(r.get()));
    let min_insync = replication.min_insync_replicas.map(|m| m.to_string());
    let new_topics: Vec<NewTopic<'_>> = create
        .iter()
        .map(|c| {
            let mut topic = NewTopic::new(
                &c.topic.name,
                c.topic.partitions,
                TopicReplication::Fixed(replicas),
            );
            if c.topic.compact {
                topic = compact.iter().fold(topic, |t, (k, v)| t.set(k, v));
            }
            if let Some(min) = &min_insync {
                topic = topic.set("min.insync.replicas", min);
            }
            topic
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError::Resources {
            what: "the admin runtime".into(),
            source,
        })?;
    let options = AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT));
    let results = runtime.block_on(admin.create_topics(&new_topics, &options))?;
    for (result, creation) in results.into_iter().zip(create) {
        match result {
            Ok(name) => {
                tracing::info!(topic = %name, partitions = creation.topic.partitions, purpose = %creation.why, "Created topic.")
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                if let Some(refused) =
                    super::permissions::creation_refused(config, code, &name, &creation.why)
                {
                    return Err(refused);
                }
                return Err(RuntimeError::Cluster(format!(
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
            return Err(RuntimeError::Cluster(format!(
                "created topics do not show up in the cluster metadata: {}",
                pending.join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Refuses existing changelog topics whose `cleanup.policy` is not
/// `compact` alone: under `delete`, and `compact,delete` too, retention
/// removes old records, and a restore from scratch would silently rebuild
/// only the state written within the retention period. A broker that does
/// not report the setting cannot be checked, and is let through.
pub(crate) fn refuse_uncompacted_changelogs(
    admin: &AdminClient<DefaultClientContext>,
    changelogs: &[String],
) -> Result<(), RuntimeError> {
    let configs = describe_topics(admin, changelogs)?;
    let mut refused = Vec::new();
    for topic in changelogs {
        match configs.get(topic).and_then(|c| c.get("cleanup.policy")) {
            Some(policy) if policy.split(',').any(|p| p.trim() != "compact") => {
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
    Err(RuntimeError::Cluster(format!(
        "changelog topics must be compacted only, or retention deletes state a restore needs: {}. \
         Fix each with `kafka-configs.sh --bootstrap-server <servers> --alter --entity-type topics \
         --entity-name <topic> --add-config cleanup.policy=compact` and start again.",
        refused.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_that_does_not_answer_an_admin_request_is_asked_again() {
        for code in [
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::RequestTimedOut,
            RDKafkaErrorCode::NotCoordinator,
            RDKafkaErrorCode::CoordinatorLoadInProgress,
        ] {
            assert!(is_transient(&RuntimeError::Kafka(KafkaError::AdminOp(
                code
            ))));
            assert!(is_transient(&RuntimeError::Kafka(
                KafkaError::MetadataFetch(code)
            )));
        }
    }

    #[test]
    fn a_refusal_is_not_asked_again() {
        for code in [
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::ClusterAuthorizationFailed,
            RDKafkaErrorCode::InvalidConfig,
        ] {
            assert!(!is_transient(&RuntimeError::Kafka(KafkaError::AdminOp(
                code
            ))));
        }
        assert!(!is_transient(&RuntimeError::Cluster("no".into())));
    }
}
