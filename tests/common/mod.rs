//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod inputs;
pub mod mount;
pub mod workload;

use embtier::MemoryKind;
// Not every test uses both.
#[allow(unused_imports)]
pub use inputs::{env_or, Rng};

use embtier::{IoEngineKind, Placement, PolicyKind, StoreConfig, TableConfig};

/// The engines to run on this machine: psync always; uring when the probe
/// succeeds, otherwise a printed skip.
pub fn engines() -> Vec<IoEngineKind> {
    let mut v = vec![IoEngineKind::Psync];
    match embtier::io::probe_uring() {
        Ok(()) => v.push(IoEngineKind::Uring),
        Err(why) => eprintln!("SKIP uring engine: io_uring probe failed: {why}"),
    }
    v
}

/// `cfg` with the given engine.
pub fn with_engine(mut cfg: StoreConfig, e: IoEngineKind) -> StoreConfig {
    cfg.ssd.io_engine = e;
    cfg
}

/// Three tierings of one table where eviction order is fixed: pinned to
/// DRAM; a 3-row DRAM cache (one shard, SIEVE) over a 5-row PMem cache (LRU)
/// over SSD; and a `dram_rows`-row DRAM cache over SSD. `table(p)` gives the
/// table with placement `p`.
pub fn tier_configs(
    table: impl Fn(Placement) -> TableConfig,
    dram_rows: u64,
) -> Vec<(&'static str, StoreConfig)> {
    let rb = table(Placement::Cached).row_bytes();
    vec![
        (
            "pinned-dram",
            StoreConfig::builder()
                .table(table(Placement::Pinned(MemoryKind::Dram)))
                .dram_capacity(1 << 20)
                .build(),
        ),
        (
            "tiny-dram+pmem+ssd",
            StoreConfig::builder()
                .table(table(Placement::Cached))
                .dram_capacity(3 * rb)
                .dram_shards(1)
                .dram_policy(PolicyKind::Sieve)
                .pmem(None, 5 * rb, PolicyKind::Lru)
                .build(),
        ),
        (
            "dram+ssd",
            StoreConfig::builder()
                .table(table(Placement::Cached))
                .dram_capacity(dram_rows * rb)
                .build(),
        ),
    ]
}

/// The reference for duplicate ids in one call: each id's gradients summed
/// in the order given (the first copied, the others added), ids in order of
/// first appearance.
pub fn sum_in_order(ids: &[u64], grads: &[f32], dim: usize) -> Vec<(u64, Vec<f32>)> {
    let mut out: Vec<(u64, Vec<f32>)> = Vec::new();
    let mut at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        let g = &grads[i * dim..(i + 1) * dim];
        match at.get(&id) {
            Some(&k) => out[k].1.iter_mut().zip(g).for_each(|(a, b)| *a += *b),
            None => {
                at.insert(id, out.len());
                out.push((id, g.to_vec()));
            }
        }
    }
    out
}

/// Open options that wrap every file's engine in a fault injector driven
/// by `plan` (which also counts reads, writes and syncs); `cold` skips the
/// warm restart, whose background reads would take from those counts.
pub fn faulty_opts(
    plan: &std::sync::Arc<embtier::io::fault::FaultPlan>,
    cold: bool,
) -> embtier::OpenOptionsExt {
    let p = plan.clone();
    embtier::OpenOptionsExt {
        wrap_engine: Some(std::sync::Arc::new(move |path: &std::path::Path, e| {
            Box::new(embtier::io::fault::FaultyEngine::new(e, p.clone(), path))
        })),
        cold,
        faults: Some(plan.clone()),
    }
}

/// What a power loss does besides losing writes: the machine boots again.
/// The boot record then names another boot, and the next open checks the
/// last checkpoint's written groups (FORMAT.md, "Boot record").
#[allow(dead_code)]
pub fn reboot(dir: &std::path::Path) {
    use embtier::format::boot::BootRecord;
    let path = dir.join(embtier::BOOT_FILE);
    // A record that is missing or damaged forces the check already.
    if let Ok(Ok(old)) = std::fs::read(&path).map(|b| BootRecord::decode(&b)) {
        let other = BootRecord {
            generation: old.generation,
            boot_id: b"a-boot-before-the-power-loss".to_vec(),
        };
        std::fs::write(&path, other.encode().unwrap()).unwrap();
    }
}

/// Damage the byte at `at` of the file at `path` (XOR 0x5a: every bit
/// pattern changes).
pub fn flip(path: &std::path::Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x5a;
    std::fs::write(path, b).unwrap();
}
