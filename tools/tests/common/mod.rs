//! Helpers shared by the CLI tests: run a binary, read its stderr, and
//! generate a trace.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Run `emb-locality` with `args`.
pub fn locality(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_emb-locality"))
        .args(args)
        .output()
        .unwrap()
}

/// Run `emb-replay` with `args`.
pub fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_emb-replay"))
        .args(args)
        .output()
        .unwrap()
}

/// A run's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `emb-locality gen` into `path`: `batches` batches of `batch_size`
/// accesses over `tables` (the `--tables` spec; `None` for the default).
pub fn gen_trace(path: &Path, batches: u32, batch_size: u32, tables: Option<&str>) {
    let (b, s) = (batches.to_string(), batch_size.to_string());
    let mut args = vec![
        "gen",
        path.to_str().unwrap(),
        "--batches",
        &b,
        "--batch-size",
        &s,
    ];
    if let Some(t) = tables {
        args.extend(["--tables", t]);
    }
    let o = locality(&args);
    assert!(o.status.success(), "gen: {}", stderr(&o));
}
