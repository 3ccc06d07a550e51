//! The codebase keeps the shape docs/DESIGN.md §9 describes: small
//! single-purpose files, a layout table that lists every module, and
//! service modules whose dependencies form no cycle (so each can be read,
//! tested and replaced on its own). The privacy core's own boundary is `aggregator/dp/tests/boundary.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most lines of code per source file (tests not counted).
const MAX_LINES: usize = 600;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Lines of code: every line but those of items marked `#[cfg(test)]`,
/// wherever they sit (a test module, a test-only `impl` block in the
/// middle of a file); a `#[cfg(test)] mod tests;` declaration is one line
/// of test. `tests.rs` files are all test.
fn code_lines(p: &Path) -> usize {
    if p.file_name().is_some_and(|n| n == "tests.rs") {
        return 0;
    }
    let text = std::fs::read_to_string(p).unwrap();
    test_items(&text).iter().filter(|t| !**t).count()
}

/// Per line of `text`: whether it belongs to a `#[cfg(test)]` item (the
/// attribute, and the item to its closing brace or semicolon).
fn test_items(text: &str) -> Vec<bool> {
    let lines: Vec<&str> = text.lines().collect();
    let mut test = vec![false; lines.len()];
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            i += 1;
            continue;
        }
        test[i] = true;
        let (mut depth, mut opened) = (0i64, false);
        let mut j = i + 1;
        while j < lines.len() {
            test[j] = true;
            let l = lines[j];
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
            j += 1;
        }
        i = j + 1;
    }
    test
}

#[test]
fn test_only_code_is_not_counted_wherever_it_sits() {
    let text = "fn a() {}\n#[cfg(test)]\nimpl A {\n    fn t() {\n    }\n}\nfn b() {}\n#[cfg(test)]\nmod tests;\nfn c() {}\n";
    let counted: Vec<bool> = test_items(text).iter().map(|t| !t).collect();
    assert_eq!(
        counted,
        [true, false, false, false, false, false, true, false, false, true]
    );
}

/// A file's code without its test items ([`test_items`]) and without
/// comments (doc links are not dependencies).
fn code(p: &Path) -> String {
    if p.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(p).unwrap();
    let test = test_items(&text);
    text.lines()
        .zip(&test)
        .filter(|(_, t)| !**t)
        .map(|(l, _)| l)
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every crate's source files (not its tests).
fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [
        "aggregator/src",
        "aggregator/dp/src",
        "ingest/src",
        "proto/src",
    ] {
        rust_files(&root().join(dir), &mut files);
    }
    files
}

#[test]
fn no_source_file_is_over_the_limit() {
    let files = sources();
    assert!(files.len() > 20, "found the sources: {files:?}");
    let over: Vec<String> = files
        .iter()
        .map(|p| (p, code_lines(p)))
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(p, n)| format!("{} ({n} lines)", p.display()))
        .collect();
    assert!(over.is_empty(), "over {MAX_LINES} lines of code: {over:?}");
}

/// Most lines per function outside tests (signature to closing brace,
/// comments not counted).
const MAX_FN_LINES: usize = 80;

/// Functions allowed over [`MAX_FN_LINES`] (file, name, lines, why): none
/// today. One that must be long (a table that reads best whole) is listed
/// with its present length and the reason; it is held to that length, a
/// shrink must lower its cap, and one split under the limit must leave.
const LONG_FUNCTIONS: &[(&str, &str, usize, &str)] = &[];

/// `code` with the insides of string and char literals blanked (newlines
/// kept), so braces in them are not counted.
fn without_literals(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < c.len() {
        let raw = c[i] == 'r' && (c.get(i + 1) == Some(&'"') || c.get(i + 1) == Some(&'#'));
        if c[i] == '"' || (raw && (i == 0 || !c[i - 1].is_alphanumeric())) {
            // "…" with escapes, or r#"…"# with as many hashes.
            let hashes = if raw {
                c[i + 1..].iter().take_while(|x| **x == '#').count()
            } else {
                0
            };
            let open = i + usize::from(raw) + hashes;
            if c.get(open) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let mut j = open + 1;
            while j < c.len() {
                if !raw && c[j] == '\\' {
                    j += 2;
                    continue;
                }
                if c[j] == '"'
                    && c[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|x| **x == '#')
                        .count()
                        == hashes
                {
                    break;
                }
                j += 1;
            }
            let end = (j + 1 + hashes).min(c.len());
            out.extend(
                c[i..end]
                    .iter()
                    .map(|x| if *x == '\n' { '\n' } else { ' ' }),
            );
            i = end;
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('{', '\n', '\u{7b}'); a lifetime has no closing quote.
            let end = c[i + 2..]
                .iter()
                .position(|x| *x == '\'')
                .map_or(c.len(), |k| i + 3 + k);
            out.extend(std::iter::repeat_n(' ', end - i));
            i = end;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// (name, lines) of every function with a body in `code`, from its `fn`
/// line to the line closing its body.
fn functions(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<String> = without_literals(code).lines().map(String::from).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let qualifiers = ["pub", "const", "async", "unsafe", "extern", "default"];
        if !words[..at]
            .iter()
            .all(|w| qualifiers.iter().any(|q| w.starts_with(q)) || w.starts_with('"'))
        {
            continue;
        }
        let Some(name) = words.get(at + 1).map(|w| {
            w.split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .unwrap_or("")
                .to_string()
        }) else {
            continue;
        };
        let (mut depth, mut opened) = (0i64, false);
        'scan: for (j, l) in lines.iter().enumerate().skip(i) {
            for ch in l.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened => break 'scan,
                    _ => {}
                }
                if opened && depth == 0 {
                    out.push((name.clone(), j - i + 1));
                    break 'scan;
                }
            }
        }
    }
    out
}

#[test]
fn the_function_scan_counts_bodies_not_literals() {
    let text = "pub(crate) fn a(x: &'static str) -> char {\n    let s = \"}}{\";\n    let r = r#\"\"}\"#;\n    '}'\n}\nfn decl();\n    async fn b<'a>(\n        y: &'a str,\n    ) {\n        if true { '\\u{7b}'; }\n    }\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 5), ("b".to_string(), 5)]
    );
}

/// The scan measures a long function whole, so the guard below can fail.
#[test]
fn the_function_scan_sees_a_long_function() {
    let body: String = (0..MAX_FN_LINES)
        .map(|i| format!("    let x{i} = \"}}\";\n"))
        .collect();
    let text = format!("fn long() {{\n{body}}}\nfn short() {{}}\n");
    let found = functions(&text);
    assert_eq!(found[0], ("long".to_string(), MAX_FN_LINES + 2));
    assert!(found[0].1 > MAX_FN_LINES);
}

#[test]
fn no_function_is_over_the_limit() {
    let files = sources();
    let mut found = BTreeMap::new();
    for p in &files {
        let rel = p
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let rel = rel.trim_start_matches("./").to_string();
        for (name, n) in functions(&code(p)) {
            if n > MAX_FN_LINES {
                found.insert((rel.clone(), name), n);
            }
        }
    }
    let mut wrong = Vec::new();
    for ((file, name), n) in &found {
        match LONG_FUNCTIONS
            .iter()
            .find(|(f, m, _, _)| f == file && m == name)
        {
            Some((_, _, cap, _)) if n == cap => {}
            Some((_, _, cap, _)) if n < cap => wrong.push(format!(
                "{file}: {name} shrank to {n} lines: lower its cap ({cap}) in LONG_FUNCTIONS"
            )),
            Some((_, _, cap, _)) => {
                wrong.push(format!("{file}: {name} grew to {n} lines (held to {cap})"))
            }
            None => wrong.push(format!(
                "{file}: {name} is {n} lines (at most {MAX_FN_LINES})"
            )),
        }
    }
    for (file, name, _, why) in LONG_FUNCTIONS {
        assert!(
            why.len() > 20,
            "{file}: {name}: LONG_FUNCTIONS names why it is long"
        );
        if !found.contains_key(&(file.to_string(), name.to_string())) {
            wrong.push(format!(
                "{file}: {name} is no longer over {MAX_FN_LINES} lines: take it off LONG_FUNCTIONS"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The service module a source file belongs to (`runtime/pipeline/offsets.rs` →
/// `runtime`); `None` for the crate roots.
fn module_of(src: &Path, p: &Path) -> Option<String> {
    let rel = p.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let m = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (!["lib", "main", "build"].contains(&m.as_str())).then_some(m)
}

/// `crate::x` references in code, as module names.
fn uses(code: &str) -> BTreeSet<String> {
    names_after(code, "crate::")
}

/// The names `prefix` is followed by in code: `prefix`x and the items of
/// `prefix`{x, y::z} groups.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        if code[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
        {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name = item.trim().split("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    out.insert(name.to_string());
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
            .collect();
        // `super::super::x` leaves the folder.
        if !name.is_empty() && name != "super" {
            out.insert(name);
        }
    }
    out
}

fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// A crate's module graph: each top-level module of `dir` and the crate
/// modules its code (tests left out) names, other than itself and `skip`.
fn module_graph(dir: &str, skip: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let Some(m) = module_of(&src, p) else {
            continue;
        };
        let deps = graph.entry(m.clone()).or_default();
        for u in uses(&code(p)) {
            // A module's own files are one.
            if u != m && !skip.contains(&u.as_str()) {
                deps.insert(u);
            }
        }
    }
    graph
}

/// No import cycle among the modules of any crate in the workspace (the
/// service's, the privacy core's, ingest's; `proto` is generated code).
#[test]
fn modules_form_no_import_cycle_in_any_crate() {
    // The service names the privacy core as `crate::dp` (another crate).
    for (dir, skip, at_least) in [
        ("aggregator/src", &["dp"][..], 10),
        ("aggregator/dp/src", &[][..], 10),
        ("ingest/src", &[][..], 8),
    ] {
        let graph = module_graph(dir, skip);
        assert!(
            graph.len() >= at_least,
            "{dir}: found the modules: {graph:?}"
        );
        assert_eq!(cycle(&graph), None, "{dir}: an import cycle: {graph:#?}");
    }
}

/// Per folder of a crate: its files (and subfolders), each with the
/// siblings it names (`super::x`, `crate::folder::x`). `mod.rs` is the
/// folder itself, not a sibling.
fn file_graphs(dir: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    fn walk(
        src: &Path,
        folder: &Path,
        out: &mut BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    ) {
        let rel = folder
            .strip_prefix(src)
            .unwrap()
            .to_str()
            .unwrap()
            .replace('/', "::");
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        let name = |p: &Path| p.file_stem().unwrap().to_str().unwrap().to_string();
        let siblings: BTreeSet<String> = entries
            .iter()
            .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
            .map(|p| name(p))
            .filter(|n| n != "mod")
            .collect();
        for p in &entries {
            if p.is_dir() {
                walk(src, p, out);
            }
            let n = name(p);
            if !siblings.contains(&n) || rel.is_empty() {
                continue;
            }
            let mut files = Vec::new();
            if p.is_dir() {
                rust_files(p, &mut files);
            } else {
                files.push(p.clone());
            }
            let deps = graph.entry(n.clone()).or_default();
            for f in files {
                let code = code(&f);
                // Within a subfolder `super::` is the subfolder's own root,
                // but in that root (`mod.rs`) it is this folder.
                let root_of_sub = f.parent() == Some(p.as_path()) && name(&f) == "mod";
                let named = if f.parent() == Some(folder) || root_of_sub {
                    names_after(&code, "super::")
                } else if f.parent() == Some(p.as_path()) {
                    names_after(&code, "super::super::")
                } else {
                    BTreeSet::new()
                };
                let named = named
                    .into_iter()
                    .chain(names_after(&code, &format!("crate::{rel}::")));
                deps.extend(named.filter(|m| *m != n && siblings.contains(m)));
            }
        }
        if !rel.is_empty() {
            out.insert(rel, graph);
        }
    }
    let src = root().join(dir);
    let mut out = BTreeMap::new();
    walk(&src, &src, &mut out);
    out
}

/// No import cycle among the files of any folder either (a module-level
/// check cannot see two files of one module that need each other).
#[test]
fn files_of_a_folder_form_no_import_cycle() {
    let (mut folders, mut cycles) = (0, Vec::new());
    for dir in ["aggregator/src", "aggregator/dp/src", "ingest/src"] {
        for (folder, graph) in file_graphs(dir) {
            folders += 1;
            if let Some(c) = cycle(&graph) {
                cycles.push(format!("{dir}/{folder}: {}", c.join(" → ")));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles among files: {cycles:#?}");
    assert!(folders >= 10, "found the folders ({folders})");
    let pipeline = &file_graphs("aggregator/src")["runtime::pipeline"];
    assert!(
        pipeline["consume"].contains("offsets"),
        "the graph sees `super::` imports: {pipeline:#?}"
    );
}

/// Most files one type's inherent `impl` blocks may span (test code not
/// counted): a type is read in one place, or two.
const MAX_IMPL_FILES: usize = 2;

/// The type named by each inherent `impl` block at the top level of
/// `code` (`impl<'a> Foo<'a> {` → `Foo`; `impl Trait for Foo` is not one).
fn inherent_impls(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|l| l.strip_prefix("impl"))
        .filter(|l| l.starts_with(['<', ' ']) && !l.contains(" for "))
        .filter_map(|l| {
            let l = match l.strip_prefix('<') {
                // Past the generics (no nested `>` in this codebase's).
                Some(g) => &g[g.find('>')? + 1..],
                None => l,
            };
            // `impl crate::x::Foo` is `Foo`'s.
            let path: String = l
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let name = path.rsplit("::").next().unwrap_or("").to_string();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

#[test]
fn no_type_is_implemented_across_more_than_two_files() {
    let mut spread = Vec::new();
    let mut types = 0;
    for dir in ["aggregator/src", "aggregator/dp/src", "ingest/src"] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        let mut by_type: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in &files {
            let rel = p.strip_prefix(root()).unwrap().display().to_string();
            for t in inherent_impls(&code(p)) {
                by_type.entry(t).or_default().insert(rel.clone());
            }
        }
        types += by_type.len();
        spread.extend(
            by_type
                .into_iter()
                .filter(|(_, f)| f.len() > MAX_IMPL_FILES)
                .map(|(t, f)| format!("{t}: {f:?}")),
        );
    }
    assert!(types > 50, "found the types ({types})");
    assert!(
        spread.is_empty(),
        "types implemented across more than {MAX_IMPL_FILES} files: {spread:#?}"
    );
    assert_eq!(
        inherent_impls(
            "impl<'a> Foo<'a> {\nimpl Bar {\nimpl Display for Baz {\nimplied\nimpl crate::x::Qux {\n"
        ),
        ["Bar", "Foo", "Qux"].into_iter().map(String::from).collect()
    );
}

/// The service's folders by role, lowest first (docs/DESIGN.md §9): a
/// module names only modules of lower layers. The bottom layer (metrics,
/// the clock, crash points) names no service module at all — metrics take
/// figures, not the configuration.
const LAYERS: &[&[&str]] = &[
    &["telemetry", "clock", "faults"],
    &["clients"],
    &["config"],
    &["engine", "serve"],
    &["state"],
    &["runtime"],
    &["commands"],
];

/// Each service module's layer (its index in [`LAYERS`]).
fn layer_of(m: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&m))
}

/// The arrows of `graph` that break [`LAYERS`].
fn layer_violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (m, deps) in graph {
        let Some(at) = layer_of(m) else {
            wrong.push(format!("{m} has no layer in LAYERS"));
            continue;
        };
        for d in deps {
            match layer_of(d) {
                Some(l) if l < at => {}
                Some(l) => wrong.push(format!("{m} (layer {at}) names {d} (layer {l})")),
                // A name the crate root re-exports (`crate::pipeline`):
                // code in the crate names the folder it lives in.
                None => wrong.push(format!(
                    "{m} names crate::{d}, which is no folder of the crate"
                )),
            }
        }
    }
    wrong
}

#[test]
fn every_folder_names_only_folders_below_it() {
    let graph = module_graph("aggregator/src", &["dp"]);
    assert!(graph.len() >= 10, "found the modules: {graph:?}");
    let wrong = layer_violations(&graph);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The layer rule fails on an arrow up, on an arrow within a layer and on
/// a re-exported name.
#[test]
fn the_layer_rule_can_fail() {
    let graph = |m: &str, code: &str| BTreeMap::from([(m.to_string(), uses(code))]);
    assert!(layer_violations(&graph("runtime", "use crate::engine::window::Offer;")).is_empty());
    for (m, code) in [
        ("engine", "use crate::runtime::pipeline::Options;"),
        ("engine", "crate::serve::status::StatusBoard"),
        ("runtime", "use crate::kafka::Producer;"),
    ] {
        assert_eq!(layer_violations(&graph(m, code)).len(), 1, "{m}: {code}");
    }
}

#[test]
fn the_cycle_check_can_fail() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["c".to_string()].into()),
        ("c".to_string(), ["a".to_string()].into()),
    ]
    .into();
    assert_eq!(
        cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        uses("use crate::{config::Validated, telemetry};\nlet x = crate::state::restore;"),
        ["config", "state", "telemetry"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        names_after(
            "use super::{a, b::C};\nuse super::super::d;\nlet x = super::e::f;",
            "super::"
        ),
        ["a", "b", "e"].into_iter().map(String::from).collect()
    );
}

/// Every `docs/DESIGN.md §N` a source file cites is a section of the page.
#[test]
fn design_citations_point_at_existing_sections() {
    let design = std::fs::read_to_string(root().join("docs/DESIGN.md")).unwrap();
    let sections: BTreeSet<String> = design
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split('.').next())
        .map(str::to_string)
        .collect();
    assert!(sections.len() >= 9, "sections: {sections:?}");
    let mut files = Vec::new();
    for dir in [
        "aggregator/src",
        "aggregator/dp/src",
        "aggregator/tests",
        "ingest/src",
    ] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut cited = 0;
    for p in &files {
        let text = std::fs::read_to_string(p).unwrap();
        for (i, _) in text.match_indices("DESIGN.md §") {
            let n: String = text[i + "DESIGN.md §".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if n.is_empty() {
                // This test's own search string.
                continue;
            }
            cited += 1;
            assert!(
                sections.contains(&n),
                "{} cites DESIGN.md §{n}, which does not exist",
                p.display()
            );
        }
    }
    assert!(cited >= 5, "the sources cite the design ({cited})");
}

/// The crash-injection hook exists only with the `crash-points` feature: the
/// code that reads `FLEETDP_CRASH_AT` and kills the process is under that
/// feature, and nothing else in the service mentions either.
#[test]
fn the_crash_hook_is_behind_its_feature() {
    let src = root().join("aggregator/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for p in &files {
        let text = std::fs::read_to_string(p).unwrap();
        let name = p.strip_prefix(&src).unwrap().display().to_string();
        if name == "faults.rs" {
            for needle in ["FLEETDP_CRASH_AT\")", "SIGKILL)"] {
                let at = text.find(needle).expect("the hook is in faults.rs");
                // The item holding it is the last `fn` before it, which must
                // be gated by the feature.
                let item = text[..at]
                    .rfind("\nfn ")
                    .or_else(|| text[..at].rfind("\npub fn "))
                    .unwrap();
                let gate = text[..item].rfind("#[cfg(").unwrap();
                assert!(
                    text[gate..item].contains("feature = \"crash-points\"")
                        && !text[gate..item].contains("not("),
                    "{needle} is reachable without the crash-points feature"
                );
            }
        } else {
            assert!(
                !text.contains("FLEETDP_CRASH_AT") && !text.contains("SIGKILL"),
                "{name} mentions the crash hook"
            );
        }
    }
}

/// The one layout table (docs/DESIGN.md §9) lists every service module —
/// each file and folder of `aggregator/src` — and nothing that does not
/// exist, so the description cannot drift from the code.
#[test]
fn the_layout_table_lists_every_module() {
    let design = std::fs::read_to_string(root().join("docs/DESIGN.md")).unwrap();
    let at = design.find("## 9. Layout").expect("DESIGN §9");
    let section = &design[at..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut listed = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap();
        for entry in first.split(',') {
            listed.insert(entry.trim().trim_matches('`').to_string());
        }
    }
    assert!(listed.len() >= 20, "the table: {listed:?}");
    let src = root().join("aggregator/src");
    for entry in &listed {
        assert!(
            src.join(entry.trim_end_matches('/')).exists(),
            "DESIGN §9 lists `{entry}`, which aggregator/src does not have"
        );
    }
    // Each entry of the crate's folder and of its role folders (a role
    // folder's mod.rs is the folder's own row).
    let entries = |dir: &Path, prefix: &str| -> Vec<(String, bool)> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().to_string();
                let is_dir = e.path().is_dir();
                let name = format!("{prefix}{name}{}", if is_dir { "/" } else { "" });
                (name, is_dir)
            })
            .collect()
    };
    let mut unlisted = Vec::new();
    let mut modules = 0;
    for (name, is_dir) in entries(&src, "") {
        let role_folder = is_dir
            && LAYERS
                .iter()
                .any(|l| l.contains(&name.trim_end_matches('/')));
        let mut names = vec![name.clone()];
        if role_folder && !["config/", "state/", "telemetry/"].contains(&name.as_str()) {
            names.extend(
                entries(&src.join(&name), &name)
                    .into_iter()
                    .map(|(n, _)| n)
                    .filter(|n| !n.ends_with("/mod.rs")),
            );
        }
        for n in names {
            modules += 1;
            if !listed.contains(&n) {
                unlisted.push(n);
            }
        }
    }
    assert!(modules >= 30, "found the modules ({modules})");
    assert!(
        unlisted.is_empty(),
        "modules DESIGN §9 does not list: {unlisted:?}"
    );
}

/// Every text file of the repository the tests see (sources, docs,
/// configs, scripts), without build output and installed tools.
fn repository_texts() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    walk(&p, out);
                }
            } else if ["rs", "md", "toml", "sh", "yaml", "yml", "py"]
                .iter()
                .any(|x| name.ends_with(&format!(".{x}")))
            {
                if let Ok(text) = std::fs::read_to_string(&p) {
                    out.push((p, text));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// Citations stay inside the repository: no numbered seed documents or
/// tracker issues (which a reader of the code does not have); the works
/// the code cites by author and year are in docs/DESIGN.md §10.
#[test]
fn citations_point_into_the_repository() {
    let texts = repository_texts();
    assert!(texts.len() > 100, "{} files", texts.len());
    let mut outside = Vec::new();
    for (p, text) in &texts {
        let lower = text.to_lowercase();
        // Spelled in pieces, so this file does not match itself.
        let (seed, issue) = (["seed", " 00"].concat(), ["iss", "ue "].concat());
        for bad in [&seed, &issue] {
            for (at, _) in lower.match_indices(bad.as_str()) {
                let next = lower[at + bad.len()..].chars().next();
                if *bad == seed || next.is_some_and(|c| c.is_ascii_digit() || c == '#') {
                    outside.push(format!(
                        "{}: …{}…",
                        p.display(),
                        &text[at..(at + 20).min(text.len())]
                    ));
                }
            }
        }
    }
    assert!(
        outside.is_empty(),
        "citations outside the repository: {outside:#?}"
    );
    let design = std::fs::read_to_string(root().join("docs/DESIGN.md")).unwrap();
    let refs = &design[design.find("## 10. References").expect("§10")..];
    let entries: Vec<String> = refs
        .split("\n- ")
        .skip(1)
        .map(|e| e.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(entries.len() >= 10, "{entries:?}");
    let mut cited = 0;
    let mut missing = Vec::new();
    for (p, text) in &texts {
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        for line in text.lines().map(str::trim_start) {
            if !line.starts_with("//") {
                continue;
            }
            let words: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || "(),;:".contains(c))
                .filter(|w| !w.is_empty())
                .collect();
            for (i, w) in words.iter().enumerate() {
                let is_year = w.len() == 4
                    && w.chars().all(|c| c.is_ascii_digit())
                    && (w.starts_with("19") || w.starts_with("20"));
                // The author: the word before the year, before "et al.".
                let before = words[..i].iter().rev().find(|x| !["et", "al."].contains(x));
                let Some(author) =
                    before.filter(|a| is_year && a.chars().next().is_some_and(char::is_uppercase))
                else {
                    continue;
                };
                cited += 1;
                let known = entries.iter().any(|e| e.contains(author) && e.contains(*w));
                if !known {
                    missing.push(format!("{}: {author} {w}", p.display()));
                }
            }
        }
    }
    assert!(cited >= 10, "found {cited} citations");
    assert!(
        missing.is_empty(),
        "works cited but not in docs/DESIGN.md §10: {missing:#?}"
    );
}
