//! `projection`: rebuild an entity from its events, emit its read model.
//!
//! The content-feed article's CQRS read side: every change to a question
//! is an event (`QuestionCreated`, `AnswerAdded`, `QuestionDeleted`, ...)
//! with a unique id, the entity's id, a name and an order value. A
//! `projection` node keeps each entity's events in order and folds them,
//! one declared rule per event name, into the entity; after every applied
//! event it emits the read model — the entity's fields, its id and
//! `version`, the number of events applied — keyed by the entity id, for a
//! compacted topic. So:
//!
//! - an event whose id the entity already applied is ignored (counted);
//! - an event that arrives after a later one (a lower order value) is put
//!   in its place and the entity is re-folded in order, so the read model
//!   is the same whatever order the events arrived in: `QuestionDeleted`
//!   arriving before `QuestionCreated` still ends `is_deleted: true`,
//!   `version: 2`;
//! - `version` only grows, by one per applied event, so a consumer can
//!   write the read model only if newer (optimistic locking).
//!
//! Rules are jq expressions (see [`super::expr`]): `.` is the entity (`{}`
//! before its first event or after it was deleted), `$event` is the
//! event's value, `$key`
//! the entity id and `$timestamp` the event's timestamp (`$headers` is `{}`:
//! events are replayed from the node's log, which keeps values and
//! timestamps). A rule yields the new entity, an object — set fields from
//! the event (`.title = $event.title`), set constants
//! (`.is_deleted = true`), increment (`.answers += 1`), unset
//! (`del(.draft)`) — or `null` to delete the entity. A deleted entity is
//! emitted as a tombstone (a null value, which removes the key from a
//! compacted topic) with `tombstone: true`, otherwise as its id and
//! version alone. A rule that fails, or yields something other than an
//! object or null, sends the event to the dead-letter topic and changes
//! nothing.
//!
//! Options:
//!
//! | option | meaning |
//! |---|---|
//! | `event_id` | JSON pointer to the event's unique id |
//! | `event_name` | JSON pointer to the event's name (a string), which picks its rule |
//! | `order_by` | JSON pointer to the event's order value (an integer or an RFC 3339 time); ties are broken by event id |
//! | `rules.<name>` | jq expression: entity and `$event` to the new entity |
//! | `on_unknown_event` | `drop` (default) or `dead_letter` an event whose name has no rule |
//! | `snapshot_every` | keep the folded entity every N events, so a re-fold starts at the last snapshot before the late event |
//! | `tombstone` | emit a deleted entity as a tombstone (default `false`) |
//! | `key_field` | output field with the entity id (default: last segment of `key_by`, else `id`) |
//! | `version_field` | output field with the version (default `version`) |
//!
//! The entity id is the record key (or `key_by`).
//!
//! ```yaml
//! project_question:
//!   type: projection
//!   input: dedup_events
//!   key_by: /question_id
//!   event_id: /event_id
//!   event_name: /type
//!   order_by: /sequence
//!   rules:
//!     QuestionCreated: '. + {title: $event.title, is_deleted: (.is_deleted // false)}'
//!     AnswerAdded: '.answers += 1'
//!     QuestionDeleted: '.is_deleted = true'
//!   snapshot_every: 50
//! ```
//!
//! emits, for `QuestionDeleted` then `QuestionCreated` of `q1`:
//!
//! ```json
//! {"is_deleted": true, "question_id": "q1", "version": 1}
//! {"title": "Why?", "is_deleted": true, "question_id": "q1", "version": 2}
//! ```
//!
//! State, per entity: `<node>-entities` (the folded entity, its version and
//! the position of its newest event), `<node>-events` (the event log in
//! order), `<node>-ids` (applied event ids) and, with `snapshot_every`,
//! `<node>-snapshots`. The event log is the source of truth and is kept for
//! the entity's lifetime. Counters: `streamfold_projection_duplicate_events_total`,
//! `streamfold_projection_refolds_total`,
//! `streamfold_projection_unknown_events_total`.

use std::num::NonZeroU64;
use std::ops::Bound;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::expr::{Bindings, Expression, Program, check, compile_for_build};
use super::keyed::{
    OnReject, entity_prefix, id_bytes, legal_name, ordered_i64, read_order, required,
};
use super::{BuiltOperator, Context, Issue, NodeInfo, NodeInput, OpError, Operator, OperatorSpec};
use crate::config::types::JsonPointer;
use crate::record::json::type_name;
use crate::record::{Record, Timestamp, key_text};
use crate::state::{JsonState, StateError, StateSet, StoreHandle, prefix_end};
use crate::telemetry::NodeCounter;

/// Options of a `projection` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct ProjectionConfig {
    /// JSON pointer to the event's unique id; an event whose id the entity
    /// already applied is ignored.
    pub(crate) event_id: JsonPointer,
    /// JSON pointer to the event's name (a string), which selects its rule.
    pub(crate) event_name: JsonPointer,
    /// JSON pointer to the event's order value: an integer or an RFC 3339
    /// time. Events are applied in this order, ties broken by event id.
    pub(crate) order_by: JsonPointer,
    /// One rule per event name: a jq expression from the entity (`.`, `{}`
    /// before the first event) and the event (`$event`) to the new entity
    /// (an object), or `null` to delete it.
    pub(crate) rules: IndexMap<String, Expression>,
    /// What happens to an event whose name has no rule: `drop` (default,
    /// counted) or `dead_letter`.
    #[serde(default)]
    pub(crate) on_unknown_event: OnReject,
    /// Keep a snapshot of the entity every this many events, so a re-fold
    /// after a late event starts from the last snapshot before it.
    #[serde(default)]
    pub(crate) snapshot_every: Option<NonZeroU64>,
    /// Emit a deleted entity as a tombstone (a record with a null value,
    /// which removes the key from a compacted topic) instead of its id and
    /// version alone.
    #[serde(default)]
    pub(crate) tombstone: bool,
    /// Output field carrying the entity id. Defaults to the last segment of
    /// `key_by`, else `id`.
    #[serde(default)]
    pub(crate) key_field: Option<String>,
    /// Output field carrying the version, the number of events applied.
    #[serde(default = "default_version_field")]
    pub(crate) version_field: String,
}

fn default_version_field() -> String {
    "version".into()
}

impl ProjectionConfig {
    fn key_field(&self, node: &NodeInfo<'_>) -> String {
        self.key_field
            .clone()
            .or_else(|| node.key_by.and_then(|p| p.last_token()).map(str::to_string))
            .unwrap_or_else(|| "id".to_string())
    }
}

impl OperatorSpec for ProjectionConfig {
    /// The read model per entity.
    fn queryable_store(&self, _inputs: &[NodeInput]) -> Option<&'static str> {
        Some("entities")
    }

    /// The entity and its version; where its last event sat is internal.
    fn query_view(&self, mut stored: Value) -> Value {
        if let Some(object) = stored.as_object_mut() {
            object.remove("last");
        }
        stored
    }

    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        if self.snapshot_every.is_some() {
            &["entities", "events", "ids", "snapshots"]
        } else {
            &["entities", "events", "ids"]
        }
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[
            NodeCounter::Dropped,
            NodeCounter::ProjectionDuplicates,
            NodeCounter::ProjectionRefolds,
            NodeCounter::ProjectionUnknown,
        ]
    }

    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        for (option, pointer) in [
            ("event_id", &self.event_id),
            ("event_name", &self.event_name),
            ("order_by", &self.order_by),
        ] {
            if pointer.last_token().is_none() {
                issues.push(Issue::new(
                    &[option],
                    "must point to a field of the event, such as `/event_id`",
                ));
            }
        }
        if self.rules.is_empty() {
            issues.push(Issue::new(
                &["rules"],
                "a projection needs at least one rule: `rules: {EventName: expression}`",
            ));
        }
        for (name, rule) in &self.rules {
            if let Some(error) = check(rule, &["$event"]) {
                issues.push(Issue::new(&["rules", name.as_str()], error.to_string()));
            }
        }
        let key_field = self.key_field(node);
        for (option, field) in [
            ("key_field", &key_field),
            ("version_field", &self.version_field),
        ] {
            if !legal_name(field) {
                issues.push(Issue::new(
                    &[option],
                    format!("`{field}` is not a field name: use letters, digits, `_` and `-`"),
                ));
            }
        }
        if key_field == self.version_field {
            let (option, taken_by, wanted_for) = match self.key_field {
                Some(_) => ("key_field", "version field (`version_field`)", "entity id"),
                None => ("version_field", "entity id field (`key_field`)", "version"),
            };
            issues.push(Issue::new(
                &[option],
                format!(
                    "`{key_field}` is already the {taken_by}; choose another name for the {wanted_for}"
                ),
            ));
        }
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        let mut rules = IndexMap::with_capacity(self.rules.len());
        for (name, rule) in &self.rules {
            rules.insert(
                name.clone(),
                compile_for_build(rule, &["$event"], &format!("rules.{name}"))?,
            );
        }
        // The event log, the applied ids and the snapshots are written once
        // per event and read back only for a duplicate or a late event:
        // caching them would make every commit walk the whole history
        // cached so far.
        Ok(BuiltOperator::whole(Projection {
            entities: state.declare(&node.store_name("entities"))?,
            events: state.declare_uncached(&node.store_name("events"))?,
            ids: state.declare_uncached(&node.store_name("ids"))?,
            snapshots: match self.snapshot_every {
                Some(_) => Some(state.declare_uncached(&node.store_name("snapshots"))?),
                None => None,
            },
            event_id: self.event_id.clone(),
            event_name: self.event_name.clone(),
            order_by: self.order_by.clone(),
            rules,
            on_unknown: self.on_unknown_event,
            snapshot_every: self.snapshot_every.map(NonZeroU64::get),
            tombstone: self.tombstone,
            key_field: self.key_field(node),
            version_field: self.version_field.clone(),
        }))
    }
}

/// Where an event sits in its entity's history: events are applied in
/// this order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct Position {
    pub(crate) order: i64,
    pub(crate) id: String,
}

impl Position {
    /// The store key of the event at this position: entity, order, id.
    fn key(&self, prefix: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(prefix.len() + 8 + self.id.len());
        key.extend_from_slice(prefix);
        key.extend_from_slice(&ordered_i64(self.order));
        key.extend_from_slice(self.id.as_bytes());
        key
    }
}

/// One entity as folded so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entity {
    /// The folded entity: an object, or null when deleted.
    pub(crate) entity: Value,
    /// Events applied.
    pub(crate) version: u64,
    /// Position of the newest event applied.
    pub(crate) last: Position,
}

impl JsonState for Entity {}

/// An event in an entity's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoggedEvent {
    pub(crate) name: String,
    pub(crate) timestamp: Timestamp,
    pub(crate) event: Value,
}

impl JsonState for LoggedEvent {}

/// Marks an applied event id (its order value, for inspection).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Applied {
    pub(crate) order: i64,
}

impl JsonState for Applied {}

/// The entity after the events up to a position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    pub(crate) entity: Value,
    pub(crate) version: u64,
}

impl JsonState for Snapshot {}

struct Projection {
    entities: StoreHandle<Entity>,
    events: StoreHandle<LoggedEvent>,
    ids: StoreHandle<Applied>,
    snapshots: Option<StoreHandle<Snapshot>>,
    event_id: JsonPointer,
    event_name: JsonPointer,
    order_by: JsonPointer,
    rules: IndexMap<String, Program>,
    on_unknown: OnReject,
    snapshot_every: Option<u64>,
    tombstone: bool,
    key_field: String,
    version_field: String,
}

impl Projection {
    /// Applies the rule of `event` to `entity`.
    fn apply(
        &self,
        rule: &Program,
        key: &[u8],
        entity: &Value,
        event: &LoggedEvent,
    ) -> Result<Value, String> {
        let bindings = Bindings {
            key: Some(key),
            timestamp: event.timestamp,
            headers: &[],
        };
        // A rule sees `{}` for an entity that does not exist (yet), so
        // `.title = $event.title` creates it.
        let empty = Value::Object(serde_json::Map::new());
        let input = if entity.is_null() { &empty } else { entity };
        let next = rule
            .one(input, &bindings, &[&event.event])
            .map_err(|e| format!("rule `{}` failed: {e}", event.name))?;
        match next {
            Value::Object(_) | Value::Null => Ok(next),
            other => Err(format!(
                "rule `{}` must produce the entity (an object) or null, produced {}",
                event.name,
                type_name(&other)
            )),
        }
    }

    fn read_model(&self, key: &[u8], entity: &Value, version: u64) -> Value {
        match entity {
            Value::Object(fields) => {
                let mut out = fields.clone();
                out.insert(self.key_field.clone(), Value::String(key_text(key)));
                out.insert(self.version_field.clone(), Value::from(version));
                Value::Object(out)
            }
            _ if self.tombstone => Value::Null,
            _ => {
                let mut out = serde_json::Map::new();
                out.insert(self.key_field.clone(), Value::String(key_text(key)));
                out.insert(self.version_field.clone(), Value::from(version));
                Value::Object(out)
            }
        }
    }

    fn snapshot_due(&self, version: u64) -> bool {
        self.snapshot_every
            .is_some_and(|n| version.is_multiple_of(n))
    }

    /// Re-folds the entity with `event` inserted at `position`, before its
    /// newest event. Returns the new entity and version, and the snapshots
    /// to replace those after the base the re-fold started from.
    fn refold(
        &self,
        key: &[u8],
        prefix: &[u8],
        position: &Position,
        event: &LoggedEvent,
        ctx: &mut Context<'_>,
    ) -> Result<Refold, OpError> {
        let event_key = position.key(prefix);
        // Start from the last snapshot before the late event, if any: one
        // reverse seek, however many snapshots the entity has.
        let mut base: Option<(Vec<u8>, Snapshot)> = None;
        if let Some(snapshots) = self.snapshots {
            base = ctx
                .store(snapshots)
                .last(Bound::Included(prefix), Bound::Excluded(&event_key))?
                .map(|(k, s)| (k.into_vec(), s));
        }
        let end = prefix_end(prefix);
        let upper = match &end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        let lower = match &base {
            Some((k, _)) => Bound::Excluded(k.as_slice()),
            None => Bound::Included(prefix),
        };
        let logged = ctx.store(self.events).range(lower, upper, usize::MAX)?;
        // Snapshots after the base all follow the late event (the base is
        // the last one before it): they lack it, so they are replaced.
        let stale_snapshots = match self.snapshots {
            Some(snapshots) => ctx
                .store(snapshots)
                .range(lower, upper, usize::MAX)?
                .into_iter()
                .map(|(k, _)| k)
                .collect(),
            None => Vec::new(),
        };
        let (mut entity, mut version) = base
            .map(|(_, s)| (s.entity, s.version))
            .unwrap_or((Value::Null, 0));
        let mut snapshots = Vec::new();
        // The logged events with the late one in its place.
        let mut pending = Some((event_key.as_slice(), event));
        let mut replay: Vec<(&[u8], &LoggedEvent)> = Vec::with_capacity(logged.len() + 1);
        for (k, logged_event) in &logged {
            if let Some(late) = pending.take_if(|(late_key, _)| *late_key < k.as_ref()) {
                replay.push(late);
            }
            replay.push((k.as_ref(), logged_event));
        }
        replay.extend(pending);
        for (k, logged_event) in replay {
            // Events whose rule was removed from the topology are skipped.
            let Some(rule) = self.rules.get(&logged_event.name) else {
                continue;
            };
            entity = self.apply(rule, key, &entity, logged_event).map_err(|e| {
                OpError::Record(format!("re-folding after this late event failed: {e}"))
            })?;
            version += 1;
            if self.snapshot_due(version) {
                snapshots.push((
                    k.to_vec(),
                    Snapshot {
                        entity: entity.clone(),
                        version,
                    },
                ));
            }
        }
        Ok(Refold {
            entity,
            version,
            stale_snapshots,
            snapshots,
        })
    }

    /// The name of the event `value`, which must be a string.
    fn event_name(&self, value: &Value) -> Result<String, OpError> {
        match required(&self.event_name, value, "event name") {
            Ok(Value::String(name)) => Ok(name.clone()),
            Ok(other) => Err(OpError::Record(format!(
                "event name {} must be a string, found {}",
                self.event_name,
                type_name(other)
            ))),
            Err(e) => Err(OpError::Record(e)),
        }
    }

    /// Counts an event named `name` that no rule folds, and drops it or
    /// makes it a dead letter as `on_unknown` says.
    fn unknown_event(&self, name: &str, ctx: &mut Context<'_>) -> Result<(), OpError> {
        ctx.count(NodeCounter::ProjectionUnknown, 1);
        match self.on_unknown {
            OnReject::Drop => {
                ctx.count(NodeCounter::Dropped, 1);
                Ok(())
            }
            OnReject::DeadLetter => Err(OpError::Record(format!(
                "no rule for event `{name}` (rules: {})",
                self.rules
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// The entity after `event` at `position` takes `step` into it, with
    /// the snapshots that replace or join those stored under `prefix`: in
    /// order, the entity already folded; late, its history re-folded.
    fn next_entity(
        &self,
        step: Step,
        key: &[u8],
        prefix: &[u8],
        position: &Position,
        event: &LoggedEvent,
        ctx: &mut Context<'_>,
    ) -> Result<Entity, OpError> {
        Ok(match step {
            Step::Late(last) => {
                ctx.count(NodeCounter::ProjectionRefolds, 1);
                let refold = self.refold(key, prefix, position, event, ctx)?;
                if let Some(snapshots) = self.snapshots {
                    let mut store = ctx.store(snapshots);
                    for stale in &refold.stale_snapshots {
                        store.delete(stale);
                    }
                    for (k, snapshot) in refold.snapshots {
                        store.put(&k, snapshot);
                    }
                }
                Entity {
                    entity: refold.entity,
                    version: refold.version,
                    last,
                }
            }
            Step::InOrder(entity, version) => {
                if let (Some(snapshots), true) = (self.snapshots, self.snapshot_due(version)) {
                    ctx.store(snapshots).put(
                        &position.key(prefix),
                        Snapshot {
                            entity: entity.clone(),
                            version,
                        },
                    );
                }
                Entity {
                    entity,
                    version,
                    last: position.clone(),
                }
            }
        })
    }
}

/// How an event joins its entity's history.
enum Step {
    /// After the newest event: the folded entity and its version.
    InOrder(Value, u64),
    /// Before it (the entity's newest position is kept).
    Late(Position),
}

struct Refold {
    entity: Value,
    version: u64,
    stale_snapshots: Vec<Box<[u8]>>,
    snapshots: Vec<(Vec<u8>, Snapshot)>,
}

impl Operator for Projection {
    fn process(&mut self, record: Record, ctx: &mut Context<'_>) -> Result<(), OpError> {
        let Some(key) = record.key.clone() else {
            return Err(OpError::Record(
                "event has no entity id (give records a key or set `key_by`)".into(),
            ));
        };
        let id = required(&self.event_id, &record.value, "event id").map_err(OpError::Record)?;
        let id = String::from_utf8_lossy(&id_bytes(id)).into_owned();
        let name = self.event_name(&record.value)?;
        let order = read_order(&self.order_by, &record.value).map_err(OpError::Record)?;
        let prefix = entity_prefix(&key);
        let mut id_key = prefix.clone();
        id_key.extend_from_slice(id.as_bytes());
        if ctx.store(self.ids).get(&id_key)?.is_some() {
            ctx.count(NodeCounter::ProjectionDuplicates, 1);
            ctx.count(NodeCounter::Dropped, 1);
            return Ok(());
        }
        let Some(rule) = self.rules.get(&name) else {
            return self.unknown_event(&name, ctx);
        };
        let position = Position { order, id };
        let event = LoggedEvent {
            name,
            timestamp: record.timestamp,
            event: record.value,
        };
        // In order (the usual case): fold the event into the entity as
        // stored, without copying it. Late: re-fold the entity's history.
        let none = Value::Null;
        let step = match ctx.store(self.entities).get(&key)? {
            Some(current) if position < current.last => Step::Late(current.last.clone()),
            current => {
                let (entity, version) = current.map_or((&none, 0), |c| (&c.entity, c.version));
                let entity = self
                    .apply(rule, &key, entity, &event)
                    .map_err(OpError::Record)?;
                Step::InOrder(entity, version + 1)
            }
        };
        let next = self.next_entity(step, &key, &prefix, &position, &event, ctx)?;
        ctx.store(self.ids).put(
            &id_key,
            Applied {
                order: position.order,
            },
        );
        ctx.store(self.events).put(&position.key(&prefix), event);
        let value = self.read_model(&key, &next.entity, next.version);
        ctx.store(self.entities).put(&key, next);
        ctx.emit(Record::new(Some(key), value, record.timestamp));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
