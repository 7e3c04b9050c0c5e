//! `window`: aggregate each key's records per event-time window.
//!
//! Kafka Streams' windowed aggregations in YAML: records are grouped by key
//! (the record key, or `key_by`) and by the windows their event time falls
//! in, and each window's records are merged with the fold's rules (`count`,
//! `sum`, `min`, `max`, `set`, `key_union`, `list`, `first`, `last`).
//!
//! | `window` | windows | needs |
//! |---|---|---|
//! | `tumbling` | `[start, start + size)`, back to back, aligned to the epoch | `size` |
//! | `hopping` | `[start, start + size)`, one starting every `advance` (a record is in `size / advance` of them) | `size`, `advance` (at most `size`) |
//! | `sliding` | `[start, start + size]`, one per distinct set of records no more than `size` apart (Kafka Streams' `SlidingWindows`) | `size` (the time difference) |
//! | `session` | `[first, last]` of a run of records no more than `gap` apart; a record filling a gap merges two sessions | `gap` |
//!
//! Event time is the record timestamp: set `timestamp: /field` on the source
//! to take it from a field (a record without it is dead-lettered there, as
//! `bad_timestamp`). Stream time is the task's event time, the latest record
//! time it has seen (moved on by `processing.idle_advance` when a partition
//! idles), restored with the state after a restart.
//!
//! A window *closes* once stream time passes its last millisecond by more
//! than `grace` (for a session: its last record by more than `gap +
//! grace`). A record is accepted only while every window it belongs to is
//! open; otherwise it is late: counted
//! (`streamfold_window_late_records_total`) and dropped (`on_late: drop`,
//! the default, also counted as dropped) or dead-lettered with the reason
//! (`on_late: dead_letter`).
//!
//! `emit: on_close` (default) emits each window once, when it closes: its
//! final result (Kafka Streams' `emitStrategy(onWindowClose)`).
//! `emit: on_update` emits a window each time a record changes it; a
//! session that grows or merges is first retracted with a tombstone (a
//! null value) under its old key, as Kafka Streams does.
//!
//! The emitted record is keyed `<key>@<window_start>/<window_end>` (times
//! in RFC 3339), timestamped with the latest record time in the window,
//! and its value carries the key, the window and one field per rule:
//!
//! ```json
//! {"page": "/home", "window_start": "2025-01-01T00:00:00.000Z",
//!  "window_end": "2025-01-01T00:05:00.000Z", "views": 3, "users": ["u1", "u2"]}
//! ```
//!
//! `window_end` is exclusive for tumbling and hopping windows and inclusive
//! for sliding and session windows, as in Kafka Streams.
//!
//! ```yaml
//! views_per_page:
//!   type: window
//!   input: page_views
//!   key_by: /page
//!   window: tumbling
//!   size: 5m
//!   grace: 1m
//!   fields:
//!     views: { rule: count }
//!     users: { rule: set, from: /user }
//! ```
//!
//! State: `<node>-windows` (one entry per key and window; for `sliding`,
//! `<node>-buckets`: one entry per key and distinct record time, the
//! windows being assembled from them) and `<node>-timers`, both with
//! changelogs. A window is deleted once stream time reaches its start plus
//! `retention` (sessions: their last record plus `retention`), and never
//! before it closes; the default retention is `size + grace` (`gap +
//! grace`), so state holds only windows that may still change.

mod run;
pub(crate) use run::{window_group, window_key_bounds};
#[cfg(test)]
mod tests;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::keyed::{OnReject, legal_name};
use super::merge::{FieldRule, MergeRule};
use super::{BuiltOperator, Issue, NodeInfo, NodeInput, OperatorSpec};
use crate::config::types::HumanDuration;
use crate::state::{StateError, StateSet};
use crate::telemetry::NodeCounter;

/// The most windows one record may belong to (`size / advance` of a
/// hopping window): each is a state entry the record updates.
const MAX_WINDOWS_PER_RECORD: i64 = 1000;

/// Options of a `window` node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct WindowConfig {
    /// The kind of window: `tumbling`, `hopping`, `sliding` or `session`.
    pub(crate) window: WindowKind,
    /// Length of a window (`tumbling`, `hopping`), or the largest time
    /// difference between records of one window (`sliding`).
    #[serde(default)]
    pub(crate) size: Option<HumanDuration>,
    /// For `hopping`: how far apart consecutive windows start; at most
    /// `size`.
    #[serde(default)]
    pub(crate) advance: Option<HumanDuration>,
    /// For `session`: the inactivity gap; records of a key no more than
    /// this far apart belong to one session.
    #[serde(default)]
    pub(crate) gap: Option<HumanDuration>,
    /// How long after a window's end records may still arrive for it.
    /// Default `0s`.
    #[serde(default)]
    pub(crate) grace: Option<HumanDuration>,
    /// How long a window's state is kept, counted from its start (sessions:
    /// from their last record). At least `size + grace` (`gap + grace`),
    /// the default. Longer keeps closed windows in the state.
    #[serde(default)]
    pub(crate) retention: Option<HumanDuration>,
    /// When a window is emitted: `on_close` (default; once, its final
    /// result) or `on_update` (every time a record changes it).
    #[serde(default)]
    pub(crate) emit: EmitMode,
    /// What happens to a record whose windows have closed: `drop`
    /// (default, counted) or `dead_letter`.
    #[serde(default)]
    pub(crate) on_late: OnReject,
    /// Output fields, each with the rule that merges a window's records.
    #[serde(default)]
    pub(crate) fields: IndexMap<String, FieldRule>,
    /// Output field carrying the group key. Defaults to the last segment of
    /// `key_by` (`/page` → `page`), else `key`.
    #[serde(default)]
    pub(crate) key_field: Option<String>,
}

/// The kind of window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WindowKind {
    /// Fixed-size windows, back to back.
    Tumbling,
    /// Fixed-size windows starting every `advance`, overlapping.
    Hopping,
    /// Windows of records at most `size` apart (a difference window).
    Sliding,
    /// Runs of records separated by no more than `gap`.
    Session,
}

impl WindowKind {
    fn name(self) -> &'static str {
        match self {
            WindowKind::Tumbling => "tumbling",
            WindowKind::Hopping => "hopping",
            WindowKind::Sliding => "sliding",
            WindowKind::Session => "session",
        }
    }
}

/// When windows are emitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EmitMode {
    /// Once, when the window closes: final results only.
    #[default]
    OnClose,
    /// Each time a record changes the window.
    OnUpdate,
}

/// Fields every emitted window carries; rules may not reuse them.
const RESERVED_FIELDS: &[&str] = &["window_start", "window_end"];

/// The window's durations in milliseconds, as the operator uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) kind: WindowKind,
    /// `size` (sliding: the time difference); 0 for sessions.
    pub(crate) size: i64,
    /// `advance`; `size` for tumbling; 0 otherwise.
    pub(crate) advance: i64,
    /// `gap`; 0 unless a session.
    pub(crate) gap: i64,
    pub(crate) grace: i64,
    /// How long state is kept, from a window's start (sessions: from their
    /// last record).
    pub(crate) retention: i64,
}

impl WindowConfig {
    fn key_field(&self, node: &NodeInfo<'_>) -> String {
        self.key_field
            .clone()
            .or_else(|| node.key_by.and_then(|p| p.last_token()).map(str::to_string))
            .unwrap_or_else(|| "key".to_string())
    }

    fn millis(value: Option<HumanDuration>) -> i64 {
        value.map_or(0, HumanDuration::as_millis)
    }

    /// The shortest retention: until the window may no longer change.
    fn least_retention(&self) -> i64 {
        let grace = Self::millis(self.grace);
        match self.window {
            WindowKind::Session => Self::millis(self.gap).saturating_add(grace),
            _ => Self::millis(self.size).saturating_add(grace),
        }
    }

    pub(crate) fn shape(&self) -> Shape {
        let size = Self::millis(self.size);
        Shape {
            kind: self.window,
            size: if self.window == WindowKind::Session {
                0
            } else {
                size
            },
            advance: match self.window {
                WindowKind::Tumbling => size,
                WindowKind::Hopping => Self::millis(self.advance),
                _ => 0,
            },
            gap: if self.window == WindowKind::Session {
                Self::millis(self.gap)
            } else {
                0
            },
            grace: Self::millis(self.grace),
            retention: self
                .retention
                .map_or(0, HumanDuration::as_millis)
                .max(self.least_retention()),
        }
    }

    /// The shape options: which the kind needs, which it does not take.
    fn check_shape(&self, issues: &mut Vec<Issue>) {
        let kind = self.window.name();
        let (needs, refuses): (&[&str], &[&str]) = match self.window {
            WindowKind::Tumbling | WindowKind::Sliding => (&["size"], &["advance", "gap"]),
            WindowKind::Hopping => (&["size", "advance"], &["gap"]),
            WindowKind::Session => (&["gap"], &["size", "advance"]),
        };
        let value = |field: &str| match field {
            "size" => self.size,
            "advance" => self.advance,
            _ => self.gap,
        };
        for field in needs {
            match value(field) {
                None => issues.push(Issue::new(
                    &["window"],
                    format!("a `{kind}` window needs `{field}`"),
                )),
                Some(d) if d.under_a_millisecond() => {
                    issues.push(Issue::new(&[field], "must be at least 1ms"));
                }
                Some(_) => {}
            }
        }
        for field in refuses {
            if value(field).is_some() {
                let message = match *field {
                    "advance" => format!("`advance` applies to `hopping` windows, not `{kind}`"),
                    "gap" => format!("`gap` applies to `session` windows, not `{kind}`"),
                    _ => "a session window has no `size`: its length follows its records (`gap` sets the inactivity gap)".to_string(),
                };
                issues.push(Issue::new(&[field], message));
            }
        }
        if let (WindowKind::Hopping, Some(size), Some(advance)) =
            (self.window, self.size, self.advance)
            && !advance.under_a_millisecond()
        {
            if advance > size {
                issues.push(Issue::new(
                    &["advance"],
                    format!("`advance` ({advance}) is longer than `size` ({size}): records between windows would belong to none"),
                ));
            } else if size.as_millis() / advance.as_millis() > MAX_WINDOWS_PER_RECORD {
                issues.push(Issue::new(
                    &["advance"],
                    format!("`size / advance` is over {MAX_WINDOWS_PER_RECORD}: each record would update that many windows; advance by more"),
                ));
            }
        }
        if let Some(retention) = self.retention
            && retention.as_millis() < self.least_retention()
        {
            let least = match self.window {
                WindowKind::Session => "gap + grace",
                _ => "size + grace",
            };
            issues.push(Issue::new(
                &["retention"],
                format!("must be at least `{least}`, or windows would be deleted while records may still change them"),
            ));
        }
    }

    fn check_fields(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        if self.fields.is_empty() {
            issues.push(Issue::new(
                &["fields"],
                "a window needs at least one output field, such as `count: { rule: count }`",
            ));
        }
        let key_field = self.key_field(node);
        if !legal_name(&key_field) || RESERVED_FIELDS.contains(&key_field.as_str()) {
            issues.push(Issue::new(
                &["key_field"],
                format!("`{key_field}` cannot carry the key: use letters, digits, `_` and `-`, other than `window_start` and `window_end`"),
            ));
        }
        for (name, rule) in &self.fields {
            let at = |leaf: Option<&str>| {
                let mut path = vec!["fields".to_string(), name.clone()];
                path.extend(leaf.map(str::to_string));
                path
            };
            if RESERVED_FIELDS.contains(&name.as_str()) || *name == key_field {
                issues.push(Issue {
                    path: at(None),
                    message: format!(
                        "`{name}` is a field every window already carries; choose another name"
                    ),
                });
            }
            if rule.from.is_none() && rule.rule != MergeRule::Count {
                issues.push(Issue {
                    path: at(None),
                    message: format!(
                        "rule `{}` needs `from`, the JSON pointer it reads",
                        rule.rule.name()
                    ),
                });
            }
            match (rule.rule, rule.max_len) {
                (MergeRule::List, None) => issues.push(Issue {
                    path: at(None),
                    message: "rule `list` needs `max_len`, so a window's size stays bounded".into(),
                }),
                (MergeRule::List, Some(_)) | (_, None) => {}
                (other, Some(_)) => issues.push(Issue {
                    path: at(Some("max_len")),
                    message: format!("`max_len` applies to rule `list`, not `{}`", other.name()),
                }),
            }
        }
    }
}

impl OperatorSpec for WindowConfig {
    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        match self.window {
            WindowKind::Sliding => &["buckets"],
            _ => &["windows"],
        }
    }

    /// The windows of tumbling, hopping and session windows; a sliding
    /// window's store holds per-time buckets that no window is yet made
    /// of, so it is not served.
    fn queryable_store(&self, _inputs: &[NodeInput]) -> Option<&'static str> {
        match self.window {
            WindowKind::Sliding => None,
            _ => Some("windows"),
        }
    }

    fn query_windows(&self) -> bool {
        true
    }

    fn query_view(&self, stored: serde_json::Value) -> serde_json::Value {
        run::window_view(stored, self.fields.keys())
    }

    fn uses_timers(&self) -> bool {
        true
    }

    fn counters(&self) -> &'static [NodeCounter] {
        &[
            NodeCounter::Dropped,
            NodeCounter::WindowLate,
            NodeCounter::WindowClosed,
            NodeCounter::WindowExpired,
            NodeCounter::WindowSessionMerges,
        ]
    }

    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>) {
        self.check_shape(issues);
        self.check_fields(node, issues);
    }

    fn build(
        &self,
        node: &NodeInfo<'_>,
        state: &mut StateSet,
    ) -> Result<BuiltOperator, StateError> {
        let store = self.stores(node.inputs)[0];
        Ok(BuiltOperator::whole(run::Window::new(
            self.shape(),
            state.declare(&node.store_name(store))?,
            self.emit,
            self.on_late,
            self.fields
                .iter()
                .map(|(name, rule)| (name.clone(), rule.clone()))
                .collect(),
            self.key_field(node),
        )))
    }
}
