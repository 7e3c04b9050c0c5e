//! Topologies: the YAML model, its validation, and the compiled graph.
//!
//! Loading happens in two phases, and both collect every problem before
//! giving up:
//!
//! 1. **parse**: the YAML text becomes a tree that remembers positions
//!    ([`yaml`]); each section, and each source, node and sink within it,
//!    is deserialized on its own ([`de`]), so a typo in one node does not
//!    hide a bad duration in another;
//! 2. **compile** (`compile.rs`, in named passes): names resolve, the
//!    graph is acyclic, keyed operators have a key, option combinations
//!    make sense (each section's checks beside its type in [`model`]), and
//!    each operator checks its own options through the operator registry.
//!
//! Problems are [`Diagnostic`]s printed as
//! `topology.yaml:14:5: nodes.fold_account.quiet_for: message`.

mod compile;
pub mod describe;
pub mod model;
mod queries;
pub(crate) mod security;

use std::fmt;
use std::path::Path as FsPath;

use crate::config::de::{DeError, Path, from_node, unknown_name};
use crate::config::yaml::{self, Kind, Node as YamlNode, Pos};
use model::{
    DeadLetterConfig, KafkaConfig, NODE_COMMON_FIELDS, NodeCommon, ProcessingConfig, QueriesConfig,
    SchemaRegistryConfig, SinkConfig, SourceConfig, StateConfig,
};

use crate::operators::registry::{NodeInfo, NodeInput, NodeKind};
pub(crate) use crate::state::StoreDef;

/// One problem in a topology file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub(crate) file: String,
    pub pos: Pos,
    pub(crate) path: String,
    pub(crate) message: String,
    pub(crate) severity: Severity,
}

impl Diagnostic {
    /// An error about the setting at `path` (`["kafka", "consumer",
    /// "fetch.max.bytes"]`) of the topology file `file` whose text is
    /// `text`: at the key of the deepest part of the path the file has
    /// (the file's start if it has none), for checks made after loading.
    pub fn at_path(file: &str, text: &str, path: &[&str], message: String) -> Diagnostic {
        let mut pos = Pos { line: 1, col: 1 };
        if let Ok((root, _)) = yaml::parse(text, &|_| None) {
            let mut node = &root;
            for part in path {
                let entry = node.as_map().and_then(|entries| {
                    entries
                        .iter()
                        .find(|(k, _)| k.scalar_text().is_some_and(|t| t == *part))
                });
                let Some((key, value)) = entry else { break };
                pos = key.pos;
                node = value;
            }
        }
        Diagnostic {
            file: file.to_string(),
            pos,
            path: path.join("."),
            message,
            severity: Severity::Error,
        }
    }
}

/// Whether a [`Diagnostic`] stops the topology from loading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Severity {
    /// The topology cannot run.
    #[default]
    Error,
    /// The topology runs, but probably not as its author meant (records
    /// that end nowhere, for instance).
    Warning,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        write!(
            f,
            "{}:{}:{}: {severity}{}: {}",
            self.file, self.pos.line, self.pos.col, self.path, self.message
        )
    }
}

/// A topology that passed every check, ready to run or draw.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Application id.
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub kafka: KafkaConfig,
    pub processing: ProcessingConfig,
    pub sources: Vec<Source>,
    pub nodes: Vec<Node>,
    pub sinks: Vec<Sink>,
    pub dead_letter_topic: String,
    /// The schema registry of `avro` sources and sinks.
    pub(crate) schema_registry: Option<SchemaRegistryConfig>,
    /// Memory and open files of the local state.
    pub state: StateConfig,
    /// Interactive queries (`run --query-addr` overrides).
    pub queries: QueriesConfig,
    /// Node indexes, each after every node that feeds it.
    pub(crate) order: Vec<usize>,
    /// What `check` warns about: the topology runs, but maybe not as meant.
    pub warnings: Vec<Diagnostic>,
}

#[derive(Clone, Debug)]
pub struct Source {
    pub(crate) name: String,
    pub config: SourceConfig,
    /// Where its records go.
    pub(crate) targets: Vec<Target>,
}

impl Source {
    /// A global table: read whole by every instance, outside the group.
    pub(crate) fn global(&self) -> bool {
        self.config.kind == model::SourceKind::GlobalTable
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub common: NodeCommon,
    pub kind: NodeKind,
    pub(crate) inputs: Vec<Upstream>,
    /// Each input as the operator may know it (its name; whether it is a
    /// table).
    pub(crate) input_info: Vec<NodeInput>,
    /// Per output (0 is the default, then the named ones): where records go.
    pub(crate) targets: Vec<Vec<Target>>,
    /// Output names after the default one.
    pub(crate) output_names: Vec<String>,
    pub(crate) stores: Vec<StoreDef>,
    /// `<app>-<node>-repartition` when the node sets `key_by`.
    pub(crate) repartition_topic: Option<String>,
}

impl Node {
    /// What the operator may know of its node, under a producer that
    /// sends records of up to `max_record_bytes`.
    pub(crate) fn info(&self, max_record_bytes: usize) -> NodeInfo<'_> {
        NodeInfo {
            name: &self.name,
            key_by: self.common.key_by.as_ref(),
            max_record_bytes,
            inputs: &self.input_info,
        }
    }

    pub(crate) fn uses_timers(&self) -> bool {
        self.kind.spec().uses_timers()
    }

    /// The full name of one of this node's stores (`<node>-<store>`).
    pub(crate) fn store_name(&self, store: &str) -> String {
        StoreDef::store_name(&self.name, store)
    }

    pub(crate) fn timer_store(&self) -> Option<String> {
        self.uses_timers()
            .then(|| self.store_name(StoreDef::TIMERS))
    }

    /// The store of the highest upstream offset seen per source partition,
    /// when the node reads through a repartition topic.
    pub(crate) fn repartition_seen_store(&self) -> Option<String> {
        self.repartition_topic
            .as_ref()
            .map(|_| self.store_name(StoreDef::REPARTITION_SEEN))
    }
}

#[derive(Clone, Debug)]
pub struct Sink {
    pub(crate) name: String,
    pub(crate) config: SinkConfig,
    pub(crate) inputs: Vec<Upstream>,
}

/// What feeds a node or sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Upstream {
    Source(usize),
    Node { node: usize, output: usize },
}

/// Where a source's or node's records go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// A node, as its `input`-th input.
    Node {
        node: usize,
        input: usize,
    },
    Sink(usize),
}

/// A topic the runtime creates and owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InternalTopic {
    pub(crate) name: String,
    pub(crate) kind: InternalKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InternalKind {
    /// Compacted; one per store.
    Changelog,
    /// One per `key_by` node.
    Repartition,
    DeadLetter,
}

impl Topology {
    /// The sources the group reads, partition by partition in tasks:
    /// every source but the global tables.
    pub(crate) fn group_sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter().filter(|s| !s.global())
    }

    /// The schema registry of `avro` sources and sinks, if any.
    pub fn schema_registry(&self) -> Option<&SchemaRegistryConfig> {
        self.schema_registry.as_ref()
    }

    /// What `run` gives one instance of this topology for its state
    /// (`state:`): the RocksDB block cache and write buffers every task's
    /// database shares, and the record cache's byte budget.
    pub fn state_resources(
        &self,
    ) -> (
        crate::state::rocks::RocksResources,
        std::sync::Arc<crate::state::CacheBudget>,
    ) {
        (
            crate::state::rocks::RocksResources::new(
                self.state.block_cache.as_usize(),
                self.state.write_buffers.as_usize(),
                self.state.max_open_files,
            ),
            crate::state::CacheBudget::new(self.state.record_cache.as_usize()),
        )
    }

    /// The bytes `state:` budgets: block cache, write buffers and record
    /// cache.
    pub fn state_budget(&self) -> usize {
        self.state.block_cache.as_usize()
            + self.state.write_buffers.as_usize()
            + self.state.record_cache.as_usize()
    }

    /// Every store of a task, in a fixed order: the column families of its
    /// RocksDB and the indexes of its [`StateSet`](crate::state::StateSet).
    pub fn stores(&self) -> impl Iterator<Item = &StoreDef> {
        self.nodes.iter().flat_map(|n| &n.stores)
    }

    pub fn internal_topics(&self) -> Vec<InternalTopic> {
        let mut topics: Vec<InternalTopic> = self
            .stores()
            .map(|s| InternalTopic {
                name: s.changelog_topic.clone(),
                kind: InternalKind::Changelog,
            })
            .collect();
        topics.extend(self.nodes.iter().filter_map(|n| {
            n.repartition_topic.as_ref().map(|t| InternalTopic {
                name: t.clone(),
                kind: InternalKind::Repartition,
            })
        }));
        topics.push(InternalTopic {
            name: self.dead_letter_topic.clone(),
            kind: InternalKind::DeadLetter,
        });
        topics
    }
}

/// Reads and checks a topology file, with `${VAR}` taken from the process
/// environment.
pub fn load_file(path: &FsPath) -> Result<Topology, Vec<Diagnostic>> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![Diagnostic {
            file: file.clone(),
            pos: Pos { line: 1, col: 1 },
            path: "topology".into(),
            message: format!("cannot read the file: {e}"),
            severity: Severity::Error,
        }]
    })?;
    load_str(&file, &text, &|name| std::env::var(name).ok())
}

/// Reads and checks topology text; `file` names it in diagnostics.
pub fn load_str(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Topology, Vec<Diagnostic>> {
    let mut loader = Loader {
        file: file.to_string(),
        root: YamlNode {
            pos: Pos { line: 1, col: 1 },
            kind: Kind::Null,
        },
        diagnostics: Vec::new(),
        warnings: Vec::new(),
    };
    let (root, yaml_errors) = yaml::parse(text, env).map_err(|e| {
        vec![Diagnostic {
            file: file.to_string(),
            pos: e.pos,
            path: "topology".into(),
            message: e.message,
            severity: Severity::Error,
        }]
    })?;
    loader.root = root;
    for e in yaml_errors {
        let path = path_at(&loader.root, e.pos).unwrap_or_else(Path::root);
        loader.push(e.pos, &path, e.message);
    }
    let parsed = loader.parse();
    let topology = parsed.and_then(|parsed| loader.compile(parsed));
    let mut diagnostics = loader.diagnostics;
    let mut warnings = loader.warnings;
    warnings.sort_by(|a, b| a.pos.cmp(&b.pos).then_with(|| a.path.cmp(&b.path)));
    warnings.dedup();
    match topology {
        Some(mut t) if diagnostics.is_empty() => {
            t.warnings = warnings;
            Ok(t)
        }
        _ => {
            // Warnings too: a file is fixed once, with everything in view.
            diagnostics.extend(warnings);
            diagnostics
                .sort_by(|a, b| (a.pos, a.severity, &a.path).cmp(&(b.pos, b.severity, &b.path)));
            diagnostics.dedup();
            Err(diagnostics)
        }
    }
}

/// The path of the node at `pos` (a key or a value), if any.
fn path_at(root: &YamlNode, pos: Pos) -> Option<Path> {
    fn walk(node: &YamlNode, pos: Pos, path: &Path) -> Option<Path> {
        if node.pos == pos {
            return Some(path.clone());
        }
        match &node.kind {
            Kind::Map(entries) => entries.iter().find_map(|(k, v)| {
                let next = path.key(&k.scalar_text().unwrap_or_default());
                if k.pos == pos {
                    Some(next)
                } else {
                    walk(v, pos, &next)
                }
            }),
            Kind::Seq(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, v)| walk(v, pos, &path.index(i))),
            _ => None,
        }
    }
    walk(root, pos, &Path::root())
}

/// The position of the value at `segments` below `root`, or of the deepest
/// node on the way that exists.
fn locate(root: &YamlNode, segments: &[String]) -> Pos {
    let mut node = root;
    for segment in segments {
        let next = match &node.kind {
            Kind::Map(_) => node.get(segment),
            Kind::Seq(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(next) => node = next,
            None => break,
        }
    }
    node.pos
}

/// Renders `segments` as a path, indexes of lists as `[i]`.
fn render_path(root: &YamlNode, segments: &[String]) -> String {
    let mut path = Path::root();
    let mut node = Some(root);
    for s in segments {
        let index = match node.map(|n| &n.kind) {
            Some(Kind::Seq(items)) => s.parse::<usize>().ok().map(|i| (i, items.get(i))),
            _ => None,
        };
        match index {
            Some((i, next)) => {
                path = path.index(i);
                node = next;
            }
            None => {
                path = path.key(s);
                node = node.and_then(|n| n.get(s));
            }
        }
    }
    path.to_string()
}

/// The sections of a file, each entry with its name, read in file order.
/// Parts that failed to parse are `None` (their errors are already
/// recorded), so the graph can still be checked around them.
struct Parsed {
    name: Option<String>,
    description: Option<String>,
    kafka: Option<KafkaConfig>,
    processing: Option<ProcessingConfig>,
    sources: Vec<(String, Option<SourceConfig>)>,
    nodes: Vec<(String, Option<NodeCommon>, Option<NodeKind>)>,
    sinks: Vec<(String, Option<SinkConfig>)>,
    dead_letter: Option<Option<DeadLetterConfig>>,
    schema_registry: Option<Option<SchemaRegistryConfig>>,
    state: Option<StateConfig>,
    queries: Option<QueriesConfig>,
    /// Whether everything parsed.
    complete: bool,
}

const TOP_LEVEL: &[&str] = &[
    "name",
    "description",
    "kafka",
    "processing",
    "sources",
    "nodes",
    "sinks",
    "dead_letter",
    "schema_registry",
    "state",
    "queries",
];

struct Loader {
    file: String,
    root: YamlNode,
    /// Errors.
    diagnostics: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl Loader {
    fn push(&mut self, pos: Pos, path: &Path, message: String) {
        self.diagnostics.push(Diagnostic {
            file: self.file.clone(),
            pos,
            path: path.to_string(),
            message,
            severity: Severity::Error,
        });
    }

    fn at(&self, segments: &[String], message: String, severity: Severity) -> Diagnostic {
        Diagnostic {
            file: self.file.clone(),
            pos: locate(&self.root, segments),
            path: render_path(&self.root, segments),
            message,
            severity,
        }
    }

    /// An error at `segments` (a path from the root).
    fn error_at(&mut self, segments: &[String], message: String) {
        let error = self.at(segments, message, Severity::Error);
        self.diagnostics.push(error);
    }

    /// A warning at `segments` (a path from the root).
    fn warn_at(&mut self, segments: &[String], message: String) {
        let warning = self.at(segments, message, Severity::Warning);
        self.warnings.push(warning);
    }

    fn de_error(&mut self, error: DeError, fallback: &YamlNode, path: &Path, extra: &[&str]) {
        let message = error.render(extra);
        let pos = error.pos.unwrap_or(fallback.pos);
        let path = error.path.unwrap_or_else(|| path.clone());
        self.push(pos, &path, message);
    }

    fn read<T: serde::de::DeserializeOwned>(&mut self, node: &YamlNode, path: &Path) -> Option<T> {
        match from_node(node, path) {
            Ok(value) => Some(value),
            Err(e) => {
                self.de_error(e, node, path, &[]);
                None
            }
        }
    }

    fn parse(&mut self) -> Option<Parsed> {
        let root = self.root.clone();
        let top = Path::root();
        let Some(entries) = root.as_map() else {
            self.push(
                root.pos,
                &top,
                format!(
                    "a topology is a mapping with `name`, `kafka`, `sources`, `nodes` and `sinks`; found {}",
                    root.describe()
                ),
            );
            return None;
        };
        let errors_before = self.diagnostics.len();
        self.check_top_level_fields(&root, entries);
        let name = root.get("name").and_then(|n| self.app_name(n));
        let description = root
            .get("description")
            .and_then(|n| self.read::<String>(n, &top.key("description")));
        let kafka = root
            .get("kafka")
            .and_then(|n| self.read::<KafkaConfig>(n, &top.key("kafka")));
        let processing = match root.get("processing") {
            Some(n) => self.read::<ProcessingConfig>(n, &top.key("processing")),
            None => Some(ProcessingConfig::default()),
        };
        let dead_letter = match root.get("dead_letter") {
            Some(n) => self
                .read::<DeadLetterConfig>(n, &top.key("dead_letter"))
                .map(Some),
            None => Some(None),
        };
        let schema_registry = match root.get("schema_registry") {
            Some(n) => self
                .read::<SchemaRegistryConfig>(n, &top.key("schema_registry"))
                .map(Some),
            None => Some(None),
        };
        let state = match root.get("state") {
            Some(n) => self.read::<StateConfig>(n, &top.key("state")),
            None => Some(StateConfig::default()),
        };
        let queries = match root.get("queries") {
            Some(n) => self.read::<QueriesConfig>(n, &top.key("queries")),
            None => Some(QueriesConfig::default()),
        };
        let sources = root
            .get("sources")
            .map(|n| self.section(n, "sources", |l, node, path| l.read(node, path)))
            .unwrap_or_default();
        let nodes = root
            .get("nodes")
            .map(|n| self.section(n, "nodes", Loader::node))
            .unwrap_or_default()
            .into_iter()
            .map(|(name, node)| match node {
                Some((common, kind)) => (name, common, kind),
                None => (name, None, None),
            })
            .collect();
        let sinks = root
            .get("sinks")
            .map(|n| self.section(n, "sinks", |l, node, path| l.read(node, path)))
            .unwrap_or_default();
        Some(Parsed {
            name,
            description,
            kafka,
            processing,
            sources,
            nodes,
            sinks,
            dead_letter,
            schema_registry,
            state,
            queries,
            complete: self.diagnostics.len() == errors_before,
        })
    }

    /// Reports every unknown top-level field of `root` (whose entries are
    /// `entries`) and every missing required one.
    fn check_top_level_fields(&mut self, root: &YamlNode, entries: &[(YamlNode, YamlNode)]) {
        let top = Path::root();
        for (key, _) in entries {
            let name = key.scalar_text().unwrap_or_default().into_owned();
            if !TOP_LEVEL.contains(&name.as_str()) {
                self.push(
                    key.pos,
                    &top.key(&name),
                    unknown_name("field", &name, TOP_LEVEL),
                );
            }
        }
        for key in ["name", "kafka", "sources", "sinks"] {
            if root.get(key).is_none() {
                self.push(root.pos, &top, format!("missing field `{key}`"));
            }
        }
    }

    /// The application's `name` from node `n`, which must be able to name
    /// Kafka topics.
    fn app_name(&mut self, n: &YamlNode) -> Option<String> {
        let top = Path::root();
        let name: String = self.read(n, &top.key("name"))?;
        if name.is_empty() || !name.bytes().all(legal_topic_byte) {
            self.push(
                n.pos,
                &top.key("name"),
                format!("`{name}` cannot name Kafka topics: use letters, digits, `.`, `_` and `-`"),
            );
            return None;
        }
        Some(name)
    }

    /// Reads every entry of a `name: {...}` section; entries that fail are
    /// kept by name with `None`.
    fn section<T>(
        &mut self,
        node: &YamlNode,
        section: &str,
        read: impl Fn(&mut Loader, &YamlNode, &Path) -> Option<T>,
    ) -> Vec<(String, Option<T>)> {
        let path = Path::root().key(section);
        let Some(entries) = node.as_map() else {
            if !matches!(node.kind, Kind::Null) {
                self.push(
                    node.pos,
                    &path,
                    format!(
                        "expected a mapping of names to definitions, found {}",
                        node.describe()
                    ),
                );
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in entries {
            let name = key.scalar_text().unwrap_or_default().into_owned();
            let entry_path = path.key(&name);
            if name.is_empty() || !name.bytes().all(legal_topic_byte) {
                self.push(
                    key.pos,
                    &entry_path,
                    format!("`{name}` is not a valid name: use letters, digits, `.`, `_` and `-`"),
                );
                continue;
            }
            let item = read(self, value, &entry_path);
            out.push((name, item));
        }
        out
    }

    /// Reads a node: its `type`, the common fields, then the operator's
    /// options.
    fn node(
        &mut self,
        node: &YamlNode,
        path: &Path,
    ) -> Option<(Option<NodeCommon>, Option<NodeKind>)> {
        if node.as_map().is_none() {
            self.push(
                node.pos,
                path,
                format!("expected a node definition, found {}", node.describe()),
            );
            return None;
        }
        let type_name = match node.entry("type") {
            None => {
                self.push(
                    node.pos,
                    path,
                    format!(
                        "missing field `type` (one of {})",
                        NodeKind::TYPES
                            .iter()
                            .map(|t| format!("`{t}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                None
            }
            Some((_, value)) => match value.as_str() {
                Some(name) => Some(name.to_string()),
                None => {
                    self.push(
                        value.pos,
                        &path.key("type"),
                        format!("expected a string, found {}", value.describe()),
                    );
                    None
                }
            },
        };
        let common_entries: Vec<(YamlNode, YamlNode)> = node
            .as_map()
            .unwrap_or_default()
            .iter()
            .filter(|(k, _)| {
                k.as_str()
                    .is_some_and(|k| NODE_COMMON_FIELDS.contains(&k) && k != "type")
            })
            .cloned()
            .collect();
        let common_node = YamlNode {
            pos: node.pos,
            kind: Kind::Map(common_entries),
        };
        let common = self.read::<NodeCommon>(&common_node, path);
        let Some(type_name) = type_name else {
            return Some((common, None));
        };
        let kind = match NodeKind::load(&type_name, node, path, NODE_COMMON_FIELDS) {
            None => {
                let at = node.get("type").map_or(node.pos, |t| t.pos);
                self.push(
                    at,
                    &path.key("type"),
                    unknown_name("operator type", &type_name, NodeKind::TYPES),
                );
                None
            }
            Some(Ok(kind)) => Some(kind),
            Some(Err(e)) => {
                self.de_error(e, node, path, NODE_COMMON_FIELDS);
                None
            }
        };
        Some((common, kind))
    }
}

fn legal_topic_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

#[cfg(test)]
mod tests;
