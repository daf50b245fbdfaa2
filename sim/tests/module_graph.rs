//! The simulator's modules form layers too: `densify`, `trace` and
//! `profile` at the bottom, then the simulated caches (`cache`, `offline`,
//! `policy`), then `locality`, `replay` and `calibrate`
//! (`docs/architecture.md`, "Layers"). This test reads
//! `sim/src/` and fails when a module cycle appears, naming the modules and
//! the edges that close it (the engine's check, `tests/module_graph.rs`,
//! shares the code). `EMBTIER_PRINT_MODULE_GRAPH=1` prints the edges.

use std::path::Path;

#[path = "../../tests/common/modgraph.rs"]
mod modgraph;

#[test]
fn the_simulator_modules_have_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = modgraph::acyclic_module_graph(&root, &["trace", "locality"]);
    assert!(
        edges.get("replay").is_some_and(|t| t.contains("cache")),
        "the scan finds no edges: {edges:?}"
    );
}
