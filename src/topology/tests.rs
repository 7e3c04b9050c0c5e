use super::*;

const MINIMAL: &str = "\
name: app
kafka:
  bootstrap_servers: localhost:9092
sources:
  events:
    topic: events
nodes:
  fold_account:
    type: fold
    input: events
    fields:
      metrics: { rule: key_union, from: /metrics }
    quiet_for: 5s
sinks:
  folded:
    topic: folded
    input: fold_account
";

fn load(text: &str) -> Result<Topology, Vec<String>> {
    load_str("t.yaml", text, &|_| None).map_err(|ds| ds.iter().map(ToString::to_string).collect())
}

#[test]
fn internal_topic_replication_is_checked_where_it_is_written() {
    let with = |settings: &str| {
        MINIMAL.replace(
            "  bootstrap_servers: localhost:9092\n",
            &format!("  bootstrap_servers: localhost:9092\n  internal_topics: {settings}\n"),
        )
    };
    let topology = load(&with("{ replication_factor: 3, min_insync_replicas: 2 }")).unwrap();
    let replication = &topology.kafka.internal_topics;
    assert_eq!(replication.replication_factor.map(|r| r.get()), Some(3));
    assert_eq!(replication.min_insync_replicas.map(|r| r.get()), Some(2));
    assert_eq!(
        load(&with("{ replication_factor: 2, min_insync_replicas: 3 }")).unwrap_err(),
        vec![
            "t.yaml:4:66: kafka.internal_topics.min_insync_replicas: 3 in-sync replicas cannot \
                 be required of 2 replicas (replication_factor); no write would ever succeed"
        ]
    );
    assert!(load(&with("{ replication_factor: 0 }")).is_err());
}

#[test]
fn a_valid_topology_compiles_with_its_internal_topics() {
    let topology = load(MINIMAL).unwrap();
    assert_eq!(topology.dead_letter_topic, "app-dlq");
    let internal: Vec<String> = topology
        .internal_topics()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        internal,
        vec![
            "app-fold_account-open-changelog",
            "app-fold_account-timers-changelog",
            "app-dlq"
        ]
    );
    assert_eq!(
        topology.sources[0].targets,
        vec![Target::Node { node: 0, input: 0 }]
    );
    assert_eq!(topology.nodes[0].targets[0], vec![Target::Sink(0)]);
}

#[test]
fn every_error_in_a_file_is_reported_at_once() {
    let text = MINIMAL
        .replace("quiet_for: 5s", "quiet_for: soon")
        .replace("input: fold_account", "input: fold_acount")
        .replace("topic: events", "topic: events\n    formt: json");
    let errors = load(&text).unwrap_err();
    assert_eq!(
        errors,
        vec![
            "t.yaml:7:5: sources.events.formt: unknown field `formt`, did you mean `format`?",
            "t.yaml:14:16: nodes.fold_account.quiet_for: expected a duration like \"5m\" or \"250ms\", found \"soon\"",
            "t.yaml:18:12: sinks.folded.input: unknown input `fold_acount`, did you mean `fold_account`?",
        ]
    );
}

/// Found by `tests/topology_fuzz.rs`: `coalesce: 1ns` passed the "longer
/// than zero" check, but timers count milliseconds, so a rollup
/// re-armed its counter at `now + 0` and fired it for ever. Every
/// duration that must be longer than zero must be at least 1 ms.
#[test]
fn durations_under_a_millisecond_are_refused_where_zero_is() {
    let fold = MINIMAL.replace("quiet_for: 5s", "quiet_for: 1ns");
    let processing = MINIMAL.replace(
        "nodes:",
        "processing:\n  punctuation_interval: 999us\nnodes:",
    );
    let dedup = MINIMAL.replace(
            "sinks:",
            "  dedup_events:\n    type: dedup\n    input: events\n    key_by: /account_id\n    id_field: /id\n    retention: 500us\nsinks:",
        );
    let rollup = MINIMAL.replace(
            "sinks:",
            "  rollup_counts:\n    type: rollup\n    input: events\n    key_by: /counter\n    token: /token\n    coalesce: 1ns\n    accept_limit: 1h\nsinks:",
        );
    for (text, field) in [
        (fold, "quiet_for"),
        (processing, "punctuation_interval"),
        (dedup, "retention"),
        (rollup, "coalesce"),
    ] {
        let errors = load(&text).expect_err(field);
        assert!(
            errors
                .iter()
                .any(|e| e.contains(field) && e.contains("at least 1ms")),
            "{field}: {errors:?}"
        );
    }
}

/// `processing.threads`: the number of cores unless set, and at least
/// one.
#[test]
fn processing_threads_default_to_the_cores_and_must_be_at_least_one() {
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(load(MINIMAL).unwrap().processing.threads(), cores);
    let with = |n: &str| MINIMAL.replace("nodes:", &format!("processing:\n  threads: {n}\nnodes:"));
    assert_eq!(load(&with("3")).unwrap().processing.threads(), 3);
    let errors = load(&with("0")).expect_err("threads: 0");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("processing.threads") && e.contains("at least 1")),
        "{errors:?}"
    );
}

/// The `state:` section: sizes in any unit or bytes, defaults for what
/// is left out, and a clear error for what RocksDB cannot work with.
#[test]
fn the_state_section_takes_sizes_and_refuses_what_cannot_work() {
    let default = load(MINIMAL).unwrap().state;
    assert_eq!(default.block_cache.0, 64 << 20);
    assert_eq!(default.write_buffers.0, 128 << 20);
    assert_eq!(default.max_open_files, 1000);
    assert_eq!(default.cache_entries, 100_000);
    assert_eq!(default.record_cache.0, 64 << 20);

    let with = |section: &str| MINIMAL.replace("nodes:", &format!("state:\n{section}nodes:"));
    let state = load(&with(
            "  block_cache: 1GiB\n  write_buffers: 500MB\n  max_open_files: 64\n  cache_entries: 10\n  record_cache: 0\n",
        ))
        .unwrap()
        .state;
    assert_eq!(state.record_cache.0, 0, "no record cache at all");
    assert_eq!(state.block_cache.0, 1 << 30);
    assert_eq!(state.write_buffers.0, 500_000_000);
    assert_eq!(state.max_open_files, 64);
    assert_eq!(state.cache_entries, 10);
    assert_eq!(
        load(&with("  block_cache: 2097152\n"))
            .unwrap()
            .state
            .block_cache
            .0,
        2 << 20,
        "a bare number is bytes"
    );

    for (section, expected) in [
        (
            "  block_cache: 512KiB\n",
            "state.block_cache: 512KiB is too small: at least 1MiB",
        ),
        (
            "  write_buffers: 10\n",
            "state.write_buffers: 10B is too small: at least 1MiB",
        ),
        (
            "  max_open_files: 3\n",
            "state.max_open_files: must be at least 16",
        ),
        (
            "  block_cache: lots\n",
            "state.block_cache: expected a size like \"64MiB\" or \"1GB\", found \"lots\"",
        ),
        (
            "  cache_size: 5\n",
            "state.cache_size: unknown field `cache_size`",
        ),
    ] {
        let errors = load(&with(section)).expect_err(section);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{section}: {errors:?}"
        );
    }
}

#[test]
fn absurd_retry_settings_are_errors_not_panics() {
    for retry in [
        "{ jitter: .nan }",
        "{ multiplier: .nan }",
        "{ multiplier: .inf, max_attempts: 9 }",
        "{ jitter: .inf, max_attempts: 3 }",
        "{ initial_backoff: 100000000y, max_backoff: 100000000y, max_attempts: 4294967295 }",
    ] {
        let text = MINIMAL.replace(
            "    topic: events\n",
            &format!("    topic: events\n    retry: {retry}\n"),
        );
        let errors = load(&text).unwrap_err();
        assert!(
            !errors.is_empty() && errors.iter().all(|e| e.contains(": sources.events.retry")),
            "{retry}: {errors:?}"
        );
    }
}

#[test]
fn a_count_too_large_for_its_field_says_how_large_it_may_be() {
    let text = MINIMAL.replace(
        "    topic: events\n",
        "    topic: events\n    retry: { max_attempts: 9223372036854775807 }\n",
    );
    assert_eq!(
        load(&text).unwrap_err(),
        vec![
            "t.yaml:7:28: sources.events.retry.max_attempts: must be at most 4294967295, found integer `9223372036854775807`"
        ]
    );
}

#[test]
fn an_input_that_is_neither_a_name_nor_a_list_says_what_input_takes() {
    let text = MINIMAL.replace("    input: fold_account\n", "    input: { a: 1 }\n");
    assert_eq!(
        load(&text).unwrap_err(),
        vec!["t.yaml:16:5: sinks.folded: `input` takes a source or node name, or a list of them"]
    );
}

#[test]
fn cycles_are_named() {
    let text = "\
name: app
kafka: { bootstrap_servers: x }
sources: { s: { topic: t } }
nodes:
  a: { type: fold, input: [s, b], fields: { n: { rule: count } }, max_events: 2 }
  b: { type: fold, input: a, fields: { n: { rule: count } }, max_events: 2 }
sinks: { out: { topic: o, input: b } }
";
    let errors = load(text).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("cycle: "), "{}", errors[0]);
}

const JOINED: &str = "\
name: app
kafka:
  bootstrap_servers: localhost:9092
sources:
  orders:
    topic: orders
  customers:
    topic: customers
    kind: table
nodes:
  enrich:
    type: join
    input: [orders, customers]
    key_by: /customer_id
sinks:
  enriched:
    topic: enriched
    input: enrich
";

#[test]
fn a_join_of_a_stream_and_a_table_compiles_with_the_table_s_store() {
    let topology = load(JOINED).unwrap();
    let node = &topology.nodes[0];
    assert_eq!(
        node.input_info
            .iter()
            .map(|i| (i.name.as_str(), i.table))
            .collect::<Vec<_>>(),
        vec![("orders", false), ("customers", true)]
    );
    let internal: Vec<String> = topology
        .internal_topics()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        internal.contains(&"app-enrich-table-changelog".to_string()),
        "{internal:?}"
    );
    assert!(internal.contains(&"app-enrich-repartition".to_string()));
}

#[test]
fn tables_and_joins_are_checked_where_they_are_written() {
    // A table read by an operator that reads streams.
    let text = JOINED.replace(
        "    type: join\n    input: [orders, customers]\n    key_by: /customer_id\n",
        "    type: map\n    input: customers\n    expression: .\n",
    );
    assert_eq!(
        load(&text).unwrap_err(),
        vec![
            "t.yaml:13:12: nodes.enrich.input: `customers` is a table (`kind: table`): `map` nodes read streams; join it with a `join` node, or send it to a sink"
        ]
    );
    // A table without keys.
    let text = JOINED.replace(
        "    kind: table\n",
        "    kind: table\n    key_format: none\n",
    );
    assert_eq!(
        load(&text).unwrap_err(),
        vec![
            "t.yaml:10:17: sources.customers.key_format: a table holds the latest value of each key: its records need their key, so `key_format: none` does not apply"
        ]
    );
    // The table first.
    let text = JOINED.replace("[orders, customers]", "[customers, orders]");
    assert_eq!(
        load(&text).unwrap_err(),
        vec![
            "t.yaml:13:12: nodes.enrich.input: `customers` is a table and `orders` a stream: put the stream first (`input: [orders, customers]`), it is what joins the table"
        ]
    );
    // A table copied to a sink is fine.
    let text = JOINED.replace("    input: enrich\n", "    input: [enrich, customers]\n");
    assert!(load(&text).is_ok());
}

/// `JOINED` with the customers read as a global table, by a field.
fn global_joined() -> String {
    JOINED
        .replace("    kind: table\n", "    kind: global_table\n")
        .replace(
            "    key_by: /customer_id\n",
            "    table_key: /customer_id\n",
        )
}

#[test]
fn a_global_table_is_left_out_of_the_group_and_read_by_joins_only() {
    let topology = load(&global_joined()).unwrap();
    let groups: Vec<&str> = topology.group_sources().map(|s| s.name.as_str()).collect();
    assert_eq!(groups, ["orders"]);
    // No store: the instance holds the table; no repartition topic.
    assert!(topology.stores().next().is_none());
    assert!(topology.nodes[0].repartition_topic.is_none());
    // Copied to a sink: refused, a sink reads it as `kind: table`.
    let text = global_joined().replace("    input: enrich\n", "    input: [enrich, customers]\n");
    assert_eq!(
        load(&text).unwrap_err(),
        vec![
            "t.yaml:18:12: sinks.enriched.input: `customers` is a global table: every instance reads it whole, for joins; a sink reads it as `kind: table`"
        ]
    );
    // `key_by` does not apply: the row's key comes from `table_key`.
    let text = global_joined().replace(
        "    table_key: /customer_id\n",
        "    table_key: /customer_id\n    key_by: /customer_id\n",
    );
    let errors = load(&text).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("nodes.enrich.key_by"), "{errors:?}");
    // Only global tables: nothing for the group to process.
    let text = "\
name: app
kafka: { bootstrap_servers: localhost:9092 }
sources:
  customers: { topic: customers, kind: global_table }
sinks:
  out: { topic: o, input: customers }
";
    let errors = load(text).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("every source is a global table")),
        "{errors:?}"
    );
}
