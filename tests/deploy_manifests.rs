//! The Kubernetes manifests in `deploy/` parse and agree with the binary:
//! every flag and `STREAMFOLD_*` variable they give `streamfold run`
//! exists (as `run --help` lists it), the ports the probes, the service
//! and the Prometheus annotations name are the ones the addresses bind,
//! the instance id is the pod's name, the state directory is the
//! persistent volume, and kustomize lists every manifest. No broker.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use streamfold::config::yaml::{Kind, Node, parse};

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn load(path: &Path) -> Node {
    let text = std::fs::read_to_string(path).unwrap();
    // Kubernetes' `$(VAR)` is not interpolation syntax here; a `${VAR}`
    // would be, and is kept as written.
    let (node, errors) = parse(&text, &|name| Some(format!("${{{name}}}")))
        .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    assert!(errors.is_empty(), "{}: {errors:?}", path.display());
    node
}

fn at<'a>(node: &'a Node, path: &[&str]) -> &'a Node {
    path.iter().fold(node, |node, key| {
        node.get(key)
            .unwrap_or_else(|| panic!("no `{}` in {node:?}", path.join(".")))
    })
}

fn text(node: &Node) -> String {
    node.scalar_text()
        .unwrap_or_else(|| panic!("not a scalar: {node:?}"))
        .into_owned()
}

fn seq(node: &Node) -> &[Node] {
    match &node.kind {
        Kind::Seq(items) => items,
        _ => panic!("not a list: {node:?}"),
    }
}

/// The manifest of `kind` among the deploy files.
fn manifest(kind: &str) -> Node {
    let found: Vec<Node> = manifest_files()
        .iter()
        .map(|f| load(f))
        .filter(|m| m.get("kind").map(text).as_deref() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} in deploy/");
    found.into_iter().next().unwrap()
}

fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    files
}

/// The flags and environment variables `streamfold run` accepts.
fn run_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_streamfold"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in `{addr}`"))
}

/// The container's environment: name → literal value, `fieldRef:<path>`
/// or `secretKeyRef:<secret>/<key>`.
fn env_of(container: &Node) -> Vec<(String, String)> {
    seq(at(container, &["env"]))
        .iter()
        .map(|var| {
            let name = text(at(var, &["name"]));
            let secret = var
                .get("valueFrom")
                .and_then(|from| from.get("secretKeyRef"));
            let value = match (var.get("value"), secret) {
                (Some(value), _) => text(value),
                (None, Some(secret)) => format!(
                    "secretKeyRef:{}/{}",
                    text(at(secret, &["name"])),
                    text(at(secret, &["key"]))
                ),
                (None, None) => format!(
                    "fieldRef:{}",
                    text(at(var, &["valueFrom", "fieldRef", "fieldPath"]))
                ),
            };
            (name, value)
        })
        .collect()
}

#[test]
fn kustomize_lists_every_manifest() {
    let kustomization = load(&deploy().join("kustomization.yaml"));
    let listed: BTreeSet<String> = seq(at(&kustomization, &["resources"]))
        .iter()
        .map(text)
        .collect();
    let present: BTreeSet<String> = manifest_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, present);
}

#[test]
fn the_statefulset_gives_run_only_flags_and_variables_it_has() {
    let help = run_help();
    let statefulset = manifest("StatefulSet");
    let containers = seq(at(
        &statefulset,
        &["spec", "template", "spec", "containers"],
    ));
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let args: Vec<String> = seq(at(container, &["args"])).iter().map(text).collect();
    assert_eq!(args[0], "run", "{args:?}");
    for arg in args.iter().filter(|a| a.starts_with('-')) {
        let flag = arg.split('=').next().unwrap();
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}=")),
            "`streamfold run` has no flag {flag}:\n{help}"
        );
    }
    let env = env_of(container);
    for (name, _) in env.iter().filter(|(n, _)| n.starts_with("STREAMFOLD_")) {
        // `[env: NAME]` without `=` for a variable whose value help hides.
        assert!(
            help.contains(&format!("[env: {name}=")) || help.contains(&format!("[env: {name}]")),
            "`streamfold run` reads no variable {name}:\n{help}"
        );
    }
    let value = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("the container sets {name}"))
    };
    assert_eq!(value("STREAMFOLD_INSTANCE_ID"), "fieldRef:metadata.name");
    // Static members: a pod back on its volume keeps its tasks
    // (docs/kubernetes.md), not a new member's rebalance.
    assert_eq!(value("STREAMFOLD_STATIC_MEMBERSHIP"), "true");
    // Sized, so the scheduler places it where it fits.
    let requests = at(container, &["resources", "requests"]);
    for resource in ["cpu", "memory"] {
        assert!(
            !text(at(requests, &[resource])).is_empty(),
            "no {resource} request"
        );
    }
    assert_eq!(
        value("STREAMFOLD_QUERY_TOKEN"),
        "secretKeyRef:streamfold-query-token/token"
    );

    // The topology the args name is the mounted ConfigMap's.
    let mounts = seq(at(container, &["volumeMounts"]));
    let mount_of = |volume: &str| {
        mounts
            .iter()
            .find(|m| text(at(m, &["name"])) == volume)
            .map(|m| text(at(m, &["mountPath"])))
            .unwrap_or_else(|| panic!("no mount of {volume}"))
    };
    assert!(
        args[1].starts_with(&format!("{}/", mount_of("topology"))),
        "{args:?}"
    );
    // The state directory is the persistent volume.
    let claims = seq(at(&statefulset, &["spec", "volumeClaimTemplates"]));
    assert!(
        claims
            .iter()
            .any(|c| text(at(c, &["metadata", "name"])) == "state")
    );
    assert_eq!(value("STREAMFOLD_STATE_DIR"), mount_of("state"));

    // Ports: what the addresses bind is what the probes, the annotations
    // and the service use.
    let ports = seq(at(container, &["ports"]));
    let port_named = |name: &str| {
        ports
            .iter()
            .find(|p| text(at(p, &["name"])) == name)
            .map(|p| text(at(p, &["containerPort"])).parse::<u16>().unwrap())
            .unwrap_or_else(|| panic!("no port named {name}"))
    };
    let metrics = port_of(&value("STREAMFOLD_METRICS_ADDR"));
    let query = port_of(&value("STREAMFOLD_QUERY_ADDR"));
    assert_eq!(port_named("metrics"), metrics);
    assert_eq!(port_named("query"), query);
    assert_eq!(port_of(&value("STREAMFOLD_QUERY_ADVERTISED_ADDR")), query);
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = at(container, &[probe, "httpGet"]);
        assert_eq!(text(at(get, &["path"])), path);
        assert_eq!(text(at(get, &["port"])), "metrics");
    }
    let annotations = at(
        &statefulset,
        &["spec", "template", "metadata", "annotations"],
    );
    assert_eq!(
        text(at(annotations, &["prometheus.io/port"])),
        metrics.to_string()
    );
    assert_eq!(text(at(annotations, &["prometheus.io/path"])), "/metrics");

    // The advertised address is the pod's name under the headless service.
    let service = manifest("Service");
    let service_name = text(at(&service, &["metadata", "name"]));
    assert_eq!(
        text(at(&statefulset, &["spec", "serviceName"])),
        service_name
    );
    assert_eq!(text(at(&service, &["spec", "clusterIP"])), "None");
    assert!(
        value("STREAMFOLD_QUERY_ADVERTISED_ADDR")
            .starts_with(&format!("$(POD_NAME).{service_name}.")),
        "{}",
        value("STREAMFOLD_QUERY_ADVERTISED_ADDR")
    );
    for port in seq(at(&service, &["spec", "ports"])) {
        let target = text(at(port, &["targetPort"]));
        assert_eq!(
            text(at(port, &["port"])).parse::<u16>().unwrap(),
            port_named(&target),
            "service port {target}"
        );
    }
}

#[test]
fn the_service_and_the_budget_select_the_statefulsets_pods() {
    let statefulset = manifest("StatefulSet");
    let labels = at(&statefulset, &["spec", "template", "metadata", "labels"]);
    let label = |key: &str| labels.get(key).map(text);
    let service = manifest("Service");
    for (key, value) in at(&service, &["spec", "selector"]).as_map().unwrap() {
        assert_eq!(label(&text(key)), Some(text(value)));
    }
    let budget = manifest("PodDisruptionBudget");
    for (key, value) in at(&budget, &["spec", "selector", "matchLabels"])
        .as_map()
        .unwrap()
    {
        assert_eq!(label(&text(key)), Some(text(value)));
    }
    assert_eq!(text(at(&budget, &["spec", "maxUnavailable"])), "1");
}
