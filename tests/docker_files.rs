//! docker/ cannot run here (no Docker engine), so its files are checked by
//! what does run: the compose file parses (with the project's own YAML
//! parser) and refers only to files, services and ports that exist; the
//! Dockerfile copies what exists and ends in a runtime image; Prometheus
//! scrapes the port streamfold serves metrics on; and every metric the
//! Grafana dashboard queries is one streamfold exports.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;
use streamfold::config::yaml::{self, Kind, Node};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docker() -> PathBuf {
    root().join("docker")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A YAML file through the project's parser; `${VAR:-default}` takes the
/// default, as with an empty environment.
fn parse_yaml(path: &Path) -> Node {
    let (node, errors) = yaml::parse(&read(path), &|_| None)
        .unwrap_or_else(|e| panic!("{}:{}: {}", path.display(), e.pos.line, e.message));
    assert!(errors.is_empty(), "{}: {errors:?}", path.display());
    node
}

fn text(node: &Node) -> String {
    node.scalar_text()
        .unwrap_or_else(|| panic!("expected a scalar, found {}", node.describe()))
        .into_owned()
}

fn entries(node: &Node) -> Vec<(String, &Node)> {
    node.as_map()
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| (text(k), v))
        .collect()
}

fn list(node: Option<&Node>) -> Vec<&Node> {
    match node.map(|n| &n.kind) {
        Some(Kind::Seq(items)) => items.iter().collect(),
        _ => Vec::new(),
    }
}

/// `KEY: value` entries, or `KEY=value` items.
fn environment(service: &Node) -> HashMap<String, String> {
    match service.get("environment").map(|n| &n.kind) {
        Some(Kind::Map(_)) => entries(service.get("environment").unwrap())
            .into_iter()
            .map(|(k, v)| (k, text(v)))
            .collect(),
        Some(Kind::Seq(items)) => items
            .iter()
            .filter_map(|i| {
                let t = text(i);
                t.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect(),
        _ => HashMap::new(),
    }
}

struct Compose {
    services: Vec<(String, Node)>,
    volumes: BTreeSet<String>,
}

fn compose() -> Compose {
    let root = parse_yaml(&docker().join("compose.yaml"));
    let services = entries(root.get("services").expect("services"))
        .into_iter()
        .map(|(name, node)| (name, node.clone()))
        .collect();
    let volumes = root
        .get("volumes")
        .map(|v| entries(v).into_iter().map(|(k, _)| k).collect())
        .unwrap_or_default();
    Compose { services, volumes }
}

impl Compose {
    fn service(&self, name: &str) -> &Node {
        &self
            .services
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no service `{name}` in docker/compose.yaml"))
            .1
    }
}

#[test]
fn compose_runs_kafka_in_kraft_mode_with_the_registry_streamfold_prometheus_and_grafana() {
    let compose = compose();
    let image = |name: &str| text(compose.service(name).get("image").unwrap());
    assert!(
        image("kafka").starts_with("apache/kafka:"),
        "{}",
        image("kafka")
    );
    let kafka = environment(compose.service("kafka"));
    assert!(
        kafka["KAFKA_PROCESS_ROLES"].contains("controller"),
        "KRaft: the node is its own controller"
    );
    assert!(
        !compose
            .services
            .iter()
            .any(|(n, _)| n.contains("zookeeper"))
    );
    assert_eq!(
        kafka["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"], "1",
        "transactions on one node"
    );
    assert!(image("schema-registry").starts_with("confluentinc/cp-schema-registry:"));
    assert!(image("prometheus").starts_with("prom/prometheus:"));
    assert!(image("grafana").starts_with("grafana/grafana:"));
    for (name, service) in &compose.services {
        let image = service.get("image").map(text).unwrap_or_default();
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "service `{name}`: pin the image version ({image})"
        );
    }
    // The advertised host listener is what STREAMFOLD_TEST_BOOTSTRAP points at.
    assert!(kafka["KAFKA_ADVERTISED_LISTENERS"].contains("127.0.0.1:9092"));
    let ports: Vec<String> = list(compose.service("kafka").get("ports"))
        .into_iter()
        .map(text)
        .collect();
    assert!(ports.contains(&"9092:9092".to_string()), "{ports:?}");
}

#[test]
fn compose_references_only_services_files_and_volumes_that_exist() {
    let compose = compose();
    let names: BTreeSet<&str> = compose.services.iter().map(|(n, _)| n.as_str()).collect();
    let mut host_ports = BTreeSet::new();
    for (name, service) in &compose.services {
        if let Some(depends) = service.get("depends_on") {
            let targets: Vec<String> = match &depends.kind {
                Kind::Seq(items) => items.iter().map(text).collect(),
                _ => entries(depends).into_iter().map(|(k, _)| k).collect(),
            };
            for target in targets {
                assert!(
                    names.contains(target.as_str()),
                    "`{name}` depends on unknown `{target}`"
                );
            }
        }
        for port in list(service.get("ports")) {
            let port = text(port);
            let (host, container) = port
                .split_once(':')
                .unwrap_or_else(|| panic!("`{name}`: port `{port}` is not host:container"));
            let host: u16 = host
                .parse()
                .unwrap_or_else(|_| panic!("`{name}`: host port `{host}`"));
            let _: u16 = container
                .parse()
                .unwrap_or_else(|_| panic!("`{name}`: container port `{container}`"));
            assert!(host_ports.insert(host), "host port {host} published twice");
        }
        for volume in list(service.get("volumes")) {
            let volume = text(volume);
            let source = volume.split(':').next().unwrap();
            if source.starts_with('.') || source.starts_with('/') {
                let path = docker().join(source);
                assert!(
                    path.exists(),
                    "`{name}` mounts {source}, which does not exist ({})",
                    path.display()
                );
            } else {
                assert!(
                    compose.volumes.contains(source),
                    "`{name}` uses undeclared volume `{source}`"
                );
            }
        }
        if let Some(build) = service.get("build") {
            let context = docker().join(text(build.get("context").unwrap()));
            let dockerfile = context.join(text(build.get("dockerfile").unwrap()));
            assert!(
                dockerfile.is_file(),
                "`{name}` builds {}, which does not exist",
                dockerfile.display()
            );
        }
    }
}

#[test]
fn the_topologies_compose_runs_pass_check_with_the_compose_environment() {
    let compose = compose();
    let mut checked = 0;
    for (name, service) in &compose.services {
        let command: Vec<String> = list(service.get("command")).into_iter().map(text).collect();
        if command.first().map(String::as_str) != Some("run") {
            continue;
        }
        let topology = &command[1];
        let env = environment(service);
        let path = root().join(topology);
        let text = read(&path);
        // Schema files are relative to the working directory: the image's
        // /app holds topologies/ and schemas/ as the repository root does.
        std::env::set_current_dir(root()).unwrap();
        let loaded = streamfold::topology::load_str(topology, &text, &|var| env.get(var).cloned());
        if let Err(diagnostics) = loaded {
            let lines: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
            panic!("service `{name}` runs {topology}:\n{}", lines.join("\n"));
        }
        let at = command
            .iter()
            .position(|a| a == "--metrics-addr")
            .expect("--metrics-addr");
        let port = command[at + 1].rsplit(':').next().unwrap().to_string();
        let prometheus = read(&docker().join("prometheus/prometheus.yml"));
        assert!(
            prometheus.contains(&format!("\"{name}:{port}\"")),
            "Prometheus does not scrape {name}:{port}"
        );
        checked += 1;
    }
    assert!(checked >= 1, "no service runs a topology");
    // The source topics the topologies read are created by the `topics` job.
    let job = list(compose.service("topics").get("command"))
        .into_iter()
        .map(text)
        .collect::<Vec<_>>()
        .join(" ");
    for topic in ["post-metric-updated", "post-metric-updated-avro"] {
        assert!(job.contains(topic), "`topics` does not create {topic}");
    }
}

#[test]
fn the_dockerfile_is_multi_stage_and_copies_what_exists() {
    let dockerfile = read(&docker().join("Dockerfile"));
    let stages: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "multi-stage: {stages:?}");
    assert!(stages[0].contains("rust:"), "{}", stages[0]);
    let last = stages.last().unwrap();
    assert!(last.contains("-slim"), "the runtime image is small: {last}");
    assert!(
        !last.contains("rust"),
        "no toolchain in the runtime image: {last}"
    );
    assert!(
        dockerfile
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .all(|l| !l.contains("cmake")),
        "librdkafka and RocksDB build without cmake"
    );
    for line in dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for source in &parts[1..parts.len() - 1] {
            assert!(
                root().join(source).exists(),
                "Dockerfile copies `{source}`, which does not exist"
            );
        }
    }
    let image_cmd = dockerfile.lines().find(|l| l.starts_with("CMD ")).unwrap();
    let cmd: Vec<String> = serde_json::from_str(image_cmd.trim_start_matches("CMD ")).unwrap();
    assert!(
        root().join(&cmd[1]).is_file(),
        "the default command runs {}",
        cmd[1]
    );
}

#[test]
fn grafana_provisioning_points_at_the_dashboard_and_prometheus() {
    let datasources =
        parse_yaml(&docker().join("grafana/provisioning/datasources/prometheus.yaml"));
    let source = list(datasources.get("datasources"))[0];
    assert_eq!(text(source.get("uid").unwrap()), "prometheus");
    assert_eq!(text(source.get("url").unwrap()), "http://prometheus:9090");
    let providers = parse_yaml(&docker().join("grafana/provisioning/dashboards/streamfold.yaml"));
    let provider = list(providers.get("providers"))[0];
    let path = text(provider.get("options").unwrap().get("path").unwrap());
    let compose = compose();
    let mounts: Vec<String> = list(compose.service("grafana").get("volumes"))
        .into_iter()
        .map(text)
        .collect();
    assert!(
        mounts
            .iter()
            .any(|m| m.starts_with("./grafana/dashboards:") && m.contains(&path)),
        "the dashboards folder is mounted where the provider looks ({path}): {mounts:?}"
    );
}

/// Metric names streamfold exports: the string constants of
/// src/telemetry/mod.rs, plus `_bucket`, `_sum` and `_count` for the ones
/// recorded as histograms.
fn exported_metrics() -> BTreeSet<String> {
    // A constant too long for one line has its value on the next.
    let telemetry = read(&root().join("src/telemetry/mod.rs")).replace("&str =\n", "&str =");
    let mut constants = HashMap::new();
    for line in telemetry.lines() {
        let line = line.trim();
        let Some(rest) = line
            .strip_prefix("pub const ")
            .or_else(|| line.strip_prefix("pub(crate) const "))
        else {
            continue;
        };
        let Some((name, value)) = rest.split_once(": &str =") else {
            continue;
        };
        let Some(value) = value.trim_start().strip_prefix('"') else {
            continue;
        };
        let value = value.trim_end_matches("\";");
        constants.insert(name.to_string(), value.to_string());
    }
    assert!(
        constants.len() >= 10,
        "metric constants not found in src/telemetry/mod.rs"
    );
    let mut names: BTreeSet<String> = constants.values().cloned().collect();
    let mut sources = Vec::new();
    let mut dirs = vec![root().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                sources.push(read(&path));
            }
        }
    }
    for source in &sources {
        for (_, after) in source
            .match_indices("histogram!(")
            .map(|(i, _)| source.split_at(i + "histogram!(".len()))
        {
            let constant: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let constant = constant.rsplit("::").next().unwrap_or_default();
            if let Some(name) = constants.get(constant) {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    names
}

/// The `streamfold_*` identifiers of a PromQL expression (label values in
/// quotes skipped).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = expr.chars().peekable();
    let mut word = String::new();
    let mut quote = None;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            if c == '\\' {
                chars.next();
            } else if c == q {
                quote = None;
            }
            continue;
        }
        if c == '"' || c == '\'' || c == '`' {
            quote = Some(c);
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.starts_with("streamfold_") {
            names.push(word.clone());
        }
        word.clear();
    }
    if word.starts_with("streamfold_") {
        names.push(word);
    }
    names
}

fn panels(value: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in value["panels"].as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(panels(panel));
    }
    out
}

#[test]
fn every_metric_the_dashboard_queries_is_one_streamfold_exports() {
    let dashboard: Value =
        serde_json::from_str(&read(&docker().join("grafana/dashboards/streamfold.json"))).unwrap();
    let exported = exported_metrics();
    assert!(exported.contains("streamfold_commit_duration_seconds_bucket"));
    let mut unknown = Vec::new();
    let mut queried = BTreeSet::new();
    let mut exprs = Vec::new();
    for panel in panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel `{}`: target without expr", panel["title"]));
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "panel `{}` queries no streamfold metric: {expr}",
                panel["title"]
            );
            for name in names {
                if !exported.contains(&name) {
                    unknown.push(format!(
                        "panel `{}`: {name}",
                        panel["title"].as_str().unwrap_or_default()
                    ));
                }
                queried.insert(name);
            }
            assert_eq!(
                target["datasource"]["uid"], "prometheus",
                "panel `{}`",
                panel["title"]
            );
            exprs.push(expr.to_string());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for name in metric_names(variable["definition"].as_str().unwrap_or_default()) {
            if !exported.contains(&name) {
                unknown.push(format!("variable `{}`: {name}", variable["name"]));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "not exported by streamfold:\n{}",
        unknown.join("\n")
    );
    // What the dashboard is for: throughput per node, folding
    // ratio, open folds, commit latency, lag, dead letters, restore.
    for required in [
        "streamfold_node_records_in_total",
        "streamfold_fold_folded_events_total",
        "streamfold_fold_eligible_events_total",
        "streamfold_fold_open_folds",
        "streamfold_commit_duration_seconds_bucket",
        "streamfold_consumer_lag_records",
        "streamfold_node_dead_letters_total",
        "streamfold_restore_records_remaining",
    ] {
        assert!(
            queried.contains(required),
            "the dashboard does not show {required}"
        );
    }
    assert!(
        exprs.iter().any(|e| e.contains("by (node)")),
        "throughput is broken down per node"
    );
    // Every panel follows the dashboard's topology and instance choices.
    let unfiltered: Vec<&String> = exprs
        .iter()
        .filter(|e| {
            metric_names(e).len()
                != e.matches(r#"topology=~"$topology",instance=~"$instance""#)
                    .count()
        })
        .collect();
    assert!(
        unfiltered.is_empty(),
        "queries that do not filter each metric by topology and instance: {unfiltered:#?}"
    );
}

#[test]
fn metric_names_are_read_out_of_promql() {
    assert_eq!(
        metric_names(
            r#"sum by (node) (rate(streamfold_a_total{topology=~"streamfold_not_a_metric"}[1m])) / streamfold_b"#
        ),
        vec!["streamfold_a_total", "streamfold_b"]
    );
}

/// What `cargo build` reads, relative to the repository root: the
/// manifest and lock file; every target (library, binaries, tests,
/// benches, build script) of the packages that live in the repository,
/// the workspace's own and the path dependencies and `[patch]` entries
/// (which `cargo metadata` lists with no registry source); and each of
/// those other packages whole, as cargo packages them.
fn build_inputs() -> BTreeSet<PathBuf> {
    // The image builds for Linux: the metadata of this host's platform
    // needs no crate that is not downloaded already.
    let rustc = std::process::Command::new(std::env::var("RUSTC").unwrap_or("rustc".into()))
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names the host");
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let workspace = PathBuf::from(metadata["workspace_root"].as_str().unwrap());
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let relative = |path: &Path| -> PathBuf {
        path.strip_prefix(&workspace)
            .unwrap_or_else(|_| panic!("{} is outside the build context", path.display()))
            .to_path_buf()
    };
    let mut inputs = BTreeSet::from([PathBuf::from("Cargo.toml"), PathBuf::from("Cargo.lock")]);
    for package in metadata["packages"].as_array().unwrap() {
        if !package["source"].is_null() {
            continue;
        }
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
        if members.contains(package["id"].as_str().unwrap()) {
            for target in package["targets"].as_array().unwrap() {
                inputs.insert(relative(Path::new(target["src_path"].as_str().unwrap())));
            }
        } else {
            inputs.insert(relative(manifest.parent().unwrap()));
        }
        for dependency in package["dependencies"].as_array().unwrap() {
            if let Some(path) = dependency["path"].as_str() {
                inputs.insert(relative(Path::new(path)));
            }
        }
    }
    // A `[patch]` entry no package uses is not in the metadata, and cargo
    // still reads it.
    let mut in_patch = false;
    for line in read(&root().join("Cargo.toml")).lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_patch = line.starts_with("[patch.");
        } else if in_patch && let Some((_, rest)) = line.split_once("path = \"") {
            let path = rest.split('"').next().unwrap();
            inputs.insert(PathBuf::from(path));
        }
    }
    inputs
}

/// The build stage's `COPY <source>... <destination>` instructions, each
/// source with where it lands relative to the stage's working directory.
fn build_stage_copies(dockerfile: &str) -> Vec<(PathBuf, PathBuf)> {
    let mut copies = Vec::new();
    let mut workdir = PathBuf::from("/");
    let mut stages = 0;
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().copied() {
            Some("FROM") => {
                stages += 1;
                if stages > 1 {
                    break;
                }
            }
            Some("WORKDIR") => workdir = workdir.join(words[1]),
            Some("COPY") => {
                let args: Vec<&str> = words[1..]
                    .iter()
                    .copied()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                if words.iter().any(|w| w.starts_with("--from=")) || args.len() < 2 {
                    continue;
                }
                let (destination, sources) = args.split_last().unwrap();
                let destination = normalise(&workdir.join(destination));
                for source in sources {
                    let source = PathBuf::from(source.trim_end_matches('/'));
                    // `COPY file ./` keeps the file's name; `COPY dir ./dir`
                    // copies the directory's contents there.
                    let keeps_name = root().join(&source).is_dir()
                        || destination
                            .file_name()
                            .is_some_and(|n| Some(n) == source.file_name());
                    let landed = if keeps_name {
                        destination.clone()
                    } else {
                        destination.join(source.file_name().unwrap())
                    };
                    let landed = landed
                        .strip_prefix(&workdir)
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|_| PathBuf::from("/").join(landed));
                    copies.push((source, landed));
                }
            }
            _ => {}
        }
    }
    copies
}

fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether the build stage copies `input` to the same place relative to
/// its working directory as it has in the repository (where cargo looks).
fn copied(copies: &[(PathBuf, PathBuf)], input: &Path) -> bool {
    copies.iter().any(|(source, landed)| {
        input
            .strip_prefix(source)
            .is_ok_and(|rest| landed.join(rest) == input)
    })
}

/// A `.dockerignore` as Docker reads it: patterns in order, `!` re-includes,
/// a pattern that matches a directory excludes what is under it.
struct DockerIgnore {
    patterns: Vec<(bool, Vec<String>)>,
}

impl DockerIgnore {
    fn parse(text: &str) -> DockerIgnore {
        let patterns = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (negated, pattern) = match l.strip_prefix('!') {
                    Some(rest) => (true, rest.trim()),
                    None => (false, l),
                };
                let parts = pattern
                    .trim_start_matches('/')
                    .split('/')
                    .filter(|p| !p.is_empty() && *p != ".")
                    .map(str::to_string)
                    .collect();
                (negated, parts)
            })
            .collect();
        DockerIgnore { patterns }
    }

    fn excludes(&self, path: &Path) -> bool {
        let parts: Vec<String> = path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let mut excluded = false;
        for (negated, pattern) in &self.patterns {
            let hit = (1..=parts.len()).any(|n| glob_parts(pattern, &parts[..n]));
            if hit {
                excluded = !negated;
            }
        }
        excluded
    }
}

/// Path components against pattern components, `**` spanning any number.
fn glob_parts(pattern: &[String], parts: &[String]) -> bool {
    match pattern.split_first() {
        None => parts.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=parts.len()).any(|skip| glob_parts(rest, &parts[skip..]))
        }
        Some((first, rest)) => match parts.split_first() {
            Some((part, others)) => {
                glob(first.as_bytes(), part.as_bytes()) && glob_parts(rest, others)
            }
            None => false,
        },
    }
}

/// One path component against a pattern of `*` and `?`.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

/// The files under `path` (itself when it is a file).
fn files_under(path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_image_build_gets_every_file_cargo_reads() {
    let inputs = build_inputs();
    assert!(
        inputs.contains(Path::new("vendor/rdkafka-sys")),
        "the patched librdkafka crate is a build input: {inputs:?}"
    );
    assert!(inputs.contains(Path::new("src/main.rs")), "{inputs:?}");
    let dockerfile = read(&docker().join("Dockerfile"));
    let copies = build_stage_copies(&dockerfile);
    let missing: Vec<&PathBuf> = inputs.iter().filter(|i| !copied(&copies, i)).collect();
    assert!(
        missing.is_empty(),
        "docker/Dockerfile's build stage does not copy (to where cargo looks) {missing:?}; it copies {copies:?}"
    );
    // BuildKit reads `<Dockerfile>.dockerignore` beside the Dockerfile in
    // place of the context's own `.dockerignore`.
    let ignore = DockerIgnore::parse(&read(&docker().join("Dockerfile.dockerignore")));
    let mut left_out = Vec::new();
    for input in &inputs {
        for file in files_under(&root().join(input)) {
            let relative = file.strip_prefix(root()).unwrap().to_path_buf();
            if ignore.excludes(&relative) {
                left_out.push(relative);
            }
        }
    }
    assert!(
        left_out.is_empty(),
        "docker/Dockerfile.dockerignore leaves out of the build context {left_out:?}"
    );
}

#[test]
fn dockerignore_patterns_match_as_docker_matches_them() {
    let ignore = DockerIgnore::parse(
        "target\n/streamfold-state\n**/*.profraw\nvendor/*/tests\n!vendor/keep/tests\n",
    );
    assert!(ignore.excludes(Path::new("target/release/streamfold")));
    assert!(ignore.excludes(Path::new("streamfold-state")));
    assert!(ignore.excludes(Path::new("a/b/default.profraw")));
    assert!(ignore.excludes(Path::new("x.profraw")));
    assert!(ignore.excludes(Path::new("vendor/rdkafka-sys/tests/a.rs")));
    assert!(!ignore.excludes(Path::new("vendor/keep/tests/a.rs")));
    assert!(!ignore.excludes(Path::new("vendor/rdkafka-sys/src/lib.rs")));
    assert!(!ignore.excludes(Path::new("src/target.rs")));
}

#[test]
fn the_copy_check_catches_a_missing_directory() {
    let copies = build_stage_copies(
        "FROM rust AS build\nWORKDIR /src\nCOPY Cargo.toml Cargo.lock ./\nCOPY src ./src\nCOPY benches ./elsewhere\nFROM debian\nCOPY vendor ./vendor\n",
    );
    assert!(copied(&copies, Path::new("Cargo.lock")));
    assert!(copied(&copies, Path::new("src/main.rs")));
    assert!(
        !copied(&copies, Path::new("benches/e2e.rs")),
        "copied elsewhere"
    );
    assert!(
        !copied(&copies, Path::new("vendor/rdkafka-sys")),
        "only the runtime stage copies it"
    );
}

#[test]
fn the_image_healthcheck_asks_healthz_on_the_metrics_port_of_its_command() {
    let dockerfile = read(&docker().join("Dockerfile"));
    let check = dockerfile
        .split("HEALTHCHECK")
        .nth(1)
        .expect("the Dockerfile has a HEALTHCHECK")
        .replace("\\\n", " ");
    let check = check.lines().next().unwrap();
    let exec: Vec<String> = serde_json::from_str(&check[check.find("CMD").unwrap() + 3..])
        .expect("HEALTHCHECK CMD in exec form");
    let script = exec.last().unwrap();
    assert!(script.contains("/healthz"), "{script}");
    let image_cmd = dockerfile.lines().find(|l| l.starts_with("CMD ")).unwrap();
    let cmd: Vec<String> = serde_json::from_str(image_cmd.trim_start_matches("CMD ")).unwrap();
    let at = cmd.iter().position(|a| a == "--metrics-addr").unwrap();
    let port = cmd[at + 1].rsplit(':').next().unwrap();
    assert!(
        script.contains(&format!("/127.0.0.1/{port}")),
        "the health check asks port {port}: {script}"
    );
    assert!(dockerfile.contains(&format!("EXPOSE {port}")));
}
