//! Avro in the Confluent wire format, end to end without a broker: codecs
//! against the in-process schema registry, the dead letters a pipeline
//! produces for undecodable records and for values a sink schema rejects,
//! the example schemas against every example's records, and a third-party
//! Avro implementation (Python `fastavro`) reading what we write.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use streamfold::config::types::HumanDuration;
use streamfold::formats::{Codecs, FormatError};
use streamfold::record::ErrorClass;
use streamfold::record::avro::{self, AvroSchema, read_schema_file};
use streamfold::record::json as json_format;
use streamfold::testkit::Driver;
use streamfold::topology::{Topology, load_str};

mod support;

use support::fastavro::{fastavro, hex, unhex};
use support::registry::SchemaRegistry;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An Avro post-metrics source folded into an Avro sink; `{registry}`,
/// `{sink}` and `{source}` are replaced by YAML fragments.
const TOPOLOGY: &str = "\
name: avro-test
kafka:
  bootstrap_servers: 127.0.0.1:9
schema_registry: {registry}
sources:
  posts:
    topic: posts
    {source}
nodes:
  fold_account:
    type: fold
    input: posts
    key_by: /account_id
    fields:
      metrics: { rule: key_union, from: /metrics }
      posts: { rule: set, from: /post_id }
    quiet_for: 5s
sinks:
  folded:
    topic: folded
    input: fold_account
    {sink}
";

const AVRO_SOURCE: &str =
    "format: avro\n    schema: schemas/post-metric-updated.avsc\n    key_format: avro";
const AVRO_SINK: &str = "format: avro\n    schema: schemas/account-metrics-folded.avsc\n    key_format: avro\n    key_schema: schemas/account-id.avsc";

fn topology_with(registry: &str, source: &str, sink: &str) -> Topology {
    let text = TOPOLOGY
        .replace("{registry}", registry)
        .replace("{source}", source)
        .replace("{sink}", sink);
    // Schema paths are relative to the directory streamfold runs in.
    std::env::set_current_dir(root()).unwrap();
    load_str("avro-test.yaml", &text, &|_| None).unwrap_or_else(|diagnostics| {
        panic!(
            "{}",
            diagnostics
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

fn topology(registry: &SchemaRegistry) -> Topology {
    topology_with(
        &format!("{{ url: \"{}\" }}", registry.url()),
        AVRO_SOURCE,
        AVRO_SINK,
    )
}

fn folded() -> Value {
    json!({
        "account_id": "account_1",
        "metrics": ["comments", "impressions", "likes", "shares"],
        "posts": ["post_1", "post_2", "post_4", "post_6"],
        "folded_count": 4,
        "first_event_at": "2025-01-01T00:00:00.000Z",
        "last_event_at": "2025-01-01T00:00:05.000Z",
        "closed_by": "quiet"
    })
}

fn post(n: u32) -> Value {
    json!({"post_id": format!("post_{n}"), "account_id": "account_1", "metrics": {"likes": n}})
}

fn setup_message(result: Result<Codecs, FormatError>) -> String {
    match result {
        Ok(_) => panic!("the codecs were set up"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sink_values_round_trip_with_the_registered_schema_id() {
    let registry = SchemaRegistry::start().unwrap();
    let codecs = Codecs::new(&topology(&registry)).unwrap();
    assert_eq!(registry.subjects(), vec!["folded-key", "folded-value"]);
    let (version, id, schema) = registry.latest("folded-value").unwrap();
    assert_eq!(version, 1);
    assert!(schema.contains("AccountMetricsFolded"));

    let bytes = codecs.encode(0, &folded()).unwrap();
    assert_eq!(bytes[0], 0, "magic byte");
    assert_eq!(u32::from_be_bytes(bytes[1..5].try_into().unwrap()), id);
    assert_eq!(codecs.decode_as_consumer(0, &bytes).unwrap(), folded());

    // A second start registers nothing new: same subject, same id.
    let again = Codecs::new(&topology(&registry)).unwrap();
    assert_eq!(again.encode(0, &folded()).unwrap(), bytes);
    assert_eq!(registry.latest("folded-value").unwrap().0, 1);
}

#[test]
fn source_records_decode_by_the_id_they_carry_fetched_once() {
    let registry = SchemaRegistry::start().unwrap();
    let producer = Codecs::new(&topology(&registry)).unwrap();
    let records: Vec<Vec<u8>> = (1..=50)
        .map(|n| producer.encode_as_producer(0, &post(n)).unwrap())
        .collect();
    assert!(registry.subjects().contains(&"posts-value".to_string()));

    let consumer = Codecs::new(&topology(&registry)).unwrap();
    let before = registry.requests();
    for (n, bytes) in (1..=50).zip(&records) {
        assert_eq!(consumer.decode(0, bytes).unwrap(), post(n));
    }
    assert_eq!(
        registry.requests() - before,
        1,
        "the writer schema is fetched once, then cached"
    );
}

#[test]
fn undecodable_records_are_errors_that_say_why() {
    let registry = SchemaRegistry::start().unwrap();
    let codecs = Codecs::new(&topology(&registry)).unwrap();
    let good = codecs.encode_as_producer(0, &post(1)).unwrap();

    let json_bytes = json_format::encode(&post(1));
    let reason = codecs.decode(0, &json_bytes).unwrap_err().reason;
    assert!(
        reason.contains("the first byte is 0x7b, not the magic byte 0x00")
            && reason.contains("looks like JSON"),
        "{reason}"
    );

    let unknown = avro::frame(4242, &good[5..]);
    let reason = codecs.decode(0, &unknown).unwrap_err().reason;
    assert!(
        reason.contains("schema id 4242 is not in the schema registry"),
        "{reason}"
    );

    let truncated = &good[..good.len() - 2];
    let reason = codecs.decode(0, truncated).unwrap_err().reason;
    assert!(
        reason.starts_with("schema id ") && reason.contains("the Avro body"),
        "{reason}"
    );

    let reason = codecs.decode(0, &[0, 0, 1]).unwrap_err().reason;
    assert!(
        reason.contains("shorter than the 5-byte header"),
        "{reason}"
    );
    assert!(codecs.decode(0, &[]).is_err());

    // Unknown ids are remembered: asking again costs no request.
    let before = registry.requests();
    assert!(codecs.decode(0, &unknown).is_err());
    assert_eq!(registry.requests(), before);
}

#[test]
fn values_that_do_not_fit_the_sink_schema_are_errors_that_say_where() {
    let registry = SchemaRegistry::start().unwrap();
    let codecs = Codecs::new(&topology(&registry)).unwrap();
    let reject = |change: &dyn Fn(&mut Value)| {
        let mut value = folded();
        change(&mut value);
        codecs.encode(0, &value).unwrap_err()
    };
    let reason = reject(&|v| v["closed_by"] = json!("later"));
    assert!(
        reason.contains("/closed_by: `later` is not a symbol of enum `streamfold.examples.social.ClosedBy` (quiet, max_wait, max_events, max_bytes)"),
        "{reason}"
    );
    let reason = reject(&|v| v["folded_count"] = json!("four"));
    assert!(
        reason.contains("/folded_count: expected long, found a string"),
        "{reason}"
    );
    let reason = reject(&|v| v["metrics"] = json!(["likes", 3]));
    assert!(
        reason.contains("/metrics/1: expected string, found a number"),
        "{reason}"
    );
    let reason = reject(&|v| {
        v.as_object_mut().unwrap().remove("account_id");
    });
    assert!(reason.contains("/account_id: missing"), "{reason}");
    let reason = reject(&|v| v["max_len"] = json!(3));
    assert!(reason.contains("has no field `max_len`"), "{reason}");
    assert!(codecs.encode(0, &json!("not a record")).is_err());
}

#[test]
fn avro_keys_use_the_key_subject_and_read_back_as_text() {
    let registry = SchemaRegistry::start().unwrap();
    let codecs = Codecs::new(&topology(&registry)).unwrap();
    let key = codecs.encode_key(0, b"account_1").unwrap();
    let (_, key_id, _) = registry.latest("folded-key").unwrap();
    assert_eq!(key[..5], avro::frame(key_id, &[])[..]);
    // The source reads Avro keys too (here, the same bytes).
    assert_eq!(&*codecs.decode_key(0, &key).unwrap(), b"account_1");
    let reason = codecs.decode_key(0, b"account_1").unwrap_err().reason;
    assert!(reason.starts_with("key: not Confluent Avro"), "{reason}");
}

#[test]
fn a_registry_failing_briefly_is_retried_and_one_failing_on_is_reported() {
    let registry = SchemaRegistry::start().unwrap();
    // Startup rides out a registry that answers 503 a few times.
    registry.fail_next(3);
    let codecs = Codecs::new(&topology(&registry)).unwrap();
    let bytes = codecs.encode_as_producer(0, &post(7)).unwrap();

    let reader = Codecs::new(&topology(&registry)).unwrap();
    registry.fail_next(2);
    assert_eq!(reader.decode(0, &bytes).unwrap(), post(7));

    let fresh = Codecs::new(&topology(&registry)).unwrap();
    registry.fail_next(100);
    let started = Instant::now();
    let error = fresh.decode(0, &bytes).unwrap_err();
    let reason = &error.reason;
    assert!(
        reason.contains("unreachable after 4 attempts")
            && reason.contains("not available (error code 50301)"),
        "{reason}"
    );
    // The outside world's fault: dead-lettered as `external`, attempts told.
    assert_eq!((error.class, error.attempts), (ErrorClass::External, 4));
    // processing.retry defaults: waits of 100, 200, 400 ms, each ±20%.
    assert!(started.elapsed().as_millis() >= 560, "backoff waits");
    // Not cached as missing: once the registry is back, the record decodes.
    registry.fail_next(0);
    assert_eq!(fresh.decode(0, &bytes).unwrap(), post(7));
}

#[test]
fn an_unreachable_registry_stops_startup_with_a_clear_error() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let topology = topology_with(&format!("{{ url: \"{url}\" }}"), AVRO_SOURCE, AVRO_SINK);
    let message = setup_message(Codecs::new(&topology));
    assert!(
        message.starts_with(
            "sink `folded`: cannot register `schemas/account-metrics-folded.avsc` as `folded-value`"
        ) && message.contains(&format!(
            "schema registry {url} unreachable after 6 attempts"
        )),
        "{message}"
    );
}

#[test]
fn without_registration_sinks_write_with_the_latest_registered_version() {
    let registry = SchemaRegistry::start().unwrap();
    let sink = "format: avro\n    schema: schemas/account-metrics-folded.avsc\n    register: false";
    let config = format!("{{ url: \"{}\" }}", registry.url());
    let message = setup_message(Codecs::new(&topology_with(&config, AVRO_SOURCE, sink)));
    assert!(
        message.contains("subject `folded-value` has no registered version")
            && message.contains("set `register: true`"),
        "{message}"
    );

    let text = std::fs::read_to_string(root().join("schemas/account-metrics-folded.avsc")).unwrap();
    let id = registry.register("folded-value", &text).unwrap();
    let codecs = Codecs::new(&topology_with(&config, AVRO_SOURCE, sink)).unwrap();
    let bytes = codecs.encode(0, &folded()).unwrap();
    assert_eq!(u32::from_be_bytes(bytes[1..5].try_into().unwrap()), id);
    assert_eq!(
        registry.latest("folded-value").unwrap().0,
        1,
        "nothing registered"
    );
}

#[test]
fn basic_auth_credentials_from_the_topology_reach_the_registry() {
    let registry = SchemaRegistry::start_with_basic_auth("key", "s3cret").unwrap();
    let with = format!(
        "{{ url: \"{}\", username: key, password: s3cret }}",
        registry.url()
    );
    let codecs = Codecs::new(&topology_with(&with, AVRO_SOURCE, AVRO_SINK)).unwrap();
    assert!(codecs.encode(0, &folded()).is_ok());

    let without = format!("{{ url: \"{}\" }}", registry.url());
    let message = setup_message(Codecs::new(&topology_with(
        &without,
        AVRO_SOURCE,
        AVRO_SINK,
    )));
    assert!(
        message.contains("Unauthorized (error code 401)"),
        "{message}"
    );
}

/// A JSON post-metrics topology folding into an Avro sink written with
/// `schema`, run offline.
fn driver_with_sink_schema(registry: &SchemaRegistry, schema: &Path) -> Driver {
    let sink = format!("format: avro\n    schema: {}", schema.display());
    let config = format!("{{ url: \"{}\" }}", registry.url());
    Driver::new(Arc::new(topology_with(&config, "format: json", &sink))).unwrap()
}

fn feed_burst(driver: &mut Driver) {
    for n in 1..=3 {
        driver
            .feed_json("posts", Some(&format!("post_{n}")), &post(n))
            .unwrap();
    }
    driver.advance(HumanDuration::from_secs(10)).unwrap();
}

fn header<'r>(headers: &'r [(String, String)], name: &str) -> Option<&'r str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn folded_values_the_sink_schema_rejects_become_dead_letters() {
    let registry = SchemaRegistry::start().unwrap();
    let mut good =
        driver_with_sink_schema(&registry, Path::new("schemas/account-metrics-folded.avsc"));
    feed_burst(&mut good);
    assert_eq!(good.received("folded").len(), 1);
    assert!(good.received("avro-test-dlq").is_empty());

    // A schema whose enum lacks the symbol the fold emits.
    let dir = tempfile::tempdir().unwrap();
    let narrow = dir.path().join("narrow.avsc");
    let text = std::fs::read_to_string(root().join("schemas/account-metrics-folded.avsc"))
        .unwrap()
        .replace(
            r#"["quiet", "max_wait", "max_events", "max_bytes"]"#,
            r#"["max_wait", "max_events", "max_bytes"]"#,
        );
    std::fs::write(&narrow, text).unwrap();
    // Its own registry: this one would refuse it as incompatible.
    let other = SchemaRegistry::start().unwrap();
    let mut bad = driver_with_sink_schema(&other, &narrow);
    feed_burst(&mut bad);
    assert!(bad.received("folded").is_empty());
    let letters = bad.received("avro-test-dlq");
    assert_eq!(letters.len(), 1);
    let reason = header(&letters[0].headers, "streamfold.dlq.reason").unwrap();
    assert!(
        reason.contains("/closed_by: `quiet` is not a symbol of enum"),
        "{reason}"
    );
    assert_eq!(
        header(&letters[0].headers, "streamfold.dlq.node"),
        Some("folded")
    );
    assert_eq!(
        header(&letters[0].headers, "streamfold.dlq.class"),
        Some("record")
    );
}

#[test]
fn records_an_avro_source_cannot_decode_become_dead_letters() {
    let registry = SchemaRegistry::start().unwrap();
    let config = format!("{{ url: \"{}\" }}", registry.url());
    let topology = topology_with(&config, "format: avro", "format: json");
    let mut driver = Driver::new(Arc::new(topology)).unwrap();
    // JSON bytes to an Avro source: a producer using the wrong serializer.
    let json_bytes = serde_json::to_vec(&post(1)).unwrap();
    driver
        .feed_raw("posts", Some("post_1"), &json_bytes)
        .unwrap();
    let letters = driver.received("avro-test-dlq");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].value, Ok(post(1)), "the original bytes are kept");
    let reason = header(&letters[0].headers, "streamfold.dlq.reason").unwrap();
    assert!(reason.contains("not the magic byte 0x00"), "{reason}");
    assert_eq!(
        header(&letters[0].headers, "streamfold.dlq.node"),
        Some("posts")
    );
}

#[test]
fn offline_codecs_read_and_write_avro_from_the_topology_s_schema_files() {
    // The topology names a registry nobody runs; offline codecs never
    // contact it: the schemas are the topology's files, numbered in memory.
    let topology = topology_with("{ url: \"http://127.0.0.1:9\" }", AVRO_SOURCE, AVRO_SINK);
    let codecs = Codecs::offline(&topology).unwrap();
    let bytes = codecs.encode_as_producer(0, &post(3)).unwrap();
    assert_eq!(codecs.decode(0, &bytes).unwrap(), post(3));
    let folded = json!({"account_id": "account_1", "metrics": ["likes"], "posts": ["post_1"],
                        "folded_count": 1, "first_event_at": "2025-01-01T00:00:00.000Z",
                        "last_event_at": "2025-01-01T00:00:00.000Z", "closed_by": "quiet"});
    let written = codecs.encode(0, &folded);
    let written = written.unwrap_or_else(|e| panic!("the sink's schema file writes it: {e}"));
    assert_eq!(
        codecs.decode_as_consumer(0, &written).unwrap()["account_id"],
        json!("account_1")
    );
    codecs.encode_key(0, b"account_1").unwrap();
    // An id the topology's schemas do not have is the record's fault.
    let unknown = avro::frame(99, &[0]);
    let error = codecs.decode(0, &unknown).unwrap_err();
    assert!(error.reason.contains("schema id 99"), "{}", error.reason);

    let json_only = topology_with(
        "{ url: \"http://127.0.0.1:9\" }",
        "format: json",
        "format: json",
    );
    Codecs::offline(&json_only).unwrap();
}

/// Which schema each example topic is written with.
const EXAMPLE_SCHEMAS: &[(&str, &str)] = &[
    ("post-metric-updated", "post-metric-updated.avsc"),
    ("account-metrics-folded", "account-metrics-folded.avsc"),
    ("question-feed-events", "question-feed-event.avsc"),
    ("question-feed-other-events", "question-feed-event.avsc"),
    ("question-read-models", "question-read-model.avsc"),
    ("answer-thanks", "answer-thanks.avsc"),
    ("counter-events", "counter-event.avsc"),
    ("counter-reads", "counter-read.avsc"),
    ("counter-values", "counter-value.avsc"),
    ("payment-events", "payment-event.avsc"),
    ("account-balances", "account-balance.avsc"),
];

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `value` written with `schema` and read back: every field it had comes
/// back equal (times written as RFC 3339 text come back as epoch millis,
/// whole numbers written as doubles as `10.0`);
/// fields it did not have come back null or with their default.
fn check_fits(schema: &AvroSchema, value: &Value, what: &str) -> Result<(), String> {
    let body = schema.encode(value).map_err(|e| format!("{what}: {e}"))?;
    let back = schema.decode(&body).map_err(|e| format!("{what}: {e}"))?;
    let (Some(original), Some(read)) = (value.as_object(), back.as_object()) else {
        return Err(format!("{what}: not a record"));
    };
    for (field, v) in original {
        let same = match (&read[field], v) {
            (Value::Number(n), Value::String(text)) => {
                json_format::parse_timestamp(&json!(text)) == n.as_i64()
            }
            // A whole number written as a double reads back as `10.0`.
            (Value::Number(r), Value::Number(v)) => r.as_f64() == v.as_f64(),
            (r, v) => r == v,
        };
        if !same {
            return Err(format!("{what}: /{field} read back as {}", read[field]));
        }
    }
    Ok(())
}

#[test]
fn the_example_schemas_fit_every_example_record() {
    let schemas: Vec<(&str, AvroSchema)> = EXAMPLE_SCHEMAS
        .iter()
        .map(|(topic, file)| {
            let schema = read_schema_file(&root().join("schemas").join(file))
                .unwrap_or_else(|e| panic!("{e}"));
            (*topic, schema)
        })
        .collect();
    let schema_of = |topic: &str| schemas.iter().find(|(t, _)| *t == topic).map(|(_, s)| s);
    let mut checked = 0;
    let mut failures = Vec::new();
    let examples = [
        "social-metrics",
        "question-feed",
        "distributed-counter",
        "partitioned-processing",
    ];
    for example in examples {
        let dir = root().join("tests/cases").join(example);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for case in entries.map(|e| e.unwrap().path()).filter(|p| p.is_dir()) {
            let expected = case.join("expected");
            // Records meant for the dead-letter topic need not fit.
            let dead: Vec<Value> = std::fs::read_dir(&expected)
                .into_iter()
                .flatten()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with("-dlq.jsonl"))
                .flat_map(|p| jsonl(&p))
                .map(|l| l["value"].clone())
                .collect();
            for line in jsonl(&case.join("input.jsonl")) {
                let (Some(topic), Some(value)) = (line["topic"].as_str(), line.get("value")) else {
                    continue;
                };
                if dead.contains(value) {
                    continue;
                }
                let what = format!("{}: input to {topic}", case.display());
                match schema_of(topic) {
                    Some(schema) => failures.extend(check_fits(schema, value, &what).err()),
                    None => failures.push(format!("{what}: no schema for the topic")),
                }
                checked += 1;
            }
            for output in std::fs::read_dir(&expected).into_iter().flatten() {
                let path = output.unwrap().path();
                let topic = path.file_stem().unwrap().to_string_lossy().into_owned();
                if topic.ends_with("-dlq") {
                    continue;
                }
                for line in jsonl(&path) {
                    let what = format!("{}: output to {topic}", case.display());
                    match schema_of(&topic) {
                        Some(schema) => {
                            failures.extend(check_fits(schema, &line["value"], &what).err())
                        }
                        None => failures.push(format!("{what}: no schema for the topic")),
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 20, "only {checked} example records found");
}

#[test]
fn fastavro_reads_what_we_write_and_we_read_what_it_writes() {
    let registry = SchemaRegistry::start().unwrap();
    let codecs = Codecs::new(&topology(&registry)).unwrap();
    let values = vec![
        folded(),
        json!({
            "account_id": "account_2",
            "metrics": [],
            "posts": ["post_3"],
            "folded_count": 9_007_199_254_740_993_i64,
            "first_event_at": "2025-01-01T00:00:02.000Z",
            "last_event_at": "2025-01-01T00:00:04.000Z",
            "closed_by": "max_events"
        }),
        json!({
            "account_id": "ünïcödé ✓",
            "metrics": ["a"],
            "posts": [],
            "folded_count": -1,
            "first_event_at": "",
            "last_event_at": "",
            "closed_by": "max_wait"
        }),
    ];
    // What a Confluent consumer does: strip the 5-byte header, decode the
    // body with the writer schema (the one registered under that id).
    let mut bodies = Vec::new();
    for value in &values {
        let framed = codecs.encode(0, value).unwrap();
        let (id, body) = avro::unframe(&framed).unwrap();
        assert_eq!(Some(id), registry.latest("folded-value").map(|l| l.1));
        bodies.push(hex(body));
    }
    let (_, id, schema_text) = registry.latest("folded-value").unwrap();
    let schema: Value = serde_json::from_str(&schema_text).unwrap();
    let answer = fastavro(&json!({"schema": schema, "read": bodies, "write": values}));
    assert_eq!(
        answer["read"],
        json!(values),
        "fastavro {}",
        answer["fastavro"]
    );

    // And the other way: bodies fastavro wrote, framed with the id.
    let written = answer["write"].as_array().unwrap();
    assert_eq!(written.len(), values.len());
    for (body, value) in written.iter().zip(&values) {
        let framed = avro::frame(id, &unhex(body.as_str().unwrap()));
        assert_eq!(codecs.decode_as_consumer(0, &framed).unwrap(), *value);
    }
}

#[test]
fn fastavro_agrees_on_logical_types_and_unions() {
    let text = r#"{"type": "record", "name": "Mixed", "namespace": "t", "fields": [
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "maybe", "type": ["null", "string", "long"]},
        {"name": "tags", "type": {"type": "map", "values": "double"}},
        {"name": "raw", "type": "bytes"}
    ]}"#;
    let schema = AvroSchema::parse(text).unwrap();
    let ours = json!({"price": "-12.34", "at": 1_735_689_600_123_i64, "maybe": 7, "tags": {"a": 0.5}, "raw": "\u{0}\u{ff}"});
    let body = schema.encode(&ours).unwrap();
    let answer = fastavro(
        &json!({"schema": serde_json::from_str::<Value>(text).unwrap(), "read": [hex(&body)]}),
    );
    // fastavro's Decimal and datetime come back as text and epoch millis.
    assert_eq!(answer["read"][0], ours);
    assert_eq!(schema.decode(&body).unwrap(), ours);
}
