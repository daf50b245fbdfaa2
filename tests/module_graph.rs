//! The engine's modules form layers: format, then building blocks (`hash`,
//! `files`, `error`, `io`, `policy`, `precision`, `init`), then tiers and
//! durability, then the table protocol, then the public API
//! (`docs/architecture.md`, "Layers"). This test reads `src/` and fails
//! when a module cycle comes back, naming the modules and the edges that
//! close it.
//!
//! The graph is built by `common/modgraph.rs`: submodules of `io`, `tier`
//! and `policy` are nodes of their own. `EMBTIER_PRINT_MODULE_GRAPH=1`
//! prints the edges.

use std::path::Path;

#[path = "common/modgraph.rs"]
mod modgraph;

#[test]
fn the_engine_modules_have_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = modgraph::acyclic_module_graph(&root, &["io", "tier", "policy"]);
    assert!(
        edges.get("table").is_some_and(|t| t.contains("tier::ssd")),
        "the scan finds no edges: {edges:?}"
    );
}
