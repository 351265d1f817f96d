//! The crate's top-level modules import each other without a cycle (issue #13: "a core
//! without knots"). Reads `src/` as text: every `crate::` path outside comments, string
//! literals and test-only code is an import edge from the top-level module whose file holds
//! it to the top-level module it names (`pub use` and inline paths count as much as `use`;
//! a path through a root re-export, `crate::ConsentRule`, counts as an edge to the module the
//! root takes it from). Test-only code (`#[cfg(test)]` modules, inline or in their own files)
//! is left out: a test may use anything.
//!
//! This is what Cargo cannot say. The layering it used to check by hand is now a Cargo fact:
//! the shared vocabulary (ids, codes, statuses, phases, results, the approval, policy and
//! drift models, canonical JSON, the clock) is the `sallyport-vocab` crate, which depends on
//! no sallyport crate, so nothing in it can import the journal, the executor or a channel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its path relative to `src/` and its text.
struct Source {
    rel: PathBuf,
    text: String,
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read source");
            let rel = path.strip_prefix(root).expect("under src").to_path_buf();
            out.push(Source { rel, text });
        }
    }
}

/// The text with comments removed and string and char literals blanked (their quotes
/// kept), so only code is left. Handles nested block comments, escapes, raw strings and
/// lifetimes.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !b
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string r"…" or r#"…"#: find its closing quote and hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (1..=hashes).all(|k| b.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Removes every `#[cfg(test)] mod name { … }` block from code (comments already gone).
fn without_inline_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let Some(body) = trimmed.strip_prefix("mod ") else {
            // Some other test-only item: drop the attribute, keep the item (an edge from a
            // test-only function is rare and harmless to count).
            rest = after;
            continue;
        };
        let name_end = body.find(|c: char| !is_ident(c)).unwrap_or(body.len());
        let after_name = body[name_end..].trim_start();
        if let Some(after) = after_name.strip_prefix(';') {
            // A file module: its file is excluded by `test_only_files`.
            rest = after;
            continue;
        }
        let Some(open) = after_name.strip_prefix('{') else {
            rest = after;
            continue;
        };
        let mut depth = 1;
        let mut end = open.len();
        for (i, c) in open.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &open[end..];
    }
    out.push_str(rest);
    out
}

/// The files of modules declared `#[cfg(test)] mod name;`, relative to `src/`.
fn test_only_files(files: &[Source]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for file in files {
        let code = code_only(&file.text);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let Some(body) = rest.trim_start().strip_prefix("mod ") else {
                continue;
            };
            let name_end = body.find(|c: char| !is_ident(c)).unwrap_or(body.len());
            if !body[name_end..].trim_start().starts_with(';') {
                continue;
            }
            let name = &body[..name_end];
            // `a/mod.rs` and `lib.rs` declare children beside them; `a/b.rs` in `a/b/`.
            let parent = file.rel.parent().unwrap_or(Path::new(""));
            let stem = file.rel.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let dir = if stem == "mod" || (stem == "lib" && parent.as_os_str().is_empty()) {
                parent.to_path_buf()
            } else {
                parent.join(stem)
            };
            out.insert(dir.join(format!("{name}.rs")));
            out.insert(dir.join(name).join("mod.rs"));
        }
    }
    out
}

/// The top-level module a file belongs to (`None` for `lib.rs`, the crate root).
fn top_module(rel: &Path) -> Option<String> {
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?.to_owned();
    if parts.next().is_some() {
        return Some(first);
    }
    let name = first.strip_suffix(".rs")?;
    (name != "lib").then(|| name.to_owned())
}

/// The first names of every `crate::` path in code: `crate::a::b` gives `a`,
/// `crate::{a::x, b}` gives `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate") {
        let before = &rest[..at];
        let after = &rest[at + "crate".len()..];
        rest = after;
        if before
            .chars()
            .next_back()
            .is_some_and(|c| is_ident(c) || c == '$')
        {
            continue;
        }
        let Some(path) = after.trim_start().strip_prefix("::") else {
            continue;
        };
        let path = path.trim_start();
        if let Some(group) = path.strip_prefix('{') {
            // The group's top-level names, up to its closing brace.
            let mut depth = 1;
            let mut item = String::new();
            let mut expecting = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expecting = true,
                    c if depth == 1 && expecting && is_ident(c) => item.push(c),
                    _ if depth == 1 && expecting && !item.is_empty() => {
                        names.push(std::mem::take(&mut item));
                        expecting = false;
                    }
                    _ => {}
                }
            }
            if !item.is_empty() {
                names.push(item);
            }
        } else {
            let end = path.find(|c: char| !is_ident(c)).unwrap_or(path.len());
            if end > 0 {
                names.push(path[..end].to_owned());
            }
        }
    }
    names
}

/// Which module each name the crate root re-exports comes from (`pub use crate::m::{A, B}`).
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let code = code_only(lib);
    let mut out = BTreeMap::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .strip_prefix("pub use crate::")
            .or_else(|| statement.strip_prefix("pub use self::"))
        else {
            continue;
        };
        let module_end = path.find(|c: char| !is_ident(c)).unwrap_or(path.len());
        let module = &path[..module_end];
        let items = path[module_end..].trim_start_matches("::");
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit("::").next().unwrap_or(item);
            let name = name.split(" as ").last().unwrap_or(name).trim();
            if !name.is_empty() {
                out.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    out
}

/// The import graph among top-level modules, with the files behind each edge.
fn module_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    let test_only = test_only_files(&files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(&f.rel)).collect();
    let lib = files
        .iter()
        .find(|f| f.rel == Path::new("lib.rs"))
        .expect("src/lib.rs");
    let reexports = root_reexports(&lib.text);
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> = BTreeMap::new();
    for file in &files {
        let Some(from) = top_module(&file.rel) else {
            continue;
        };
        graph.entry(from.clone()).or_default();
        let in_test_dir = test_only
            .iter()
            .any(|t| t.ends_with("mod.rs") && file.rel.starts_with(t.parent().unwrap_or(t)));
        if test_only.contains(&file.rel) || in_test_dir {
            continue;
        }
        let code = without_inline_tests(&code_only(&file.text));
        for name in crate_paths(&code) {
            let to = if modules.contains(&name) {
                Some(name)
            } else {
                reexports.get(&name).cloned()
            };
            if let Some(to) = to
                && to != from
            {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(file.rel.clone());
            }
        }
    }
    graph
}

/// Every cycle's modules (strongly connected components of more than one module, or a
/// module naming itself through the root), by Tarjan's algorithm.
fn cycles(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let targets: Vec<&'g str> = s
            .graph
            .get(v)
            .map(|t| t.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for w in targets {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn no_two_top_level_modules_import_each_other_even_indirectly() {
    let graph = module_graph();
    let found = cycles(&graph);
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("cycle among {component:?}:\n"));
        for from in component {
            for (to, files) in &graph[from] {
                if component.contains(to) {
                    report.push_str(&format!("  {from} -> {to} in {files:?}\n"));
                }
            }
        }
    }
    assert!(found.is_empty(), "{report}");
}

#[test]
fn the_scanner_sees_edges_in_groups_root_reexports_and_pub_use_but_not_comments_or_strings() {
    let code = code_only(
        r##"
        use crate::{alpha::X, beta::{Y, Z}, gamma};
        pub use crate::delta::W;
        // use crate::comment_only::A;
        /* crate::block_only /* nested crate::deeper */ */
        let s = "crate::in_string::B";
        let r = r#"crate::in_raw::C"#;
        fn f<'a>(x: &'a str) -> char { let c = '"'; crate::epsilon::g(); c }
        let t = crate::Gamma::new();
        "##,
    );
    let names = crate_paths(&code);
    assert_eq!(
        names,
        ["alpha", "beta", "gamma", "delta", "epsilon", "Gamma"],
        "{code}"
    );
    let without = without_inline_tests(
        "use crate::kept::A;\n#[cfg(test)]\nmod tests { use crate::dropped::B; fn f() { {} } }\nuse crate::after::C;",
    );
    assert_eq!(crate_paths(&without), ["kept", "after"]);
    let roots = root_reexports(
        "pub use crate::action::{Action, ActionSpec};\npub use crate::outcome::Status;",
    );
    assert_eq!(roots.get("ActionSpec").map(String::as_str), Some("action"));
    assert_eq!(roots.get("Status").map(String::as_str), Some("outcome"));
}

#[test]
fn a_cycle_is_found_when_one_comes_back() {
    // The checker itself, on a graph with a cycle a -> b -> c -> a and a leaf d.
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> = BTreeMap::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(from.to_owned())
            .or_default()
            .entry(to.to_owned())
            .or_default()
            .insert(PathBuf::from(format!("{from}.rs")));
    }
    graph.entry("d".to_owned()).or_default();
    assert_eq!(cycles(&graph), [vec!["a", "b", "c"]]);
}
