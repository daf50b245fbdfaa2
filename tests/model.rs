//! Model-based test: random sequences of lookup, lookup_many, update, apply_sgd, flush and
//! close-then-reopen against a plain in-memory model, for every tier
//! configuration and both I/O engines. Results must be bit-identical.

mod common;

use std::collections::HashMap;

use common::{engines, sum_in_order, with_engine, Rng};
use embtier::format::InitKind;
use embtier::{
    Init, IoEngineKind, MemoryKind, Placement, PolicyKind, Store, StoreConfig, TableBatch,
    TableConfig, TierConfig,
};

/// The reference: every row's current value, with lazy initial values.
struct Model {
    tables: Vec<(String, u64, usize, Init, u64)>, // name, rows, dim, init, seed
    rows: HashMap<(usize, u64), Vec<f32>>,
}

impl Model {
    fn new(cfg: &StoreConfig) -> Model {
        Model {
            tables: cfg
                .tables
                .iter()
                .map(|t| {
                    (
                        t.name.clone(),
                        t.rows,
                        t.dim as usize,
                        t.init,
                        t.effective_seed(),
                    )
                })
                .collect(),
            rows: HashMap::new(),
        }
    }

    fn row(&self, t: usize, id: u64) -> Vec<f32> {
        if let Some(r) = self.rows.get(&(t, id)) {
            return r.clone();
        }
        let (_, _, dim, init, seed) = &self.tables[t];
        let mut v = vec![0f32; *dim];
        let (kind, scale) = match init {
            Init::Zeros => (InitKind::Zeros, 0.0),
            Init::Uniform { scale } => (InitKind::Uniform, *scale),
        };
        embtier::init::init_row(kind, scale, *seed, id, &mut v);
        v
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn tables(placements: [Placement; 3]) -> Vec<TableConfig> {
    vec![
        // 32-byte rows: 127 rows per block.
        TableConfig::new("small_rows", 3000, 8).placement(placements[0]),
        // 4400-byte rows: one row over two blocks.
        TableConfig::new("wide_rows", 60, 1100)
            .init(Init::Zeros)
            .placement(placements[1]),
        // 12-byte rows, uniform init with a set seed.
        TableConfig::new("odd_dim", 5000, 3)
            .init(Init::Uniform { scale: 0.5 })
            .seed(99)
            .placement(placements[2]),
    ]
}

fn configs() -> Vec<(&'static str, StoreConfig)> {
    use Placement::Cached;
    const PINNED_DRAM: Placement = Placement::Pinned(MemoryKind::Dram);
    const PINNED_PMEM: Placement = Placement::Pinned(MemoryKind::Pmem);
    let cached = [Cached, Cached, Cached];
    let mut out = Vec::new();
    // DRAM only: every table pinned to DRAM; SSD is touched only by flush.
    let mut c = StoreConfig::builder().dram_capacity(2 << 20).build();
    c.tables = tables([PINNED_DRAM, PINNED_DRAM, PINNED_DRAM]);
    out.push(("dram-only", c));
    // DRAM + SSD, caches of about a tenth of each table.
    let mut c = StoreConfig::builder().dram_capacity(60_000).build();
    c.tables = tables(cached);
    out.push(("dram+ssd/lru", c));
    // The same with a row log of 8 blocks: it fills within a few
    // write-backs, rows go home, and checkpoints merge it; and with none.
    let mut c = StoreConfig::builder().dram_capacity(60_000).build();
    c.tables = tables(cached);
    c.ssd.row_log = Some(embtier::ByteSize(8 * 4096));
    out.push(("dram+ssd/small-log", c));
    let mut c = StoreConfig::builder().dram_capacity(60_000).build();
    c.tables = tables(cached);
    c.ssd.row_log = Some(embtier::ByteSize(0));
    out.push(("dram+ssd/no-log", c));
    // DRAM + PMem + SSD.
    let mut c = StoreConfig::builder()
        .dram_capacity(40_000)
        .dram_policy(PolicyKind::Sieve)
        .pmem(None, 120_000, PolicyKind::Lru)
        .build();
    c.tables = tables(cached);
    out.push(("dram+pmem+ssd", c));
    // Caches of a few rows: eviction on nearly every access.
    let mut c = StoreConfig::builder()
        .dram_capacity(3 * 32 + 4400 + 2 * 12)
        .pmem(None, 2 * 32 + 4400 + 3 * 12, PolicyKind::Fifo)
        .dram_policy(PolicyKind::Sieve)
        .dram_shards(1)
        .build();
    let mut ts = tables(cached);
    ts[0] = ts[0].clone().dram_bytes(3 * 32).pmem_bytes(2 * 32);
    ts[1] = ts[1].clone().dram_bytes(4400).pmem_bytes(4400);
    ts[2] = ts[2].clone().dram_bytes(2 * 12).pmem_bytes(3 * 12);
    c.tables = ts;
    out.push(("tiny-caches", c));
    // Pinned to DRAM, pinned to PMem, and cached side by side.
    let mut c = StoreConfig::builder()
        .dram_capacity(2 << 20)
        .pmem(None, 1 << 20, PolicyKind::Sieve)
        .build();
    c.tables = tables([PINNED_PMEM, PINNED_DRAM, Cached]);
    out.push(("pinned-mix", c));
    // A tier list no `[dram]`/`[pmem]` config can say: a second DRAM tier
    // with its own policy between DRAM and PMem (the shape of a GPU, DRAM,
    // CXL hierarchy), once with caches of a few rows so that rows spill
    // through every tier on nearly every access.
    let mut c = StoreConfig::builder()
        .tiers(vec![
            TierConfig::dram(20_000, PolicyKind::Sieve),
            TierConfig::dram(30_000, PolicyKind::Fifo),
            TierConfig::pmem(None, 60_000, PolicyKind::Lru),
        ])
        .build();
    c.tables = tables(cached);
    out.push(("dram+dram+pmem+ssd", c));
    // The second DRAM tier is split by table size (`dram_bytes` shares only
    // the first DRAM tier): 7 rows of small_rows, 11 of odd_dim, and none
    // of wide_rows, whose victims go straight from the first tier to PMem.
    let mut c = StoreConfig::builder()
        .tiers(vec![
            TierConfig::dram(2 * 32 + 4400 + 2 * 12, PolicyKind::Lru),
            TierConfig::dram(1000, PolicyKind::Clock),
            TierConfig::pmem(None, 3 * 32 + 4400 + 2 * 12, PolicyKind::Sieve),
        ])
        .dram_shards(1)
        .build();
    let mut ts = tables(cached);
    ts[0] = ts[0].clone().dram_bytes(2 * 32).pmem_bytes(3 * 32);
    ts[1] = ts[1].clone().dram_bytes(4400).pmem_bytes(4400);
    ts[2] = ts[2].clone().dram_bytes(2 * 12).pmem_bytes(2 * 12);
    c.tables = ts;
    out.push(("tiny-three-tiers", c));
    out
}

/// What `one_op` asks of its caller.
enum Then {
    Nothing,
    Checkpoint,
    Reopen,
}

/// One random operation on `s`, checked against `model`: lookups compare,
/// updates, SGD steps and (with `import`) bulk loads apply to both; a
/// checkpoint or a reopen is left to the caller.
fn one_op(
    name: &str,
    s: &Store,
    model: &mut Model,
    rng: &mut Rng,
    step: usize,
    import: bool,
) -> Then {
    let ntables = model.tables.len();
    let t = rng.below(ntables as u64) as usize;
    let (tname, rows, dim, _, _) = model.tables[t].clone();
    // Ids: a hot set plus uniform ones, with duplicates.
    let n = 1 + rng.below(40) as usize;
    let ids: Vec<u64> = (0..n)
        .map(|_| {
            if rng.below(3) == 0 {
                rng.below(rows)
            } else {
                rng.below(rows.min(50))
            }
        })
        .collect();
    match rng.below(100) {
        0..=14 => {
            // Several tables (a table may repeat) in one lookup_many.
            let k = 1 + rng.below(4) as usize;
            let parts: Vec<(usize, Vec<u64>)> = (0..k)
                .map(|_| {
                    let t = rng.below(ntables as u64) as usize;
                    let rows = model.tables[t].1;
                    let n = rng.below(30) as usize;
                    (t, (0..n).map(|_| rng.below(rows)).collect())
                })
                .collect();
            let mut outs: Vec<Vec<f32>> = parts
                .iter()
                .map(|(t, ids)| vec![f32::NAN; ids.len() * model.tables[*t].2])
                .collect();
            let mut batches: Vec<TableBatch<'_>> = parts
                .iter()
                .zip(outs.iter_mut())
                .map(|((t, ids), out)| TableBatch::new(&model.tables[*t].0, ids, out))
                .collect();
            s.lookup_many(&mut batches).unwrap();
            for ((t, ids), out) in parts.iter().zip(&outs) {
                let (tname, _, dim, _, _) = &model.tables[*t];
                for (i, &id) in ids.iter().enumerate() {
                    assert_eq!(
                        bits(&out[i * dim..(i + 1) * dim]),
                        bits(&model.row(*t, id)),
                        "{name}: step {step}: lookup_many {tname}[{id}]"
                    );
                }
            }
        }
        15..=39 => {
            let mut out = vec![f32::NAN; n * dim];
            s.lookup(&tname, &ids, &mut out).unwrap();
            for (i, &id) in ids.iter().enumerate() {
                assert_eq!(
                    bits(&out[i * dim..(i + 1) * dim]),
                    bits(&model.row(t, id)),
                    "{name}: step {step}: lookup {tname}[{id}]"
                );
            }
        }
        53..=59 if import => {
            // A bulk load of a range: whole groups go straight home,
            // over rows that may be cached, dirty, pending or logged.
            let start = rng.below(rows);
            let len = (1 + rng.below(300)).min(rows - start) as usize;
            let vals: Vec<f32> = (0..len * dim).map(|_| rng.small_f32()).collect();
            s.import_rows(&tname, start, &vals).unwrap();
            for i in 0..len {
                model
                    .rows
                    .insert((t, start + i as u64), vals[i * dim..(i + 1) * dim].to_vec());
            }
        }
        40..=52 => {
            let vals: Vec<f32> = (0..n * dim).map(|_| rng.small_f32()).collect();
            s.update(&tname, &ids, &vals).unwrap();
            for (i, &id) in ids.iter().enumerate() {
                model
                    .rows
                    .insert((t, id), vals[i * dim..(i + 1) * dim].to_vec());
            }
        }
        60..=89 => {
            let grads: Vec<f32> = (0..n * dim).map(|_| rng.small_f32()).collect();
            let lr = [1.0f32, 0.5, 0.1][rng.below(3) as usize];
            s.apply_sgd(&tname, &ids, &grads, lr).unwrap();
            // Sum duplicates in order, then apply once.
            for (id, sum) in sum_in_order(&ids, &grads, dim) {
                let mut r = model.row(t, id);
                for (w, g) in r.iter_mut().zip(&sum) {
                    *w -= lr * g;
                }
                model.rows.insert((t, id), r);
            }
        }
        53..=59 => {}
        90..=95 => return Then::Checkpoint,
        _ => return Then::Reopen,
    }
    Then::Nothing
}

fn run_model(name: &str, cfg: StoreConfig, seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut store = Some(Store::create(&path, cfg.clone()).unwrap());
    let mut model = Model::new(&cfg);
    // The rows as of the last committed checkpoint.
    let mut committed = model.rows.clone();
    let mut rng = Rng(seed);
    let mut windows = 0;
    for step in 0..steps {
        let s = store.as_ref().unwrap();
        match one_op(name, s, &mut model, &mut rng, step, true) {
            Then::Nothing => {}
            Then::Checkpoint if rng.below(2) == 0 => {
                s.flush().unwrap();
                committed = model.rows.clone();
            }
            Then::Checkpoint => {
                // A checkpoint begun here and finished after a few more
                // ops: it commits the rows as they were when it began.
                let begun = s.begin_checkpoint().unwrap();
                let mut at_moment = model.rows.clone();
                for k in 0..rng.below(12) {
                    // Bulk imports included: on this thread they go
                    // through the update path while it is unfinished.
                    let k = step * 100 + k as usize;
                    if let Then::Checkpoint | Then::Reopen =
                        one_op(name, s, &mut model, &mut rng, k, true)
                    {
                        // Another checkpoint on this thread would wait for
                        // this one for ever: refused, nothing done.
                        match s.checkpoint() {
                            Err(embtier::Error::CheckpointInProgress { what }) => {
                                assert!(!begun.is_committed());
                                assert_eq!(what, "checkpoint")
                            }
                            // One that had to stop training ran whole in
                            // `begin_checkpoint`: this is the next one.
                            Ok(_) if begun.is_committed() => at_moment = model.rows.clone(),
                            other => panic!("{name}: a checkpoint inside one: {other:?}"),
                        }
                    }
                }
                begun.finish().unwrap();
                committed = at_moment;
                windows += 1;
            }
            Then::Reopen if rng.below(2) == 0 => {
                let s = store.take().unwrap();
                s.flush().unwrap();
                drop(s);
                committed = model.rows.clone();
                store = Some(Store::open(&path).unwrap());
            }
            Then::Reopen => {
                // Closed without a checkpoint, as a crash between
                // checkpoints leaves it: the reopen holds the last one.
                drop(store.take());
                model.rows = committed.clone();
                store = Some(Store::open(&path).unwrap());
            }
        }
    }
    assert!(
        windows > 0 || steps < 200,
        "{name}: no checkpoint finished after ops"
    );
    // Finally every row the model knows, after a last reopen.
    let s = store.take().unwrap();
    s.flush().unwrap();
    assert_eq!(s.dirty_rows(), 0, "{name}: flush leaves nothing dirty");
    drop(s);
    let s = Store::open(&path).unwrap();
    for (&(t, id), want) in &model.rows {
        let (tname, _, dim, _, _) = &model.tables[t];
        let mut out = vec![0f32; *dim];
        s.lookup(tname, &[id], &mut out).unwrap();
        assert_eq!(bits(&out), bits(want), "{name}: final {tname}[{id}]");
    }
    let st = s.stats();
    eprintln!(
        "{name} ({}): {} rows checked; ssd read latency p50 {} ns",
        st.io_engine,
        model.rows.len(),
        st.ssd_read_latency.p50
    );
}

#[test]
fn model_every_tier_configuration() {
    let steps: usize = common::env_or("EMBTIER_MODEL_STEPS", 600) as usize;
    for engine in engines() {
        for (i, (name, cfg)) in configs().into_iter().enumerate() {
            let label = format!("{name}/{engine:?}");
            run_model(&label, with_engine(cfg, engine), 1000 + i as u64, steps);
        }
    }
}

/// Evictions really happen in the tiny configuration, in both tiers, and dirty
/// rows really travel DRAM -> PMem -> SSD.
#[test]
fn tiny_caches_evict_through_every_tier() {
    let (_, cfg) = configs()
        .into_iter()
        .find(|(n, _)| *n == "tiny-caches")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(dir.path().join("s"), with_engine(cfg, IoEngineKind::Psync)).unwrap();
    let ids: Vec<u64> = (0..200).collect();
    let grads = vec![1.0f32; 200 * 8];
    s.apply_sgd("small_rows", &ids, &grads, 1.0).unwrap();
    let mut out = vec![0f32; 200 * 8];
    s.lookup("small_rows", &ids, &mut out).unwrap();
    let st = s.stats();
    let t = st.table("small_rows").unwrap();
    assert!(t.dram().evictions >= 190, "{t:?}");
    assert!(t.dram().dirty_evictions >= 190, "{t:?}");
    assert!(t.pmem().evictions >= 190, "{t:?}");
    assert!(t.ssd.rows_written >= 190, "{t:?}");
    assert!(t.ssd.rows_read >= 190, "{t:?}");
    assert_eq!(t.dram().capacity_rows, 3);
    assert_eq!(t.pmem().capacity_rows, 2);
}

/// In the three-tier configuration rows spill through every tier and come
/// back up from each: both lower tiers see hits, inserts and evictions,
/// dirty rows reach SSD, the figures are per tier in the store's order, and
/// the tier list survives a reopen (written as `[[tiers]]`).
#[test]
fn three_tiers_spill_through_every_tier_and_reopen() {
    let (_, cfg) = configs()
        .into_iter()
        .find(|(n, _)| *n == "tiny-three-tiers")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, with_engine(cfg.clone(), IoEngineKind::Psync)).unwrap();
    let ids: Vec<u64> = (0..200).collect();
    let grads = vec![1.0f32; 200 * 8];
    let mut out = vec![0f32; 200 * 8];
    let mut init = vec![0f32; 200 * 8];
    s.lookup("small_rows", &ids, &mut init).unwrap();
    for _ in 0..3 {
        s.apply_sgd("small_rows", &ids, &grads, 1.0).unwrap();
        // A short window re-read soon after: found in the second or third tier.
        for w in ids.chunks(8) {
            s.lookup("small_rows", w, &mut out[..w.len() * 8]).unwrap();
            s.lookup("small_rows", &w[..2], &mut out[..16]).unwrap();
        }
    }
    let st = s.stats();
    let t = st.table("small_rows").unwrap();
    let kinds: Vec<MemoryKind> = t.tiers.iter().map(|t| t.kind).collect();
    assert_eq!(
        kinds,
        [MemoryKind::Dram, MemoryKind::Dram, MemoryKind::Pmem]
    );
    let caps: Vec<u64> = t.tiers.iter().map(|t| t.capacity_rows).collect();
    assert_eq!(caps, [2, 7, 3], "{t:?}");
    for (i, tier) in t.tiers.iter().enumerate() {
        assert!(tier.evictions > 0, "tier {i}: {t:?}");
        assert!(tier.bytes_written > 0, "tier {i}: {t:?}");
        assert_eq!(tier.lookups, tier.hits + tier.misses, "tier {i}");
        assert!(tier.resident_rows <= tier.capacity_rows, "tier {i}");
    }
    assert!(t.tiers[1].hits > 0 && t.tiers[2].hits > 0, "{t:?}");
    // Each lower tier is asked exactly what the tier above missed.
    assert_eq!(t.tiers[1].lookups, t.tiers[0].misses);
    assert_eq!(t.tiers[2].lookups, t.tiers[1].misses);
    assert!(t.ssd.rows_written > 0, "{t:?}");
    // wide_rows has no rows in the second tier: victims skip it.
    let w = st.table("wide_rows").unwrap();
    assert_eq!(w.tiers[1].capacity_rows, 0);
    s.checkpoint().unwrap();
    drop(s);
    let text = std::fs::read_to_string(path.join(embtier::CONFIG_FILE)).unwrap();
    assert!(text.contains("[[tiers]]"), "{text}");
    let s = Store::open(&path).unwrap();
    assert_eq!(s.config().tiers, cfg.tiers);
    s.lookup("small_rows", &ids, &mut out).unwrap();
    for (i, (&v, &v0)) in out.iter().zip(&init).enumerate() {
        assert_eq!(v, v0 - 1.0 - 1.0 - 1.0, "element {i}: three steps of 1.0");
    }
}

/// A flush of more scattered dirty rows than one write-back chunk holds
/// (16 MiB of 4 KiB groups = 4096 groups): every row must land, across the
/// chunk boundaries, and read back after a reopen.
#[test]
fn flush_larger_than_one_write_back_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    // dim 1018: one row per 4 KiB group, so 6000 dirty rows are 6000 groups.
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 20_000, 1018).init(Init::Zeros))
        .dram_capacity(64 << 20)
        .io_engine(IoEngineKind::Psync)
        .build();
    let s = Store::create(&path, cfg).unwrap();
    // Every third row: 6000 rows in 6000 groups, none adjacent.
    let ids: Vec<u64> = (0..6000u64).map(|i| i * 3 + 1).collect();
    let vals: Vec<f32> = ids
        .iter()
        .flat_map(|&id| (0..1018).map(move |j| (id * 1018 + j) as f32))
        .collect();
    s.update("t", &ids, &vals).unwrap();
    assert_eq!(s.dirty_rows(), 6000);
    s.flush().unwrap();
    assert_eq!(s.dirty_rows(), 0);
    let written = s.stats().table("t").unwrap().ssd.rows_written;
    assert_eq!(written, 6000);
    drop(s);
    let s = Store::open(&path).unwrap();
    let mut out = vec![0f32; ids.len() * 1018];
    s.lookup("t", &ids, &mut out).unwrap();
    assert_eq!(bits(&out), bits(&vals));
    // The rows between stayed zero.
    let mut z = vec![1f32; 1018];
    s.lookup("t", &[2], &mut z).unwrap();
    assert!(z.iter().all(|&v| v == 0.0));
}

/// The row log's life cycle, against a plain model: rows written back are
/// appended packed and read back from it; once it is full, write-backs go
/// home and the next checkpoint merges it; its committed blocks survive a
/// reopen, and what was appended after the last checkpoint does not.
#[test]
fn row_log_appends_reads_merges_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    // 64-byte rows (56 a log block), a cache of 400 rows (write-backs of
    // 25 rows or more), a log of 32 blocks.
    let mut cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 100_000, 16).init(Init::Zeros))
        .dram_capacity(400 * 64)
        .dram_shards(1)
        .io_engine(IoEngineKind::Psync)
        .build();
    cfg.ssd.row_log = Some(embtier::ByteSize(32 * 4096));
    // Merges inside checkpoints only, so that each one's counts are
    // known (tests/merge.rs covers the background merge).
    cfg.ssd.merge_in_background = false;
    let s = Store::create(&path, cfg).unwrap();
    let mut model: HashMap<u64, f32> = HashMap::new();
    let write = |s: &Store, model: &mut HashMap<u64, f32>, ids: &[u64], v: f32| {
        s.update("t", ids, &vec![v; ids.len() * 16]).unwrap();
        ids.iter().for_each(|&i| {
            model.insert(i, v);
        });
    };
    let check = |s: &Store, model: &HashMap<u64, f32>, when: &str| {
        let ids: Vec<u64> = model.keys().copied().collect();
        let mut out = vec![0f32; ids.len() * 16];
        s.lookup("t", &ids, &mut out).unwrap();
        for (k, id) in ids.iter().enumerate() {
            assert_eq!(out[k * 16], model[id], "{when}: row {id}");
        }
    };
    // 1000 scattered rows: displaced dirty from the cache, appended.
    let ids: Vec<u64> = (0..1000u64).map(|i| i * 97 % 100_000).collect();
    write(&s, &mut model, &ids, 1.0);
    let cp = s.checkpoint().unwrap();
    let st = s.stats();
    let t = st.table("t").unwrap();
    assert_eq!(t.ssd.log_rows_written, 1000, "{t:?}");
    assert!(cp.row_log_blocks > 16 && cp.row_log_blocks <= 32, "{cp:?}");
    assert_eq!(cp.row_log_merged_rows, 0);
    assert_eq!(t.ssd.logged_rows, 1000);
    // Read back through the cache: most come from log blocks.
    check(&s, &model, "logged");
    assert!(s.stats().table("t").unwrap().ssd.log_rows_read >= 500);
    // Over half full: the next checkpoint merges, and the log empties.
    let cp = s.checkpoint().unwrap();
    assert_eq!(
        (cp.row_log_merged_rows, cp.row_log_blocks),
        (1000, 0),
        "{cp:?}"
    );
    assert_eq!(s.stats().table("t").unwrap().ssd.logged_rows, 0);
    check(&s, &model, "merged");
    // More rows than the log holds: the rest go home, the log's copies of
    // rewritten rows go stale, and the next checkpoint merges.
    let ids: Vec<u64> = (0..3000u64).map(|i| i * 31 % 100_000).collect();
    write(&s, &mut model, &ids, 2.0);
    let ids: Vec<u64> = (0..500u64).map(|i| i * 31 % 100_000).collect();
    write(&s, &mut model, &ids, 3.0);
    let cp = s.checkpoint().unwrap();
    assert!(cp.row_log_merged_rows > 0, "{cp:?}");
    assert_eq!(s.stats().row_log_merges, 2);
    check(&s, &model, "after the overflow");
    // A committed log survives a reopen; an uncommitted append does not.
    write(&s, &mut model, &ids[..200], 4.0);
    let committed = s.checkpoint().unwrap().row_log_blocks;
    assert!(committed > 0);
    let saved = model.clone();
    write(&s, &mut model, &ids[200..400], 5.0);
    // Push the uncommitted rows out to the log without a checkpoint.
    let other: Vec<u64> = (0..300u64).map(|i| 50_000 + i).collect();
    let mut out = vec![0f32; 300 * 16];
    s.lookup("t", &other, &mut out).unwrap();
    assert!(s.stats().row_log_used_blocks > committed);
    drop(s); // no checkpoint: what follows the last one is lost
    let s = Store::open(&path).unwrap();
    assert_eq!(s.stats().table("t").unwrap().ssd.logged_rows, 200);
    check(&s, &saved, "reopened");
    // A merge on demand empties the log, and the rows stay.
    let cp = s.merge_row_log().unwrap();
    assert_eq!(
        (cp.row_log_merged_rows, cp.row_log_blocks),
        (200, 0),
        "{cp:?}"
    );
    drop(s);
    let s = Store::open(&path).unwrap();
    assert_eq!(s.stats().table("t").unwrap().ssd.logged_rows, 0);
    check(&s, &saved, "merged on demand");
}

/// A row whose newest committed copy is in the row log, then rewritten by
/// an update of its whole block group that the next checkpoint's own flush
/// writes home: that checkpoint must merge the log (the logged copy is now
/// stale), or a reopen would read the old copy from the log again.
#[test]
fn a_checkpoint_whose_flush_makes_the_log_stale_merges_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    // 64-byte rows, 63 to a group; a cache larger than the test's rows,
    // so that only checkpoints write back.
    let mut cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 10_000, 16).init(Init::Zeros))
        .dram_capacity(1 << 20)
        .build();
    cfg.ssd.row_log = Some(embtier::ByteSize(64 * 4096));
    let s = Store::create(&path, cfg).unwrap();
    // Row 5 alone in its group: the checkpoint logs it.
    s.update("t", &[5], &[1.0; 16]).unwrap();
    let c = s.checkpoint().unwrap();
    assert_eq!((c.row_log_blocks, c.row_log_merged_rows), (1, 0), "{c:?}");
    // Every row of group 0, row 5 included: the flush writes it home.
    let ids: Vec<u64> = (0..63).collect();
    s.update("t", &ids, &vec![2.0; 63 * 16]).unwrap();
    s.checkpoint().unwrap();
    drop(s);
    let s = Store::open(&path).unwrap();
    let mut out = [0f32; 16];
    s.lookup("t", &[5], &mut out).unwrap();
    assert_eq!(out, [2.0; 16], "the stale logged copy came back");
}
