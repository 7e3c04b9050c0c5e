//! Tables and joins offline: `streamfold test` passes every case of the
//! orders-enriched example and of the join kinds (stream–table,
//! table–table, stream–stream, late and lonely records), and the counters
//! behind the cases account for every record that did not come out
//! joined.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use streamfold::telemetry::{DeadLetterReason, NodeCounter, NodeStats};
use streamfold::testkit::{CaseReport, run_case};
use streamfold::topology::{self, Topology};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn topology(path: &str) -> Arc<Topology> {
    let path = root().join(path);
    let text = std::fs::read_to_string(&path).unwrap();
    Arc::new(
        topology::load_str(&path.display().to_string(), &text, &|_| None)
            .unwrap_or_else(|errors| panic!("{}: {errors:?}", path.display())),
    )
}

fn case(topology: &Arc<Topology>, dir: &str) -> CaseReport {
    let dir: &Path = &root().join("tests/cases").join(dir);
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

#[test]
fn streamfold_test_passes_every_join_case() {
    for (topology, cases, count) in [
        (
            "topologies/orders-enriched.yaml",
            "tests/cases/orders-enriched",
            2,
        ),
        (
            "topologies/orders-enriched-global.yaml",
            "tests/cases/orders-enriched-global",
            1,
        ),
        ("tests/cases/joins/topology.yaml", "tests/cases/joins", 5),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_streamfold"))
            .args(["test", topology, cases])
            .current_dir(root())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{topology}:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("{count} passed, 0 failed")),
            "{topology}:\n{stdout}"
        );
    }
}

#[test]
fn orders_are_enriched_once_each_and_the_bad_ones_are_accounted_for() {
    let topology = topology("topologies/orders-enriched.yaml");
    let report = case(&topology, "orders-enriched/enrich");
    let node = stats(&report, "enrich");
    // Four orders and three profiles in; four orders out, one alone.
    assert_eq!(node.get(NodeCounter::RecordsIn), 7);
    assert_eq!(node.get(NodeCounter::RecordsOut), 4);
    assert_eq!(node.get(NodeCounter::JoinUnmatched), 1);
    assert_eq!(node.get(NodeCounter::Dropped), 0);

    let report = case(&topology, "orders-enriched/tombstones-and-bad-records");
    let node = stats(&report, "enrich");
    assert_eq!(node.get(NodeCounter::RecordsOut), 2);
    assert_eq!(node.get(NodeCounter::JoinUnmatched), 1);
    assert_eq!(node.dead_letters(DeadLetterReason::MissingKeyField), 1);
    assert_eq!(node.dead_letters(DeadLetterReason::Rejected), 1);
    assert_eq!(
        stats(&report, "customers").dead_letters(DeadLetterReason::UndecodableValue),
        1
    );
}

#[test]
fn join_counters_say_what_happened_to_every_record() {
    let topology = topology("tests/cases/joins/topology.yaml");
    let report = case(&topology, "joins/stream-table");
    // Four orders: the first (before its customer) and the last (after
    // the tombstone) find none.
    let inner = stats(&report, "orders_inner");
    assert_eq!(inner.get(NodeCounter::RecordsOut), 2);
    assert_eq!(inner.get(NodeCounter::JoinUnmatched), 2);
    assert_eq!(inner.get(NodeCounter::Dropped), 2);
    let left = stats(&report, "orders_left");
    assert_eq!(left.get(NodeCounter::RecordsOut), 4);
    assert_eq!(left.get(NodeCounter::Dropped), 0);

    let report = case(&topology, "joins/stream-global");
    // Six purchases: before the profile, two with it (the inner join's
    // key is case-sensitive, so `C1` finds none), after the tombstone,
    // and one naming no customer (dead-lettered by both).
    let inner = stats(&report, "global_inner");
    assert_eq!(inner.get(NodeCounter::RecordsIn), 6);
    assert_eq!(inner.get(NodeCounter::RecordsOut), 2);
    assert_eq!(inner.get(NodeCounter::JoinUnmatched), 3);
    assert_eq!(inner.get(NodeCounter::Dropped), 3);
    assert_eq!(inner.dead_letters(DeadLetterReason::Rejected), 1);
    let left = stats(&report, "global_left");
    assert_eq!(left.get(NodeCounter::RecordsOut), 5);
    assert_eq!(left.get(NodeCounter::JoinUnmatched), 2);
    assert_eq!(left.dead_letters(DeadLetterReason::Rejected), 1);

    let report = case(&topology, "joins/stream-stream");
    let inner = stats(&report, "streams_inner");
    // c1–v1, c2–v1, c2–v2 (c1–v2 are 11 s apart).
    assert_eq!(inner.get(NodeCounter::RecordsOut), 3);
    // c3 and v3 found nobody; all six records expired.
    assert_eq!(inner.get(NodeCounter::JoinUnmatched), 2);
    assert_eq!(inner.get(NodeCounter::JoinExpired), 6);
    let left = stats(&report, "streams_left");
    assert_eq!(left.get(NodeCounter::RecordsOut), 4);
    assert_eq!(left.get(NodeCounter::Dropped), 1, "v3, a right record");
    let outer = stats(&report, "streams_outer");
    assert_eq!(outer.get(NodeCounter::RecordsOut), 5);
    assert_eq!(outer.get(NodeCounter::Dropped), 0);

    let report = case(&topology, "joins/late-and-lonely");
    let inner = stats(&report, "streams_inner");
    assert_eq!(inner.get(NodeCounter::JoinLate), 1);
    assert_eq!(inner.dead_letters(DeadLetterReason::Rejected), 1);
    let left = stats(&report, "streams_left");
    assert_eq!(left.get(NodeCounter::JoinLate), 1);
    assert_eq!(
        left.get(NodeCounter::Dropped),
        2,
        "the late view and the lonely one"
    );
    assert_eq!(
        stats(&report, "views").dead_letters(DeadLetterReason::BadTimestamp),
        1
    );
}

#[test]
fn the_schema_documents_every_join_field_and_the_source_kind() {
    let output = Command::new(env!("CARGO_BIN_EXE_streamfold"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(output.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let variants = schema["$defs"]["NodeConfig"]["oneOf"].as_array().unwrap();
    let join = variants
        .iter()
        .find(|v| v["properties"]["type"]["const"] == "join")
        .map(|v| &v["properties"])
        .expect("a `join` variant");
    for field in [
        "how",
        "window",
        "grace",
        "on_late",
        "value",
        "fields",
        "table_key",
    ] {
        let description = join[field]["description"].as_str().unwrap_or_default();
        assert!(
            !description.is_empty(),
            "join `{field}` has no description:\n{join}"
        );
    }
    let source = &schema["$defs"]["SourceConfig"]["properties"]["kind"];
    assert!(
        source["description"]
            .as_str()
            .is_some_and(|d| d.contains("table") && d.contains("global_table")),
        "{source}"
    );
}
