//! The module graph of a crate of this workspace, read from its sources,
//! and a check that it has no cycle. Used by `tests/module_graph.rs` (the
//! engine) and `sim/tests/module_graph.rs` (the simulator), which include
//! this file.
//!
//! An edge `a -> b` is any path `crate::b...` (or `super::b` resolving to
//! `b`) in the non-test code of module `a`; a name re-exported at the crate
//! root (`crate::Elem`) counts as an edge to the module that defines it.
//! Submodules of the modules a caller names in `split` are nodes of their
//! own; deeper modules fold into them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module path of a source file, as `::`-joined segments ("" for lib.rs).
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// The graph node a module belongs to: the top-level module, or its child
/// for the modules in `split`.
fn node(module: &str, split: &[&str]) -> String {
    let parts: Vec<&str> = module.split("::").collect();
    if parts.len() > 1 && split.contains(&parts[0]) {
        parts[..2].join("::")
    } else {
        parts[0].to_string()
    }
}

fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let src = fs::read_to_string(&p).unwrap();
            out.insert(module_of(p.strip_prefix(root).unwrap()), src);
        }
    }
}

/// Source without line comments and without the `#[cfg(test)]` tail.
fn code(src: &str) -> String {
    let cut = src.find("#[cfg(test)]").unwrap_or(src.len());
    src[..cut]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every path that follows `prefix` in `code`, as its first two segments;
/// a `{...}` group after the prefix gives one path per item.
fn paths_after(code: &str, prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `foo_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(split2(item.trim()));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            if !item.trim().is_empty() {
                out.push(split2(item.trim()));
            }
        } else {
            out.push(split2(rest));
        }
    }
    out
}

fn split2(path: &str) -> (String, String) {
    let a = ident_at(path);
    let b = path[a.len()..]
        .strip_prefix("::")
        .map(ident_at)
        .unwrap_or("");
    (a.to_string(), b.to_string())
}

/// The module graph of the crate whose sources are under `root` (its
/// `lib.rs` there), as edges between nodes (see [`node`]); panics, naming
/// the modules and the edges that close it, when the graph has a cycle.
/// `EMBTIER_PRINT_MODULE_GRAPH=1` prints the edges.
pub fn acyclic_module_graph(root: &Path, split: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = BTreeMap::new();
    walk(root, root, &mut files);
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    // Names the crate root re-exports: `pub use module::{A, B}` / `module::A`.
    let mut reexport: BTreeMap<String, String> = BTreeMap::new();
    for line in code(&files[""]).split(';') {
        let line = line.trim();
        let Some(path) = line.strip_prefix("pub use ") else {
            continue;
        };
        let module = ident_at(path).to_string();
        if !modules.contains(&module) {
            continue;
        }
        let tail = &path[module.len()..];
        let names: Vec<&str> = match tail.find('{') {
            Some(i) => tail[i + 1..].trim_end_matches('}').split(',').collect(),
            None => vec![tail.rsplit("::").next().unwrap_or("")],
        };
        for n in names {
            let n = n.trim();
            let n = n.rsplit("::").next().unwrap_or(n);
            if !n.is_empty() {
                reexport.insert(n.to_string(), module.clone());
            }
        }
    }
    let resolve = |a: &str, b: &str| -> Option<String> {
        if modules.contains(&format!("{a}::{b}")) {
            Some(node(&format!("{a}::{b}"), split))
        } else if modules.contains(a) {
            Some(node(a, split))
        } else {
            reexport.get(a).map(|m| node(m, split))
        }
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, src) in &files {
        if module.is_empty() {
            continue; // the crate root declares and re-exports; it is the top
        }
        let from = node(module, split);
        let c = code(src);
        let mut targets = Vec::new();
        for (a, b) in paths_after(&c, "crate::") {
            targets.extend(resolve(&a, &b));
        }
        let parent: Vec<&str> = module.split("::").collect();
        let parent = parent[..parent.len() - 1].join("::");
        for (a, b) in paths_after(&c, "super::") {
            let (a2, b2) = if parent.is_empty() {
                (a, b)
            } else {
                (format!("{parent}::{a}"), b)
            };
            let full = format!("{a2}::{b2}");
            if modules.contains(&full) {
                targets.push(node(&full, split));
            } else if modules.contains(&a2) {
                targets.push(node(&a2, split));
            } else if !parent.is_empty() {
                targets.push(node(&parent, split));
            }
        }
        for t in targets {
            if t != from {
                edges.entry(from.clone()).or_default().insert(t);
            }
        }
    }
    if std::env::var_os("EMBTIER_PRINT_MODULE_GRAPH").is_some() {
        for (a, bs) in &edges {
            eprintln!(
                "{a} -> {}",
                bs.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    // Tarjan's strongly connected components.
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        sccs: Vec<Vec<String>>,
    }
    fn visit(t: &mut T<'_>, v: &str) {
        let i = t.index.len();
        t.index.insert(v.into(), i);
        t.low.insert(v.into(), i);
        t.stack.push(v.into());
        t.on.insert(v.into());
        let next: Vec<String> = t
            .edges
            .get(v)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for w in next {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.sccs.push(comp);
            }
        }
    }
    let mut t = T {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        sccs: Vec::new(),
    };
    let nodes: Vec<String> = edges.keys().cloned().collect();
    for v in nodes {
        if !t.index.contains_key(&v) {
            visit(&mut t, &v);
        }
    }
    let report: Vec<String> = t
        .sccs
        .iter()
        .map(|comp| {
            let set: BTreeSet<&String> = comp.iter().collect();
            let inner: Vec<String> = comp
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| set.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            format!("cycle among {comp:?}: {}", inner.join(", "))
        })
        .collect();
    assert!(report.is_empty(), "module cycles:\n{}", report.join("\n"));
    edges
}
