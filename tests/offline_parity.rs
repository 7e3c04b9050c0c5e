//! `streamfold test` shows what `run` does: the same records, written to a
//! topic on a real broker and run, or written as a case and run offline,
//! come out the same on every sink topic and the dead-letter topic —
//! including the edge cases of the record I/O edge: a tombstone, a key that
//! does not decode, a value that does not fit the sink's schema, a record
//! too large for the producer, and its dead letter cut to fit.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Map, Value, json};
use streamfold::formats::Codecs;
use streamfold::topology;
use support::registry::SchemaRegistry;
use support::*;

/// Records with text keys on a source with `key_format: string`; records
/// with Avro keys on one with `key_format: avro` (only raw keys here, so no
/// registry id ends up in a dead letter's key). Both sources feed a JSON
/// sink; the first also an Avro sink whose schema needs `n`; the producer
/// takes 4,000 bytes at most.
const TOPOLOGY: &str = r#"
name: ${STREAMFOLD_APP}
kafka:
  bootstrap_servers: ${KAFKA_BOOTSTRAP_SERVERS}
  producer:
    message.max.bytes: "4000"
schema_registry:
  url: ${SCHEMA_REGISTRY_URL}
processing:
  guarantee: exactly_once
  commit_interval: 100ms
sources:
  texts:
    topic: ${TEXT_TOPIC}
    format: json
  avro_keys:
    topic: ${AVRO_KEY_TOPIC}
    format: json
    key_format: avro
sinks:
  as_json:
    topic: ${JSON_TOPIC}
    input: [texts, avro_keys]
    create: true
  as_avro:
    topic: ${AVRO_TOPIC}
    input: texts
    format: avro
    schema: ${SCHEMA_FILE}
    create: true
dead_letter:
  topic: ${DEAD_LETTER_TOPIC}
"#;

const SCHEMA: &str = r#"{"type": "record", "name": "Numbered", "fields": [
  {"name": "n", "type": "long"}, {"name": "text", "type": "string", "default": ""}]}"#;

/// The edge cases, as `streamfold test` input lines; `topic` is `texts` or
/// `avro_keys`, replaced by the real topic names.
fn fixtures() -> Vec<Value> {
    vec![
        json!({"topic": "texts", "key": "a", "value": {"n": 1, "text": "fine"}}),
        // A tombstone: no payload, a dead letter (missing value).
        json!({"topic": "texts", "key": "b", "value": null}),
        // Fits the JSON sink, not the Avro one (no `n`).
        json!({"topic": "texts", "key": "c", "value": {"text": "no n"}}),
        // Too large for the producer on both sinks; its dead letters are
        // cut to fit the dead-letter topic.
        json!({"topic": "texts", "key": "d", "value": {"n": 4, "text": "x".repeat(5_000)}}),
        // Not JSON.
        json!({"topic": "texts", "key": "e", "raw": "not json"}),
        // A key that is not Confluent Avro.
        json!({"topic": "avro_keys", "raw_key": "not avro", "value": {"n": 6}}),
        json!({"topic": "texts", "key": "f", "value": {"n": 7, "text": "last"}}),
    ]
}

/// One output record as both sides see it: key, value (or raw text) and
/// the dead-letter headers `streamfold test --bless` writes.
fn line(key: Option<String>, value: Result<Value, String>, headers: Map<String, Value>) -> Value {
    let mut line = Map::new();
    line.insert("key".into(), key.map_or(Value::Null, Value::String));
    match value {
        Ok(value) => line.insert("value".into(), value),
        Err(raw) => line.insert("raw".into(), Value::String(raw)),
    };
    if !headers.is_empty() {
        line.insert("headers".into(), Value::Object(headers));
    }
    Value::Object(line)
}

/// What `streamfold test --bless` wrote for `topic` (nothing: no file).
fn blessed(expected: &Path, topic: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(expected.join(format!("{topic}.jsonl"))).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Order-free comparison for topics with several partitions.
fn sorted(mut lines: Vec<Value>) -> Vec<Value> {
    lines.sort_by_key(Value::to_string);
    lines
}

#[test]
fn streamfold_test_and_run_treat_the_record_edge_cases_alike() {
    let _serial = serial();
    let registry = SchemaRegistry::start().unwrap();
    let dir = temp_dir();
    let schema = dir.path().join("numbered.avsc");
    std::fs::write(&schema, SCHEMA).unwrap();
    let topology_path = dir.path().join("parity.yaml");
    std::fs::write(&topology_path, TOPOLOGY).unwrap();
    let texts = unique("parity-texts");
    let avro_keys = unique("parity-avro-keys");
    let as_json = unique("parity-json");
    let as_avro = unique("parity-avro");
    let dlq = unique("parity-dlq");
    create_topic(&texts, 1);
    create_topic(&avro_keys, 1);
    let app = unique("sf-parity");
    let env: Vec<(String, String)> = [
        ("STREAMFOLD_APP", app.clone()),
        ("KAFKA_BOOTSTRAP_SERVERS", broker().bootstrap.clone()),
        ("SCHEMA_REGISTRY_URL", registry.url().to_string()),
        ("TEXT_TOPIC", texts.clone()),
        ("AVRO_KEY_TOPIC", avro_keys.clone()),
        ("JSON_TOPIC", as_json.clone()),
        ("AVRO_TOPIC", as_avro.clone()),
        ("SCHEMA_FILE", schema.display().to_string()),
        ("DEAD_LETTER_TOPIC", dlq.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let topic_of = |name: &str| if name == "texts" { &texts } else { &avro_keys }.clone();

    // Offline: the fixtures as a case, run by the CLI with --bless.
    let case = dir.path().join("case");
    std::fs::create_dir_all(&case).unwrap();
    let input: Vec<String> = fixtures()
        .into_iter()
        .map(|mut f| {
            f["topic"] = json!(topic_of(f["topic"].as_str().unwrap()));
            f.to_string()
        })
        .collect();
    std::fs::write(case.join("input.jsonl"), input.join("\n")).unwrap();
    let offline = Command::new(streamfold_binary())
        .arg("test")
        .arg(&topology_path)
        .arg(&case)
        .arg("--bless")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    assert!(
        offline.status.success(),
        "streamfold test: {}{}",
        String::from_utf8_lossy(&offline.stdout),
        String::from_utf8_lossy(&offline.stderr)
    );

    // On the broker: the same records, written as a producer would.
    let text = TOPOLOGY;
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let loaded = topology::load_str("parity.yaml", text, &lookup).unwrap();
    let codecs = Codecs::new(&loaded).unwrap();
    let producer = TestProducer::new();
    for fixture in fixtures() {
        let name = fixture["topic"].as_str().unwrap();
        let source = usize::from(name != "texts");
        let key = match (&fixture["key"], &fixture["raw_key"]) {
            (Value::String(key), _) => Some(codecs.encode_key_as_producer(source, key).unwrap()),
            (_, Value::String(raw)) => Some(raw.as_bytes().to_vec()),
            _ => None,
        };
        let payload = match (&fixture["value"], &fixture["raw"]) {
            (_, Value::String(raw)) => Some(raw.as_bytes().to_vec()),
            (Value::Null, _) => None,
            (value, _) => Some(codecs.encode_as_producer(source, value).unwrap()),
        };
        producer.send_maybe(&topic_of(name), key.as_deref(), payload.as_deref());
    }
    producer.flush();
    let ends = |topic: &str| producer.ends(topic, 1);
    let running = App::start(
        &AppConfig {
            topology: topology_path.clone(),
            instance: "a".into(),
            state_dir: dir.path().join("state"),
            env: env.clone(),
            txn_header: false,
            args: Vec::new(),
        },
        dir.path(),
    );
    for topic in [&texts, &avro_keys] {
        wait_committed_to(
            &running,
            &app,
            topic,
            &ends(topic),
            Duration::from_secs(120),
        );
    }
    running.stop();

    let expected = case.join("expected");
    for (topic, sink) in [(&as_json, Some(0)), (&as_avro, Some(1)), (&dlq, None)] {
        let records = read_to_end(topic, Duration::from_secs(60));
        let actual: Vec<Value> = records
            .iter()
            .map(|record| {
                let value = match (&record.payload, sink) {
                    (None, _) => Ok(Value::Null),
                    (Some(bytes), Some(sink)) => codecs
                        .decode_as_consumer(sink, bytes)
                        .map_err(|_| String::from_utf8_lossy(bytes).into_owned()),
                    (Some(bytes), None) => serde_json::from_slice(bytes)
                        .map_err(|_| String::from_utf8_lossy(bytes).into_owned()),
                };
                let headers: Map<String, Value> = ["node", "class", "reason"]
                    .iter()
                    .filter_map(|h| {
                        let name = format!("streamfold.dlq.{h}");
                        Some((name.clone(), json!(record.header(&name)?)))
                    })
                    .collect();
                line(record.key.clone(), value, headers)
            })
            .collect();
        assert_eq!(
            sorted(actual),
            sorted(blessed(&expected, topic)),
            "{topic}: run (left) and streamfold test (right) differ"
        );
        if sink.is_none() {
            // Every edge case reached the dead-letter topic: the large
            // record once per sink, cut to fit.
            let mut codes: Vec<&str> = records
                .iter()
                .map(|r| r.header("streamfold.dlq.reason_code").unwrap_or("none"))
                .collect();
            codes.sort_unstable();
            assert_eq!(
                codes,
                [
                    "missing_value",
                    "record_too_large",
                    "record_too_large",
                    "undecodable_key",
                    "undecodable_value",
                    "unencodable"
                ]
            );
            assert!(
                records
                    .iter()
                    .any(|r| r.header("streamfold.dlq.truncated").is_some()),
                "a dead letter too large for its topic is cut"
            );
        }
    }
}
