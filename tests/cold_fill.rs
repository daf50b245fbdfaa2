//! Filling a cold cache: a miss's block read installs the other rows of its
//! group while the first tier has free room, never evicts for them, stops
//! once the cache is full, and never changes what a lookup returns (the
//! model and concurrency tests run with it on; here its counts are pinned).

use embtier::{Init, IoEngineKind, OpenOptionsExt, Store, StoreConfig, TableConfig};

/// dim 64 f32: 256-byte rows, 15 to a 4 KiB group.
const DIM: u32 = 64;
const PER_GROUP: u64 = 15;

fn store(dir: &std::path::Path, cache_rows: u64) -> Store {
    let t = TableConfig::new("t", 10_000, DIM).init(Init::Uniform { scale: 0.5 });
    let rb = t.row_bytes();
    let cfg = StoreConfig::builder()
        .table(t)
        .dram_capacity(cache_rows * rb)
        .dram_shards(1)
        .io_engine(IoEngineKind::Psync)
        .build();
    Store::create(dir, cfg).unwrap()
}

fn figures(s: &Store) -> (u64, u64, u64, u64) {
    let st = s.stats();
    let t = st.table("t").unwrap();
    (
        t.filled,
        t.dram().hits,
        t.ssd.rows_read,
        t.dram().resident_rows,
    )
}

#[test]
fn a_miss_fills_its_group_while_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("s"), 1000);
    let mut out = vec![0f32; PER_GROUP as usize * DIM as usize];
    s.lookup("t", &[3], &mut out[..DIM as usize]).unwrap();
    // One row asked for and read; the group's 14 others installed.
    assert_eq!(figures(&s), (PER_GROUP - 1, 0, 1, PER_GROUP));
    // The whole group is now a hit, with no read, and equals what a store
    // without the fill returns (another store, same seed, row by row).
    let ids: Vec<u64> = (0..PER_GROUP).collect();
    s.lookup("t", &ids, &mut out).unwrap();
    assert_eq!(figures(&s), (PER_GROUP - 1, PER_GROUP, 1, PER_GROUP));
    let other = store(&dir.path().join("o"), 1);
    let mut one = vec![0f32; DIM as usize];
    for (k, &id) in ids.iter().enumerate() {
        other.lookup("t", &[id], &mut one).unwrap();
        assert_eq!(
            &out[k * DIM as usize..(k + 1) * DIM as usize],
            &one[..],
            "row {id}"
        );
    }
}

#[test]
fn the_fill_never_evicts_and_stops_when_the_cache_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("s"), 20);
    let mut one = vec![0f32; DIM as usize];
    s.lookup("t", &[0], &mut one).unwrap(); // 1 read + 14 filled = 15
    s.lookup("t", &[PER_GROUP], &mut one).unwrap(); // 1 read, 4 filled: full
    let (filled, _, read, resident) = figures(&s);
    assert_eq!((filled, read, resident), (18, 2, 20));
    assert_eq!(s.stats().table("t").unwrap().dram().evictions, 0);
    // Full: later misses fill nothing, however much room eviction makes.
    for g in 2..50 {
        s.lookup("t", &[g * PER_GROUP], &mut one).unwrap();
    }
    let (filled, _, read, resident) = figures(&s);
    assert_eq!((filled, read, resident), (18, 50, 20));
}

/// A row whose newest copy is not its home group (dirty in the cache,
/// pending, or in the row log) is never overwritten or shadowed by a fill.
#[test]
fn the_fill_never_brings_back_an_older_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = store(&path, 4);
    // Rows 1 and 2 updated: they go dirty, are evicted by later traffic,
    // and written back (to the row log: their group is partly covered).
    let v1 = vec![7.0f32; DIM as usize];
    let v2 = vec![9.0f32; DIM as usize];
    s.update("t", &[1], &v1).unwrap();
    s.update("t", &[2], &v2).unwrap();
    let mut one = vec![0f32; DIM as usize];
    for g in 10..200 {
        s.lookup("t", &[g * PER_GROUP], &mut one).unwrap();
    }
    s.checkpoint().unwrap();
    drop(s);
    // Cold again, with room: a miss on row 0 reads group 0 from home, whose
    // copies of rows 1 and 2 may be older than the row log's.
    // Opened cold: a warm restart would bring back the hot set instead.
    let cold = OpenOptionsExt {
        cold: true,
        ..Default::default()
    };
    let s = Store::open_ext(&path, cold).unwrap();
    let logged = s.stats().table("t").unwrap().ssd.logged_rows;
    assert!(logged >= 2, "rows 1 and 2 are in the row log: {logged}");
    s.lookup("t", &[0], &mut one).unwrap();
    // Rows 3, 4 and 5 were filled (the cache holds 4); 1 and 2 were skipped
    // (their home copies are older than the log's): reading them is a miss
    // served from the row log.
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!((t.filled, t.ssd.log_rows_read), (3, 0));
    s.lookup("t", &[1], &mut one).unwrap();
    assert_eq!(one, v1);
    s.lookup("t", &[2], &mut one).unwrap();
    assert_eq!(one, v2);
    assert_eq!(s.stats().table("t").unwrap().ssd.log_rows_read, 2);
}
