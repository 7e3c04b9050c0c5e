//! `streamfold reset`: start an application over, as Kafka Streams'
//! application reset tool does.
//!
//! With the application stopped (the group has no member; the tool refuses
//! otherwise), it deletes the application's internal topics (state
//! changelogs and repartition topics: derived data), deletes the consumer
//! group (every committed offset: sources, repartition topics, changelog
//! positions), commits the source offsets to start from (`earliest`,
//! `latest`, or the first record at or after a time) and removes this
//! host's local state directory. The dead-letter topic and the sinks stay:
//! they hold what the application already told the world.
//!
//! An instance elsewhere that kept its local state finds, on its next
//! start, that the changelogs no longer hold where that state stopped,
//! and wipes and restores it (an empty restore) by itself.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::RuntimeError;
use super::settings::{self, RunOptions};
use crate::topology::{InternalKind, Topology};

/// How long one broker request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where the sources start again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetTo {
    /// Each partition's first record.
    Earliest,
    /// Each partition's end: only records written from now on.
    Latest,
    /// The first record whose timestamp is at or after this time (epoch
    /// milliseconds); the end where there is none.
    Time(i64),
}

impl std::str::FromStr for ResetTo {
    type Err = String;

    fn from_str(text: &str) -> Result<ResetTo, String> {
        match text {
            "earliest" => Ok(ResetTo::Earliest),
            "latest" => Ok(ResetTo::Latest),
            time => crate::record::json::rfc3339_instant(time)
                .map(|t| ResetTo::Time(t.as_millisecond()))
                .ok_or_else(|| {
                    format!("expected earliest, latest or an RFC 3339 time, found `{time}`")
                }),
        }
    }
}

/// Why a reset did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// The application still runs: resetting under it would corrupt it.
    #[error(
        "the group `{group}` has {} member(s) ({}): stop every instance of the application first",
        members.len(),
        members.join(", ")
    )]
    GroupHasMembers {
        group: String,
        /// Client id and host of each member.
        members: Vec<String>,
    },
    /// The cluster could not be reached or refused a request.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The local state directory could not be removed.
    #[error("cannot remove the local state {}: {source}", path.display())]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<KafkaError> for ResetError {
    fn from(error: KafkaError) -> ResetError {
        ResetError::Runtime(RuntimeError::Kafka(error))
    }
}

/// What a reset does (or, with `--dry-run`, would do).
#[derive(Debug)]
pub struct ResetPlan {
    /// The consumer group whose offsets go.
    pub group: String,
    /// Internal topics that exist and will be deleted.
    pub delete_topics: Vec<String>,
    /// Per source partition: the committed offset now (none: never
    /// committed) and the offset to start from.
    pub offsets: BTreeMap<(String, i32), (Option<i64>, i64)>,
    /// This host's state directory of the application, when it exists.
    pub state_dir: Option<PathBuf>,
}

impl std::fmt::Display for ResetPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "delete the consumer group `{}` and its committed offsets",
            self.group
        )?;
        if self.delete_topics.is_empty() {
            writeln!(f, "delete no internal topic (none exists)")?;
        }
        for topic in &self.delete_topics {
            writeln!(f, "delete topic {topic}")?;
        }
        for ((topic, partition), (now, to)) in &self.offsets {
            let now = now.map_or("none".to_string(), |o| o.to_string());
            writeln!(
                f,
                "commit {topic}[{partition}] offset {to} (committed now: {now})"
            )?;
        }
        match &self.state_dir {
            Some(dir) => writeln!(f, "remove local state {}", dir.display()),
            None => writeln!(f, "no local state to remove"),
        }
    }
}

/// Plans the reset of `topology`'s application and, unless `dry_run`,
/// carries it out. Refuses while the group has members.
pub fn reset(
    topology: &Topology,
    options: &RunOptions,
    to: ResetTo,
    dry_run: bool,
) -> Result<ResetPlan, ResetError> {
    let mut settings = settings::admin_config(topology, options);
    settings.set("allow.auto.create.topics", "false");
    super::connect::verify(&settings)?;
    let group = topology.name.clone();
    let consumer: BaseConsumer = settings
        .clone()
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    refuse_members(&consumer, &group)?;
    let admin: AdminClient<DefaultClientContext> = settings.create()?;
    let servers = settings
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string();
    let existing = super::admin::topic_partitions(&admin, &servers)?;

    let delete_topics: Vec<String> = topology
        .internal_topics()
        .into_iter()
        .filter(|t| t.kind != InternalKind::DeadLetter && existing.contains_key(&t.name))
        .map(|t| t.name)
        .collect();
    let sources = source_partitions(topology, &existing);
    let committed = consumer.committed_offsets(sources.clone(), TIMEOUT)?;
    let targets = targets(&consumer, &sources, to)?;
    let offsets = targets
        .iter()
        .map(|(tp, &to)| {
            let now = committed
                .find_partition(&tp.0, tp.1)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
            (tp.clone(), (now, to))
        })
        .collect();
    let state_dir = options
        .state_dir
        .clone()
        .unwrap_or_else(|| topology.processing.state_dir.clone())
        .join(&topology.name);
    let plan = ResetPlan {
        group,
        delete_topics,
        offsets,
        state_dir: state_dir.exists().then_some(state_dir),
    };
    if dry_run {
        return Ok(plan);
    }
    carry_out(&plan, &admin, &servers, &consumer)?;
    Ok(plan)
}

/// Every partition of the sources of `topology` that exists among
/// `existing` (topic to partition count), each once.
fn source_partitions(topology: &Topology, existing: &HashMap<String, i32>) -> TopicPartitionList {
    let mut sources = TopicPartitionList::new();
    for source in topology.group_sources() {
        let topic = source.config.topic.as_str();
        let partitions = existing.get(topic).copied().unwrap_or(0);
        for partition in 0..partitions {
            if sources.find_partition(topic, partition).is_none() {
                sources.add_partition(topic, partition);
            }
        }
    }
    sources
}

/// Carries out `plan`: deletes its internal topics and its consumer
/// group, commits the source offsets to start from and removes the local
/// state directory.
fn carry_out(
    plan: &ResetPlan,
    admin: &AdminClient<DefaultClientContext>,
    servers: &str,
    consumer: &BaseConsumer,
) -> Result<(), ResetError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError::Resources {
            what: "the admin runtime".into(),
            source,
        })?;
    let admin_options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    if !plan.delete_topics.is_empty() {
        let names: Vec<&str> = plan.delete_topics.iter().map(String::as_str).collect();
        for result in runtime.block_on(admin.delete_topics(&names, &admin_options))? {
            if let Err((topic, code)) = result {
                return Err(RuntimeError::Cluster(format!(
                    "cannot delete topic `{topic}`: {code}"
                ))
                .into());
            }
        }
        wait_until_gone(admin, servers, &plan.delete_topics)?;
    }
    // The group goes whole (with the changelog positions it held), then
    // comes back holding the source offsets alone. The broker refuses to
    // delete a group with members: a second guard.
    for result in runtime.block_on(admin.delete_groups(&[plan.group.as_str()], &admin_options))? {
        match result {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::GroupIdNotFound)) => {}
            Err((group, code)) => {
                return Err(RuntimeError::Cluster(format!(
                    "cannot delete the group `{group}`: {code}"
                ))
                .into());
            }
        }
    }
    let mut commit = TopicPartitionList::new();
    for ((topic, partition), (_, to)) in &plan.offsets {
        commit.add_partition_offset(topic, *partition, Offset::Offset(*to))?;
    }
    if commit.count() > 0 {
        consumer.commit(&commit, CommitMode::Sync)?;
    }
    if let Some(dir) = &plan.state_dir {
        std::fs::remove_dir_all(dir).map_err(|source| ResetError::State {
            path: dir.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Fails when the group has members.
fn refuse_members(consumer: &BaseConsumer, group: &str) -> Result<(), ResetError> {
    let groups = consumer.fetch_group_list(Some(group), TIMEOUT)?;
    let members: Vec<String> = groups
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .map(|m| format!("{} on {}", m.client_id(), m.client_host()))
        .collect();
    if members.is_empty() {
        Ok(())
    } else {
        Err(ResetError::GroupHasMembers {
            group: group.to_string(),
            members,
        })
    }
}

/// The offset each source partition starts from.
fn targets(
    consumer: &BaseConsumer,
    sources: &TopicPartitionList,
    to: ResetTo,
) -> Result<BTreeMap<(String, i32), i64>, ResetError> {
    let mut out = BTreeMap::new();
    let by_time = match to {
        ResetTo::Time(ms) => {
            let mut query = TopicPartitionList::new();
            for e in sources.elements() {
                query.add_partition_offset(e.topic(), e.partition(), Offset::Offset(ms))?;
            }
            Some(consumer.offsets_for_times(query, TIMEOUT)?)
        }
        _ => None,
    };
    for e in sources.elements() {
        let (low, high) = consumer.fetch_watermarks(e.topic(), e.partition(), TIMEOUT)?;
        let offset = match to {
            ResetTo::Earliest => low,
            ResetTo::Latest => high,
            ResetTo::Time(_) => by_time
                .as_ref()
                .and_then(|list| list.find_partition(e.topic(), e.partition()))
                .and_then(|found| match found.offset() {
                    Offset::Offset(o) if o >= 0 => Some(o),
                    _ => None,
                })
                // No record at or after the time: the end.
                .unwrap_or(high),
        };
        out.insert((e.topic().to_string(), e.partition()), offset);
    }
    Ok(out)
}

/// Waits until the cluster no longer lists `topics`.
fn wait_until_gone(
    admin: &AdminClient<DefaultClientContext>,
    servers: &str,
    topics: &[String],
) -> Result<(), ResetError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let existing = super::admin::topic_partitions(admin, servers)?;
        let left: Vec<&String> = topics
            .iter()
            .filter(|t| existing.contains_key(*t))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(RuntimeError::Cluster(format!(
                "the cluster still lists {left:?} a minute after deleting them"
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_point_is_earliest_latest_or_a_time_with_any_offset() {
        assert_eq!("earliest".parse::<ResetTo>(), Ok(ResetTo::Earliest));
        assert_eq!("latest".parse::<ResetTo>(), Ok(ResetTo::Latest));
        assert_eq!(
            "2025-06-01T12:00:00+02:00".parse::<ResetTo>(),
            Ok(ResetTo::Time(1_748_772_000_000))
        );
        assert!("yesterday".parse::<ResetTo>().is_err());
    }
}
