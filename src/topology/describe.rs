//! `streamfold describe`: the topology as text, Mermaid or Graphviz DOT,
//! with the internal topics the runtime will create (a changelog per store,
//! a repartition topic per `key_by` node, the dead-letter topic). The text
//! form also shows the Kafka settings, credentials as `***`.

use std::fmt::Write;

use super::{Topology, Upstream};

/// Output format of `describe`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DescribeFormat {
    #[default]
    Text,
    Mermaid,
    Dot,
}

pub fn describe(topology: &Topology, format: DescribeFormat) -> String {
    match format {
        DescribeFormat::Text => text(topology),
        DescribeFormat::Mermaid => mermaid(topology),
        DescribeFormat::Dot => dot(topology),
    }
}

fn upstream_name(topology: &Topology, upstream: Upstream) -> String {
    match upstream {
        Upstream::Source(s) => topology.sources[s].name.clone(),
        Upstream::Node { node, output: 0 } => topology.nodes[node].name.clone(),
        Upstream::Node { node, output } => {
            let n = &topology.nodes[node];
            format!("{}.{}", n.name, n.output_names[output - 1])
        }
    }
}

fn guarantee(topology: &Topology) -> &'static str {
    match topology.processing.guarantee {
        super::model::Guarantee::ExactlyOnce => "exactly_once",
        super::model::Guarantee::AtLeastOnce => "at_least_once",
    }
}

fn text(t: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "topology {} ({}, commit every {})",
        t.name,
        guarantee(t),
        t.processing.commit_interval()
    );
    if let Some(description) = &t.description {
        for line in description.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    kafka(&mut out, t);
    let _ = writeln!(out, "\nsources");
    for s in &t.sources {
        let _ = writeln!(
            out,
            "  {:<22} topic {} ({} values, {} keys)",
            s.name,
            s.config.topic,
            yaml_name(&s.config.format),
            yaml_name(&s.config.key_format)
        );
    }
    if !t.nodes.is_empty() {
        let _ = writeln!(out, "\nnodes");
    }
    for &i in &t.order {
        let n = &t.nodes[i];
        let inputs: Vec<String> = n.inputs.iter().map(|u| upstream_name(t, *u)).collect();
        let _ = writeln!(
            out,
            "  {:<22} {} <- {}",
            n.name,
            n.kind.type_name(),
            inputs.join(", ")
        );
        if let Some(key_by) = &n.common.key_by {
            let topic = n.repartition_topic.as_deref().unwrap_or_default();
            let _ = writeln!(out, "  {:<22} key_by {key_by} (through {topic})", "");
        }
        if !n.output_names.is_empty() {
            let _ = writeln!(out, "  {:<22} outputs: {}", "", n.output_names.join(", "));
        }
        for store in &n.stores {
            let _ = writeln!(out, "  {:<22} store {}", "", store.name);
        }
    }
    let _ = writeln!(out, "\nsinks");
    for s in &t.sinks {
        let inputs: Vec<String> = s.inputs.iter().map(|u| upstream_name(t, *u)).collect();
        let _ = writeln!(
            out,
            "  {:<22} topic {} <- {}",
            s.name,
            s.config.topic,
            inputs.join(", ")
        );
    }
    queries(&mut out, t);
    let _ = writeln!(out, "\ninternal topics");
    for store in t.stores() {
        let _ = writeln!(
            out,
            "  {:<48} changelog of {} (compacted)",
            store.changelog_topic, store.name
        );
    }
    for n in &t.nodes {
        if let Some(topic) = &n.repartition_topic {
            let _ = writeln!(out, "  {topic:<48} repartition for {}", n.name);
        }
    }
    let _ = writeln!(out, "  {:<48} dead letters", t.dead_letter_topic);
    if !queryable(t).is_empty() {
        let _ = writeln!(
            out,
            "  {:<48} query endpoints (compacted; when queries are served)",
            format!("{}-query-endpoints", t.name)
        );
    }
    out
}

/// `(store, node)` of every store the query API serves.
fn queryable(t: &Topology) -> Vec<(String, &str)> {
    t.nodes
        .iter()
        .filter_map(|n| {
            let store = n.kind.spec().queryable_store(&n.input_info)?;
            Some((n.store_name(store), n.name.as_str()))
        })
        .collect()
}

/// Where interactive queries are served and which stores answer.
fn queries(out: &mut String, t: &Topology) {
    let stores = queryable(t);
    if stores.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nqueries");
    let served = match (&t.queries.addr, &t.queries.advertised_addr) {
        (Some(addr), Some(advertised)) => {
            format!("served on http://{addr} (advertised as {advertised})")
        }
        (Some(addr), None) => format!("served on http://{addr}"),
        (None, _) => "off (set queries.addr or run --query-addr HOST:PORT)".to_string(),
    };
    let _ = writeln!(out, "  {served}");
    let _ = writeln!(out, "  {:<22} GET /v1/stores", "list");
    for (store, _) in &stores {
        let _ = writeln!(
            out,
            "  {:<22} GET /v1/stores/{store}/keys/<key>, /v1/stores/{store}?prefix=",
            store
        );
    }
}

/// The connection settings, credentials masked.
fn kafka(out: &mut String, t: &Topology) {
    let kafka = &t.kafka;
    let _ = writeln!(out, "\nkafka");
    let _ = writeln!(
        out,
        "  {:<22} {}",
        "bootstrap servers", kafka.bootstrap_servers
    );
    if let Some(security) = &kafka.security {
        let _ = writeln!(out, "  {:<22} {}", "security", security.summary());
    }
    for (label, properties) in [
        ("properties", &kafka.properties),
        ("consumer properties", &kafka.consumer),
        ("producer properties", &kafka.producer),
    ] {
        if properties.is_empty() {
            continue;
        }
        let shown: Vec<String> = properties
            .iter()
            .map(|(k, v)| format!("{k}={}", crate::secrets::shown(k, v)))
            .collect();
        let _ = writeln!(out, "  {label:<22} {}", shown.join(", "));
    }
    if let Some(registry) = &t.schema_registry {
        let _ = writeln!(out, "  {:<22} {}", "schema registry", registry.summary());
    }
}

fn mermaid(t: &Topology) -> String {
    let mut out = String::from("flowchart LR\n");
    for (i, s) in t.sources.iter().enumerate() {
        let _ = writeln!(out, "  s{i}[/\"{}<br/>topic {}\"/]", s.name, s.config.topic);
    }
    for (i, n) in t.nodes.iter().enumerate() {
        let _ = writeln!(out, "  n{i}[\"{}<br/>{}\"]", n.name, n.kind.type_name());
        if let Some(topic) = &n.repartition_topic {
            let _ = writeln!(out, "  r{i}{{{{\"{topic}\"}}}}");
        }
        for (j, store) in n.stores.iter().enumerate() {
            let _ = writeln!(
                out,
                "  c{i}_{j}[(\"{}<br/>{}\")]",
                store.name, store.changelog_topic
            );
        }
    }
    for (i, s) in t.sinks.iter().enumerate() {
        let _ = writeln!(
            out,
            "  k{i}[\\\"{}<br/>topic {}\"\\]",
            s.name, s.config.topic
        );
    }
    let _ = writeln!(out, "  dlq>\"dead letters<br/>{}\"]", t.dead_letter_topic);
    let node_ref = |u: Upstream| match u {
        Upstream::Source(s) => (format!("s{s}"), None),
        Upstream::Node { node, output: 0 } => (format!("n{node}"), None),
        Upstream::Node { node, output } => (
            format!("n{node}"),
            Some(t.nodes[node].output_names[output - 1].clone()),
        ),
    };
    let edge = |out: &mut String, from: &str, label: Option<String>, to: &str| {
        let _ = match label {
            Some(label) => writeln!(out, "  {from} -- {label} --> {to}"),
            None => writeln!(out, "  {from} --> {to}"),
        };
    };
    for (i, n) in t.nodes.iter().enumerate() {
        for u in &n.inputs {
            let (from, label) = node_ref(*u);
            if n.repartition_topic.is_some() {
                edge(&mut out, &from, label, &format!("r{i}"));
            } else {
                edge(&mut out, &from, label, &format!("n{i}"));
            }
        }
        if n.repartition_topic.is_some() {
            let _ = writeln!(out, "  r{i} --> n{i}");
        }
        for j in 0..n.stores.len() {
            let _ = writeln!(out, "  n{i} -.- c{i}_{j}");
        }
    }
    for (i, s) in t.sinks.iter().enumerate() {
        for u in &s.inputs {
            let (from, label) = node_ref(*u);
            edge(&mut out, &from, label, &format!("k{i}"));
        }
    }
    for i in 0..t.sources.len() {
        let _ = writeln!(out, "  s{i} -.-> dlq");
    }
    for i in 0..t.nodes.len() {
        let _ = writeln!(out, "  n{i} -.-> dlq");
    }
    out
}

fn dot(t: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", t.name);
    let _ = writeln!(out, "  rankdir=LR;\n  node [fontname=\"Helvetica\"];");
    for (i, s) in t.sources.iter().enumerate() {
        let _ = writeln!(
            out,
            "  s{i} [shape=parallelogram, label=\"{}\\ntopic {}\"];",
            s.name, s.config.topic
        );
    }
    for (i, n) in t.nodes.iter().enumerate() {
        let _ = writeln!(
            out,
            "  n{i} [shape=box, style=rounded, label=\"{}\\n{}\"];",
            n.name,
            n.kind.type_name()
        );
        if let Some(topic) = &n.repartition_topic {
            let _ = writeln!(out, "  r{i} [shape=hexagon, label=\"{topic}\"];");
        }
        for (j, store) in n.stores.iter().enumerate() {
            let _ = writeln!(
                out,
                "  c{i}_{j} [shape=cylinder, label=\"{}\\n{}\"];",
                store.name, store.changelog_topic
            );
        }
    }
    for (i, s) in t.sinks.iter().enumerate() {
        let _ = writeln!(
            out,
            "  k{i} [shape=parallelogram, label=\"{}\\ntopic {}\"];",
            s.name, s.config.topic
        );
    }
    let _ = writeln!(
        out,
        "  dlq [shape=note, label=\"dead letters\\n{}\"];",
        t.dead_letter_topic
    );
    let from = |u: Upstream| match u {
        Upstream::Source(s) => (format!("s{s}"), String::new()),
        Upstream::Node { node, output: 0 } => (format!("n{node}"), String::new()),
        Upstream::Node { node, output } => (
            format!("n{node}"),
            format!(" [label=\"{}\"]", t.nodes[node].output_names[output - 1]),
        ),
    };
    for (i, n) in t.nodes.iter().enumerate() {
        for u in &n.inputs {
            let (src, label) = from(*u);
            let dst = if n.repartition_topic.is_some() {
                format!("r{i}")
            } else {
                format!("n{i}")
            };
            let _ = writeln!(out, "  {src} -> {dst}{label};");
        }
        if n.repartition_topic.is_some() {
            let _ = writeln!(out, "  r{i} -> n{i};");
        }
        for j in 0..n.stores.len() {
            let _ = writeln!(out, "  n{i} -> c{i}_{j} [style=dashed, arrowhead=none];");
        }
        let _ = writeln!(out, "  n{i} -> dlq [style=dotted];");
    }
    for (i, s) in t.sinks.iter().enumerate() {
        for u in &s.inputs {
            let (src, label) = from(*u);
            let _ = writeln!(out, "  {src} -> k{i}{label};");
        }
    }
    for i in 0..t.sources.len() {
        let _ = writeln!(out, "  s{i} -> dlq [style=dotted];");
    }
    out.push_str("}\n");
    out
}

/// How an enum option is written in a topology file (`json`, `string`).
fn yaml_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
