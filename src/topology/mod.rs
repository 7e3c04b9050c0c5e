//! Topologies: the YAML model, its validation, and the compiled graph.
//!
//! Loading happens in two phases, and both collect every problem before
//! giving up:
//!
//! 1. **parse**: the YAML text becomes a tree that remembers positions
//!    ([`yaml`]); each section, and each source, node and sink within it,
//!    is deserialized on its own ([`de`]), so a typo in one node does not
//!    hide a bad duration in another;
//! 2. **compile**: names resolve, the graph is acyclic, keyed operators
//!    have a key, option combinations make sense, and each operator checks
//!    its own options.
//!
//! Problems are [`Diagnostic`]s printed as
//! `topology.yaml:14:5: nodes.fold_account.quiet_for: message`.

pub mod describe;
pub mod model;
pub mod security;

/// The configuration language, where it used to live (`topology::de`,
/// `topology::types`, `topology::yaml`).
pub use crate::config::{de, types, yaml};

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path as FsPath;

use de::{DeError, Path, from_node, unknown_name};
use model::{
    DeadLetterConfig, Format, KafkaConfig, KeyFormat, NODE_COMMON_FIELDS, NodeCommon,
    ProcessingConfig, QueriesConfig, SchemaRegistryConfig, SinkConfig, SourceConfig,
};
use types::InputRef;
use yaml::{Kind, Node as YamlNode, Pos};

use crate::operators::registry::{Issue, NodeInfo, NodeKind};
pub use crate::state::StoreDef;

/// One problem in a topology file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub pos: Pos,
    pub path: String,
    pub message: String,
    pub severity: Severity,
}

/// Whether a [`Diagnostic`] stops the topology from loading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
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
    pub name: String,
    /// The file it was read from, for messages.
    pub file: String,
    pub description: Option<String>,
    pub kafka: KafkaConfig,
    pub processing: ProcessingConfig,
    pub sources: Vec<Source>,
    pub nodes: Vec<Node>,
    pub sinks: Vec<Sink>,
    pub dead_letter_topic: String,
    /// The schema registry of `avro` sources and sinks.
    pub schema_registry: Option<SchemaRegistryConfig>,
    /// Interactive queries (`run --query-addr` overrides).
    pub queries: QueriesConfig,
    /// Node indexes, each after every node that feeds it.
    pub order: Vec<usize>,
    /// What `check` warns about: the topology runs, but maybe not as meant.
    pub warnings: Vec<Diagnostic>,
}

#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub config: SourceConfig,
    /// Where its records go.
    pub targets: Vec<Target>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub common: NodeCommon,
    pub kind: NodeKind,
    pub inputs: Vec<Upstream>,
    /// Per output (0 is the default, then the named ones): where records go.
    pub targets: Vec<Vec<Target>>,
    /// Output names after the default one.
    pub output_names: Vec<String>,
    pub stores: Vec<StoreDef>,
    /// `<app>-<node>-repartition` when the node sets `key_by`.
    pub repartition_topic: Option<String>,
}

impl Node {
    /// What the operator may know of its node, under a producer that
    /// sends records of up to `max_record_bytes`.
    pub fn info(&self, max_record_bytes: usize) -> NodeInfo<'_> {
        NodeInfo {
            name: &self.name,
            key_by: self.common.key_by.as_ref(),
            max_record_bytes,
        }
    }

    pub fn uses_timers(&self) -> bool {
        self.kind.spec().uses_timers()
    }

    /// The full name of one of this node's stores (`<node>-<store>`).
    pub fn store_name(&self, store: &str) -> String {
        StoreDef::store_name(&self.name, store)
    }

    pub fn timer_store(&self) -> Option<String> {
        self.uses_timers()
            .then(|| self.store_name(StoreDef::TIMERS))
    }

    /// The store of the highest upstream offset seen per source partition,
    /// when the node reads through a repartition topic.
    pub fn repartition_seen_store(&self) -> Option<String> {
        self.repartition_topic
            .as_ref()
            .map(|_| self.store_name(StoreDef::REPARTITION_SEEN))
    }
}

#[derive(Clone, Debug)]
pub struct Sink {
    pub name: String,
    pub config: SinkConfig,
    pub inputs: Vec<Upstream>,
}

/// What feeds a node or sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Upstream {
    Source(usize),
    Node { node: usize, output: usize },
}

/// Where a source's or node's records go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
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
    pub name: String,
    pub kind: InternalKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InternalKind {
    /// Compacted; one per store.
    Changelog,
    /// One per `key_by` node.
    Repartition,
    DeadLetter,
}

impl Topology {
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

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
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
        let name = root.get("name").and_then(|n| {
            let name: String = self.read(n, &top.key("name"))?;
            if name.is_empty() || !name.bytes().all(legal_topic_byte) {
                self.push(
                    n.pos,
                    &top.key("name"),
                    format!(
                        "`{name}` cannot name Kafka topics: use letters, digits, `.`, `_` and `-`"
                    ),
                );
                return None;
            }
            Some(name)
        });
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
            queries,
            complete: self.diagnostics.len() == errors_before,
        })
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

    /// Checks a parsed file and builds its topology, in named passes that
    /// each report every problem they find. Passes that need a sound graph
    /// run only when the ones before found none.
    fn compile(&mut self, parsed: Parsed) -> Option<Topology> {
        let errors_before = self.diagnostics.len();
        self.check_unique_names(&parsed);
        let graph = self.resolve_inputs(&parsed);
        // A cycle leaves no order to check keys in.
        let order = self.order_nodes(&parsed, &graph)?;
        self.check_nodes(&parsed, &graph, &order);
        // Every source and node output must go somewhere (known only when
        // every reader parsed and names are unambiguous).
        if parsed.complete && self.diagnostics.len() == errors_before {
            self.check_readers(&parsed, &graph);
        }
        self.check_not_empty(&parsed);
        self.check_sections(&parsed);
        if !parsed.complete || self.diagnostics.len() > errors_before {
            return None;
        }
        let topology = self.assemble(parsed, graph, order)?;
        self.check_internal_topics(&topology);
        (self.diagnostics.len() == errors_before).then_some(topology)
    }

    /// Names: sources and nodes share the namespace inputs refer to; sinks
    /// may not reuse either, to keep `describe` unambiguous.
    fn check_unique_names(&mut self, parsed: &Parsed) {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        let mut duplicates = Vec::new();
        let all_names = parsed
            .sources
            .iter()
            .map(|(n, _)| ("sources", n.as_str()))
            .chain(parsed.nodes.iter().map(|(n, _, _)| ("nodes", n.as_str())))
            .chain(parsed.sinks.iter().map(|(n, _)| ("sinks", n.as_str())));
        for (section, name) in all_names {
            match seen.get(name) {
                // Within one section YAML already reported the duplicate key.
                Some(first) if *first == section => {}
                Some(first) => duplicates.push((section, name.to_string(), first.to_string())),
                None => {
                    seen.insert(name, section);
                }
            }
        }
        for (section, name, first) in duplicates {
            self.error_at(
                &[section.to_string(), name.clone()],
                format!("the name `{name}` is already used in `{first}`; names of sources, nodes and sinks must be unique"),
            );
        }
    }

    /// Inputs: every `input` of a node or sink names a source, a node, or
    /// a named output of a node.
    fn resolve_inputs(&mut self, parsed: &Parsed) -> Graph {
        let names = Names::of(parsed);
        let mut graph = Graph {
            node_inputs: Vec::new(),
            sink_inputs: Vec::new(),
            // Output names of nodes whose operator is known.
            output_names: parsed
                .nodes
                .iter()
                .map(|(_, _, kind)| kind.as_ref().map(|k| k.spec().outputs()))
                .collect(),
        };
        for (name, common, _) in &parsed.nodes {
            let at = vec!["nodes".into(), name.clone(), "input".into()];
            let inputs = match common {
                Some(common) => self.resolve(&names, &graph.output_names, common.input.refs(), at),
                None => Vec::new(),
            };
            graph.node_inputs.push(inputs);
        }
        for (name, sink) in &parsed.sinks {
            let at = vec!["sinks".into(), name.clone(), "input".into()];
            let inputs = match sink {
                Some(sink) => self.resolve(&names, &graph.output_names, sink.input.refs(), at),
                None => Vec::new(),
            };
            graph.sink_inputs.push(inputs);
        }
        graph
    }

    /// The upstreams `refs` (the `input` at `at`) name.
    fn resolve(
        &mut self,
        names: &Names<'_>,
        output_names: &[Option<Vec<String>>],
        refs: &[InputRef],
        at: Vec<String>,
    ) -> Vec<Upstream> {
        let mut out = Vec::new();
        if refs.is_empty() {
            self.error_at(&at, "needs at least one input".into());
        }
        let listed = is_seq(&self.root, &at);
        for (i, input) in refs.iter().enumerate() {
            let mut at = at.clone();
            if listed {
                at.push(i.to_string());
            }
            let (name, output) = input.split();
            if let Some(&s) = names.sources.get(name) {
                match output {
                    None => out.push(Upstream::Source(s)),
                    Some(o) => self.error_at(
                        &at,
                        format!("source `{name}` has no output `{o}`; refer to it as `{name}`"),
                    ),
                }
            } else if let Some(&n) = names.nodes.get(name) {
                match (output, &output_names[n]) {
                    (None, _) => out.push(Upstream::Node { node: n, output: 0 }),
                    // The operator failed to parse; its outputs are unknown.
                    (Some(_), None) => {}
                    (Some(o), Some(outputs)) => match outputs.iter().position(|x| x == o) {
                        Some(p) => out.push(Upstream::Node {
                            node: n,
                            output: p + 1,
                        }),
                        None if outputs.is_empty() => self.error_at(
                            &at,
                            format!("node `{name}` has a single output; refer to it as `{name}`"),
                        ),
                        None => self.error_at(&at, no_such_output(name, o, outputs)),
                    },
                }
            } else {
                self.error_at(&at, unknown_name("input", name, &names.known));
            }
        }
        out
    }

    /// Cycles, and a topological order for everything else.
    fn order_nodes(&mut self, parsed: &Parsed, graph: &Graph) -> Option<Vec<usize>> {
        match topological_order(&graph.node_inputs) {
            Ok(order) => Some(order),
            Err(cycle) => {
                let names: Vec<&str> = cycle.iter().map(|&i| parsed.nodes[i].0.as_str()).collect();
                let first = &parsed.nodes[cycle[0]].0;
                self.error_at(
                    &["nodes".into(), first.clone(), "input".into()],
                    format!("cycle: {} -> {}", names.join(" -> "), names[0]),
                );
                None
            }
        }
    }

    /// Keys, then each operator's own checks: a keyed operator needs keyed
    /// input or `key_by`. Unknown parts count as keyed so they raise no
    /// second error.
    fn check_nodes(&mut self, parsed: &Parsed, graph: &Graph, order: &[usize]) {
        let mut output_keyed = vec![true; parsed.nodes.len()];
        let max_record_bytes = parsed.kafka.as_ref().map_or(
            model::DEFAULT_MESSAGE_MAX_BYTES,
            KafkaConfig::max_record_bytes,
        );
        for &i in order {
            let (name, Some(common), Some(kind)) = &parsed.nodes[i] else {
                continue;
            };
            let spec = kind.spec();
            let mut input_keyed = true;
            for upstream in &graph.node_inputs[i] {
                let (keyed, from) = match *upstream {
                    Upstream::Source(s) => (
                        parsed.sources[s]
                            .1
                            .as_ref()
                            .is_none_or(|c| c.key_format != KeyFormat::None),
                        parsed.sources[s].0.as_str(),
                    ),
                    Upstream::Node { node, .. } => {
                        (output_keyed[node], parsed.nodes[node].0.as_str())
                    }
                };
                if !keyed {
                    input_keyed = false;
                    if spec.keyed() && common.key_by.is_none() {
                        self.error_at(
                            &["nodes".into(), name.clone()],
                            format!(
                                "`{}` groups by key, but its input `{from}` carries no key; set `key_by` to the field to group by",
                                kind.type_name()
                            ),
                        );
                    }
                }
            }
            if common.key_by.is_some() && !spec.keyed() {
                self.error_at(
                    &["nodes".into(), name.clone(), "key_by".into()],
                    format!(
                        "`key_by` applies to operators that group by key; `{}` does not",
                        kind.type_name()
                    ),
                );
            }
            output_keyed[i] = spec.output_keyed(input_keyed || common.key_by.is_some());
            let info = NodeInfo {
                name,
                key_by: common.key_by.as_ref(),
                max_record_bytes,
            };
            let mut issues: Vec<Issue> = Vec::new();
            spec.validate(&info, &mut issues);
            for issue in issues {
                let mut at = vec!["nodes".to_string(), name.clone()];
                at.extend(issue.path);
                self.error_at(&at, issue.message);
            }
        }
    }

    /// Each section's own checks, which live beside its config type in
    /// [`model`] and [`security`]; and the checks that span sections.
    fn check_sections(&mut self, parsed: &Parsed) {
        for (name, sink) in &parsed.sinks {
            let Some(sink) = sink else { continue };
            for (field, message) in sink.problems() {
                self.error_at(&["sinks".into(), name.clone(), field.into()], message);
            }
        }
        self.check_retries(parsed);
        if let Some(processing) = &parsed.processing {
            for (field, message) in processing.problems() {
                self.error_at(&["processing".into(), field.into()], message);
            }
        }
        self.check_formats(parsed);
        if let Some(kafka) = &parsed.kafka {
            for (path, message) in kafka.security_problems() {
                let mut at = vec!["kafka".to_string()];
                at.extend(path);
                self.error_at(&at, message);
            }
        }
    }

    /// Retry settings make sense, and retries, which block processing, end
    /// well within a transaction.
    fn check_retries(&mut self, parsed: &Parsed) {
        let timeout = parsed
            .processing
            .as_ref()
            .map(|p| p.transaction_timeout.0)
            .unwrap_or(std::time::Duration::from_secs(60));
        let retries = parsed
            .processing
            .iter()
            .map(|p| {
                (
                    vec!["processing".to_string(), "retry".to_string()],
                    &p.retry,
                )
            })
            .chain(parsed.sources.iter().filter_map(|(name, c)| {
                let retry = c.as_ref()?.retry.as_ref()?;
                Some((
                    vec!["sources".to_string(), name.clone(), "retry".to_string()],
                    retry,
                ))
            }))
            .collect::<Vec<_>>();
        for (at, retry) in retries {
            for (field, message) in retry.problems() {
                let mut path = at.clone();
                path.push(field.to_string());
                self.error_at(&path, message);
            }
            if let Some(message) = retry.timeout_problem(timeout) {
                self.error_at(&at, message);
            }
        }
    }

    /// The checked topology, with its stores, internal topics and the
    /// targets of every source and node. `None` if a part is missing
    /// (reported already).
    fn assemble(&mut self, parsed: Parsed, graph: Graph, order: Vec<usize>) -> Option<Topology> {
        let Parsed {
            name: Some(app),
            description,
            kafka: Some(kafka),
            processing: Some(processing),
            sources,
            nodes,
            sinks,
            dead_letter: Some(dead_letter),
            schema_registry: Some(schema_registry),
            queries: Some(queries),
            ..
        } = parsed
        else {
            return None;
        };

        let mut topology = Topology {
            name: app.clone(),
            file: self.file.clone(),
            description,
            kafka,
            processing,
            sources: Vec::new(),
            nodes: Vec::new(),
            sinks: Vec::new(),
            dead_letter_topic: dead_letter.map_or_else(|| format!("{app}-dlq"), |d| d.topic),
            schema_registry,
            queries,
            order,
            warnings: Vec::new(),
        };
        for (name, config) in sources {
            topology.sources.push(Source {
                name,
                config: config?,
                targets: Vec::new(),
            });
        }
        for ((name, common, kind), inputs) in nodes.into_iter().zip(graph.node_inputs) {
            let (common, kind) = (common?, kind?);
            let stores: Vec<StoreDef> = kind
                .stores(common.key_by.is_some())
                .into_iter()
                .map(|store| StoreDef::new(&app, &name, store))
                .collect();
            let output_names = kind.spec().outputs();
            topology.nodes.push(Node {
                repartition_topic: common
                    .key_by
                    .as_ref()
                    .map(|_| format!("{app}-{name}-repartition")),
                targets: vec![Vec::new(); output_names.len() + 1],
                output_names,
                name,
                common,
                kind,
                inputs,
                stores,
            });
        }
        for ((name, config), inputs) in sinks.into_iter().zip(graph.sink_inputs) {
            topology.sinks.push(Sink {
                name,
                config: config?,
                inputs,
            });
        }
        // Wire the targets from the inputs.
        for n in 0..topology.nodes.len() {
            for (input, upstream) in topology.nodes[n].inputs.clone().into_iter().enumerate() {
                push_target(&mut topology, upstream, Target::Node { node: n, input });
            }
        }
        for s in 0..topology.sinks.len() {
            for upstream in topology.sinks[s].inputs.clone() {
                push_target(&mut topology, upstream, Target::Sink(s));
            }
        }
        Some(topology)
    }

    /// Internal topics must not collide with the user's.
    fn check_internal_topics(&mut self, topology: &Topology) {
        let user_topics: HashSet<&str> = topology
            .sources
            .iter()
            .map(|s| s.config.topic.as_str())
            .chain(topology.sinks.iter().map(|s| s.config.topic.as_str()))
            .collect();
        let clashes: Vec<String> = topology
            .internal_topics()
            .into_iter()
            .filter(|t| t.kind != InternalKind::DeadLetter && user_topics.contains(t.name.as_str()))
            .map(|t| t.name)
            .collect();
        for clash in clashes {
            self.error_at(
                &["name".into()],
                format!("the internal topic `{clash}` would be the same as a source or sink topic; rename the application or the topic"),
            );
        }
    }
}

/// What the inputs of a file resolve to: the edges of its graph.
struct Graph {
    /// Per node, what feeds it, in the order of its `input`.
    node_inputs: Vec<Vec<Upstream>>,
    /// Per sink, what feeds it.
    sink_inputs: Vec<Vec<Upstream>>,
    /// Per node, its named outputs (`None` if its operator did not parse).
    output_names: Vec<Option<Vec<String>>>,
}

/// The names inputs may refer to.
struct Names<'a> {
    sources: HashMap<&'a str, usize>,
    nodes: HashMap<&'a str, usize>,
    /// Both, sorted, for suggestions.
    known: Vec<&'a str>,
}

impl Names<'_> {
    fn of(parsed: &Parsed) -> Names<'_> {
        let sources: HashMap<&str, usize> = parsed
            .sources
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.as_str(), i))
            .collect();
        let nodes: HashMap<&str, usize> = parsed
            .nodes
            .iter()
            .enumerate()
            .map(|(i, (n, _, _))| (n.as_str(), i))
            .collect();
        let mut known: Vec<&str> = sources.keys().chain(nodes.keys()).copied().collect();
        known.sort_unstable();
        Names {
            sources,
            nodes,
            known,
        }
    }
}

/// `node` has named outputs, but not `output`.
fn no_such_output(node: &str, output: &str, outputs: &[String]) -> String {
    let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    match de::suggest(output, &outputs) {
        Some(best) => format!("`{node}` has no output `{output}`, did you mean `{best}`?"),
        None => format!(
            "`{node}` has no output `{output}`; its outputs are {}",
            outputs
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl Loader {
    /// Sources and nodes whose records nobody reads are errors: the
    /// records would end nowhere. A route's default output may go unread
    /// (records no route matches end there, counted), but not all of its
    /// outputs; an unread named route is a warning.
    fn check_readers(&mut self, parsed: &Parsed, graph: &Graph) {
        let mut read_sources: HashSet<usize> = HashSet::new();
        let mut consumed: HashSet<(usize, usize)> = HashSet::new();
        for upstream in graph.node_inputs.iter().chain(&graph.sink_inputs).flatten() {
            match *upstream {
                Upstream::Source(s) => {
                    read_sources.insert(s);
                }
                Upstream::Node { node, output } => {
                    consumed.insert((node, output));
                }
            }
        }
        for (i, (name, _)) in parsed.sources.iter().enumerate() {
            if !read_sources.contains(&i) {
                self.error_at(
                    &["sources".into(), name.clone()],
                    format!("nothing reads source `{name}`: add a node or sink with `input: {name}`, or remove the source"),
                );
            }
        }
        for (i, (name, _, _)) in parsed.nodes.iter().enumerate() {
            let Some(routes) = &graph.output_names[i] else {
                continue;
            };
            if routes.is_empty() {
                if !consumed.contains(&(i, 0)) {
                    self.error_at(
                        &["nodes".into(), name.clone()],
                        format!("nothing reads the output of `{name}`: add a sink or node with `input: {name}`"),
                    );
                }
                continue;
            }
            if !(0..=routes.len()).any(|output| consumed.contains(&(i, output))) {
                let inputs: Vec<String> = routes
                    .iter()
                    .map(|r| format!("`input: {name}.{r}`"))
                    .collect();
                self.error_at(
                    &["nodes".into(), name.clone()],
                    format!(
                        "nothing reads any output of `{name}`: add a sink or node with {} (or `input: {name}` for records no route matches)",
                        inputs.join(", ")
                    ),
                );
                continue;
            }
            for (r, route) in routes.iter().enumerate() {
                if !consumed.contains(&(i, r + 1)) {
                    self.warn_at(
                        &[
                            "nodes".into(),
                            name.clone(),
                            "routes".into(),
                            route.clone(),
                        ],
                        format!("nothing reads the route `{route}` of `{name}`, so the records it matches are discarded: add a sink or node with `input: {name}.{route}`, or remove the route"),
                    );
                }
            }
        }
    }

    /// A topology reads at least one source and writes at least one sink
    /// (`run` subscribes to its first source).
    fn check_not_empty(&mut self, parsed: &Parsed) {
        for (section, count, message) in [
            (
                "sources",
                parsed.sources.len(),
                "a topology needs at least one source: `run` would have nothing to read",
            ),
            (
                "sinks",
                parsed.sinks.len(),
                "a topology needs at least one sink: its results would be written nowhere",
            ),
        ] {
            // A missing section or one that is not a mapping is reported
            // already; entries that failed to parse still count. An empty
            // value (`sinks:`) has no position of its own: point at the key.
            let at = match self.root.entry(section) {
                Some((key, value)) => match &value.kind {
                    Kind::Null => Some(key.pos),
                    Kind::Map(entries) if entries.is_empty() && count == 0 => Some(value.pos),
                    _ => None,
                },
                None => None,
            };
            if let Some(pos) = at {
                self.push(pos, &Path::root().key(section), message.to_string());
            }
        }
    }

    /// Avro needs a schema registry; Avro sinks name their schema files; and
    /// every schema file a topology names exists and is an Avro schema.
    fn check_formats(&mut self, parsed: &Parsed) {
        let at = |section: &str, name: &str, field: &str| -> Vec<String> {
            vec![section.into(), name.into(), field.into()]
        };
        if let Some(Some(registry)) = &parsed.schema_registry {
            for (field, message) in registry.problems() {
                self.error_at(&["schema_registry".into(), field.into()], message);
            }
        }
        // Where Avro is used, for the one "needs a registry" error.
        let mut avro_uses: Vec<Vec<String>> = Vec::new();
        // (where a schema file is named, the file)
        let mut files: Vec<(Vec<String>, &FsPath)> = Vec::new();
        // (a field set where it does not apply, what it applies with)
        let mut stray: Vec<(Vec<String>, &str)> = Vec::new();
        for (name, source) in &parsed.sources {
            let Some(source) = source else { continue };
            let avro = source.format == Format::Avro;
            if avro {
                avro_uses.push(at("sources", name, "format"));
            }
            if source.key_format == KeyFormat::Avro {
                avro_uses.push(at("sources", name, "key_format"));
            }
            match (&source.schema, avro) {
                (Some(file), true) => files.push((at("sources", name, "schema"), file)),
                (Some(_), false) => stray.push((at("sources", name, "schema"), "`format: avro`")),
                (None, _) => {}
            }
        }
        for (name, sink) in &parsed.sinks {
            let Some(sink) = sink else { continue };
            let value_avro = sink.format == Format::Avro;
            let key_avro = sink.key_format == KeyFormat::Avro;
            for (avro, field, schema_field, schema, applies) in [
                (
                    value_avro,
                    "format",
                    "schema",
                    &sink.schema,
                    "`format: avro`",
                ),
                (
                    key_avro,
                    "key_format",
                    "key_schema",
                    &sink.key_schema,
                    "`key_format: avro`",
                ),
            ] {
                if avro {
                    avro_uses.push(at("sinks", name, field));
                }
                match (schema, avro) {
                    (Some(file), true) => files.push((at("sinks", name, schema_field), file)),
                    (None, true) => self.error_at(
                        &at("sinks", name, field),
                        format!(
                            "an Avro sink needs `{schema_field}`: the `.avsc` file it writes with, such as `schemas/{}.avsc`",
                            sink.topic
                        ),
                    ),
                    (Some(_), false) => stray.push((at("sinks", name, schema_field), applies)),
                    (None, false) => {}
                }
            }
            if sink.register.is_some() && !value_avro && !key_avro {
                stray.push((
                    at("sinks", name, "register"),
                    "`format: avro` or `key_format: avro`",
                ));
            }
        }
        for (path, applies) in stray {
            let field = path.last().cloned().unwrap_or_default();
            self.error_at(&path, format!("`{field}` applies only with {applies}"));
        }
        if let (Some(first), Some(None)) = (avro_uses.first(), &parsed.schema_registry) {
            self.error_at(
                first,
                "Avro needs a schema registry: add a top-level `schema_registry` with its `url`"
                    .into(),
            );
        }
        for (path, file) in files {
            if let Err(message) = crate::formats::avro::read_schema_file(file) {
                self.error_at(&path, message);
            }
        }
    }
}

fn is_seq(root: &YamlNode, segments: &[String]) -> bool {
    let mut node = root;
    for s in segments {
        match node.get(s) {
            Some(n) => node = n,
            None => return false,
        }
    }
    matches!(node.kind, Kind::Seq(_))
}

fn push_target(topology: &mut Topology, upstream: Upstream, target: Target) {
    match upstream {
        Upstream::Source(s) => topology.sources[s].targets.push(target),
        Upstream::Node { node, output } => topology.nodes[node].targets[output].push(target),
    }
}

fn legal_topic_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Kahn's algorithm over node inputs; on a cycle, returns one cycle.
fn topological_order(inputs: &[Vec<Upstream>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = inputs.len();
    let upstream_nodes = |i: usize| {
        inputs[i].iter().filter_map(|u| match u {
            Upstream::Node { node, .. } => Some(*node),
            Upstream::Source(_) => None,
        })
    };
    let mut pending: Vec<usize> = (0..n).map(|i| upstream_nodes(i).count()).collect();
    let mut downstream: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        for u in upstream_nodes(i) {
            downstream[u].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &d in &downstream[i] {
            pending[d] -= 1;
            if pending[d] == 0 {
                ready.push(d);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk upstream from any node left over until a node repeats.
    let start = (0..n).find(|&i| pending[i] > 0).unwrap_or(0);
    let mut path = vec![start];
    let mut current = start;
    loop {
        let Some(next) = upstream_nodes(current).find(|&u| pending[u] > 0) else {
            return Err(path);
        };
        if let Some(at) = path.iter().position(|&p| p == next) {
            let mut cycle = path[at..].to_vec();
            cycle.reverse();
            return Err(cycle);
        }
        path.push(next);
        current = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
name: app
kafka:
  bootstrap_servers: localhost:9092
sources:
  events:
    topic: events
nodes:
  fold_account:
    type: fold
    input: events
    fields:
      metrics: { rule: key_union, from: /metrics }
    quiet_for: 5s
sinks:
  folded:
    topic: folded
    input: fold_account
";

    fn load(text: &str) -> Result<Topology, Vec<String>> {
        load_str("t.yaml", text, &|_| None)
            .map_err(|ds| ds.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_valid_topology_compiles_with_its_internal_topics() {
        let topology = load(MINIMAL).unwrap();
        assert_eq!(topology.dead_letter_topic, "app-dlq");
        let internal: Vec<String> = topology
            .internal_topics()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(
            internal,
            vec![
                "app-fold_account-open-changelog",
                "app-fold_account-timers-changelog",
                "app-dlq"
            ]
        );
        assert_eq!(
            topology.sources[0].targets,
            vec![Target::Node { node: 0, input: 0 }]
        );
        assert_eq!(topology.nodes[0].targets[0], vec![Target::Sink(0)]);
    }

    #[test]
    fn every_error_in_a_file_is_reported_at_once() {
        let text = MINIMAL
            .replace("quiet_for: 5s", "quiet_for: soon")
            .replace("input: fold_account", "input: fold_acount")
            .replace("topic: events", "topic: events\n    formt: json");
        let errors = load(&text).unwrap_err();
        assert_eq!(
            errors,
            vec![
                "t.yaml:7:5: sources.events.formt: unknown field `formt`, did you mean `format`?",
                "t.yaml:14:16: nodes.fold_account.quiet_for: expected a duration like \"5m\" or \"250ms\", found \"soon\"",
                "t.yaml:18:12: sinks.folded.input: unknown input `fold_acount`, did you mean `fold_account`?",
            ]
        );
    }

    #[test]
    fn absurd_retry_settings_are_errors_not_panics() {
        for retry in [
            "{ jitter: .nan }",
            "{ multiplier: .nan }",
            "{ multiplier: .inf, max_attempts: 9 }",
            "{ jitter: .inf, max_attempts: 3 }",
            "{ initial_backoff: 100000000y, max_backoff: 100000000y, max_attempts: 4294967295 }",
        ] {
            let text = MINIMAL.replace(
                "    topic: events\n",
                &format!("    topic: events\n    retry: {retry}\n"),
            );
            let errors = load(&text).unwrap_err();
            assert!(
                !errors.is_empty() && errors.iter().all(|e| e.contains(": sources.events.retry")),
                "{retry}: {errors:?}"
            );
        }
    }

    #[test]
    fn a_count_too_large_for_its_field_says_how_large_it_may_be() {
        let text = MINIMAL.replace(
            "    topic: events\n",
            "    topic: events\n    retry: { max_attempts: 9223372036854775807 }\n",
        );
        assert_eq!(
            load(&text).unwrap_err(),
            vec![
                "t.yaml:7:28: sources.events.retry.max_attempts: must be at most 4294967295, found integer `9223372036854775807`"
            ]
        );
    }

    #[test]
    fn an_input_that_is_neither_a_name_nor_a_list_says_what_input_takes() {
        let text = MINIMAL.replace("    input: fold_account\n", "    input: { a: 1 }\n");
        assert_eq!(
            load(&text).unwrap_err(),
            vec![
                "t.yaml:16:5: sinks.folded: `input` takes a source or node name, or a list of them"
            ]
        );
    }

    #[test]
    fn cycles_are_named() {
        let text = "\
name: app
kafka: { bootstrap_servers: x }
sources: { s: { topic: t } }
nodes:
  a: { type: fold, input: [s, b], fields: { n: { rule: count } }, max_events: 2 }
  b: { type: fold, input: a, fields: { n: { rule: count } }, max_events: 2 }
sinks: { out: { topic: o, input: b } }
";
        let errors = load(text).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("cycle: "), "{}", errors[0]);
    }
}
