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
}

impl Workload {
    pub fn parse(name: &str) -> Workload {
        match name {
            "social-metrics" => Workload::SocialMetrics,
            "question-feed" => Workload::QuestionFeed,
            "distributed-counter" => Workload::DistributedCounter,
            _ => panic!("--workloads social-metrics,question-feed,distributed-counter"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::SocialMetrics => "social-metrics",
            Workload::QuestionFeed => "question-feed",
            Workload::DistributedCounter => "distributed-counter",
        }
    }

    /// The Kafka Streams peer's application doing this topology's work.
    pub fn peer_app(self) -> Option<PeerApp> {
        match self {
            Workload::SocialMetrics => Some(PeerApp::Fold),
            Workload::QuestionFeed => Some(PeerApp::QuestionFeed),
            Workload::DistributedCounter => None,
        }
    }

    /// The topology's variables naming its input and outputs (each run
    /// gets output topics of its own), and its first output topic.
    pub fn streamfold_env(self, input: &str) -> (Vec<(String, String)>, String) {
        let (input_name, outputs): (&str, &[&str]) = match self {
            Workload::SocialMetrics => ("POST_METRICS_TOPIC", &["FOLDED_TOPIC"]),
            Workload::QuestionFeed => (
                "FEED_EVENTS_TOPIC",
                &["QUESTIONS_TOPIC", "THANKS_TOPIC", "OTHER_EVENTS_TOPIC"],
            ),
            Workload::DistributedCounter => ("COUNTER_EVENTS_TOPIC", &["COUNTER_VALUES_TOPIC"]),
        };
        let outputs: Vec<(String, String)> = outputs
            .iter()
            .map(|name| (name.to_string(), unique("bench-out")))
            .collect();
        let first = outputs[0].1.clone();
        let mut env = vec![
            (input_name.to_string(), input.to_string()),
            ("DEAD_LETTER_TOPIC".into(), unique("bench-dlq")),
        ];
        env.extend(outputs);
        if self == Workload::DistributedCounter {
            // The read-trigger source: empty here, co-partitioned with the
            // events.
            env.push(("COUNTER_READS_TOPIC".into(), format!("{input}-reads")));
        }
        (env, first)
    }

    /// The peer's topic arguments for `input`, and its first output topic.
    pub fn peer_topics(self, input: &str) -> (Vec<String>, String) {
        let outputs: &[&str] = match self {
            Workload::SocialMetrics => &["--output"],
            Workload::QuestionFeed => &[
                "--questions-topic",
                "--thanks-topic",
                "--other-events-topic",
            ],
            Workload::DistributedCounter => panic!("no Kafka Streams peer for distributed-counter"),
        };
        let mut args = vec![
            "--input".to_string(),
            input.to_string(),
            "--dead-letter-topic".into(),
            unique("bench-ks-dlq"),
        ];
        let mut first = None;
        for flag in outputs {
            let topic = unique("bench-ks-out");
            first.get_or_insert_with(|| topic.clone());
            args.extend([flag.to_string(), topic]);
        }
        (args, first.unwrap_or_default())
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
    } = input;
    let topic = unique("bench-input");
    create_topic(&topic, partitions);
    if workload == Workload::DistributedCounter {
        create_topic(&format!("{topic}-reads"), partitions);
    }
    let produced = loadgen()
        .args(["produce", "--workload", workload.name(), "--topic", &topic])
        .args(["--partitions", &partitions.to_string()])
        .args(["--events", &events.to_string()])
        .args(["--accounts", &keys.to_string(), "--json"])
        .args(["--seed", &seed.to_string()])
        .args(key_by_post.then_some("--key-by-post"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(produced.status.success());
    let summary: Value = serde_json::from_slice(&produced.stdout).unwrap();
    let records = summary["records"].as_u64().unwrap();
    assert!(records >= events, "{records} records for {events} events");
    (topic, records)
}
