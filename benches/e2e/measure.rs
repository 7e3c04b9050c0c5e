//! How a run is timed, the same way for every system: from outside, by the
//! offsets its consumer group commits, sampled every 25 ms.
//!
//! A run starts at the first commit seen and ends when the group has
//! committed every input partition to its end and every partition of its
//! repartition topics (`<group>-…-repartition`, where a re-keyed record
//! goes before its stateful node) past its last record: every record has
//! been through the topology, its outputs and state changes committed in
//! the same transactions. The rate counts the records committed in
//! between; CPU is read from `/proc` at both ends, for the system's
//! processes and for the broker. So the start (process start, group join,
//! restore of empty state) is left out for every system alike, and a
//! system's first commit interval too.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::support::*;
use crate::systems::Running;

/// CPU seconds (user + system) a process has used so far; `None` once it
/// is gone. `/proc/<pid>/stat`'s utime and stime, fields 14 and 15, in
/// ticks of 1/100 s.
pub fn cpu_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |field: usize| fields.get(field - 3)?.parse::<f64>().ok();
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

/// CPU seconds of `pids` together.
pub fn cpu_of_all(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&pid| cpu_of(pid)).sum()
}

/// A group's progress over an input topic, as the broker has it.
pub struct Progress {
    consumer: BaseConsumer,
    group: String,
    input: TopicPartitionList,
    /// The input's end offsets (it is written before the run).
    ends: Vec<i64>,
}

impl Progress {
    pub fn new(group: &str, input: &str, partitions: i32) -> Progress {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &broker().bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        let mut ends = Vec::new();
        for p in 0..partitions {
            list.add_partition(input, p);
            ends.push(
                consumer
                    .fetch_watermarks(input, p, Duration::from_secs(10))
                    .unwrap()
                    .1,
            );
        }
        Progress {
            consumer,
            group: group.to_string(),
            input: list,
            ends,
        }
    }

    /// Records in the input topic.
    pub fn total(&self) -> i64 {
        self.ends.iter().sum()
    }

    fn committed(&self, list: &TopicPartitionList) -> Vec<i64> {
        match self
            .consumer
            .committed_offsets(list.clone(), Duration::from_secs(10))
        {
            Ok(committed) => committed
                .elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => o,
                    _ => 0,
                })
                .collect(),
            Err(_) => vec![0; list.count()],
        }
    }

    /// Input records whose offsets the group has committed.
    pub fn committed_input(&self) -> i64 {
        self.committed(&self.input).iter().sum()
    }

    /// Whether the group has committed the whole input and every record
    /// of its repartition topics.
    pub fn done(&self) -> bool {
        let input = self.committed(&self.input);
        if input.iter().zip(&self.ends).any(|(c, e)| c < e) {
            return false;
        }
        let Ok(metadata) = self.consumer.fetch_metadata(None, Duration::from_secs(10)) else {
            return false;
        };
        let prefix = format!("{}-", self.group);
        let mut list = TopicPartitionList::new();
        let mut ends = Vec::new();
        for topic in metadata.topics() {
            let name = topic.name();
            if name.starts_with(&prefix) && name.ends_with("-repartition") {
                for p in topic.partitions() {
                    let Ok((_, end)) =
                        self.consumer
                            .fetch_watermarks(name, p.id(), Duration::from_secs(10))
                    else {
                        return false;
                    };
                    list.add_partition(name, p.id());
                    ends.push(end);
                }
            }
        }
        if list.count() == 0 {
            return true;
        }
        // Repartition topics are written in transactions: a partition's
        // last offset is the marker of the transaction that wrote its last
        // record, which a consumer need not commit past.
        self.committed(&list)
            .iter()
            .zip(&ends)
            .all(|(&c, &end)| c >= end - 1)
    }
}

/// One system's figures over one run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunFigures {
    /// Input records committed within the timed span.
    pub records: f64,
    pub seconds: f64,
    /// The system's CPU seconds over the span, all its processes.
    pub cpu: f64,
    /// The broker's CPU seconds over the span.
    pub broker_cpu: f64,
    /// Peak resident set of its largest process, MiB.
    pub rss_mib: f64,
}

impl RunFigures {
    pub fn rate(&self) -> f64 {
        self.records / self.seconds.max(1e-9)
    }

    /// CPU seconds per million records.
    pub fn cpu_per_million(&self) -> f64 {
        self.cpu / self.records.max(1.0) * 1e6
    }

    pub fn broker_cpu_per_million(&self) -> f64 {
        self.broker_cpu / self.records.max(1.0) * 1e6
    }
}

/// A moment of a run: when, committed input, CPU of the system and the
/// broker.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    committed: i64,
    cpu: f64,
    broker_cpu: f64,
}

/// Follows `running` until its group is done with the input; `started`
/// is when its processes were started (the span when the whole input
/// came in the first commit, as on tiny inputs).
pub fn follow(running: &dyn Running, progress: &Progress, started: Instant) -> RunFigures {
    let broker_pid = broker().pid();
    let mark = |committed: i64| Mark {
        at: Instant::now(),
        committed,
        cpu: cpu_of_all(&running.pids()),
        broker_cpu: cpu_of(broker_pid).unwrap_or(0.0),
    };
    let start_mark = Mark {
        at: started,
        ..mark(0)
    };
    let deadline = started + Duration::from_secs(1800);
    let mut first: Option<Mark> = None;
    let end = loop {
        let committed = progress.committed_input();
        if first.is_none() && committed > 0 {
            first = Some(mark(committed));
        }
        if committed >= progress.total() && progress.done() {
            break mark(committed);
        }
        assert!(
            Instant::now() < deadline,
            "{} did not finish within 30 minutes",
            progress.group
        );
        running.assert_running();
        std::thread::sleep(Duration::from_millis(25));
    };
    let first = first.expect("a first commit");
    // A whole input in the first commit: time it from the start.
    let first = if first.committed >= progress.total() {
        start_mark
    } else {
        first
    };
    RunFigures {
        records: (end.committed - first.committed) as f64,
        seconds: end.at.duration_since(first.at).as_secs_f64(),
        cpu: end.cpu - first.cpu,
        broker_cpu: end.broker_cpu - first.broker_cpu,
        rss_mib: running
            .pids()
            .iter()
            .map(|&pid| peak_rss_mib(pid))
            .fold(0.0, f64::max),
    }
}

/// Whether `group` has no members left (a killed member's session ended).
pub fn group_is_empty(group: &str) -> bool {
    let consumer: BaseConsumer = broker().client().create().unwrap();
    match consumer.fetch_group_list(Some(group), Duration::from_secs(10)) {
        Ok(list) => list.groups().iter().all(|g| g.members().is_empty()),
        Err(_) => false,
    }
}

/// Whether any topic whose name contains `group` (changelogs, repartition
/// topics) holds a transaction still open: its read_committed end (the
/// last stable offset) short of its end.
pub fn open_transactions(group: &str) -> bool {
    let committed: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let uncommitted: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let Ok(metadata) = committed.fetch_metadata(None, Duration::from_secs(10)) else {
        return true;
    };
    let timeout = Duration::from_secs(10);
    metadata
        .topics()
        .iter()
        .filter(|t| t.name().contains(group))
        .flat_map(|t| t.partitions().iter().map(move |p| (t.name(), p.id())))
        .any(|(topic, p)| {
            let stable = committed.fetch_watermarks(topic, p, timeout);
            let end = uncommitted.fetch_watermarks(topic, p, timeout);
            !matches!((stable, end), (Ok(a), Ok(b)) if a.1 == b.1)
        })
}
