//! Every command of the tools that the README and the tool guides show in
//! a `sh` block runs as written. Each block runs in a scratch directory of
//! its own, line by line (`target/release/emb-*` and `emb-*` are the
//! binaries under test; `../shared/` is the shared traces' directory, and a
//! block that needs it skips, saying so, when it is absent). `cargo` lines
//! are build steps and are not run here. Synopses, which hold placeholders,
//! are `text` blocks and are not run either.

use std::path::{Path, PathBuf};
use std::process::Command;

const DOCS: [&str; 4] = [
    "README.md",
    "docs/replay.md",
    "docs/locality.md",
    "tools/README.md",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` blocks of `text`, each as its commands (continuation lines
/// joined, comments dropped).
fn sh_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(c) = cur.as_mut() {
            if t.starts_with("```") {
                blocks.push(cur.take().expect("in a block"));
                continue;
            }
            let code = match t.find(" #") {
                Some(i) => &t[..i],
                None if t.starts_with('#') => "",
                None => t,
            };
            let code = code.trim_end();
            if let Some(head) = code.strip_suffix('\\') {
                pending.push_str(head.trim_end());
                pending.push(' ');
                continue;
            }
            pending.push_str(code);
            if !pending.trim().is_empty() {
                c.push(pending.trim().to_string());
            }
            pending.clear();
        } else if t.starts_with("```sh") || t.starts_with("```bash") {
            cur = Some(Vec::new());
        }
    }
    blocks
}

/// The binary a command line starts with, if it is one of the tools.
fn tool(first: &str) -> Option<&'static str> {
    match first.trim_start_matches("target/release/") {
        "emb-replay" => Some(env!("CARGO_BIN_EXE_emb-replay")),
        "emb-locality" => Some(env!("CARGO_BIN_EXE_emb-locality")),
        _ => None,
    }
}

#[test]
fn every_documented_command_runs_as_written() {
    let shared = root().join("../shared");
    let mut ran = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        for (b, block) in sh_blocks(&text).into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            if block.iter().any(|c| c.contains("../shared/")) && !shared.exists() {
                eprintln!("SKIP: {doc} block {b} needs {}", shared.display());
                continue;
            }
            for cmd in &block {
                let words: Vec<&str> = cmd.split_whitespace().collect();
                let Some(bin) = tool(words[0]) else {
                    continue; // cargo, pip, ...: not the tools
                };
                let args: Vec<String> = words[1..]
                    .iter()
                    .map(|w| w.replace("../shared/", &format!("{}/", shared.display())))
                    .collect();
                let o = Command::new(bin)
                    .args(&args)
                    .current_dir(dir.path())
                    .output()
                    .unwrap();
                assert!(
                    o.status.success(),
                    "{doc}: `{cmd}` failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                ran += 1;
            }
        }
    }
    assert!(ran >= 15, "only {ran} commands found in the docs");
}

#[test]
fn blocks_are_read_as_commands() {
    let b = sh_blocks("x\n```sh\na b # note\n# whole comment\nc \\\n  d\n```\n```text\nT X\n```\n");
    assert_eq!(b, vec![vec!["a b".to_string(), "c d".to_string()]]);
}
