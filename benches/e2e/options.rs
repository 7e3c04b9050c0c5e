//! The harness's command line (main.rs lists it) and its two sets of
//! defaults: a benchmark (`--bench`, as `cargo bench` passes it) and the
//! smoke run under `cargo test`.

use crate::workload::Workload;

pub struct Options {
    /// Under `cargo test`: a short run of every step, figures meaningless.
    pub smoke: bool,
    pub workloads: Vec<Workload>,
    /// Distinct events per workload (some workloads send copies too).
    pub events: u64,
    /// Per-workload exceptions to `events` (`--events question-feed=N`).
    pub events_of: Vec<(Workload, u64)>,
    /// Keys the events are spread over (accounts, questions, counters).
    pub accounts: u64,
    pub partitions: i32,
    /// The generators' stretch (`streamfold-loadgen produce --seed`): the
    /// same seed, the same events.
    pub seed: u32,
    /// social-metrics' events keyed by post instead of account
    /// (`--keyed-by post`), so streamfold re-keys them too.
    pub key_by_post: bool,
    /// page-views: views per 5-minute window of event time
    /// (`--views-per-window`; none: `Workload::views_per_window`).
    pub views_per_window: Option<u64>,
    /// Every measurement this many times; the table shows the medians.
    pub repeat: usize,
    /// Latency bursts measured, after `warmup_bursts` not measured.
    pub bursts: usize,
    pub warmup_bursts: usize,
    /// Run the Kafka Streams peer (`--peers kafka-streams`).
    pub kafka_streams: bool,
    /// Run Quix Streams (`--peers quix`).
    pub quix: bool,
    /// `run --threads` values to measure (none: the topology's default).
    pub threads: Vec<Option<usize>>,
    /// Numbers of streamfold instances to measure.
    pub instances: Vec<usize>,
    /// Extra arguments of every `streamfold run` (`--run-args`).
    pub run_args: Vec<String>,
    /// Other builds of streamfold measured beside this one, each as a
    /// label and its binary (`--compare-builds before=/path/streamfold`):
    /// the same rows again, interleaved with this build's runs.
    pub builds: Vec<(String, std::path::PathBuf)>,
    /// streamfold's processing guarantees to measure (the peers always
    /// run exactly-once).
    pub guarantees: Vec<String>,
    /// Commit intervals to measure, every system at the same one (none:
    /// the topology's, 100 ms).
    pub commit_intervals: Vec<Option<String>>,
    /// Quix Streams' commit interval (its default: 5 s).
    pub quix_commit_interval: String,
    /// Measure latency (social-metrics).
    pub latency: bool,
    /// Measure restore and catch-up after a kill -9 with the state wiped
    /// (`--no-recovery`: never).
    pub recovery: bool,
    /// Only on these workloads (`--recovery-workloads`; none: on each).
    pub recovery_workloads: Vec<Workload>,
}

impl Options {
    /// Whether recovery is measured on `workload`.
    pub fn recovery_on(&self, workload: Workload) -> bool {
        self.recovery
            && (self.recovery_workloads.is_empty() || self.recovery_workloads.contains(&workload))
    }

    /// Distinct events of `workload`.
    pub fn events(&self, workload: Workload) -> u64 {
        self.events_of
            .iter()
            .rev()
            .find(|(w, _)| *w == workload)
            .map_or(self.events, |&(_, n)| n)
    }
}

pub fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench");
    let mut o = if benchmarking {
        Options {
            smoke: false,
            workloads: vec![Workload::SocialMetrics],
            events: 2_000_000,
            events_of: Vec::new(),
            accounts: 1_000,
            partitions: 4,
            seed: 0,
            key_by_post: false,
            views_per_window: None,
            repeat: 3,
            bursts: 200,
            warmup_bursts: 200,
            kafka_streams: false,
            quix: false,
            threads: vec![None],
            instances: vec![1],
            run_args: Vec::new(),
            builds: Vec::new(),
            guarantees: vec!["exactly_once".into(), "at_least_once".into()],
            commit_intervals: vec![None],
            quix_commit_interval: "5s".into(),
            latency: true,
            recovery: true,
            recovery_workloads: Vec::new(),
        }
    } else {
        Options {
            smoke: true,
            workloads: vec![Workload::SocialMetrics],
            events: 20_000,
            events_of: Vec::new(),
            accounts: 100,
            partitions: 4,
            seed: 0,
            key_by_post: false,
            views_per_window: None,
            repeat: 1,
            bursts: 10,
            warmup_bursts: 5,
            // The peers run only when asked for (`--peers kafka-streams`):
            // the JVM's start and warm-up would take most of the smoke
            // run's time, and tests/peers.rs already runs the Kafka
            // Streams peer; Quix Streams would be installed from PyPI.
            kafka_streams: false,
            quix: false,
            threads: vec![None],
            // Two instances go through the several-instances path.
            instances: vec![1, 2],
            run_args: Vec::new(),
            builds: Vec::new(),
            guarantees: vec!["exactly_once".into()],
            // And through the commit interval given to every system.
            commit_intervals: vec![Some("100ms".into())],
            quix_commit_interval: "5s".into(),
            latency: true,
            recovery: true,
            recovery_workloads: Vec::new(),
        }
    };
    let list = |value: &str| -> Vec<String> {
        value
            .split(',')
            .filter(|v| !v.is_empty())
            .map(String::from)
            .collect()
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            // `--events N` for every workload, or per workload:
            // `--events social-metrics=2000000,question-feed=300000`.
            "--events" => {
                for item in list(&value) {
                    match item.split_once('=') {
                        Some((workload, n)) => o
                            .events_of
                            .push((Workload::parse(workload), n.parse().expect("--events W=N"))),
                        None => o.events = item.parse().expect("--events N"),
                    }
                }
            }
            "--workload" | "--workloads" => {
                o.workloads = list(&value).iter().map(|w| Workload::parse(w)).collect();
            }
            "--accounts" => o.accounts = value.parse().expect("--accounts N"),
            "--partitions" => o.partitions = value.parse().expect("--partitions N"),
            "--seed" => o.seed = value.parse().expect("--seed S"),
            "--keyed-by" => {
                o.key_by_post = match value.as_str() {
                    "account" => false,
                    "post" => true,
                    _ => panic!("--keyed-by account|post"),
                };
            }
            "--repeat" => o.repeat = value.parse().expect("--repeat N"),
            "--views-per-window" => {
                o.views_per_window = Some(value.parse().expect("--views-per-window N"));
            }
            "--bursts" => o.bursts = value.parse().expect("--bursts N"),
            "--warmup-bursts" => o.warmup_bursts = value.parse().expect("--warmup-bursts N"),
            "--peers" | "--peer" => {
                o.kafka_streams = false;
                o.quix = false;
                for peer in list(&value) {
                    match peer.as_str() {
                        "kafka-streams" => o.kafka_streams = true,
                        "quix" => o.quix = true,
                        "none" => {}
                        _ => panic!("--peers kafka-streams,quix (or none)"),
                    }
                }
            }
            "--no-latency" => {
                o.latency = false;
                i += 1;
                continue;
            }
            "--recovery-workloads" => {
                o.recovery_workloads = list(&value).iter().map(|w| Workload::parse(w)).collect();
            }
            "--no-recovery" => {
                o.recovery = false;
                i += 1;
                continue;
            }
            "--instances" => {
                o.instances = list(&value)
                    .iter()
                    .map(|t| t.parse().expect("--instances I[,I…]"))
                    .collect();
            }
            "--guarantees" => {
                o.guarantees = list(&value);
                for g in &o.guarantees {
                    assert!(
                        g == "exactly_once" || g == "at_least_once",
                        "--guarantees exactly_once,at_least_once"
                    );
                }
            }
            // Extra `streamfold run` arguments, e.g. `-X key=value`
            // overrides for an experiment: `--run-args "-X a=b -X c=d"`.
            "--run-args" => {
                o.run_args = value.split_whitespace().map(String::from).collect();
            }
            "--compare-builds" => {
                o.builds = list(&value)
                    .iter()
                    .map(|item| {
                        let (label, path) = item
                            .split_once('=')
                            .expect("--compare-builds LABEL=PATH[,LABEL=PATH…]");
                        let path = std::path::PathBuf::from(path);
                        assert!(
                            path.is_file(),
                            "--compare-builds: no binary at {}",
                            path.display()
                        );
                        (label.to_string(), path)
                    })
                    .collect();
            }
            "--commit-intervals" => {
                o.commit_intervals = list(&value).into_iter().map(Some).collect();
            }
            "--quix-commit-interval" => o.quix_commit_interval = value,
            "--threads" => {
                o.threads = list(&value)
                    .iter()
                    .map(|t| Some(t.parse().expect("--threads T[,T…]")))
                    .collect();
            }
            // cargo passes `--bench`; ignore what is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    assert!(
        o.commit_intervals == [None]
            || o.workloads.iter().all(|w| {
                matches!(
                    w,
                    Workload::SocialMetrics | Workload::PageViews | Workload::OrdersEnriched
                )
            }),
        "--commit-intervals: social-metrics, page-views and orders-enriched only (the other topologies fix 100 ms)"
    );
    o
}
