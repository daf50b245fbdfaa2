//! I/O fault injection: under each kind of fault, at many points of a
//! workload of updates, SGD steps and checkpoints, the failing operation
//! returns an error, nothing panics, the store stays usable or refuses
//! writes with a clear error, and after reopening it is exactly at the last
//! acknowledged checkpoint (or at the one in flight, if its commit landed).
//! Then power cuts: unsynced writes reordered, torn or lost, with honest
//! and with dropped fsyncs.
//!
//! `EMBTIER_FAULT_POINTS` sets the points per fault kind (default 14);
//! `EMBTIER_CRASH_ITERS` the power cuts (default 60).

mod common;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::workload::{config, ops, run, Model, Op};
use embtier::io::fault::FaultPlan;
use embtier::{Error, OpenOptionsExt, Store};

const EVERY: u64 = 10;
const OPS: usize = 160;
const SEED: u64 = 77;

fn faulty(plan: &Arc<FaultPlan>) -> OpenOptionsExt {
    // Cold: a warm-up reading in the background would take reads from the
    // counts the faults are planned by.
    common::faulty_opts(plan, true)
}

/// A new store in `dir`, opened with `plan`'s faults (none armed yet).
fn open_faulty(dir: &Path, plan: &Arc<FaultPlan>) -> Store {
    // No background merge: its I/O would take faults planned for the ops
    // at moments no run repeats. The crash test and the ring's power cuts
    // cover it.
    open_faulty_merging(dir, plan, false)
}

/// [`open_faulty`], with the background merge on or off.
fn open_faulty_merging(dir: &Path, plan: &Arc<FaultPlan>, background: bool) -> Store {
    let mut cfg = config();
    cfg.ssd.merge_in_background = background;
    drop(Store::create(dir, cfg.clone()).unwrap());
    Store::open_with(dir, cfg, faulty(plan)).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    WriteEio,
    WriteEnospc,
    TornWrite,
    ReadEio,
    ShortRead,
    SyncEio,
}

impl Kind {
    fn arm(self, plan: &FaultPlan, n: u64) {
        match self {
            Kind::WriteEio | Kind::WriteEnospc | Kind::TornWrite => {
                let errno = if self == Kind::WriteEnospc {
                    libc::ENOSPC
                } else {
                    libc::EIO
                };
                plan.errno.store(errno, Ordering::SeqCst);
                plan.tear_failed_writes
                    .store(self == Kind::TornWrite, Ordering::SeqCst);
                plan.fail_writes_from.store(n, Ordering::SeqCst);
            }
            Kind::ReadEio => plan.fail_reads_from.store(n, Ordering::SeqCst),
            Kind::ShortRead => plan.short_reads_from.store(n, Ordering::SeqCst),
            Kind::SyncEio => plan.fail_syncs_from.store(n, Ordering::SeqCst),
        }
    }

    fn counter(self, plan: &FaultPlan) -> u64 {
        match self {
            Kind::WriteEio | Kind::WriteEnospc | Kind::TornWrite => {
                plan.writes.load(Ordering::SeqCst)
            }
            Kind::ReadEio | Kind::ShortRead => plan.reads.load(Ordering::SeqCst),
            Kind::SyncEio => plan.syncs.load(Ordering::SeqCst),
        }
    }

    /// Whether a failing operation may have changed some rows in memory
    /// before failing (a read failed part-way through a batch).
    fn may_apply_partly(self) -> bool {
        matches!(self, Kind::ReadEio | Kind::ShortRead)
    }
}

/// What a run under one fault ended with.
#[derive(Debug, Default)]
struct Outcome {
    failed: bool,
    poisoned: bool,
    recovered_in_flight: bool,
}

/// Run the workload with `kind` armed at operation `n`; stop at the first
/// error, probe the store, heal, and check what a reopen recovers.
fn run_with_fault(kind: Kind, n: u64) -> Outcome {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let plan = Arc::new(FaultPlan::default());
    let store = open_faulty(&dir, &plan);
    // Counters start after open, so that N counts the workload's operations.
    let base = kind.counter(&plan);
    kind.arm(&plan, base + n);
    let mut out = Outcome::default();
    let mut acked = (0u64, Model::new());
    let mut cur = Model::new();
    let mut in_flight: Option<Model> = None;
    let mut first_err: Option<Error> = None;
    // A failed bulk load may have imported part of its range (each row
    // wholly: written, or pending in memory); any other failed op, none.
    let mut alt: Option<Model> = None;
    for op in ops(SEED, EVERY).take(OPS) {
        let r = match &op {
            Op::Checkpoint => store.checkpoint().map(|c| {
                acked = (c.generation, cur.clone());
            }),
            op => run(&store, op).map(|()| cur.apply(op)),
        };
        if let Err(e) = r {
            if let Op::Checkpoint = op {
                in_flight = Some(cur.clone());
            }
            if let Op::Import { .. } = op {
                let mut a = cur.clone();
                a.apply(&op);
                alt = Some(a);
            }
            first_err = Some(e);
            break;
        }
    }
    let Some(err) = first_err else {
        return out; // the fault point lies past the workload
    };
    out.failed = true;
    let what = format!("{kind:?} at op {n}: {err}");
    match (&err, kind) {
        (Error::DiskFull { .. }, Kind::WriteEnospc)
        | (Error::Io { .. }, Kind::WriteEio | Kind::TornWrite | Kind::ReadEio | Kind::SyncEio)
        | (Error::Poisoned { .. }, Kind::SyncEio)
        | (Error::Corrupt { .. } | Error::Format { .. }, Kind::ShortRead) => {}
        _ => panic!("unexpected error kind: {what}"),
    }
    // The store is still usable, or refuses writes clearly.
    plan.heal();
    match store.checkpoint() {
        Err(Error::Poisoned { .. }) => {
            out.poisoned = true;
            assert!(
                matches!(
                    store.update("cached", &[1], &[0.0; 8]),
                    Err(Error::Poisoned { .. })
                ),
                "{what}: a poisoned store took an update"
            );
        }
        Err(e) => panic!("{what}: after healing, checkpoint failed: {e}"),
        Ok(c) => {
            // Usable: the healed checkpoint saved what memory held. Write
            // and sync faults never half-apply an update, so that is the
            // model exactly; a read fault may have half-applied the
            // failing batch, so then every row need only read back.
            let exact = !kind.may_apply_partly();
            let check = |store: &Store, when: &str| {
                let r = cur.check_either(store, alt.as_ref());
                match r {
                    Ok(()) => {}
                    Err(e) if exact || e.starts_with("lookup") => {
                        panic!("{what}: {when}: {e}")
                    }
                    Err(_) => {}
                }
            };
            check(&store, "in memory after healing");
            drop(store);
            let store = Store::open(&dir).unwrap();
            assert_eq!(store.generation(), c.generation);
            check(&store, "reopened after healing");
            return out;
        }
    }
    drop(store);
    // Reopen: the last acknowledged checkpoint, or the one in flight.
    let store = Store::open(&dir).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let g = store.generation();
    let model = if g == acked.0 {
        &acked.1
    } else if g == acked.0 + 1 && in_flight.is_some() {
        out.recovered_in_flight = true;
        in_flight.as_ref().unwrap()
    } else {
        panic!(
            "{what}: reopened at generation {g}, acknowledged {}",
            acked.0
        )
    };
    model
        .check(&store)
        .unwrap_or_else(|e| panic!("{what}: reopened at generation {g}: {e}"));
    out
}

#[test]
fn every_fault_kind_at_many_points_loses_nothing_acknowledged() {
    // How many operations of each kind the workload does, fault free.
    let tmp = tempfile::tempdir().unwrap();
    let plan = Arc::new(FaultPlan::default());
    let store = open_faulty(&tmp.path().join("s"), &plan);
    let before = [Kind::WriteEio, Kind::ReadEio, Kind::SyncEio].map(|k| k.counter(&plan));
    for op in ops(SEED, EVERY).take(OPS) {
        run(&store, &op).unwrap();
    }
    let totals: Vec<u64> = [Kind::WriteEio, Kind::ReadEio, Kind::SyncEio]
        .iter()
        .zip(before)
        .map(|(k, b)| k.counter(&plan) - b)
        .collect();
    drop(store);
    eprintln!("fault-free workload: {totals:?} writes, reads, syncs");
    let points: u64 = common::env_or("EMBTIER_FAULT_POINTS", 14);
    let mut report = Vec::new();
    for kind in [
        Kind::WriteEio,
        Kind::WriteEnospc,
        Kind::TornWrite,
        Kind::ReadEio,
        Kind::ShortRead,
        Kind::SyncEio,
    ] {
        let total = match kind {
            Kind::ReadEio | Kind::ShortRead => totals[1],
            Kind::SyncEio => totals[2],
            _ => totals[0],
        };
        let (mut failed, mut poisoned, mut in_flight) = (0, 0, 0);
        for i in 0..points {
            let n = total * i / points;
            let o = run_with_fault(kind, n);
            failed += o.failed as u32;
            poisoned += o.poisoned as u32;
            in_flight += o.recovered_in_flight as u32;
        }
        assert!(
            failed >= points as u32 / 2,
            "{kind:?}: the fault rarely fired ({failed})"
        );
        report.push(format!(
            "{kind:?}: {points} points, {failed} failed an operation, {poisoned} poisoned, \
             {in_flight} recovered the in-flight checkpoint"
        ));
    }
    for r in report {
        eprintln!("faults: {r}");
    }
}

/// Power cuts at random points: every write after the last honest fsync
/// of its file may be lost, kept, or torn sector by sector, in any order.
/// With honest fsyncs the reopened store is exactly at the last
/// acknowledged checkpoint (or the in-flight one). With dropped fsyncs the
/// media breaks the protocol's assumption; the store must still open or
/// fail with a clear error, never panic; the outcomes are counted.
#[test]
fn power_cuts_reorder_and_tear_unsynced_writes() {
    power_cuts(false, OPS, 0x5eed, 500, false);
}

/// The same with every checkpoint begun (`Store::begin_checkpoint`) and
/// finished only after up to eight more ops of the stream, which it must
/// not commit: a cut falls before, inside or after such a window, and a
/// reopen serves the acknowledged checkpoint's moment.
#[test]
fn power_cuts_while_checkpoints_finish_after_later_ops() {
    power_cuts(true, 3 * OPS, 0x5ef0, 17000, true);
}

/// The same with the background merge on, in op streams long enough for
/// its passes to move the row log's start round its 24-block ring several
/// times: a cut falls in a pass, between a pass and the checkpoint that
/// frees its blocks, or after appends into blocks a commit freed; every
/// reopen serves the acknowledged checkpoint (or detects a dropped fsync).
#[test]
fn power_cuts_as_the_row_log_goes_round_its_ring() {
    let freed = power_cuts(true, 6 * OPS, 0x5eef, 9000, false);
    assert!(
        freed > 24 * 3,
        "{freed} ring blocks freed in all: the log did not go round"
    );
}

/// Cut the power after a random prefix (up to `ops` ops) of each of
/// `EMBTIER_CRASH_ITERS` op streams; returns the row-log blocks the
/// acknowledged checkpoints freed.
fn power_cuts(background: bool, ops_max: usize, rng_seed: u64, first_seed: u64, late: bool) -> u64 {
    let cuts: u64 = common::env_or("EMBTIER_CRASH_ITERS", 60);
    let mut rng = common::Rng(rng_seed);
    let (mut exact, mut detected, mut silent) = (0, 0, 0);
    // Reopens at an earlier acknowledged checkpoint, serving exactly its
    // rows: a commit record a dropped fsync lost (the disk lied).
    let mut older = 0;
    let (mut torn, mut freed) = (0, 0);
    for cut in 0..cuts {
        let dropped = cut % 3 == 2;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let plan = Arc::new(FaultPlan::default());
        let store = open_faulty_merging(&dir, &plan, background);
        plan.track_unsynced.store(true, Ordering::SeqCst);
        if dropped {
            plan.drop_sync_every
                .store(2 + rng.below(3), Ordering::SeqCst);
        }
        let stop = 20 + rng.below(ops_max as u64) as usize;
        let mut acked = (0u64, Model::new());
        // Every acknowledged checkpoint's rows, by generation.
        let mut history: Vec<(u64, Model)> = Vec::new();
        let mut cur = Model::new();
        let mut in_flight = None;
        let seed = first_seed + cut;
        let mut stream = ops(seed, EVERY).take(stop).enumerate();
        let mut begun = None;
        while let Some((i, op)) = stream.next() {
            if let Op::Checkpoint = op {
                if i + 1 == stop {
                    in_flight = Some(cur.clone()); // the cut falls inside it
                    break;
                }
                if !late {
                    let c = store.checkpoint().unwrap();
                    freed += c.row_log_blocks_freed;
                    acked = (c.generation, cur.clone());
                    history.push(acked.clone());
                    continue;
                }
                // Its moment, then more ops before it is finished.
                let b = store.begin_checkpoint().unwrap();
                let moment = cur.clone();
                let mut cut_inside = false;
                for _ in 0..rng.below(9) {
                    match stream.next() {
                        Some((_, Op::Checkpoint)) => {}
                        Some((j, op)) => {
                            run(&store, &op).unwrap();
                            cur.apply(&op);
                            cut_inside = j + 1 == stop;
                        }
                        None => cut_inside = true,
                    }
                    if cut_inside {
                        break;
                    }
                }
                if cut_inside {
                    in_flight = Some(moment);
                    begun = Some(b);
                    break;
                }
                let c = b.finish().unwrap();
                freed += c.row_log_blocks_freed;
                acked = (c.generation, moment);
                history.push(acked.clone());
            } else {
                run(&store, &op).unwrap();
                cur.apply(&op);
            }
        }
        // A cut inside a checkpoint: run it, then lose what was not synced.
        let finished = begun.map(|b| b.finish().is_ok());
        if finished.is_none() && in_flight.is_some() {
            let _ = store.checkpoint();
        }
        drop(store);
        let r = plan.crash(seed).unwrap();
        common::reboot(&dir);
        torn += r.torn;
        let what = format!("cut {cut} after {stop} ops ({r:?}, dropped fsyncs: {dropped})");
        let store = match Store::open(&dir) {
            Ok(s) => s,
            Err(e) => {
                assert!(dropped, "{what}: reopen failed with honest fsyncs: {e}");
                detected += 1;
                continue;
            }
        };
        let g = store.generation();
        let model = if g == acked.0 {
            Some(&acked.1)
        } else if g == acked.0 + 1 {
            in_flight.as_ref()
        } else {
            None
        };
        match model.map(|m| m.check(&store)) {
            Some(Ok(())) => exact += 1,
            Some(Err(e)) if e.starts_with("lookup") => {
                assert!(dropped, "{what}: generation {g}: {e}");
                detected += 1;
            }
            other => {
                assert!(
                    dropped,
                    "{what}: generation {g}, acknowledged {}: {other:?}",
                    acked.0
                );
                let earlier = history.iter().rev().find(|(h, _)| *h == g);
                if other.is_none() && earlier.is_some_and(|(_, m)| m.check(&store).is_ok()) {
                    older += 1;
                } else {
                    eprintln!(
                        "{what}: wrong rows at generation {g} (acknowledged {}): {other:?}",
                        acked.0
                    );
                    silent += 1;
                }
            }
        }
    }
    eprintln!(
        "power cuts (background merge {background}, checkpoints finished after later ops \
         {late}): {cuts} cuts, {torn} torn writes; \
         {exact} at the exact checkpoint, {detected} detected as corrupt (dropped fsyncs), \
         {older} at an earlier acknowledged checkpoint (dropped fsyncs), \
         {silent} wrong (dropped fsyncs only); {freed} ring blocks freed"
    );
    assert!(
        torn > 0,
        "no write was ever torn: the simulation is not simulating"
    );
    freed
}

/// Issue 13, defect 4: what a step or update whose miss reads fail may
/// have done, exactly as the `Store` docs say: the call returns the error;
/// the rows it found in memory may have changed, each wholly (never a mix
/// of old and new elements); the rows it had to read did not change. Reads
/// fail after `k` successful ones, for several `k`.
#[test]
fn a_call_whose_reads_fail_changes_only_the_rows_in_memory() {
    use embtier::{Init, StoreConfig, TableConfig};
    const ROWS: u64 = 3000; // 16-byte rows: 254 a block, 12 blocks
    let cfg = || {
        StoreConfig::builder()
            .table(TableConfig::new("t", ROWS, 4).init(Init::Zeros))
            .dram_capacity(1 << 20)
            .build()
    };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, cfg()).unwrap();
    let all: Vec<u64> = (0..ROWS).collect();
    let v0: Vec<f32> = (0..ROWS * 4).map(|i| i as f32).collect();
    s.update("t", &all, &v0).unwrap();
    s.checkpoint().unwrap();
    drop(s);
    let cached = ROWS as usize / 2;
    // The call reads the 6 groups not in memory; it fails after k of them.
    for k in [0u64, 1, 3, 5] {
        for call in ["apply_sgd", "step"] {
            let plan = Arc::new(FaultPlan::default());
            let s = Store::open_with(&dir, cfg(), faulty(&plan)).unwrap();
            // Half the rows in memory, half on SSD.
            let mut out = vec![0f32; all.len() * 4];
            s.lookup("t", &all[..cached], &mut out[..cached * 4])
                .unwrap();
            // The cold cache also filled the rest of the last group read
            // (rows `cached..in_memory`): those are in memory too.
            let in_memory = cached + s.stats().table("t").unwrap().filled as usize;
            assert!(
                in_memory < cached + 254,
                "only one group's rows were filled"
            );
            plan.fail_reads_from
                .store(plan.reads.load(Ordering::SeqCst) + k, Ordering::SeqCst);
            let g = vec![1.0f32; all.len() * 4];
            let r = match call {
                "apply_sgd" => s.apply_sgd("t", &all, &g, 0.5),
                _ => s.step("t", &all, &g),
            };
            assert!(
                r.is_err(),
                "k {k} {call}: reads failed but the call succeeded"
            );
            plan.heal();
            s.lookup("t", &all, &mut out).unwrap();
            for i in 0..ROWS as usize {
                let (got, old) = (&out[i * 4..i * 4 + 4], &v0[i * 4..i * 4 + 4]);
                if got == old {
                    continue;
                }
                assert!(
                    i < in_memory,
                    "k {k} {call}: row {i}, not in memory, changed"
                );
                assert!(
                    got.iter()
                        .zip(old)
                        .all(|(a, b)| *a == *b - 0.5 || *a == *b - 0.01),
                    "k {k} {call}: row {i} is a mix: {got:?} from {old:?}"
                );
            }
            drop(s);
        }
    }
}

/// A warm restart whose reads fail: `wait_warm` reports the failure, the
/// store stays usable, and every row reads back as committed once the
/// disk heals (the rows whose read failed were not brought in). The read
/// from the data file is the one a fault can hit: without hot rows
/// (`warm_rows` off), as when they are stale, and without the row log
/// (whose rows of the hot set come back from the open's own reads of it).
#[test]
fn a_warm_up_whose_reads_fail_reports_it_and_serves_committed_rows() {
    use embtier::{Init, StoreConfig, TableConfig};
    let cfg = || {
        StoreConfig::builder()
            .table(TableConfig::new("t", 100_000, 4).init(Init::Zeros))
            .dram_capacity(1 << 20)
            .warm_rows(false)
            .row_log(Some(0))
            .build()
    };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, cfg()).unwrap();
    let ids: Vec<u64> = (0..20_000u64).map(|i| i * 5).collect();
    let vals: Vec<f32> = ids.iter().flat_map(|&i| [i as f32; 4]).collect();
    s.update("t", &ids, &vals).unwrap();
    let c = s.checkpoint().unwrap();
    // The rows went home: the warm-up reads them from there.
    assert!(c.hot_rows > 0 && c.groups_journaled > 0, "{c:?}");
    drop(s);
    // The reads an open does before its warm-up starts (metadata, recovery).
    let plan = Arc::new(FaultPlan::default());
    drop(Store::open_with(&dir, cfg(), faulty(&plan)).unwrap());
    let at_open = plan.reads.load(Ordering::SeqCst);
    // The hot set's home groups lie together and come back in a few
    // large reads: the first of them fails.
    {
        let k = 0u64;
        let plan = Arc::new(FaultPlan::default());
        plan.fail_reads_from.store(at_open + k, Ordering::SeqCst);
        let opts = OpenOptionsExt {
            cold: false,
            ..faulty(&plan)
        };
        // Reads fail from the warm-up's k-th on.
        let s = match Store::open_with(&dir, cfg(), opts) {
            Ok(s) => s,
            Err(e) => panic!("k {k}: open failed: {e}"),
        };
        // The first wait reports the read's own error, typed, with its
        // file; a later one its text.
        let w = s.wait_warm();
        assert!(
            matches!(&w, Err(Error::Io { path, .. }) if path.ends_with("data.emb")),
            "k {k}: the warm-up's failed reads are reported: {w:?}"
        );
        let again = s.wait_warm();
        assert!(
            matches!(again, Err(Error::Warm { .. })),
            "k {k}: a second wait: {again:?}"
        );
        plan.heal();
        let mut out = vec![0f32; vals.len()];
        s.lookup("t", &ids, &mut out).unwrap();
        assert_eq!(out, vals, "k {k}");
        drop(s);
    }
}
