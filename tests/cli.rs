//! The command line as a user meets it: `check` pins every error message
//! to its golden case, the example topologies pass, `test` explains a
//! mismatch, `describe` and `schema` show what they promise.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn streamfold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_streamfold"))
        .args(args)
        .current_dir(root())
        .env_remove("STREAMFOLD_TEST_UNSET_BROKER")
        .output()
        .expect("the streamfold binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn dirs(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

#[test]
fn every_error_case_prints_exactly_its_pinned_message() {
    let cases = dirs(&root().join("tests/cases/errors"));
    assert!(
        cases.len() >= 10,
        "expected the golden error cases, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let file = format!("tests/cases/errors/{name}/topology.yaml");
        let expected = std::fs::read_to_string(case.join("expected.txt"))
            .unwrap_or_else(|_| panic!("{name}: expected.txt is missing"));
        let output = streamfold(&["check", &file]);
        if output.status.code() != Some(3) {
            failures.push(format!(
                "{name}: exit status {:?}, want 3 (configuration)",
                output.status.code()
            ));
        }
        let stderr = text(&output.stderr);
        if stderr != expected {
            failures.push(format!(
                "{name}:\n--- expected\n{expected}--- actual\n{stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn warnings_are_printed_at_their_position_and_check_still_passes() {
    let cases = dirs(&root().join("tests/cases/warnings"));
    assert!(!cases.is_empty(), "expected the golden warning cases");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let file = format!("tests/cases/warnings/{name}/topology.yaml");
        let expected = std::fs::read_to_string(case.join("expected.txt"))
            .unwrap_or_else(|_| panic!("{name}: expected.txt is missing"));
        let output = streamfold(&["check", &file]);
        if !output.status.success() {
            failures.push(format!(
                "{name}: exit status {:?}, want 0",
                output.status.code()
            ));
        }
        let stderr = text(&output.stderr);
        if stderr != expected {
            failures.push(format!(
                "{name}:\n--- expected\n{expected}--- actual\n{stderr}"
            ));
        }
        let warnings = expected.lines().count();
        let plural = if warnings == 1 { "" } else { "s" };
        let stdout = text(&output.stdout);
        if !(stdout.starts_with(&format!("{file}: ok ("))
            && stdout.contains(&format!(", {warnings} warning{plural})")))
        {
            failures.push(format!(
                "{name}: stdout does not count {warnings} warning{plural}:\n{stdout}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_example_topology_passes_check() {
    let mut files: Vec<String> = std::fs::read_dir(root().join("topologies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| format!("topologies/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let output = streamfold(&args);
    assert!(output.status.success(), "{}", text(&output.stderr));
    // The examples are what users copy: no warnings either.
    assert_eq!(text(&output.stderr), "");
    for file in &files {
        assert!(
            text(&output.stdout).contains(&format!("{file}: ok")),
            "{}",
            text(&output.stdout)
        );
    }
}

#[test]
fn the_social_metrics_cases_pass_offline() {
    let output = streamfold(&[
        "test",
        "topologies/social-metrics.yaml",
        "tests/cases/social-metrics",
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");
    // The article's six events: four folded into an open fold.
    assert!(
        stdout.contains("fold_account: 4 of 6 events folded"),
        "{stdout}"
    );
}

#[test]
fn a_mismatch_fails_with_a_diff_that_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("wrong");
    std::fs::create_dir_all(case.join("expected")).unwrap();
    std::fs::copy(
        root().join("tests/cases/social-metrics/article/input.jsonl"),
        case.join("input.jsonl"),
    )
    .unwrap();
    let expected = std::fs::read_to_string(
        root().join("tests/cases/social-metrics/article/expected/account-metrics-folded.jsonl"),
    )
    .unwrap()
    .replace("\"folded_count\": 4", "\"folded_count\": 5");
    std::fs::write(case.join("expected/account-metrics-folded.jsonl"), expected).unwrap();
    let output = streamfold(&[
        "test",
        "topologies/social-metrics.yaml",
        case.to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL    wrong"), "{stdout}");
    assert!(
        stdout.contains("key \"account_1\", record 1 (expected line 2):"),
        "{stdout}"
    );
    assert!(
        stdout.contains("/folded_count: expected 5, got 4"),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");
}

#[test]
fn describe_draws_the_graph_with_its_internal_topics() {
    let output = streamfold(&[
        "describe",
        "topologies/social-metrics.yaml",
        "--format",
        "mermaid",
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.starts_with("flowchart LR\n"), "{stdout}");
    for topic in [
        "social-metrics-fold_account-open-changelog",
        "social-metrics-fold_account-timers-changelog",
        "social-metrics-fold_account-repartition",
        "social-metrics-dlq",
        "post-metric-updated",
        "account-metrics-folded",
    ] {
        assert!(stdout.contains(topic), "{topic} missing from\n{stdout}");
    }
    let dot = streamfold(&[
        "describe",
        "topologies/social-metrics.yaml",
        "--format",
        "dot",
    ]);
    let dot = text(&dot.stdout);
    assert!(dot.starts_with("digraph \"social-metrics\" {"), "{dot}");
    assert!(dot.contains("r0 -> n0;"), "{dot}");
}

#[test]
fn the_schema_documents_every_field() {
    let output = streamfold(&["schema"]);
    assert!(output.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let properties = schema["properties"].as_object().unwrap();
    for field in [
        "name",
        "kafka",
        "processing",
        "sources",
        "nodes",
        "sinks",
        "dead_letter",
        "queries",
    ] {
        let description = properties[field]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            !description.is_empty(),
            "top-level `{field}` has no description"
        );
    }
    for field in ["addr", "advertised_addr", "token", "request_timeout", "tls"] {
        let description = schema["$defs"]["QueriesConfig"]["properties"][field]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            !description.is_empty(),
            "queries `{field}` has no description"
        );
    }
    assert_eq!(
        schema["$defs"]["NodeConfig"]["unevaluatedProperties"],
        false
    );
    let variants = schema["$defs"]["NodeConfig"]["oneOf"].as_array().unwrap();
    let fold = variants
        .iter()
        .find(|v| v["properties"]["type"]["const"] == "fold")
        .map(|v| &v["properties"])
        .expect("a `fold` variant");
    for field in [
        "fields",
        "quiet_for",
        "max_wait",
        "max_events",
        "clock",
        "key_field",
    ] {
        let description = fold[field]["description"].as_str().unwrap_or_default();
        assert!(
            !description.is_empty(),
            "fold `{field}` has no description:\n{fold}"
        );
    }
}

#[test]
fn describe_and_check_show_the_query_api_and_its_settings() {
    let output = streamfold(&["describe", "topologies/question-feed.yaml"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    for line in [
        "queries\n  off (set queries.addr or run --query-addr HOST:PORT)\n",
        "GET /v1/stores/project_question-entities/keys/<key>",
        "GET /v1/stores/thanks_totals-latest/keys/<key>",
        "question-feed-query-endpoints",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from\n{stdout}");
    }
    assert!(
        !stdout.contains("dedup_events-seen/keys"),
        "dedup ids are internal:\n{stdout}"
    );

    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(root().join("topologies/question-feed.yaml")).unwrap();
    let file = dir.path().join("served.yaml");
    std::fs::write(
        &file,
        format!(
            "{source}\nqueries:\n  addr: 0.0.0.0:8080\n  advertised_addr: feed-0.internal:8080\n"
        ),
    )
    .unwrap();
    let file = file.to_string_lossy().into_owned();
    let check = streamfold(&["check", &file]);
    let stdout = text(&check.stdout);
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(
        stdout.contains(
            "  queries: http://0.0.0.0:8080/v1/stores, advertised as feed-0.internal:8080 \
             (project_question-entities, thanks_totals-latest)"
        ),
        "{stdout}"
    );
    let described = text(&streamfold(&["describe", &file]).stdout);
    assert!(
        described.contains("served on http://0.0.0.0:8080 (advertised as feed-0.internal:8080)"),
        "{described}"
    );

    std::fs::write(
        dir.path().join("bad.yaml"),
        format!("{source}\nqueries:\n  addr: everywhere\n"),
    )
    .unwrap();
    let bad = streamfold(&["check", &dir.path().join("bad.yaml").to_string_lossy()]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(
        text(&bad.stderr).contains("queries.addr"),
        "{}",
        text(&bad.stderr)
    );
}

/// A source's timestamp field in RFC 3339 with any UTC offset is the
/// same instant (`+02:00`, `-03:30`, `+05:30`, `Z`); an impossible date is
/// a dead letter. `expected/out.jsonl` pins each record's timestamp.
#[test]
fn rfc3339_timestamps_with_offsets_are_read_as_the_same_instant() {
    let output = streamfold(&[
        "test",
        "tests/cases/timestamps/topology.yaml",
        "tests/cases/timestamps",
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(
        stdout.contains("ok      offsets (6 records in, 6 out)"),
        "{stdout}"
    );
}

/// librdkafka itself judges the client settings at `check` time: a
/// misspelled property fails with its line and column, as `run` would fail
/// to start.
#[test]
fn a_misspelled_librdkafka_property_fails_check_at_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.yaml");
    std::fs::write(
        &path,
        "name: app
kafka:
  bootstrap_servers: localhost:9092
  consumer:
    fetch.max.bytes: 52428800
  producer:
    linger.msec: 20
sources:
  events: { topic: events }
nodes:
  kept: { type: filter, input: events, condition: '.keep' }
sinks:
  out: { topic: out, input: kept }
",
    )
    .unwrap();
    let file = path.to_string_lossy().into_owned();
    let output = streamfold(&["check", &file]);
    assert_eq!(output.status.code(), Some(3), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stderr),
        format!(
            "{file}:7:5: kafka.producer.linger.msec: librdkafka: No such configuration property: \"linger.msec\"\n"
        )
    );
    // Properties that exist but contradict each other, at the one named.
    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace("linger.msec: 20", "linger.ms: 20")
            .replace("fetch.max.bytes: 52428800", "fetch.max.bytes: 1024"),
    )
    .unwrap();
    let output = streamfold(&["check", &file]);
    assert_eq!(output.status.code(), Some(3));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "{file}:5:5: kafka.consumer.fetch.max.bytes: librdkafka: "
        )),
        "{stderr}"
    );
}
