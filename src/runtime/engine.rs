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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaResult;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Statistics};

use super::admin::Layout;
use super::batch::{self, BATCH, Input, InputKind, Polled, Scratch, Shared};
use super::changelog::{CHANGELOG_OFFSETS, ChangelogOffsets, EVENT_TIME, GAUGES};
use super::commit::{
    CommitCycle, CommitError, CycleTask, FaultPoint, Faults, Produce, Refusal, TaskCursor,
    Transactions,
};
use super::config::{self, RunOptions};
use super::fetch::TaskQueue;
use super::restore::Restorer;
use super::source_watch::SourceWatch;
use super::{RuntimeError, admin, query, wire};
use crate::formats::{Codecs, Wire};
use crate::record::{Origin, Record};
use crate::state::CacheBudget;
use crate::state::rocks::{RocksBackend, RocksResources};
use crate::task::partitioner::partition_for;
use crate::task::{DeadLetterAt, Output, Routing, Task};
use crate::telemetry::{self, DeadLetterReason, NodeCounter, NodeStats};
use crate::topology::Topology;
use crate::topology::model::{Guarantee, OffsetReset};

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
    let topology = config::with_producer_overrides(topology, &options);
    Faults::new(&options.hooks)
        .check(FaultPoint::Prepare)
        .map_err(RuntimeError::Commit)?;
    let layout = admin::prepare_patiently(
        &topology,
        &config::admin_config(&topology, &options),
        &shutdown,
    )?;
    super::metrics::register_partitions(&topology, layout.partitions);
    let mut source_topics: Vec<String> = topology
        .sources
        .iter()
        .map(|s| s.config.topic.clone())
        .collect();
    source_topics.sort();
    source_topics.dedup();
    let source_watch = Arc::new(SourceWatch::start(
        &config::admin_config(&topology, &options),
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
    let result = run_members(
        &topology,
        &options,
        &layout,
        &shutdown,
        query_state,
        &source_watch,
    );
    if let Some(queries) = queries {
        queries.stop();
    }
    result
}

/// Aborts in a row, without a commit between them, after which each one
/// is logged as an error: something keeps failing every transaction.
const ABORTS_BEFORE_ERROR: u32 = 5;

/// The longest pause before a transaction is tried again.
const LONGEST_ABORT_PAUSE: Duration = Duration::from_secs(30);

/// The pause after the `n`th abort in a row: none after the first (an
/// abort is usually a one-off), then 100 ms, doubling up to
/// [`LONGEST_ABORT_PAUSE`], so a failure that repeats costs the broker and
/// the machine little while it lasts.
fn abort_backoff(n: u32) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    Duration::from_millis(100)
        .saturating_mul(1 << (n - 2).min(16))
        .min(LONGEST_ABORT_PAUSE)
}

/// Group memberships until shutdown or a fatal error.
fn run_members(
    topology: &Arc<Topology>,
    options: &RunOptions,
    layout: &Layout,
    shutdown: &AtomicBool,
    queries: Option<Arc<query::QueryState>>,
    source_watch: &Arc<SourceWatch>,
) -> Result<(), RuntimeError> {
    let mut failures: std::collections::VecDeque<Instant> = std::collections::VecDeque::new();
    // Kept across memberships: a group back from a broker's restart may
    // name a member id of an earlier one.
    let member_ids = MemberIds::default();
    loop {
        match run_member(
            topology,
            options,
            layout,
            shutdown,
            queries.clone(),
            source_watch,
            &member_ids,
        ) {
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
    queries: Option<Arc<query::QueryState>>,
    source_watch: &Arc<SourceWatch>,
    member_ids: &MemberIds,
) -> Result<(), RuntimeError> {
    let exactly_once = topology.processing.guarantee == Guarantee::ExactlyOnce;
    let producer_config = config::producer_config(topology, options);
    let txn = Transactions::new(
        &producer_config,
        exactly_once,
        &options.hooks,
        layout.topic_limits.clone(),
        shutdown,
    )
    .map_err(|e| {
        super::permissions::transactional_id_refused(&producer_config, &e).unwrap_or_else(|| {
            RuntimeError::Startup(format!("cannot start the transactional producer: {e}"))
        })
    })?;
    tracing::info!(run = %txn.run_id(), "Producer ready; joining the group.");
    let _membership = super::health::health().member();
    let changelogs: Vec<String> = topology
        .stores()
        .map(|s| s.changelog_topic.clone())
        .collect();
    let restorer = Restorer::new(
        &config::restore_config(topology, options),
        &topology.name,
        &changelogs,
    )?;
    let codecs = Codecs::new(topology).map_err(|e| RuntimeError::Startup(e.to_string()))?;
    let threads = options
        .threads
        .unwrap_or_else(|| topology.processing.threads());
    let pool = batch::pool(threads, &topology.name)?;
    tracing::info!(threads, "Processing threads.");
    let mut engine = Engine::new(Arc::clone(topology), options, layout, codecs, txn, restorer);
    engine.queries = queries;
    engine.source_watch = Some(Arc::clone(source_watch));
    engine.pool = pool;
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
    };
    let consumer_config = config::consumer_config(topology, options);
    let verdict_wait = membership_verdict_wait(&consumer_config);
    let consumer: Arc<BaseConsumer<EngineContext>> =
        Arc::new(consumer_config.create_with_context(context)?);
    let primary = topology.sources[0].config.topic.clone();
    consumer.subscribe(&[primary.as_str()])?;

    let result = main_loop(&consumer, shutdown);
    let closed = consumer
        .context()
        .lock()
        .shutdown(&consumer, result.is_ok());
    let client_id = consumer_config.get("client.id").unwrap_or_default();
    let result = match result.and(closed) {
        Err(RuntimeError::Commit(CommitError::Fatal(reason)))
            if topology.kafka.static_membership =>
        {
            Err(RuntimeError::Commit(membership_verdict(
                &consumer,
                &topology.name,
                client_id,
                verdict_wait,
                reason,
            )))
        }
        Err(RuntimeError::Commit(CommitError::Fatal(reason))) => {
            let replaced = replaced_in_group(&consumer, &topology.name, client_id, verdict_wait);
            Err(RuntimeError::Commit(match replaced {
                Some(successor) => CommitError::Fenced(format!(
                    "another member of the group runs with this instance's id ({successor}) \
                     after the producer failed: {reason}"
                )),
                None => CommitError::Fatal(reason),
            }))
        }
        other => other,
    };
    // Dropping the consumer leaves the group; its revoke callback finds no
    // task left.
    drop(consumer);
    result
}

/// How long a static member whose producer failed waits for the group's
/// word on its membership: two of the consumer's heartbeats and a second
/// for the answer.
fn membership_verdict_wait(consumer: &rdkafka::ClientConfig) -> Duration {
    let heartbeat = consumer
        .get("heartbeat.interval.ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .unwrap_or(3000);
    Duration::from_millis(2 * heartbeat + 1000)
}

/// Whether a static member whose producer or consumer failed was
/// replaced: then it must stop, not rejoin, which would take the id back
/// and fence the successor in turn. A fencing error from the producer
/// cannot always tell (a transaction open past its timeout, which the
/// coordinator aborts, is reported the same way; an abort after a refused
/// produce request can time out instead). The group answers a member whose
/// `group.instance.id` another member holds with FENCED_INSTANCE_ID, a
/// fatal error of the consumer, but that member may be this process: a
/// group loaded again after a broker's restart can hold the instance under
/// a member id of an earlier membership of this process (librdkafka issue
/// 3437 reports the same). So the fencing is believed only when the group
/// lists a member with this instance's client id that this process was
/// never given; otherwise the process rejoins.
fn membership_verdict(
    consumer: &BaseConsumer<EngineContext>,
    group: &str,
    client_id: &str,
    wait: Duration,
    reason: String,
) -> CommitError {
    let deadline = Instant::now() + wait;
    loop {
        if let Some((RDKafkaErrorCode::FencedInstanceId, fenced)) = consumer.client().fatal_error()
        {
            return match replaced_in_group(consumer, group, client_id, wait) {
                Some(successor) => CommitError::Fenced(format!(
                    "the group gave this instance's static membership to another consumer \
                     ({successor}; {fenced}): {reason}"
                )),
                None => {
                    tracing::warn!(
                        %fenced,
                        "The group refused this instance as fenced, but no member but this \
                         process's own holds its id: rejoining."
                    );
                    CommitError::Fatal(format!(
                        "{reason}; the group refused this instance's earlier membership"
                    ))
                }
            };
        }
        if Instant::now() >= deadline {
            return CommitError::Fatal(reason);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a dynamic member whose producer failed was replaced by another
/// process with its instance id; if so, that member's description. The
/// producer cannot tell (its fencing by a successor and the coordinator's
/// abort of an overdue transaction are reported alike), and the group has
/// no instance ids to refuse, but its members carry their client id,
/// `<app>-<instance id>`: another member with this instance's client id is
/// a successor, which a new producer of this process would fence.
fn replaced_in_group(
    consumer: &BaseConsumer<EngineContext>,
    group: &str,
    client_id: &str,
    wait: Duration,
) -> Option<String> {
    let mut own = consumer
        .context()
        .member_ids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    own.extend(member_id(consumer));
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(groups) = consumer.fetch_group_list(Some(group), Duration::from_secs(5)) {
            let successor = groups
                .groups()
                .iter()
                .flat_map(|g| g.members())
                .find(|m| m.client_id() == client_id && !own.contains(m.id()))
                .map(|m| format!("member {} on {}", m.id(), m.client_host()));
            if successor.is_some() {
                return successor;
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The member id the group gave `consumer`, if it is a member.
fn member_id<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<String> {
    // SAFETY: the handle is the live consumer's; librdkafka returns a copy
    // of the member id (or null), which is freed with its allocator.
    let id = unsafe {
        let raw = rdkafka::bindings::rd_kafka_memberid(consumer.client().native_ptr());
        if raw.is_null() {
            return None;
        }
        let id = std::ffi::CStr::from_ptr(raw).to_string_lossy().into_owned();
        rdkafka::bindings::rd_kafka_mem_free(std::ptr::null_mut(), raw.cast());
        id
    };
    (!id.is_empty()).then_some(id)
}

fn main_loop(
    consumer: &Arc<BaseConsumer<EngineContext>>,
    shutdown: &AtomicBool,
) -> Result<(), RuntimeError> {
    let mut queues = Queues::default();
    let mut timeout = Duration::from_millis(10);
    loop {
        // Polled messages borrow the queues, so they change only here,
        // with none held.
        {
            let mut engine = consumer.context().lock();
            queues.update(consumer, &mut engine)?;
        }
        if rounds(consumer, &queues, shutdown, &mut timeout)? {
            tracing::info!("Shutting down: committing and leaving the group.");
            return Ok(());
        }
    }
}

/// Polls and processes batches, one after the other, while the tasks'
/// queues stay as they are; whether to shut down.
///
/// While the processing threads work on a batch, the polling thread polls
/// the next from the tasks' queues (a prefetch) before it joins them.
/// Those queues carry no rebalance callbacks, so the tasks stay as they
/// are meanwhile; prefetched messages a rewind or a rebalance made stale
/// are skipped like any others (their epoch is older, [`Engine::on_batch`]).
/// Left unprocessed at shutdown, they were not committed either, and come
/// again to whoever runs their task next. The polling thread also releases
/// the last batch's messages then, rather than alone after the batch.
fn rounds<'c>(
    consumer: &'c BaseConsumer<EngineContext>,
    queues: &'c Queues,
    shutdown: &AtomicBool,
    timeout: &mut Duration,
) -> Result<bool, RuntimeError> {
    let context = consumer.context();
    let mut next: Vec<Polled<'c>> = Vec::with_capacity(BATCH);
    // The last batch, handled, its messages not yet released.
    let mut handled: Vec<Polled<'c>> = Vec::new();
    // The queues must change: finish with what was prefetched first.
    let mut draining = false;
    loop {
        if shutdown.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let mut polled = std::mem::replace(&mut next, Vec::with_capacity(BATCH));
        let consumed = poll_batch(consumer, queues, &mut polled, *timeout);
        let mut prefetched = Ok(());
        if !polled.is_empty() {
            let last = std::mem::take(&mut handled);
            // Without a prefetch (or with no task to run), `last` goes
            // with the unused closure.
            let prefetch =
                (consumed.is_ok() && !draining && !queues.by_task.is_empty()).then_some(|| {
                    drop(last);
                    prefetched = poll_queues(queues, &mut next, &context.epoch);
                });
            let mut engine = context.lock();
            let result = engine.on_batch(&polled, prefetch);
            handled = polled;
            engine.recover(consumer, result)?;
        } else {
            // Idle: nothing to overlap the release with.
            handled.clear();
        }
        consumed?;
        prefetched?;
        let mut engine = context.lock();
        let result = engine.housekeeping(consumer);
        engine.recover(consumer, result)?;
        *timeout = engine.poll_timeout();
        if queues.stale(&engine) {
            if next.is_empty() {
                return Ok(false);
            }
            draining = true;
        }
    }
}

/// Each running task's partitions on queues of their own
/// ([`TaskQueue`], polled a share at a time), so that a batch takes a
/// share of every task with records waiting and the processing threads
/// all have work:
/// librdkafka queues a fetch response partition by partition, so the
/// consumer's one queue hands out long runs of a single partition, which
/// one thread processes while the others wait.
///
/// A task's partitions stay paused from assignment until it has started
/// (restored, and sought to its committed offsets); only then are they
/// split off and resumed, so every record the task processes comes from
/// its own queue, in order. What the consumer queue may still hold of them
/// was fetched before that seek, and librdkafka drops it (the seek's
/// version barrier).
#[derive(Default)]
struct Queues {
    by_task: BTreeMap<i32, Vec<TaskQueue<EngineContext>>>,
}

impl Queues {
    /// Whether a task stopped running or started since the last update.
    fn stale(&self, engine: &Engine) -> bool {
        !engine.started.is_empty()
            || self
                .by_task
                .keys()
                .any(|task| !engine.tasks.get(task).is_some_and(|s| s.running))
    }

    /// Drops the queues of tasks that stopped running; gives tasks that
    /// started queues of their own and resumes their partitions.
    fn update(
        &mut self,
        consumer: &Arc<BaseConsumer<EngineContext>>,
        engine: &mut Engine,
    ) -> Result<(), RuntimeError> {
        self.by_task
            .retain(|task, _| engine.tasks.get(task).is_some_and(|s| s.running));
        for task in std::mem::take(&mut engine.started) {
            if !engine.tasks.get(&task).is_some_and(|s| s.running) {
                continue;
            }
            let queues = engine
                .inputs
                .iter()
                .filter_map(|input| {
                    let queue = TaskQueue::split(consumer, &input.topic, task);
                    if queue.is_none() {
                        // It stays on the consumer's queue, still in order.
                        tracing::warn!(topic = %input.topic, partition = task, "No queue of its own for a partition.");
                    }
                    queue
                })
                .collect();
            self.by_task.insert(task, queues);
            consumer.resume(&engine.partitions_of(&[task]))?;
        }
        Ok(())
    }
}

/// The longest a poll waits on the consumer's queue when no task's queue
/// had anything: records arriving on a task's queue meanwhile wait that
/// long at most.
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// Fills the batch (which may hold a prefetch already) up to [`BATCH`]
/// messages: whatever the consumer's queue has (rebalance callbacks run
/// here), then from the tasks' queues ([`poll_queues`]). With nothing
/// anywhere it waits up to `timeout` (at most [`IDLE_WAIT`]) on the
/// consumer's queue. Each message comes with the epoch after the poll
/// that returned it.
fn poll_batch<'c>(
    consumer: &'c BaseConsumer<EngineContext>,
    queues: &'c Queues,
    polled: &mut Vec<Polled<'c>>,
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let epoch = &consumer.context().epoch;
    while polled.len() < BATCH && take(consumer.poll(Duration::ZERO), epoch, polled)? {}
    poll_queues(queues, polled, epoch)?;
    if polled.is_empty() && !timeout.is_zero() {
        let wait = if queues.by_task.is_empty() {
            timeout
        } else {
            timeout.min(IDLE_WAIT)
        };
        take(consumer.poll(wait), epoch, polled)?;
    }
    Ok(())
}

/// Fills the batch up to [`BATCH`] from the tasks' queues: a share from
/// each, round after round until it is full or they are empty.
fn poll_queues<'c>(
    queues: &'c Queues,
    polled: &mut Vec<Polled<'c>>,
    epoch: &AtomicU64,
) -> Result<(), RuntimeError> {
    let queues: Vec<&TaskQueue<EngineContext>> = queues.by_task.values().flatten().collect();
    let share = (BATCH / queues.len().max(1)).max(1);
    loop {
        let before = polled.len();
        for queue in &queues {
            let want = share.min(BATCH - polled.len());
            if want > 0 {
                queue
                    .take(want, || epoch.load(Ordering::Acquire), polled)
                    .map_err(|e| RuntimeError::Kafka(KafkaError::MessageConsumptionFatal(e)))?;
            }
        }
        if polled.len() == before || polled.len() >= BATCH {
            return Ok(());
        }
    }
}

/// Adds a polled message to the batch; whether to poll on.
fn take<'c>(
    result: Option<KafkaResult<BorrowedMessage<'c>>>,
    epoch: &AtomicU64,
    polled: &mut Vec<Polled<'c>>,
) -> Result<bool, RuntimeError> {
    match result {
        Some(Ok(message)) => {
            polled.push((message.into(), epoch.load(Ordering::Acquire)));
            Ok(true)
        }
        // A static member refused as fenced by another with its instance
        // id: whether that is another process is the group's to say
        // (`membership_verdict`).
        Some(Err(KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::FencedInstanceId))) => {
            Err(RuntimeError::Commit(CommitError::Fatal(
                "the group refused this static member as fenced".into(),
            )))
        }
        // Fatal: the consumer cannot go on.
        Some(Err(error @ KafkaError::MessageConsumptionFatal(_))) => {
            Err(RuntimeError::Kafka(error))
        }
        Some(Err(error)) => {
            tracing::warn!(%error, "Consumer error.");
            Ok(false)
        }
        None => Ok(false),
    }
}

/// The member ids the group gave this process, across its memberships.
type MemberIds = Arc<Mutex<HashSet<String>>>;

/// The consumer context: owns the engine so rebalance callbacks can
/// commit and close tasks.
struct EngineContext {
    engine: Mutex<Engine>,
    /// Rebalance callbacks and rewinds so far: see [`Engine::rewound_at`].
    epoch: Arc<AtomicU64>,
    app: String,
    /// Source topic → source name, for lag metrics.
    sources: HashMap<String, String>,
    /// Every member id the group gave this process, at each assignment: a
    /// member the group still lists under an old one (a broker back from an
    /// outage keeps it until its session expires, or loads it again) is
    /// this process, not a successor.
    member_ids: MemberIds,
}

impl EngineContext {
    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ClientContext for EngineContext {
    fn stats(&self, statistics: Statistics) {
        for (topic, stats) in &statistics.topics {
            let node = self
                .sources
                .get(topic)
                .cloned()
                .unwrap_or_else(|| topic.clone());
            for (partition, p) in &stats.partitions {
                if *partition < 0 || p.app_offset < 0 {
                    continue;
                }
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                metrics::gauge!(telemetry::CONSUMER_LAG, "topology" => self.app.clone(), "node" => node.clone(), "partition" => partition.to_string())
                    .set((end - p.app_offset).max(0) as f64);
            }
        }
    }
}

impl ConsumerContext for EngineContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let mut engine = self.lock();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Some(id) = member_id(consumer) {
                    self.member_ids
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id);
                }
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                let full = engine.partitions_of(&tasks);
                let result = if cooperative {
                    consumer.incremental_assign(&full)
                } else {
                    consumer.assign(&full)
                };
                if let Err(e) = result {
                    engine.fail(RuntimeError::Kafka(e));
                    return;
                }
                engine.assigned(consumer, &tasks);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                let lost = consumer.assignment_lost();
                engine.revoked(consumer, &tasks, lost);
                let full = engine.partitions_of(&tasks);
                let result = if cooperative {
                    consumer.incremental_unassign(&full)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    engine.fail(RuntimeError::Kafka(e));
                }
            }
            other => {
                tracing::error!(error = ?other, "Rebalance failed; dropping the assignment.");
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                engine.revoked(consumer, &tasks, true);
                let _ = consumer.unassign();
            }
        }
    }
}

/// One task and its bookkeeping.
struct Slot {
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
    /// Its share of the current batch, or of a round of timers.
    scratch: Scratch,
}

struct Engine {
    topology: Arc<Topology>,
    partitions: i32,
    state_root: PathBuf,
    /// The block cache and write buffers every task database shares.
    rocks: RocksResources,
    /// The record cache's budget, shared by every task's stores.
    record_cache: Arc<CacheBudget>,
    inputs: Arc<[Input]>,
    tasks: BTreeMap<i32, Slot>,
    codecs: Codecs,
    cycle: CommitCycle,
    restorer: Restorer,
    /// The processing threads (none: one thread does everything).
    pool: Option<rayon::ThreadPool>,
    /// Tasks with work in the current batch or round of timers.
    busy: Vec<i32>,
    /// Tasks started since the main loop last looked: their partitions
    /// are still paused, waiting for their own queues ([`Queues`]).
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
    /// When to ask for new tasks' committed offsets again, and to warn.
    next_offsets_fetch: Instant,
    next_offsets_warning: Instant,
    fatal: Option<RuntimeError>,
    /// Shared with the query server (`--query-addr`).
    queries: Option<Arc<query::QueryState>>,
    /// Tells when a source topic was deleted or re-created under the run.
    source_watch: Option<Arc<SourceWatch>>,
}

pub(crate) fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
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
        let source_reset = match topology.sources[0].config.offset_reset {
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
        let state_dir = options
            .state_dir
            .clone()
            .unwrap_or_else(|| topology.processing.state_dir.clone());
        let now = Instant::now();
        let (rocks, record_cache) = topology.state_resources();
        Engine {
            state_root: state_dir.join(&topology.name),
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

    /// New tasks: open their state, pause their partitions, start
    /// restoring.
    fn assigned(&mut self, consumer: &BaseConsumer<EngineContext>, tasks: &[i32]) {
        // A source topic deleted and re-created between two rebalances
        // comes back as a new assignment: its id tells (the new tasks
        // restore first, which leaves the watch time to answer).
        if let Some(watch) = &self.source_watch {
            watch.check_now();
        }
        for &task in tasks {
            if self.tasks.contains_key(&task) {
                continue;
            }
            if let Err(e) = self.open_task(consumer, task) {
                self.fail(e);
                return;
            }
        }
    }

    fn open_task(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        task: i32,
    ) -> Result<(), RuntimeError> {
        let partitions = self.partitions_of(&[task]);
        consumer.pause(&partitions)?;
        let mut state_task = self.open_state(task)?;
        let changelog_offsets = state_task
            .state()
            .meta(CHANGELOG_OFFSETS)?
            .and_then(|b| ChangelogOffsets::decode(&b))
            .unwrap_or_default();
        let published = state_task
            .committed_stats()
            .map(|(_, s)| s.clone())
            .collect();
        let slot = Slot {
            task: state_task,
            running: false,
            since: 0,
            awaiting_offsets: true,
            cursor: TaskCursor {
                positions: vec![None; self.inputs.len()],
                committed: vec![None; self.inputs.len()],
                changelog_offsets,
            },
            published,
            scratch: Scratch::default(),
        };
        self.tasks.insert(task, slot);
        self.next_offsets_fetch = Instant::now();
        Ok(())
    }

    /// Fetches the group's committed offsets of new tasks (where
    /// processing resumes) and starts their restore. Not in the assign
    /// callback: while a previous owner's transaction holding offsets of
    /// these partitions is open, the broker answers "unstable offset" until
    /// it ends, which can take until that owner restarts or the transaction
    /// times out. A short attempt per round keeps the other tasks
    /// processing meanwhile.
    fn fetch_committed_offsets(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
    ) -> Result<(), RuntimeError> {
        let now = Instant::now();
        if now < self.next_offsets_fetch {
            return Ok(());
        }
        let awaiting: Vec<i32> = self
            .tasks
            .iter()
            .filter(|(_, s)| s.awaiting_offsets)
            .map(|(t, _)| *t)
            .collect();
        if awaiting.is_empty() {
            return Ok(());
        }
        let partitions = self.partitions_of(&awaiting);
        let list = match consumer.committed_offsets(partitions, Duration::from_millis(500)) {
            Ok(list) => list,
            Err(error) => {
                self.next_offsets_fetch = now + Duration::from_secs(1);
                if now >= self.next_offsets_warning {
                    self.next_offsets_warning = now + Duration::from_secs(10);
                    tracing::warn!(tasks = ?awaiting, %error, "The committed offsets of new tasks are not available yet (a previous owner's transaction may still be open); retrying.");
                }
                return Ok(());
            }
        };
        self.cycle.txn.journal_fetched(&list);
        for task in awaiting {
            // A partition can come back with an error of its own and no
            // offset: UNSTABLE_OFFSET_COMMIT, while a previous owner's
            // transaction holding its offsets is open. librdkafka asks
            // again until its request times out and hands that answer on
            // only if the caller still waits then, which these short
            // questions do not; a partition error of any kind is still
            // "not known yet", never "nothing committed": starting from
            // the input's reset would process again what that transaction
            // covers, over state restored without it.
            let unanswered: Vec<String> = list
                .elements()
                .iter()
                .filter(|e| e.partition() == task)
                .filter_map(|e| {
                    e.error()
                        .err()
                        .map(|error| format!("{}: {error}", e.topic()))
                })
                .collect();
            if !unanswered.is_empty() {
                self.next_offsets_fetch = now + Duration::from_secs(1);
                if now >= self.next_offsets_warning {
                    self.next_offsets_warning = now + Duration::from_secs(10);
                    tracing::warn!(task, errors = ?unanswered, "The committed offsets of new tasks are not available yet (a previous owner's transaction may still be open); retrying.");
                }
                continue;
            }
            let mut committed = vec![None; self.inputs.len()];
            for element in list.elements().iter().filter(|e| e.partition() == task) {
                let Offset::Offset(o) = element.offset() else {
                    continue;
                };
                if let Some(i) = self.input_of(element.topic()) {
                    committed[i] = Some(o);
                }
            }
            if let Err(error) =
                self.cycle
                    .anchor_latest(consumer, task, &mut committed, Duration::from_millis(500))
            {
                self.next_offsets_fetch = now + Duration::from_secs(1);
                tracing::warn!(task, %error, "Cannot read where the inputs end yet (offset_reset: latest); retrying.");
                continue;
            }
            let saved = match self.tasks.get(&task) {
                Some(slot) => slot.cursor.changelog_offsets.0.clone(),
                None => continue,
            };
            let out_of_range = match self.restorer.out_of_range(
                task,
                &saved,
                Duration::from_millis(500),
            ) {
                Ok(out_of_range) => out_of_range,
                // The broker did not answer (restarting, overloaded): this
                // task waits for the next round; the others go on.
                Err(error) => {
                    self.next_offsets_fetch = now + Duration::from_secs(1);
                    tracing::warn!(task, %error, "Cannot read the changelogs' offsets yet; retrying.");
                    continue;
                }
            };
            if !out_of_range.is_empty() {
                tracing::warn!(
                    task,
                    changelogs = ?out_of_range,
                    "The changelog no longer holds where this task's local state stopped (re-created or \
                     truncated); wiping the local state and restoring it in full from the earliest offset."
                );
                self.wipe_state(task)?;
            }
            let Some(slot) = self.tasks.get_mut(&task) else {
                continue;
            };
            slot.awaiting_offsets = false;
            slot.cursor.positions.clone_from(&committed);
            slot.cursor.committed = committed;
            self.restorer.add(task, &slot.cursor.changelog_offsets.0)?;
        }
        Ok(())
    }

    /// The task over its RocksDB state.
    fn open_state(&self, task: i32) -> Result<Task, RuntimeError> {
        let stores: Vec<String> = self.topology.stores().map(|s| s.name.clone()).collect();
        let path = self.state_root.join(task.to_string());
        let mut backend = RocksBackend::open(&path, &stores, &self.rocks)?;
        if let Some(queries) = &self.queries {
            // Restoring until the task starts; gone before the database
            // closes, whatever closes it (revocation, wipe, shutdown).
            let db = backend.shared();
            queries.opened(task, Arc::clone(&db));
            let queries = Arc::clone(queries);
            backend.on_close(Box::new(move || queries.closing(task, &db)));
        }
        let mut task = Task::new(
            Arc::clone(&self.topology),
            Box::new(backend),
            Routing::Partitioned {
                partition: task,
                partitions: self.partitions,
            },
        )?;
        task.state().share_cache(Arc::clone(&self.record_cache));
        Ok(task)
    }

    /// Replaces a task's local state with an empty one, for a full
    /// restore.
    fn wipe_state(&mut self, task: i32) -> Result<(), RuntimeError> {
        let path = self.state_root.join(task.to_string());
        // The database must be closed before its files go.
        let fresh = {
            let Some(slot) = self.tasks.get_mut(&task) else {
                return Ok(());
            };
            let placeholder = Task::new(
                Arc::clone(&self.topology),
                Box::new(crate::state::memory::MemoryBackend::new(
                    self.topology.stores().count(),
                )),
                Routing::Direct,
            )?;
            drop(std::mem::replace(&mut slot.task, placeholder));
            std::fs::remove_dir_all(&path).map_err(|e| {
                RuntimeError::State(crate::state::StateError::Backend(format!(
                    "cannot remove {}: {e}",
                    path.display()
                )))
            })?;
            self.open_state(task)?
        };
        if let Some(slot) = self.tasks.get_mut(&task) {
            slot.task = fresh;
            slot.cursor.changelog_offsets = ChangelogOffsets::default();
        }
        Ok(())
    }

    fn start_task(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        task: i32,
    ) -> Result<(), RuntimeError> {
        let now = self.now;
        let Some(slot) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        slot.task.set_processing_time(now);
        let event_time = slot
            .task
            .state()
            .meta(EVENT_TIME)?
            .and_then(|b| String::from_utf8(b).ok()?.parse::<i64>().ok());
        if let Some(ts) = event_time {
            slot.task.resume_event_time(ts);
        }
        let gauges = slot.task.state().meta(GAUGES)?.filter(|b| !b.is_empty());
        let gauges_counted = slot
            .task
            .start(gauges.as_deref())
            .map_err(|source| RuntimeError::Task { task, source })?;
        // Consume from exactly the committed offsets the restore was
        // judged by, not from the consumer's own fetch of them at
        // assignment: should the two ever differ (a broker that lets a
        // fenced-out previous owner still commit), starting past what the
        // restore kept would lose the records in between.
        self.cycle
            .seek_to_committed(consumer, task, &mut slot.cursor)?;
        slot.running = true;
        slot.since = self.epoch.load(Ordering::Acquire);
        if let Some(queries) = &self.queries {
            queries.started(task);
        }
        // Its partitions resume once they have their own queues.
        self.started.push(task);
        tracing::info!(task, gauges_counted, "Task running.");
        metrics::gauge!(telemetry::TASKS_RUNNING, "topology" => self.topology.name.clone())
            .set(self.tasks.values().filter(|s| s.running).count() as f64);
        Ok(())
    }

    /// Revoked tasks: commit what they did (unless the assignment was
    /// lost, when committing would fail) and close them.
    fn revoked(&mut self, consumer: &BaseConsumer<EngineContext>, tasks: &[i32], lost: bool) {
        // Lost partitions cannot be committed: the whole transaction is
        // abandoned and every task rewound. The lost tasks close right
        // after, so only the kept ones are sought back.
        let result = if lost {
            for task in tasks {
                if let Some(slot) = self.tasks.get_mut(task) {
                    slot.running = false;
                }
            }
            self.rewind(consumer)
        } else {
            self.commit(consumer)
        };
        if let Err(e) = result {
            self.fail(e);
        }
        for task in tasks {
            if let Some(mut slot) = self.tasks.remove(task) {
                publish_task_metrics(&self.topology, *task, &mut slot, true);
                tracing::info!(task, "Task closed.");
            }
            if let Err(e) = self.restorer.remove(*task) {
                self.fail(RuntimeError::Kafka(e));
            }
        }
        metrics::gauge!(telemetry::TASKS_RUNNING, "topology" => self.topology.name.clone())
            .set(self.tasks.values().filter(|s| s.running).count() as f64);
    }

    /// Handles a batch of polled messages: every running task with
    /// messages in it processes them on a processing thread, then its
    /// outputs go out in the open transaction, task by task, each
    /// message's in order.
    fn on_batch(
        &mut self,
        polled: &[Polled<'_>],
        prefetch: Option<impl FnOnce()>,
    ) -> Result<(), RuntimeError> {
        self.busy.clear();
        // Messages come in runs of one topic: its input is looked up by
        // name once a run, not once a message.
        let mut last_topic: Option<(*const (), Option<usize>)> = None;
        for (index, (message, epoch)) in polled.iter().enumerate() {
            // Fetched before a rewind sought the task back: it comes again.
            if *epoch < self.rewound_at {
                continue;
            }
            let handle = message.topic_handle();
            let input = match last_topic {
                Some((last, input)) if last == handle => input,
                _ => {
                    let input = self.input_of(message.topic());
                    last_topic = Some((handle, input));
                    input
                }
            };
            let Some(input) = input else {
                continue;
            };
            let Some(slot) = self.tasks.get_mut(&message.partition()) else {
                continue;
            };
            // Fetched before the task's partitions were paused, or before
            // it started (a prefetch for the task it was before a
            // rebalance): the task seeks to its committed offsets when it
            // starts.
            if !slot.running || *epoch < slot.since {
                continue;
            }
            if slot.scratch.messages.is_empty() {
                self.busy.push(message.partition());
            }
            slot.scratch.messages.push((index, input));
        }
        if self.busy.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.cycle.txn.begin() {
            clear_scratch(&mut self.tasks, &self.busy);
            return Err(RuntimeError::Commit(error));
        }
        let shared = Shared {
            batch: polled,
            inputs: &self.inputs,
            codecs: &self.codecs,
            now: self.now,
        };
        let mut work: Vec<(&i32, &mut Slot)> = self
            .tasks
            .iter_mut()
            .filter(|(_, s)| !s.scratch.messages.is_empty())
            .collect();
        batch::for_each_after(self.pool.as_ref(), &mut work, prefetch, |(id, slot)| {
            batch::handle(
                &shared,
                **id,
                &mut slot.task,
                &mut slot.cursor,
                &mut slot.scratch,
            );
        });
        drop(work);
        let busy = std::mem::take(&mut self.busy);
        let result = busy
            .iter()
            .try_for_each(|&task| self.produce_batch(task, polled));
        clear_scratch(&mut self.tasks, &busy);
        self.busy = busy;
        result?;
        self.cycle
            .txn
            .fault(FaultPoint::Batch)
            .map_err(RuntimeError::Commit)
    }

    /// Sends what task `task` made of its messages of the batch.
    fn produce_batch(&mut self, task: i32, polled: &[Polled<'_>]) -> Result<(), RuntimeError> {
        let Some(slot) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        let mut scratch = std::mem::take(&mut slot.scratch);
        let handled = scratch.handled.len() as u64;
        self.consumed_unreported += handled;
        self.consumed_uncommitted += handled;
        if let Some(behind) = scratch.behind.take() {
            let super::batch::Behind {
                topic,
                offset,
                position,
                count: skipped,
            } = behind;
            tracing::warn!(task, %topic, offset, position, skipped, "The consumer delivered records behind the task's position again (processed already); skipped them.");
            // Or the topic is a new one under the old name, whose offsets
            // start over: its id tells.
            if let Some(watch) = &self.source_watch {
                watch.check_now();
            }
            metrics::counter!(telemetry::RECORDS_BEHIND, "topology" => self.topology.name.clone())
                .increment(skipped);
        }
        // The handled messages' topics, borrowed while `produce` borrows
        // the engine.
        let inputs = Arc::clone(&self.inputs);
        let mut outputs = scratch.outputs.drain(..);
        let mut start = 0;
        let mut result = Ok(());
        for message in &scratch.handled {
            let count = message.end - start;
            start = message.end;
            // Most records emit nothing (a fold's events until it closes).
            if count == 0 {
                continue;
            }
            let topic = &inputs[message.input].topic;
            let origin = wire::origin(&polled[message.index].0, topic, &message.headers);
            let these = outputs.by_ref().take(count);
            result = self.produce(task, these, Some(&origin));
            if result.is_err() {
                break;
            }
        }
        drop(outputs);
        if let Some(error) = scratch.error.take() {
            result = result.and(Err(error));
        }
        if let Some(slot) = self.tasks.get_mut(&task) {
            slot.scratch = scratch;
        }
        result
    }

    /// Sends what task `task` emitted: sink records, repartition records
    /// and dead letters, inside the open transaction.
    fn produce(
        &mut self,
        task: i32,
        outputs: impl Iterator<Item = Output>,
        origin: Option<&Origin<'_>>,
    ) -> Result<(), RuntimeError> {
        let mut seq = 0u32;
        for output in outputs {
            match output {
                Output::Sink { sink, record } => {
                    let name = &self.topology.sinks[sink].name;
                    let Wire { key, payload } = match self.codecs.encode_record(sink, &record) {
                        Ok(wire) => wire,
                        Err(reason) => {
                            let code = DeadLetterReason::Unencodable;
                            if let Some(slot) = self.tasks.get_mut(&task) {
                                slot.task.count_dead_letter(DeadLetterAt::Sink(sink), code);
                            }
                            let letter =
                                crate::task::sink_dead_letter(origin, name, code, &reason, &record);
                            self.send_dead_letter(&letter)?;
                            continue;
                        }
                    };
                    let produce = Produce {
                        topic: &self.topology.sinks[sink].config.topic,
                        partition: None,
                        key: key.as_deref(),
                        payload: payload.as_deref(),
                        headers: &record.headers,
                        timestamp: Some(record.timestamp),
                        tracked: 0,
                    };
                    if let Err(refusal) = self.cycle.txn.check(&produce) {
                        let name = name.clone();
                        let reason = refusal.reason(&format!("the record of sink `{name}`"));
                        let at = (task, DeadLetterAt::Sink(sink));
                        self.refused(origin, at, &name, &refusal, &reason, &record)?;
                        continue;
                    }
                    self.cycle.txn.send(produce).map_err(RuntimeError::Commit)?;
                }
                Output::Repartition {
                    node,
                    input,
                    mut record,
                } => {
                    let payload = wire::write_repartitioned(&mut record, input, origin, seq);
                    if origin.is_some() {
                        seq += 1;
                    }
                    let key = record.key.as_deref().unwrap_or_default();
                    let topic = self.topology.nodes[node]
                        .repartition_topic
                        .as_deref()
                        .unwrap_or_default();
                    let produce = Produce {
                        topic,
                        partition: Some(partition_for(key, self.partitions)),
                        key: Some(key),
                        payload: Some(&payload),
                        headers: &record.headers,
                        timestamp: Some(record.timestamp),
                        tracked: 0,
                    };
                    if let Err(refusal) = self.cycle.txn.check(&produce) {
                        let name = self.topology.nodes[node].name.clone();
                        let reason = refusal.reason(&format!("the record for node `{name}`"));
                        let at = (task, DeadLetterAt::Node(node));
                        self.refused(origin, at, &name, &refusal, &reason, &record)?;
                        continue;
                    }
                    self.cycle.txn.send(produce).map_err(RuntimeError::Commit)?;
                }
                Output::DeadLetter(letter) => self.send_dead_letter(&letter)?,
            }
        }
        Ok(())
    }

    fn send_dead_letter(&mut self, letter: &crate::task::DeadLetter) -> Result<(), RuntimeError> {
        self.cycle
            .txn
            .send_dead_letter(&self.topology.dead_letter_topic, letter)
            .map_err(RuntimeError::Commit)
    }

    /// `record`, for sink or node `name` of task `at.0`, is one the broker
    /// will not take (too large for its topic, or refused for good before):
    /// it becomes a dead letter (its value as JSON) instead of failing the
    /// transaction, and the process goes on. Counted with the task's other
    /// dead letters, at commit.
    fn refused(
        &mut self,
        origin: Option<&Origin<'_>>,
        at: (i32, DeadLetterAt),
        name: &str,
        refusal: &Refusal,
        reason: &str,
        record: &Record,
    ) -> Result<(), RuntimeError> {
        tracing::debug!(node = %name, %reason, "The broker will not take a record; sending it to the dead-letter topic.");
        if let Refusal::TooLarge(_) = refusal {
            metrics::counter!(telemetry::RECORDS_TOO_LARGE, "topology" => self.topology.name.clone(), "node" => name.to_string())
                .increment(1);
        }
        let code = refusal.code();
        if let Some(slot) = self.tasks.get_mut(&at.0) {
            slot.task.count_dead_letter(at.1, code);
        }
        let letter = crate::task::sink_dead_letter(origin, name, code, reason, record);
        self.send_dead_letter(&letter)
    }

    /// Between messages: restore progress, punctuation, commits, metrics.
    fn housekeeping(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        if let Some(error) = self.fatal.take() {
            return Err(error);
        }
        if let Some(error) = self.source_watch.as_ref().and_then(|w| w.replaced()) {
            return Err(error);
        }
        self.now = wall_clock_ms();
        let now = Instant::now();
        if self.cycle.txn.take_consumer_rewind() {
            // Test hook: the consumer alone goes back, as librdkafka's
            // offset-query timer could before the vendored fix.
            for (&task, _) in self.tasks.iter().filter(|(_, s)| s.running) {
                for input in self.inputs.iter() {
                    consumer.seek(
                        &input.topic,
                        task,
                        Offset::Beginning,
                        Duration::from_secs(10),
                    )?;
                }
            }
        }
        self.cycle.txn.poll();
        self.fetch_committed_offsets(consumer)?;
        if self.restorer.is_restoring() {
            self.restore_step(consumer)?;
        }
        if self.cycle.txn.in_transaction()
            && self
                .tasks
                .values()
                .any(|slot| slot.running && slot.task.timer_budget_spent())
        {
            // Records fired all the timers a transaction may: commit it, and
            // punctuate at once to fire the next round.
            self.commit(consumer)?;
            self.next_punctuation = now;
        }
        if now >= self.next_punctuation {
            self.next_punctuation = now + self.topology.processing.punctuation_interval.0;
            if self.punctuate()? {
                // More timers are due than one round fires (after
                // downtime): commit this round and fire the next at once.
                self.commit(consumer)?;
                self.next_punctuation = now;
            }
        }
        if self.cycle.txn.in_transaction()
            && now.duration_since(self.last_commit) >= self.topology.processing.commit_interval().0
        {
            self.commit(consumer)?;
        }
        super::health::health().round(self.task_counts());
        if self.consumed_unreported > 0 {
            metrics::counter!(telemetry::RECORDS_CONSUMED, "topology" => self.topology.name.clone())
                .increment(std::mem::take(&mut self.consumed_unreported));
        }
        if now >= self.next_metrics {
            self.next_metrics = now + Duration::from_secs(1);
            // A restoring task has no state to report yet: its gauges
            // appear once it runs, never as a misleading 0.
            for (&task, slot) in self.tasks.iter_mut().filter(|(_, s)| s.running) {
                publish_task_metrics(&self.topology, task, slot, false);
            }
            let app = self.topology.name.clone();
            metrics::gauge!(telemetry::STATE_BLOCK_CACHE, "topology" => app.clone())
                .set(self.rocks.block_cache_usage() as f64);
            metrics::gauge!(telemetry::STATE_WRITE_BUFFERS, "topology" => app.clone())
                .set(self.rocks.write_buffer_usage() as f64);
            metrics::gauge!(telemetry::STATE_RECORD_CACHE, "topology" => app)
                .set(self.record_cache.used() as f64);
        }
        Ok(())
    }

    /// The tasks by what they do, for readiness.
    fn task_counts(&self) -> super::health::TaskCounts {
        let mut counts = super::health::TaskCounts {
            assigned: self.tasks.len(),
            ..Default::default()
        };
        for slot in self.tasks.values() {
            match (slot.running, slot.awaiting_offsets) {
                (true, _) => counts.running += 1,
                (false, true) => counts.awaiting_offsets += 1,
                (false, false) => counts.restoring += 1,
            }
        }
        counts
    }

    fn restore_step(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        let progress = self.restorer.poll(Duration::from_millis(50))?;
        for (task, progress) in progress {
            let Some(slot) = self.tasks.get_mut(&task) else {
                continue;
            };
            slot.cursor.changelog_offsets.0.extend(progress.offsets);
            let mut meta = vec![(
                CHANGELOG_OFFSETS.to_string(),
                slot.cursor.changelog_offsets.encode(),
            )];
            // The event clock travels with the changelog: the latest time
            // stamped on what was applied, never moving back.
            if let Some(restored) = progress.event_time {
                let saved = slot
                    .task
                    .state()
                    .meta(EVENT_TIME)?
                    .and_then(|b| String::from_utf8(b).ok()?.parse::<i64>().ok());
                if saved.is_none_or(|saved| saved < restored) {
                    meta.push((EVENT_TIME.to_string(), restored.to_string().into_bytes()));
                }
            }
            if !progress.writes.is_empty() {
                // The saved gauges no longer describe the stores.
                meta.push((GAUGES.to_string(), Vec::new()));
            }
            slot.task.state().restore(&progress.writes, &meta)?;
            if !progress.writes.is_empty() {
                self.cycle
                    .txn
                    .fault(FaultPoint::Restore)
                    .map_err(RuntimeError::Commit)?;
            }
            if progress.done {
                self.start_task(consumer, task)?;
            }
        }
        Ok(())
    }

    /// Fires wall-clock timers of every running task, on the processing
    /// threads; returns whether a task has more due than one round fires.
    fn punctuate(&mut self) -> Result<bool, RuntimeError> {
        let now = self.now;
        let mut work: Vec<(&i32, &mut Slot)> =
            self.tasks.iter_mut().filter(|(_, s)| s.running).collect();
        batch::for_each(self.pool.as_ref(), &mut work, |(id, slot)| {
            let task = **id;
            slot.task.set_processing_time(now);
            match slot.task.punctuate(&mut slot.scratch.outputs) {
                Ok(more) => slot.scratch.more_due = more,
                Err(source) => slot.scratch.error = Some(RuntimeError::Task { task, source }),
            }
        });
        drop(work);
        let mut busy = std::mem::take(&mut self.busy);
        busy.clear();
        busy.extend(
            self.tasks
                .iter()
                .filter(|(_, s)| s.running)
                .map(|(t, _)| *t),
        );
        let mut more = false;
        let mut result = Ok(());
        for &task in &busy {
            if result.is_err() {
                break;
            }
            result = self.produce_timers(task, &mut more);
        }
        clear_scratch(&mut self.tasks, &busy);
        self.busy = busy;
        result.map(|()| more)
    }

    /// Sends what task `task`'s timers emitted.
    fn produce_timers(&mut self, task: i32, more: &mut bool) -> Result<(), RuntimeError> {
        let Some(slot) = self.tasks.get_mut(&task) else {
            return Ok(());
        };
        if let Some(error) = slot.scratch.error.take() {
            return Err(error);
        }
        *more |= slot.scratch.more_due;
        let mut outputs = std::mem::take(&mut slot.scratch.outputs);
        let fired = !outputs.is_empty();
        if fired || slot.task.state().has_pending() {
            self.cycle.txn.begin().map_err(RuntimeError::Commit)?;
        }
        let result = self.produce(task, outputs.drain(..), None);
        if let Some(slot) = self.tasks.get_mut(&task) {
            slot.scratch.outputs = outputs;
        }
        result?;
        if fired {
            self.cycle
                .txn
                .fault(FaultPoint::Timers)
                .map_err(RuntimeError::Commit)?;
        }
        Ok(())
    }

    /// Every task, for the commit cycle.
    fn cycle_tasks(tasks: &mut BTreeMap<i32, Slot>) -> Vec<CycleTask<'_>> {
        tasks
            .iter_mut()
            .map(|(&id, slot)| CycleTask {
                id,
                task: &mut slot.task,
                cursor: &mut slot.cursor,
                running: slot.running,
            })
            .collect()
    }

    /// Commits the open transaction with every running task's changelogs
    /// and positions; when it aborts, rewinds to the last commit.
    fn commit(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        if !self.cycle.txn.in_transaction() {
            return Ok(());
        }
        let tasks = Self::cycle_tasks(&mut self.tasks);
        let result = self
            .cycle
            .commit(consumer, tasks, self.now, self.pool.as_ref());
        if result.is_ok() {
            self.last_commit = Instant::now();
            self.aborts_in_a_row = 0;
            metrics::counter!(telemetry::RECORDS_COMMITTED, "topology" => self.topology.name.clone())
                .increment(std::mem::take(&mut self.consumed_uncommitted));
        }
        self.recover(consumer, result)
    }

    /// An abortable failure anywhere in the cycle (a produce the broker
    /// refused, a failed offsets send or commit, an injected fault) aborts
    /// the transaction and rewinds every task; anything else stops the
    /// loop.
    fn recover(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        result: Result<(), RuntimeError>,
    ) -> Result<(), RuntimeError> {
        match result {
            Err(RuntimeError::Commit(CommitError::Aborted(reason))) => {
                self.aborts_in_a_row += 1;
                let pause = abort_backoff(self.aborts_in_a_row);
                if self.aborts_in_a_row >= ABORTS_BEFORE_ERROR {
                    tracing::error!(%reason, aborts_in_a_row = self.aborts_in_a_row, pause_ms = pause.as_millis() as u64, "Transactions keep failing; aborting, rewinding and trying again after a pause.");
                } else {
                    tracing::warn!(%reason, aborts_in_a_row = self.aborts_in_a_row, "The transaction failed; aborting and rewinding to the last commit.");
                }
                let rewound = self.rewind(consumer);
                std::thread::sleep(pause);
                rewound
            }
            other => other,
        }
    }

    fn rewind(&mut self, consumer: &BaseConsumer<EngineContext>) -> Result<(), RuntimeError> {
        // They will be consumed again.
        self.consumed_uncommitted = 0;
        // A new epoch: messages polled before it, prefetched ones too, are
        // skipped.
        self.rewound_at = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let tasks = Self::cycle_tasks(&mut self.tasks);
        self.cycle.rewind(consumer, tasks)?;
        self.last_commit = Instant::now();
        Ok(())
    }

    /// Graceful end: commit (when the loop ended cleanly) and close every
    /// task.
    fn shutdown(
        &mut self,
        consumer: &BaseConsumer<EngineContext>,
        clean: bool,
    ) -> Result<(), RuntimeError> {
        let result = if clean {
            self.commit(consumer)
        } else {
            self.cycle.txn.abort().map_err(RuntimeError::Commit)
        };
        let tasks: Vec<i32> = self.tasks.keys().copied().collect();
        for task in tasks {
            if let Some(mut slot) = self.tasks.remove(&task) {
                publish_task_metrics(&self.topology, task, &mut slot, true);
            }
            let _ = self.restorer.remove(task);
        }
        self.cycle.txn.flush();
        result
    }
}

/// Empties the batch buffers of `busy` tasks, whatever became of their
/// work: the next batch starts from nothing.
fn clear_scratch(tasks: &mut BTreeMap<i32, Slot>, busy: &[i32]) {
    for task in busy {
        if let Some(slot) = tasks.get_mut(task) {
            slot.scratch.clear();
        }
    }
}

/// Publishes a task's counter deltas since the last call (as of its last
/// commit); `closing` zeroes its gauges.
fn publish_task_metrics(topology: &Topology, task: i32, slot: &mut Slot, closing: bool) {
    let app = topology.name.as_str();
    let partition = task.to_string();
    for (index, (name, stats)) in slot.task.committed_stats().enumerate() {
        let before = &slot.published[index];
        for &counter in NodeCounter::ALL {
            let delta = stats.get(counter) - before.get(counter);
            if delta > 0 {
                telemetry::node_counter(app, name, counter).increment(delta);
            }
        }
        for &reason in DeadLetterReason::ALL {
            let delta = stats.dead_letters(reason) - before.dead_letters(reason);
            if delta > 0 {
                telemetry::dead_letter_counter(app, name, reason).increment(delta);
            }
        }
        // Stats of sources and sinks follow the nodes'.
        let Some(node) = topology.nodes.get(index) else {
            continue;
        };
        for &gauge in node.kind.gauges() {
            let value = if closing { 0 } else { stats.gauge(gauge) };
            metrics::gauge!(gauge.metric(), "topology" => app.to_string(), "node" => name.to_string(), "partition" => partition.clone())
                .set(value as f64);
        }
        if let Some(ratio) = stats.folding_ratio() {
            metrics::gauge!(telemetry::FOLD_RATIO, "topology" => app.to_string(), "node" => name.to_string(), "partition" => partition.clone())
                .set(ratio);
        }
    }
    slot.published = slot
        .task
        .committed_stats()
        .map(|(_, s)| s.clone())
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure that repeats backs off: no pause after the first abort,
    /// then 100 ms doubling, never more than the longest pause.
    #[test]
    fn aborts_in_a_row_back_off_up_to_a_bound() {
        let pauses: Vec<u64> = (1..=12)
            .map(|n| abort_backoff(n).as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [
                0, 100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000
            ]
        );
        assert_eq!(abort_backoff(u32::MAX), LONGEST_ABORT_PAUSE);
    }
}
