//! The Prometheus recorder behind `--metrics-addr`, and the series that
//! exist from startup.
//!
//! A counter that appears only once it moves cannot be told from a process
//! that is not running (or a node that does not exist), and a rate over it
//! misses its first increase. So `run` registers, before any partition is
//! assigned, every counter at 0 for every label set the topology can give
//! it ([`register_topology`], then [`register_partitions`] once the
//! partition count is known). Per-task gauges are the exception: they
//! appear when their task runs, because a restoring task's 0 would be a
//! lie.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use crate::telemetry::{self, DeadLetterReason, NodeCounter};
use crate::topology::Topology;
use crate::topology::model::{Format, KeyFormat};

/// Commit latencies worth telling apart, in seconds.
const COMMIT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Batch and timer-round latencies worth telling apart, in seconds: a
/// batch takes from tens of microseconds to, with a large backlog, a
/// second or more.
const LOOP_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Rebalance latencies worth telling apart, in seconds: a callback takes
/// milliseconds (opening tasks) to a commit's seconds (closing them); a
/// whole rebalance lasts up to a session timeout or more.
const REBALANCE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// End-to-end latencies worth telling apart, in seconds: from a pass-through
/// node's milliseconds to the minutes or hours of an output stamped with
/// an older time (a window's result carries its latest record's).
const E2E_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
];

/// Installs the Prometheus recorder and serves it, with the health
/// endpoints, on `addr` ([`super::ops_server`]); returns the bound address.
pub fn install(addr: SocketAddr) -> Result<SocketAddr, String> {
    let buckets = [
        (telemetry::COMMIT_DURATION, COMMIT_BUCKETS),
        (telemetry::COMMIT_PHASE_DURATION, COMMIT_BUCKETS),
        (telemetry::BATCH_DURATION, LOOP_BUCKETS),
        (telemetry::TASK_PROCESS_DURATION, LOOP_BUCKETS),
        (telemetry::PUNCTUATE_DURATION, LOOP_BUCKETS),
        (telemetry::POLL_DURATION, LOOP_BUCKETS),
        (telemetry::REBALANCE_CALLBACK_DURATION, REBALANCE_BUCKETS),
        (telemetry::REBALANCE_DURATION, REBALANCE_BUCKETS),
        (telemetry::SINK_E2E_LATENCY, E2E_BUCKETS),
        (telemetry::QUERY_DURATION, LOOP_BUCKETS),
    ];
    let recorder = buckets
        .into_iter()
        .try_fold(PrometheusBuilder::new(), |builder, (name, bounds)| {
            builder.set_buckets_for_metric(Matcher::Full(name.to_string()), bounds)
        })
        .map_err(|e| e.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    let bound = super::ops_server::serve(addr, handle).map_err(|e| e.to_string())?;
    ::metrics::set_global_recorder(recorder)
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    // Their help texts; their values are read at each scrape
    // (`ops_server`).
    metrics_process::Collector::default().describe();
    Ok(bound)
}

/// One counter of a source, node or sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Counted {
    /// A node counter (`streamfold_node_records_in_total`, ...).
    Node(NodeCounter),
    /// `streamfold_node_dead_letters_total` for a reason.
    DeadLetters(DeadLetterReason),
}

/// Every counter `topology` can move, with the source, node or sink it is
/// labelled with: records in and out of every node and the counters of its
/// kind, and each dead-letter reason where it can happen.
pub(crate) fn counters_of(topology: &Topology) -> Vec<(&str, Counted)> {
    use Counted::{DeadLetters, Node};
    let mut out = Vec::new();
    for node in &topology.nodes {
        let name = node.name.as_str();
        out.push((name, Node(NodeCounter::RecordsIn)));
        out.push((name, Node(NodeCounter::RecordsOut)));
        out.extend(node.kind.counters().iter().map(|&c| (name, Node(c))));
        // Any operator may reject a record; none reports external
        // failures yet (when one does, its counter appears on first use).
        out.push((name, DeadLetters(DeadLetterReason::Rejected)));
        if node.common.key_by.is_some() {
            out.push((name, DeadLetters(DeadLetterReason::MissingKeyField)));
        }
        if node.repartition_topic.is_some() {
            out.push((name, Node(NodeCounter::RepartitionDuplicates)));
            out.push((name, DeadLetters(DeadLetterReason::UndecodableValue)));
            out.push((name, DeadLetters(DeadLetterReason::TooLarge)));
        }
    }
    for source in topology.group_sources() {
        let name = source.name.as_str();
        let config = &source.config;
        let avro_key = config.key_format == KeyFormat::Avro;
        let mut reasons = vec![
            DeadLetterReason::UndecodableValue,
            DeadLetterReason::MissingValue,
        ];
        // Other key formats pass the bytes through.
        if avro_key {
            reasons.push(DeadLetterReason::UndecodableKey);
        }
        if config.timestamp.is_some() {
            reasons.push(DeadLetterReason::BadTimestamp);
        }
        // Only Avro asks the outside world (the schema registry).
        if avro_key || config.format == Format::Avro {
            reasons.push(DeadLetterReason::ExternalFailure);
        }
        out.extend(reasons.into_iter().map(|r| (name, DeadLetters(r))));
    }
    for sink in &topology.sinks {
        out.push((sink.name.as_str(), DeadLetters(DeadLetterReason::TooLarge)));
        // JSON values and text keys always encode; Avro ones must fit the
        // schema.
        if sink.config.format == Format::Avro || sink.config.key_format == KeyFormat::Avro {
            out.push((
                sink.name.as_str(),
                DeadLetters(DeadLetterReason::Unencodable),
            ));
        }
    }
    // A state value too large for its changelog is dropped to the
    // dead-letter topic under its store's name.
    for store in topology.stores() {
        out.push((store.name.as_str(), DeadLetters(DeadLetterReason::TooLarge)));
    }
    out
}

/// Registers at 0 every counter of `topology` ([`counters_of`]) and the
/// instance's runtime counters, histograms and the running-tasks gauge.
/// Call it once the topology is compiled; metric calls without an
/// installed exporter do nothing.
pub fn register_topology(topology: &Topology) {
    let app = topology.name.as_str();
    for (name, counted) in counters_of(topology) {
        match counted {
            Counted::Node(counter) => telemetry::node_counter(app, name, counter).increment(0),
            Counted::DeadLetters(reason) => {
                telemetry::dead_letter_counter(app, name, reason).increment(0);
            }
        }
    }
    for source in topology.sources.iter().filter(|s| s.global()) {
        ::metrics::counter!(
            telemetry::GLOBAL_TABLE_RECORDS,
            "topology" => app.to_string(),
            "table" => source.name.clone()
        )
        .increment(0);
        for reason in [
            DeadLetterReason::UndecodableValue,
            DeadLetterReason::UndecodableKey,
        ] {
            ::metrics::counter!(
                telemetry::GLOBAL_TABLE_SKIPPED,
                "topology" => app.to_string(),
                "table" => source.name.clone(),
                "reason" => reason.code()
            )
            .increment(0);
        }
    }
    // Registered, a histogram shows a count and sum of 0.
    let commits = telemetry::CommitMetrics::new(app);
    commits.committed.increment(0);
    commits.aborted.increment(0);
    let _ = ::metrics::histogram!(telemetry::BATCH_DURATION, "topology" => app.to_string());
    let _ = ::metrics::histogram!(telemetry::PUNCTUATE_DURATION, "topology" => app.to_string());
    let _ = ::metrics::histogram!(telemetry::POLL_DURATION, "topology" => app.to_string());
    ::metrics::counter!(telemetry::RECORDS_CONSUMED, "topology" => app.to_string()).increment(0);
    ::metrics::counter!(telemetry::RECORDS_COMMITTED, "topology" => app.to_string()).increment(0);
    ::metrics::counter!(telemetry::RECORDS_BEHIND, "topology" => app.to_string()).increment(0);
    // An instance-level level: no task runs yet. (The number of missing
    // source topics is set once it is known, by the wait for them.)
    ::metrics::gauge!(telemetry::TASKS_RUNNING, "topology" => app.to_string()).set(0.0);
    ::metrics::gauge!(telemetry::TASKS_RESTORING, "topology" => app.to_string()).set(0.0);
    ::metrics::counter!(telemetry::TASKS_CREATED, "topology" => app.to_string()).increment(0);
    ::metrics::counter!(telemetry::TASKS_CLOSED, "topology" => app.to_string()).increment(0);
    for event in telemetry::REBALANCE_EVENTS {
        ::metrics::counter!(telemetry::REBALANCES, "topology" => app.to_string(), "event" => event)
            .increment(0);
        let _ = ::metrics::histogram!(telemetry::REBALANCE_CALLBACK_DURATION, "topology" => app.to_string(), "event" => event);
    }
    let _ = ::metrics::histogram!(telemetry::REBALANCE_DURATION, "topology" => app.to_string());
    for sink in &topology.sinks {
        let _ = telemetry::sink_latency(app, &sink.name);
    }
    ::metrics::gauge!(telemetry::BUILD_INFO, "topology" => app.to_string(), "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    ::metrics::gauge!(telemetry::STATE_BLOCK_CACHE, "topology" => app.to_string()).set(0.0);
    ::metrics::gauge!(telemetry::STATE_WRITE_BUFFERS, "topology" => app.to_string()).set(0.0);
    ::metrics::gauge!(telemetry::STATE_RECORD_CACHE, "topology" => app.to_string()).set(0.0);
}

/// Registers at 0 the per-partition restore and processing counters of
/// every task the topology can have (partitions `0..partitions` of its
/// sources).
pub(crate) fn register_partitions(topology: &Topology, partitions: i32) {
    for partition in 0..partitions {
        // Registered, a histogram shows a count and sum of 0.
        telemetry::TaskMetrics::new(&topology.name, partition)
            .processed
            .increment(0);
        ::metrics::counter!(telemetry::RESTORE_RECORDS, "topology" => topology.name.clone(), "partition" => partition.to_string())
            .increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPOLOGY: &str = "
name: shop
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  orders: { topic: orders, timestamp: /at }
nodes:
  only_paid:
    type: filter
    input: orders
    condition: '.paid'
  per_customer:
    type: fold
    input: only_paid
    key_by: /customer
    fields: { n: { rule: count } }
    quiet_for: 1m
sinks:
  out: { topic: out, input: per_customer }
";

    fn counted(name: &str) -> Vec<Counted> {
        let topology = crate::topology::load_str("shop.yaml", TOPOLOGY, &|_| None).unwrap();
        let mut found: Vec<Counted> = counters_of(&topology)
            .into_iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, c)| c)
            .collect();
        found.sort();
        found
    }

    #[test]
    fn each_location_carries_the_counters_of_its_kind() {
        use Counted::{DeadLetters, Node};
        assert_eq!(
            counted("only_paid"),
            vec![
                Node(NodeCounter::RecordsIn),
                Node(NodeCounter::RecordsOut),
                Node(NodeCounter::Dropped),
                Node(NodeCounter::FilterRejected),
                DeadLetters(DeadLetterReason::Rejected),
            ]
        );
        let fold = counted("per_customer");
        assert!(fold.contains(&Node(NodeCounter::FoldEligible)));
        assert!(fold.contains(&Node(NodeCounter::RepartitionDuplicates)));
        assert!(fold.contains(&DeadLetters(DeadLetterReason::MissingKeyField)));
        assert!(
            !fold.contains(&Node(NodeCounter::Dropped)),
            "a fold drops nothing"
        );
        assert!(!fold.contains(&Node(NodeCounter::FilterRejected)));
        // A JSON source with a timestamp field; JSON keys pass through.
        assert_eq!(
            counted("orders"),
            vec![
                DeadLetters(DeadLetterReason::UndecodableValue),
                DeadLetters(DeadLetterReason::MissingValue),
                DeadLetters(DeadLetterReason::BadTimestamp),
            ]
        );
        // A JSON sink cannot fail to encode; any record may be too large.
        assert_eq!(
            counted("out"),
            vec![DeadLetters(DeadLetterReason::TooLarge)]
        );
        assert!(fold.contains(&DeadLetters(DeadLetterReason::TooLarge)));
        assert_eq!(
            counted("per_customer-open"),
            vec![DeadLetters(DeadLetterReason::TooLarge)],
            "a state value too large for its changelog"
        );
    }

    /// Every counter an operator can move is exported for some node kind,
    /// so none stays invisible until it moves. The examples hold every
    /// kind.
    #[test]
    fn every_node_counter_belongs_to_some_node() {
        let examples = [
            (
                "social-metrics.yaml",
                include_str!("../../topologies/social-metrics.yaml"),
            ),
            (
                "question-feed.yaml",
                include_str!("../../topologies/question-feed.yaml"),
            ),
            (
                "distributed-counter.yaml",
                include_str!("../../topologies/distributed-counter.yaml"),
            ),
            (
                "partitioned-processing.yaml",
                include_str!("../../topologies/partitioned-processing.yaml"),
            ),
            (
                "page-views.yaml",
                include_str!("../../topologies/page-views.yaml"),
            ),
            (
                "orders-enriched.yaml",
                include_str!("../../topologies/orders-enriched.yaml"),
            ),
        ];
        let mut types = std::collections::BTreeSet::new();
        let mut exported = std::collections::BTreeSet::new();
        for (file, text) in examples {
            let topology = crate::topology::load_str(file, text, &|_| None).unwrap();
            types.extend(topology.nodes.iter().map(|n| n.kind.type_name()));
            exported.extend(counters_of(&topology).into_iter().map(|(_, c)| c));
        }
        assert_eq!(types.len(), crate::operators::NodeKind::TYPES.len());
        for &counter in NodeCounter::ALL {
            assert!(
                exported.contains(&Counted::Node(counter)),
                "{counter:?} is exported for no node"
            );
        }
    }

    /// What the test topology registers at startup (over two partitions),
    /// rendered.
    fn rendered_at_startup() -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let topology = crate::topology::load_str("shop.yaml", TOPOLOGY, &|_| None).unwrap();
        ::metrics::with_local_recorder(&recorder, || {
            register_topology(&topology);
            register_partitions(&topology, 2);
        });
        handle.render()
    }

    /// The metric names a Prometheus rendering declares a type for.
    fn exported_names(rendered: &str) -> std::collections::BTreeSet<String> {
        rendered
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// The `streamfold_…` names in `text`.
    fn names_in(text: &str) -> std::collections::BTreeSet<String> {
        names_with_prefix(text, "streamfold_")
    }

    /// The metric names in `text` that begin with `prefix`.
    fn names_with_prefix(text: &str, prefix: &str) -> std::collections::BTreeSet<String> {
        let mut names = std::collections::BTreeSet::new();
        let mut rest = text;
        while let Some(at) = rest.find(prefix) {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            names.insert(name);
        }
        names
    }

    /// docs/metrics.md names exactly the metrics the source defines, and
    /// every metric a topology registers at startup is among them: a metric
    /// added without its row, or a row left behind by a removed metric,
    /// fails here.
    #[test]
    fn the_metrics_page_lists_exactly_the_metrics_there_are() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        let page = read("docs/metrics.md");
        // Backquoted names only: prose also says `streamfold_` as a prefix.
        let documented: std::collections::BTreeSet<String> = names_in(&page)
            .into_iter()
            .filter(|n| page.contains(&format!("`{n}`")))
            .collect();
        let defined: std::collections::BTreeSet<String> = names_in(&read("src/telemetry/mod.rs"))
            .into_iter()
            .filter(|n| n.len() > "streamfold_".len())
            .collect();
        let undocumented: Vec<&String> = defined.difference(&documented).collect();
        let unknown: Vec<&String> = documented.difference(&defined).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "defined but not in docs/metrics.md: {undocumented:?}; in docs/metrics.md but not defined: {unknown:?}"
        );

        let exported: std::collections::BTreeSet<String> = exported_names(&rendered_at_startup());
        assert!(
            exported.len() > 20,
            "the recorder saw the registrations: {exported:?}"
        );
        let exported_undocumented: Vec<&String> = exported.difference(&documented).collect();
        assert!(
            exported_undocumented.is_empty(),
            "exported at startup but not in docs/metrics.md: {exported_undocumented:?}"
        );
    }

    /// Every streamfold series exists with the `topology` label, so a
    /// dashboard filtering by topology loses none (the process's own
    /// `process_…` series are the collector's, without it).
    #[test]
    fn every_series_registered_at_startup_carries_the_topology() {
        let rendered = rendered_at_startup();
        let series: Vec<&str> = rendered
            .lines()
            .filter(|line| line.starts_with("streamfold_"))
            .collect();
        assert!(series.len() > 20, "{rendered}");
        let unlabelled: Vec<&&str> = series
            .iter()
            .filter(|line| !line.contains("topology=\"shop\""))
            .collect();
        assert!(unlabelled.is_empty(), "without `topology`: {unlabelled:#?}");
    }

    /// The page's process metrics are exactly those the process collector
    /// exports at a scrape, both ways.
    #[test]
    fn the_metrics_page_lists_exactly_the_process_metrics_a_scrape_exports() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let page = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
        let documented: std::collections::BTreeSet<String> = names_with_prefix(&page, "process_")
            .into_iter()
            .filter(|n| page.contains(&format!("`{n}`")))
            .collect();
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, || {
            let collector = metrics_process::Collector::default();
            collector.describe();
            collector.collect();
        });
        let exported: std::collections::BTreeSet<String> = exported_names(&handle.render());
        assert!(
            exported.contains("process_resident_memory_bytes"),
            "the collector reported to the recorder: {exported:?}"
        );
        assert_eq!(
            exported, documented,
            "exported by the process collector (left) and listed in docs/metrics.md (right)"
        );
    }
}
