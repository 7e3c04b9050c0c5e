//! Restore and catch up after a crash that loses the machine's disk, the
//! same way for every system:
//!
//! 1. a fresh application processes the input until its group has
//!    committed half of it, and is killed (SIGKILL) at once;
//! 2. its state directory is deleted, and the harness waits until the
//!    broker has let go of it: the group has no members (the killed
//!    member's session ended) and, for a system whose next start cannot
//!    abort them (`Launch::fences_on_restart`), no transaction of its
//!    internal topics is open (the killed producer's timed out), so
//!    neither timeout is counted;
//! 3. the same application (group, state directory, topics) is started
//!    again and timed from its start to the group being done with the
//!    input (measure.rs): start, group join, restore of its state from
//!    the changelogs, then the rest of the input, and its tasks running.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::measure::{Progress, follow, group_is_empty, open_transactions};
use crate::systems::Launch;

/// One recovery's figures.
#[derive(Clone, Copy, Debug)]
pub struct Recovery {
    /// From the second start to done.
    pub seconds: f64,
    /// From the second start to its first commit of new input.
    pub first_commit_seconds: f64,
    /// Input records left when it was killed.
    pub records_left: i64,
    /// From the kill to the broker letting go (not counted).
    pub settle_seconds: f64,
}

pub fn recover(launch: &Launch, input: &str, partitions: i32, dir: &Path) -> Recovery {
    let progress = Progress::new(&launch.group, input, partitions);
    let running = launch.start(dir);
    let deadline = Instant::now() + Duration::from_secs(1800);
    while progress.committed_input() < progress.total() / 2 {
        assert!(
            Instant::now() < deadline,
            "{}: half the input",
            launch.label
        );
        running.assert_running();
        std::thread::sleep(Duration::from_millis(10));
    }
    running.kill();
    let killed = Instant::now();
    let committed = progress.committed_input();
    std::fs::remove_dir_all(&launch.state_dir).expect("the state directory is deleted");
    let deadline = killed + Duration::from_secs(300);
    while !group_is_empty(&launch.group)
        || !launch.fences_on_restart && open_transactions(&launch.group)
    {
        assert!(
            Instant::now() < deadline,
            "{}: the broker still holds the killed instance",
            launch.label
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let settle_seconds = killed.elapsed().as_secs_f64();

    let started = Instant::now();
    let running = launch.start(dir);
    // The first commit of new input, then the end.
    let mut first_commit = None;
    let deadline = started + Duration::from_secs(1800);
    while first_commit.is_none() && committed < progress.total() {
        if progress.committed_input() > committed {
            first_commit = Some(started.elapsed().as_secs_f64());
        }
        assert!(Instant::now() < deadline, "{}: no commit", launch.label);
        running.assert_running();
        std::thread::sleep(Duration::from_millis(25));
    }
    follow(running.as_ref(), &progress, started);
    // The killed run's last commit may have taken all of the input (a
    // small input commits in a few transactions): the restart is then
    // timed to its state restored and its tasks running, and it is not
    // stopped before it has started.
    running.wait_ready(partitions);
    let seconds = started.elapsed().as_secs_f64();
    running.stop();
    Recovery {
        seconds,
        first_commit_seconds: first_commit.unwrap_or(seconds),
        records_left: progress.total() - committed,
        settle_seconds,
    }
}
