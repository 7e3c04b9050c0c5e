//! The command line's contract: exit statuses by class (usage 2,
//! configuration 3, broker unavailable 4, fenced 5, interrupted 130),
//! fatal errors in JSON logs, `--log-format` from the environment, the
//! topology positional in `dlq replay` (the old flag still accepted), and
//! `${VAR:?message}` and `${file:/path}` in topologies.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use support::*;

fn streamfold(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(streamfold_binary())
        .args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .output()
        .expect("the streamfold binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A small exactly-once topology: `source` filtered into `<app>-out`.
/// `extra` goes under `kafka:` (indented two spaces).
fn write_topology(dir: &Path, app: &str, source: &str, kafka_extra: &str) -> PathBuf {
    let path = dir.join(format!("{app}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {app}
kafka:
  bootstrap_servers: {bootstrap}
{kafka_extra}processing: {{ commit_interval: 100ms }}
sources:
  events: {{ topic: {source}, format: json }}
nodes:
  kept:
    type: filter
    input: events
    condition: '.keep'
sinks:
  out: {{ topic: {app}-out, input: kept, create: true }}
dead_letter: {{ topic: {app}-dlq }}
",
            bootstrap = broker().bootstrap,
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_wrong_command_line_exits_2() {
    let output = streamfold(&["run", "--no-such-flag", "x.yaml"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

#[test]
fn configuration_errors_exit_3_with_the_message_of_a_required_variable() {
    let dir = temp_dir();
    let path = dir.path().join("t.yaml");
    std::fs::write(
        &path,
        "name: needs-secret
kafka:
  bootstrap_servers: 127.0.0.1:1
  security:
    sasl:
      mechanism: SCRAM-SHA-512
      username: app
      password: ${STREAMFOLD_TEST_PASSWORD:?mount the kafka-credentials secret}
sources:
  events: { topic: events }
nodes:
  kept: { type: filter, input: events, condition: '.keep' }
sinks:
  out: { topic: out, input: kept }
dead_letter: { topic: dlq }
",
    )
    .unwrap();
    let path = path.to_str().unwrap();
    for args in [
        vec!["check", path],
        vec!["run", path],
        vec!["describe", path],
    ] {
        let output = streamfold(&args, &[]);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(
                "environment variable `STREAMFOLD_TEST_PASSWORD` is not set: mount the kafka-credentials secret"
            ),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let output = streamfold(&["check", path], &[("STREAMFOLD_TEST_PASSWORD", "pw")]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // A bad --filter is the user's input too.
    let output = streamfold(
        &["dlq", "replay", path, "--filter", ".[[["],
        &[("STREAMFOLD_TEST_PASSWORD", "pw")],
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
}

#[test]
fn a_secret_file_fills_a_topology_value() {
    let dir = temp_dir();
    let secret = dir.path().join("dlq-topic");
    std::fs::write(&secret, "from-a-file\n").unwrap();
    let path = dir.path().join("t.yaml");
    std::fs::write(
        &path,
        format!(
            "name: file-secret
kafka: {{ bootstrap_servers: 127.0.0.1:1 }}
sources:
  events: {{ topic: events }}
nodes:
  kept: {{ type: filter, input: events, condition: '.keep' }}
sinks:
  out: {{ topic: out, input: kept }}
dead_letter: {{ topic: '${{file:{}}}' }}
",
            secret.display()
        ),
    )
    .unwrap();
    let output = streamfold(&["describe", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let described = String::from_utf8_lossy(&output.stdout);
    assert!(described.contains("from-a-file"), "{described}");
    assert!(!described.contains("from-a-file\n\n"), "{described}");
    std::fs::remove_file(&secret).unwrap();
    let output = streamfold(&["check", path.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("cannot read the file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_unreachable_broker_exits_4_and_the_json_log_says_why() {
    let _serial = serial();
    let dir = temp_dir();
    let closed = format!("127.0.0.1:{}", free_port());
    let path = write_topology(dir.path(), &unique("sf-exit"), "events", "");
    let output = streamfold(
        &[
            "run",
            path.to_str().unwrap(),
            "--bootstrap-servers",
            &closed,
            "--state-dir",
            dir.path().to_str().unwrap(),
        ],
        &[("STREAMFOLD_LOG_FORMAT", "json")],
    );
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    let text = stderr(&output);
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let fatal = events
        .iter()
        .find(|e| e["fields"]["message"] == "Fatal error; exiting.")
        .unwrap_or_else(|| panic!("no fatal error event in:\n{text}"));
    assert_eq!(fatal["level"], "ERROR");
    assert_eq!(fatal["fields"]["exit_code"], 4);
    assert_eq!(fatal["fields"]["class"], "broker_unavailable");
    assert!(
        fatal["fields"]["error"]
            .as_str()
            .unwrap()
            .contains(&format!("cannot reach Kafka at {closed}")),
        "{fatal}"
    );
}

#[test]
fn topology_diagnostics_are_json_events_in_json_logs() {
    let output = streamfold(
        &[
            "--log-format",
            "json",
            "check",
            "tests/cases/errors/many-errors/topology.yaml",
        ],
        &[],
    );
    // (run from the test's working directory, the crate root)
    assert_eq!(output.status.code(), Some(3));
    let text = stderr(&output);
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["fields"]["message"], "Invalid topology.");
    assert!(first["fields"]["line"].as_u64().unwrap() > 0, "{first}");
    assert!(
        first["fields"]["diagnostic"]
            .as_str()
            .unwrap()
            .contains("kafka.linger"),
        "{first}"
    );
}

#[test]
fn a_cluster_that_does_not_fit_the_topology_exits_3() {
    let _serial = serial();
    let dir = temp_dir();
    let path = write_topology(
        dir.path(),
        &unique("sf-exit"),
        &unique("never-created"),
        "  wait_for_sources: false\n",
    );
    let output = streamfold(
        &[
            "run",
            path.to_str().unwrap(),
            "--state-dir",
            dir.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
}

#[test]
fn dlq_replay_takes_the_topology_as_its_argument_or_the_old_flag() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-replay");
    let source = unique("events");
    create_topic(&source, 1);
    create_topic(&format!("{app}-dlq"), 1);
    let path = write_topology(dir.path(), &app, &source, "");
    let path = path.to_str().unwrap();
    for args in [
        vec!["dlq", "replay", path, "--dry-run"],
        vec!["dlq", "replay", "--topology", path, "--dry-run"],
    ] {
        let output = streamfold(&args, &[]);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains(&format!("would replay 0 of 0 dead letters from {app}-dlq")),
            "{stdout}"
        );
    }
    let both = streamfold(&["dlq", "replay", path, "--topology", path], &[]);
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
}

fn config(path: PathBuf, state_dir: PathBuf) -> AppConfig {
    AppConfig {
        topology: path,
        instance: "only".into(),
        state_dir,
        env: Vec::new(),
        txn_header: false,
        args: Vec::new(),
    }
}

/// Two signals while the process cannot act on the first (stopped, as a
/// frozen VM is): the second ends it at once, as interrupted.
#[test]
fn a_second_signal_exits_130() {
    let _serial = serial();
    let dir = temp_dir();
    let path = write_topology(dir.path(), &unique("sf-exit"), &unique("never-created"), "");
    let app = App::start(&config(path, dir.path().join("state")), dir.path());
    app.wait_log_lines("Waiting for the source topics", 1, Duration::from_secs(60));
    app.pause();
    signal(app.pid(), "INT");
    signal(app.pid(), "TERM");
    app.resume();
    let (status, log) = app.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("Second signal"), "{log}");
}

/// One signal is a clean stop: 0.
#[test]
fn one_signal_is_a_clean_stop() {
    let _serial = serial();
    let dir = temp_dir();
    let path = write_topology(dir.path(), &unique("sf-exit"), &unique("never-created"), "");
    let app = App::start(&config(path, dir.path().join("state")), dir.path());
    app.wait_log_lines("Waiting for the source topics", 1, Duration::from_secs(60));
    // `stop` sends SIGTERM and asserts a successful exit.
    app.stop();
}

/// A static member frozen and replaced by a process with its instance id
/// finds itself fenced when it wakes, and exits 5.
#[test]
fn a_fenced_instance_exits_5() {
    let _serial = serial();
    let dir = temp_dir();
    let app_name = unique("sf-fenced");
    let source = unique("events");
    create_topic(&source, 1);
    let path = write_topology(
        dir.path(),
        &app_name,
        &source,
        "  static_membership: true\n",
    );
    let producer = TestProducer::new();
    let send = |n: usize| {
        for i in 0..n {
            producer.send_json(
                &source,
                &format!("k{i}"),
                &serde_json::json!({"keep": true}),
            );
        }
        producer.flush();
    };
    send(10);
    let zombie = App::start(&config(path.clone(), dir.path().join("a")), dir.path());
    wait_committed_to(
        &zombie,
        &app_name,
        &source,
        &producer.ends(&source, 1),
        Duration::from_secs(120),
    );
    zombie.pause();
    let successor = App::start(&config(path, dir.path().join("b")), dir.path());
    send(10);
    wait_committed_to(
        &successor,
        &app_name,
        &source,
        &producer.ends(&source, 1),
        Duration::from_secs(180),
    );
    zombie.resume();
    let (status, log) = zombie.wait_exit(Duration::from_secs(120));
    assert_eq!(status.code(), Some(5), "{log}");
    assert!(log.contains("this instance was fenced"), "{log}");
    successor.stop();
}

/// A producer that fails fatally is replaced: the tasks close, the process
/// rejoins with a new producer, and nothing of the failed transactions is
/// committed. A sixth failure within ten minutes ends the process with
/// status 1 and says why; started again, it commits every record once.
#[test]
fn a_producer_that_keeps_failing_ends_the_process_after_five_rejoins() {
    let _serial = serial();
    let dir = temp_dir();
    let app_name = unique("sf-budget");
    let source = unique("events");
    create_topic(&source, 1);
    let path = write_topology(dir.path(), &app_name, &source, "");
    let producer = TestProducer::new();
    for i in 0..10 {
        producer.send_json(
            &source,
            &format!("k{i}"),
            &serde_json::json!({"keep": true, "i": i}),
        );
    }
    producer.flush();
    let mut failing = config(path.clone(), dir.path().join("state"));
    failing.args = vec![
        "--inject-fault".into(),
        (1..=6)
            .map(|n| format!("commit:fatal@{n}"))
            .collect::<Vec<_>>()
            .join(","),
    ];
    let app = App::start(&failing, dir.path());
    // A bound on a hang: six rejoins with their pauses (1 + … + 5 s) and
    // the group checks between them.
    let (status, log) = app.wait_exit(Duration::from_secs(240));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("6 producer failures within 600 s"),
        "the error says the budget is spent: {log}"
    );
    assert_eq!(
        log.matches("The producer is unusable; closing the tasks and rejoining the group.")
            .count(),
        5,
        "five rejoins before the end: {log}"
    );
    assert_eq!(
        log.matches("Producer ready; joining the group.").count(),
        6,
        "a new producer for each membership: {log}"
    );
    // Each membership's task closes where it ran, and says so: readers of
    // the log (a dashboard, the chaos harness) count a task on one
    // instance, not on the failed one too.
    assert_eq!(log.matches("Task running. task=0").count(), 6, "{log}");
    assert_eq!(
        log.matches("Task closed. task=0").count(),
        6,
        "every close is logged, after a failure too: {log}"
    );
    let out = format!("{app_name}-out");
    assert!(
        read_to_end(&out, Duration::from_secs(60)).is_empty(),
        "no failed transaction committed"
    );

    let app = App::start(&config(path, dir.path().join("state")), dir.path());
    wait_committed_to(
        &app,
        &app_name,
        &source,
        &producer.ends(&source, 1),
        Duration::from_secs(120),
    );
    app.stop();
    let mut seen: Vec<i64> = read_to_end(&out, Duration::from_secs(60))
        .iter()
        .map(|r| {
            let value: Value = serde_json::from_slice(r.payload.as_deref().unwrap_or_default())
                .expect("a JSON record");
            value["i"].as_i64().expect("the record's number")
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>(), "every record once");
}
