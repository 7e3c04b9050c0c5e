//! What `run` does before it processes anything, against the test broker
//! (see `support`), on random topic names.
//!
//! - Startup does not depend on the order topics are created in: `run`
//!   started before its source topic exists waits for it — saying so in
//!   its log every 10 s and in the gauge
//!   `streamfold_runtime_missing_source_topics` — then processes what
//!   arrives; a signal stops it while it waits; and
//!   `kafka.wait_for_sources: false` brings back the fail-fast start.
//! - What no wait would mend stops startup at once, naming what is wrong:
//!   an unreachable broker, a missing sink topic, source topics of unequal
//!   partition counts. Each ends the process by itself, without a round of
//!   startup's retries.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::{
    App, AppConfig, TestProducer, broker, by_key, create_topic, free_port, read_topic, repo,
    serial, temp_dir, unique,
};

const MISSING: &str = "streamfold_runtime_missing_source_topics";
const WAITING: &str = "Waiting for the source topics to be created";
/// What startup's retries log at each round: waiting for a broker that
/// answered before and stopped (`wait_for_sources`, `prepare_patiently`).
const TRYING_AGAIN: &str = "trying again";
/// How long a `run` that must fail at startup gets to end by itself. Its
/// own attempts give up far sooner (an unreachable broker after its 10 s
/// connect timeout, the rest at once): this is the harness's patience, so
/// only a process that keeps trying fails it.
const ENDS_BY_ITSELF_WITHIN: Duration = Duration::from_secs(120);
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
    fn app(&self, state_dir: &Path, extra: &[(&str, &str)]) -> AppConfig {
        self.app_of(
            &repo().join("topologies/social-metrics.yaml"),
            state_dir,
            extra,
        )
    }

    /// [`Names::app`] with the topology at `topology`.
    fn app_of(&self, topology: &Path, state_dir: &Path, extra: &[(&str, &str)]) -> AppConfig {
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
            topology: topology.to_path_buf(),
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
    app.wait_metric(MISSING, Duration::from_secs(60), |v| v == 1.0);
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
    app.wait_metric(MISSING, Duration::from_secs(60), |v| v == 1.0);
    app.wait_log_lines(WAITING, 1, Duration::from_secs(60));

    let said_waiting = app.log_text().matches(WAITING).count();
    // SIGTERM; `stop` asserts a clean exit, and fails the test with the
    // process's threads if it has not exited 60 s on.
    let log = app.stop();
    assert!(
        log.contains("Stopping before the source topics exist."),
        "{log}"
    );
    // The wait looks for the signal every 100 ms and says it waits every
    // 10 s: stopped by the signal, it says so once more at most (a round
    // under way as the signal came), never a round later.
    let said_after = log.matches(WAITING).count() - said_waiting;
    assert!(
        said_after <= 1,
        "it said it waited {said_after} times after the signal; log:\n{log}"
    );
    // It never got as far as creating the topics it owns.
    let existing = topics();
    assert!(!existing.contains(&names.folded), "{existing:?}");
    assert!(!existing.contains(&names.dlq), "{existing:?}");
}

/// `run` with `config` against `bootstrap`, which must fail at startup:
/// its log, once it has ended by itself with a failure, without a panic
/// and without one round of startup's retries.
fn failed_startup(config: &AppConfig, bootstrap: &str, dir: &Path) -> String {
    let app = App::start_on(bootstrap, config, dir);
    let (status, log) = app.wait_exit(ENDS_BY_ITSELF_WITHIN);
    assert!(!status.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let retries = log.matches(TRYING_AGAIN).count();
    assert_eq!(retries, 0, "startup retried {retries} times; log:\n{log}");
    log
}

#[test]
fn with_wait_for_sources_off_a_missing_source_topic_fails_fast_and_is_named() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new();
    let config = names.app(
        &dir.path().join("state"),
        &[("STREAMFOLD_WAIT_FOR_SOURCES", "false")],
    );
    let log = failed_startup(&config, &broker().bootstrap, dir.path());
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
}

/// The broker does not answer: `run` gives up once its connection
/// attempts have had their 10 s (`connect::verify`) and names the
/// address. Startup's patient retries are for a broker that answered
/// before: none of them runs.
#[test]
fn an_unreachable_broker_fails_startup_and_says_so() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new();
    let closed = format!("127.0.0.1:{}", free_port());
    let config = names.app(&dir.path().join("state"), &[]);
    let log = failed_startup(&config, &closed, dir.path());
    assert!(
        log.contains(&format!("cannot reach Kafka at {closed}")),
        "{log}"
    );
}

#[test]
fn a_missing_sink_topic_or_unequal_source_partitions_stop_startup_with_the_topics_named() {
    let _serial = serial();
    let dir = temp_dir();
    let names = Names::new();
    create_topic(&names.source, 4);
    let original = std::fs::read_to_string(repo().join("topologies/social-metrics.yaml")).unwrap();

    // The sink does not create its topic: a missing one is an error.
    let no_create = dir.path().join("no-create.yaml");
    std::fs::write(&no_create, original.replace("    create: true\n", "")).unwrap();
    let log = failed_startup(
        &names.app_of(&no_create, &dir.path().join("state-no-create"), &[]),
        &broker().bootstrap,
        dir.path(),
    );
    assert!(
        log.contains(&format!(
            "sink `folded` writes topic `{}`, which does not exist on {}; create it or set `create: true` on the sink",
            names.folded,
            broker().bootstrap
        )),
        "{log}"
    );

    // Two sources with 4 and 2 partitions cannot be co-partitioned.
    let other = unique("reads");
    create_topic(&other, 2);
    let two_sources = dir.path().join("two-sources.yaml");
    let text = original
        .replace(
            "sources:\n",
            &format!("sources:\n  reads:\n    topic: {other}\n"),
        )
        .replace(
            "    input: post_metrics\n",
            "    input: [post_metrics, reads]\n",
        );
    std::fs::write(&two_sources, text).unwrap();
    let log = failed_startup(
        &names.app_of(&two_sources, &dir.path().join("state-two-sources"), &[]),
        &broker().bootstrap,
        dir.path(),
    );
    assert!(
        log.contains("source topics must have the same number of partitions"),
        "{log}"
    );
    assert!(log.contains(&format!("`{}` has 4", names.source)), "{log}");
    assert!(log.contains(&format!("`{other}` has 2")), "{log}");
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
