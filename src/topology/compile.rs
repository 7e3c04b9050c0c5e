//! Phase two of loading: the compiler. Parsed sections become a
//! [`Topology`] in named passes, each reporting every problem it finds;
//! the checks of one section live beside its config type ([`super::model`],
//! [`super::security`]), the passes here are those that span sections:
//! the graph's in this file, the other sections' in [`sections`].

use std::collections::{HashMap, HashSet};

use super::model::{self, KafkaConfig, KeyFormat, SourceKind};
use super::{
    InternalKind, Loader, Node, Parsed, Sink, Source, StoreDef, Target, Topology, Upstream,
};
use crate::config::de::{self, unknown_name};
use crate::config::types::InputRef;
use crate::config::yaml::{Kind, Node as YamlNode};
use crate::operators::registry::{Issue, NodeInfo, NodeInput};

mod sections;

impl Loader {
    /// Checks a parsed file and builds its topology, in named passes that
    /// each report every problem they find. Passes that need a sound graph
    /// run only when the ones before found none.
    pub(super) fn compile(&mut self, parsed: Parsed) -> Option<Topology> {
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
        let node_names: Vec<&str> = parsed.nodes.iter().map(|(n, _, _)| n.as_str()).collect();
        for &i in order {
            let (name, Some(common), Some(kind)) = &parsed.nodes[i] else {
                continue;
            };
            let spec = kind.spec();
            let inputs = graph.input_info(&parsed.sources, &node_names, i);
            for (n, input) in inputs.iter().enumerate() {
                if input.table && !spec.reads_tables() {
                    let mut at = vec!["nodes".to_string(), name.clone(), "input".to_string()];
                    if is_seq(&self.root, &at) {
                        at.push(n.to_string());
                    }
                    self.error_at(
                        &at,
                        format!(
                            "`{}` is a table (`kind: table`): `{}` nodes read streams; join it with a `join` node, or send it to a sink",
                            input.name,
                            kind.type_name()
                        ),
                    );
                }
            }
            let mut input_keyed = true;
            for (upstream, input) in graph.node_inputs[i].iter().zip(&inputs) {
                // A table without a key is reported at its source.
                if input.table {
                    continue;
                }
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
                inputs: &inputs,
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
            state: Some(state),
            queries: Some(queries),
            ..
        } = parsed
        else {
            return None;
        };

        if queries
            .request_timeout
            .is_some_and(crate::config::types::HumanDuration::under_a_millisecond)
        {
            self.error_at(
                &["queries".into(), "request_timeout".into()],
                "must be at least 1ms".into(),
            );
        }
        let node_names: Vec<&str> = nodes.iter().map(|(name, _, _)| name.as_str()).collect();
        let input_info: Vec<Vec<NodeInput>> = (0..nodes.len())
            .map(|i| graph.input_info(&sources, &node_names, i))
            .collect();
        let mut topology = Topology {
            name: app.clone(),
            description,
            kafka,
            processing,
            sources: Vec::new(),
            nodes: Vec::new(),
            sinks: Vec::new(),
            dead_letter_topic: dead_letter.map_or_else(|| format!("{app}-dlq"), |d| d.topic),
            schema_registry,
            state,
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
        let nodes = nodes.into_iter().zip(graph.node_inputs).zip(input_info);
        for (((name, common, kind), inputs), input_info) in nodes {
            let (common, kind) = (common?, kind?);
            let stores: Vec<StoreDef> = kind
                .stores(&input_info, common.key_by.is_some())
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
                input_info,
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

impl Graph {
    /// Node `node`'s inputs as its operator may know them, given every
    /// source and the name of every node.
    fn input_info(
        &self,
        sources: &[(String, Option<model::SourceConfig>)],
        node_names: &[&str],
        node: usize,
    ) -> Vec<NodeInput> {
        self.node_inputs[node]
            .iter()
            .map(|upstream| match *upstream {
                Upstream::Source(s) => NodeInput {
                    name: sources[s].0.clone(),
                    table: sources[s].1.as_ref().is_some_and(|c| c.kind.is_table()),
                    global: sources[s]
                        .1
                        .as_ref()
                        .is_some_and(|c| c.kind == SourceKind::GlobalTable),
                },
                Upstream::Node { node, output } => {
                    let name = node_names[node];
                    let output = output
                        .checked_sub(1)
                        .and_then(|o| self.output_names[node].as_ref()?.get(o));
                    NodeInput {
                        name: output.map_or_else(|| name.to_string(), |o| format!("{name}.{o}")),
                        table: false,
                        global: false,
                    }
                }
            })
            .collect()
    }
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
        let global = |s: usize| {
            parsed.sources[s]
                .1
                .as_ref()
                .is_some_and(|c| c.kind == SourceKind::GlobalTable)
        };
        for ((name, _), inputs) in parsed.sinks.iter().zip(&graph.sink_inputs) {
            for upstream in inputs {
                if let &Upstream::Source(s) = upstream
                    && global(s)
                {
                    self.error_at(
                        &["sinks".into(), name.clone(), "input".into()],
                        format!(
                            "`{}` is a global table: every instance reads it whole, for joins; a sink reads it as `kind: table`",
                            parsed.sources[s].0
                        ),
                    );
                }
            }
        }
        if !parsed.sources.is_empty() && (0..parsed.sources.len()).all(global) {
            self.error_at(
                &["sources".into()],
                "every source is a global table: the group needs a stream (or a `kind: table`) to process, which joins them".into(),
            );
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
