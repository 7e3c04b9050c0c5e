//! Metrics that tell the truth: every counter exists at 0 from
//! startup for every source, node and sink that can carry it, and after a
//! poison run — with an aborted transaction in the middle — the dead-letter
//! counters equal what the dead-letter topic holds, per location and
//! reason, and what the test produced of each kind.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::registry::SchemaRegistry;
use support::*;

const PARTITIONS: i32 = 2;
const DEAD_LETTERS: &str = "streamfold_node_dead_letters_total";

/// The poison run's topology: Avro keys and a timestamp field at the
/// source (`payments`), a `map` that rejects non-numeric amounts
/// (`valid`), a `filter` that drops negative ones (`positive`), a `fold`
/// grouping by a field (`totals`), and an Avro sink whose schema wants
/// integer amounts (`amounts`).
struct Setup {
    dir: tempfile::TempDir,
    app: String,
    source: String,
    topology: PathBuf,
    _registry: SchemaRegistry,
}

impl Setup {
    fn new(prefix: &str) -> Setup {
        let dir = temp_dir();
        let app = unique(prefix);
        let source = unique("payments");
        create_topic(&source, PARTITIONS);
        let registry = SchemaRegistry::start().unwrap();
        let schema = dir.path().join("amount.avsc");
        std::fs::write(
            &schema,
            json!({
                "type": "record",
                "name": "Amount",
                "fields": [
                    {"name": "account_id", "type": ["null", "string"]},
                    {"name": "amount", "type": "long"},
                    {"name": "ts", "type": "long"},
                ]
            })
            .to_string(),
        )
        .unwrap();
        let topology = dir.path().join("topology.yaml");
        std::fs::write(
            &topology,
            format!(
                "name: {app}
kafka: {{ bootstrap_servers: 'unused:9092' }}
schema_registry: {{ url: '{registry}' }}
processing: {{ commit_interval: 100ms }}
sources:
  payments:
    topic: {source}
    key_format: avro
    timestamp: /ts
nodes:
  valid:
    type: map
    input: payments
    expression: '{{account_id, amount: (.amount + 0), ts}}'
  positive:
    type: filter
    input: valid
    condition: '.amount >= 0'
  totals:
    type: fold
    input: positive
    key_by: /account_id
    fields:
      amount: {{ rule: sum, from: /amount }}
    quiet_for: 1h
sinks:
  totals_out: {{ topic: {app}-totals, input: totals, create: true }}
  amounts:
    topic: {app}-amounts
    input: positive
    create: true
    format: avro
    schema: {schema}
dead_letter: {{ topic: {app}-dlq }}
",
                registry = registry.url(),
                schema = schema.display(),
            ),
        )
        .unwrap();
        Setup {
            dir,
            app,
            source,
            topology,
            _registry: registry,
        }
    }

    fn start(&self, args: &[String]) -> App {
        let app = App::start(
            &AppConfig {
                topology: self.topology.clone(),
                instance: "a".into(),
                state_dir: self.dir.path().join("state"),
                env: Vec::new(),
                txn_header: false,
                args: args.to_vec(),
            },
            self.dir.path(),
        );
        app.wait_metric(
            "streamfold_runtime_tasks_running",
            Duration::from_secs(120),
            |n| n == f64::from(PARTITIONS),
        );
        app
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Node counters of the topology and the nodes that carry each: only the
/// counters of a node's kind.
const NODE_COUNTERS: &[(&str, &[&str])] = &[
    (
        "streamfold_node_records_in_total",
        &["valid", "positive", "totals"],
    ),
    (
        "streamfold_node_records_out_total",
        &["valid", "positive", "totals"],
    ),
    (
        "streamfold_node_dropped_records_total",
        &["valid", "positive"],
    ),
    ("streamfold_node_repartition_duplicates_total", &["totals"]),
    ("streamfold_map_empty_results_total", &["valid"]),
    ("streamfold_filter_rejected_records_total", &["positive"]),
    ("streamfold_fold_eligible_events_total", &["totals"]),
    ("streamfold_fold_folded_events_total", &["totals"]),
];

/// Folds closed, one series per `cause`, for the fold nodes only.
const FOLD_CLOSED: &str = "streamfold_fold_closed_total";
const FOLD_CLOSE_CAUSES: [&str; 4] = ["quiet", "max_wait", "max_events", "max_bytes"];

/// Counters of node kinds this topology does not have.
const ABSENT_COUNTERS: &[&str] = &[
    "streamfold_dedup_duplicates_total",
    "streamfold_dedup_redeliveries_total",
    "streamfold_dedup_expired_ids_total",
    "streamfold_ordered_stale_updates_total",
    "streamfold_projection_duplicate_events_total",
    "streamfold_projection_refolds_total",
    "streamfold_projection_unknown_events_total",
    "streamfold_rollup_duplicate_events_total",
    "streamfold_rollup_late_events_total",
    "streamfold_rollup_rollups_total",
    "streamfold_rollup_unknown_counter_reads_total",
    "streamfold_route_unmatched_records_total",
];

/// Every (location, reason) a dead letter of this topology can have: the
/// source (undecodable key or value, no value, no timestamp, a registry
/// that did not answer), each node (a record it rejected; a missing
/// `key_by` field or an unreadable repartition record for `totals`), the
/// Avro sink (a value its schema does not fit), and every sink, repartition
/// node and store (a record too large for its topic).
const DEAD_LETTER_LABELS: &[(&str, &str)] = &[
    ("payments", "undecodable_value"),
    ("payments", "undecodable_key"),
    ("payments", "missing_value"),
    ("payments", "bad_timestamp"),
    ("payments", "external_failure"),
    ("valid", "rejected"),
    ("positive", "rejected"),
    ("totals", "rejected"),
    ("totals", "missing_key_field"),
    ("totals", "undecodable_value"),
    ("totals", "record_too_large"),
    ("totals_out", "record_too_large"),
    ("amounts", "unencodable"),
    ("amounts", "record_too_large"),
    ("totals-open", "record_too_large"),
    ("totals-timers", "record_too_large"),
    ("totals-repartition-seen", "record_too_large"),
];

/// Series exported twice with the same labels (a counter registered under
/// one label order and incremented under another would be).
fn duplicate_series(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
        .filter_map(|series| {
            let name = series.split('{').next().unwrap_or_default();
            let labels = series_labels(series);
            (!seen.insert((name.to_string(), labels))).then(|| series.to_string())
        })
        .collect()
}

fn series_labels(series: &str) -> BTreeMap<String, String> {
    let name = series.split('{').next().unwrap_or_default();
    support::series(&format!("{series} 0"), name)
        .into_iter()
        .next()
        .map(|(l, _)| l)
        .unwrap_or_default()
}

/// The steps of a commit `streamfold_commit_phase_duration_seconds` times.
const COMMIT_PHASES: [&str; 5] = ["changelog", "flush", "offsets", "commit", "apply"];
const PHASE_COUNT: &str = "streamfold_commit_phase_duration_seconds_count";
/// What each task processed, and its batches timed.
const TASK_PROCESSED: &str = "streamfold_task_records_processed_total";
const TASK_BATCHES_TIMED: &str = "streamfold_task_process_duration_seconds_count";
/// The stores of the topology (the fold's) and the figures of each.
const STORES: [&str; 3] = ["totals-open", "totals-timers", "totals-repartition-seen"];
const STORE_GAUGES: [&str; 4] = [
    "streamfold_state_memtable_bytes",
    "streamfold_state_sst_bytes",
    "streamfold_state_pending_compaction_bytes",
    "streamfold_state_estimated_keys",
];
const REBALANCE_COUNT: &str = "streamfold_runtime_rebalance_duration_seconds_count";
const CALLBACK_COUNT: &str = "streamfold_runtime_rebalance_callback_duration_seconds_count";
const E2E_COUNT: &str = "streamfold_sink_record_e2e_latency_seconds_count";

/// The value of the series `name` with exactly `pairs` as labels; fails
/// the test when it is not exported.
fn metric_value(text: &str, name: &str, pairs: &[(&str, &str)]) -> f64 {
    let wanted = labels(pairs);
    series(text, name)
        .into_iter()
        .find(|(l, _)| *l == wanted)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("{name}{wanted:?} is not exported"))
}

/// Checks that `name{labels}` is exported (with `want`, when given).
fn expect(
    text: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    want: Option<f64>,
    problems: &mut Vec<String>,
) {
    let found = series(text, name)
        .into_iter()
        .find(|(l, _)| l == labels)
        .map(|(_, v)| v);
    match (found, want) {
        (None, _) => problems.push(format!("missing: {name}{labels:?}")),
        (Some(v), Some(w)) if v != w => problems.push(format!("{name}{labels:?} = {v}, not {w}")),
        _ => {}
    }
}

/// A dashboard must tell zero from not running.
/// Before any input, every counter is exported at 0 for every location
/// that can carry it, and node counters only for nodes of the kind that
/// has them.
#[test]
fn every_counter_is_exported_at_zero_before_any_input() {
    let _serial = serial();
    let setup = Setup::new("sf-zero");
    let app = setup.start(&[]);
    // Per-task gauges appear once tasks run, at the next metrics round.
    app.wait_metric(
        "streamfold_fold_open_folds",
        Duration::from_secs(30),
        |_| true,
    );
    let text = app.metrics_text();
    let topology = setup.app.as_str();
    let mut problems = Vec::new();

    for (name, nodes) in NODE_COUNTERS {
        for node in *nodes {
            let l = labels(&[("topology", topology), ("node", node)]);
            expect(&text, name, &l, Some(0.0), &mut problems);
        }
        let exported: BTreeSet<String> = series(&text, name)
            .into_iter()
            .filter_map(|(l, _)| l.get("node").cloned())
            .collect();
        let wanted: BTreeSet<String> = nodes.iter().map(|n| n.to_string()).collect();
        if exported != wanted {
            problems.push(format!(
                "{name} is exported for {exported:?}, not {wanted:?}"
            ));
        }
    }
    for cause in FOLD_CLOSE_CAUSES {
        let l = labels(&[("topology", topology), ("node", "totals"), ("cause", cause)]);
        expect(&text, FOLD_CLOSED, &l, Some(0.0), &mut problems);
    }
    let exported: BTreeSet<(String, String)> = series(&text, FOLD_CLOSED)
        .into_iter()
        .map(|(l, _)| {
            (
                l.get("node").cloned().unwrap_or_default(),
                l.get("cause").cloned().unwrap_or_default(),
            )
        })
        .collect();
    let wanted: BTreeSet<(String, String)> = FOLD_CLOSE_CAUSES
        .iter()
        .map(|c| ("totals".to_string(), c.to_string()))
        .collect();
    if exported != wanted {
        problems.push(format!(
            "{FOLD_CLOSED} is exported for {exported:?}, not {wanted:?}"
        ));
    }
    for name in ABSENT_COUNTERS {
        if !series(&text, name).is_empty() {
            problems.push(format!("{name} is exported, but no node has it"));
        }
    }
    for (node, reason) in DEAD_LETTER_LABELS {
        let l = labels(&[("topology", topology), ("node", node), ("reason", reason)]);
        expect(&text, DEAD_LETTERS, &l, Some(0.0), &mut problems);
    }
    let exported: BTreeSet<(String, String)> = series(&text, DEAD_LETTERS)
        .into_iter()
        .map(|(l, _)| {
            (
                l.get("node").cloned().unwrap_or_default(),
                l.get("reason").cloned().unwrap_or_default(),
            )
        })
        .collect();
    let wanted: BTreeSet<(String, String)> = DEAD_LETTER_LABELS
        .iter()
        .map(|(n, r)| (n.to_string(), r.to_string()))
        .collect();
    if exported != wanted {
        problems.push(format!(
            "{DEAD_LETTERS} is exported for {exported:?}, not {wanted:?}"
        ));
    }

    let app_only = labels(&[("topology", topology)]);
    for name in [
        "streamfold_transactions_committed_total",
        "streamfold_transactions_aborted_total",
        "streamfold_commit_duration_seconds_count",
        "streamfold_transaction_abort_duration_seconds_count",
    ] {
        expect(&text, name, &app_only, Some(0.0), &mut problems);
    }
    for phase in COMMIT_PHASES {
        let l = labels(&[("topology", topology), ("phase", phase)]);
        expect(&text, PHASE_COUNT, &l, Some(0.0), &mut problems);
    }
    for name in [
        "streamfold_runtime_records_consumed_total",
        "streamfold_runtime_records_committed_total",
        "streamfold_runtime_missing_source_topics",
    ] {
        expect(&text, name, &app_only, Some(0.0), &mut problems);
    }
    expect(
        &text,
        "streamfold_runtime_tasks_running",
        &app_only,
        Some(f64::from(PARTITIONS)),
        &mut problems,
    );
    // The task lifecycle: each partition's task opened once, none closed.
    for (name, want) in [
        (
            "streamfold_runtime_tasks_created_total",
            f64::from(PARTITIONS),
        ),
        ("streamfold_runtime_tasks_closed_total", 0.0),
        ("streamfold_runtime_tasks_restoring", 0.0),
    ] {
        expect(&text, name, &app_only, Some(want), &mut problems);
    }
    // Each task's processing, from startup, for every partition.
    for partition in 0..PARTITIONS {
        let l = labels(&[
            ("topology", topology),
            ("partition", &partition.to_string()),
        ]);
        expect(&text, TASK_PROCESSED, &l, Some(0.0), &mut problems);
        expect(&text, TASK_BATCHES_TIMED, &l, Some(0.0), &mut problems);
    }
    // The loop's latencies: each a histogram of its own from startup.
    for name in [
        "streamfold_runtime_poll_duration_seconds_count",
        "streamfold_runtime_batch_duration_seconds_count",
        "streamfold_runtime_punctuate_duration_seconds_count",
    ] {
        expect(&text, name, &app_only, None, &mut problems);
    }
    // The instance polls while it waits for input.
    let polls = series(&text, "streamfold_runtime_poll_duration_seconds_count");
    if !polls.iter().any(|(_, v)| *v > 0.0) {
        problems.push(format!("no poll was timed: {polls:?}"));
    }
    // One instance: it joined (and was assigned), nothing was taken away.
    expect(&text, REBALANCE_COUNT, &app_only, None, &mut problems);
    for (event, want) in [
        ("assigned", None),
        ("revoked", Some(0.0)),
        ("lost", Some(0.0)),
    ] {
        let l = labels(&[("topology", topology), ("event", event)]);
        expect(&text, CALLBACK_COUNT, &l, want, &mut problems);
    }
    for sink in ["totals_out", "amounts"] {
        let l = labels(&[("topology", topology), ("node", sink)]);
        expect(&text, E2E_COUNT, &l, Some(0.0), &mut problems);
    }
    for partition in 0..PARTITIONS {
        let l = labels(&[
            ("topology", topology),
            ("partition", &partition.to_string()),
        ]);
        expect(
            &text,
            "streamfold_restore_records_restored_total",
            &l,
            Some(0.0),
            &mut problems,
        );
    }
    // Each task's database reports its stores' storage and its block
    // cache lookups once the task runs.
    for partition in 0..PARTITIONS {
        let partition = partition.to_string();
        for store in STORES {
            let l = labels(&[
                ("topology", topology),
                ("store", store),
                ("partition", &partition),
            ]);
            for name in STORE_GAUGES {
                expect(&text, name, &l, None, &mut problems);
            }
        }
        let l = labels(&[("topology", topology), ("partition", &partition)]);
        for name in [
            "streamfold_state_block_cache_hits_total",
            "streamfold_state_block_cache_misses_total",
        ] {
            expect(&text, name, &l, None, &mut problems);
        }
    }
    let stores: BTreeSet<String> = series(&text, STORE_GAUGES[0])
        .into_iter()
        .filter_map(|(l, _)| l.get("store").cloned())
        .collect();
    if stores != STORES.map(String::from).into() {
        problems.push(format!(
            "{} is exported for {stores:?}, not {STORES:?}",
            STORE_GAUGES[0]
        ));
    }
    // Gauges of a fold are the fold's only.
    let gauge_nodes: BTreeSet<String> = series(&text, "streamfold_fold_open_folds")
        .into_iter()
        .filter_map(|(l, _)| l.get("node").cloned())
        .collect();
    if gauge_nodes != BTreeSet::from(["totals".to_string()]) {
        problems.push(format!(
            "streamfold_fold_open_folds is exported for {gauge_nodes:?}, not the fold only"
        ));
    }
    problems.extend(
        duplicate_series(&text)
            .into_iter()
            .map(|s| format!("exported twice: {s}")),
    );
    app.stop();
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n\nscrape:\n{text}",
        problems.len(),
        problems.join("\n")
    );
}

/// The kinds of record the poison run produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Good,
    /// Bytes that are not JSON.
    UndecodableValue,
    /// A key that is not Confluent Avro.
    BadKey,
    /// No `ts` field.
    NoTimestamp,
    /// An amount `valid`'s expression cannot add to.
    TextAmount,
    /// No `account_id`: `totals` cannot group it.
    NoAccount,
    /// An amount the Avro sink's `long` cannot hold.
    FractionalAmount,
    /// Dropped by `positive`.
    Negative,
}

const MIX: &[(Kind, usize)] = &[
    (Kind::Good, 1700),
    (Kind::UndecodableValue, 220),
    (Kind::BadKey, 180),
    (Kind::NoTimestamp, 150),
    (Kind::TextAmount, 250),
    (Kind::NoAccount, 190),
    (Kind::FractionalAmount, 160),
    (Kind::Negative, 150),
];

impl Kind {
    /// Where its dead letter is written and why, if it has one.
    fn dead_letter(self) -> Option<(&'static str, &'static str)> {
        match self {
            Kind::Good | Kind::Negative => None,
            Kind::UndecodableValue => Some(("payments", "undecodable_value")),
            Kind::BadKey => Some(("payments", "undecodable_key")),
            Kind::NoTimestamp => Some(("payments", "bad_timestamp")),
            Kind::TextAmount => Some(("valid", "rejected")),
            Kind::NoAccount => Some(("totals", "missing_key_field")),
            Kind::FractionalAmount => Some(("amounts", "unencodable")),
        }
    }
}

/// Records the test writes straight to `totals`' repartition topic, as a
/// foreign producer (or damage) would: `totals` cannot read them back.
const REPARTITION_GARBAGE: u64 = 7;

fn count(kind: Kind) -> u64 {
    MIX.iter()
        .find(|(k, _)| *k == kind)
        .map_or(0, |(_, n)| *n as u64)
}

/// The mix, shuffled (deterministically) so every transaction carries
/// some of each.
fn poison() -> Vec<Kind> {
    let mut kinds: Vec<Kind> = MIX
        .iter()
        .flat_map(|(kind, n)| std::iter::repeat_n(*kind, *n))
        .collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..kinds.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        kinds.swap(i, (state % (i as u64 + 1)) as usize);
    }
    kinds
}

fn dead_letter_counts(text: &str) -> BTreeMap<(String, String), u64> {
    series(text, DEAD_LETTERS)
        .into_iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(l, v)| {
            let at = |name: &str| l.get(name).cloned().unwrap_or_else(|| "<none>".into());
            ((at("node"), at("reason")), v as u64)
        })
        .collect()
}

fn node_metric(text: &str, name: &str, topology: &str, node: &str) -> Option<f64> {
    let l = labels(&[("topology", topology), ("node", node)]);
    series(text, name)
        .into_iter()
        .find(|(found, _)| *found == l)
        .map(|(_, v)| v)
}

/// After a poison run (undecodable bytes, bad
/// keys, records a node rejects, values a sink cannot write, unreadable
/// repartition records, drops) with an aborted transaction in the middle, the dead-letter counters equal
/// the committed contents of the dead-letter topic per location and
/// reason, and the number the test produced of each kind.
#[test]
fn dead_letter_counters_equal_the_dead_letter_topic_after_a_poison_run() {
    let _serial = serial();
    let setup = Setup::new("sf-poison");
    let journal = setup.dir.path().join("journal");
    let app = setup.start(&[
        "--txn-journal".into(),
        journal.display().to_string(),
        "--inject-fault".into(),
        "sent:abort@1".into(),
    ]);

    let producer = TestProducer::new();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for (i, kind) in poison().into_iter().enumerate() {
        let account = format!("acct-{}", i % 40);
        let value = |amount: Value| json!({"account_id": account, "amount": amount, "ts": ts});
        let (key, value): (Option<&[u8]>, Vec<u8>) = match kind {
            Kind::Good => (None, value(json!(i)).to_string().into_bytes()),
            Kind::UndecodableValue => (None, b"{not json".to_vec()),
            Kind::BadKey => (
                Some(b"plain-text-key"),
                value(json!(i)).to_string().into_bytes(),
            ),
            Kind::NoTimestamp => (
                None,
                json!({"account_id": account, "amount": 1})
                    .to_string()
                    .into_bytes(),
            ),
            Kind::TextAmount => (None, value(json!("ten")).to_string().into_bytes()),
            Kind::NoAccount => (
                None,
                json!({"amount": 3, "ts": ts}).to_string().into_bytes(),
            ),
            Kind::FractionalAmount => (None, value(json!(2.5)).to_string().into_bytes()),
            Kind::Negative => (None, value(json!(-4)).to_string().into_bytes()),
        };
        producer.send(&setup.source, key, &value, &[]);
    }
    let repartition = format!("{}-totals-repartition", setup.app);
    for i in 0..REPARTITION_GARBAGE {
        producer.send(
            &repartition,
            Some(format!("g{i}").as_bytes()),
            b"\x00garbage",
            &[],
        );
    }
    producer.flush();
    let end = producer.ends(&setup.source, PARTITIONS);
    wait_committed_to(
        &app,
        &setup.app,
        &setup.source,
        &end,
        Duration::from_secs(180),
    );
    // What reaches the fold goes through its repartition topic, after the
    // source offsets commit.
    let reaching_fold = count(Kind::Good) + count(Kind::FractionalAmount);
    app.wait_metric(
        "streamfold_fold_eligible_events_total",
        Duration::from_secs(120),
        |n| n == reaching_fold as f64,
    );

    let mut produced: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (kind, n) in MIX {
        if let Some((node, reason)) = kind.dead_letter() {
            *produced
                .entry((node.to_string(), reason.to_string()))
                .or_default() += *n as u64;
        }
    }
    produced.insert(
        ("totals".into(), "undecodable_value".into()),
        REPARTITION_GARBAGE,
    );
    // Counters are published as of commits, once a second.
    let deadline = Instant::now() + Duration::from_secs(60);
    let counted = loop {
        let counted = dead_letter_counts(&app.metrics_text());
        if counted == produced || Instant::now() > deadline {
            break counted;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = app.metrics_text();
    let topology = setup.app.as_str();
    let app_only = [("topology", topology)];
    for (l, _) in series(&text, DEAD_LETTERS) {
        assert_eq!(l.get("topology").map(String::as_str), Some(topology));
    }
    assert_eq!(duplicate_series(&text), Vec::<String>::new());
    let drops = [
        ("streamfold_filter_rejected_records_total", "positive"),
        ("streamfold_node_dropped_records_total", "positive"),
        ("streamfold_node_dropped_records_total", "valid"),
        ("streamfold_node_records_in_total", "valid"),
        ("streamfold_node_records_out_total", "valid"),
        ("streamfold_node_records_in_total", "totals"),
    ]
    .map(|(name, node)| node_metric(&text, name, topology, node));
    // Each sink times the records handed to it, and only those: the
    // amounts of good records (again after the abort), and no fold closed.
    let sink_timed =
        |sink: &str| metric_value(&text, E2E_COUNT, &[("topology", topology), ("node", sink)]);
    let (amounts_timed, totals_timed) = (sink_timed("amounts"), sink_timed("totals_out"));
    // The open folds are in the fold's store, in its memtables so far.
    for gauge in [
        "streamfold_state_estimated_keys",
        "streamfold_state_memtable_bytes",
    ] {
        app.wait_metric(
            &format!(r#"{gauge}{{store="totals-open"}}"#),
            Duration::from_secs(60),
            |n| n > 0.0,
        );
    }
    // Each task counts the records it processed and times its share of
    // each batch: together, every record read (the source's, those that
    // took the hop through the repartition topic, the aborted batch's
    // again), which the instance counts too.
    let per_task = |text: &str, name: &str| -> Vec<f64> {
        (0..PARTITIONS)
            .map(|p| {
                let partition = p.to_string();
                metric_value(
                    text,
                    name,
                    &[("topology", topology), ("partition", &partition)],
                )
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (processed, consumed, timed) = loop {
        let text = app.metrics_text();
        let processed = per_task(&text, TASK_PROCESSED);
        let consumed = metric_value(
            &text,
            "streamfold_runtime_records_consumed_total",
            &app_only,
        );
        if processed.iter().sum::<f64>() == consumed || Instant::now() > deadline {
            break (processed, consumed, per_task(&text, TASK_BATCHES_TIMED));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        processed.iter().sum::<f64>(),
        consumed,
        "records processed per task {processed:?}, records consumed {consumed}"
    );
    let written = MIX.iter().map(|(_, n)| *n as u64).sum::<u64>() + REPARTITION_GARBAGE;
    assert!(
        consumed > written as f64,
        "{consumed} consumed: the source's {written} and the garbage, and some through the repartition topic"
    );
    for (partition, (processed, timed)) in processed.iter().zip(&timed).enumerate() {
        assert!(
            *processed > 0.0 && *timed > 0.0,
            "task {partition}: {processed} records processed in {timed} timed batches"
        );
    }
    let log = app.stop();
    assert!(
        amounts_timed >= count(Kind::Good) as f64,
        "{amounts_timed} amounts timed for {} good records",
        count(Kind::Good)
    );
    assert_eq!(totals_timed, 0.0, "no fold closed within its hour");

    // Every commit times each of its phases (the aborted one, those it
    // reached). The scrape may fall inside a commit: the transaction is
    // counted once Kafka committed it, before its state is applied and its
    // whole duration recorded.
    let committed = metric_value(&text, "streamfold_transactions_committed_total", &app_only);
    assert!(committed >= 1.0, "no commit; log:\n{log}");
    let durations = metric_value(&text, "streamfold_commit_duration_seconds_count", &app_only);
    assert!(
        durations == committed || durations == committed - 1.0,
        "{durations} commit durations for {committed} commits"
    );
    for phase in COMMIT_PHASES {
        let timed = metric_value(
            &text,
            PHASE_COUNT,
            &[("topology", setup.app.as_str()), ("phase", phase)],
        );
        // Applying comes after the count.
        let lag = if phase == "apply" { 1.0 } else { 0.0 };
        assert!(
            timed >= committed - lag,
            "phase {phase} timed {timed} times in {committed} commits"
        );
    }
    let phases: BTreeSet<String> = series(&text, PHASE_COUNT)
        .into_iter()
        .filter_map(|(l, _)| l.get("phase").cloned())
        .collect();
    assert_eq!(phases, COMMIT_PHASES.map(String::from).into());

    let journal = TxnJournal::read(&journal);
    assert!(!journal.aborted.is_empty(), "the fault fired; log:\n{log}");
    let mut in_topic: BTreeMap<(String, String), u64> = BTreeMap::new();
    for letter in read_to_end(&format!("{}-dlq", setup.app), Duration::from_secs(60)) {
        let label = letter.header("streamfold.txn").unwrap_or_default();
        assert!(journal.begun.contains(label), "{letter:?}");
        // Only committed letters count (read_committed shows no others).
        if !journal.committed.contains(label) {
            continue;
        }
        let at = |name: &str| letter.header(name).unwrap_or("<none>").to_string();
        *in_topic
            .entry((at("streamfold.dlq.node"), at("streamfold.dlq.reason_code")))
            .or_default() += 1;
    }
    assert_eq!(
        counted, in_topic,
        "dead-letter counters (left) against the committed dead-letter topic (right), by (node, reason)"
    );
    assert_eq!(
        in_topic, produced,
        "the committed dead-letter topic (left) against what the test produced (right)"
    );

    // Every other drop is counted where it happened.
    let total: u64 = MIX.iter().map(|(_, n)| *n as u64).sum();
    let read_by_map =
        total - count(Kind::UndecodableValue) - count(Kind::BadKey) - count(Kind::NoTimestamp);
    let expected = [
        Some(count(Kind::Negative) as f64),
        Some(count(Kind::Negative) as f64),
        Some(0.0),
        Some(read_by_map as f64),
        Some((read_by_map - count(Kind::TextAmount)) as f64),
        Some(reaching_fold as f64),
    ];
    assert_eq!(
        drops, expected,
        "filter rejected, dropped (positive, valid), records in/out (valid), records in (totals)"
    );
}

/// The tests' reading of a metric fails on a series that is not there,
/// rather than reading it as 0: a check that a counter is zero must fail
/// when the counter is missing.
#[test]
fn a_missing_series_fails_the_read_instead_of_reading_as_zero() {
    let text = "# TYPE streamfold_transactions_aborted_total counter\n\
                streamfold_transactions_aborted_total 0\n\
                streamfold_node_dropped_records_total{node=\"a\"} 2\n";
    assert_eq!(
        parse_metric(text, "streamfold_transactions_aborted_total"),
        0.0
    );
    assert_eq!(
        parse_metric(text, r#"streamfold_node_dropped_records_total{node="a"}"#),
        2.0
    );
    for missing in [
        "streamfold_transactions_committed_total",
        r#"streamfold_node_dropped_records_total{node="b"}"#,
    ] {
        let read = std::panic::catch_unwind(|| parse_metric(text, missing));
        assert!(read.is_err(), "{missing} read as {read:?}");
    }
    let endpoint_down =
        std::panic::catch_unwind(|| parse_metric("", "streamfold_transactions_aborted_total"));
    assert!(
        endpoint_down.is_err(),
        "an empty scrape read as {endpoint_down:?}"
    );
}
