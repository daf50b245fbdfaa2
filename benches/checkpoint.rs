//! Checkpoint cost: seconds per GiB of row bytes dirtied since the last
//! checkpoint, for a few dirty fractions and two patterns (uniform random
//! rows, which dirty many block groups partly; and one contiguous id range,
//! which fills whole groups). The baseline, measured in the same run on the
//! same file system, is writing the same number of bytes sequentially to a
//! plain file and fsyncing it: the ratio is the protocol's cost over the
//! disk's sequential write.
//!
//! Each case runs twice: with the row log (the default; each timed
//! checkpoint starts from an empty log, and the merge the log defers is
//! timed after it, as `Store::merge_row_log`) and without it (`row_log =
//! 0`: every dirty row is written in place).
//!
//! `cargo bench --bench checkpoint` (`EMBTIER_BENCH_ROUNDS`, default 3;
//! `EMBTIER_BENCH_DIR` for the files).

mod common;

use std::io::Write;
use std::time::Instant;

use common::*;
use embtier::IoEngineKind;

const ROWS: u64 = 1 << 20;
const DIM: u32 = 64; // 256-byte rows: 15 per 4 KiB block group

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds to write `bytes` to a new file and fsync it.
fn raw_write(dir: &std::path::Path, bytes: usize) -> f64 {
    let p = dir.join("raw.bin");
    let buf = vec![0x5au8; 1 << 20];
    let t = Instant::now();
    let mut f = std::fs::File::create(&p).expect("raw");
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len());
        f.write_all(&buf[..n]).expect("write");
        left -= n;
    }
    f.sync_all().expect("fsync");
    let s = t.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&p);
    s
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("EMBTIER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let dir = bench_dir();
    let engine = if uring_available() {
        IoEngineKind::Uring
    } else {
        IoEngineKind::Psync
    };
    let rb = DIM as usize * 4;
    // DRAM holds every row, so a checkpoint writes exactly the dirty ones.
    drop(written_store(
        dir.path(),
        ROWS,
        DIM,
        ROWS * rb as u64 * 2,
        engine,
        64,
    ));
    println!(
        "| dirty rows | pattern | write path | dirty MiB | checkpoint s (median) | s / GiB dirtied | journal MiB | raw write+fsync s | ratio to raw | log merge s (median) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut seed = 1u64;
    let mut engine_name = String::new();
    for (path, log) in [("row log", None), ("in place", Some(embtier::ByteSize(0)))] {
        let mut cfg = reopen_config(ROWS, DIM, ROWS * rb as u64 * 2, engine, 64);
        cfg.ssd.row_log = log;
        // Cold: a warm restart reading in the background would add to the
        // checkpoints measured.
        let cold = embtier::OpenOptionsExt {
            cold: true,
            ..Default::default()
        };
        let store = embtier::Store::open_with(dir.path().join("store"), cfg, cold).expect("open");
        store.merge_row_log().expect("merge");
        engine_name = store.stats().io_engine;
        for frac in [0.01, 0.05, 0.20] {
            for pattern in ["uniform", "contiguous"] {
                let n = (ROWS as f64 * frac) as u64;
                let (mut ck, mut raw, mut merge, mut jb) = (Vec::new(), Vec::new(), Vec::new(), 0);
                for _ in 0..rounds {
                    seed += 1;
                    let mut ids: Vec<u64> = if pattern == "uniform" {
                        let mut x = seed;
                        (0..n)
                            .map(|_| {
                                x = embtier::init::mix64(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
                                x % ROWS
                            })
                            .collect()
                    } else {
                        let start = (seed * 7919) % (ROWS - n);
                        (start..start + n).collect()
                    };
                    ids.sort_unstable();
                    ids.dedup();
                    let vals = vec![seed as f32; ids.len() * DIM as usize];
                    for (c, chunk) in ids.chunks(4096).enumerate() {
                        let v = &vals[c * 4096 * DIM as usize..][..chunk.len() * DIM as usize];
                        store.update("t", chunk, v).expect("update");
                    }
                    let dirty = store.dirty_rows();
                    let t = Instant::now();
                    let c = store.checkpoint().expect("checkpoint");
                    ck.push(t.elapsed().as_secs_f64());
                    jb = c.journal_bytes;
                    raw.push(raw_write(dir.path(), dirty as usize * rb));
                    if log.is_none() {
                        let t = Instant::now();
                        store.merge_row_log().expect("merge");
                        merge.push(t.elapsed().as_secs_f64());
                    }
                }
                let dirty_bytes = n as f64 * rb as f64;
                let (c, r) = (median(ck), median(raw));
                println!(
                "| {n} ({:.0}%) | {pattern} | {path} | {:.1} | {c:.3} | {:.1} | {:.1} | {r:.3} | {:.1} | {} |",
                frac * 100.0,
                dirty_bytes / (1 << 20) as f64,
                c / (dirty_bytes / (1u64 << 30) as f64),
                jb as f64 / (1 << 20) as f64,
                c / r,
                if merge.is_empty() { "-".into() } else { format!("{:.3}", median(merge)) }
            );
            }
        }
    }
    println!(
        "\ntable {ROWS} rows x {DIM} f32 ({} MiB), engine {engine_name:?}, {rounds} rounds",
        (ROWS * rb as u64) >> 20,
    );
}
