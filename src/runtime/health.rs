//! Liveness and readiness of `streamfold run`, as the operations endpoint
//! reports them (`/healthz`, `/readyz`; [`super::ops_server`]).
//!
//! - **Alive**: the processing loop went round within the stall timeout
//!   (`--stall-timeout`, default 2 minutes). Before the loop first runs
//!   (waiting for the broker, the source topics, topic creation) the
//!   process counts as alive: those waits end the process themselves when
//!   the cluster cannot fit, and restarting a process that waits for a
//!   broker helps nothing.
//! - **Ready**: the processing loop runs, the producer is usable, and
//!   every assigned task runs (none waits for its committed offsets, none
//!   restores). An instance with no task assigned is ready. A process
//!   that received SIGTERM is not ready any more.
//!
//! The engine reports through one process-wide [`Health`] ([`health`]),
//! with atomics only: the endpoint never takes a lock the processing
//! loop holds.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The stall timeout unless `--stall-timeout` says otherwise: longer than
/// the longest single broker call of the commit cycle (30 s) several
/// times over, so a slow broker does not get a healthy process restarted.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for the broker and the source topics, creating topics.
    Starting,
    /// The processing loop runs (in the group, or joining it).
    Processing,
    /// A signal asked it to stop: committing and leaving the group.
    Stopping,
}

impl Phase {
    fn from_u8(value: u8) -> Phase {
        match value {
            1 => Phase::Processing,
            2 => Phase::Stopping,
            _ => Phase::Starting,
        }
    }
}

/// The health of this process, updated by the engine.
pub struct Health {
    /// Milliseconds since [`Health::origin`] of the processing loop's last
    /// round (0: never).
    last_round: AtomicU64,
    phase: AtomicU8,
    producer_usable: AtomicBool,
    stopping: AtomicBool,
    assigned: AtomicUsize,
    running: AtomicUsize,
    restoring: AtomicUsize,
    awaiting_offsets: AtomicUsize,
    stall_timeout_ms: AtomicU64,
    origin: OnceLock<Instant>,
}

/// The tasks of this instance, by what they do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TaskCounts {
    /// Tasks assigned to this instance.
    pub assigned: usize,
    /// Tasks processing records.
    pub running: usize,
    /// Tasks replaying their changelogs.
    pub restoring: usize,
    /// Tasks waiting for the group's committed offsets (a previous
    /// owner's transaction may still be open).
    pub awaiting_offsets: usize,
}

/// What `/healthz` and `/readyz` answer, as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub alive: bool,
    pub ready: bool,
    pub phase: Phase,
    pub producer_usable: bool,
    pub tasks: TaskCounts,
    /// Milliseconds since the processing loop's last round (none before
    /// it first ran).
    pub last_round_ms_ago: Option<u64>,
    /// Why the process is not ready (or not alive), in words.
    pub reasons: Vec<String>,
}

static HEALTH: Health = Health::new();

/// The process-wide health the engine reports to.
pub fn health() -> &'static Health {
    &HEALTH
}

impl Health {
    const fn new() -> Health {
        Health {
            last_round: AtomicU64::new(0),
            phase: AtomicU8::new(0),
            producer_usable: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            assigned: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            restoring: AtomicUsize::new(0),
            awaiting_offsets: AtomicUsize::new(0),
            stall_timeout_ms: AtomicU64::new(DEFAULT_STALL_TIMEOUT.as_millis() as u64),
            origin: OnceLock::new(),
        }
    }

    /// Milliseconds since the first call, at least 1 (0 means never).
    fn now_ms(&self) -> u64 {
        let origin = self.origin.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// How long the processing loop may go without a round before the
    /// process counts as stalled.
    pub fn set_stall_timeout(&self, timeout: Duration) {
        self.stall_timeout_ms.store(
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The processing loop went round; its tasks are as `tasks` says.
    pub(crate) fn round(&self, tasks: TaskCounts) {
        self.assigned.store(tasks.assigned, Ordering::Relaxed);
        self.running.store(tasks.running, Ordering::Relaxed);
        self.restoring.store(tasks.restoring, Ordering::Relaxed);
        self.awaiting_offsets
            .store(tasks.awaiting_offsets, Ordering::Relaxed);
        self.last_round.store(self.now_ms(), Ordering::Release);
        if !self.stopping.load(Ordering::Relaxed) {
            self.phase.store(1, Ordering::Relaxed);
        }
    }

    /// A group membership began: its producer is ready. The returned guard
    /// marks the producer unusable and the tasks gone when the membership
    /// ends, however it ends.
    pub(crate) fn member(&'static self) -> Membership {
        self.producer_usable.store(true, Ordering::Relaxed);
        Membership { health: self }
    }

    /// A signal asked the process to stop.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.phase.store(2, Ordering::Relaxed);
    }

    /// The state now, with the verdicts.
    pub fn report(&self) -> Report {
        let phase = Phase::from_u8(self.phase.load(Ordering::Relaxed));
        let tasks = TaskCounts {
            assigned: self.assigned.load(Ordering::Relaxed),
            running: self.running.load(Ordering::Relaxed),
            restoring: self.restoring.load(Ordering::Relaxed),
            awaiting_offsets: self.awaiting_offsets.load(Ordering::Relaxed),
        };
        let last = self.last_round.load(Ordering::Acquire);
        let last_round_ms_ago = (last > 0).then(|| self.now_ms().saturating_sub(last));
        let producer_usable = self.producer_usable.load(Ordering::Relaxed);
        let stall = self.stall_timeout_ms.load(Ordering::Relaxed);
        let mut reasons = Vec::new();
        let alive = match last_round_ms_ago {
            Some(ago) if ago > stall => {
                reasons.push(format!(
                    "the processing loop has not gone round for {ago} ms (stall timeout {stall} ms)"
                ));
                false
            }
            _ => true,
        };
        match phase {
            Phase::Starting => reasons.push("starting: the processing loop has not run yet".into()),
            Phase::Stopping => reasons.push("stopping".into()),
            Phase::Processing => {}
        }
        if phase == Phase::Processing && !producer_usable {
            reasons.push("the producer is not usable (being replaced)".into());
        }
        if tasks.restoring > 0 {
            reasons.push(format!("{} task(s) restoring", tasks.restoring));
        }
        if tasks.awaiting_offsets > 0 {
            reasons.push(format!(
                "{} task(s) waiting for their committed offsets",
                tasks.awaiting_offsets
            ));
        }
        let ready = alive
            && phase == Phase::Processing
            && producer_usable
            && tasks.restoring == 0
            && tasks.awaiting_offsets == 0
            && tasks.running == tasks.assigned;
        Report {
            alive,
            ready,
            phase,
            producer_usable,
            tasks,
            last_round_ms_ago,
            reasons,
        }
    }
}

/// A group membership in progress ([`Health::member`]).
pub(crate) struct Membership {
    health: &'static Health,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.health.producer_usable.store(false, Ordering::Relaxed);
        self.health.round(TaskCounts::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaked() -> &'static Health {
        Box::leak(Box::new(Health::new()))
    }

    #[test]
    fn a_starting_process_is_alive_and_not_ready() {
        let health = leaked();
        let report = health.report();
        assert!(report.alive);
        assert!(!report.ready);
        assert_eq!(report.phase, Phase::Starting);
        assert_eq!(report.last_round_ms_ago, None);
    }

    #[test]
    fn ready_once_every_assigned_task_runs_with_a_usable_producer() {
        let health = leaked();
        let member = health.member();
        health.round(TaskCounts {
            assigned: 2,
            running: 1,
            restoring: 1,
            awaiting_offsets: 0,
        });
        let report = health.report();
        assert!(report.alive && !report.ready, "{report:?}");
        assert_eq!(report.reasons, vec!["1 task(s) restoring".to_string()]);
        health.round(TaskCounts {
            assigned: 2,
            running: 1,
            restoring: 0,
            awaiting_offsets: 1,
        });
        assert!(!health.report().ready);
        health.round(TaskCounts {
            assigned: 2,
            running: 2,
            ..TaskCounts::default()
        });
        let report = health.report();
        assert!(report.ready, "{report:?}");
        assert!(report.reasons.is_empty());
        // The membership ends (a fatal producer error): not ready until the
        // next one starts.
        drop(member);
        let report = health.report();
        assert!(!report.ready && report.alive, "{report:?}");
        assert!(!report.producer_usable);
        // No task assigned at all is ready.
        let _member = health.member();
        health.round(TaskCounts::default());
        assert!(health.report().ready);
        health.stopping();
        health.round(TaskCounts::default());
        let report = health.report();
        assert!(!report.ready);
        assert_eq!(report.phase, Phase::Stopping);
    }

    #[test]
    fn a_loop_that_stops_going_round_is_not_alive() {
        let health = leaked();
        health.set_stall_timeout(Duration::ZERO);
        let _member = health.member();
        health.round(TaskCounts::default());
        // Rounds are stamped in milliseconds; wait for the next one so the
        // last round is older than the zero timeout.
        let stamped = health.last_round.load(Ordering::Acquire);
        while health.now_ms() <= stamped {
            std::thread::yield_now();
        }
        let report = health.report();
        assert!(!report.alive, "{report:?}");
        assert!(!report.ready);
        assert!(report.reasons[0].contains("has not gone round"));
    }
}
