//! The article topologies run offline: `streamfold test` passes every case
//! of question-feed, distributed-counter and partitioned-processing, and
//! the counters behind the cases say what happened to every record that
//! did not come out — nothing is dropped silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use streamfold::telemetry::{DeadLetterReason, NodeCounter, NodeStats};
use streamfold::testkit::{CaseReport, run_case};
use streamfold::topology::{self, Topology};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The topology with its defaults (no `${VAR}` set), as the cases expect.
fn topology(name: &str) -> Arc<Topology> {
    let path = root().join(format!("topologies/{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    Arc::new(
        topology::load_str(&path.display().to_string(), &text, &|_| None)
            .unwrap_or_else(|errors| panic!("{name}: {errors:?}")),
    )
}

fn case_dirs(name: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("tests/cases").join(name))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("input.jsonl").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn run(topology: &Arc<Topology>, dir: &Path) -> CaseReport {
    let report = run_case(topology, dir, false).unwrap();
    assert!(
        report.passed(),
        "{}:\n{}",
        dir.display(),
        report.failures.join("\n")
    );
    report
}

fn stats<'r>(report: &'r CaseReport, node: &str) -> &'r NodeStats {
    report
        .stats
        .iter()
        .find(|(n, _)| n == node)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no node {node}"))
}

fn case(topology: &Arc<Topology>, family: &str, name: &str) -> CaseReport {
    run(
        topology,
        &root().join("tests/cases").join(family).join(name),
    )
}

#[test]
fn streamfold_test_passes_every_case_of_every_article_topology() {
    for (name, cases) in [
        ("question-feed", 5),
        ("distributed-counter", 5),
        ("partitioned-processing", 3),
    ] {
        assert_eq!(case_dirs(name).len(), cases, "{name}: cases on disk");
        let output = Command::new(env!("CARGO_BIN_EXE_streamfold"))
            .args([
                "test",
                &format!("topologies/{name}.yaml"),
                &format!("tests/cases/{name}"),
            ])
            .current_dir(root())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{name}:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("{cases} passed, 0 failed")),
            "{name}:\n{stdout}"
        );
    }
}

#[test]
fn question_feed_counts_every_duplicate_stale_update_and_refold() {
    let topology = topology("question-feed");
    let dedup = case(&topology, "question-feed", "dedup-drops");
    // e-10 twice, e-11 three times, e-12 twice: four copies too many.
    assert_eq!(
        stats(&dedup, "dedup_events").get(NodeCounter::DedupDuplicates),
        4
    );
    assert_eq!(stats(&dedup, "dedup_events").get(NodeCounter::Dropped), 4);

    let thanks = case(&topology, "question-feed", "thanks-out-of-order");
    assert_eq!(
        stats(&thanks, "thanks_totals").get(NodeCounter::OrderedStale),
        1
    );

    let late = case(&topology, "question-feed", "delete-before-create");
    assert_eq!(
        stats(&late, "project_question").get(NodeCounter::ProjectionRefolds),
        1
    );

    let duplicate = case(&topology, "question-feed", "duplicate-created");
    assert_eq!(
        stats(&duplicate, "dedup_events").get(NodeCounter::DedupDuplicates),
        1
    );
    // After 7 h dedup forgot e-1 and e-2; the projection still knew e-1.
    assert_eq!(
        stats(&duplicate, "dedup_events").get(NodeCounter::DedupExpired),
        2
    );
    assert_eq!(
        stats(&duplicate, "project_question").get(NodeCounter::ProjectionDuplicates),
        1
    );
}

#[test]
fn distributed_counter_counts_retries_late_writes_and_unknown_reads() {
    let topology = topology("distributed-counter");
    let retries = case(&topology, "distributed-counter", "retries-count-once");
    let rollup = stats(&retries, "rollup_counters");
    assert_eq!(rollup.get(NodeCounter::RollupDuplicates), 2);
    assert_eq!(
        rollup.get(NodeCounter::RollupRollups),
        1,
        "triggers coalesce"
    );

    let late = case(&topology, "distributed-counter", "late-and-bad-events");
    let rollup = stats(&late, "rollup_counters");
    assert_eq!(rollup.get(NodeCounter::RollupLate), 2);
    // Two late writes, a missing token and a bad delta; the write without
    // an event time was rejected by its source, before the node.
    assert_eq!(rollup.dead_letters(DeadLetterReason::Rejected), 4);
    assert_eq!(rollup.dead_letters_total(), 4);
    assert_eq!(
        stats(&late, "counter_events").dead_letters(DeadLetterReason::BadTimestamp),
        1
    );

    let reads = case(&topology, "distributed-counter", "read-triggers");
    assert_eq!(
        stats(&reads, "rollup_counters").get(NodeCounter::RollupUnknownReads),
        1
    );

    let hot = case(&topology, "distributed-counter", "hot-and-cold");
    assert_eq!(
        stats(&hot, "rollup_counters").gauge(streamfold::telemetry::NodeGauge::RollupQueued),
        0,
        "every counter drained"
    );
}

/// For nodes that turn one record into at most one, whatever went in came
/// out, was dropped (counted) or was dead-lettered (counted).
#[test]
fn one_to_one_nodes_account_for_every_record() {
    for name in [
        "question-feed",
        "distributed-counter",
        "partitioned-processing",
    ] {
        let topology = topology(name);
        for dir in case_dirs(name) {
            let report = run(&topology, &dir);
            for node in &topology.nodes {
                let one_to_one = match &node.kind {
                    streamfold::operators::NodeKind::Dedup(_)
                    | streamfold::operators::NodeKind::Ordered(_)
                    | streamfold::operators::NodeKind::Filter(_)
                    | streamfold::operators::NodeKind::Map(_) => true,
                    streamfold::operators::NodeKind::Route(route) => route.first_match,
                    _ => false,
                };
                // Records rejected for a missing `key_by` field never
                // reach the node, so they are not in its records_in.
                if !one_to_one || node.common.key_by.is_some() {
                    continue;
                }
                let s = stats(&report, &node.name);
                assert_eq!(
                    s.get(NodeCounter::RecordsIn),
                    s.get(NodeCounter::RecordsOut)
                        + s.get(NodeCounter::Dropped)
                        + s.dead_letters_total(),
                    "{name}/{}: node {} ({s:?})",
                    dir.display(),
                    node.name
                );
            }
        }
    }
}

#[test]
fn partitioned_processing_filters_reshapes_and_orders_per_account() {
    let topology = topology("partitioned-processing");
    let filtered = case(&topology, "partitioned-processing", "filter-and-map");
    assert_eq!(
        stats(&filtered, "settled_payments").get(NodeCounter::FilterRejected),
        2
    );
    let ordered = case(&topology, "partitioned-processing", "per-account-order");
    assert_eq!(
        stats(&ordered, "account_balance").get(NodeCounter::OrderedStale),
        1
    );
    let letters = case(&topology, "partitioned-processing", "dead-letters");
    assert_eq!(stats(&letters, "payment_view").dead_letters_total(), 1);
    assert_eq!(stats(&letters, "account_balance").dead_letters_total(), 1);
}
