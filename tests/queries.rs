//! Interactive queries (`run --query-addr`) against a real broker: two
//! instances share a 4-partition source; every key is asked of both, and
//! the answer is the committed value computed from the input — also while
//! one instance restarts with its state wiped, when the only other
//! acceptable answer is `503` with `Retry-After`.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// Keys `user-0000` … and updates per key.
const KEYS: usize = 400;
const UPDATES: i64 = 3;

/// Two `ordered` nodes over the same input: one grouped by a field (the
/// runtime routes keys through a repartition topic, so a key's task is
/// known), one by the record key (the producer chose the partition, so a
/// lookup asks every task).
fn topology(dir: &Path, app: &str, source: &str, extra: &str) -> PathBuf {
    let yaml = format!(
        r#"name: {app}
kafka:
  bootstrap_servers: 127.0.0.1:9092
processing:
  commit_interval: 100ms
sources:
  updates:
    topic: {source}
    format: json
nodes:
  by_id:
    type: ordered
    input: updates
    key_by: /id
    order_by: /seq
  by_key:
    type: ordered
    input: updates
    order_by: /seq
sinks:
  latest_by_id:
    topic: {app}-by-id
    input: by_id
    create: true
  latest_by_key:
    topic: {app}-by-key
    input: by_key
    create: true
dead_letter:
  topic: {app}-dlq
{extra}"#
    );
    let path = dir.join("queries.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A record key that is not UTF-8, for the store keyed by the record key
/// (its `id`, for the other store, is [`BINARY_ID`]).
const BINARY_KEY: &[u8] = &[0xff, 0xfe, b'k'];
const BINARY_ID: &str = "binary-key";

fn binary_update() -> Value {
    json!({ "id": BINARY_ID, "seq": 1, "score": 0 })
}

fn key(i: usize) -> String {
    format!("user-{i:04}")
}

fn update(i: usize, seq: i64) -> Value {
    json!({ "id": key(i), "seq": seq, "score": i as i64 * 10 + seq })
}

/// An HTTP answer: status, headers (lower-case names), JSON body.
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Value,
}

/// `GET http://<addr><path>`, one connection per request.
fn get(addr: &str, path: &str) -> Answer {
    get_with(addr, path, &[])
}

/// [`get`] with more request headers.
fn get_with(addr: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    exchange(connect(addr), addr, path, headers)
}

fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// [`get_with`] over HTTPS, trusting the authorities in the PEM file
/// `ca`; `Err` when the TLS handshake fails.
fn get_tls(addr: &str, path: &str, headers: &[(&str, &str)], ca: &Path) -> Result<Answer, String> {
    use openssl::ssl::{SslConnector, SslMethod};
    let mut connector = SslConnector::builder(SslMethod::tls_client()).unwrap();
    connector.set_ca_file(ca).unwrap();
    let host = addr.rsplit_once(':').unwrap().0;
    let stream = connector
        .build()
        .connect(host, connect(addr))
        .map_err(|e| e.to_string())?;
    Ok(exchange(stream, addr, path, headers))
}

/// One request on `stream`, read to the end.
fn exchange(
    mut stream: impl Read + Write,
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    if let Err(e) = stream.read_to_end(&mut raw) {
        // A TLS peer that closes without `close_notify` after its answer.
        assert!(!raw.is_empty(), "{addr}{path}: {e}");
    }
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        body,
    }
}

/// Whether `answer` for key `i` is the committed final value; panics on
/// anything else than that or `503` with `Retry-After`.
fn check_key(answer: &Answer, store: &str, i: usize, who: &str) -> bool {
    match answer.status {
        200 => {
            assert_eq!(answer.body["store"], json!(store), "{who}");
            assert_eq!(answer.body["key"], json!(key(i)), "{who}");
            assert_eq!(
                answer.body["value"]["value"],
                update(i, UPDATES),
                "{who}: {store}/{} is not the committed value: {}",
                key(i),
                answer.body
            );
            assert_eq!(answer.body["value"]["version"]["order"], json!(UPDATES));
            true
        }
        503 => {
            assert_eq!(
                answer.headers.get("retry-after").map(String::as_str),
                Some("1"),
                "{who}: a 503 says when to retry"
            );
            false
        }
        other => panic!(
            "{who}: {store}/{}: unexpected {other}: {}",
            key(i),
            answer.body
        ),
    }
}

/// Asks every key of both stores of every instance until all answer 200,
/// checking each answer on the way; returns how many 503s were seen.
fn all_keys_answer(addrs: &[&str], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    let mut unavailable = 0;
    let mut pending: Vec<(usize, &str, usize)> = Vec::new();
    for (a, _) in addrs.iter().enumerate() {
        for store in ["by_id-latest", "by_key-latest"] {
            pending.extend((0..KEYS).map(|i| (a, store, i)));
        }
    }
    while !pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} keys still unavailable after {timeout:?}, e.g. {:?}",
            pending.len(),
            pending[0]
        );
        pending.retain(|&(a, store, i)| {
            let answer = get(addrs[a], &format!("/v1/stores/{store}/keys/{}", key(i)));
            let ok = check_key(&answer, store, i, addrs[a]);
            unavailable += usize::from(!ok);
            !ok
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    unavailable
}

struct Setup {
    dir: tempfile::TempDir,
    app: String,
    source: String,
    topology: PathBuf,
}

impl Setup {
    fn new(test: &str) -> Setup {
        Setup::with(test, "")
    }

    /// [`Setup::new`] with `extra` at the end of the topology.
    fn with(test: &str, extra: &str) -> Setup {
        let dir = temp_dir();
        let app = unique(&format!("sf-q-{test}"));
        let source = unique("updates");
        create_topic(&source, 4);
        let topology = topology(dir.path(), &app, &source, extra);
        Setup {
            dir,
            app,
            source,
            topology,
        }
    }

    fn config(&self, instance: &str, port: u16) -> AppConfig {
        AppConfig {
            topology: self.topology.clone(),
            instance: instance.into(),
            state_dir: self.dir.path().join(format!("state-{instance}")),
            env: Vec::new(),
            txn_header: false,
            args: vec!["--query-addr".into(), format!("127.0.0.1:{port}")],
        }
    }

    /// Every update, keyed by the id, and waits until `app` committed them.
    fn produce_all(&self, app: &App) {
        let producer = TestProducer::new();
        for seq in 1..=UPDATES {
            for i in 0..KEYS {
                producer.send_json(&self.source, &key(i), &update(i, seq));
            }
        }
        let binary = serde_json::to_vec(&binary_update()).unwrap();
        producer.send(&self.source, Some(BINARY_KEY), &binary, &[]);
        producer.flush();
        let end = producer.ends(&self.source, 4);
        wait_committed_to(app, &self.app, &self.source, &end, Duration::from_secs(180));
    }
}

/// Instances `a` and `b` of `topologies/<topology>.yaml` with `env`, each
/// serving queries, once they run `tasks` tasks between them; with their
/// query addresses.
fn start_pair(
    dir: &Path,
    topology: &str,
    env: &[(String, String)],
    tasks: f64,
) -> (App, App, [String; 2]) {
    let config = |instance: &str, port: u16| AppConfig {
        topology: repo().join(format!("topologies/{topology}.yaml")),
        instance: instance.into(),
        state_dir: dir.join(format!("state-{instance}")),
        env: env.to_vec(),
        txn_header: false,
        args: vec!["--query-addr".into(), format!("127.0.0.1:{port}")],
    };
    let (port_a, port_b) = (free_port(), free_port());
    let a = App::start(&config("a", port_a), dir);
    let b = App::start(&config("b", port_b), dir);
    wait_running(&[&a, &b], tasks);
    (
        a,
        b,
        [format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}")],
    )
}

fn wait_running(apps: &[&App], total: f64) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let counts: Vec<f64> = apps
            .iter()
            // Not exported yet: the instance is not up, nothing runs.
            .map(|a| {
                a.metric_if_exported("streamfold_runtime_tasks_running")
                    .unwrap_or(0.0)
            })
            .collect();
        if counts.iter().sum::<f64>() == total && counts.iter().all(|&c| c >= 1.0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tasks running: {counts:?}; logs:\n{}",
            apps.iter().map(|a| a.log_text()).collect::<String>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn every_key_is_answered_from_either_instance_with_its_committed_value() {
    let _serial = serial();
    let setup = Setup::new("keys");
    let (port_a, port_b) = (free_port(), free_port());
    let a = App::start(&setup.config("a", port_a), setup.dir.path());
    let b = App::start(&setup.config("b", port_b), setup.dir.path());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    wait_running(&[&a, &b], 4.0);
    setup.produce_all(&a);
    all_keys_answer(&[&addr_a, &addr_b], Duration::from_secs(60));

    // The store list.
    let stores = get(&addr_a, "/v1/stores");
    assert_eq!(stores.status, 200);
    let names: Vec<&str> = stores.body["stores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["by_id-latest", "by_key-latest"]);
    assert_eq!(stores.body["partitions"], json!(4));

    // A prefix scan spans every task, on both instances, in key order.
    for addr in [&addr_a, &addr_b] {
        for store in ["by_id-latest", "by_key-latest"] {
            let scan = get(
                addr,
                &format!("/v1/stores/{store}?prefix=user-01&limit=1000"),
            );
            assert_eq!(scan.status, 200, "{}", scan.body);
            let entries = scan.body["entries"].as_array().unwrap();
            let keys: Vec<&str> = entries.iter().map(|e| e["key"].as_str().unwrap()).collect();
            let expected: Vec<String> = (100..200).map(key).collect();
            assert_eq!(keys, expected, "{addr} {store}");
            for (entry, i) in entries.iter().zip(100..) {
                assert_eq!(entry["value"]["value"], update(i, UPDATES));
            }
            assert_eq!(scan.body["truncated"], json!(false));
            let partitions: std::collections::BTreeSet<i64> = entries
                .iter()
                .map(|e| e["partition"].as_i64().unwrap())
                .collect();
            assert_eq!(partitions.len(), 4, "keys of every task: {partitions:?}");
            let limited = get(addr, &format!("/v1/stores/{store}?prefix=user-&limit=5"));
            let keys: Vec<&str> = limited.body["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["key"].as_str().unwrap())
                .collect();
            assert_eq!(
                keys,
                [
                    "user-0000",
                    "user-0001",
                    "user-0002",
                    "user-0003",
                    "user-0004"
                ]
            );
            assert_eq!(limited.body["truncated"], json!(true));
        }
    }

    // Unknown keys, stores and paths; bad parameters.
    for addr in [&addr_a, &addr_b] {
        for store in ["by_id-latest", "by_key-latest"] {
            let missing = get(addr, &format!("/v1/stores/{store}/keys/nobody"));
            assert_eq!(missing.status, 404, "{}", missing.body);
            assert_eq!(missing.body["error"], json!("no such key"));
        }
        let unknown = get(addr, "/v1/stores/nope/keys/user-0001");
        assert_eq!(unknown.status, 404);
        assert_eq!(
            unknown.body["stores"],
            json!(["by_id-latest", "by_key-latest"])
        );
        assert_eq!(get(addr, "/v1/stores/by_id-latest?limit=0").status, 400);
        assert_eq!(get(addr, "/v2").status, 404);
    }

    pages_walk_every_key_once(&[&addr_a, &addr_b]);
    binary_keys_round_trip(&[&addr_a, &addr_b]);
    metadata_names_the_owner(&addr_a, &addr_b);

    // Each server counted what it answered, by route and status: the
    // lookups of missing keys above among them, and the unknown path.
    for app in [&a, &b] {
        let text = app.metrics_text();
        let answered = |route: &str, status: &str| {
            parse_metric(
                &text,
                &format!(r#"streamfold_query_requests_total{{route="{route}",status="{status}"}}"#),
            )
        };
        assert!(answered("lookup", "404") >= 2.0, "{text}");
        assert!(answered("lookup", "200") >= 1.0, "{text}");
        assert!(answered("scan", "400") >= 1.0, "{text}");
        assert!(answered("other", "404") >= 1.0, "{text}");
        assert!(
            parse_metric(
                &text,
                r#"streamfold_query_request_duration_seconds_count{route="scan"}"#
            ) >= 4.0,
            "{text}"
        );
    }
    a.stop();
    b.stop();
}

fn decode_base64url(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn encode_base64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The keys of `store` page by page, `limit` at a time, following `next`;
/// and how many pages it took.
fn walk(addr: &str, store: &str, limit: usize, headers: &[(&str, &str)]) -> (Vec<Vec<u8>>, usize) {
    let mut keys = Vec::new();
    let mut cursor = String::new();
    for pages in 1.. {
        let path = format!("/v1/stores/{store}?limit={limit}&key_encoding=base64{cursor}");
        let page = get_with(addr, &path, headers);
        assert_eq!(page.status, 200, "{addr}{path}: {}", page.body);
        let entries = page.body["entries"].as_array().unwrap();
        assert!(entries.len() <= limit);
        keys.extend(
            entries
                .iter()
                .map(|e| decode_base64url(e["key"].as_str().unwrap())),
        );
        assert_eq!(page.body["truncated"], json!(!page.body["next"].is_null()));
        match page.body["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return (keys, pages),
        }
    }
    unreachable!()
}

/// Following `next` from either instance walks every key of each store
/// once, in key order, across the four partitions; `from`/`to` bound a
/// range, both ends included.
fn pages_walk_every_key_once(addrs: &[&str]) {
    for addr in addrs {
        for (store, odd) in [
            ("by_id-latest", BINARY_ID.as_bytes()),
            ("by_key-latest", BINARY_KEY),
        ] {
            let mut expected: Vec<Vec<u8>> = (0..KEYS).map(|i| key(i).into_bytes()).collect();
            expected.push(odd.to_vec());
            expected.sort();
            let (walked, pages) = walk(addr, store, 37, &[]);
            assert_eq!(walked.len(), expected.len(), "{addr} {store}");
            assert_eq!(walked, expected, "{addr} {store}");
            assert_eq!(pages, expected.len().div_ceil(37));
            let range = get(
                addr,
                &format!("/v1/stores/{store}?from=user-0100&to=user-0109"),
            );
            let keys: Vec<&str> = range.body["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["key"].as_str().unwrap())
                .collect();
            let expected: Vec<String> = (100..110).map(key).collect();
            assert_eq!(keys, expected, "{addr} {store}: {}", range.body);
            assert_eq!(range.body["next"], Value::Null);
        }
    }
}

/// A record key that is not UTF-8 is asked and answered in base64url; in
/// text its exact bytes come as `key_base64`.
fn binary_keys_round_trip(addrs: &[&str]) {
    let encoded = encode_base64url(BINARY_KEY);
    for addr in addrs {
        let path = format!("/v1/stores/by_key-latest/keys/{encoded}?key_encoding=base64");
        let answer = get(addr, &path);
        assert_eq!(answer.status, 200, "{addr}{path}: {}", answer.body);
        assert_eq!(answer.body["key"], json!(encoded));
        assert_eq!(answer.body["value"]["value"], binary_update());
        let text = get(addr, "/v1/stores/by_key-latest?from=%FF");
        let entries = text.body["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{}", text.body);
        assert_eq!(entries[0]["key_base64"], json!(encoded));
    }
}

/// Which partition and instance hold a key, as either instance sees it;
/// a key its owner does not have is `404`, also when asked of the other
/// instance; the instance list gives every task once.
fn metadata_names_the_owner(addr_a: &str, addr_b: &str) {
    let instances = get(addr_a, "/v1/instances");
    assert_eq!(instances.status, 200);
    let list = instances.body["instances"].as_array().unwrap();
    let ids: Vec<&str> = list
        .iter()
        .map(|i| i["instance"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b"], "{}", instances.body);
    let addresses: Vec<&str> = list
        .iter()
        .map(|i| i["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, [addr_a, addr_b]);
    let mut tasks: Vec<i64> = list
        .iter()
        .flat_map(|i| i["running"].as_array().unwrap())
        .map(|t| t.as_i64().unwrap())
        .collect();
    tasks.sort();
    assert_eq!(tasks, [0, 1, 2, 3]);
    let owner_of = |task: i64| {
        list.iter()
            .find(|i| i["running"].as_array().unwrap().contains(&json!(task)))
            .map(|i| i["instance"].clone())
            .unwrap()
    };
    for addr in [addr_a, addr_b] {
        for i in (0..KEYS).step_by(10) {
            let path = format!("/v1/stores/by_id-latest/keys/{}/metadata", key(i));
            let metadata = get(addr, &path).body;
            assert_eq!(
                metadata["status"],
                json!("running"),
                "{addr}{path}: {metadata}"
            );
            let partition = metadata["partition"].as_i64().unwrap();
            assert_eq!(metadata["active"]["instance"], owner_of(partition));
            let value = get(addr, &format!("/v1/stores/by_id-latest/keys/{}", key(i)));
            assert_eq!(value.body["partition"], json!(partition));
        }
        let unrouted = get(
            addr,
            &format!("/v1/stores/by_key-latest/keys/{}/metadata", key(1)),
        )
        .body;
        assert_eq!(unrouted["partition"], Value::Null, "{unrouted}");
        assert_eq!(unrouted["partitions"].as_array().unwrap().len(), 4);
    }
    // Missing keys whose partition the other instance runs: the owner's
    // "no such key" is a 404 here too.
    for (addr, other) in [(addr_a, "b"), (addr_b, "a")] {
        let missing = (0..)
            .map(|n| format!("nobody-{n}"))
            .find(|k| {
                let path = format!("/v1/stores/by_id-latest/keys/{k}/metadata");
                get(addr, &path).body["active"]["instance"] == json!(other)
            })
            .unwrap();
        let answer = get(addr, &format!("/v1/stores/by_id-latest/keys/{missing}"));
        assert_eq!(answer.status, 404, "{addr} {missing}: {}", answer.body);
        assert_eq!(answer.body["error"], json!("no such key"));
    }
}

#[test]
fn with_a_token_only_requests_that_carry_it_are_answered_and_forwarding_needs_it_too() {
    let _serial = serial();
    // The token from a file, as a mounted secret would give it.
    let secrets = temp_dir();
    let token_file = secrets.path().join("query-token");
    std::fs::write(&token_file, "t0ken-Of-the-test\n").unwrap();
    let setup = Setup::with(
        "token",
        &format!("queries:\n  token: ${{file:{}}}\n", token_file.display()),
    );
    let (port_a, port_b) = (free_port(), free_port());
    let a = App::start(&setup.config("a", port_a), setup.dir.path());
    let b = App::start(&setup.config("b", port_b), setup.dir.path());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    wait_running(&[&a, &b], 4.0);
    setup.produce_all(&a);
    let bearer = [("Authorization", "Bearer t0ken-Of-the-test")];

    // With the token every key is answered from either instance, half of
    // them forwarded to the other one with the token.
    for addr in [&addr_a, &addr_b] {
        for store in ["by_id-latest", "by_key-latest"] {
            for i in (0..KEYS).step_by(5) {
                let path = format!("/v1/stores/{store}/keys/{}", key(i));
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let answer = get_with(addr, &path, &bearer);
                    if check_key(&answer, store, i, addr) {
                        break;
                    }
                    assert!(Instant::now() < deadline, "{addr}{path} stays unavailable");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        let (walked, _) = walk(addr, "by_key-latest", 150, &bearer);
        assert_eq!(walked.len(), KEYS + 1);
    }
    // Without it, or with another, nothing; nor with the forwarded header.
    for addr in [&addr_a, &addr_b] {
        for path in [
            "/v1/stores",
            "/v1/instances",
            "/v1/stores/by_id-latest/keys/user-0001",
        ] {
            let refused = get(addr, path);
            assert_eq!(refused.status, 401, "{addr}{path}: {}", refused.body);
            assert_eq!(
                refused.headers.get("www-authenticate").map(String::as_str),
                Some("Bearer")
            );
            let wrong = get_with(addr, path, &[("Authorization", "Bearer t0ken")]);
            assert_eq!(wrong.status, 401);
        }
        let forged = get_with(
            addr,
            "/v1/stores/by_key-latest?tasks=0,1,2,3",
            &[("x-streamfold-forwarded", "a")],
        );
        assert_eq!(forged.status, 401, "{}", forged.body);
    }
    // The token never reaches the log.
    for app in [&a, &b] {
        assert!(!app.log_text().contains("t0ken-Of-the-test"));
    }
    a.stop();
    b.stop();
}

#[test]
fn with_tls_queries_are_served_and_forwarded_over_https_with_the_token_from_the_flag_or_its_variable()
 {
    let _serial = serial();
    let certificates_dir = temp_dir();
    let certificates = ServerCertificates::write(certificates_dir.path());
    let setup = Setup::with(
        "tls",
        &format!(
            "queries:\n  request_timeout: 20s\n  tls:\n    certificate: {}\n    key: {}\n    ca: {}\n",
            certificates.certificate.display(),
            certificates.key.display(),
            certificates.ca.display()
        ),
    );
    const TOKEN: &str = "flag-t0ken-of-the-tls-test";
    let (port_a, port_b) = (free_port(), free_port());
    let mut config_a = setup.config("a", port_a);
    config_a.args.extend(["--query-token".into(), TOKEN.into()]);
    let mut config_b = setup.config("b", port_b);
    config_b
        .env
        .push(("STREAMFOLD_QUERY_TOKEN".into(), TOKEN.into()));
    let a = App::start(&config_a, setup.dir.path());
    let b = App::start(&config_b, setup.dir.path());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    wait_running(&[&a, &b], 4.0);
    setup.produce_all(&a);
    let header = format!("Bearer {TOKEN}");
    let bearer = [("Authorization", header.as_str())];

    // Over HTTPS every key is answered from either instance: the lookups
    // of `by_key-latest` ask both, so each instance forwards to the other,
    // over HTTPS, checking its certificate against `queries.tls.ca`.
    for addr in [&addr_a, &addr_b] {
        for store in ["by_id-latest", "by_key-latest"] {
            for i in (0..KEYS).step_by(10) {
                let path = format!("/v1/stores/{store}/keys/{}", key(i));
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let answer = get_tls(addr, &path, &bearer, &certificates.ca)
                        .unwrap_or_else(|e| panic!("{addr}{path}: {e}"));
                    if check_key(&answer, store, i, addr) {
                        break;
                    }
                    assert!(Instant::now() < deadline, "{addr}{path} stays unavailable");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        // The token given by the flag (a) and by its variable (b).
        let refused = get_tls(addr, "/v1/stores", &[], &certificates.ca).unwrap();
        assert_eq!(refused.status, 401, "{addr}: {}", refused.body);
        // The certificate presented is the configured one: a client that
        // trusts another authority cannot connect.
        let error = get_tls(addr, "/v1/stores", &bearer, &certificates.other_ca)
            .err()
            .unwrap_or_else(|| panic!("{addr} was trusted by another CA"));
        assert!(
            error.contains("certificate verify failed"),
            "{addr}: {error}"
        );
        // Plain HTTP gets no HTTP answer (the server may reset the
        // connection before the request is even written).
        let mut plain = connect(addr);
        let _ = write!(
            plain,
            "GET /v1/stores HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        );
        let mut raw = Vec::new();
        let _ = plain.read_to_end(&mut raw);
        assert!(!raw.starts_with(b"HTTP/"), "{addr} answered plain HTTP");
    }
    for app in [&a, &b] {
        assert!(!app.log_text().contains(TOKEN));
    }
    a.stop();
    b.stop();
}

#[test]
fn while_an_instance_restarts_from_scratch_answers_are_correct_or_503() {
    let _serial = serial();
    let setup = Setup::new("restart");
    let (port_a, port_b) = (free_port(), free_port());
    let a = App::start(&setup.config("a", port_a), setup.dir.path());
    let b = App::start(&setup.config("b", port_b), setup.dir.path());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    wait_running(&[&a, &b], 4.0);
    setup.produce_all(&a);
    all_keys_answer(&[&addr_a, &addr_b], Duration::from_secs(60));

    // b leaves: a takes its tasks over and restores them. Every answer
    // meanwhile is the committed value or 503.
    b.stop();
    let unavailable_while_moving = all_keys_answer(&[&addr_a], Duration::from_secs(120));

    // b comes back with no local state: its tasks restore in full from
    // the changelogs while both instances keep answering.
    std::fs::remove_dir_all(setup.dir.path().join("state-b")).unwrap();
    let b = App::start(&setup.config("b", port_b), setup.dir.path());
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut rounds = 0;
    let mut unavailable = 0;
    loop {
        // Only a: b's server may not listen yet.
        unavailable += check_round(&[&addr_a]);
        if b.metric_if_exported("streamfold_runtime_tasks_running")
            .is_some_and(|n| n >= 1.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b never ran a task: {}",
            b.log_text()
        );
        rounds += 1;
    }
    wait_running(&[&a, &b], 4.0);
    unavailable += all_keys_answer(&[&addr_a, &addr_b], Duration::from_secs(120));
    eprintln!(
        "503 answers: {unavailable_while_moving} while a took b's tasks, {unavailable} while b restored ({rounds} rounds)"
    );
    a.stop();
    b.stop();
}

/// One pass over every key of both stores on `addrs`: each answer must be
/// the committed value or 503. Returns the 503 count.
fn check_round(addrs: &[&str]) -> usize {
    let mut unavailable = 0;
    for addr in addrs {
        for store in ["by_id-latest", "by_key-latest"] {
            for i in (0..KEYS).step_by(7) {
                let answer = get(addr, &format!("/v1/stores/{store}/keys/{}", key(i)));
                unavailable += usize::from(!check_key(&answer, store, i, addr));
            }
        }
    }
    unavailable
}

#[test]
fn a_killed_instance_is_answered_for_with_503_until_its_tasks_run_elsewhere() {
    let _serial = serial();
    let setup = Setup::new("kill");
    let (port_a, port_b) = (free_port(), free_port());
    let a = App::start(&setup.config("a", port_a), setup.dir.path());
    let b = App::start(&setup.config("b", port_b), setup.dir.path());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    wait_running(&[&a, &b], 4.0);
    setup.produce_all(&a);
    all_keys_answer(&[&addr_a, &addr_b], Duration::from_secs(60));

    // b dies without withdrawing its endpoint entry: a forwards to an
    // address that refuses connections (503) until the group gives a b's
    // tasks (after the session timeout) and they restore.
    b.kill();
    let unavailable = all_keys_answer(&[&addr_a], Duration::from_secs(120));
    assert!(
        unavailable > 0,
        "keys of the dead instance's tasks cannot be answered before the session times out"
    );
    assert_eq!(a.metric("streamfold_runtime_tasks_running"), 4.0);

    // b comes back on its state: both answer every key again.
    let b = App::start(&setup.config("b", port_b), setup.dir.path());
    wait_running(&[&a, &b], 4.0);
    all_keys_answer(&[&addr_a, &addr_b], Duration::from_secs(120));
    a.stop();
    b.stop();
}

#[test]
fn projection_read_models_are_served_as_entity_and_version_from_either_instance() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-q-feed");
    let source = unique("feed-events");
    create_topic(&source, 4);
    let env = vec![
        ("STREAMFOLD_APP".to_string(), app.clone()),
        ("FEED_EVENTS_TOPIC".to_string(), source.clone()),
        ("QUESTIONS_TOPIC".to_string(), unique("questions")),
        ("THANKS_TOPIC".to_string(), unique("thanks")),
        ("OTHER_EVENTS_TOPIC".to_string(), unique("other")),
        ("DEAD_LETTER_TOPIC".to_string(), unique("dlq")),
    ];
    let (a, b, addrs) = start_pair(dir.path(), "question-feed", &env, 4.0);

    // Per question: created, two answers, an edit — sent edit first, so
    // the projection re-folds in order.
    let questions = 60;
    let producer = TestProducer::new();
    for q in 0..questions {
        let id = format!("q-{q:03}");
        let events = [
            json!({"type": "QuestionEdited", "sequence": 4, "title": format!("How {q}?")}),
            json!({"type": "QuestionCreated", "sequence": 1, "title": "draft", "author": format!("u{q}")}),
            json!({"type": "AnswerAdded", "sequence": 2}),
            json!({"type": "AnswerAdded", "sequence": 3}),
        ];
        for mut event in events {
            let seq = event["sequence"].as_i64().unwrap();
            event["question_id"] = json!(id);
            event["event_id"] = json!(format!("{id}-e{seq}"));
            producer.send_json(&source, &id, &event);
        }
    }
    producer.flush();
    let end = producer.ends(&source, 4);
    wait_committed_to(&a, &app, &source, &end, Duration::from_secs(180));

    for addr in &addrs {
        for q in 0..questions {
            let id = format!("q-{q:03}");
            let path = format!("/v1/stores/project_question-entities/keys/{id}");
            let deadline = Instant::now() + Duration::from_secs(60);
            let answer = loop {
                let answer = get(addr, &path);
                if answer.status != 503 {
                    break answer;
                }
                assert!(Instant::now() < deadline, "{addr}{path} stays unavailable");
                std::thread::sleep(Duration::from_millis(200));
            };
            assert_eq!(answer.status, 200, "{addr}{path}: {}", answer.body);
            let value = &answer.body["value"];
            assert_eq!(value["version"], json!(4), "{value}");
            assert_eq!(value["entity"]["title"], json!(format!("How {q}?")));
            assert_eq!(value["entity"]["author"], json!(format!("u{q}")));
            assert_eq!(value["entity"]["answers"], json!(2));
            assert_eq!(value["entity"]["is_deleted"], json!(false));
            assert!(
                value.get("last").is_none(),
                "internals stay hidden: {value}"
            );
        }
    }
    a.stop();
    b.stop();
}

#[test]
fn a_joined_table_is_served_by_key_from_either_instance_and_a_deleted_key_is_404() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-q-orders");
    let orders = unique("orders");
    let customers = unique("customers");
    create_topic(&orders, 2);
    create_topic_with(&customers, 2, &[("cleanup.policy", "compact")]);
    let env = vec![
        ("STREAMFOLD_APP".to_string(), app.clone()),
        ("ORDERS_TOPIC".to_string(), orders.clone()),
        ("CUSTOMERS_TOPIC".to_string(), customers.clone()),
        ("ENRICHED_ORDERS_TOPIC".to_string(), unique("enriched")),
        ("DEAD_LETTER_TOPIC".to_string(), unique("dlq")),
    ];
    let (a, b, addrs) = start_pair(dir.path(), "orders-enriched", &env, 2.0);

    // Two versions of 30 profiles; the last one deleted.
    let producer = TestProducer::new();
    for version in 1..=2 {
        for c in 0..30 {
            let profile = json!({"name": format!("customer {c}"), "tier": version});
            producer.send_json(&customers, &format!("c-{c}"), &profile);
        }
    }
    producer.send_maybe(&customers, Some(b"c-29"), None);
    producer.flush();
    let end = producer.ends(&customers, 2);
    wait_committed_to(&a, &app, &customers, &end, Duration::from_secs(180));

    for addr in &addrs {
        for c in 0..30 {
            let path = format!("/v1/stores/enrich-table/keys/c-{c}");
            let deadline = Instant::now() + Duration::from_secs(60);
            let answer = loop {
                let answer = get(addr, &path);
                if answer.status != 503 {
                    break answer;
                }
                assert!(Instant::now() < deadline, "{addr}{path} stays unavailable");
                std::thread::sleep(Duration::from_millis(200));
            };
            if c == 29 {
                assert_eq!(answer.status, 404, "{addr}{path}: {}", answer.body);
                continue;
            }
            assert_eq!(answer.status, 200, "{addr}{path}: {}", answer.body);
            let row = &answer.body["value"];
            assert_eq!(
                row["value"],
                json!({"name": format!("customer {c}"), "tier": 2}),
                "{row}"
            );
            assert!(row["timestamp"].as_i64().is_some(), "{row}");
        }
    }
    a.stop();
    b.stop();
}

/// The page-views topology's window store: a page's windows (all, a time
/// range, page by page) from either instance, and the whole store paged,
/// each window's count and users equal to a recount of the input.
#[test]
fn a_window_store_answers_a_keys_windows_by_time_range_from_either_instance() {
    let _serial = serial();
    let dir = temp_dir();
    let app = unique("sf-q-views");
    let source = unique("page-views");
    create_topic(&source, 4);
    let env = vec![
        ("STREAMFOLD_APP".to_string(), app.clone()),
        ("PAGE_VIEWS_TOPIC".to_string(), source.clone()),
        (
            "PAGE_VIEWS_COUNTS_TOPIC".to_string(),
            unique("views-per-5m"),
        ),
        ("DEAD_LETTER_TOPIC".to_string(), unique("dlq")),
        // No window closes during the test: every one stays in the store.
        ("PAGE_VIEWS_GRACE".to_string(), "1d".to_string()),
    ];
    let (a, b, addrs) = start_pair(dir.path(), "page-views", &env, 4.0);

    // Views of 30 pages over six 5-minute windows of the last half hour.
    const SIZE: i64 = 300_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let first = (now - 6 * SIZE) / SIZE * SIZE;
    let pages = 30;
    // page → window start → (views, users)
    let mut expected: BTreeMap<String, BTreeMap<i64, (u64, std::collections::BTreeSet<String>)>> =
        BTreeMap::new();
    let producer = TestProducer::new();
    let mut view = 0;
    for p in 0..pages {
        let page = format!("/page/{p:02}");
        for w in 0..6i64 {
            // Page p has no view in window (p mod 6), p + 1 views in the others.
            if w == p % 6 {
                continue;
            }
            for v in 0..=p {
                let at = first + w * SIZE + (v * 7_919 + p * 131) % SIZE;
                let user = format!("u{}", (v + w) % 4);
                view += 1;
                producer.send_json(
                    &source,
                    &format!("v{view}"),
                    &json!({"page": page, "user": user, "viewed_at": at}),
                );
                let slot = expected
                    .entry(page.clone())
                    .or_default()
                    .entry(first + w * SIZE)
                    .or_default();
                slot.0 += 1;
                slot.1.insert(user);
            }
        }
    }
    producer.flush();
    let end = producer.ends(&source, 4);
    wait_committed_to(&a, &app, &source, &end, Duration::from_secs(180));

    let store = "views_per_page-windows";
    let rfc3339 = |millis: i64| {
        jiff::Timestamp::from_millisecond(millis)
            .unwrap()
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    };
    // An entry's window, as (start, views, users), after checking its
    // shape; the windows an answer lists, all of `page`.
    let window_of = |entry: &Value| -> (i64, u64, Vec<String>) {
        let value = &entry["value"];
        let start = value["window_start"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_millisecond();
        assert_eq!(value["window_end"], json!(rfc3339(start + SIZE)), "{value}");
        assert_eq!(value["records"], value["views"], "{value}");
        let users = value["users"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect();
        (start, value["views"].as_u64().unwrap(), users)
    };
    let windows_of = |answer: &Answer, page: &str| -> Vec<(i64, u64, Vec<String>)> {
        answer.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| {
                assert_eq!(entry["key"], json!(page), "{entry}");
                window_of(entry)
            })
            .collect()
    };
    let expected_of = |page: &str, from: i64, to: i64| -> Vec<(i64, u64, Vec<String>)> {
        expected[page]
            .range(from..=to)
            .map(|(start, (views, users))| (*start, *views, users.iter().cloned().collect()))
            .collect()
    };
    for addr in &addrs {
        for p in 0..pages {
            let page = format!("/page/{p:02}");
            let key = page.replace('/', "%2F");
            let all = format!("/v1/stores/{store}/keys/{key}");
            // The source's committed offsets say the views reached the
            // repartition topic; the window node commits them a little
            // later, so its windows may still be filling.
            let deadline = Instant::now() + Duration::from_secs(60);
            let answer = loop {
                let answer = get(addr, &all);
                let complete = answer.status == 200
                    && windows_of(&answer, &page) == expected_of(&page, i64::MIN, i64::MAX);
                if complete || (answer.status != 503 && Instant::now() >= deadline) {
                    break answer;
                }
                assert!(Instant::now() < deadline, "{addr}{all} stays unavailable");
                std::thread::sleep(Duration::from_millis(200));
            };
            assert_eq!(answer.status, 200, "{addr}{all}: {}", answer.body);
            assert_eq!(answer.body["key"], json!(page));
            assert_eq!(
                windows_of(&answer, &page),
                expected_of(&page, i64::MIN, i64::MAX),
                "{addr}{all}"
            );

            // Windows starting from the second to the fourth: `from` in
            // RFC 3339 with an offset, `to` in epoch milliseconds.
            let (from, to) = (first + SIZE, first + 3 * SIZE);
            let from_text = jiff::Timestamp::from_millisecond(from)
                .unwrap()
                .to_zoned(jiff::tz::TimeZone::fixed(jiff::tz::offset(2)))
                .strftime("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
                .replace('+', "%2B");
            let ranged = format!("{all}?from={from_text}&to={to}");
            let answer = get(addr, &ranged);
            assert_eq!(answer.status, 200, "{addr}{ranged}: {}", answer.body);
            assert_eq!(answer.body["from"], json!(rfc3339(from)));
            assert_eq!(
                windows_of(&answer, &page),
                expected_of(&page, from, to),
                "{addr}{ranged}"
            );

            // Two windows a page, following `next`.
            let mut paged = Vec::new();
            let mut cursor = String::new();
            loop {
                let path = format!("{all}?limit=2{cursor}");
                let answer = get(addr, &path);
                assert_eq!(answer.status, 200, "{addr}{path}: {}", answer.body);
                paged.extend(windows_of(&answer, &page));
                match answer.body["next"].as_str() {
                    Some(next) => cursor = format!("&cursor={next}"),
                    None => break,
                }
            }
            assert_eq!(
                paged,
                expected_of(&page, i64::MIN, i64::MAX),
                "{addr} paged"
            );
        }
        // The whole store, 17 windows a page: every page's every window once.
        let mut seen = 0;
        let mut cursor = String::new();
        loop {
            let path = format!("/v1/stores/{store}?limit=17{cursor}");
            let answer = get(addr, &path);
            assert_eq!(answer.status, 200, "{addr}{path}: {}", answer.body);
            for entry in answer.body["entries"].as_array().unwrap() {
                let page = entry["key"].as_str().unwrap();
                assert!(expected.contains_key(page), "{entry}");
                seen += 1;
            }
            match answer.body["next"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => break,
            }
        }
        assert_eq!(seen, expected.values().map(BTreeMap::len).sum::<usize>());
        // A key range and a key prefix (Kafka Streams' `fetch(keyFrom,
        // keyTo, ...)`): every window of the pages within, each once, in
        // the store's order, three a page, from both instances' tasks.
        for (bounds, within) in [
            ("from=%2Fpage%2F05&to=%2Fpage%2F12", 5..=12),
            ("prefix=%2Fpage%2F1", 10..=19),
        ] {
            let mut got = Vec::new();
            let mut cursor = String::new();
            loop {
                let path = format!("/v1/stores/{store}?{bounds}&limit=3{cursor}");
                let answer = get(addr, &path);
                assert_eq!(answer.status, 200, "{addr}{path}: {}", answer.body);
                for entry in answer.body["entries"].as_array().unwrap() {
                    got.push((entry["key"].as_str().unwrap().to_string(), window_of(entry)));
                }
                match answer.body["next"].as_str() {
                    Some(next) => cursor = format!("&cursor={next}"),
                    None => break,
                }
            }
            let want: Vec<_> = within
                .flat_map(|p| {
                    let page = format!("/page/{p:02}");
                    expected_of(&page, i64::MIN, i64::MAX)
                        .into_iter()
                        .map(move |window| (page.clone(), window))
                })
                .collect();
            assert_eq!(got, want, "{addr} {bounds}");
        }
        let refused = get(addr, &format!("/v1/stores/{store}/keys/x?from=yesterday"));
        assert_eq!(refused.status, 400, "{}", refused.body);
    }
    a.stop();
    b.stop();
}
