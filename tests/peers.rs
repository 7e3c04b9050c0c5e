//! The Kafka Streams peer of the benchmarks (`benches/peers/kafka-streams/`)
//! does streamfold's work: on the same input, on the same broker, it writes
//! the same folds, read models, windows and joined orders, so the benchmarks compare the
//! same work. The only tests that start the JVM peer.
//!
//! What is compared does not depend on timing. The folds close by
//! `max_events` only (`quiet_for` and `max_wait` an hour away): an
//! account keyed by itself has its events in one partition, in one order
//! for both systems, so its folds must be equal, one by one; an
//! account whose events are keyed by post is re-keyed through each
//! system's repartition topic, where the interleaving of partitions
//! depends on timing, so only its totals must be equal (events, posts,
//! metrics, folds of `max_events` each). The question feed's outputs are
//! keyed by the entity whose events are in one partition in order, so
//! each key's outputs must be equal, one by one. Values are compared as
//! JSON (an object's fields in any order). The windowed count and the
//! join are compared on input whose order is the same for both systems:
//! one partition of views, and a table committed by both before the
//! orders are written.

mod support;

#[allow(dead_code)] // the benchmark's driver; the test uses part of it
#[path = "../benches/peers/kafka_streams.rs"]
mod kafka_streams;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use kafka_streams::{KafkaStreamsPeer, PeerApp, PeerConfig};
use serde_json::{Value, json};
use streamfold::testkit::article::METRICS;
use support::*;

/// Events per account; a multiple of [`MAX_EVENTS`], so every fold closes.
const EVENTS_PER_ACCOUNT: u64 = 40;
const MAX_EVENTS: u64 = 10;
/// Accounts whose events are keyed by the account.
const IN_PLACE: u64 = 25;
/// Accounts whose events are keyed by the post: the re-key moves them.
const MOVED: u64 = 10;
const PARTITIONS: i32 = 4;

/// Starts streamfold on `topology` (a path in the repository) as
/// application `app`, with `env` besides.
fn start_streamfold(topology: &str, app: &str, env: &[(&str, &str)], dir: &std::path::Path) -> App {
    let config = AppConfig {
        topology: repo().join(topology),
        instance: "peers".into(),
        state_dir: dir.join(app),
        env: env_vars(env),
        txn_header: false,
        args: Vec::new(),
    };
    App::start(&config, dir)
}

/// Starts the peer's `app` as application `id` with `args` (topics and
/// parameters), committing every 100 ms as streamfold does.
fn start_peer(app: PeerApp, id: &str, args: &[&str], dir: &std::path::Path) -> KafkaStreamsPeer {
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.extend(["--commit-interval".into(), "100ms".into()]);
    KafkaStreamsPeer::start(
        &PeerConfig {
            app,
            application_id: id.to_string(),
            state_dir: dir.join(id),
            args,
            heap: Some("384m".into()),
        },
        dir,
    )
}

/// Records by key, each key's JSON values in order. Objects compare
/// field for field whatever the order of their fields: streamfold writes
/// them sorted, the peer in the order the rules build them.
fn values_by_key(records: &[Consumed]) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in records {
        out.entry(r.key.clone().unwrap_or_default())
            .or_default()
            .push(r.json());
    }
    out
}

/// The payloads of dead-lettered records, sorted.
fn dead_letters(records: &[Consumed]) -> Vec<String> {
    let mut out: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
        .collect();
    out.sort();
    out
}

/// An account's folds summed up: events, posts, metrics, folds, and
/// whether every fold closed by `max_events` with that many events.
fn totals(folds: &[Value]) -> Value {
    let (mut events, mut posts, mut metrics) = (0, BTreeSet::new(), BTreeSet::new());
    let mut all_full = true;
    for fold in folds {
        let count = fold["folded_count"].as_u64().unwrap();
        events += count;
        all_full &= count == MAX_EVENTS && fold["closed_by"] == "max_events";
        for p in fold["posts"].as_array().unwrap() {
            posts.insert(p.as_str().unwrap().to_string());
        }
        for m in fold["metrics"].as_array().unwrap() {
            metrics.insert(m.as_str().unwrap().to_string());
        }
    }
    json!({"events": events, "posts": posts, "metrics": metrics, "folds": folds.len(), "all_full": all_full})
}

/// The fold's input: [`IN_PLACE`] accounts keyed by themselves and
/// [`MOVED`] keyed by post, interleaved; then two records to dead-letter.
fn produce_post_metrics(topic: &str) -> u64 {
    create_topic(topic, PARTITIONS);
    let producer = TestProducer::new();
    let accounts = IN_PLACE + MOVED;
    for i in 0..accounts * EVENTS_PER_ACCOUNT {
        let account = i % accounts;
        let account_id = format!("account_{account}");
        let post_id = format!("post_{}", i % 37);
        let value = json!({
            "post_id": post_id,
            "account_id": account_id,
            "metrics": {METRICS[(i % 6) as usize]: i % 97},
        });
        let key = if account < IN_PLACE {
            &account_id
        } else {
            &post_id
        };
        producer.send_json(topic, key, &value);
    }
    producer.send(topic, Some(b"bad-1"), b"{not json", &[]);
    producer.send(
        topic,
        Some(b"bad-2"),
        br#"{"post_id":"post_1","metrics":{"likes":1}}"#,
        &[],
    );
    producer.flush();
    accounts * EVENTS_PER_ACCOUNT / MAX_EVENTS
}

#[test]
fn the_peer_folds_as_streamfold_does() {
    let _serial = serial();
    let dir = temp_dir();
    let input = unique("peers-posts");
    let folds = produce_post_metrics(&input) as usize;

    // streamfold: topologies/social-metrics.yaml, max_events closes only.
    let app = unique("peers-sf");
    let (folded, dlq) = (format!("{app}-folded"), format!("{app}-dlq"));
    let streamfold = start_streamfold(
        "topologies/social-metrics.yaml",
        &app,
        &[
            ("STREAMFOLD_APP", &app),
            ("POST_METRICS_TOPIC", &input),
            ("FOLDED_TOPIC", &folded),
            ("DEAD_LETTER_TOPIC", &dlq),
            ("FOLD_QUIET_FOR", "1h"),
            ("FOLD_MAX_WAIT", "1h"),
            ("FOLD_MAX_EVENTS", &MAX_EVENTS.to_string()),
        ],
        dir.path(),
    );
    let ours = read_topic(
        &folded,
        folds,
        Duration::from_secs(1),
        Duration::from_secs(180),
    );
    let our_dead = read_topic(&dlq, 2, Duration::ZERO, Duration::from_secs(30));
    streamfold.stop();

    // The peer, same input, same parameters.
    let peer_id = unique("peers-ks");
    let (peer_folded, peer_dlq) = (format!("{peer_id}-folded"), format!("{peer_id}-dlq"));
    let peer = start_peer(
        PeerApp::Fold,
        &peer_id,
        &[
            "--input",
            &input,
            "--output",
            &peer_folded,
            "--dead-letter-topic",
            &peer_dlq,
            "--quiet-for",
            "1h",
            "--max-wait",
            "1h",
            "--max-events",
            &MAX_EVENTS.to_string(),
        ],
        dir.path(),
    );
    peer.wait_running(Duration::from_secs(180));
    let theirs = read_topic(
        &peer_folded,
        folds,
        Duration::from_secs(1),
        Duration::from_secs(180),
    );
    let their_dead = read_topic(&peer_dlq, 2, Duration::ZERO, Duration::from_secs(30));
    peer.stop();

    assert_eq!(ours.len(), folds, "streamfold's folds");
    assert_eq!(theirs.len(), folds, "the peer's folds");
    let (ours, theirs) = (values_by_key(&ours), values_by_key(&theirs));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "the same accounts folded"
    );
    for account in 0..IN_PLACE + MOVED {
        let key = format!("account_{account}");
        let (a, b) = (&ours[&key], &theirs[&key]);
        let sums = totals(a);
        assert_eq!(
            sums["events"], EVENTS_PER_ACCOUNT,
            "{key}: streamfold folded every event once: {sums}"
        );
        assert_eq!(sums["all_full"], true, "{key}: {sums}");
        if account < IN_PLACE {
            // Not re-keyed: one order of events, the same folds.
            assert_eq!(a, b, "{key}: the folds differ");
        } else {
            assert_eq!(sums, totals(b), "{key}: the totals differ");
        }
    }
    assert_eq!(our_dead.len(), 2, "streamfold's dead letters");
    assert_eq!(
        dead_letters(&our_dead),
        dead_letters(&their_dead),
        "the same records dead-lettered"
    );
}

#[test]
fn the_peer_projects_the_question_feed_as_streamfold_does() {
    let _serial = serial();
    let dir = temp_dir();
    let input = unique("peers-feed");
    create_topic(&input, PARTITIONS);
    let produced = Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .args(["--bootstrap-servers", &broker().bootstrap])
        .args(["produce", "--workload", "question-feed", "--topic", &input])
        .args(["--events", "3000", "--accounts", "60"])
        .output()
        .unwrap();
    assert!(produced.status.success(), "{produced:?}");
    let producer = TestProducer::new();
    producer.send(&input, Some(b"q3"), b"{not json", &[]);
    producer.send(
        &input,
        Some(b"q3"),
        br#"{"type":"QuestionCreated","question_id":"q3","sequence":1}"#,
        &[],
    );
    producer.send(
        &input,
        Some(b"q3"),
        br#"{"event_id":"viewed-1","type":"QuestionViewed","question_id":"q3"}"#,
        &[],
    );
    producer.flush();
    let ends: Vec<i64> = (0..PARTITIONS).map(|p| partition_end(&input, p)).collect();

    // Each system's outputs: read models, thanks totals, other events,
    // dead letters.
    let outputs = |prefix: &str| -> [String; 4] {
        ["questions", "thanks", "other", "dlq"].map(|t| format!("{prefix}-{t}"))
    };

    let app = unique("peers-sf");
    let ours = outputs(&app);
    let streamfold = start_streamfold(
        "topologies/question-feed.yaml",
        &app,
        &[
            ("STREAMFOLD_APP", &app),
            ("FEED_EVENTS_TOPIC", &input),
            ("QUESTIONS_TOPIC", &ours[0]),
            ("THANKS_TOPIC", &ours[1]),
            ("OTHER_EVENTS_TOPIC", &ours[2]),
            ("DEAD_LETTER_TOPIC", &ours[3]),
        ],
        dir.path(),
    );
    wait_committed_to(&streamfold, &app, &input, &ends, Duration::from_secs(180));
    streamfold.stop();
    let ours: Vec<Vec<Consumed>> = ours
        .iter()
        .map(|t| read_to_end(t, Duration::from_secs(60)))
        .collect();

    let peer_id = unique("peers-ks");
    let theirs = outputs(&peer_id);
    let peer = start_peer(
        PeerApp::QuestionFeed,
        &peer_id,
        &[
            "--input",
            &input,
            "--questions-topic",
            &theirs[0],
            "--thanks-topic",
            &theirs[1],
            "--other-events-topic",
            &theirs[2],
            "--dead-letter-topic",
            &theirs[3],
        ],
        dir.path(),
    );
    peer.wait_running(Duration::from_secs(180));
    // Wait for as many records as streamfold wrote to each, then stop
    // (a clean close commits everything) and read them all.
    for (topic, ours) in theirs.iter().zip(&ours) {
        read_topic(topic, ours.len(), Duration::ZERO, Duration::from_secs(180));
    }
    peer.stop();
    let theirs: Vec<Vec<Consumed>> = theirs
        .iter()
        .map(|t| read_to_end(t, Duration::from_secs(60)))
        .collect();

    let read_models = values_by_key(&ours[0]);
    let versions: Vec<u64> = read_models["q3"]
        .iter()
        .map(|model| model["version"].as_u64().unwrap())
        .collect();
    assert!(
        versions.windows(2).all(|v| v[1] == v[0] + 1),
        "q3's versions count the events applied: {versions:?}"
    );
    for (name, (a, b)) in ["read models", "thanks totals", "other events"]
        .iter()
        .zip(ours.iter().zip(&theirs))
    {
        assert!(!a.is_empty(), "streamfold wrote {name}");
        assert_eq!(a.len(), b.len(), "{name}: as many records");
        let (a, b) = (values_by_key(a), values_by_key(b));
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "{name}: the same keys"
        );
        for (key, a) in &a {
            assert_eq!(a, &b[key], "{name} of {key} differ");
        }
    }
    assert_eq!(ours[3].len(), 2, "streamfold's dead letters");
    assert_eq!(
        dead_letters(&ours[3]),
        dead_letters(&theirs[3]),
        "the same records dead-lettered"
    );
}

/// Waits until the peer's group has committed each partition of `topic`
/// to `ends`.
fn wait_peer_at(peer: &KafkaStreamsPeer, group: &str, topic: &str, ends: &[i64]) {
    let timeout = Duration::from_secs(180);
    wait_group_committed_to(
        group,
        topic,
        ends,
        timeout,
        &|| peer.assert_running(),
        &|| peer.log_tail(60),
    );
}

/// Each system's records on `topic`, read to its end, by key (values as
/// JSON, in order).
fn outputs_by_key(topic: &str) -> BTreeMap<String, Vec<Value>> {
    values_by_key(&read_to_end(topic, Duration::from_secs(60)))
}

/// page-views.yaml and the peer's `page-views` app over one partition of
/// views keyed by page: both see the same records in the same order
/// (streamfold's re-key keeps them in place, the peer's repartition topic
/// has the one partition), so the same views are late, the same windows
/// close, and each closed window is written once with the same count,
/// users and key. The last view, far ahead, closes every other window and
/// stays open in both.
#[test]
fn the_peer_counts_page_views_per_window_as_streamfold_does() {
    let _serial = serial();
    let dir = temp_dir();
    let input = unique("peers-views");
    create_topic(&input, 1);
    let producer = TestProducer::new();
    let view = |page: &str, minute: u32, user: &str| {
        let at = format!("2026-01-01T00:{minute:02}:00Z");
        json!({"page": page, "user": user, "viewed_at": at}).to_string()
    };
    let mut sent = 0;
    let mut send = |key: &str, value: String| {
        producer.send(&input, Some(key.as_bytes()), value.as_bytes(), &[]);
        sent += 1;
    };
    // Three windows of three pages; then, after the first window closed
    // (its end, 5m, plus the 1m grace), a view of it: late.
    for (minute, page, user) in [
        (1, "/home", "ann"),
        (2, "/home", "bob"),
        (2, "/cart", "ann"),
        (4, "/home", "ann"),
        (6, "/home", "cid"),
        (7, "/cart", "bob"),
        (3, "/home", "dan"),
        (9, "/about", "ann"),
        (11, "/home", "bob"),
        (12, "/cart", "cid"),
        (14, "/home", "ann"),
        (17, "/about", "bob"),
    ] {
        send(page, view(page, minute, user));
    }
    // No time to window it by: dead-lettered by both.
    send("/home", json!({"page": "/home", "user": "eve"}).to_string());
    // A day ahead: it closes every window before it. (Not past the wall
    // clock: the broker refuses a timestamp more than an hour ahead of
    // its own clock, and the peer's repartition topic takes this time;
    // `idle_advance` is set long enough that it never closes this one.)
    send(
        "/home",
        json!({"page": "/home", "user": "far", "viewed_at": "2026-01-02T00:00:00Z"}).to_string(),
    );
    producer.flush();
    let ends = producer.ends(&input, 1);
    assert_eq!(ends, vec![sent]);

    let app = unique("peers-sf");
    let (ours, our_dlq) = (format!("{app}-views"), format!("{app}-dlq"));
    let streamfold = start_streamfold(
        "topologies/page-views.yaml",
        &app,
        &[
            ("STREAMFOLD_APP", &app),
            ("PAGE_VIEWS_TOPIC", &input),
            ("PAGE_VIEWS_COUNTS_TOPIC", &ours),
            ("DEAD_LETTER_TOPIC", &our_dlq),
            ("STREAMFOLD_IDLE_ADVANCE", "1h"),
        ],
        dir.path(),
    );
    wait_committed_to(&streamfold, &app, &input, &ends, Duration::from_secs(180));
    streamfold.stop();

    let peer_id = unique("peers-ks");
    let (theirs, their_dlq) = (format!("{peer_id}-views"), format!("{peer_id}-dlq"));
    let peer = start_peer(
        PeerApp::PageViews,
        &peer_id,
        &[
            "--input",
            &input,
            "--output",
            &theirs,
            "--dead-letter-topic",
            &their_dlq,
            "--window",
            "5m",
            "--grace",
            "1m",
        ],
        dir.path(),
    );
    peer.wait_running(Duration::from_secs(180));
    wait_peer_at(&peer, &peer_id, &input, &ends);
    // The windows are counted after the repartition topic, whose offsets
    // the test does not know: wait for as many as streamfold wrote.
    let ours = outputs_by_key(&ours);
    read_topic(
        &theirs,
        ours.len(),
        Duration::ZERO,
        Duration::from_secs(180),
    );
    peer.stop();

    let theirs = outputs_by_key(&theirs);
    // Windows 0:00, 0:05, 0:10 and 0:15 of the pages viewed in them: 8.
    let home = &ours["/home@2026-01-01T00:00:00.000Z/2026-01-01T00:05:00.000Z"];
    assert_eq!(home.len(), 1, "one result per window: {home:?}");
    assert_eq!(home[0]["views"], 3, "{home:?}");
    assert_eq!(home[0]["users"], json!(["ann", "bob"]), "{home:?}");
    assert_eq!(ours.len(), 8, "the closed windows: {:?}", ours.keys());
    assert_eq!(ours, theirs, "the windows differ");
    let (our_dead, their_dead) = (
        read_to_end(&our_dlq, Duration::from_secs(60)),
        read_to_end(&their_dlq, Duration::from_secs(60)),
    );
    assert_eq!(our_dead.len(), 2, "the late view and the untimed one");
    assert_eq!(dead_letters(&our_dead), dead_letters(&their_dead));
}

/// orders-enriched.yaml and the peer's `orders-enriched` app, both running
/// while a customers table (profiles, updates, tombstones) is written and
/// committed by each, then the orders: each order joins its customer's
/// latest profile, or null for a customer without one, in both, and an
/// order without a customer id is dead-lettered by both.
#[test]
fn the_peer_enriches_orders_as_streamfold_does() {
    let _serial = serial();
    let dir = temp_dir();
    let (orders, customers) = (unique("peers-orders"), unique("peers-customers"));
    create_topic(&orders, PARTITIONS);
    create_topic_with(&customers, PARTITIONS, &[("cleanup.policy", "compact")]);

    let app = unique("peers-sf");
    let (ours, our_dlq) = (format!("{app}-enriched"), format!("{app}-dlq"));
    let streamfold = start_streamfold(
        "topologies/orders-enriched.yaml",
        &app,
        &[
            ("STREAMFOLD_APP", &app),
            ("ORDERS_TOPIC", &orders),
            ("CUSTOMERS_TOPIC", &customers),
            ("ENRICHED_ORDERS_TOPIC", &ours),
            ("DEAD_LETTER_TOPIC", &our_dlq),
        ],
        dir.path(),
    );
    let peer_id = unique("peers-ks");
    let (theirs, their_dlq) = (format!("{peer_id}-enriched"), format!("{peer_id}-dlq"));
    let peer = start_peer(
        PeerApp::OrdersEnriched,
        &peer_id,
        &[
            "--input",
            &orders,
            "--customers-topic",
            &customers,
            "--output",
            &theirs,
            "--dead-letter-topic",
            &their_dlq,
        ],
        dir.path(),
    );
    peer.wait_running(Duration::from_secs(180));

    // 30 customers; one in five moves up a tier; one in seven is deleted.
    let producer = TestProducer::new();
    let tiers = ["bronze", "silver", "gold"];
    for c in 0..30usize {
        let key = format!("customer_{c}");
        let profile = json!({"name": format!("Customer {c}"), "tier": tiers[c % 2]});
        producer.send(
            &customers,
            Some(key.as_bytes()),
            profile.to_string().as_bytes(),
            &[],
        );
        if c % 5 == 0 {
            let up = json!({"name": format!("Customer {c}"), "tier": tiers[2]});
            producer.send(
                &customers,
                Some(key.as_bytes()),
                up.to_string().as_bytes(),
                &[],
            );
        }
        if c % 7 == 3 {
            producer.send_maybe(&customers, Some(key.as_bytes()), None);
        }
    }
    producer.flush();
    let table_ends = producer.ends(&customers, PARTITIONS);
    wait_committed_to(
        &streamfold,
        &app,
        &customers,
        &table_ends,
        Duration::from_secs(180),
    );
    wait_peer_at(&peer, &peer_id, &customers, &table_ends);

    // Orders keyed by order id, for customers 0..35 (30..35 have no row).
    for i in 0..140usize {
        let id = format!("order_{i}");
        let order = json!({"order_id": id, "customer_id": format!("customer_{}", i % 35),
            "amount": 1 + i % 17});
        producer.send(
            &orders,
            Some(id.as_bytes()),
            order.to_string().as_bytes(),
            &[],
        );
    }
    producer.send(
        &orders,
        Some(b"order_x"),
        br#"{"order_id":"order_x","amount":3}"#,
        &[],
    );
    producer.flush();
    let order_ends = producer.ends(&orders, PARTITIONS);
    wait_committed_to(
        &streamfold,
        &app,
        &orders,
        &order_ends,
        Duration::from_secs(180),
    );
    wait_peer_at(&peer, &peer_id, &orders, &order_ends);
    streamfold.stop();
    read_topic(&theirs, 140, Duration::ZERO, Duration::from_secs(180));
    peer.stop();

    // A customer's orders come from four partitions, interleaved by each
    // system's repartition topic as timing goes: compared in order of id.
    let by_order = |topic: &str| {
        let mut out = outputs_by_key(topic);
        for orders in out.values_mut() {
            orders.sort_by(|a, b| a["order_id"].as_str().cmp(&b["order_id"].as_str()));
        }
        out
    };
    let (ours, theirs) = (by_order(&ours), by_order(&theirs));
    assert_eq!(
        ours.values().map(Vec::len).sum::<usize>(),
        140,
        "every order once"
    );
    assert_eq!(
        ours["customer_5"][0]["customer"],
        json!({"name": "Customer 5", "tier": "gold"}),
        "the latest profile"
    );
    assert_eq!(
        ours["customer_3"][0]["customer"],
        Value::Null,
        "a deleted customer"
    );
    assert_eq!(
        ours["customer_31"][0]["customer"],
        Value::Null,
        "an unknown one"
    );
    assert_eq!(ours, theirs, "the joined orders differ");
    let (our_dead, their_dead) = (
        read_to_end(&our_dlq, Duration::from_secs(60)),
        read_to_end(&their_dlq, Duration::from_secs(60)),
    );
    assert_eq!(our_dead.len(), 1, "the order without a customer");
    assert_eq!(dead_letters(&our_dead), dead_letters(&their_dead));
}
