//! The folders of `src/` are layers: each imports only the ones below it
//! (`scripts/import-graph.sh` lists the edges; test code counts too).

use std::path::Path;
use std::process::Command;

/// From the bottom up, as the README's layout section describes them.
const LAYERS: &[&str] = &[
    "config",
    "secrets",
    "record",
    "state",
    "telemetry",
    "operators",
    "topology",
    "formats",
    "task",
    "testkit",
    "runtime",
    "exit_code",
];

#[test]
fn every_folder_of_src_imports_only_layers_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("sh")
        .arg("scripts/import-graph.sh")
        .current_dir(root)
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the import graph has a cycle:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every module of src/ is placed, so a new folder must be given a layer.
    let mut modules: Vec<String> = std::fs::read_dir(root.join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().replace(".rs", ""))
        .filter(|m| !["lib", "main", "bin"].contains(&m.as_str()))
        .collect();
    modules.sort();
    let mut layers: Vec<String> = LAYERS.iter().map(|l| l.to_string()).collect();
    layers.sort();
    assert_eq!(modules, layers, "src/ has folders without a layer here");

    let layer = |m: &str| LAYERS.iter().position(|l| *l == m).unwrap();
    let edges: Vec<(&str, &str)> = stdout
        .lines()
        .take_while(|l| !l.starts_with("---"))
        .filter_map(|l| l.split_once(" -> "))
        .collect();
    assert!(
        edges.len() >= LAYERS.len(),
        "too few edges to be the real graph: {edges:?}"
    );
    let upward: Vec<String> = edges
        .iter()
        .filter(|(from, to)| layer(to) >= layer(from))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(upward.is_empty(), "upward imports: {upward:?}");
}
