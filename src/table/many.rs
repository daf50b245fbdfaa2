//! Multi-table lookups: every table's misses in one submission.

use super::*;

/// One table's part of a multi-table lookup: validated ids and their
/// output, `ids.len() * dim` values (none for no ids).
pub(crate) struct Part<'a> {
    pub table: &'a Table,
    pub ids: &'a [u64],
    pub out: &'a mut [f32],
    /// What the part's ids stand for in the table's figures.
    pub count: Count<'a>,
}

/// What a [`Part`]'s ids stand for in its table's figures
/// ([`crate::TableStats`]).
#[derive(Clone, Copy)]
pub(crate) enum Count<'a> {
    /// Each id is a lookup ([`crate::Store::lookup_many`]).
    Ids,
    /// The ids are the distinct rows of a call in which id `k` occurred
    /// `n[k]` times (a pooled lookup, which reads each row once): every
    /// occurrence is a lookup, as in a plain lookup of the call's indices,
    /// where the later occurrences of a row found in memory hit the first
    /// tier (the first moved it there) and those of a missed row miss
    /// every tier (the misses are read after every id is probed).
    Occurrences(&'a [u32]),
}

/// The ids a [`lookup_many`] of several tables needs to probe them side
/// by side ([`each`]): a thread costs tens of microseconds, a probe about
/// a tenth of one an id.
const PROBE_APART_IDS: usize = 4096;

/// A part's round of miss reads in [`lookup_many`].
pub(super) struct PartRound {
    ctx: Ctx,
    misses: Vec<Miss>,
    locs: Vec<Loc>,
    ranges: Vec<(usize, usize)>,
    epoch: u64,
    retry: Vec<Miss>,
    corrupt: Option<Error>,
    left: usize,
}

/// Look up several tables' batches with one submission of every table's
/// SSD misses: all the reads of the batch share the queue, rather than
/// each table draining it before the next starts. The misses of groups of
/// different sizes go in one submission per size.
pub(crate) fn lookup_many(ssd: &Ssd, parts: &mut [Part<'_>]) -> Result<()> {
    let mut rounds: Vec<PartRound> = Vec::with_capacity(parts.len());
    let mut result = Ok(());
    // The DRAM and PMem hits; pinned tables are served whole.
    let probe = |p: &mut Part<'_>| -> (PartRound, Option<Error>) {
        let t = p.table;
        let mut ctx = Ctx::new();
        let mut failed = None;
        ctx.c.lookups = p.ids.len() as u64;
        let mut misses = match &t.kind {
            TableKind::Cached { shards, .. } => t.probe(shards, p.ids, p.out, &mut ctx, None),
            TableKind::Pinned { .. } if p.out.is_empty() => Vec::new(),
            TableKind::Pinned { .. } => {
                failed = t.lookup(ssd, p.ids, p.out).err();
                Vec::new()
            }
        };
        match p.count {
            Count::Ids => {}
            Count::Occurrences(n) => {
                debug_assert_eq!(n.len(), p.ids.len());
                // (A pinned table's counts are its lookup's own.)
                debug_assert!(matches!(t.kind, TableKind::Cached { .. }));
                let repeats = |k: usize| n[k] as u64 - 1;
                let all: u64 = (0..n.len()).map(repeats).sum();
                let missed: u64 = misses.iter().map(|m| repeats(m.k)).sum();
                ctx.c.lookups += all;
                ctx.c.hits[0] += all - missed;
            }
        }
        let (locs, ranges) = t.group_misses(&mut misses);
        let round = PartRound {
            left: misses.len(),
            ctx,
            misses,
            locs,
            ranges,
            epoch: t.wb_epoch.load(Ordering::Acquire),
            retry: Vec::new(),
            corrupt: None,
        };
        (round, failed)
    };
    // Several tables, each once, with ids enough to pay for a thread: the
    // tables' hits side by side (their shards are apart). A table twice is
    // probed in order, as calls one after the other would.
    let ids: usize = parts.iter().map(|p| p.ids.len()).sum();
    let side_by_side =
        parts.len() > 1 && ids >= PROBE_APART_IDS && distinct_tables(parts.iter().map(|p| p.table));
    let probed = if side_by_side {
        each(parts.iter_mut().collect(), probe)
    } else {
        parts.iter_mut().map(probe).collect()
    };
    for (round, failed) in probed {
        if let Some(e) = failed {
            result = Err(e);
        }
        rounds.push(round);
    }
    // Every part's missed groups, by extent size.
    let mut by_size: std::collections::BTreeMap<usize, Vec<(usize, usize)>> = Default::default();
    for (pi, r) in rounds.iter().enumerate() {
        let gb = parts[pi].table.entry.layout.group_bytes();
        by_size
            .entry(gb)
            .or_default()
            .extend((0..r.locs.len()).map(|gi| (pi, gi)));
    }
    let mut buf = ssd.take_buf();
    let max_row = parts.iter().map(|p| p.table.row_bytes).max().unwrap_or(0);
    let mut row = vec![0u8; max_row];
    for (gb, extents) in &by_size {
        if result.is_err() {
            break;
        }
        let offsets: Vec<u64> = extents
            .iter()
            .map(|&(pi, gi)| ssd.loc_offset(&parts[pi].table.entry, rounds[pi].locs[gi]))
            .collect();
        let read = ssd.read_extents_each(&offsets, *gb, &mut buf, &mut |k, blocks| {
            let (pi, gi) = extents[k];
            let p = &mut parts[pi];
            let t = p.table;
            let out = &mut *p.out;
            let TableKind::Cached { shards, .. } = &t.kind else {
                unreachable!("pinned tables have no misses")
            };
            let r = &mut rounds[pi];
            let (lo, hi) = r.ranges[gi];
            let mut i = Install {
                shards,
                epoch: r.epoch,
                attempts: 1,
                row: &mut row[..t.row_bytes],
                ctx: &mut r.ctx,
                retry: &mut r.retry,
                corrupt: &mut r.corrupt,
                left: &mut r.left,
            };
            t.install_group(
                ssd,
                &mut i,
                r.locs[gi],
                blocks,
                &r.misses[lo..hi],
                &mut |sh: &mut Shard, slot: usize, run: &[Miss], _: &mut Ctx| {
                    t.decode_misses(sh.top().row(slot), run, out)
                },
            );
        });
        for &(pi, _) in extents {
            rounds[pi].ctx.c.ssd_read_ops += 1;
            rounds[pi].ctx.c.ssd_bytes_read += *gb as u64;
        }
        if let Err(e) = read {
            result = Err(e);
        }
    }
    ssd.put_buf(buf);
    // Misses that raced with write-backs read again table by table, then
    // every part publishes its accounting, whatever happened.
    for (p, mut r) in parts.iter_mut().zip(rounds) {
        let t = p.table;
        if result.is_ok() {
            let retry = std::mem::take(&mut r.retry);
            let out = &mut *p.out;
            result = t.end_round(r.corrupt.take(), 1, &retry).and_then(|()| {
                match (&t.kind, retry.is_empty()) {
                    (TableKind::Cached { shards, .. }, false) => {
                        t.resolve_misses(ssd, shards, retry, &mut r.ctx, |sh, slot, run, _| {
                            t.decode_misses(sh.top().row(slot), run, out)
                        })
                    }
                    _ => Ok(()),
                }
            });
        }
        if matches!(t.kind, TableKind::Cached { .. }) {
            t.finish(ssd, &mut r.ctx);
            r.ctx.c.publish(&t.counters);
        }
    }
    result
}
