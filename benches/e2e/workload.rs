//! The topologies measured, their events, and the topics each system
//! writes.

use std::process::Command;

use serde_json::Value;

use crate::kafka_streams::PeerApp;
use crate::support::{broker, create_topic, unique};

/// A topology measured, with its events (`streamfold-loadgen produce
/// --workload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    SocialMetrics,
    QuestionFeed,
    DistributedCounter,
    /// Page views counted per page and 5-minute window of event time.
    PageViews,
    /// Orders joined with a customers table.
    OrdersEnriched,
}

/// page-views' window and grace, given to both systems (the topology's
/// defaults, and the times `streamfold-loadgen` generates for).
pub const PAGE_VIEWS_WINDOW: &str = "5m";
pub const PAGE_VIEWS_GRACE: &str = "1m";

/// The topics one run of a system writes, as its command line or
/// environment names them.
pub struct RunTopics {
    /// Variables (streamfold) or arguments (the peer).
    pub settings: Vec<(String, String)>,
    /// Its first output topic (social-metrics: the folds).
    pub output: String,
    pub dead_letters: String,
}

impl Workload {
    pub fn parse(name: &str) -> Workload {
        match name {
            "social-metrics" => Workload::SocialMetrics,
            "question-feed" => Workload::QuestionFeed,
            "distributed-counter" => Workload::DistributedCounter,
            "page-views" => Workload::PageViews,
            "orders-enriched" => Workload::OrdersEnriched,
            _ => panic!(
                "--workloads social-metrics,question-feed,distributed-counter,page-views,orders-enriched"
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::SocialMetrics => "social-metrics",
            Workload::QuestionFeed => "question-feed",
            Workload::DistributedCounter => "distributed-counter",
            Workload::PageViews => "page-views",
            Workload::OrdersEnriched => "orders-enriched",
        }
    }

    /// The Kafka Streams peer's application doing this topology's work.
    pub fn peer_app(self) -> Option<PeerApp> {
        match self {
            Workload::SocialMetrics => Some(PeerApp::Fold),
            Workload::QuestionFeed => Some(PeerApp::QuestionFeed),
            Workload::DistributedCounter => None,
            Workload::PageViews => Some(PeerApp::PageViews),
            Workload::OrdersEnriched => Some(PeerApp::OrdersEnriched),
        }
    }

    /// The table a workload reads beside its input topic (orders-enriched's
    /// customers), named after the input.
    pub fn table_topic(self, input: &str) -> Option<String> {
        (self == Workload::OrdersEnriched).then(|| format!("{input}-customers"))
    }

    /// The topology's variables naming its input and outputs (each run
    /// gets output topics of its own) and its parameters.
    pub fn streamfold_env(self, input: &str) -> RunTopics {
        let (input_name, outputs): (&str, &[&str]) = match self {
            Workload::SocialMetrics => ("POST_METRICS_TOPIC", &["FOLDED_TOPIC"]),
            Workload::QuestionFeed => (
                "FEED_EVENTS_TOPIC",
                &["QUESTIONS_TOPIC", "THANKS_TOPIC", "OTHER_EVENTS_TOPIC"],
            ),
            Workload::DistributedCounter => ("COUNTER_EVENTS_TOPIC", &["COUNTER_VALUES_TOPIC"]),
            Workload::PageViews => ("PAGE_VIEWS_TOPIC", &["PAGE_VIEWS_COUNTS_TOPIC"]),
            Workload::OrdersEnriched => ("ORDERS_TOPIC", &["ENRICHED_ORDERS_TOPIC"]),
        };
        let outputs: Vec<(String, String)> = outputs
            .iter()
            .map(|name| (name.to_string(), unique("bench-out")))
            .collect();
        let output = outputs[0].1.clone();
        let dead_letters = unique("bench-dlq");
        let mut env = vec![
            (input_name.to_string(), input.to_string()),
            ("DEAD_LETTER_TOPIC".into(), dead_letters.clone()),
        ];
        env.extend(outputs);
        match self {
            // The read-trigger source: empty here, co-partitioned with the
            // events.
            Workload::DistributedCounter => {
                env.push(("COUNTER_READS_TOPIC".into(), format!("{input}-reads")));
            }
            Workload::PageViews => {
                env.push(("PAGE_VIEWS_WINDOW".into(), PAGE_VIEWS_WINDOW.into()));
                env.push(("PAGE_VIEWS_GRACE".into(), PAGE_VIEWS_GRACE.into()));
            }
            Workload::OrdersEnriched => {
                env.push(("CUSTOMERS_TOPIC".into(), format!("{input}-customers")));
            }
            Workload::SocialMetrics | Workload::QuestionFeed => {}
        }
        RunTopics {
            settings: env,
            output,
            dead_letters,
        }
    }

    /// The peer's topic arguments for `input` (each flag and its value)
    /// and its parameters.
    pub fn peer_topics(self, input: &str) -> RunTopics {
        let outputs: &[&str] = match self {
            Workload::SocialMetrics | Workload::PageViews | Workload::OrdersEnriched => {
                &["--output"]
            }
            Workload::QuestionFeed => &[
                "--questions-topic",
                "--thanks-topic",
                "--other-events-topic",
            ],
            Workload::DistributedCounter => panic!("no Kafka Streams peer for distributed-counter"),
        };
        let dead_letters = unique("bench-ks-dlq");
        let mut args = vec![
            ("--input".to_string(), input.to_string()),
            ("--dead-letter-topic".into(), dead_letters.clone()),
        ];
        let mut first = None;
        for flag in outputs {
            let topic = unique("bench-ks-out");
            first.get_or_insert_with(|| topic.clone());
            args.push((flag.to_string(), topic));
        }
        match self {
            Workload::PageViews => {
                args.push(("--window".into(), PAGE_VIEWS_WINDOW.into()));
                args.push(("--grace".into(), PAGE_VIEWS_GRACE.into()));
            }
            Workload::OrdersEnriched => {
                args.push(("--customers-topic".into(), format!("{input}-customers")));
            }
            _ => {}
        }
        RunTopics {
            settings: args,
            output: first.unwrap_or_default(),
            dead_letters,
        }
    }

    /// Views per window of event time that page-views' input is generated
    /// with for `events` views: half of them (at least 1,000), so the input
    /// is two bursts (`streamfold-loadgen`'s `page_view`): the first
    /// burst's windows close six sevenths into the second, whose windows
    /// stay open. An on-time view is dead-lettered only if it lags 43 % of
    /// the input behind its task's stream time; with four bursts (21 %),
    /// both systems dead-lettered on-time views when replaying 200,000
    /// (BENCHMARKS.md, page-views).
    pub fn views_per_window(events: u64) -> u64 {
        (events / 2).max(1_000)
    }
}

pub fn loadgen() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"));
    command.arg("--bootstrap-servers").arg(&broker().bootstrap);
    command
}

/// What [`produce`] sends.
pub struct Input {
    pub workload: Workload,
    pub events: u64,
    pub keys: u64,
    pub partitions: i32,
    /// social-metrics' events keyed by post.
    pub key_by_post: bool,
    /// The generators' stretch (`streamfold-loadgen produce --seed`).
    pub seed: u32,
    /// page-views' views per window of event time.
    pub views_per_window: u64,
}

/// Produces `input` to a new topic; returns the topic and the records it
/// holds (copies included): what every system reads. The events are the
/// same on every run of a seed: the generators are functions of the
/// event number.
pub fn produce(input: &Input) -> (String, u64) {
    let &Input {
        workload,
        events,
        keys,
        partitions,
        key_by_post,
        seed,
        views_per_window,
    } = input;
    let topic = unique("bench-input");
    create_topic(&topic, partitions);
    if workload == Workload::DistributedCounter {
        create_topic(&format!("{topic}-reads"), partitions);
    }
    let mut command = loadgen();
    command
        .args(["produce", "--workload", workload.name(), "--topic", &topic])
        .args(["--partitions", &partitions.to_string()])
        .args(["--events", &events.to_string()])
        .args(["--accounts", &keys.to_string(), "--json"])
        .args(["--seed", &seed.to_string()])
        .args(key_by_post.then_some("--key-by-post"));
    if workload == Workload::PageViews {
        command.args(["--views-per-window", &views_per_window.to_string()]);
    }
    if let Some(table) = workload.table_topic(&topic) {
        // The loadgen creates it compacted.
        command.args(["--customers-topic", &table]);
    }
    let produced = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(produced.status.success());
    let summary: Value = serde_json::from_slice(&produced.stdout).unwrap();
    let records = summary["records"].as_u64().unwrap();
    assert!(records >= events, "{records} records for {events} events");
    (topic, records)
}
