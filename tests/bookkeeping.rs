//! Measures what the DRAM cache costs per cached row beyond the row payload,
//! with a counting global allocator (everything the store allocates, not
//! just what it thinks it allocates), and prints it. The bound is 16 bytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use embtier::{Init, IoEngineKind, PolicyKind, Store, StoreConfig, TableConfig};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The most `LIVE` has been since it was last reset to `LIVE`.
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grow(n: isize) {
    let now = LIVE.fetch_add(n, Ordering::SeqCst) + n;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grow(l.size() as isize);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        grow(l.size() as isize);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::SeqCst);
        // SAFETY: p was allocated by System with layout l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        grow(n as isize - l.size() as isize);
        // SAFETY: p was allocated by System with layout l.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// The tests of this file count one process-wide heap: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Heap bytes held by a store whose cache of `cache` bytes is full, and the
/// number of rows cached.
fn heap_of_full_store(policy: PolicyKind, dim: u32, cache: usize) -> (f64, usize, f64) {
    heap_of_full_store_with(policy, dim, cache, None, false)
}

/// As [`heap_of_full_store`], with `shards` shards (None: the default) and
/// huge pages asked for if `huge`: slabs of 4 MiB or more are then
/// mappings of their own, off the heap. Without, every slab is on the heap.
fn heap_of_full_store_with(
    policy: PolicyKind,
    dim: u32,
    cache: usize,
    shards: Option<usize>,
    huge: bool,
) -> (f64, usize, f64) {
    let dir = tempfile::tempdir().unwrap();
    let rb = dim as usize * 4;
    let rows_cached = cache / rb;
    let mut b = StoreConfig::builder()
        .table(TableConfig::new("t", rows_cached as u64 * 4, dim).init(Init::Zeros))
        .dram_capacity(cache as u64)
        .dram_policy(policy)
        .dram_huge_pages(huge)
        .io_engine(IoEngineKind::Psync);
    if let Some(n) = shards {
        b = b.dram_shards(n);
    }
    let cfg = b.build();
    let before = LIVE.load(Ordering::SeqCst);
    let store = Store::create(dir.path().join("s"), cfg).unwrap();
    {
        // Twice the capacity, so that every shard fills.
        let ids: Vec<u64> = (0..2 * rows_cached as u64).collect();
        let mut out = vec![0f32; 4096 * dim as usize];
        for chunk in ids.chunks(4096) {
            store
                .lookup("t", chunk, &mut out[..chunk.len() * dim as usize])
                .unwrap();
        }
    }
    let live = (LIVE.load(Ordering::SeqCst) - before) as f64;
    let st = store.stats();
    let t = st.table("t").unwrap();
    assert_eq!(t.dram().resident_rows, rows_cached as u64, "cache full");
    let own = t.dram().bookkeeping_bytes as f64 / rows_cached as f64;
    drop(store);
    (live - (rows_cached * rb) as f64, rows_cached, own)
}

#[test]
fn dram_bookkeeping_is_at_most_16_bytes_per_row() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for policy in [PolicyKind::Lru, PolicyKind::Sieve, PolicyKind::Fifo] {
        for (dim, cache) in [(128u32, 16usize << 20), (16, 4 << 20), (64, 3 << 20)] {
            // The marginal cost per row: the slope between two cache sizes,
            // which excludes the store's fixed costs (histograms, buffers).
            let (h1, r1, _) = heap_of_full_store(policy, dim, cache);
            let (h2, r2, own) = heap_of_full_store(policy, dim, 2 * cache);
            let marginal = (h2 - h1) / (r2 - r1) as f64;
            let whole = h2 / r2 as f64;
            println!(
                "bookkeeping {policy:>5} dim {dim:>3}: {r2:>7} rows cached: \
                 {marginal:.2} bytes/row marginal (heap), {whole:.2} bytes/row including \
                 the store's fixed costs, {own:.2} bytes/row by the cache's own count"
            );
            assert!(
                marginal <= 16.0,
                "{policy} dim {dim}: {marginal:.2} bytes per row"
            );
            assert!(own <= 16.0, "{policy} dim {dim}: own count {own:.2}");
        }
    }
}

/// With huge pages asked for (the default), a shard's rows of 4 MiB or
/// more are a mapping of their own: against the same store without, the
/// heap holds the payload less and the same bookkeeping.
#[test]
fn large_slabs_with_huge_pages_are_off_the_heap() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 4 shards of 8 MiB of 512-byte rows: 16,384 rows each.
    let (on, rows, own_on) = heap_of_full_store_with(PolicyKind::Lru, 128, 32 << 20, Some(4), true);
    let (off, rows_off, own_off) =
        heap_of_full_store_with(PolicyKind::Lru, 128, 32 << 20, Some(4), false);
    assert_eq!(rows, rows_off);
    let payload = (rows * 512) as f64;
    // `on` and `off` are the heaps less the payload.
    let (heap_on, heap_off) = (on + payload, off + payload);
    println!(
        "{rows} rows cached: {:.2} heap bytes/row with huge pages, {:.2} without",
        heap_on / rows as f64,
        heap_off / rows as f64
    );
    assert_eq!(own_on, own_off, "the same bookkeeping");
    assert!(
        (heap_off - heap_on - payload).abs() < 0.02 * payload,
        "{heap_on} heap bytes with huge pages, {heap_off} without, for {payload} of rows"
    );
}

/// What a cache reports as its bookkeeping (`bookkeeping_bytes`) accounts
/// for the heap it takes per cached row, for every policy the store runs,
/// ghost queues included (ARC's, S3-FIFO's).
#[test]
fn reported_bookkeeping_covers_the_heap_of_every_store_policy() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for policy in [
        PolicyKind::Lru,
        PolicyKind::Fifo,
        PolicyKind::Clock,
        PolicyKind::Sieve,
        PolicyKind::Lfu,
        PolicyKind::Arc,
        PolicyKind::S3Fifo,
    ] {
        let (h1, r1, _) = heap_of_full_store(policy, 64, 3 << 20);
        let (h2, r2, own) = heap_of_full_store(policy, 64, 6 << 20);
        let marginal = (h2 - h1) / (r2 - r1) as f64;
        println!("{policy:>6}: {marginal:.2} bytes/row on the heap, {own:.2} reported");
        assert!(
            own >= 0.9 * marginal,
            "{policy}: reports {own:.2} bytes a row of the {marginal:.2} it takes"
        );
    }
}

/// The row log's map, which the cache budget does not count: the heap it
/// takes per logged row, by the counting allocator, against what
/// `Stats::ssd.log_map_bytes` reports; and given back by a merge.
#[test]
fn the_row_log_map_costs_at_most_16_bytes_a_logged_row_and_is_reported() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let dim = 16u32; // 64-byte rows: 56 to a log block
    let mut cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 2_000_000, dim).init(Init::Zeros))
        .dram_capacity(64 << 10)
        .io_engine(IoEngineKind::Psync)
        .build();
    cfg.ssd.row_log = Some(embtier::ByteSize(64 << 20));
    cfg.ssd.merge_in_background = false;
    let store = Store::create(dir.path().join("s"), cfg).unwrap();
    // Scattered distinct rows (an odd stride over the table).
    let n = 200_000u64;
    let ids: Vec<u64> = (0..n).map(|i| i * 9 % 2_000_000).collect();
    let vals = vec![1.0f32; 4096 * dim as usize];
    let write = |ids: &[u64]| {
        for chunk in ids.chunks(4096) {
            store
                .update("t", chunk, &vals[..chunk.len() * dim as usize])
                .unwrap();
        }
        store.checkpoint().unwrap();
    };
    // The first rows settle the store's buffers; the rest are measured.
    write(&ids[..20_000]);
    let before = LIVE.load(Ordering::SeqCst);
    let reported_before = store.stats().table("t").unwrap().ssd.log_map_bytes;
    write(&ids[20_000..]);
    let t = store.stats().table("t").unwrap().ssd.clone();
    assert_eq!(t.logged_rows, n, "every row logged: {t:?}");
    let grown = (LIVE.load(Ordering::SeqCst) - before) as f64;
    let reported = (t.log_map_bytes - reported_before) as f64;
    let rows = (n - 20_000) as f64;
    println!(
        "row-log map: {:.2} bytes a logged row by the heap, {:.2} reported \
         ({} rows logged, {} bytes reported in all)",
        grown / rows,
        reported / rows,
        t.logged_rows,
        t.log_map_bytes
    );
    assert!(
        grown / rows <= 24.0,
        "{:.2} bytes a logged row",
        grown / rows
    );
    assert!(
        (reported - grown).abs() <= 0.25 * grown,
        "reported {reported} bytes, the heap grew {grown}"
    );
    let c = store.merge_row_log().unwrap();
    assert_eq!(c.row_log_blocks, 0, "{c:?}");
    let t = store.stats().table("t").unwrap().ssd.clone();
    assert_eq!(
        (t.logged_rows, t.log_map_bytes),
        (0, 0),
        "the merge gives the map back"
    );
}

/// A store of one zero-initialised table "t" of `rows` rows of `dim`
/// floats, with a DRAM cache of `cache` bytes, created in `dir`.
fn one_table_store(dir: &std::path::Path, dim: u32, cache: usize, rows: u64) -> Store {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", rows, dim).init(Init::Zeros))
        .dram_capacity(cache as u64)
        .io_engine(IoEngineKind::Psync)
        .build();
    Store::create(dir.join("s"), cfg).unwrap()
}

/// A checkpoint of a cache whose every row is dirty (a training step
/// writes every row it reads) holds little beyond the cache while it
/// writes them: the flush takes rows a few MiB at a time, and the pending
/// maps it grew give their room back. Before, it took 64 MiB of rows at a
/// time and copied them into a doubling vector: about 3x that at its peak.
#[test]
fn a_checkpoint_of_a_dirty_cache_allocates_little_beyond_it() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (dim, cache) = (64u32, 64usize << 20);
    let rows = (cache / (dim as usize * 4)) as u64;
    let store = one_table_store(dir.path(), dim, cache, rows * 4);
    // Every other row of twice the cache: spread over the groups, as a
    // hashed hot set is, so the flush cannot write whole groups home.
    let ids: Vec<u64> = (0..rows).map(|i| 2 * i).collect();
    let vals = vec![0.5f32; 4096 * dim as usize];
    for chunk in ids.chunks(4096) {
        store
            .update("t", chunk, &vals[..chunk.len() * dim as usize])
            .unwrap();
    }
    let dirty = store.dirty_rows();
    assert!(dirty > rows * 9 / 10, "{dirty} of {rows} rows dirty");
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let c = store.checkpoint().unwrap();
    let peak = (PEAK.load(Ordering::SeqCst) - before) as f64 / (1 << 20) as f64;
    let after = (LIVE.load(Ordering::SeqCst) - before) as f64 / (1 << 20) as f64;
    eprintln!(
        "checkpoint of {dirty} dirty rows ({} MiB): heap peak {peak:.1} MiB above the \
         store's, {after:.1} MiB still held after it ({c:?})",
        (dirty * dim as u64 * 4) >> 20
    );
    assert_eq!(store.dirty_rows(), 0);
    // What it reports waiting: at least one flush chunk (8 MiB), and no
    // more than the heap it took (a row's bytes are part of its cost).
    let waited = c.pending_peak_bytes as f64 / (1 << 20) as f64;
    assert!(
        (8.0..=peak).contains(&waited),
        "reported {waited:.1} MiB waiting at once, heap peak {peak:.1} MiB"
    );
    assert!(
        peak < 40.0,
        "a checkpoint's heap peak of {peak:.1} MiB beyond the cache"
    );
    assert!(after < 16.0, "{after:.1} MiB held after the checkpoint");
}

/// A snapshot checkpoint while training goes on (W5 in miniature: a
/// thread looks up and updates a hot set larger than the cache, so that
/// rows are evicted dirty, written while old, and read back meanwhile):
/// what the checkpoint holds beyond the cache is its copies of old rows
/// and the rows evicted during it, each held once. The write-back used to
/// copy every pending row into one buffer before writing: twice them.
#[test]
fn a_checkpoint_beside_training_holds_each_pending_row_once() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (dim, cache) = (64u32, 32usize << 20);
    let rows = (cache / (dim as usize * 4)) as u64;
    let store = one_table_store(dir.path(), dim, cache, rows * 8);
    // A hot set of 1.5x the cache, spread over the groups; the cache fills
    // with dirty rows first.
    let hot: Vec<u64> = (0..rows * 3 / 2)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % (rows * 8))
        .collect();
    let vals = vec![0.25f32; 4096 * dim as usize];
    let train = |k: usize, out: &mut [f32]| {
        let chunk = &hot[(k * 4096) % (hot.len() - 4096)..][..4096];
        store.lookup("t", chunk, out).unwrap();
        store.update("t", chunk, &vals).unwrap();
    };
    let mut out = vec![0f32; 4096 * dim as usize];
    for k in 0..2 * hot.len() / 4096 {
        train(k, &mut out);
    }
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (c, steps) = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let mut k = 0;
            while !done.load(Ordering::SeqCst) {
                train(k, &mut out);
                k += 1;
            }
            k
        });
        // Let training run into the checkpoint's window.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let c = store.checkpoint().unwrap();
        done.store(true, Ordering::SeqCst);
        (c, t.join().unwrap())
    });
    let st = store.stats();
    let t = st.table("t").unwrap();
    let peak = (PEAK.load(Ordering::SeqCst) - before) as f64 / (1 << 20) as f64;
    eprintln!(
        "checkpoint beside {steps} training steps: heap peak {peak:.1} MiB above the store's \
         (cache {} MiB, pending limit {} rows; {c:?})",
        cache >> 20,
        t.ssd.pending_limit_rows
    );
    assert!(steps > 0, "training ran beside the checkpoint");
    let waited = c.pending_peak_bytes as f64 / (1 << 20) as f64;
    assert!(
        waited > 0.0 && waited <= peak,
        "reported {waited:.1} MiB waiting at once, heap peak {peak:.1} MiB"
    );
    assert!(
        peak < (cache >> 20) as f64 * 0.6,
        "a checkpoint beside training peaked {peak:.1} MiB beyond a {} MiB cache",
        cache >> 20
    );
}
