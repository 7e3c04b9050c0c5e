//! `ordered`: keep, per key, the newest state; ignore stale updates.
//!
//! Partitions keep order per key only as far as producers sent it in
//! order; retries and several producers reorder updates. An `ordered` node
//! keeps per key the update with the highest order value — a Lamport
//! counter, a version or a timestamp, written by the producer — and
//! emits it when it changes. An update that is not newer than what the
//! node holds is stale: it is counted and dropped, or dead-lettered with
//! `on_stale: dead_letter`. The content-feed article's scenario:
//! `ThanksForAnswerGiven` with `totalThanks` 17 arrives before the one
//! with 16; the node emits 17 and drops 16, so the total ends at 17.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `order_by` | JSON pointer to the order value: an integer or an RFC 3339 time; higher is newer |
//! | `tie_break` | JSON pointer to a field deciding between equal order values (compared as JSON; higher wins) |
//! | `on_stale` | `drop` (default) or `dead_letter` |
//! | `per_field` | `true`: per-field last-writer-wins — each top-level field keeps the order value of the update that last wrote it |
//! | `lamport_field` | output field carrying the node's Lamport clock |
//! | `lamport_header` | or: output header carrying it (decimal text) |
//!
//! An update whose order value and tie-break both equal the state's is
//! stale too (a re-sent update changes nothing). With `per_field`, updates
//! must be objects; an update is stale only when none of its fields is
//! newer than that field's current writer, and the node emits the merged
//! object.
//!
//! Lamport clock: each key keeps a clock `local`. When the node emits, it
//! sets `local = max(local, seen) + 1`, where `seen` is the clock the
//! update carries at the same field or header (0 when absent), and stamps
//! the output with `local`. Outputs for a key therefore carry strictly
//! increasing clocks that are also greater than every clock of the updates
//! they reflect, whatever the producers' wall clocks say.
//!
//! ```yaml
//! thanks_totals:
//!   type: ordered
//!   input: thanks_given
//!   key_by: /answer_id
//!   order_by: /sequence
//!   tie_break: /event_id
//!   on_stale: drop
//!   lamport_field: lamport
//! ```
//!
//! State: `<node>-latest`, per key the newest update (or merged object),
//! its order value and the Lamport clock. Counters:
//! `streamfold_ordered_stale_updates_total` and, for dropped ones,
//! `streamfold_node_dropped_records_total`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::keyed::{OnReject, describe, legal_name, read_order};
use super::{BuiltOperator, Context, Issue, NodeInfo, NodeInput, OpError, Operator, OperatorSpec};
use crate::config::types::JsonPointer;
use crate::record::json::canonical_cmp;
use crate::record::{Record, key_text};
use crate::state::{JsonState, StateError, StateSet, StoreHandle};
use crate::telemetry::NodeCounter;

/// Options of an `ordered` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct OrderedConfig {
    /// JSON pointer to the order value of each update: an integer (a
    /// Lamport counter, a version, epoch milliseconds) or an RFC 3339 time.
    /// Higher is newer.
    pub(crate) order_by: JsonPointer,
    /// JSON pointer to a field that decides between updates with equal
    /// order values (compared as JSON values; higher wins).
    #[serde(default)]
    pub(crate) tie_break: Option<JsonPointer>,
    /// What happens to a stale update: `drop` (default, counted) or
    /// `dead_letter`.
    #[serde(default)]
    pub(crate) on_stale: OnReject,
    /// Per-field last-writer-wins: each top-level field of the (object)
    /// state keeps the order value of the update that last wrote it.
    #[serde(default)]
    pub(crate) per_field: bool,
    /// Output field carrying the node's Lamport clock; updates may carry
    /// their producer's clock in the same field.
    #[serde(default)]
    pub(crate) lamport_field: Option<String>,
    /// Output header carrying the node's Lamport clock (decimal text);
    /// updates may carry their producer's clock in the same header.
    #[serde(default)]
    pub(crate) lamport_header: Option<String>,
}

impl OperatorSpec for OrderedConfig {
    /// The newest state per key.
    fn queryable_store(&self, _inputs: &[NodeInput]) -> Option<&'static str> {
        Some("latest")
    }

    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        &["latest"]
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[NodeCounter::Dropped, NodeCounter::OrderedStale]
    }

    fn validate(&self, _node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if self.order_by.last_token().is_none() {
            issues.push(Issue::new(
                &["order_by"],
                "must point to a field of the update, such as `/version`",
            ));
        }
        if self.tie_break.as_ref() == Some(&self.order_by) {
            issues.push(Issue::new(
                &["tie_break"],
                "is the same field as `order_by`, so it can never break a tie",
            ));
        }
        match (&self.lamport_field, &self.lamport_header) {
            (Some(_), Some(_)) => issues.push(Issue::new(
                &["lamport_header"],
                "set either `lamport_field` or `lamport_header`, not both",
            )),
            (Some(field), None) if !legal_name(field) => issues.push(Issue::new(
                &["lamport_field"],
                format!("`{field}` is not a field name: use letters, digits, `_` and `-`"),
            )),
            (None, Some(header)) if header.is_empty() => {
                issues.push(Issue::new(&["lamport_header"], "the header name is empty"));
            }
            _ => {}
        }
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        Ok(BuiltOperator::whole(Ordered {
            latest: state.declare(&node.store_name("latest"))?,
            order_by: self.order_by.clone(),
            tie_break: self.tie_break.clone(),
            on_stale: self.on_stale,
            per_field: self.per_field,
            stamp: match (&self.lamport_field, &self.lamport_header) {
                (Some(field), _) => Some(Stamp::Field(field.clone())),
                (None, Some(header)) => Some(Stamp::Header(header.clone())),
                (None, None) => None,
            },
        }))
    }
}

/// Which update wrote something: its order value and tie-break.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Version {
    pub(crate) order: i64,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub(crate) tie: Value,
}

impl Version {
    fn cmp(&self, other: &Version) -> Ordering {
        self.order
            .cmp(&other.order)
            .then_with(|| canonical_cmp(&self.tie, &other.tie))
    }
}

/// The newest state of one key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Latest {
    /// The newest update applied.
    pub(crate) version: Version,
    /// The state: the newest update, or the per-field merge.
    pub(crate) value: Value,
    /// The key's Lamport clock: the last one emitted.
    pub(crate) clock: u64,
    /// With `per_field`: who wrote each field.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fields: BTreeMap<String, Version>,
}

impl JsonState for Latest {}

enum Stamp {
    Field(String),
    Header(String),
}

struct Ordered {
    latest: StoreHandle<Latest>,
    order_by: JsonPointer,
    tie_break: Option<JsonPointer>,
    on_stale: OnReject,
    per_field: bool,
    stamp: Option<Stamp>,
}

impl Ordered {
    /// The clock the update carries, 0 when it carries none.
    fn seen_clock(&self, record: &Record) -> Result<u64, OpError> {
        let (text, place) = match &self.stamp {
            None => return Ok(0),
            Some(Stamp::Field(field)) => match record.value.get(field) {
                None | Some(Value::Null) => return Ok(0),
                Some(Value::Number(n)) if n.as_u64().is_some() => {
                    return Ok(n.as_u64().unwrap_or(0));
                }
                Some(other) => (describe(other), format!("field `{field}`")),
            },
            Some(Stamp::Header(name)) => match record.header(name) {
                None => return Ok(0),
                Some(bytes) => {
                    let text = String::from_utf8_lossy(bytes).into_owned();
                    if let Ok(clock) = text.trim().parse::<u64>() {
                        return Ok(clock);
                    }
                    (text, format!("header `{name}`"))
                }
            },
        };
        Err(OpError::Record(format!(
            "Lamport clock in {place} must be a non-negative integer, found {text}"
        )))
    }

    fn stale(
        &self,
        key: &[u8],
        update: &Version,
        current: &Version,
        ctx: &mut Context<'_>,
    ) -> Result<(), OpError> {
        ctx.count(NodeCounter::OrderedStale, 1);
        match self.on_stale {
            OnReject::Drop => {
                ctx.count(NodeCounter::Dropped, 1);
                Ok(())
            }
            OnReject::DeadLetter => Err(OpError::Record(format!(
                "stale update for key `{}`: order {} is not newer than {}",
                key_text(key),
                render(update),
                render(current)
            ))),
        }
    }

    /// Merges an object update field by field; false when no field of it
    /// is newer than that field's current writer (the update is stale).
    fn merge(&self, state: &mut Latest, update: &Map<String, Value>, version: &Version) -> bool {
        let Value::Object(merged) = &mut state.value else {
            return false;
        };
        let mut changed = false;
        for (field, value) in update {
            if matches!(&self.stamp, Some(Stamp::Field(f)) if f == field) {
                continue;
            }
            let newer = state
                .fields
                .get(field)
                .is_none_or(|writer| version.cmp(writer) == Ordering::Greater);
            if newer {
                merged.insert(field.clone(), value.clone());
                state.fields.insert(field.clone(), version.clone());
                changed = true;
            }
        }
        if changed && version.cmp(&state.version) == Ordering::Greater {
            state.version = version.clone();
        }
        changed
    }
}

fn render(version: &Version) -> String {
    if version.tie.is_null() {
        version.order.to_string()
    } else {
        format!("{} (tie-break {})", version.order, describe(&version.tie))
    }
}

impl Operator for Ordered {
    fn process(&mut self, mut record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some(key) = record.key.clone() else {
            return Err(OpError::Record(
                "record has no key to order by (give records a key or set `key_by`)".into(),
            ));
        };
        let version = Version {
            order: read_order(&self.order_by, &record.value).map_err(OpError::Record)?,
            tie: self
                .tie_break
                .as_ref()
                .and_then(|p| p.get(&record.value))
                .cloned()
                .unwrap_or(Value::Null),
        };
        let seen = self.seen_clock(&record)?;
        let current = ctx.store(self.latest).get(&key)?.cloned();
        let mut state = if self.per_field {
            let Value::Object(update) = &record.value else {
                return Err(OpError::Record(format!(
                    "per-field ordering needs updates that are objects, found {}",
                    crate::record::json::type_name(&record.value)
                )));
            };
            let mut state = current.clone().unwrap_or_else(|| Latest {
                version: version.clone(),
                value: Value::Object(Map::new()),
                clock: 0,
                fields: BTreeMap::new(),
            });
            if !self.merge(&mut state, update, &version) {
                let newest = current.map_or(version.clone(), |c| c.version);
                return self.stale(&key, &version, &newest, ctx);
            }
            state
        } else {
            if let Some(current) = &current
                && version.cmp(&current.version) != Ordering::Greater
            {
                return self.stale(&key, &version, &current.version, ctx);
            }
            let mut value = std::mem::take(&mut record.value);
            if let (Some(Stamp::Field(field)), Value::Object(map)) = (&self.stamp, &mut value) {
                map.remove(field);
            }
            Latest {
                version,
                value,
                clock: current.map_or(0, |c| c.clock),
                fields: BTreeMap::new(),
            }
        };
        state.clock = state.clock.max(seen).saturating_add(1);
        let mut value = state.value.clone();
        match &self.stamp {
            Some(Stamp::Field(field)) => match &mut value {
                Value::Object(map) => {
                    map.insert(field.clone(), Value::from(state.clock));
                }
                other => {
                    return Err(OpError::Record(format!(
                        "cannot stamp the Lamport clock into field `{field}` of {}: updates must be objects",
                        crate::record::json::type_name(other)
                    )));
                }
            },
            Some(Stamp::Header(name)) => {
                record.headers.retain(|(n, _)| n != name);
                record
                    .headers
                    .push((name.clone(), state.clock.to_string().into_bytes()));
            }
            None => {}
        }
        ctx.store(self.latest).put(&key, state);
        ctx.emit(Record {
            key: Some(key),
            value,
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{Harness, record, values};
    use super::*;

    fn thanks(total: i64, sequence: i64) -> Record {
        record(
            "answer_1",
            json!({"type": "ThanksForAnswerGiven", "answer_id": "answer_1", "totalThanks": total, "sequence": sequence}),
            0,
        )
    }

    #[test]
    fn thanks_arriving_out_of_order_end_at_the_newest_total() {
        let mut h = Harness::new(
            json!({"type": "ordered", "order_by": "/sequence", "lamport_field": "lamport"}),
            Some("/answer_id"),
        );
        let first = h.process(thanks(17, 2)).unwrap();
        assert_eq!(first[0].record.value["totalThanks"], json!(17));
        assert_eq!(first[0].record.value["lamport"], json!(1));
        assert!(h.process(thanks(16, 1)).unwrap().is_empty(), "16 is stale");
        assert!(
            h.process(thanks(17, 2)).unwrap().is_empty(),
            "a re-sent update is stale"
        );
        assert_eq!(h.count(NodeCounter::OrderedStale), 2);
        assert_eq!(h.count(NodeCounter::Dropped), 2);
        let latest = h
            .store::<Latest>("latest")
            .get(b"answer_1")
            .unwrap()
            .cloned();
        assert_eq!(latest.unwrap().value["totalThanks"], json!(17));
    }

    #[test]
    fn stale_updates_can_be_dead_lettered_and_ties_are_broken_by_a_field() {
        let mut h = Harness::new(
            json!({"type": "ordered", "order_by": "/v", "tie_break": "/writer", "on_stale": "dead_letter"}),
            None,
        );
        h.process(record("k", json!({"v": 3, "writer": "b"}), 0))
            .unwrap();
        let err = h
            .process(record("k", json!({"v": 3, "writer": "a"}), 0))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "stale update for key `k`: order 3 (tie-break \"a\") is not newer than 3 (tie-break \"b\")"
        );
        let out = h
            .process(record("k", json!({"v": 3, "writer": "c"}), 0))
            .unwrap();
        assert_eq!(values(&out), vec![json!({"v": 3, "writer": "c"})]);
        let err = h
            .process(record("k", json!({"v": "later"}), 0))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "order field /v must be an integer or an RFC 3339 time, found \"later\""
        );
    }

    #[test]
    fn per_field_merges_keep_each_field_s_newest_writer() {
        let mut h = Harness::new(
            json!({"type": "ordered", "order_by": "/at", "per_field": true}),
            None,
        );
        h.process(record(
            "u",
            json!({"at": "2025-01-01T00:00:05Z", "name": "Ada"}),
            0,
        ))
        .unwrap();
        // Older, but it is the first to write `email`: that field lands.
        let out = h
            .process(record(
                "u",
                json!({"at": "2025-01-01T00:00:01Z", "name": "A.", "email": "a@x"}),
                0,
            ))
            .unwrap();
        assert_eq!(
            values(&out),
            vec![json!({"at": "2025-01-01T00:00:05Z", "name": "Ada", "email": "a@x"})]
        );
        // Older than every field it carries: stale.
        assert!(
            h.process(record(
                "u",
                json!({"at": "2025-01-01T00:00:02Z", "name": "B"}),
                0
            ))
            .unwrap()
            .is_empty()
        );
        assert_eq!(h.count(NodeCounter::OrderedStale), 1);
    }

    #[test]
    fn the_lamport_clock_exceeds_every_clock_seen() {
        let mut h = Harness::new(
            json!({"type": "ordered", "order_by": "/v", "lamport_header": "lamport"}),
            None,
        );
        let mut update = record("k", json!({"v": 1}), 0);
        update.headers.push(("lamport".into(), b"41".to_vec()));
        let out = h.process(update).unwrap();
        assert_eq!(out[0].record.header("lamport"), Some(&b"42"[..]));
        let out = h.process(record("k", json!({"v": 2}), 0)).unwrap();
        assert_eq!(out[0].record.header("lamport"), Some(&b"43"[..]));
        let mut bad = record("k", json!({"v": 3}), 0);
        bad.headers.push(("lamport".into(), b"soon".to_vec()));
        assert_eq!(
            h.process(bad).unwrap_err().to_string(),
            "Lamport clock in header `lamport` must be a non-negative integer, found soon"
        );
    }
}
