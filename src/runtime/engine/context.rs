//! The consumer's context: it owns the [`Engine`], so the rebalance
//! callbacks librdkafka runs inside `poll` (on the polling thread) open
//! and close tasks, and it turns the consumer's statistics into lag
//! gauges.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Statistics};

use super::Engine;
use super::membership::{MemberIds, member_id};
use crate::runtime::RuntimeError;
use crate::runtime::commit::FaultPoint;
use crate::telemetry;

/// The consumer context: owns the engine so rebalance callbacks can
/// commit and close tasks.
pub(super) struct EngineContext {
    pub(super) engine: Mutex<Engine>,
    /// Rebalance callbacks and rewinds so far: see [`Engine::rewound_at`].
    pub(super) epoch: Arc<AtomicU64>,
    pub(super) app: String,
    /// Source topic → source name, for lag metrics.
    pub(super) sources: HashMap<String, String>,
    /// Every member id the group gave this process, at each assignment: a
    /// member the group still lists under an old one (a broker back from an
    /// outage keeps it until its session expires, or loads it again) is
    /// this process, not a successor.
    pub(super) member_ids: MemberIds,
    /// The topic the consumer subscribes to, and whether to subscribe to
    /// it again at the first assignment (see [`EngineContext::rejoin_once`]).
    pub(super) subscription: String,
    pub(super) rejoin_at_first_assignment: AtomicBool,
    /// When this instance's part in a rebalance began: at the subscription
    /// (the first join), or at a revocation; the assignment that follows
    /// ends it ([`telemetry::REBALANCE_DURATION`]).
    pub(super) rebalancing_since: Mutex<Option<Instant>>,
}

impl EngineContext {
    pub(super) fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A static member's first cooperative assignment is followed by one
    /// rejoin, which makes the group rebalance.
    ///
    /// In a cooperative rebalance a member gives up tasks first, and only
    /// its rejoin afterwards lets the leader hand them to another member.
    /// A static member that dies in between (killed, or stopped while the
    /// rebalance was under way) and comes back within its session timeout
    /// is given its cached assignment without a rebalance: the tasks it
    /// gave up then belong to nobody until the group next rebalances for
    /// another reason. This process cannot know what its predecessor left
    /// undone, so it rejoins once; its metadata now names an assignment and
    /// a generation, which makes the broker rebalance, and the leader
    /// assigns whatever is unowned. The other members keep their tasks
    /// (cooperative-sticky).
    ///
    /// librdkafka postpones a subscription made during a rebalance (here,
    /// inside the assign callback, before the assignment is done) and
    /// rejoins once the assignment is done; made after it, in the steady
    /// state, the same subscription is no change and no rejoin. Subscribing
    /// to the same topic changes nothing else.
    fn rejoin_once(
        &self,
        consumer: &BaseConsumer<Self>,
        cooperative: bool,
    ) -> Result<(), KafkaError> {
        // An eager rebalance takes every task and gives them all out in one
        // round: nothing is left between two rounds.
        if !self
            .rejoin_at_first_assignment
            .swap(false, Ordering::AcqRel)
            || !cooperative
        {
            return Ok(());
        }
        tracing::info!(
            "First assignment of this static member: rejoining once, so that tasks a predecessor \
             with this instance id gave up and never handed over are assigned."
        );
        consumer.subscribe(&[self.subscription.as_str()])
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
        let event = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => "assigned",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS if !consumer.assignment_lost() => {
                "revoked"
            }
            _ => "lost",
        };
        metrics::counter!(telemetry::REBALANCES, "topology" => self.app.clone(), "event" => event)
            .increment(1);
        let started = Instant::now();
        self.handle_rebalance(consumer, &mut engine, err, tpl, cooperative);
        metrics::histogram!(telemetry::REBALANCE_CALLBACK_DURATION, "topology" => self.app.clone(), "event" => event)
            .record(started.elapsed().as_secs_f64());
        self.time_rebalance(event, started);
    }
}

impl EngineContext {
    /// Ends this instance's part in a rebalance at an assignment, or begins
    /// it at a revocation or a lost assignment (the first of them, when
    /// several come before the next assignment).
    fn time_rebalance(&self, event: &str, callback_started: Instant) {
        let mut since = self
            .rebalancing_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if event == "assigned" {
            if let Some(began) = since.take() {
                metrics::histogram!(telemetry::REBALANCE_DURATION, "topology" => self.app.clone())
                    .record(began.elapsed().as_secs_f64());
            }
        } else {
            since.get_or_insert(callback_started);
        }
    }

    /// Opens the tasks of an assignment, or closes those of a revocation,
    /// and hands the partitions to (or takes them from) the consumer.
    fn handle_rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        engine: &mut Engine,
        err: RDKafkaRespErr,
        tpl: &TopicPartitionList,
        cooperative: bool,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let member = member_id(consumer);
                if let Some(id) = &member {
                    self.member_ids
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id.clone());
                }
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                // The member id names this membership in the group's own
                // listing, which a fencing verdict reads.
                tracing::info!(
                    member = member.as_deref().unwrap_or(""),
                    ?tasks,
                    "Tasks assigned."
                );
                let full = engine.partitions_of(&tasks);
                // Before the assignment is done: see `rejoin_once`.
                let result = self.rejoin_once(consumer, cooperative).and_then(|()| {
                    if cooperative {
                        consumer.incremental_assign(&full)
                    } else {
                        consumer.assign(&full)
                    }
                });
                if let Err(e) = result {
                    engine.fail(RuntimeError::Kafka(e));
                    return;
                }
                engine.assigned(consumer, &tasks);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let tasks: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                let lost = consumer.assignment_lost();
                tracing::info!(?tasks, lost, "Tasks revoked.");
                engine.revoked(consumer, &tasks, lost);
                let full = engine.partitions_of(&tasks);
                let result = if cooperative {
                    consumer.incremental_unassign(&full)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    engine.fail(RuntimeError::Kafka(e));
                } else if cooperative
                    && !lost
                    && !tasks.is_empty()
                    && let Err(e) = engine.cycle.txn.fault(FaultPoint::Revoked)
                {
                    engine.fail(RuntimeError::Commit(e));
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
