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

/// The house rule on length, over every `.rs` file of `src/`:
///
/// - A file has at most 800 lines unless its `//!` header says why, on a
///   line that starts with `//! Longer than 800 lines because` and goes on
///   to give the reason (a long table, generated code).
/// - A function (an `fn` item: free, a method, or nested in another) has
///   at most 100 lines, from the line of its `fn` to that of its closing
///   brace.
///
/// Test code is exempt from the function rule (not from the file rule):
/// whatever sits under `#[cfg(test)]` (a `mod tests { … }` block, or a
/// file declared by `#[cfg(test)] mod name;`), `#[test]` functions, files
/// named `tests.rs` and files under a `tests/` folder of `src/`.
#[test]
fn no_file_of_src_is_over_800_lines_nor_any_function_over_100() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = rust_files(&root.join("src"));
    assert!(files.len() > 50, "too few files to be src/: {files:?}");
    let texts: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let test_modules: Vec<PathBuf> = files
        .iter()
        .zip(&texts)
        .flat_map(|(file, text)| test_modules_declared(file, text))
        .collect();
    let mut offenders = Vec::new();
    for (file, text) in files.iter().zip(&texts) {
        let shown = file.strip_prefix(root).unwrap().display();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES && !header_says_why_longer(text) {
            offenders.push(format!(
                "{shown}: {lines} lines, and its header has no `{LONGER_BECAUSE} …`"
            ));
        }
        if is_test_file(file) || test_modules.iter().any(|m| file.starts_with(m)) {
            continue;
        }
        for function in functions(text) {
            if function.lines > MAX_FUNCTION_LINES {
                offenders.push(format!(
                    "{shown}:{}: fn {} is {} lines",
                    function.line, function.name, function.lines
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "{} over the length limits ({MAX_FILE_LINES} lines a file, {MAX_FUNCTION_LINES} a function):\n{}",
        offenders.len(),
        offenders.join("\n")
    );
}

/// The length scan itself: a 101-line function is found and a 100-line
/// one is not, though both hold braces that a naive count gets wrong
/// either way (closers in strings, raw strings, comments and char
/// literals would end a body early; openers would run it on), beside
/// lifetimes, labels, a raw identifier and a fn pointer type; a long
/// method is found at its line; a declaration without a body, a `#[test]`
/// function and a `#[cfg(test)]` module's helper are not measured.
#[test]
fn the_length_scan_sees_through_strings_chars_and_comments() {
    const TRICKY: &[&str] = &[
        r#"    let close = "}\"}";"#,
        r##"    let raw = r#"}"{"#;"##,
        r#"    let plain_raw = r"}}" ;"#,
        r##"    let bytes = br#"}"#;"##,
        r#"    let open = '{';"#,
        r#"    let quotes = ['\'', '{'];"#,
        r#"    let unicode = '\u{7d}';"#,
        r#"    let slashes = ['\\','}'];"#,
        r#"    let byte = b'}';"#,
        r#"    let quote_char = '"'; let s = "{";"#,
        r#"    // } a line comment"#,
        r#"    /* } /* nested { */ } */"#,
        r#"    'outer: loop { break 'outer; }"#,
        r#"    let r#type = x.len();"#,
        r#"    fn nested(_: fn(u8) -> u8) -> char { '}' }"#,
        r#"    let multi = ""#,
        r#"    }"#,
        r#"    ";"#,
    ];
    let function = |name: &str, lines: usize| {
        let mut text = format!("fn {name}<'a>(x: &'a str) -> &'a str {{\n");
        for line in 0..lines - 2 {
            text += TRICKY.get(line).unwrap_or(&"    let _ = x;");
            text += "\n";
        }
        text + "}\n"
    };
    let mut planted = String::from("//! A planted file.\n");
    planted += &function("too_long", 101);
    planted += &function("just_right", 100);
    planted += "struct S;\nimpl S {\n";
    let method_line = planted.lines().count() + 1;
    planted += &function("long_method", 101);
    planted += "}\ntrait T {\n    fn declared(&self);\n}\n#[test]\n";
    planted += &function("a_test_may_be_long", 101);
    planted += "#[cfg(test)]\nmod tests {\n";
    planted += &function("helper_may_be_long", 150);
    planted += "}\n";

    let measured: Vec<(String, usize)> = functions(&planted)
        .into_iter()
        .filter(|f| f.name != "nested")
        .map(|f| (f.name, f.lines))
        .collect();
    assert_eq!(
        measured,
        [
            ("too_long".to_string(), 101),
            ("just_right".to_string(), 100),
            ("long_method".to_string(), 101),
        ]
    );
    let long: Vec<(usize, String)> = functions(&planted)
        .into_iter()
        .filter(|f| f.lines > MAX_FUNCTION_LINES)
        .map(|f| (f.line, f.name))
        .collect();
    assert_eq!(
        long,
        [
            (2, "too_long".to_string()),
            (method_line, "long_method".to_string())
        ]
    );

    assert!(header_says_why_longer(
        "//! A table.\n//!\n//! Longer than 800 lines because it is one table.\n"
    ));
    assert!(!header_says_why_longer(
        "//! Longer than 800 lines because\n"
    ));
    assert!(!header_says_why_longer(
        "//! A module.\nuse x;\n//! Longer than 800 lines because late.\n"
    ));
}

const MAX_FILE_LINES: usize = 800;
const MAX_FUNCTION_LINES: usize = 100;
/// How a file's header starts the line that says why it is longer.
const LONGER_BECAUSE: &str = "//! Longer than 800 lines because";

/// A function of a source text: its name, the line of its `fn` and how
/// many lines it spans.
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Whether `text` opens with `//!` lines of which one starts with
/// [`LONGER_BECAUSE`] and gives a reason.
fn header_says_why_longer(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
        .filter_map(|l| l.strip_prefix(LONGER_BECAUSE))
        .any(|why| !why.trim().is_empty())
}

/// Whether `file` is test code by its name: `tests.rs`, or under a
/// `tests/` folder of `src/`.
fn is_test_file(file: &Path) -> bool {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let inside = file.strip_prefix(&src).unwrap_or(file);
    file.file_name().is_some_and(|n| n == "tests.rs")
        || inside
            .parent()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

/// The file and the folder of every module that `file` declares under
/// `#[cfg(test)]` without a body (`#[cfg(test)] mod name;`).
fn test_modules_declared(file: &Path, text: &str) -> Vec<PathBuf> {
    let code = code_only(text);
    let stem = file.file_stem().unwrap();
    let dir = file.parent().unwrap();
    let dir = if ["mod", "lib", "main"].iter().any(|s| stem == *s) {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let mut modules = Vec::new();
    for region in test_regions(&code) {
        let item: String = code[region].iter().collect();
        let item = item[item.find(']').unwrap() + 1..].trim();
        let name = item
            .strip_prefix("mod ")
            .or_else(|| item.split_once(" mod ").map(|(_, rest)| rest))
            .and_then(|rest| rest.trim().strip_suffix(';'));
        if let Some(name) = name {
            modules.push(dir.join(format!("{}.rs", name.trim())));
            modules.push(dir.join(name.trim()));
        }
    }
    modules
}

/// Every function of `text` outside test code, in the order they open.
fn functions(text: &str) -> Vec<Function> {
    let code = code_only(text);
    let mut line_of = Vec::with_capacity(code.len());
    let mut line = 1;
    for c in &code {
        line_of.push(line);
        if *c == '\n' {
            line += 1;
        }
    }
    let tests = test_regions(&code);
    let mut found = Vec::new();
    for at in keyword_positions(&code, "fn") {
        if tests.iter().any(|region| region.contains(&at)) {
            continue;
        }
        let name: String = code[at + 2..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| is_ident(**c))
            .collect();
        // A fn pointer type (`fn(u8) -> u8`) has no name.
        if name.is_empty() {
            continue;
        }
        if let Some(open) = body_start(&code, at) {
            let close = matching_close(&code, open);
            found.push(Function {
                name,
                line: line_of[at],
                lines: line_of[close] - line_of[at] + 1,
            });
        }
    }
    found
}

/// The stretch of `code` of each item under a test attribute
/// (`#[cfg(test)]`, `#[test]`, `#[tokio::test]`), from the attribute to
/// the end of the item.
fn test_regions(code: &[char]) -> Vec<std::ops::Range<usize>> {
    let mut regions = Vec::new();
    for at in 0..code.len().saturating_sub(1) {
        if code[at] != '#' || code[at + 1] != '[' {
            continue;
        }
        let close = matching_close(code, at + 1);
        let attribute: String = code[at + 2..close]
            .iter()
            .filter(|c| !c.is_whitespace())
            .collect();
        let path = attribute.split('(').next().unwrap_or_default();
        if attribute == "cfg(test)" || path == "test" || path.ends_with("::test") {
            regions.push(at..item_end(code, close + 1));
        }
    }
    regions
}

/// One past the end of the item that starts at `from` (after its
/// attributes): its `;` or `,`, or the brace that closes its body.
fn item_end(code: &[char], from: usize) -> usize {
    let mut depth = 0usize;
    for at in from..code.len() {
        match code[at] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ';' | ',' if depth == 0 => return at + 1,
            '{' if depth == 0 => return matching_close(code, at) + 1,
            '}' if depth == 0 => return at,
            _ => {}
        }
    }
    code.len()
}

/// The `{` that opens the body of the function whose `fn` is at `at`, or
/// none for a declaration that ends in `;`.
fn body_start(code: &[char], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code.iter().enumerate().skip(at) {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '{' if depth == 0 => return Some(i),
            ';' | '}' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The bracket that closes the one (`{`, `[` or `(`) at `open`, or the
/// last character if it never closes.
fn matching_close(code: &[char], open: usize) -> usize {
    let (opener, closer) = match code[open] {
        '{' => ('{', '}'),
        '[' => ('[', ']'),
        _ => ('(', ')'),
    };
    let mut depth = 0usize;
    for (at, c) in code.iter().enumerate().skip(open) {
        if *c == opener {
            depth += 1;
        } else if *c == closer {
            depth -= 1;
            if depth == 0 {
                return at;
            }
        }
    }
    code.len() - 1
}

/// Where `word` stands in `code` as a whole word.
fn keyword_positions(code: &[char], word: &str) -> Vec<usize> {
    let word: Vec<char> = word.chars().collect();
    (0..code.len().saturating_sub(word.len() - 1))
        .filter(|&at| code[at..].starts_with(&word))
        .filter(|&at| at == 0 || !is_ident(code[at - 1]))
        .filter(|&at| code.get(at + word.len()).is_none_or(|c| !is_ident(*c)))
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with every comment, string and char literal blanked to spaces,
/// its line breaks kept (so lines still count): a brace left is code.
fn code_only(text: &str) -> Vec<char> {
    let chars: Vec<char> = text.chars().collect();
    let mut code = chars.clone();
    let mut at = 0;
    while at < chars.len() {
        match literal_end(&chars, at) {
            Some(end) => {
                for c in &mut code[at..end] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    code
}

/// One past the end of the comment, string or char literal that starts
/// at `at`, if one does; a lifetime or a label (`'a`) is none.
fn literal_end(chars: &[char], at: usize) -> Option<usize> {
    let c = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let ends = chars.len();
    match (c(at), c(at + 1)) {
        ('/', '/') => Some((at..ends).find(|&i| chars[i] == '\n').unwrap_or(ends)),
        ('/', '*') => Some(block_comment_end(chars, at)),
        ('"', _) => Some(string_end(chars, at + 1)),
        // An escape: `'\''`, `'\n'`, `'\u{7d}'`.
        ('\'', '\\') => Some(
            (at + 3..ends)
                .find(|&i| chars[i] == '\'')
                .map_or(ends, |i| i + 1),
        ),
        ('\'', _) if c(at + 2) == '\'' => Some(at + 3),
        ('r', '#' | '"') if raw_string_may_start(chars, at) => raw_string_end(chars, at),
        _ => None,
    }
}

/// Whether an `r` at `at` begins a word (alone or after `b` or `c`), as
/// the `r` of a raw string does.
fn raw_string_may_start(chars: &[char], at: usize) -> bool {
    let before = |back: usize| at.checked_sub(back).map(|i| chars[i]);
    match before(1) {
        None => true,
        Some('b' | 'c') => before(2).is_none_or(|c| !is_ident(c)),
        Some(c) => !is_ident(c),
    }
}

/// One past the end of the raw string whose `r` is at `at` (`r"…"`,
/// `r#"…"#`), or none if the `r` starts a raw identifier (`r#type`).
fn raw_string_end(chars: &[char], at: usize) -> Option<usize> {
    let hashes = chars[at + 1..].iter().take_while(|c| **c == '#').count();
    let quote = at + 1 + hashes;
    if chars.get(quote) != Some(&'"') {
        return None;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    Some(
        (quote + 1..chars.len())
            .find(|&i| chars[i..].starts_with(&closing))
            .map_or(chars.len(), |i| i + closing.len()),
    )
}

/// One past the `"` that closes a string whose text starts at `from`.
fn string_end(chars: &[char], from: usize) -> usize {
    let mut at = from;
    while at < chars.len() {
        match chars[at] {
            '\\' => at += 2,
            '"' => return at + 1,
            _ => at += 1,
        }
    }
    chars.len()
}

/// One past the `*/` that closes the block comment at `at`, nested ones
/// counted.
fn block_comment_end(chars: &[char], at: usize) -> usize {
    let mut depth = 0;
    let mut i = at;
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    chars.len()
}
