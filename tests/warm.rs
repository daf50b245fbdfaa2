//! Warm restarts: a checkpoint records which rows each cache tier holds
//! (`hot.emb`) and, with `warm_rows` (the default), their bytes
//! (`hot-rows.emb`). An open at that checkpoint puts the bytes back before
//! it returns; otherwise it reads the rows back from the data file in the
//! background. Either way a restarted trainer finds its hot set where it
//! left it, and the values are the committed ones, whatever the hints say.

mod common;

use embtier::{
    Init, IoEngineKind, OpenOptionsExt, PolicyKind, Store, StoreConfig, TableConfig, TierConfig,
};

const DIM: u32 = 16;

/// A store whose open reads the hot set's ids back from the data file
/// (`warm_rows` off): the path every test but the hot rows' takes.
fn config(tiers: Vec<TierConfig>) -> StoreConfig {
    config_rows(tiers, false)
}

fn config_rows(tiers: Vec<TierConfig>, warm_rows: bool) -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", 400_000, DIM).init(Init::Uniform { scale: 0.5 }))
        .tiers(tiers)
        .dram_shards(4)
        .io_engine(IoEngineKind::Psync)
        .warm_rows(warm_rows)
        .build()
}

fn rb() -> u64 {
    TableConfig::new("t", 1, DIM).row_bytes()
}

/// Ids spread over the table: one in 97, so each sits in its own group.
fn hot(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 97).collect()
}

#[test]
fn a_reopened_store_reads_its_hot_set_back() {
    reopened_store_warms(false, false);
}

/// With the hot rows, the same rows come back with the same values, and
/// nothing is read from the data file: they come from `hot-rows.emb`.
#[test]
fn a_reopened_store_puts_its_hot_rows_back() {
    reopened_store_warms(true, true);
}

/// Without the hot rows, rows whose newest copy is in the row log come
/// back from the open's reads of the log: nothing is read after it.
#[test]
fn a_reopened_store_puts_its_logged_hot_rows_back_from_the_log() {
    reopened_store_warms(false, true);
}

/// `cfg` without the row log: written rows go home, and a warm-up reads
/// them from there.
fn without_log(mut cfg: StoreConfig) -> StoreConfig {
    cfg.ssd.row_log = Some(embtier::ByteSize(0));
    cfg
}

/// A store reopened warm (`warm_rows`: with hot rows; `log`: with the
/// row log, which then holds the rows written).
fn reopened_store_warms(warm_rows: bool, log: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config_rows(
        vec![TierConfig::dram(3000 * rb(), PolicyKind::Lru)],
        warm_rows,
    );
    let cfg = if log { cfg } else { without_log(cfg) };
    let s = Store::create(&path, cfg).unwrap();
    let ids = hot(2000);
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.apply_sgd("t", &ids, &vec![0.25; out.len()], 1.0).unwrap();
    s.lookup("t", &ids, &mut out).unwrap();
    let resident = s.stats().table("t").unwrap().dram().resident_rows;
    let c = s.checkpoint().unwrap();
    assert_eq!(c.hot_rows, resident, "every resident row recorded");
    let rows_bytes = if warm_rows {
        32 + resident * (8 + rb()) + 32 * (1 + resident.div_ceil((1 << 20) / (8 + rb())))
    } else {
        0
    };
    assert_eq!(c.hot_row_bytes, rows_bytes, "{c:?}");
    drop(s);

    let s = Store::open(&path).unwrap();
    let warmed = s.wait_warm().unwrap();
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!((warmed, t.warmed), (resident, resident));
    assert_eq!(t.lookups, 0, "a warm-up is not a lookup");
    // Every hot row is now a hit, with the committed value.
    let mut again = vec![0f32; out.len()];
    s.lookup("t", &ids, &mut again).unwrap();
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!(t.dram().hits, ids.len() as u64);
    match (warm_rows, log) {
        (true, _) => assert_eq!(t.ssd.rows_read, 0, "all from the hot rows"),
        (false, false) => assert_eq!(t.ssd.rows_read, resident, "only the warm-up read"),
        // The rows the checkpoint logged came from the log's reads at
        // open; the warm-up read the others, from their home.
        (false, true) => assert!(
            t.ssd.log_rows_read == 0 && t.ssd.rows_read < resident,
            "{} rows read, {} of them from the log, of {resident}: the logged ones \
             come from the open's reads of the log",
            t.ssd.rows_read,
            t.ssd.log_rows_read
        ),
    }
    assert_eq!(again, out);
}

/// With two tiers, each row comes back to the tier it was in: the first
/// tier's rows are first-tier hits again, the second's second-tier hits.
#[test]
fn rows_come_back_to_their_own_tier() {
    rows_come_back_to_their_own_tier_with(false);
}

/// The same from the hot rows: the PMem tier's contents come back too,
/// though its file is made anew at an open that cannot use its stamps.
#[test]
fn hot_rows_come_back_to_their_own_tier() {
    rows_come_back_to_their_own_tier_with(true);
}

fn rows_come_back_to_their_own_tier_with(warm_rows: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config_rows(
        vec![
            TierConfig::dram(1000 * rb(), PolicyKind::Lru),
            TierConfig::pmem(None, 4000 * rb(), PolicyKind::Lru),
        ],
        warm_rows,
    );
    let s = Store::create(&path, cfg).unwrap();
    let ids = hot(3000);
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.lookup("t", &ids, &mut out).unwrap();
    // The last 500 looked up are the most recent: in the first tier.
    let recent = &ids[2500..];
    s.lookup("t", recent, &mut out[..recent.len() * DIM as usize])
        .unwrap();
    let before = s.stats().table("t").unwrap().clone();
    s.checkpoint().unwrap();
    drop(s);
    // As after a reboot: the PMem tier's slot stamps do not serve (the
    // same boot's open would take its rows back where they lie, as
    // `tests/kept.rs` checks), and the hot rows put both tiers back.
    let stamps = path.join(format!("{}.stamps", embtier::PMEM_FILE));
    std::fs::remove_file(&stamps).unwrap();
    let s = Store::open(&path).unwrap();
    assert_eq!(s.rows_kept_at_open(), 0);
    s.wait_warm().unwrap();
    let after = s.stats().table("t").unwrap().clone();
    for k in 0..2 {
        assert_eq!(
            after.tiers[k].resident_rows, before.tiers[k].resident_rows,
            "tier {k}"
        );
    }
    s.lookup("t", recent, &mut out[..recent.len() * DIM as usize])
        .unwrap();
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!(t.tiers[0].hits, recent.len() as u64, "first tier's rows");
    s.lookup("t", &ids[..2500], &mut out[..2500 * DIM as usize])
        .unwrap();
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!(t.warmed, 3000);
    let read = if warm_rows { 0 } else { t.warmed };
    assert_eq!(t.ssd.rows_read, read, "nothing read but the warm-up");
    let mut again = vec![0f32; out.len()];
    s.lookup("t", &ids, &mut again).unwrap();
    let mut want = vec![0f32; out.len()];
    let cold = OpenOptionsExt {
        cold: true,
        ..Default::default()
    };
    drop(s);
    let s = Store::open_ext(&path, cold).unwrap();
    s.lookup("t", &ids, &mut want).unwrap();
    assert_eq!(again, want, "the committed values");
}

/// A hot set is a hint: damaged, stale or refused, the store opens cold
/// or warms from it, and always serves the committed values.
#[test]
fn a_damaged_or_stale_hot_set_costs_only_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config(vec![TierConfig::dram(3000 * rb(), PolicyKind::Lru)]);
    let s = Store::create(&path, cfg).unwrap();
    let ids = hot(1000);
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.lookup("t", &ids, &mut out).unwrap();
    let recorded = s.checkpoint().unwrap().hot_rows;
    let stale = std::fs::read(path.join(embtier::HOT_FILE)).unwrap();
    // Change the rows after the hot set was written, and checkpoint
    // without rewriting it: put the first hot set back (a crash between
    // the commit and the hot set's write leaves it so).
    s.update("t", &ids, &vec![3.0; out.len()]).unwrap();
    s.checkpoint().unwrap();
    drop(s);
    std::fs::write(path.join(embtier::HOT_FILE), &stale).unwrap();
    let s = Store::open(&path).unwrap();
    assert_eq!(s.wait_warm().unwrap(), recorded);
    s.lookup("t", &ids, &mut out).unwrap();
    assert!(
        out.iter().all(|&v| v == 3.0),
        "committed values, not the hint's era"
    );
    drop(s);
    // Damaged: every byte flipped in turn would do; one is enough here,
    // the format's own tests flip every bit.
    let mut bad = stale.clone();
    bad[30] ^= 0x40;
    std::fs::write(path.join(embtier::HOT_FILE), &bad).unwrap();
    let s = Store::open(&path).unwrap();
    assert_eq!(s.wait_warm().unwrap(), 0, "refused: opened cold");
    s.lookup("t", &ids, &mut out).unwrap();
    assert!(out.iter().all(|&v| v == 3.0));
    drop(s);
    // Asked to open cold.
    let cold = OpenOptionsExt {
        cold: true,
        ..Default::default()
    };
    let s = Store::open_ext(&path, cold).unwrap();
    assert_eq!(s.wait_warm().unwrap(), 0);
}

/// Dropping a store while its warm-up runs stops the warm-up and releases
/// the store (it can be opened again at once).
#[test]
fn dropping_a_warming_store_stops_the_warm_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config(vec![TierConfig::dram(150_000 * rb(), PolicyKind::Lru)]);
    let s = Store::create(&path, cfg).unwrap();
    let ids: Vec<u64> = (0..150_000).collect();
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.lookup("t", &ids, &mut out).unwrap();
    let recorded = s.checkpoint().unwrap().hot_rows;
    drop(s);
    for _ in 0..3 {
        let s = Store::open(&path).unwrap();
        drop(s);
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(s.wait_warm().unwrap(), recorded);
}

/// Lookups racing the warm-up: the warm-up's installs find rows the
/// lookups brought in, and those finds are not hits; every tier's hits stay
/// within its lookups, and the values are the committed ones.
#[test]
fn lookups_during_the_warm_up_count_only_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config(vec![TierConfig::dram(60_000 * rb(), PolicyKind::Lru)]);
    let s = Store::create(&path, cfg).unwrap();
    let ids: Vec<u64> = (0..50_000).collect();
    let mut want = vec![0f32; ids.len() * DIM as usize];
    s.lookup("t", &ids, &mut want).unwrap();
    s.checkpoint().unwrap();
    drop(s);
    let s = Store::open(&path).unwrap();
    let mut out = vec![0f32; want.len()];
    for _ in 0..3 {
        s.lookup("t", &ids, &mut out).unwrap();
        assert_eq!(out, want);
    }
    s.wait_warm().unwrap();
    let t = s.stats().table("t").unwrap().clone();
    let d = t.dram();
    assert_eq!(d.lookups, 3 * ids.len() as u64);
    assert!(d.hits <= d.lookups, "{d:?}");
    assert_eq!(d.hits + d.misses, d.lookups, "{d:?}");
    // Every row a lookup read from SSD was a miss of that lookup.
    let read_by_lookups = t.ssd.rows_read - t.warmed;
    assert!(
        d.misses >= read_by_lookups,
        "{d:?}, {read_by_lookups} read by lookups"
    );
}

/// A hot set that fills most of its span of the table (a large cache after
/// long training) is read back in a few sequential reads, not one per
/// group, with the committed values.
#[test]
fn a_dense_hot_set_comes_back_in_sequential_reads() {
    use embtier::io::fault::FaultPlan;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config(vec![TierConfig::dram(60_000 * rb(), PolicyKind::Lru)]);
    let s = Store::create(&path, cfg.clone()).unwrap();
    // Every third row of the first 150,000: every group of that span.
    let ids: Vec<u64> = (0..50_000).map(|i| i * 3).collect();
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.apply_sgd("t", &ids, &vec![0.5; out.len()], 1.0).unwrap();
    s.lookup("t", &ids, &mut out).unwrap();
    // The cold fill brings in neighbours of the rows read, too.
    let c = s.checkpoint().unwrap();
    assert!(c.hot_rows >= ids.len() as u64, "{c:?}");
    drop(s);
    let plan = Arc::new(FaultPlan::default());
    let s = Store::open_with(&path, cfg, common::faulty_opts(&plan, false)).unwrap();
    let r0 = plan.reads.load(Ordering::SeqCst);
    assert_eq!(s.wait_warm().unwrap(), c.hot_rows);
    s.check_written().unwrap();
    let reads = plan.reads.load(Ordering::SeqCst) - r0;
    // 150,000 rows of 72 bytes: about 2,650 groups, in 4 MiB windows.
    assert!(reads < 100, "{reads} reads to bring back a dense hot set");
    let mut again = vec![0f32; out.len()];
    s.lookup("t", &ids, &mut again).unwrap();
    assert_eq!(again, out);
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!(t.dram().hits, ids.len() as u64, "all back in DRAM");
}

/// Hot rows are used only for the checkpoint that wrote them, and only
/// chunk by chunk as far as each passes its checks: a file of an older
/// generation is ignored, one damaged or cut short is used up to the bad
/// chunk and the rest of the hot set is read from the data file. Every
/// value served is the committed one.
#[test]
fn stale_damaged_or_cut_hot_rows_are_refused_chunk_by_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    // Without the row log, the rows the hot rows do not put back are read
    // from the data file after the open, and counted.
    let cfg = without_log(config_rows(
        vec![TierConfig::dram(60_000 * rb(), PolicyKind::Lru)],
        true,
    ));
    let s = Store::create(&path, cfg.clone()).unwrap();
    let ids: Vec<u64> = (0..50_000).collect();
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.apply_sgd("t", &ids, &vec![0.5; out.len()], 1.0).unwrap();
    s.lookup("t", &ids, &mut out).unwrap();
    let old = s.checkpoint().unwrap();
    assert!(old.hot_row_bytes > 0);
    let rows_file = path.join(embtier::HOT_ROWS_FILE);
    let stale = std::fs::read(&rows_file).unwrap();
    // New values for every other row, then the checkpoint that counts.
    let half: Vec<u64> = ids.iter().copied().filter(|i| i % 2 == 0).collect();
    s.update("t", &half, &vec![3.0; half.len() * DIM as usize])
        .unwrap();
    let c = s.checkpoint().unwrap();
    let mut want = vec![0f32; out.len()];
    s.lookup("t", &ids, &mut want).unwrap();
    assert_ne!(want, out);
    let fresh = std::fs::read(&rows_file).unwrap();
    drop(s);

    let per = (1u64 << 20) / (8 + rb());
    let resident = c.hot_rows;
    assert!(resident > 3 * per, "{resident} rows: several chunks");
    // (file, rows the open may put back from it)
    let chunk_at = |k: u64| 32 + k * (32 + per * (8 + rb()));
    let mut damaged = fresh.clone();
    damaged[(chunk_at(2) + 32 + 100) as usize] ^= 1;
    let cut = fresh[..(chunk_at(3) + 500) as usize].to_vec();
    let mut wrong_generation = fresh.clone();
    // A chunk from another generation, CRC and all: refused by generation.
    let g = (c.generation + 7).to_le_bytes();
    wrong_generation[chunk_at(1) as usize + 8..chunk_at(1) as usize + 16].copy_from_slice(&g);
    for (name, file, from_file) in [
        ("whole", fresh.clone(), resident),
        ("stale", stale, 0),
        ("damaged", damaged, 2 * per),
        ("cut", cut, 3 * per),
        ("wrong generation", wrong_generation, per),
    ] {
        std::fs::write(&rows_file, &file).unwrap();
        let s = Store::open(&path).unwrap();
        assert_eq!(s.wait_warm().unwrap(), resident, "{name}");
        let t = s.stats().table("t").unwrap().clone();
        assert_eq!(t.warmed, resident, "{name}");
        assert_eq!(t.ssd.rows_read, resident - from_file, "{name}");
        let mut got = vec![0f32; out.len()];
        s.lookup("t", &ids, &mut got).unwrap();
        assert!(got == want, "{name}: committed values");
        let t = s.stats().table("t").unwrap().clone();
        assert_eq!(t.dram().hits, ids.len() as u64, "{name}: all back");
        drop(s);
        // The open's own checkpoint-free drop leaves the file as it was
        // written here; put the good one back for the next case.
        std::fs::write(&rows_file, &fresh).unwrap();
    }
}

/// A snapshot checkpoint taken while training goes on leaves out of
/// `hot-rows.emb` the rows updated after its moment (their bytes in
/// memory are not the committed ones), and under training those are the
/// hottest rows. A restart from that checkpoint (a crash right after it,
/// as a SIGKILL leaves it) still brings back every row the checkpoint
/// recorded: the hot rows from the file, the rest from the data file in
/// the background, with the committed values.
#[test]
fn rows_left_out_of_the_hot_rows_come_back_from_the_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = config_rows(vec![TierConfig::dram(30_000 * rb(), PolicyKind::Lru)], true);
    let s = Store::create(&path, cfg).unwrap();
    let ids: Vec<u64> = (0..20_000).map(|i| i * 7).collect();
    let n = ids.len() * DIM as usize;
    s.update("t", &ids, &vec![1.0; n]).unwrap();
    // The checkpoint's moment, then training dirties a fifth of the rows
    // before it writes them and its hot rows.
    let hot: Vec<u64> = ids.iter().copied().filter(|i| i % 5 == 0).collect();
    let c = std::thread::scope(|sc| {
        let begun = s.begin_checkpoint().unwrap();
        s.update("t", &hot, &vec![9.0; hot.len() * DIM as usize])
            .unwrap();
        sc.spawn(move || begun.finish()).join().unwrap()
    })
    .unwrap();
    let resident = ids.len() as u64;
    assert_eq!(c.hot_rows, resident, "every resident row recorded");
    let per_row = 8 + rb();
    let in_file = (c.hot_row_bytes - 32) / per_row;
    assert!(
        in_file < resident && in_file >= resident - hot.len() as u64,
        "{in_file} of {resident} rows in the hot rows: the updated ones left out"
    );
    // A crash right after the checkpoint: nothing more is written.
    drop(s);

    let s = Store::open(&path).unwrap();
    assert_eq!(s.wait_warm().unwrap(), resident, "every recorded row back");
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!(t.warmed, resident);
    assert_eq!(t.lookups, 0, "a warm-up is not a lookup");
    let mut got = vec![0f32; n];
    s.lookup("t", &ids, &mut got).unwrap();
    assert!(got.iter().all(|&v| v == 1.0), "the committed values");
    let t = s.stats().table("t").unwrap().clone();
    assert_eq!(t.dram().hits, resident, "all back in DRAM");
}
