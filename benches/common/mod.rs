//! Setup shared by the benchmarks: stores whose data file is really written
//! (a sparse file would serve misses from holes without touching the disk).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use embtier::{Init, IoEngineKind, OpenOptionsExt, Store, StoreConfig, TableConfig};

/// Where benchmark stores live: `EMBTIER_BENCH_DIR`, or the temp dir.
pub fn bench_dir() -> tempfile::TempDir {
    let base: PathBuf = std::env::var_os("EMBTIER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("embtier-bench")
        .tempdir_in(base)
        .expect("bench dir")
}

/// Create a store of one cached table `t` and write every row, so that the
/// data file holds real blocks; then reopen it with `dram` bytes of cache
/// and the given engine.
pub fn written_store(
    dir: &Path,
    rows: u64,
    dim: u32,
    dram: u64,
    engine: IoEngineKind,
    qd: u32,
) -> Store {
    let path = dir.join("store");
    if !path.join(embtier::META_FILE).exists() {
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, dim).init(Init::Uniform { scale: 0.1 }))
            .dram_capacity(64 << 20)
            .build();
        let s = Store::create(&path, cfg).expect("create");
        let batch = 4096u64;
        let mut vals = vec![0f32; batch as usize * dim as usize];
        let mut id = 0;
        while id < rows {
            let n = batch.min(rows - id);
            let ids: Vec<u64> = (id..id + n).collect();
            for (i, v) in vals.iter_mut().enumerate().take(n as usize * dim as usize) {
                *v = ((id as usize * dim as usize + i) % 1000) as f32 / 1000.0;
            }
            s.update("t", &ids, &vals[..n as usize * dim as usize])
                .expect("update");
            id += n;
        }
        s.flush().expect("flush");
    }
    reopen(&path, rows, dim, dram, engine, qd)
}

/// Reopen with other tier settings.
pub fn reopen(path: &Path, rows: u64, dim: u32, dram: u64, engine: IoEngineKind, qd: u32) -> Store {
    let cfg = reopen_config(rows, dim, dram, engine, qd);
    Store::open_with(path, cfg, OpenOptionsExt::default()).expect("open")
}

/// The config `reopen` uses.
pub fn reopen_config(rows: u64, dim: u32, dram: u64, engine: IoEngineKind, qd: u32) -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", rows, dim).init(Init::Uniform { scale: 0.1 }))
        .dram_capacity(dram)
        .io_engine(engine)
        .queue_depth(qd)
        .build()
}

/// Deterministic uniform ids.
pub fn uniform_batches(n: usize, batch: usize, rows: u64, seed: u64) -> Vec<Vec<u64>> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            (0..batch)
                .map(|_| {
                    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    embtier::init::mix64(x) % rows
                })
                .collect()
        })
        .collect()
}

/// Zipf(s) ids scattered over the table by a bijection.
pub fn zipf_batches(n: usize, batch: usize, rows: u64, s: f64, seed: u64) -> Vec<Vec<u64>> {
    use rand::SeedableRng;
    use rand_distr::Distribution;
    let z = rand_distr::Zipf::new(rows, s).expect("zipf");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            (0..batch)
                .map(|_| ((z.sample(&mut rng) as u64 - 1).wrapping_mul(2_654_435_761)) % rows)
                .collect()
        })
        .collect()
}

/// The uring engine, if this machine allows it.
pub fn uring_available() -> bool {
    match embtier::io::probe_uring() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIP io_uring: {why}");
            false
        }
    }
}
