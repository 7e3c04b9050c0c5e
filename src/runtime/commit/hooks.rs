//! Testing hooks of the commit cycle (hidden `run` flags): faults injected
//! at named points, and the journal of which transactions began, asked to
//! commit which offsets, and committed, so a test knows exactly which
//! transaction was open at a kill.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::CommitError;

/// A point of the commit cycle where a test can inject a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// A transaction has begun; nothing of it is sent yet.
    Begin,
    /// Every record of the transaction, changelogs included, was handed to
    /// the producer; offsets are not sent yet.
    Sent,
    /// The offsets were added to the transaction (at least once: every
    /// record is acknowledged, offsets are not committed yet).
    Offsets,
    /// Every record is acknowledged; the commit request is next.
    Commit,
    /// The broker acknowledged the commit (at least once: the offsets are
    /// committed) and the journal does not know yet: a kill here leaves a
    /// transaction in doubt that did commit, as a kill while the commit
    /// request is in flight can.
    Acked,
    /// The transaction committed; the tasks' state is not applied yet.
    Committed,
    /// A batch of changelog records was restored into a task's store.
    Restore,
    /// A batch of due timers fired and its outputs were sent.
    Timers,
    /// A batch of input records was processed and its outputs handed to
    /// the producer; the transaction stays open for more.
    Batch,
    /// Startup: the broker has answered; the cluster checks and topic
    /// creation (`admin::prepare`) are next.
    Prepare,
    /// A cooperative rebalance took tasks from this member and they are
    /// closed; the member has not rejoined the group yet, so no other
    /// member has been given them.
    Revoked,
}

impl FaultPoint {
    const ALL: [(FaultPoint, &'static str); 11] = [
        (FaultPoint::Begin, "begin"),
        (FaultPoint::Sent, "sent"),
        (FaultPoint::Offsets, "offsets"),
        (FaultPoint::Commit, "commit"),
        (FaultPoint::Acked, "acked"),
        (FaultPoint::Committed, "committed"),
        (FaultPoint::Restore, "restore"),
        (FaultPoint::Timers, "timers"),
        (FaultPoint::Batch, "batch"),
        (FaultPoint::Prepare, "prepare"),
        (FaultPoint::Revoked, "revoked"),
    ];

    pub(super) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("?", |(_, n)| n)
    }
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail the transaction as a broker error would (it is aborted and the
    /// tasks rewound).
    Abort,
    /// Make the producer unusable, as a fatal librdkafka error does: the
    /// tasks close and the process rejoins with a new producer, within its
    /// restart budget.
    Fatal,
    /// End the process at once, as `kill -9` does.
    Kill,
    /// Stop the whole process, librdkafka's threads included, as SIGSTOP
    /// does (a long GC pause, a stalled VM) until it gets SIGCONT: what it
    /// had queued in the producer stays queued.
    Freeze,
    /// Move every running task's input partitions back to their beginning
    /// behind the engine's back, as librdkafka's offset-query timer could
    /// before the vendored fix: records already processed come again
    /// while the tasks' state and positions are where they were.
    Rewind,
    /// From here until the transaction ends, the broker acknowledges its
    /// changelog records without their offsets, as librdkafka reports a
    /// record persisted by a produce retried after its reply was lost (a
    /// broker restart).
    Offsetless,
}

/// A fault to inject: `<point>:<abort|fatal|kill|freeze|rewind|offsetless>[@<n>]`, at the `n`-th time
/// (default: the first) the cycle reaches `point`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub(crate) point: FaultPoint,
    pub(crate) action: FaultAction,
    pub(crate) nth: u32,
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(text: &str) -> Result<Fault, String> {
        let (spec, nth) = match text.split_once('@') {
            Some((spec, n)) => (
                spec,
                n.parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("`{n}` is not a positive count"))?,
            ),
            None => (text, 1),
        };
        let (point, action) = spec.split_once(':').ok_or_else(|| {
            format!(
                "expected <point>:<abort|fatal|kill|freeze|rewind|offsetless>[@n], found `{text}`"
            )
        })?;
        let point = FaultPoint::ALL
            .iter()
            .find(|(_, n)| *n == point)
            .map(|(p, _)| *p)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultPoint::ALL.iter().map(|(_, n)| *n).collect();
                format!(
                    "unknown fault point `{point}` (one of {})",
                    names.join(", ")
                )
            })?;
        let action = match action {
            "abort" => FaultAction::Abort,
            "fatal" => FaultAction::Fatal,
            "kill" => FaultAction::Kill,
            "freeze" => FaultAction::Freeze,
            "rewind" => FaultAction::Rewind,
            "offsetless" => FaultAction::Offsetless,
            other => {
                return Err(format!(
                    "unknown fault action `{other}` (abort, fatal, kill, freeze, rewind or offsetless)"
                ));
            }
        };
        if matches!(action, FaultAction::Abort | FaultAction::Fatal)
            && matches!(
                point,
                FaultPoint::Acked
                    | FaultPoint::Committed
                    | FaultPoint::Restore
                    | FaultPoint::Prepare
                    | FaultPoint::Revoked
            )
        {
            return Err(format!(
                "`{}` can only be killed: there is no transaction to fail there",
                point.name()
            ));
        }
        Ok(Fault { point, action, nth })
    }
}

/// Testing aids of `streamfold run` (hidden flags).
#[derive(Clone, Debug, Default)]
pub struct TestHooks {
    /// Stamp every produced record with `streamfold.txn: <run>:<seq>`.
    pub stamp: bool,
    /// Append `begin`/`committed`/`aborted <run>:<seq>` lines here, synced
    /// to disk before the transaction sends anything and after it commits.
    pub journal: Option<PathBuf>,
    /// Faults to inject.
    pub faults: Vec<Fault>,
    /// How often each point was reached in this run, by every producer the
    /// run creates (a fault fires once per process, not once per producer).
    pub hits: FaultHits,
}

/// How often each [`FaultPoint`] was reached, shared by clones.
#[derive(Clone, Debug, Default)]
pub struct FaultHits(Arc<[AtomicU32; FaultPoint::ALL.len()]>);

/// The injected faults and how often each point was reached.
#[derive(Default)]
pub(crate) struct Faults {
    faults: Vec<Fault>,
    hits: FaultHits,
    /// A `rewind` fired and the engine has not moved the consumer yet.
    rewind: bool,
    /// An `offsetless` fired and the delivery reports do not know yet.
    offsetless: bool,
}

impl Faults {
    pub(crate) fn new(hooks: &TestHooks) -> Faults {
        Faults {
            faults: hooks.faults.clone(),
            hits: hooks.hits.clone(),
            ..Faults::default()
        }
    }

    /// Whether a `rewind` fired since the last call.
    pub(super) fn take_rewind(&mut self) -> bool {
        std::mem::take(&mut self.rewind)
    }

    /// Whether an `offsetless` fired since the last call.
    pub(super) fn take_offsetless(&mut self) -> bool {
        std::mem::take(&mut self.offsetless)
    }

    pub(crate) fn check(&mut self, point: FaultPoint) -> Result<(), CommitError> {
        if self.faults.is_empty() {
            return Ok(());
        }
        let slot = FaultPoint::ALL
            .iter()
            .position(|(p, _)| *p == point)
            .unwrap_or(0);
        let hits = self.hits.0[slot].fetch_add(1, Ordering::Relaxed) + 1;
        let Some(fault) = self
            .faults
            .iter()
            .find(|f| f.point == point && f.nth == hits)
        else {
            return Ok(());
        };
        match fault.action {
            FaultAction::Abort => {
                tracing::warn!(
                    point = point.name(),
                    hit = hits,
                    "Injected fault: aborting."
                );
                Err(CommitError::Aborted(format!(
                    "injected fault at `{}`",
                    point.name()
                )))
            }
            FaultAction::Fatal => {
                tracing::warn!(
                    point = point.name(),
                    hit = hits,
                    "Injected fault: the producer fails fatally."
                );
                Err(CommitError::Fatal(format!(
                    "injected fatal fault at `{}`",
                    point.name()
                )))
            }
            FaultAction::Kill => {
                tracing::warn!(
                    point = point.name(),
                    hit = hits,
                    "Injected fault: killing the process."
                );
                // Like kill -9: no destructor, no flush, no goodbye.
                std::process::abort()
            }
            FaultAction::Freeze => {
                tracing::warn!(
                    point = point.name(),
                    hit = hits,
                    "Injected fault: freezing the process until SIGCONT."
                );
                // SAFETY: raise(3) with a valid signal number has no
                // preconditions; SIGSTOP cannot be caught, so no handler
                // runs.
                unsafe {
                    libc::raise(libc::SIGSTOP);
                }
                tracing::warn!(point = point.name(), "Woken up (SIGCONT).");
                Ok(())
            }
            FaultAction::Rewind => {
                tracing::warn!(
                    point = point.name(),
                    hit = hits,
                    "Injected fault: the consumer goes back to the beginning of every partition."
                );
                self.rewind = true;
                Ok(())
            }
            FaultAction::Offsetless => {
                tracing::warn!(
                    point = point.name(),
                    hit = hits,
                    "Injected fault: the transaction's changelog records are acknowledged without \
                     their offsets."
                );
                self.offsetless = true;
                Ok(())
            }
        }
    }
}

/// The test journal: one synced line per transaction event.
pub(super) struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    pub(super) fn open(path: &Path) -> Result<Journal, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                format!(
                    "cannot open the transaction journal {}: {e}",
                    path.display()
                )
            })?;
        Ok(Journal {
            file,
            path: path.to_path_buf(),
        })
    }

    pub(super) fn record(&mut self, event: &str, label: &str) {
        self.write(&format!("{event} {label}"));
    }

    /// `<event> <label> <unix ms> <topic>:<partition>:<offset>…`: offsets
    /// a transaction commits, or (`fetched`) the group's committed offsets
    /// as a new owner read them. Together they tell a transaction in doubt
    /// at a kill apart: committed if every next owner resumed at or past
    /// its offsets, not if one resumed before them.
    pub(super) fn offsets(&mut self, event: &str, label: &str, list: &TopicPartitionList) {
        let mut line = format!("{event} {label} {}", unix_millis());
        for element in list.elements() {
            let offset = match element.offset() {
                Offset::Offset(offset) => offset,
                _ => -1,
            };
            line.push_str(&format!(
                " {}:{}:{offset}",
                element.topic(),
                element.partition()
            ));
        }
        self.write(&line);
    }

    fn write(&mut self, line: &str) {
        let written = writeln!(self.file, "{line}").and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            tracing::error!(path = %self.path.display(), %error, "Cannot write the transaction journal.");
        }
    }
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_with_their_count_and_reject_what_cannot_happen() {
        assert_eq!(
            "commit:kill@3".parse::<Fault>(),
            Ok(Fault {
                point: FaultPoint::Commit,
                action: FaultAction::Kill,
                nth: 3
            })
        );
        assert_eq!("sent:abort".parse::<Fault>().map(|f| f.nth), Ok(1));
        assert!("committed:abort".parse::<Fault>().is_err());
        assert!("restore:abort".parse::<Fault>().is_err());
        assert!("acked:abort".parse::<Fault>().is_err());
        assert!("revoked:fatal".parse::<Fault>().is_err());
        assert_eq!(
            "revoked:kill".parse::<Fault>().map(|f| f.point),
            Ok(FaultPoint::Revoked)
        );
        assert_eq!(
            "begin:offsetless@7".parse::<Fault>().map(|f| f.action),
            Ok(FaultAction::Offsetless)
        );
        assert!(
            "nowhere:kill"
                .parse::<Fault>()
                .unwrap_err()
                .contains("begin")
        );
        assert!("sent:kill@0".parse::<Fault>().is_err());
        assert_eq!(
            "batch:freeze@2".parse::<Fault>(),
            Ok(Fault {
                point: FaultPoint::Batch,
                action: FaultAction::Freeze,
                nth: 2
            })
        );
        assert!(
            "sent:sleep"
                .parse::<Fault>()
                .unwrap_err()
                .contains("freeze")
        );
    }

    #[test]
    fn an_abort_fault_fires_once_at_its_hit() {
        let mut faults = Faults {
            faults: vec!["sent:abort@2".parse().unwrap()],
            ..Faults::default()
        };
        assert!(faults.check(FaultPoint::Sent).is_ok());
        assert!(faults.check(FaultPoint::Commit).is_ok());
        assert!(matches!(
            faults.check(FaultPoint::Sent),
            Err(CommitError::Aborted(_))
        ));
        assert!(faults.check(FaultPoint::Sent).is_ok());
    }
}
