//! `dedup`: drop records whose id was already seen within `retention`.
//!
//! Under at-least-once delivery the same event arrives more than once; its
//! producer gave it an id (a UUID) so consumers can tell. A `dedup` node
//! remembers every id it lets through for `retention` ("the last couple of
//! hours") and drops — or dead-letters — later records with the same id.
//! First wins: the first record with an id passes, unchanged; its
//! duplicates never do, and they do not extend the retention, so an id is
//! forgotten exactly `retention` after it was first seen. A record whose id
//! was first seen longer ago passes and starts a new retention period.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `id_field` | JSON pointer to the id in the value (`/event_id`) |
//! | `id_header` | or: the header carrying the id (its bytes are the id) |
//! | `retention` | how long an id is remembered after it was first seen (`6h`) |
//! | `clock` | `processing` (default, wall clock) or `event` (record time) |
//! | `on_duplicate` | `drop` (default) or `dead_letter` |
//!
//! Exactly one of `id_field` and `id_header` is required. A record without
//! an id goes to the dead-letter topic. Ids are compared as the bytes of
//! their text (a number id `7` and a string id `"7"` are the same id).
//!
//! Duplicates must reach the same task: the node groups by key, so either
//! the producer keys an event and its retries alike (the usual case: the
//! entity id), or the node sets `key_by` (for example `key_by: /event_id`).
//!
//! ```yaml
//! dedup_events:
//!   type: dedup
//!   input: question_events
//!   id_field: /event_id
//!   retention: 6h
//! ```
//!
//! State: `<node>-seen` maps each id to the time it was first seen and the
//! source position (topic and offset) of the record that carried it, so a
//! record *re-delivered* — read again from the same offset because its
//! transaction did not commit its consumer offset, as under
//! `at_least_once` after a crash — is recognised as the same record and
//! passes again instead of being mistaken for a duplicate of itself. Ids
//! are forgotten by time without scanning the store: every remembered id
//! has a timer at its expiry in `<node>-timers`, an index ordered by
//! deadline, so expiring costs one range read of what is due.
//!
//! Counters: `streamfold_dedup_duplicates_total` (duplicates found),
//! `streamfold_node_dropped_records_total` (duplicates dropped),
//! `streamfold_dedup_redeliveries_total`, `streamfold_dedup_expired_ids_total`.

use std::borrow::Cow;
use std::collections::HashSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::keyed::{OnReject, ago, id_bytes, topic_fingerprint};
use super::{BuiltOperator, Context, Issue, NodeInfo, NodeInput, OpError, Operator, OperatorSpec};
use crate::config::types::{HumanDuration, JsonPointer};
use crate::record::{Record, Timestamp, key_text};
use crate::state::timers::{Clock, Timer};
use crate::state::{JsonState, StateError, StateSet, StoreHandle};
use crate::telemetry::NodeCounter;

/// Options of a `dedup` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct DedupConfig {
    /// JSON pointer to the record's unique id in its value (`/event_id`).
    /// Exactly one of `id_field` and `id_header` is required.
    #[serde(default)]
    pub(crate) id_field: Option<JsonPointer>,
    /// Name of the header carrying the record's unique id; the header's
    /// bytes are the id.
    #[serde(default)]
    pub(crate) id_header: Option<String>,
    /// How long an id is remembered after it was first seen (`6h`).
    pub(crate) retention: HumanDuration,
    /// Clock measuring the retention: `processing` (wall clock, default) or
    /// `event` (record time, advanced per task).
    #[serde(default)]
    pub(crate) clock: Clock,
    /// What happens to a duplicate: `drop` (default, counted) or
    /// `dead_letter`.
    #[serde(default)]
    pub(crate) on_duplicate: OnReject,
}

impl OperatorSpec for DedupConfig {
    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        &["seen"]
    }

    fn uses_timers(&self) -> bool {
        true
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[
            NodeCounter::Dropped,
            NodeCounter::DedupDuplicates,
            NodeCounter::DedupRedeliveries,
            NodeCounter::DedupExpired,
        ]
    }

    fn validate(&self, _node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        match (&self.id_field, &self.id_header) {
            (None, None) => issues.push(Issue::new(
                &[],
                "a dedup node needs the id of each record: set `id_field` (a JSON pointer) or `id_header`",
            )),
            (Some(_), Some(_)) => issues.push(Issue::new(
                &["id_header"],
                "set either `id_field` or `id_header`, not both: a record has one id",
            )),
            (None, Some(header)) if header.is_empty() => {
                issues.push(Issue::new(&["id_header"], "the header name is empty"));
            }
            _ => {}
        }
        if self.retention.under_a_millisecond() {
            issues.push(Issue::new(
                &["retention"],
                "must be at least 1ms, or no duplicate would ever be caught",
            ));
        }
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        Ok(BuiltOperator::whole(Dedup {
            seen: state.declare(&node.store_name("seen"))?,
            id: match (&self.id_field, &self.id_header) {
                (_, Some(header)) => IdSource::Header(header.clone()),
                (Some(pointer), None) => IdSource::Field(pointer.clone()),
                // `validate` requires one of them; were neither set, the
                // whole value (the empty pointer, which always parses)
                // would be the id.
                (None, None) => {
                    IdSource::Field(JsonPointer::parse("").map_err(StateError::Backend)?)
                }
            },
            retention: self.retention.as_millis(),
            clock: self.clock,
            on_duplicate: self.on_duplicate,
            position: None,
            passed_here: HashSet::new(),
        }))
    }
}

/// What the node remembers about an id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FirstSeen {
    /// When the id was first seen, on the node's clock.
    pub(crate) first_seen: Timestamp,
    /// Offset of the record that carried it.
    pub(crate) offset: Option<i64>,
    /// Fingerprint of the topic that record was read from.
    pub(crate) topic: Option<u32>,
}

impl JsonState for FirstSeen {}

enum IdSource {
    Field(JsonPointer),
    Header(String),
}

struct Dedup {
    seen: StoreHandle<FirstSeen>,
    id: IdSource,
    retention: i64,
    clock: Clock,
    on_duplicate: OnReject,
    /// The source position of the current input record, and the ids passed
    /// for it: one input record fanned out by an upstream node into two
    /// records with the same id is a duplicate, not a re-delivery.
    position: Option<(u32, i64)>,
    passed_here: HashSet<Vec<u8>>,
}

impl Dedup {
    fn id<'r>(&self, record: &'r Record) -> Result<Cow<'r, [u8]>, OpError> {
        match &self.id {
            IdSource::Field(pointer) => pointer
                .get(&record.value)
                .filter(|v| !v.is_null())
                .map(|v| Cow::Owned(id_bytes(v)))
                .ok_or_else(|| OpError::Record(format!("id field {pointer} is missing"))),
            IdSource::Header(name) => record
                .header(name)
                .map(Cow::Borrowed)
                .ok_or_else(|| OpError::Record(format!("id header `{name}` is missing"))),
        }
    }
}

impl Operator for Dedup {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let id = self.id(&record)?.into_owned();
        let now = ctx.now(self.clock);
        let here = ctx.origin().map(|o| (topic_fingerprint(o.topic), o.offset));
        if here != self.position {
            self.position = here;
            self.passed_here.clear();
        }
        let mut store = ctx.store(self.seen);
        let previous = store.get(&id)?.cloned();
        match previous {
            Some(first) if now < first.first_seen.saturating_add(self.retention) => {
                let same_record = here.is_some()
                    && first.topic.zip(first.offset) == here
                    && !self.passed_here.contains(&id);
                if same_record {
                    self.passed_here.insert(id);
                    ctx.count(NodeCounter::DedupRedeliveries, 1);
                    ctx.emit(record);
                    return Ok(());
                }
                ctx.count(NodeCounter::DedupDuplicates, 1);
                match self.on_duplicate {
                    OnReject::Drop => {
                        ctx.count(NodeCounter::Dropped, 1);
                        Ok(())
                    }
                    OnReject::DeadLetter => Err(OpError::Record(format!(
                        "duplicate: id `{}` was first seen {} ago{}",
                        key_text(&id),
                        ago(now, first.first_seen),
                        first
                            .offset
                            .map_or_else(String::new, |o| format!(" at offset {o}"))
                    ))),
                }
            }
            expired => {
                if let Some(old) = expired {
                    // Its timer would find the new entry and keep it; drop
                    // it now so the timer index holds one entry per id.
                    ctx.cancel_timer(
                        self.clock,
                        old.first_seen.saturating_add(self.retention),
                        &id,
                    )?;
                }
                ctx.store(self.seen).put(
                    &id,
                    FirstSeen {
                        first_seen: now,
                        offset: here.map(|(_, offset)| offset),
                        topic: here.map(|(topic, _)| topic),
                    },
                );
                ctx.set_timer(self.clock, now.saturating_add(self.retention), &id)?;
                self.passed_here.insert(id);
                ctx.emit(record);
                Ok(())
            }
        }
    }

    fn on_timer(&mut self, timer: Timer, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let now = ctx.now(self.clock);
        let mut store = ctx.store(self.seen);
        let expired = store
            .get(&timer.key)?
            .is_some_and(|first| first.first_seen.saturating_add(self.retention) <= now);
        if expired {
            store.delete(&timer.key);
            ctx.count(NodeCounter::DedupExpired, 1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{Harness, record, values};
    use super::*;

    const MINUTE: i64 = 60_000;

    fn harness(on_duplicate: &str) -> Harness {
        Harness::new(
            json!({"type": "dedup", "id_field": "/id", "retention": "10m", "on_duplicate": on_duplicate}),
            None,
        )
    }

    #[test]
    fn the_first_record_with_an_id_passes_and_its_duplicates_are_dropped() {
        let mut h = harness("drop");
        let first = h
            .process(record("k", json!({"id": "a", "n": 1}), 0))
            .unwrap();
        assert_eq!(values(&first), vec![json!({"id": "a", "n": 1})]);
        let again = h
            .process(record("k", json!({"id": "a", "n": 2}), 0))
            .unwrap();
        assert!(again.is_empty(), "first wins");
        assert_eq!(
            h.process(record("k", json!({"id": "b"}), 0)).unwrap().len(),
            1
        );
        assert_eq!(h.count(NodeCounter::DedupDuplicates), 1);
        assert_eq!(h.count(NodeCounter::Dropped), 1);
    }

    #[test]
    fn duplicates_can_go_to_the_dead_letter_topic_with_the_reason() {
        let mut h = harness("dead_letter");
        h.process(record("k", json!({"id": 7}), 0)).unwrap();
        h.clocks.processing = 2 * MINUTE;
        let err = h.process(record("k", json!({"id": "7"}), 0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "duplicate: id `7` was first seen 2m ago at offset 0"
        );
        assert_eq!(h.count(NodeCounter::Dropped), 0);
    }

    #[test]
    fn ids_are_forgotten_by_their_timer_once_retention_ends() {
        let mut h = harness("drop");
        h.process(record("k", json!({"id": "a"}), 0)).unwrap();
        h.advance(Clock::Processing, 9 * MINUTE).unwrap();
        assert!(
            h.process(record("k", json!({"id": "a"}), 0))
                .unwrap()
                .is_empty()
        );
        // Duplicates do not extend the retention.
        h.advance(Clock::Processing, 10 * MINUTE).unwrap();
        assert_eq!(h.count(NodeCounter::DedupExpired), 1);
        assert_eq!(h.store::<FirstSeen>("seen").count().unwrap(), 0);
    }

    #[test]
    fn an_expired_id_passes_again_even_before_its_timer_fires() {
        let mut h = harness("drop");
        h.process(record("k", json!({"id": "a"}), 0)).unwrap();
        h.clocks.processing = 10 * MINUTE;
        assert_eq!(
            h.process(record("k", json!({"id": "a"}), 0)).unwrap().len(),
            1
        );
        // The old timer was replaced: the id now lives until 20m.
        h.advance(Clock::Processing, 19 * MINUTE).unwrap();
        assert!(
            h.process(record("k", json!({"id": "a"}), 0))
                .unwrap()
                .is_empty()
        );
        h.advance(Clock::Processing, 20 * MINUTE).unwrap();
        assert_eq!(h.count(NodeCounter::DedupExpired), 1);
    }

    #[test]
    fn a_re_delivered_record_is_not_a_duplicate_of_itself() {
        let mut h = harness("drop");
        h.process_at(record("k", json!({"id": "a"}), 0), 41, 0)
            .unwrap();
        // The process dies after its state committed but before its
        // consumer offset did; the new one reads offset 41 again: it passes.
        h.restart();
        let again = h
            .process_at(record("k", json!({"id": "a"}), 0), 41, 0)
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(h.count(NodeCounter::DedupRedeliveries), 1);
        // A real duplicate at another offset does not.
        assert!(
            h.process_at(record("k", json!({"id": "a"}), 0), 42, 0)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn two_records_from_one_input_record_with_the_same_id_are_duplicates() {
        let mut h = harness("drop");
        h.process_at(record("k", json!({"id": "a"}), 0), 7, 0)
            .unwrap();
        let second = h
            .process_at(record("k", json!({"id": "a"}), 0), 7, 0)
            .unwrap();
        assert!(second.is_empty());
    }

    #[test]
    fn ids_come_from_headers_too_and_a_missing_id_is_the_record_s_fault() {
        let mut h = Harness::new(
            json!({"type": "dedup", "id_header": "event-id", "retention": "1h"}),
            None,
        );
        let mut with_header = record("k", json!({}), 0);
        with_header
            .headers
            .push(("event-id".into(), b"e1".to_vec()));
        assert_eq!(h.process(with_header.clone()).unwrap().len(), 1);
        assert!(h.process(with_header).unwrap().is_empty());
        let err = h.process(record("k", json!({}), 0)).unwrap_err();
        assert_eq!(err.to_string(), "id header `event-id` is missing");
    }

    #[test]
    fn options_that_contradict_each_other_are_reported() {
        let config: DedupConfig =
            serde_json::from_value(json!({"id_field": "/id", "id_header": "h", "retention": "0s"}))
                .unwrap();
        let mut issues = Vec::new();
        config.validate(
            &NodeInfo {
                name: "n",
                key_by: None,
                max_record_bytes: crate::record::DEFAULT_MESSAGE_MAX_BYTES,
                inputs: &[],
            },
            &mut issues,
        );
        let messages: Vec<&str> = issues.iter().map(|i| i.message.as_str()).collect();
        assert_eq!(
            messages,
            vec![
                "set either `id_field` or `id_header`, not both: a record has one id",
                "must be at least 1ms, or no duplicate would ever be caught"
            ]
        );
    }
}
