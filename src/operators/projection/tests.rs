use serde_json::json;

use super::super::testing::{Harness, record, values};
use super::*;

fn question_feed(extra: Value) -> Harness {
    let mut options = json!({
        "type": "projection",
        "event_id": "/event_id",
        "event_name": "/type",
        "order_by": "/sequence",
        "rules": {
            "QuestionCreated": ". + {title: $event.title, is_deleted: (.is_deleted // false)}",
            "AnswerAdded": ".answers += 1",
            "QuestionDeleted": ".is_deleted = true",
            "QuestionPurged": "null",
        },
    });
    if let (Value::Object(options), Value::Object(extra)) = (&mut options, extra) {
        options.extend(extra);
    }
    Harness::new(options, Some("/question_id"))
}

fn event(id: &str, name: &str, sequence: i64) -> Record {
    record(
        "q1",
        json!({"event_id": id, "type": name, "question_id": "q1", "sequence": sequence, "title": "Why?"}),
        sequence,
    )
}

#[test]
fn a_delete_before_its_create_still_ends_deleted_at_version_2() {
    let mut h = question_feed(json!({}));
    let first = h.process(event("e2", "QuestionDeleted", 2)).unwrap();
    assert_eq!(
        values(&first),
        vec![json!({"is_deleted": true, "question_id": "q1", "version": 1})]
    );
    let second = h.process(event("e1", "QuestionCreated", 1)).unwrap();
    assert_eq!(
        values(&second),
        vec![json!({"title": "Why?", "is_deleted": true, "question_id": "q1", "version": 2})]
    );
    assert_eq!(h.count(NodeCounter::ProjectionRefolds), 1);
}

#[test]
fn a_duplicate_event_changes_nothing() {
    let mut h = question_feed(json!({}));
    h.process(event("e1", "QuestionCreated", 1)).unwrap();
    h.process(event("e2", "AnswerAdded", 2)).unwrap();
    assert!(
        h.process(event("e1", "QuestionCreated", 1))
            .unwrap()
            .is_empty()
    );
    assert_eq!(h.count(NodeCounter::ProjectionDuplicates), 1);
    let entity = h
        .store::<Entity>("entities")
        .get(b"q1")
        .unwrap()
        .cloned()
        .unwrap();
    assert_eq!(entity.version, 2);
    assert_eq!(entity.entity["answers"], json!(1));
}

#[test]
fn re_folds_start_from_the_last_snapshot_before_the_late_event() {
    let mut h = question_feed(json!({"snapshot_every": 2}));
    h.process(event("e1", "QuestionCreated", 1)).unwrap();
    for (i, seq) in [(2, 3), (3, 5), (4, 7), (5, 9)] {
        h.process(event(&format!("e{i}"), "AnswerAdded", seq))
            .unwrap();
    }
    // Snapshots at versions 2 (seq 3) and 4 (seq 7).
    assert_eq!(h.store::<Snapshot>("snapshots").count().unwrap(), 2);
    let out = h.process(event("e6", "QuestionDeleted", 6)).unwrap();
    assert_eq!(
        values(&out),
        vec![
            json!({"title": "Why?", "is_deleted": true, "answers": 4, "question_id": "q1", "version": 6})
        ]
    );
    let snapshots = h
        .store::<Snapshot>("snapshots")
        .range(Bound::Unbounded, Bound::Unbounded, 10)
        .unwrap();
    let versions: Vec<u64> = snapshots.iter().map(|(_, s)| s.version).collect();
    assert_eq!(
        versions,
        vec![2, 4, 6],
        "the version-4 snapshot moved to seq 6"
    );
    assert_eq!(snapshots[1].1.entity["is_deleted"], json!(true));
}

#[test]
fn a_rule_yielding_null_deletes_the_entity_and_may_emit_a_tombstone() {
    let mut h = question_feed(json!({"tombstone": true}));
    h.process(event("e1", "QuestionCreated", 1)).unwrap();
    let out = h.process(event("e2", "QuestionPurged", 2)).unwrap();
    assert_eq!(values(&out), vec![Value::Null]);
    let mut h = question_feed(json!({}));
    h.process(event("e1", "QuestionCreated", 1)).unwrap();
    let out = h.process(event("e2", "QuestionPurged", 2)).unwrap();
    assert_eq!(
        values(&out),
        vec![json!({"question_id": "q1", "version": 2})]
    );
}

#[test]
fn bad_events_are_the_record_s_fault_and_change_nothing() {
    let mut h = Harness::new(
        json!({
            "type": "projection", "event_id": "/id", "event_name": "/type", "order_by": "/seq",
            "rules": {"Set": ".n = $event.n", "Add": ".n += $event.n"},
            "on_unknown_event": "dead_letter",
        }),
        None,
    );
    let err = h
        .process(record("k", json!({"id": 1, "type": "Other", "seq": 1}), 0))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no rule for event `Other` (rules: Add, Set)"
    );
    h.process(record(
        "k",
        json!({"id": 2, "type": "Set", "seq": 2, "n": 1}),
        0,
    ))
    .unwrap();
    h.process(record(
        "k",
        json!({"id": 3, "type": "Add", "seq": 4, "n": 1}),
        0,
    ))
    .unwrap();
    // Late, and it breaks the re-fold of the event after it.
    let err = h
        .process(record(
            "k",
            json!({"id": 4, "type": "Set", "seq": 3, "n": "x"}),
            0,
        ))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("re-folding after this late event failed: rule `Add` failed: "),
        "{err}"
    );
    let entity = h
        .store::<Entity>("entities")
        .get(b"k")
        .unwrap()
        .cloned()
        .unwrap();
    assert_eq!((entity.version, entity.entity), (2, json!({"n": 2})));
    let out = h
        .process(record("k", json!({"id": 5, "type": "Set", "seq": 5}), 0))
        .unwrap();
    assert_eq!(
        values(&out),
        vec![json!({"n": null, "id": "k", "version": 3})]
    );
    let err = h
        .process(record("k", json!({"id": 6, "type": 7, "seq": 6}), 0))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "event name /type must be a string, found a number"
    );
}
