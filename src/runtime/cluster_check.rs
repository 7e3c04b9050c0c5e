//! `streamfold check --cluster`: whether the cluster fits the topology,
//! asked before `run` trips on it.
//!
//! It connects as `run` would (the same settings, credentials included)
//! and checks: every source topic exists and this principal may describe
//! it (a topic it may not see is reported as such, not as missing); the
//! sources are co-partitioned (the same partition count); internal topics
//! that exist already have that count too (the dead-letter topic may
//! differ) and the changelogs are compacted; and what this principal may
//! do with every topic and group the application uses, as `run` asks it
//! at startup (`permissions`). Nothing is created or changed.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use super::RuntimeError;
use super::admin::{refuse_uncompacted_changelogs, topic_partitions, while_unanswered};
use super::settings::{self, RunOptions};
use crate::topology::{InternalKind, Topology};

/// How long one metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// What `check --cluster` found.
#[derive(Debug, Default)]
pub struct ClusterReport {
    /// The sources' partition count, when they agree.
    pub partitions: Option<i32>,
    /// Internal topics that exist already.
    pub existing_internal: usize,
    /// What would stop `run`, in words.
    pub problems: Vec<String>,
}

/// Checks the cluster `options` and `topology` name against the topology.
/// An unreachable cluster or refused credentials are errors; what does
/// not fit is in the report.
pub fn check_cluster(
    topology: &Topology,
    options: &RunOptions,
) -> Result<ClusterReport, RuntimeError> {
    let mut settings = settings::admin_config(topology, options);
    // Asking for a missing topic's metadata must not create it.
    settings.set("allow.auto.create.topics", "false");
    super::connect::verify(&settings)?;
    let servers = settings
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string();
    let admin: AdminClient<DefaultClientContext> = settings.create()?;
    let existing = topic_partitions(&admin, &servers)?;
    let mut report = ClusterReport::default();

    let mut counts: Vec<(&str, i32)> = Vec::new();
    for source in &topology.sources {
        let topic = source.config.topic.as_str();
        if counts.iter().any(|(t, _)| *t == topic) {
            continue;
        }
        match existing.get(topic) {
            // A global table is read whole: its count is its own.
            Some(_) if source.global() => {}
            Some(&n) => counts.push((topic, n)),
            None => report.problems.push(match describe_refused(&admin, topic) {
                Some(code) => format!(
                    "source `{}` reads topic `{topic}`, which this principal may not describe ({code})",
                    source.name
                ),
                None => format!(
                    "source `{}` reads topic `{topic}`, which does not exist on {servers}",
                    source.name
                ),
            }),
        }
    }
    if let Some(&(_, first)) = counts.first() {
        if counts.iter().all(|(_, n)| *n == first) {
            report.partitions = Some(first);
        } else {
            let list: Vec<String> = counts
                .iter()
                .map(|(t, n)| format!("`{t}` has {n}"))
                .collect();
            report.problems.push(format!(
                "source topics must have the same number of partitions (records of a key meet in one task only if they are co-partitioned): {}",
                list.join(", ")
            ));
        }
    }
    let mut changelogs = Vec::new();
    for internal in topology.internal_topics() {
        let Some(&n) = existing.get(&internal.name) else {
            continue;
        };
        report.existing_internal += 1;
        if let Some(wanted) = report.partitions
            && n != wanted
            && internal.kind != InternalKind::DeadLetter
        {
            report.problems.push(format!(
                "internal topic `{}` has {n} partitions but the sources have {wanted}; delete it (its data is derived, `streamfold reset` does) or fix the sources",
                internal.name
            ));
        }
        if internal.kind == InternalKind::Changelog {
            changelogs.push(internal.name);
        }
    }
    match refuse_uncompacted_changelogs(&admin, &changelogs) {
        Ok(()) => {}
        Err(RuntimeError::Cluster(problem)) => report.problems.push(problem),
        Err(other) => return Err(other),
    }
    // Topics that do not exist yet are left out (`run` creates them and
    // asks again); a transactional id's ACL cannot be asked about, only
    // met, and `run` names it when the broker refuses it. Asked again
    // while the broker does not answer (a new cluster's group coordinator
    // still loading), as `run` asks.
    let never = AtomicBool::new(false);
    let permitted = while_unanswered(
        &never,
        || super::permissions::check(&admin, &settings, topology),
        |_| {},
    );
    match permitted {
        Ok(()) => {}
        Err(refused @ RuntimeError::NotAuthorized { .. }) => {
            report.problems.push(refused.to_string());
        }
        Err(other) => return Err(other),
    }
    Ok(report)
}

/// Whether the broker refuses this principal a description of `topic`
/// (a topic it may not describe is absent from the full listing).
fn describe_refused(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Option<RDKafkaErrorCode> {
    let metadata = admin
        .inner()
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .ok()?;
    let error = metadata.topics().first()?.error()?;
    let code = RDKafkaErrorCode::from(error);
    (code == RDKafkaErrorCode::TopicAuthorizationFailed).then_some(code)
}
