//! Avro end to end on a real broker: Confluent-framed post-metric events
//! through the Avro social-metrics topology against a schema registry
//! (the in-process one following the Confluent REST API), the folded
//! output read back by our decoder and by a third-party one (Python
//! fastavro), and dead letters for undecodable records and for folded
//! values that do not fit the sink's schema.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use streamfold::formats::Codecs;
use streamfold::testkit::article as example;
use streamfold::topology;
use support::fastavro::{fastavro, hex};
use support::registry::SchemaRegistry;
use support::*;

#[test]
fn avro_folds_on_a_real_broker_are_readable_by_fastavro_and_bad_bytes_become_dead_letters() {
    let _serial = serial();
    let registry = SchemaRegistry::start().unwrap();
    let dir = temp_dir();
    let source = unique("post-metric-updated-avro");
    let folded = unique("account-metrics-folded-avro");
    let dlq = unique("avro-dlq");
    create_topic(&source, 4);
    let env: Vec<(String, String)> = [
        ("STREAMFOLD_APP", unique("sf-avro")),
        ("POST_METRICS_TOPIC", source.clone()),
        ("FOLDED_TOPIC", folded.clone()),
        ("DEAD_LETTER_TOPIC", dlq.clone()),
        ("SCHEMA_REGISTRY_URL", registry.url().to_string()),
        ("KAFKA_BOOTSTRAP_SERVERS", broker().bootstrap.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let topology_path = repo().join("topologies/social-metrics-avro.yaml");
    let text = std::fs::read_to_string(&topology_path).unwrap();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let topology = topology::load_str("social-metrics-avro.yaml", &text, &lookup).unwrap();
    // Our test's producer: Confluent Avro with the source's schema,
    // registered under `<topic>-value` as a Confluent serializer would.
    let codecs = Codecs::new(&topology).unwrap();

    let producer = TestProducer::new();
    for value in example::events() {
        let bytes = codecs.encode_as_producer(0, &value).unwrap();
        let post = value["post_id"].as_str().unwrap();
        producer.send(&source, Some(post.as_bytes()), &bytes, &[]);
    }
    // A producer with the wrong serializer, and a schema id nobody knows.
    producer.send(&source, Some(b"post_7"), br#"{"post_id":"post_7"}"#, &[]);
    producer.send(&source, Some(b"post_8"), &[0, 0, 0, 0x27, 0x0f, 2, 4], &[]);
    producer.flush();

    let app = App::start(
        &AppConfig {
            topology: topology_path,
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: env.clone(),
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    let outputs = read_topic(&folded, 2, Duration::from_secs(2), Duration::from_secs(90));
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    let mut seen = Vec::new();
    for record in &outputs {
        let bytes = record.payload.clone().unwrap();
        assert_eq!(bytes[0], 0, "Confluent magic byte");
        let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        // Our own decoder.
        let ours = codecs.decode_as_consumer(0, &bytes).unwrap();
        // A third-party decoder, with the schema the registry has for the id.
        let schema: Value =
            serde_json::from_str(&registry.schema(id).expect("the id is registered")).unwrap();
        let theirs = fastavro(&json!({"schema": schema, "read": [hex(&bytes[5..])], "write": []}));
        assert_eq!(theirs["read"][0], ours, "fastavro reads what we wrote");
        seen.push(ours);
    }
    seen.sort_by_key(|v| v["account_id"].as_str().unwrap_or_default().to_string());
    assert_eq!(seen[0]["account_id"], json!("account_1"));
    assert_eq!(
        seen[0]["metrics"],
        json!(["comments", "impressions", "likes", "shares"])
    );
    assert_eq!(seen[0]["folded_count"], json!(4));
    assert_eq!(seen[1]["account_id"], json!("account_2"));
    assert_eq!(seen[1]["metrics"], json!(["likes", "shares"]));
    assert_eq!(seen[1]["folded_count"], json!(2));
    assert!(
        registry.subjects().contains(&format!("{folded}-value")),
        "the sink schema was registered: {:?}",
        registry.subjects()
    );

    let letters = read_topic(&dlq, 2, Duration::from_secs(1), Duration::from_secs(60));
    assert_eq!(letters.len(), 2);
    let json_letter = letters
        .iter()
        .find(|l| l.key.as_deref() == Some("post_7"))
        .unwrap();
    assert_eq!(
        json_letter.header("streamfold.dlq.node"),
        Some("post_metrics")
    );
    assert_eq!(json_letter.header("streamfold.dlq.class"), Some("record"));
    assert!(
        json_letter
            .header("streamfold.dlq.reason")
            .unwrap()
            .contains("not the magic byte"),
        "{json_letter:?}"
    );
    assert_eq!(
        json_letter.payload.as_deref(),
        Some(&br#"{"post_id":"post_7"}"#[..]),
        "the original bytes are kept"
    );
    let unknown = letters
        .iter()
        .find(|l| l.key.as_deref() == Some("post_8"))
        .unwrap();
    assert!(
        unknown
            .header("streamfold.dlq.reason")
            .unwrap()
            .contains("schema id 9999 is not in the schema registry"),
        "{unknown:?}"
    );
    assert_eq!(
        unknown.header("streamfold.dlq.topic"),
        Some(source.as_str())
    );
    app.stop();
}

#[test]
fn a_folded_value_that_does_not_fit_the_sink_schema_is_dead_lettered_with_the_value() {
    let _serial = serial();
    let registry = SchemaRegistry::start().unwrap();
    let dir = temp_dir();
    let source = unique("post-metric-updated");
    let folded = unique("account-metrics-folded-avro");
    let dlq = unique("avro-dlq");
    create_topic(&source, 4);
    // JSON in, Avro out: one producer sends post ids as numbers, which the
    // folded event's `posts: array<string>` cannot hold.
    let original = std::fs::read_to_string(repo().join("topologies/social-metrics.yaml")).unwrap();
    let text = original.replace(
        "    input: fold_account\n    create: true\n",
        "    input: fold_account\n    create: true\n    format: avro\n    schema: schemas/account-metrics-folded.avsc\n",
    ) + "schema_registry:\n  url: ${SCHEMA_REGISTRY_URL}\n";
    assert_ne!(text, original);
    let topology = dir.path().join("json-to-avro.yaml");
    std::fs::write(&topology, text).unwrap();
    let env: Vec<(String, String)> = [
        ("STREAMFOLD_APP", unique("sf-avro-sink")),
        ("POST_METRICS_TOPIC", source.clone()),
        ("FOLDED_TOPIC", folded.clone()),
        ("DEAD_LETTER_TOPIC", dlq.clone()),
        ("SCHEMA_REGISTRY_URL", registry.url().to_string()),
        ("FOLD_QUIET_FOR", "2s".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let producer = TestProducer::new();
    producer.send_json(
        &source,
        "account_1",
        &json!({"post_id": "post_1", "account_id": "account_1", "metrics": {"likes": 1}}),
    );
    producer.send_json(
        &source,
        "account_9",
        &json!({"post_id": 9, "account_id": "account_9", "metrics": {"likes": 1}}),
    );
    producer.flush();
    let app = App::start(
        &AppConfig {
            topology,
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env,
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    let letters = read_topic(&dlq, 1, Duration::from_secs(2), Duration::from_secs(60));
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.header("streamfold.dlq.node"), Some("folded"));
    assert_eq!(letter.header("streamfold.dlq.class"), Some("record"));
    assert!(
        letter
            .header("streamfold.dlq.reason")
            .unwrap()
            .contains("/posts/0"),
        "{letter:?}"
    );
    // The letter keeps the value that did not fit: nothing is lost.
    assert_eq!(letter.key.as_deref(), Some("account_9"));
    assert_eq!(letter.json()["posts"], json!([9]));
    assert_eq!(letter.json()["folded_count"], json!(1));
    let outputs = read_topic(&folded, 1, Duration::from_secs(1), Duration::from_secs(30));
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].key.as_deref(), Some("account_1"));
    app.stop();
}

/// `output`'s stdout and stderr.
fn output_text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_schema_registry_password_is_in_no_log_metric_describe_output_or_error() {
    let _serial = serial();
    let password = format!("sr-{}", unique("secret"));
    let registry = SchemaRegistry::start_with_basic_auth("sr-user", &password).unwrap();
    let dir = temp_dir();
    let source = unique("post-metric-updated-avro");
    let folded = unique("account-metrics-folded-avro");
    let dlq = unique("avro-dlq");
    create_topic(&source, 2);
    let env: Vec<(String, String)> = [
        ("STREAMFOLD_APP", unique("sf-avro-secret")),
        ("POST_METRICS_TOPIC", source.clone()),
        ("FOLDED_TOPIC", folded.clone()),
        ("DEAD_LETTER_TOPIC", dlq.clone()),
        ("SCHEMA_REGISTRY_URL", registry.url().to_string()),
        ("SCHEMA_REGISTRY_USERNAME", "sr-user".to_string()),
        ("SCHEMA_REGISTRY_PASSWORD", password.clone()),
        ("KAFKA_BOOTSTRAP_SERVERS", broker().bootstrap.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let topology_path = repo().join("topologies/social-metrics-avro.yaml");
    let no_password = |what: &str, text: &str| {
        assert!(
            !text.contains(&password),
            "the schema registry password appears in {what}:\n{text}"
        );
    };
    let cli = |args: &[&str], env: &[(String, String)]| {
        std::process::Command::new(streamfold_binary())
            .args(args)
            .envs(env.iter().cloned())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };

    // `check` and `describe` show the registry and its user, the password
    // masked.
    for command in ["check", "describe"] {
        let shown = cli(&[command, topology_path.to_str().unwrap()], &env);
        assert!(shown.status.success(), "{}", output_text(&shown));
        assert!(
            output_text(&shown).contains(&format!(
                "{} as user `sr-user` (password ***)",
                registry.url()
            )),
            "`{command}`: {}",
            output_text(&shown)
        );
        no_password(&format!("`{command}`"), &output_text(&shown));
    }

    // A run with every log line on: the registry is asked for schemas with
    // the password, which is nowhere in the log or the metrics.
    let text = std::fs::read_to_string(&topology_path).unwrap();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let topology = topology::load_str("social-metrics-avro.yaml", &text, &lookup).unwrap();
    let codecs = Codecs::new(&topology).unwrap();
    let producer = TestProducer::new();
    for value in example::events() {
        let bytes = codecs.encode_as_producer(0, &value).unwrap();
        let post = value["post_id"].as_str().unwrap();
        producer.send(&source, Some(post.as_bytes()), &bytes, &[]);
    }
    producer.flush();
    let mut run_env = env.clone();
    run_env.push(("RUST_LOG".into(), "debug".into()));
    let app = App::start(
        &AppConfig {
            topology: topology_path.clone(),
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: run_env,
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    let outputs = read_topic(&folded, 2, Duration::from_secs(2), Duration::from_secs(90));
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    let metrics = app.metrics_text();
    let log = app.stop();
    assert!(log.contains("DEBUG"), "every log line is on:\n{log}");
    no_password("the run's log", &log);
    no_password("/metrics", &metrics);

    // A wrong password: the run stops with the registry's refusal, and
    // neither password is in what it says.
    let wrong = format!("{password}-wrong");
    let mut wrong_env = env.clone();
    wrong_env.push(("SCHEMA_REGISTRY_PASSWORD".into(), wrong.clone()));
    wrong_env.push(("STREAMFOLD_APP".into(), unique("sf-avro-wrong")));
    let app = App::start(
        &AppConfig {
            topology: topology_path,
            instance: "a".into(),
            state_dir: dir.path().join("state-wrong"),
            env: wrong_env,
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    let (status, log) = app.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "{log}");
    assert!(log.contains("401"), "the registry's refusal: {log}");
    no_password("the error", &log);
    assert!(
        !log.contains(&wrong),
        "the wrong password appears in the error:\n{log}"
    );
}
