//! The operator registry: the one list of operators, and what the topology
//! compiler and the task may know of an operator before any record flows.
//!
//! Adding an operator is one entry in the `operators!` list below plus its
//! own module (`src/operators/<name>.rs`, declared in `operators/mod.rs`,
//! with its config type, an [`OperatorSpec`] impl and the
//! [`super::Operator`] it builds). The entry gives the `type` name and the
//! config type; from it derive the
//! [`NodeKind`] variant (and so the JSON Schema of the topology format),
//! [`NodeKind::TYPES`], the loader [`NodeKind::load`] and the builder
//! [`NodeKind::spec`]. Everything else an operator must say (its stores,
//! counters, checks, how it is built) are methods of [`OperatorSpec`]
//! without defaults where forgetting one would be a bug, so the compiler
//! asks for them.
//!
//! The topology compiler imports nothing from `operators` but this module.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::de::{DeError, Path, from_entries};
use crate::config::types::JsonPointer;
use crate::config::yaml::Node as YamlNode;
use crate::state::{StateError, StateSet, StoreDef};
use crate::telemetry::{NodeCounter, NodeGauge};

use super::BuiltOperator;

/// Declares [`NodeKind`] with everything derived from the list: one entry
/// per operator,
/// `Variant(module::Config) = "type name"`, its doc comment becoming the
/// JSON Schema description of that `type`.
macro_rules! operators {
    (
        $(
            $(#[$meta:meta])*
            $variant:ident($module:ident :: $config:ident) = $type_name:literal,
        )+
    ) => {
        /// The operator of a node, chosen by its `type`.
        #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
        #[serde(tag = "type")]
        pub enum NodeKind {
            $(
                $(#[$meta])*
                #[serde(rename = $type_name)]
                $variant(super::$module::$config),
            )+
        }

        impl NodeKind {
            /// Every `type` name, in registry order, for "did you mean"
            /// suggestions.
            pub(crate) const TYPES: &'static [&'static str] = &[$($type_name,)+];

            /// The node's `type`.
            pub(crate) fn type_name(&self) -> &'static str {
                match self {
                    $(NodeKind::$variant(_) => $type_name,)+
                }
            }

            /// The static description of the operator (stores, outputs,
            /// checks, how it is built).
            pub(crate) fn spec(&self) -> &dyn OperatorSpec {
                match self {
                    $(NodeKind::$variant(config) => config,)+
                }
            }

            /// Reads the operator options of a node whose `type` is
            /// `type_name` from `body` (the node's mapping), skipping the
            /// fields every node has (`common`). `None` when no operator
            /// has that `type`.
            pub(crate) fn load(
                type_name: &str,
                body: &YamlNode,
                path: &Path,
                common: &[&str],
            ) -> Option<Result<NodeKind, DeError>> {
                Some(match type_name {
                    $($type_name => from_entries(body, path, common).map(NodeKind::$variant),)+
                    _ => return None,
                })
            }
        }
    };
}

operators! {
    /// Fold a burst of events per key into one event, emitted when the key
    /// goes quiet, after `max_wait`, or after `max_events`.
    Fold(fold::FoldConfig) = "fold",
    /// Drop records whose id was already seen within `retention`.
    Dedup(dedup::DedupConfig) = "dedup",
    /// Keep per key the update with the highest order value; drop or
    /// dead-letter stale ones; stamp outputs with a Lamport clock.
    Ordered(ordered::OrderedConfig) = "ordered",
    /// Rebuild an event-sourced entity from its events, in order, and emit
    /// its read model with a version.
    Projection(projection::ProjectionConfig) = "projection",
    /// Netflix's distributed counter: idempotent counter events rolled up
    /// over immutable windows into checkpoints.
    Rollup(rollup::RollupConfig) = "rollup",
    /// Aggregate each key's records per event-time window (tumbling,
    /// hopping, sliding or session) with the fold's merge rules.
    Window(window::WindowConfig) = "window",
    /// Join two inputs by key: a stream with a table, two tables, or two
    /// streams within a join window (inner, left or outer).
    Join(join::JoinConfig) = "join",
    /// Keep the records a jq condition holds for.
    Filter(filter::FilterConfig) = "filter",
    /// Reshape each record with a jq expression.
    Map(map::MapConfig) = "map",
    /// Send records to named outputs by jq conditions.
    Route(route::RouteConfig) = "route",
}

impl NodeKind {
    /// The counters an operator of this kind moves, besides records in and
    /// out (every node's) and what the runtime counts for `key_by` nodes.
    /// `streamfold run` exports exactly these for the node, from startup.
    pub(crate) fn counters(&self) -> &'static [NodeCounter] {
        self.spec().counters()
    }

    /// The per-task levels an operator of this kind tracks.
    pub(crate) fn gauges(&self) -> &'static [NodeGauge] {
        self.spec().gauges()
    }

    /// Every store of a node of this kind, by short name, in the order the
    /// task declares them: the operator's own, then its timers, then, when
    /// the node sets `key_by`, the highest upstream offset seen per source
    /// partition (to drop repartition records re-delivered from aborted
    /// transactions). Each is named by [`StoreDef`].
    pub(crate) fn stores(&self, inputs: &[NodeInput], key_by: bool) -> Vec<&'static str> {
        let spec = self.spec();
        let mut stores = spec.stores(inputs).to_vec();
        if spec.uses_timers() {
            stores.push(StoreDef::TIMERS);
        }
        if key_by {
            stores.push(StoreDef::REPARTITION_SEEN);
        }
        stores
    }
}

/// What the topology compiler and the runtime need to know about an
/// operator before any record flows.
pub(crate) trait OperatorSpec {
    /// Stores the operator keeps, by short name (`open`), for a node with
    /// these inputs; each becomes `<node>-<store>` with a changelog topic
    /// ([`StoreDef`]).
    fn stores(&self, _inputs: &[NodeInput]) -> &'static [&'static str] {
        &[]
    }

    /// The store `run --query-addr` serves (short name, one of
    /// [`OperatorSpec::stores`]): the operator's result per key.
    fn queryable_store(&self, _inputs: &[NodeInput]) -> Option<&'static str> {
        None
    }

    /// How a value of the queryable store reads over HTTP, from its stored
    /// JSON. The stored form by default.
    fn query_view(&self, stored: serde_json::Value) -> serde_json::Value {
        stored
    }

    /// Whether the queryable store holds windows, keyed by a group key and
    /// a window start: the query API reads it by key and time range, and
    /// shows each window with its bounds.
    fn query_windows(&self) -> bool {
        false
    }

    /// Whether the operator sets timers (adds the store `<node>-timers`).
    fn uses_timers(&self) -> bool {
        false
    }

    /// Named outputs beside the default one (`route` branches).
    fn outputs(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the operator groups by key, so its input must be keyed (or
    /// the node must set `key_by`).
    fn keyed(&self) -> bool {
        !self.stores(&[]).is_empty()
    }

    /// Whether the operator may read a table (a source of `kind: table`,
    /// whose `null` values are tombstones).
    fn reads_tables(&self) -> bool {
        false
    }

    /// Whether what the operator emits is keyed. Stateless operators pass
    /// their input's keying through.
    fn output_keyed(&self, input_keyed: bool) -> bool {
        self.keyed() || input_keyed
    }

    /// The counters the operator moves, besides records in and out (every
    /// node's) and what the runtime counts for `key_by` nodes; `run`
    /// exports exactly these for the node, from startup. No default: an
    /// operator that drops records says so here.
    fn counters(&self) -> &'static [NodeCounter];

    /// The per-task levels the operator tracks.
    fn gauges(&self) -> &'static [NodeGauge] {
        &[]
    }

    /// Checks options that serde cannot (combinations, ranges).
    fn validate(&self, node: &NodeInfo<'_>, issues: &mut Vec<Issue>);

    /// Makes the operator for one task, declaring its stores in `state`.
    fn build(&self, node: &NodeInfo<'_>, state: &mut StateSet)
    -> Result<BuiltOperator, StateError>;
}

/// What an operator may know about the node it runs as.
#[derive(Clone, Copy, Debug)]
pub struct NodeInfo<'a> {
    pub(crate) name: &'a str,
    pub(crate) key_by: Option<&'a JsonPointer>,
    /// The largest record the producer may send (its `message.max.bytes`),
    /// for operators whose state or output grows with their input.
    pub(crate) max_record_bytes: usize,
    /// The node's inputs, in `input` order.
    pub(crate) inputs: &'a [NodeInput],
}

/// One input of a node, as its operator may know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInput {
    /// As the node's `input` names it (`orders`, `route.branch`).
    pub(crate) name: String,
    /// A source read as a table (`kind: table`): latest value per key,
    /// tombstones (`null` values) delete.
    pub(crate) table: bool,
    /// A global table (`kind: global_table`, also a `table`): every
    /// instance holds it whole, and its records never reach a task.
    pub(crate) global: bool,
}

impl NodeInfo<'_> {
    /// The full name of one of this node's stores.
    pub(crate) fn store_name(&self, store: &str) -> String {
        StoreDef::store_name(self.name, store)
    }
}

/// A problem with an operator's options, at a path below the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    pub(crate) path: Vec<String>,
    pub(crate) message: String,
}

impl Issue {
    pub(crate) fn new(path: &[&str], message: impl Into<String>) -> Issue {
        Issue {
            path: path.iter().map(|s| s.to_string()).collect(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The `type` values a JSON Schema accepts, wherever it lists them.
    fn type_values(schema: &Value, out: &mut Vec<String>) {
        match schema {
            Value::Object(map) => {
                if let Some(Value::Object(ty)) = map.get("properties").and_then(|p| p.get("type")) {
                    if let Some(Value::String(name)) = ty.get("const") {
                        out.push(name.clone());
                    }
                    if let Some(Value::Array(names)) = ty.get("enum") {
                        out.extend(names.iter().filter_map(|n| n.as_str().map(String::from)));
                    }
                }
                map.values().for_each(|v| type_values(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| type_values(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_schema_the_loader_and_the_type_list_name_the_same_operators() {
        let schema = serde_json::to_value(schemars::schema_for!(NodeKind)).unwrap();
        let mut in_schema = Vec::new();
        type_values(&schema, &mut in_schema);
        in_schema.sort_unstable();
        let mut types = NodeKind::TYPES.to_vec();
        types.sort_unstable();
        assert_eq!(in_schema, types);
        // Every listed type loads (here: fails on its options, not as an
        // unknown type) and names itself back.
        let empty = YamlNode {
            pos: crate::config::yaml::Pos { line: 1, col: 1 },
            kind: crate::config::yaml::Kind::Map(Vec::new()),
        };
        for name in NodeKind::TYPES {
            let loaded = NodeKind::load(name, &empty, &Path::root(), &[]);
            assert!(loaded.is_some(), "`{name}` is listed but does not load");
            if let Some(Ok(kind)) = loaded {
                assert_eq!(kind.type_name(), *name);
            }
        }
        assert!(NodeKind::load("no_such_operator", &empty, &Path::root(), &[]).is_none());
    }
}
