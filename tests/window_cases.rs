//! Windowed aggregation offline: `streamfold test` passes every case of
//! the page-views example and of the window kinds (tumbling, hopping,
//! sliding, session merges, emit on update, late records), and the
//! counters behind the cases account for every record that did not come
//! out as part of a window.

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
fn streamfold_test_passes_every_window_case() {
    for (topology, cases, count) in [
        ("topologies/page-views.yaml", "tests/cases/page-views", 2),
        (
            "tests/cases/windows/topology.yaml",
            "tests/cases/windows",
            6,
        ),
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
fn page_views_count_every_view_once_and_account_for_the_late_and_the_bad() {
    let topology = topology("topologies/page-views.yaml");
    let report = case(&topology, "page-views/five-minute-windows");
    let node = stats(&report, "views_per_page");
    assert_eq!(node.get(NodeCounter::RecordsIn), 6);
    assert_eq!(node.get(NodeCounter::WindowClosed), 3);
    assert_eq!(node.get(NodeCounter::WindowExpired), 3);
    assert_eq!(node.get(NodeCounter::WindowLate), 0);

    let report = case(&topology, "page-views/late-and-bad-views");
    let node = stats(&report, "views_per_page");
    assert_eq!(node.get(NodeCounter::WindowLate), 1);
    assert_eq!(node.dead_letters(DeadLetterReason::Rejected), 1);
    assert_eq!(
        stats(&report, "page_views").dead_letters(DeadLetterReason::BadTimestamp),
        1
    );
    // Four views: two counted, one late, one without a time.
    assert_eq!(node.get(NodeCounter::RecordsIn), 3);
    assert_eq!(node.get(NodeCounter::WindowClosed), 2);
}

#[test]
fn window_counters_say_what_happened_to_every_record() {
    let topology = topology("tests/cases/windows/topology.yaml");
    let merge = case(&topology, "windows/session-merge");
    assert_eq!(
        stats(&merge, "sessions").get(NodeCounter::WindowSessionMerges),
        1
    );
    assert_eq!(stats(&merge, "sessions").get(NodeCounter::WindowClosed), 2);

    let updates = case(&topology, "windows/on-update");
    let tumbling = stats(&updates, "tumbling_updates");
    assert_eq!(tumbling.get(NodeCounter::WindowLate), 1);
    assert_eq!(tumbling.get(NodeCounter::Dropped), 1);
    assert_eq!(tumbling.get(NodeCounter::RecordsOut), 3);
    // Emitting on update closes nothing: windows only expire.
    assert_eq!(tumbling.get(NodeCounter::WindowClosed), 0);
    assert_eq!(tumbling.get(NodeCounter::WindowExpired), 2);
    let sessions = stats(&updates, "session_updates");
    assert_eq!(sessions.get(NodeCounter::WindowLate), 0);
    // Four updates and two retractions.
    assert_eq!(sessions.get(NodeCounter::RecordsOut), 6);

    let sliding = case(&topology, "windows/sliding");
    let node = stats(&sliding, "sliding");
    assert_eq!(node.get(NodeCounter::WindowClosed), 5);
    // Every bucket (one per distinct record time) is gone.
    assert_eq!(node.get(NodeCounter::WindowExpired), 3);

    let late = case(&topology, "windows/late-record");
    let node = stats(&late, "tumbling");
    assert_eq!(node.get(NodeCounter::WindowLate), 1);
    assert_eq!(node.get(NodeCounter::Dropped), 0);
    assert_eq!(node.dead_letters(DeadLetterReason::Rejected), 1);
}

#[test]
fn the_schema_documents_every_window_field() {
    let output = Command::new(env!("CARGO_BIN_EXE_streamfold"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(output.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let variants = schema["$defs"]["NodeConfig"]["oneOf"].as_array().unwrap();
    let window = variants
        .iter()
        .find(|v| v["properties"]["type"]["const"] == "window")
        .map(|v| &v["properties"])
        .expect("a `window` variant");
    for field in [
        "window",
        "size",
        "advance",
        "gap",
        "grace",
        "retention",
        "emit",
        "on_late",
        "fields",
        "key_field",
    ] {
        let description = window[field]["description"].as_str().unwrap_or_default();
        assert!(
            !description.is_empty(),
            "window `{field}` has no description:\n{window}"
        );
    }
}
