//! The folders of `src/` are layers: each imports only the ones below it
//! (`scripts/import-graph.sh` lists the edges; test code counts too).

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
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

/// The modules of `src/runtime` import each other without a cycle: each
/// one can be read (and tested) with only those it names below it.
#[test]
fn the_modules_of_the_runtime_import_each_other_without_a_cycle() {
    let runtime = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let edges = module_edges(&runtime);
    assert!(
        edges.len() >= 20 && edges.contains(&("engine".into(), "commit".into())),
        "too few edges to be the real graph: {edges:?}"
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!("src/runtime has an import cycle: {}", cycle.join(" -> "));
    }
}

/// The scan itself: a two-module cycle, written the ways the runtime's
/// files name each other (`super::x`, `super::{x, y}` over lines, a
/// deeper file's `super::super::x`, `crate::runtime::x`), is found; a
/// comment is not an import.
#[test]
fn the_module_scan_finds_every_way_of_naming_a_module() {
    let dir = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "a.rs",
        "use super::{\n    RuntimeError,\n    b::Thing,\n};\n",
    );
    write("b/mod.rs", "mod inner;\n");
    write("b/inner.rs", "fn f() { super::super::c::g() }\n");
    write(
        "c.rs",
        "// crate::runtime::a is only mentioned\nuse crate::runtime::b;\n",
    );
    write("d.rs", "/// [`super::a`]\nfn f() {}\n");
    let edges = module_edges(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let mut sorted: Vec<String> = edges.iter().map(|(a, b)| format!("{a}->{b}")).collect();
    sorted.sort();
    assert_eq!(sorted, ["a->b", "b->c", "c->b"]);
    assert_eq!(find_cycle(&edges).map(|c| c.len()), Some(3));
}

/// `from -> to` for every module `from` of `dir` (a file or a folder) that
/// names module `to` of `dir`, comments left out.
fn module_edges(dir: &Path) -> BTreeSet<(String, String)> {
    let mut modules: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().replace(".rs", ""))
        .filter(|m| m != "mod")
        .collect();
    modules.sort();
    let mut edges = BTreeSet::new();
    for module in &modules {
        for (file, depth) in files_of(dir, module) {
            let text: String = std::fs::read_to_string(&file)
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            for name in named_modules(&text, depth) {
                if &name != module && modules.contains(&name) {
                    edges.insert((module.clone(), name));
                }
            }
        }
    }
    edges
}

/// The files of `module` under `dir`, each with how many `super::` lead
/// from it to `dir`'s module.
fn files_of(dir: &Path, module: &str) -> Vec<(PathBuf, usize)> {
    let file = dir.join(format!("{module}.rs"));
    let folder = dir.join(module);
    let mut files = Vec::new();
    if file.is_file() {
        files.push((file, 1));
    }
    let mut stack = vec![(folder, 1)];
    while let Some((folder, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push((path, depth + 1));
            } else if path.file_name().is_some_and(|n| n == "mod.rs") {
                files.push((path, depth));
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push((path, depth + 1));
            }
        }
    }
    files
}

/// The first segment of every path in `text` that starts at the parent
/// module: `super::` exactly `depth` times, or `crate::runtime::`; in a
/// group (`{a, b::c}`) each item's.
fn named_modules(text: &str, depth: usize) -> Vec<String> {
    let mut names = Vec::new();
    let supers = "super::".repeat(depth);
    for prefix in [supers.as_str(), "crate::runtime::"] {
        for (at, _) in text.match_indices(prefix) {
            // `super::super::x` from a shallower file is not this prefix.
            if prefix.starts_with("super") && text[..at].ends_with("super::") {
                continue;
            }
            let rest = &text[at + prefix.len()..];
            if prefix.starts_with("super") && rest.starts_with("super::") {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                names.extend(group.split(',').map(|item| first_segment(item.trim())));
            } else {
                names.push(first_segment(rest));
            }
        }
    }
    names
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// A cycle among `edges`, its first module repeated at its end.
fn find_cycle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeSet<(String, String)>,
        path: &mut Vec<String>,
        done: &mut HashSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for (_, to) in edges.iter().filter(|(from, _)| from == node) {
            if let Some(cycle) = visit(to, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = HashSet::new();
    edges
        .iter()
        .find_map(|(from, _)| visit(from, edges, &mut Vec::new(), &mut done))
}
