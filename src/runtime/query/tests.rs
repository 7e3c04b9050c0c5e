//! Unit tests of the query server: the task map, and the server
//! in-process (instances on loopback, their directories written by hand).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;

use serde_json::json;

use super::*;
use crate::secrets::Secret;
use crate::state::rocks::{RocksBackend, RocksResources};
use crate::state::{RawWrite, StateBackend};
use crate::task::partitioner::partition_for;

fn backend(dir: &std::path::Path, state: &Arc<QueryState>, task: i32) -> RocksBackend {
    let mut backend =
        RocksBackend::open(dir, &["n-latest".to_string()], &RocksResources::default()).unwrap();
    let db = backend.shared();
    state.opened(task, Arc::clone(&db));
    let hook_state = Arc::clone(state);
    backend.on_close(Box::new(move || hook_state.closing(task, &db)));
    backend
}

#[test]
fn only_running_tasks_answer_and_closing_releases_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let state = QueryState::new();
    let mut db = backend(dir.path(), &state, 3);
    db.apply(
        &[
            RawWrite {
                store: 0,
                key: b"a1".as_slice().into(),
                value: Some(br#"{"v":1}"#.as_slice().into()),
            },
            RawWrite {
                store: 0,
                key: b"b1".as_slice().into(),
                value: Some(br#"{"v":2}"#.as_slice().into()),
            },
        ],
        &[],
    )
    .unwrap();
    assert_eq!(
        state.get(3, "n-latest", b"a1").unwrap_err(),
        ReadError::Unavailable(Local::Restoring)
    );
    let before = state.generation();
    state.started(3);
    assert!(state.generation() > before);
    assert_eq!(state.running(), vec![3]);
    assert_eq!(
        state.get(3, "n-latest", b"a1").unwrap(),
        Some(serde_json::json!({"v": 1}))
    );
    assert_eq!(state.get(3, "n-latest", b"zz").unwrap(), None);
    let range = KeyRange {
        start: b"b".to_vec(),
        end: Some(b"c".to_vec()),
    };
    let scanned = state.scan(3, "n-latest", &range, 10).unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].0, b"b1");
    assert_eq!(
        state.get(1, "n-latest", b"a1").unwrap_err(),
        ReadError::Unavailable(Local::Absent)
    );
    drop(db);
    assert_eq!(
        state.get(3, "n-latest", b"a1").unwrap_err(),
        ReadError::Unavailable(Local::Absent)
    );
    // The database closed with the backend: it opens again at once.
    let _again = backend(dir.path(), &state, 3);
}

// The server in-process: instances on loopback, their tasks' stores in
// temporary RocksDB databases, their directories written by hand.

const TOPOLOGY: &str = "
name: q
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  updates: { topic: updates }
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
  latest_by_id: { topic: latest-by-id, input: by_id }
  latest_by_key: { topic: latest-by-key, input: by_key }
";

fn topology() -> Arc<Topology> {
    Arc::new(crate::topology::load_str("q.yaml", TOPOLOGY, &|_| None).unwrap())
}

/// What the `ordered` store holds for a key whose newest update is `n`.
fn stored(n: i64) -> Vec<u8> {
    format!(r#"{{"version":{{"order":1}},"value":{{"n":{n}}},"clock":1}}"#).into_bytes()
}

/// One instance's server and the tasks it holds.
struct Instance {
    server: server::QueryServer,
    state: Arc<QueryState>,
    directory: Arc<endpoints::Directory>,
    _tasks: Vec<(tempfile::TempDir, RocksBackend)>,
}

impl Instance {
    /// `name` with `partitions` partitions; `tasks`: each task's keys (the
    /// same in both stores, valued by their index), running.
    fn start(
        name: &str,
        partitions: i32,
        tasks: &[(i32, Vec<Vec<u8>>)],
        token: Option<&str>,
    ) -> Instance {
        Instance::start_with(name, partitions, tasks, |context| {
            context.with_token(token.map(Secret::new))
        })
    }

    /// [`Instance::start`] with the server's settings made by `configure`.
    fn start_with(
        name: &str,
        partitions: i32,
        tasks: &[(i32, Vec<Vec<u8>>)],
        configure: impl FnOnce(server::Context) -> server::Context,
    ) -> Instance {
        let topology = topology();
        let stores: Vec<String> = topology.stores().map(|s| s.name.clone()).collect();
        let state = QueryState::new();
        state.set_partitions(partitions);
        let mut held = Vec::new();
        for (task, keys) in tasks {
            let dir = tempfile::tempdir().unwrap();
            let mut backend =
                RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
            let writes: Vec<RawWrite> = (0..stores.len())
                .flat_map(|store| {
                    keys.iter().zip(0..).map(move |(key, n)| RawWrite {
                        store,
                        key: key.as_slice().into(),
                        value: Some(stored(n).as_slice().into()),
                    })
                })
                .collect();
            backend.apply(&writes, &[]).unwrap();
            state.opened(*task, backend.shared());
            state.started(*task);
            held.push((dir, backend));
        }
        let directory = Arc::new(endpoints::Directory::default());
        let context = configure(server::Context::new(
            topology,
            name.into(),
            Arc::clone(&state),
            Arc::clone(&directory),
        ));
        let server = server::QueryServer::start("127.0.0.1:0".parse().unwrap(), context).unwrap();
        directory.set_own_address(server.addr.to_string());
        Instance {
            server,
            state,
            directory,
            _tasks: held,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Tells this instance that `other` runs `tasks`.
    fn knows(&self, id: &str, address: SocketAddr, tasks: Vec<i32>, at: i64) {
        self.directory.set(
            id.into(),
            Some(endpoints::Endpoint {
                address: address.to_string(),
                running: tasks,
                at,
            }),
        );
    }
}

/// An HTTP answer: status, headers (lower-case names), JSON body.
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Value,
}

/// `method path` on `addr` with more `headers`.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    }
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[])
}

/// Keys `k00`… that `partition_for` puts on `task` of `partitions`.
fn keys_of(task: i32, partitions: i32, count: usize) -> Vec<Vec<u8>> {
    (0..)
        .map(|i| format!("k{i:02}").into_bytes())
        .filter(|k| partition_for(k, partitions) == task)
        .take(count)
        .collect()
}

/// Two instances on two partitions, `a` running 0 and `b` running 1,
/// each knowing the other.
fn pair(keys: [Vec<Vec<u8>>; 2], token: Option<&str>) -> (Instance, Instance) {
    let [zero, one] = keys;
    let a = Instance::start("a", 2, &[(0, zero)], token);
    let b = Instance::start("b", 2, &[(1, one)], token);
    a.knows("b", b.addr(), vec![1], 10);
    b.knows("a", a.addr(), vec![0], 10);
    (a, b)
}

#[test]
fn a_restoring_or_unowned_task_answers_503_and_a_running_one_its_committed_value() {
    let mine = keys_of(0, 2, 1).remove(0);
    let theirs = String::from_utf8(keys_of(1, 2, 1).remove(0)).unwrap();
    let a = Instance::start("a", 2, &[], None);
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<String> = topology().stores().map(|s| s.name.clone()).collect();
    let mut backend = RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
    backend
        .apply(
            &[RawWrite {
                store: 0,
                key: mine.as_slice().into(),
                value: Some(stored(1).as_slice().into()),
            }],
            &[],
        )
        .unwrap();
    a.state.opened(0, backend.shared());
    let mine = String::from_utf8(mine).unwrap();
    let path = |key: &str| format!("/v1/stores/by_id-latest/keys/{key}");

    let answer = get(a.addr(), &path(&mine));
    assert_eq!(answer.status, 503, "restoring");
    assert_eq!(answer.headers["retry-after"], "1");
    a.state.started(0);
    let answer = get(a.addr(), &path(&mine));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["value"]["value"], json!({"n": 1}));
    assert_eq!(answer.body["partition"], json!(0));
    // Partition 1 runs nowhere this instance knows of.
    let answer = get(a.addr(), &path(&theirs));
    assert_eq!(answer.status, 503, "{}", answer.body);
    // A forwarded request for a task not running here is never forwarded
    // again.
    let forwarded = [(server::FORWARDED, "b")];
    let answer = request(
        a.addr(),
        "GET",
        &format!("{}?tasks=1", path(&theirs)),
        &forwarded,
    );
    assert_eq!(answer.status, 503);
    let answer = request(
        a.addr(),
        "GET",
        &format!("{}?tasks=0", path(&mine)),
        &forwarded,
    );
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body["entries"][0]["key"], json!(mine));
    let answer = get(a.addr(), "/v1/stores/nope/keys/x");
    assert_eq!(answer.status, 404);
    assert_eq!(
        answer.body["stores"],
        json!(["by_id-latest", "by_key-latest"])
    );
    let answer = request(a.addr(), "POST", "/v1/stores", &[]);
    assert_eq!(answer.status, 405);
    assert!(
        answer.headers["allow"].contains("GET"),
        "{:?}",
        answer.headers
    );
    assert_eq!(answer.body["error"], json!("only GET is served"));
    // Unknown paths, also under a store.
    for path in ["/v2", "/v1/stores/by_id-latest/keys/k/other", "/v1/stores/"] {
        assert_eq!(get(a.addr(), path).status, 404, "{path}");
    }
    // A key with an encoded slash is one key.
    let answer = get(a.addr(), "/v1/stores/by_id-latest/keys/a%2Fb/metadata");
    assert_eq!(answer.body["key"], json!("a/b"), "{}", answer.body);
    a.server.stop();
}

#[test]
fn a_key_the_owner_does_not_have_is_404_not_503() {
    let (zero, one) = (keys_of(0, 2, 3), keys_of(1, 2, 4));
    // Keys of partition 1 that b does not hold.
    let missing = String::from_utf8(one[3].clone()).unwrap();
    let present = String::from_utf8(one[0].clone()).unwrap();
    let (a, b) = pair([zero, one[..3].to_vec()], None);
    for store in ["by_id-latest", "by_key-latest"] {
        // a forwards to b, the owner of partition 1; b reads locally.
        for at in [a.addr(), b.addr()] {
            let answer = get(at, &format!("/v1/stores/{store}/keys/{missing}"));
            assert_eq!(answer.status, 404, "{store} at {at}: {}", answer.body);
            assert_eq!(answer.body["error"], json!("no such key"));
            let answer = get(at, &format!("/v1/stores/{store}/keys/{present}"));
            assert_eq!(answer.status, 200, "{store} at {at}: {}", answer.body);
            assert_eq!(answer.body["partition"], json!(1));
        }
    }
    a.server.stop();
    b.server.stop();
}

#[test]
fn following_next_walks_every_key_once_in_order_across_instances() {
    let mut zero = keys_of(0, 2, 9);
    let mut one = keys_of(1, 2, 8);
    // Keys that are not UTF-8, on both.
    zero.push(vec![0xff, 0x00]);
    one.push(vec![0xfe, 0xff, 0x01]);
    let mut every: Vec<Vec<u8>> = zero.iter().chain(&one).cloned().collect();
    every.sort();
    let (a, b) = pair([zero, one], None);
    for (at, store) in [(a.addr(), "by_id-latest"), (b.addr(), "by_key-latest")] {
        let mut walked: Vec<Vec<u8>> = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let after = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
            let path = format!("/v1/stores/{store}?limit=4&key_encoding=base64{after}");
            let page = get(at, &path);
            assert_eq!(page.status, 200, "{path}: {}", page.body);
            let entries = page.body["entries"].as_array().unwrap();
            assert!(entries.len() <= 4);
            walked.extend(entries.iter().map(|e| {
                keys::KeyEncoding::Base64
                    .decode(e["key"].as_str().unwrap().as_bytes())
                    .unwrap()
            }));
            pages += 1;
            assert_eq!(page.body["truncated"], json!(!page.body["next"].is_null()));
            match page.body["next"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        assert_eq!(walked, every, "{store} at {at}");
        assert_eq!(pages, every.len().div_ceil(4));
    }
    // In text, a key that is not UTF-8 keeps its bytes in `key_base64`.
    let last = get(a.addr(), "/v1/stores/by_id-latest?from=%FE&limit=10");
    let entries = last.body["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{}", last.body);
    assert_eq!(
        entries[0]["key_base64"],
        json!(keys::base64url(&[0xfe, 0xff, 0x01]))
    );
    // A key range, both ends inclusive, and a key asked in base64.
    let range = get(a.addr(), "/v1/stores/by_key-latest?from=k03&to=k07");
    let keys: Vec<&str> = range.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["k03", "k04", "k05", "k06", "k07"]);
    let binary = keys::base64url(&[0xff, 0x00]);
    let answer = get(
        b.addr(),
        &format!("/v1/stores/by_key-latest/keys/{binary}?key_encoding=base64"),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["key"], json!(binary));
    assert_eq!(
        get(a.addr(), "/v1/stores/by_id-latest?cursor=%%%").status,
        400
    );
    a.server.stop();
    b.server.stop();
}

/// An owner stand-in that answers only once `expected` requests have
/// arrived at all the stand-ins of `arrived`: owners asked one after the
/// other never get there.
fn rendezvous_owner(
    key: &'static [u8],
    partition: i32,
    arrived: Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>,
    expected: usize,
) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        let (count, all) = &*arrived;
        let mut count = count.lock().unwrap();
        *count += 1;
        all.notify_all();
        let (count, _) = all
            .wait_timeout_while(count, std::time::Duration::from_secs(20), |c| *c < expected)
            .unwrap();
        drop(count);
        let body = json!({"entries": [{"key": keys::base64url(key), "partition": partition, "value": {"n": partition}}]})
            .to_string();
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    addr
}

#[test]
fn the_owners_of_a_scan_are_asked_at_once() {
    let arrived = Arc::new((std::sync::Mutex::new(0), std::sync::Condvar::new()));
    let x = rendezvous_owner(b"x", 0, Arc::clone(&arrived), 2);
    let y = rendezvous_owner(b"y", 1, Arc::clone(&arrived), 2);
    let a = Instance::start("a", 2, &[], None);
    a.knows("x", x, vec![0], 10);
    a.knows("y", y, vec![1], 10);
    let scan = get(a.addr(), "/v1/stores/by_key-latest");
    assert_eq!(scan.status, 200, "{}", scan.body);
    let keys: Vec<&str> = scan.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["x", "y"]);
    a.server.stop();
}

#[test]
fn a_request_not_answered_within_the_request_timeout_is_503() {
    // The owner of partition 1 takes connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = Instance::start_with("a", 2, &[], |context| {
        context.with_request_timeout(std::time::Duration::from_millis(300))
    });
    a.knows("b", silent.local_addr().unwrap(), vec![1], 10);
    let theirs = String::from_utf8(keys_of(1, 2, 1).remove(0)).unwrap();
    let answer = get(a.addr(), &format!("/v1/stores/by_id-latest/keys/{theirs}"));
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(answer.headers["retry-after"], "1");
    assert_eq!(
        answer.body["error"],
        json!("not answered within queries.request_timeout (300ms)")
    );
    // What needs no other instance is answered as before.
    assert_eq!(get(a.addr(), "/v1/stores").status, 200);
    drop(silent);
    a.server.stop();
}

#[test]
fn with_a_token_every_request_needs_it_and_forwarding_cannot_be_forged() {
    let (zero, one) = (keys_of(0, 2, 2), keys_of(1, 2, 2));
    let theirs = String::from_utf8(one[0].clone()).unwrap();
    let (a, b) = pair([zero, one], Some("s3cret"));
    let bearer = [("Authorization", "Bearer s3cret")];
    let path = format!("/v1/stores/by_id-latest/keys/{theirs}");
    for p in ["/v1/stores", "/v1/instances", path.as_str()] {
        let refused = get(a.addr(), p);
        assert_eq!(refused.status, 401, "{p}");
        assert_eq!(refused.headers["www-authenticate"], "Bearer");
        let wrong = request(a.addr(), "GET", p, &[("Authorization", "Bearer guess")]);
        assert_eq!(wrong.status, 401, "{p}");
    }
    // a forwards to b with the token.
    let answer = request(a.addr(), "GET", &path, &bearer);
    assert_eq!(answer.status, 200, "{}", answer.body);
    // The forwarded header without the token is refused like any request.
    let forged = request(
        b.addr(),
        "GET",
        &format!("{path}?tasks=1"),
        &[(server::FORWARDED, "a")],
    );
    assert_eq!(forged.status, 401);
    // An instance with another token is refused by the owner: 502, not a
    // 503 that asking again would not cure.
    let c = Instance::start("c", 2, &[], Some("other"));
    c.knows("b", b.addr(), vec![1], 10);
    let answer = request(c.addr(), "GET", &path, &[("Authorization", "Bearer other")]);
    assert_eq!(answer.status, 502, "{}", answer.body);
    for i in [a, b, c] {
        i.server.stop();
    }
}

#[test]
fn metadata_says_which_partition_and_instance_hold_a_key() {
    let a = Instance::start("a", 3, &[(0, Vec::new())], None);
    let b = Instance::start("b", 3, &[], None);
    // Partition 2 restores on a; partition 1 runs on b; a stale entry of
    // an instance that died with nothing left.
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<String> = topology().stores().map(|s| s.name.clone()).collect();
    let restoring = RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
    a.state.opened(2, restoring.shared());
    a.knows("b", b.addr(), vec![1], crate::runtime::wall_clock_ms());
    a.knows("gone", "127.0.0.1:9".parse().unwrap(), vec![1], 5);
    let key = |task: i32| String::from_utf8(keys_of(task, 3, 1).remove(0)).unwrap();
    let metadata = |task: i32| {
        let answer = get(
            a.addr(),
            &format!("/v1/stores/by_id-latest/keys/{}/metadata", key(task)),
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body
    };
    let on_a = json!({"instance": "a", "address": a.addr().to_string()});
    let on_b = json!({"instance": "b", "address": b.addr().to_string()});
    assert_eq!(metadata(0)["status"], json!("running"));
    assert_eq!(metadata(0)["active"], on_a);
    assert_eq!(metadata(1)["partition"], json!(1));
    assert_eq!(metadata(1)["active"], on_b);
    assert_eq!(metadata(2)["status"], json!("restoring"));
    assert_eq!(metadata(2)["active"], on_a);
    // The record key's store: the partition is not known, every one is
    // listed.
    let unrouted = get(a.addr(), "/v1/stores/by_key-latest/keys/k00/metadata").body;
    assert_eq!(unrouted["partition"], Value::Null);
    let statuses: Vec<&str> = unrouted["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["running", "running", "restoring"]);

    let instances = get(a.addr(), "/v1/instances").body;
    let list = instances["instances"].as_array().unwrap();
    assert_eq!(list.len(), 2, "the dead instance is left out: {instances}");
    assert_eq!(list[0]["instance"], json!("a"));
    assert_eq!(list[0]["running"], json!([0]));
    assert_eq!(list[0]["restoring"], json!([2]));
    assert_eq!(list[0]["stores"], json!(["by_id-latest", "by_key-latest"]));
    assert_eq!(list[1]["instance"], json!("b"));
    assert_eq!(list[1]["address"], json!(b.addr().to_string()));
    assert_eq!(list[1]["running"], json!([1]));
    drop(restoring);
    a.server.stop();
    b.server.stop();
}
