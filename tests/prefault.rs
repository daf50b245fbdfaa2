//! The caches' memory is faulted in on a thread of its own at open
//! (`[[tiers]] prefault`, on by default), and left to fill as rows arrive
//! when it is turned off. Measured by the process's resident memory, so
//! this file holds one test, alone in its process.

use embtier::{Init, IoEngineKind, Store, StoreConfig, TableConfig};

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// MADV_POPULATE_WRITE is Linux 5.14 or later.
fn kernel_populates() -> bool {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = r.trim().split(['.', '-']).map(|x| x.parse::<u32>().unwrap_or(0));
    let (a, b) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    (a, b) >= (5, 14)
}

fn store(dir: &std::path::Path, prefault: bool) -> Store {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 1 << 20, 64).init(Init::Zeros))
        .dram_capacity(128 << 20)
        .dram_shards(8)
        .dram_prefault(prefault)
        .io_engine(IoEngineKind::Psync)
        .build();
    Store::create(dir.join("s"), cfg).unwrap()
}

#[test]
fn the_cache_memory_is_faulted_in_at_open_unless_turned_off() {
    if !cfg!(target_os = "linux") || !kernel_populates() {
        eprintln!("skipped: the kernel has no MADV_POPULATE_WRITE (Linux 5.14 or later)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let before = rss();
    let s = store(dir.path(), false);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let off = rss().saturating_sub(before);
    assert!(off < 32 << 20, "{off} bytes resident with prefault off");
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let before = rss();
    let s = store(dir.path(), true);
    let t = std::time::Instant::now();
    let mut on = 0;
    while t.elapsed().as_secs() < 20 {
        on = rss().saturating_sub(before);
        if on >= 120 << 20 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(on >= 120 << 20, "{on} bytes resident with prefault on");
    // The store works as ever.
    let ids: Vec<u64> = (0..4096).map(|i| i * 97).collect();
    let mut out = vec![1f32; ids.len() * 64];
    s.lookup("t", &ids, &mut out).unwrap();
    assert!(out.iter().all(|&v| v == 0.0));
}
