//! The processing loop of `streamfold run`.
//!
//! One thread polls the group consumer and drives every task of this
//! instance: poll, produce, commit. Tasks are created on assignment and
//! closed on revocation, from the consumer's rebalance callback (which
//! runs inside `poll`, on this thread). The tasks decode and process the
//! messages of each polled batch, and fire their timers, side by side on
//! the processing threads ([`super::batch`]).
//!
//! **Assignment.** The group assigns partitions of the first source topic
//! (cooperative-sticky, optionally static membership). A task is a
//! partition number: with partition `p` of the first source, the instance
//! also takes partition `p` of every other source and of every repartition
//! topic, so records of a key meet in one task whatever topic they come
//! from (Kafka Streams' co-partitioning, without a custom assignor).
//!
//! **Restore.** A new task's partitions stay paused while its stores
//! replay their changelog tails ([`super::restore`]); then the task starts
//! and its partitions resume.
//!
//! The loop by job: [`poll`] (batches from the queues), [`context`]
//! (rebalance callbacks), [`lifecycle`] (a task from assignment to
//! revocation), [`dispatch`] (a batch from messages to produced outputs),
//! [`housekeeping`] (between batches), [`commits`] (commit, abort and
//! rewind) and [`membership`] (whether a failed member was replaced).

mod commits;
mod context;
mod dispatch;
mod housekeeping;
mod lifecycle;
mod membership;
mod poll;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::admin::Layout;
use super::batch::{BatchShare, Input, InputKind};
use super::commit::{CommitCycle, CommitError, FaultPoint, Faults, TaskCursor, Transactions};
use super::restore::Restorer;
use super::settings::{self, RunOptions};
use super::source_watch::SourceWatch;
use super::{RuntimeError, admin, global_tables, query, wall_clock_ms};
use crate::formats::Codecs;
use crate::state::CacheBudget;
use crate::state::global::Globals;
use crate::state::rocks::RocksResources;
use crate::task::Task;
use crate::telemetry::{self, NodeStats};
use crate::topology::Topology;
use crate::topology::model::{Guarantee, OffsetReset};

use context::EngineContext;
use membership::{MemberIds, membership_verdict_wait};
use poll::main_loop;

/// Fatal producer failures tolerated within [`FAILURE_WINDOW`] before the
/// process gives up.
const FAILURE_BUDGET: usize = 5;
const FAILURE_WINDOW: Duration = Duration::from_secs(600);

/// Runs `topology` until `shutdown` is set, then commits, closes the
/// tasks and leaves the group. A fatally failed producer closes the tasks
/// and rejoins; more than [`FAILURE_BUDGET`] such failures within
/// [`FAILURE_WINDOW`] end the process. A fenced one stops.
pub fn run(
    topology: Arc<Topology>,
    options: RunOptions,
    shutdown: Arc<AtomicBool>,
) -> Result<(), RuntimeError> {
    let topology = settings::with_overrides(topology, &options);
    Faults::new(&options.hooks)
        .check(FaultPoint::Prepare)
        .map_err(RuntimeError::Commit)?;
    let layout = match admin::prepare_patiently(
        &topology,
        &settings::admin_config(&topology, &options),
        &shutdown,
    ) {
        Ok(layout) => layout,
        // A signal while the broker did not answer: nothing has started,
        // so there is nothing to finish, and the stop is a clean one.
        Err(error) if shutdown.load(Ordering::Relaxed) && admin::is_transient(&error) => {
            tracing::info!(%error, "Stopping before the cluster checks were answered.");
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    super::metrics::register_partitions(&topology, layout.partitions);
    let mut source_topics: Vec<String> = topology
        .sources
        .iter()
        .map(|s| s.config.topic.clone())
        .collect();
    source_topics.sort();
    source_topics.dedup();
    let source_watch = Arc::new(SourceWatch::start(
        &settings::admin_config(&topology, &options),
        &source_topics,
    )?);
    tracing::info!(
        topology = %topology.name,
        instance = %options.instance_id,
        partitions = layout.partitions,
        guarantee = ?topology.processing.guarantee,
        "Starting."
    );
    let queries = match options.query_addr {
        Some(addr) => Some(query::Queries::start(
            &topology,
            &options,
            addr,
            layout.partitions,
        )?),
        None => None,
    };
    let query_state = queries.as_ref().map(|q| Arc::clone(&q.state));
    // Global tables are read whole before the group is joined, and kept
    // current until the instance stops.
    let state_root = state_root(&topology, &options);
    let Some(globals) = global_tables::start(&topology, &options, &state_root, &shutdown)? else {
        tracing::info!("Stopping while the global tables were restored.");
        if let Some(queries) = queries {
            queries.stop();
        }
        return Ok(());
    };
    let shared = Shared {
        queries: query_state,
        source_watch,
        globals: globals.tables.clone(),
    };
    let result = run_members(&topology, &options, &layout, &shutdown, &shared);
    drop(globals);
    if let Some(queries) = queries {
        queries.stop();
    }
    result
}

/// What every membership of the instance shares.
struct Shared {
    queries: Option<Arc<query::QueryState>>,
    source_watch: Arc<SourceWatch>,
    globals: Globals,
}

/// Group memberships until shutdown or a fatal error.
fn run_members(
    topology: &Arc<Topology>,
    options: &RunOptions,
    layout: &Layout,
    shutdown: &AtomicBool,
    shared: &Shared,
) -> Result<(), RuntimeError> {
    let mut failures: std::collections::VecDeque<Instant> = std::collections::VecDeque::new();
    // Kept across memberships: a group back from a broker's restart may
    // name a member id of an earlier one.
    let member_ids = MemberIds::default();
    loop {
        match run_member(topology, options, layout, shutdown, shared, &member_ids) {
            Err(RuntimeError::Commit(CommitError::Fatal(reason)))
                if !shutdown.load(Ordering::Relaxed) =>
            {
                let now = Instant::now();
                while failures
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > FAILURE_WINDOW)
                {
                    failures.pop_front();
                }
                failures.push_back(now);
                if failures.len() > FAILURE_BUDGET {
                    return Err(RuntimeError::Commit(CommitError::Fatal(format!(
                        "{reason} ({} producer failures within {} s)",
                        failures.len(),
                        FAILURE_WINDOW.as_secs()
                    ))));
                }
                tracing::error!(%reason, recent_failures = failures.len(), "The producer is unusable; closing the tasks and rejoining the group.");
                std::thread::sleep(Duration::from_secs(failures.len() as u64));
            }
            // Stopping anyway: the open transaction was not committed (the
            // broker aborts it), and the next owner of its tasks processes
            // its records again.
            Err(RuntimeError::Commit(CommitError::Fatal(reason))) => {
                tracing::warn!(%reason, "Stopping without committing the last transaction; its records are processed again by the next owner of their tasks.");
                return Ok(());
            }
            Err(RuntimeError::Commit(CommitError::Fenced(reason))) => {
                return Err(RuntimeError::Fenced {
                    transactional_id: format!("{}-{}", topology.name, options.instance_id),
                    instance: options.instance_id.clone(),
                    reason,
                });
            }
            other => return other,
        }
    }
}

/// One membership in the group: from joining to leaving.
fn run_member(
    topology: &Arc<Topology>,
    options: &RunOptions,
    layout: &Layout,
    shutdown: &AtomicBool,
    shared: &Shared,
    member_ids: &MemberIds,
) -> Result<(), RuntimeError> {
    let exactly_once = topology.processing.guarantee == Guarantee::ExactlyOnce;
    let producer_config = settings::producer_config(topology, options);
    let txn = Transactions::new(
        &topology.name,
        &producer_config,
        exactly_once,
        &options.hooks,
        layout.topic_limits.clone(),
        shutdown,
    )
    .map_err(|e| {
        super::permissions::transactional_id_refused(&producer_config, &e).unwrap_or(match e {
            RuntimeError::Kafka(kafka) => RuntimeError::Producer(kafka),
            other => other,
        })
    })?;
    tracing::info!(run = %txn.run_id(), "Producer ready; joining the group.");
    let _membership = super::health::health().member();
    let changelogs: Vec<String> = topology
        .stores()
        .map(|s| s.changelog_topic.clone())
        .collect();
    let restorer = Restorer::new(
        &settings::restore_config(topology, options),
        &topology.name,
        &changelogs,
    )?;
    let codecs = Codecs::new(topology)?;
    let threads = options
        .threads
        .unwrap_or_else(|| topology.processing.threads());
    let pool = super::threads::pool(threads, &topology.name)?;
    tracing::info!(threads, "Processing threads.");
    let mut engine = Engine::new(Arc::clone(topology), options, layout, codecs, txn, restorer);
    engine.queries = shared.queries.clone();
    engine.globals = shared.globals.clone();
    engine.source_watch = Some(Arc::clone(&shared.source_watch));
    engine.pool = pool;
    let consumer_config = settings::consumer_config(topology, options);
    let primary = topology
        .group_sources()
        .next()
        .map(|s| s.config.topic.clone())
        .ok_or_else(|| {
            RuntimeError::Settings("the topology has no source the group reads".into())
        })?;
    let context = EngineContext {
        epoch: Arc::clone(&engine.epoch),
        engine: Mutex::new(engine),
        app: topology.name.clone(),
        sources: topology
            .sources
            .iter()
            .map(|s| (s.config.topic.clone(), s.name.clone()))
            .collect(),
        member_ids: Arc::clone(member_ids),
        subscription: primary.clone(),
        rejoin_at_first_assignment: AtomicBool::new(
            consumer_config.get("group.instance.id").is_some(),
        ),
        // The subscription below begins the first join.
        rebalancing_since: Mutex::new(Some(Instant::now())),
    };
    let verdict_wait = membership_verdict_wait(&consumer_config);
    let consumer: Arc<BaseConsumer<EngineContext>> =
        Arc::new(consumer_config.create_with_context(context)?);
    consumer.subscribe(&[primary.as_str()])?;

    let result = main_loop(&consumer, shutdown);
    let closed = consumer
        .context()
        .lock()
        .shutdown(&consumer, result.is_ok());
    let client_id = consumer_config.get("client.id").unwrap_or_default();
    let result = membership::judge(
        &consumer,
        topology,
        client_id,
        verdict_wait,
        result.and(closed),
    );
    // Dropping the consumer leaves the group; its revoke callback finds no
    // task left.
    drop(consumer);
    result
}

/// Where the instance keeps its state: a directory per task, one per
/// global table.
fn state_root(topology: &Topology, options: &RunOptions) -> PathBuf {
    options
        .state_dir
        .as_ref()
        .unwrap_or(&topology.processing.state_dir)
        .join(&topology.name)
}

/// One task and its bookkeeping.
struct AssignedTask {
    task: Task,
    running: bool,
    /// The epoch it started in: messages polled before were fetched before
    /// it sought to its committed offsets.
    since: u64,
    /// The group's committed offsets are not known yet (restore waits).
    awaiting_offsets: bool,
    /// Input positions and changelog offsets, for the commit cycle.
    cursor: TaskCursor,
    /// Stats already published as metrics.
    published: Vec<NodeStats>,
    /// Block cache hits and misses of its database already published.
    cache_lookups_published: (u64, u64),
    /// Its share of the current batch, or of a round of timers.
    share: BatchShare,
    /// What it processed, and how long that took.
    metrics: telemetry::TaskMetrics,
}

struct Engine {
    topology: Arc<Topology>,
    partitions: i32,
    state_root: PathBuf,
    /// The instance's global tables, which every task reads.
    globals: Globals,
    /// The block cache and write buffers every task database shares.
    rocks: RocksResources,
    /// The record cache's budget, shared by every task's stores.
    record_cache: Arc<CacheBudget>,
    inputs: Arc<[Input]>,
    tasks: BTreeMap<i32, AssignedTask>,
    codecs: Codecs,
    cycle: CommitCycle,
    restorer: Restorer,
    /// The processing threads (none: one thread does everything).
    pool: Option<rayon::ThreadPool>,
    /// Tasks with work in the current batch or round of timers.
    busy: Vec<i32>,
    /// Tasks started since the main loop last looked: their partitions
    /// are still paused, waiting for their own queues (`poll::Queues`).
    started: Vec<i32>,
    /// Rebalance callbacks and rewinds so far, shared with the consumer
    /// context.
    epoch: Arc<AtomicU64>,
    /// The epoch of the last rewind: messages polled in an earlier epoch
    /// were fetched before it sought every task back to its last commit,
    /// and come again.
    rewound_at: u64,
    /// Records consumed since the last metrics update and since the last
    /// commit.
    consumed_unreported: u64,
    consumed_uncommitted: u64,
    now: i64,
    last_commit: Instant,
    /// Transactions aborted since the last commit.
    aborts_in_a_row: u32,
    next_punctuation: Instant,
    next_metrics: Instant,
    /// The batch and timer-round latency histograms, looked up once.
    batch_duration: metrics::Histogram,
    punctuate_duration: metrics::Histogram,
    /// Each sink's end-to-end latency histogram, by sink index.
    sink_latency: Vec<metrics::Histogram>,
    /// When to ask for new tasks' committed offsets again, and to warn.
    next_offsets_fetch: Instant,
    next_offsets_warning: Instant,
    fatal: Option<RuntimeError>,
    /// Shared with the query server (`--query-addr`).
    queries: Option<Arc<query::QueryState>>,
    /// Tells when a source topic was deleted or re-created under the run.
    source_watch: Option<Arc<SourceWatch>>,
}

impl Engine {
    fn new(
        topology: Arc<Topology>,
        options: &RunOptions,
        layout: &Layout,
        codecs: Codecs,
        txn: Transactions,
        restorer: Restorer,
    ) -> Engine {
        let mut inputs = Vec::new();
        for (index, source) in topology.sources.iter().enumerate() {
            // A global table is read outside the group (`global_tables`).
            if source.global() {
                continue;
            }
            match inputs
                .iter_mut()
                .find(|i: &&mut Input| i.topic == source.config.topic)
            {
                Some(Input {
                    kind: InputKind::Source(list),
                    ..
                }) => list.push(index),
                _ => inputs.push(Input {
                    topic: source.config.topic.clone(),
                    kind: InputKind::Source(vec![index]),
                }),
            }
        }
        for (node, def) in topology.nodes.iter().enumerate() {
            if let Some(topic) = &def.repartition_topic {
                inputs.push(Input {
                    topic: topic.clone(),
                    kind: InputKind::Repartition { node },
                });
            }
        }

        // `check` gives every source the same `offset_reset`. A repartition
        // topic starts at its beginning whatever it is, as Kafka Streams'
        // internal topics do: `latest` there would skip records this
        // application wrote before the reading task's first commit, whose
        // sources' offsets are committed.
        let first = topology.group_sources().next();
        let source_reset = match first.map(|s| s.config.offset_reset).unwrap_or_default() {
            OffsetReset::Earliest => Offset::Beginning,
            OffsetReset::Latest => Offset::End,
        };
        let resets = inputs
            .iter()
            .map(|input| match input.kind {
                InputKind::Source(_) => source_reset,
                InputKind::Repartition { .. } => Offset::Beginning,
            })
            .collect();
        let cycle = CommitCycle::new(
            txn,
            inputs.iter().map(|i| i.topic.clone()).collect(),
            &topology,
            resets,
        );
        let now = Instant::now();
        let (rocks, record_cache) = topology.state_resources();
        Engine {
            state_root: state_root(&topology, options),
            globals: Globals::default(),
            rocks,
            record_cache,
            partitions: layout.partitions,
            inputs: inputs.into(),
            tasks: BTreeMap::new(),
            codecs,
            cycle,
            restorer,
            pool: None,
            busy: Vec::new(),
            started: Vec::new(),
            epoch: Arc::new(AtomicU64::new(0)),
            rewound_at: 0,
            consumed_unreported: 0,
            consumed_uncommitted: 0,
            now: wall_clock_ms(),
            last_commit: now,
            aborts_in_a_row: 0,
            next_punctuation: now,
            next_metrics: now,
            batch_duration: metrics::histogram!(telemetry::BATCH_DURATION, "topology" => topology.name.clone()),
            punctuate_duration: metrics::histogram!(telemetry::PUNCTUATE_DURATION, "topology" => topology.name.clone()),
            sink_latency: topology
                .sinks
                .iter()
                .map(|sink| telemetry::sink_latency(&topology.name, &sink.name))
                .collect(),
            next_offsets_fetch: now,
            next_offsets_warning: now,
            fatal: None,
            source_watch: None,
            queries: None,
            topology,
        }
    }

    /// The input a topic is, by a scan: a topology has a handful of
    /// inputs, and comparing names beats hashing them per record.
    fn input_of(&self, topic: &str) -> Option<usize> {
        self.inputs.iter().position(|i| i.topic == topic)
    }

    fn fail(&mut self, error: RuntimeError) {
        if self.fatal.is_none() {
            self.fatal = Some(error);
        }
    }

    /// Every input partition of `tasks`.
    fn partitions_of(&self, tasks: &[i32]) -> TopicPartitionList {
        let mut list = TopicPartitionList::new();
        for &task in tasks {
            for input in self.inputs.iter() {
                list.add_partition(&input.topic, task);
            }
        }
        list
    }

    fn poll_timeout(&self) -> Duration {
        // A restore step waits for changelog records itself, up to its
        // budget: a sleep here would idle a restore for 10 ms in every 60.
        if self.restorer.is_restoring() {
            Duration::ZERO
        } else if self.cycle.txn.in_transaction() || self.tasks.values().any(|s| s.awaiting_offsets)
        {
            Duration::from_millis(10)
        } else {
            Duration::from_millis(100)
        }
    }
}
