//! Startup does not depend on the order topics are created in: `run`
//! started before its source topic exists waits for it — saying so in its
//! log every 10 s and in the gauge `streamfold_runtime_missing_source_topics`
//! — then processes what arrives; a signal stops it while it waits; and
//! `kafka.wait_for_sources: false` brings back the fail-fast start.
//!
//! Against the test broker (see `support`), on random topic names.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    App, AppConfig, TestProducer, broker, by_key, create_topic, read_topic, repo, serial, temp_dir,
    unique,
};

const MISSING: &str = "streamfold_runtime_missing_source_topics";
const WAITING: &str = "Waiting for the source topics to be created";
/// Events per account; folds close after exactly this many.
const PER_ACCOUNT: usize = 5;
const ACCOUNTS: usize = 3;

struct Names {
    app: String,
    source: String,
    folded: String,
    dlq: String,
}

impl Names {
    fn new() -> Names {
        Names {
            app: unique("startup"),
            source: unique("post-metric-updated"),
            folded: unique("account-metrics-folded"),
            dlq: unique("dlq"),
        }
    }

    /// The social-metrics example on these names; folds close only on
    /// `max_events`, so what comes out does not depend on timing.
    fn app(&self, state_dir: &std::path::Path, extra: &[(&str, &str)]) -> AppConfig {
        let mut env = vec![
            ("STREAMFOLD_APP".to_string(), self.app.clone()),
            ("POST_METRICS_TOPIC".to_string(), self.source.clone()),
            ("FOLDED_TOPIC".to_string(), self.folded.clone()),
            ("DEAD_LETTER_TOPIC".to_string(), self.dlq.clone()),
            ("FOLD_QUIET_FOR".to_string(), "10m".to_string()),
            ("FOLD_MAX_WAIT".to_string(), "1h".to_string()),
            ("FOLD_MAX_EVENTS".to_string(), PER_ACCOUNT.to_string()),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: "startup-0".into(),
            state_dir: state_dir.to_path_buf(),
            env,
            txn_header: false,
            args: Vec::new(),
        }
    }
}

#[test]
fn run_started_before_its_source_topic_waits_for_it_then_folds_what_arrives() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new();
    let app = App::start(&names.app(&dir.path().join("state"), &[]), dir.path());

    // Waiting, and saying so: the gauge counts the missing topic, and the
    // log names it, again 10 s later.
    app.wait_metric_present(MISSING, Duration::from_secs(60), |v| v == 1.0);
    let lines = app.wait_log_lines(WAITING, 2, Duration::from_secs(60));
    for line in &lines {
        assert!(line.contains(&names.source), "{line}");
        assert!(line.contains("WARN"), "{line}");
    }
    app.assert_running();
    assert_eq!(
        support::find_metric(&app.metrics_text(), MISSING),
        Some(1.0)
    );

    // The producer creates the topic (4 partitions) and writes.
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    for i in 0..PER_ACCOUNT * ACCOUNTS {
        let account = format!("account_{}", i % ACCOUNTS);
        producer.send_json(
            &names.source,
            &account,
            &json!({
                "post_id": format!("post_{i}"),
                "account_id": account,
                "metrics": {"likes": i},
            }),
        );
    }
    producer.flush();

    // One folded event per account, read as soon as they are there.
    let folded = read_topic(
        &names.folded,
        ACCOUNTS,
        Duration::ZERO,
        Duration::from_secs(180),
    );
    assert_eq!(folded.len(), ACCOUNTS, "log:\n{}", app.log_text());
    let per_account = by_key(&folded);
    assert_eq!(per_account.len(), ACCOUNTS, "{folded:?}");
    for (account, records) in per_account {
        let value = records[0].json();
        assert_eq!(value["account_id"], json!(account), "{value}");
        assert_eq!(value["folded_count"], json!(PER_ACCOUNT), "{value}");
        assert_eq!(value["closed_by"], json!("max_events"), "{value}");
        assert_eq!(value["metrics"], json!(["likes"]), "{value}");
        assert_eq!(
            value["posts"].as_array().map(Vec::len),
            Some(PER_ACCOUNT),
            "{value}"
        );
    }
    assert_eq!(
        support::find_metric(&app.metrics_text(), MISSING),
        Some(0.0),
        "the gauge says nothing is missing any more"
    );
    let log = app.stop();
    assert!(
        log.contains("Every source topic exists; starting."),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_signal_stops_run_while_it_waits_for_its_source_topic() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new();
    let app = App::start(&names.app(&dir.path().join("state"), &[]), dir.path());
    app.wait_metric_present(MISSING, Duration::from_secs(60), |v| v == 1.0);
    app.wait_log_lines(WAITING, 1, Duration::from_secs(60));

    let started = Instant::now();
    // SIGTERM; `stop` asserts a clean exit.
    let log = app.stop();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "took {took:?}; log:\n{log}");
    assert!(
        log.contains("Stopping before the source topics exist."),
        "{log}"
    );
    // It never got as far as creating the topics it owns.
    let existing = topics();
    assert!(!existing.contains(&names.folded), "{existing:?}");
    assert!(!existing.contains(&names.dlq), "{existing:?}");
}

#[test]
fn with_wait_for_sources_off_a_missing_source_topic_fails_fast_and_is_named() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new();
    let started = Instant::now();
    let app = App::start(
        &names.app(
            &dir.path().join("state"),
            &[("STREAMFOLD_WAIT_FOR_SOURCES", "false")],
        ),
        dir.path(),
    );
    let (status, log) = app.wait_exit(Duration::from_secs(60));
    let took = started.elapsed();
    assert!(!status.success(), "{log}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(
        log.contains(&format!(
            "source topic `{}` (source `post_metrics`) does not exist on {}",
            names.source,
            broker().bootstrap
        )),
        "{log}"
    );
    assert!(log.contains("`kafka.wait_for_sources: true`"), "{log}");
    assert!(!log.contains(WAITING), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// Topic names on the test broker.
fn topics() -> Vec<String> {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker().bootstrap)
        .create()
        .unwrap();
    consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap()
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .collect()
}
