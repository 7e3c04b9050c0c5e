use super::fields::{ELSEWHERE_LIMIT, ELSEWHERE_PROBE};
use super::partitioner::partition_for;
use super::*;
use crate::formats::Codecs;
use crate::state::memory::MemoryBackend;

const TOPOLOGY: &str = "
name: bounded
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    fields: { n: { rule: count } }
    quiet_for: 1s
sinks:
  out: { topic: out, input: fold }
";

fn commit(task: &mut Task) {
    let entries = task.state().changelog().unwrap();
    task.committed(entries, &[]).unwrap();
}

/// A started task of [`TOPOLOGY`] on an in-memory state, at time 0.
fn started_task() -> Task {
    let topology = crate::topology::load_str("bounded.yaml", TOPOLOGY, &|_| None).unwrap();
    task_of(&Arc::new(topology), Routing::Direct)
}

/// A started task of `topology` on an in-memory state, at time 0.
fn task_of(topology: &Arc<Topology>, routing: Routing) -> Task {
    let stores = topology.stores().count();
    let mut task = Task::new(
        Arc::clone(topology),
        Box::new(MemoryBackend::new(stores)),
        routing,
    )
    .unwrap();
    task.set_processing_time(0);
    task.start(None).unwrap();
    task
}

/// Opens a fold for each of `folds` keys (`k0`, `k1`...), one event
/// each at offsets 0...; returns what the task emitted.
fn open_folds(task: &mut Task, folds: usize) -> Vec<Output> {
    let mut out = Vec::new();
    for i in 0..folds {
        let key = format!("k{i}");
        let origin = Origin {
            topic: "events",
            partition: 0,
            offset: i as i64,
            key: Some(key.as_bytes()),
            payload: Some(b"{}"),
            headers: &[],
        };
        let record = Record {
            key: Some(key.as_bytes().into()),
            value: serde_json::json!({}),
            timestamp: 0,
            headers: Vec::new(),
        };
        task.records()
            .process_source(0, &origin, Ok(record), &mut out)
            .unwrap();
    }
    out
}

/// After downtime every fold of a task is
/// overdue at once; they fire in rounds of at most
/// `TIMERS_PER_TRANSACTION`, each committed before the next.
#[test]
fn overdue_timers_fire_in_bounded_rounds() {
    let mut task = started_task();
    let folds = 2 * TIMERS_PER_TRANSACTION + TIMERS_PER_TRANSACTION / 2;
    let out = open_folds(&mut task, folds);
    assert!(out.is_empty());
    commit(&mut task);

    task.set_processing_time(3_600_000);
    let mut rounds = Vec::new();
    loop {
        let mut out = Vec::new();
        let more = task.punctuate(&mut out).unwrap();
        rounds.push(out.len());
        commit(&mut task);
        if !more {
            break;
        }
    }
    assert_eq!(
        rounds,
        vec![
            TIMERS_PER_TRANSACTION,
            TIMERS_PER_TRANSACTION,
            TIMERS_PER_TRANSACTION / 2
        ]
    );
}

fn folds_open(task: &Task) -> i64 {
    let (_, stats) = task.stats().find(|(name, _)| *name == "fold").unwrap();
    stats.gauge(NodeGauge::FoldsOpen)
}

/// A task resuming its own state takes the gauges saved at
/// its last commit instead of counting its stores; without them (or
/// when they do not fit the topology) it counts.
#[test]
fn a_start_takes_the_saved_gauges_and_counts_only_without_them() {
    let mut task = started_task();
    open_folds(&mut task, 3);
    commit(&mut task);
    assert_eq!(folds_open(&task), 3);
    let saved = task.gauges_meta();
    let parsed: BTreeMap<String, Vec<i64>> = serde_json::from_slice(&saved).unwrap();
    assert_eq!(parsed["fold/fold"][NodeGauge::FoldsOpen as usize], 3);

    // Saved gauges are taken as they are: a value the stores do not
    // hold shows that nothing was counted.
    let mut claimed = [0; NodeGauge::COUNT];
    claimed[NodeGauge::FoldsOpen as usize] = 7;
    let claimed = serde_json::to_vec(&BTreeMap::from([("fold/fold", claimed)])).unwrap();
    assert!(!task.start(Some(&claimed)).unwrap(), "not counted");
    assert_eq!(folds_open(&task), 7);
    let (_, committed) = task
        .committed_stats()
        .find(|(name, _)| *name == "fold")
        .unwrap();
    assert_eq!(committed.gauge(NodeGauge::FoldsOpen), 7);

    // No saved gauges, unreadable ones, or ones for another node type
    // (the node was a rollup before): the stores are counted.
    let other_type =
        serde_json::to_vec(&BTreeMap::from([("fold/rollup", [5; NodeGauge::COUNT])])).unwrap();
    for saved in [None, Some(&b"not json"[..]), Some(&other_type[..])] {
        assert!(task.start(saved).unwrap(), "counted");
        assert_eq!(folds_open(&task), 3, "saved: {saved:?}");
    }
}

/// A fold with every merge rule, keyed by a field, on a source it alone
/// reads: its records may be taken a field at a time.
const EVERY_RULE: &str = "
name: fields
kafka: { bootstrap_servers: 'unused:9092' }
sources:
  events: { topic: events }
nodes:
  fold:
    type: fold
    input: events
    key_by: /k
    fields:
      s: { rule: set, from: /a }
      u: { rule: key_union, from: /o }
      n: { rule: sum, from: /n/x }
      lo: { rule: min, from: /a }
      hi: { rule: max, from: /arr/1 }
      f: { rule: first, from: /a }
      l: { rule: last, from: /o }
      c: { rule: count }
      cf: { rule: count, from: /n }
      li: { rule: list, from: /a, max_len: 3 }
    max_events: 4
    quiet_for: 1s
sinks:
  out: { topic: out, input: fold }
";

/// A record's key and payload as read.
type Wire = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Two tasks of `topology`: one decodes whole records
/// ([`Records::process_source`]), the other takes them as
/// [`Records::process_source_bytes`] does.
fn twin_tasks(topology: &str, routing: Routing) -> (Task, Task, Codecs) {
    let topology = Arc::new(crate::topology::load_str("t.yaml", topology, &|_| None).unwrap());
    let codecs = Codecs::offline(&topology).unwrap();
    (
        task_of(&topology, routing),
        task_of(&topology, routing),
        codecs,
    )
}

/// Feeds `(key, payload)` records to both tasks, one way each, and
/// checks that they emit the same outputs and write the same state.
fn same_both_ways(whole: &mut Task, fields: &mut Task, codecs: &Codecs, records: &[Wire]) {
    for (offset, (key, payload)) in records.iter().enumerate() {
        let origin = Origin {
            topic: "events",
            partition: 0,
            offset: offset as i64,
            key: key.as_deref(),
            payload: payload.as_deref(),
            headers: &[],
        };
        let timestamp = 1_000 + offset as i64;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let decoded = codecs.decode_record(0, origin.key, origin.payload, timestamp, Vec::new());
        whole
            .records()
            .process_source(0, &origin, decoded, &mut a)
            .unwrap();
        fields
            .records()
            .process_source_bytes(0, &origin, codecs, timestamp, &mut b)
            .unwrap();
        let payload = payload.as_deref().map(String::from_utf8_lossy);
        assert_eq!(a, b, "record {offset}: {key:?} {payload:?}");
    }
    let changelog = |task: &mut Task| {
        let entries = task.state().changelog().unwrap();
        entries
            .iter()
            .map(|e| (e.store, e.key.clone(), e.value.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(changelog(whole), changelog(fields), "state written");
}

/// A value as its text, from a few of each kind: strings with escapes,
/// integers at their limits, floats, `-0`, objects with a repeated
/// name, arrays.
fn json_text() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        r#""x""#,
        r#""y\n""#,
        r#""\u0061""#,
        r#""a""#,
        "3",
        "-2",
        "2.5",
        "-0",
        "1e3",
        "18446744073709551615",
        "-9223372036854775808",
        "true",
        "null",
        r#"[1,"x"]"#,
        "[0,5]",
        r#"["a","b"]"#,
        r#"{"q":1}"#,
        r#"{"x":1}"#,
        r#"{"x":2.5}"#,
        r#"{"x":"s"}"#,
        r#"{"m1":1}"#,
        r#"{"m2":2,"m1":3}"#,
        r#"{"m1":1,"m1":2}"#,
        "{}",
    ])
    .prop_map(String::from)
}

/// A record's payload: an object of some of the fields the fold reads
/// (a name may repeat), or text that is not such an object, or no
/// payload.
fn payload() -> impl Strategy<Value = Option<Vec<u8>>> {
    let name = prop::sample::select(vec!["k", "a", "o", "n", "arr", "z"]);
    let object = prop::collection::vec((name, json_text()), 0..7).prop_map(|fields| {
        let fields: Vec<String> = fields
            .iter()
            .map(|(name, value)| format!(r#""{name}":{value}"#))
            .collect();
        format!("{{{}}}", fields.join(","))
    });
    prop_oneof![
        8 => object.prop_map(|text| Some(text.into_bytes())),
        1 => json_text().prop_map(|text| Some(text.into_bytes())),
        1 => prop::sample::select(vec![
            &br#"{"k": "a","#[..],
            &b"\xff\xfe"[..],
            &br#"{"k": "a"} x"#[..],
            &b""[..],
        ])
        .prop_map(|bytes| Some(bytes.to_vec())),
        1 => Just(None),
    ]
}

fn record() -> impl Strategy<Value = Wire> {
    let key = prop::sample::select(vec![
        None,
        Some(&b"a"[..]),
        Some(&b"b"[..]),
        Some(&b"3"[..]),
    ])
    .prop_map(|key| key.map(<[u8]>::to_vec));
    (key, payload())
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the records, taking them a field at a time emits and
    /// stores exactly what decoding them whole does, straight or
    /// through a repartition topic.
    #[test]
    fn fields_and_whole_records_fold_alike(
        records in prop::collection::vec(record(), 1..40),
        partitioned in any::<bool>(),
    ) {
        let routing = if partitioned {
            Routing::Partitioned { partition: 0, partitions: 2 }
        } else {
            Routing::Direct
        };
        let (mut whole, mut fields, codecs) = twin_tasks(EVERY_RULE, routing);
        same_both_ways(&mut whole, &mut fields, &codecs, &records);
        prop_assert_eq!(whole.fields_taken, 0);
    }
}

/// A source whose records are mostly bound for other partitions' tasks
/// is taken whole but for a probe one record in [`ELSEWHERE_PROBE`];
/// when its records turn local again, it is read a field at a time
/// again. Both ways emit the same outputs throughout.
#[test]
fn a_source_mostly_bound_elsewhere_is_taken_whole() {
    let routing = Routing::Partitioned {
        partition: 0,
        partitions: 4,
    };
    let (mut whole, mut fields, codecs) = twin_tasks(EVERY_RULE, routing);
    let record = |k: String| {
        let event = format!(r#"{{"k":"{k}","a":"x","n":{{"x":1}}}}"#);
        (Some(b"unrelated".to_vec()), Some(event.into_bytes()))
    };
    let keys = |local: bool| {
        (0..)
            .map(|i| format!("key_{i}"))
            .filter(move |k| (partition_for(k.as_bytes(), 4) == 0) == local)
    };
    let elsewhere: Vec<Wire> = keys(false).take(400).map(record).collect();
    same_both_ways(&mut whole, &mut fields, &codecs, &elsewhere);
    // The average passes the limit after four records bound elsewhere
    // (each read a field at a time); after that only the probes are.
    assert_eq!(fields.fields_taken, 0);
    let path = fields.field_paths[0].as_ref().unwrap();
    assert_eq!(path.read, 4 + (400 - 4) / ELSEWHERE_PROBE as usize);
    assert!(path.elsewhere > ELSEWHERE_LIMIT);

    let local: Vec<Wire> = keys(true).take(400).map(record).collect();
    same_both_ways(&mut whole, &mut fields, &codecs, &local);
    let path = fields.field_paths[0].as_ref().unwrap();
    assert!(path.elsewhere <= ELSEWHERE_LIMIT);
    // Local probes bring the average down; from then on every record
    // is read a field at a time.
    assert!(
        fields.fields_taken > 300,
        "{} of 400 local records read a field at a time",
        fields.fields_taken
    );
}

/// The social-metrics event is taken a field at a time, and sources
/// that cannot be are decoded whole: one feeding two nodes, one with a
/// timestamp field, one whose only node takes whole records.
#[test]
fn which_records_are_taken_a_field_at_a_time() {
    let event = br#"{"k":"a","a":"x","o":{"m1":1},"n":{"x":2},"arr":[0,5]}"#;
    let (mut whole, mut fields, codecs) = twin_tasks(EVERY_RULE, Routing::Direct);
    let records = [(Some(b"a".to_vec()), Some(event.to_vec()))];
    same_both_ways(&mut whole, &mut fields, &codecs, &records);
    assert_eq!(fields.fields_taken, 1);
    // Without its key field the record is decoded whole, and
    // dead-lettered as before.
    let records = [(Some(b"a".to_vec()), Some(br#"{"a":"x"}"#.to_vec()))];
    same_both_ways(&mut whole, &mut fields, &codecs, &records);
    assert_eq!(fields.fields_taken, 1);

    let event = br#"{"post_id":"post_1","account_id":"account_1","metrics":{"likes":3}}"#;
    let records = [(Some(b"account_1".to_vec()), Some(event.to_vec()))];

    let fold = "
  fold:
    type: fold
    input: events
    fields: { p: { rule: set, from: /post_id } }
    quiet_for: 1s";
    let filter = "
  other:
    type: filter
    input: events
    condition: '.post_id != null'";
    let plain = "events: { topic: events }";
    let timed = "events: { topic: events, timestamp: /at }";
    let cases = [
        (plain, vec![fold], 1),
        (timed, vec![fold], 0),
        (plain, vec![fold, filter], 0),
        (plain, vec![filter], 0),
    ];
    for (source, nodes, taken) in cases {
        let sinks: String = nodes
            .iter()
            .map(|node| {
                let name = if *node == fold { "fold" } else { "other" };
                format!("\n  {name}_out: {{ topic: {name}-out, input: {name} }}")
            })
            .collect();
        let topology = format!(
            "name: t\nkafka: {{ bootstrap_servers: 'unused:9092' }}\nsources:\n  {source}\nnodes:{}\nsinks:{sinks}\n",
            nodes.concat()
        );
        let (mut whole, mut fields, codecs) = twin_tasks(&topology, Routing::Direct);
        same_both_ways(&mut whole, &mut fields, &codecs, &records);
        assert_eq!(fields.fields_taken, taken, "{topology}");
    }
}
