//! Lookups and read-modify-write calls: DRAM and PMem hits, miss resolution
//! (reads of home groups and row-log blocks, batched), installs, pinning.

use super::*;

/// Where [`Table::clean_rows_in`] sends each run of rows: ids, and their
/// bytes packed.
pub(crate) type RowsSink<'a> = dyn FnMut(&[u64], &[u8]) -> std::io::Result<()> + 'a;

/// Rows ahead whose lines a pinned table's loops ask for
/// ([`Table::prefetch_pinned`]).
const PINNED_AHEAD: usize = 8;

impl Table {
    /// Encode `w` (`dim` f32s) into a row's weight bytes.
    #[inline]
    /// Decode `row` into the output slot of every miss of `run`.
    pub(super) fn decode_misses(&self, row: &[u8], run: &[Miss], out: &mut [f32]) {
        if out.is_empty() {
            return; // a part of no ids
        }
        let dim = self.dim;
        for m in run {
            self.decode(row, &mut out[m.k * dim..(m.k + 1) * dim]);
        }
    }

    /// Look up `ids` (validated) into `out`.
    pub(crate) fn lookup(&self, ssd: &Ssd, ids: &[u64], out: &mut [f32]) -> Result<()> {
        self.lookup_pinning(ssd, ids, out, None)
    }

    /// [`Table::lookup`] that also pins each row in DRAM (up to the pin
    /// limit) and records the ids it pinned in `pins`, one entry per pin.
    pub(crate) fn lookup_pinning(
        &self,
        ssd: &Ssd,
        ids: &[u64],
        out: &mut [f32],
        mut pins: Option<&mut Vec<u64>>,
    ) -> Result<()> {
        let dim = self.dim;
        let rb = self.row_bytes;
        let mut ctx = Ctx::new();
        ctx.c.lookups = ids.len() as u64;
        let pinned_before = pins.as_deref().map(|p| p.len());
        if pinned_before.is_some() {
            ctx.c.prefetched = ids.len() as u64;
        }
        match &self.kind {
            TableKind::Pinned { chunks, tier } => {
                for &id in ids.iter().take(PINNED_AHEAD) {
                    self.prefetch_pinned(id);
                }
                for (pos, &id) in ids.iter().enumerate() {
                    if let Some(&ahead) = ids.get(pos + PINNED_AHEAD) {
                        self.prefetch_pinned(ahead);
                    }
                    let p = self.pinned_place(id);
                    let ch = chunks[p.chunk].lock();
                    self.decode(ch.row(p, rb), &mut out[pos * dim..(pos + 1) * dim]);
                }
                ctx.c.hits[*tier] = ids.len() as u64;
            }
            TableKind::Cached { shards, .. } => {
                let misses = self.probe(shards, ids, out, &mut ctx, pins.as_deref_mut());
                let r = if misses.is_empty() {
                    Ok(())
                } else {
                    self.resolve_misses(ssd, shards, misses, &mut ctx, |sh, slot, run, _| {
                        if let Some(p) = pins.as_deref_mut() {
                            if sh.top().pin(slot) {
                                p.push(run[0].id);
                            }
                        }
                        self.decode_misses(sh.top().row(slot), run, out);
                    })
                };
                if let (Some(b), Some(p)) = (pinned_before, pins.as_deref()) {
                    ctx.c.prefetch_pinned = (p.len() - b) as u64;
                }
                self.finish(ssd, &mut ctx);
                r?;
            }
        }
        ctx.c.publish(&self.counters);
        Ok(())
    }

    /// A pooled lookup of a pinned table read straight from its rows:
    /// bag `b` of `indices[offsets[b]..offsets[b + 1]]` into
    /// `out[b * dim..]`, accumulated in index order from zero (each row
    /// times its weight), the mean a division by the bag's length: the
    /// arithmetic of `pooled::pool`, without the distinct rows copied to a
    /// buffer first (for a pinned table that copy was the lookup). Every
    /// index counts as a lookup and a hit (duplicates counted, as
    /// `TableStats::lookups` says). Returns false, doing nothing, for a
    /// cached table. Arguments are validated.
    pub(crate) fn pool_pinned(
        &self,
        indices: &[u64],
        offsets: &[u64],
        mean: bool,
        weights: Option<&[f32]>,
        out: &mut [f32],
    ) -> bool {
        let TableKind::Pinned { chunks, tier } = &self.kind else {
            return false;
        };
        let (dim, rb) = (self.dim, self.row_bytes);
        let mut row = vec![0f32; dim];
        for &id in indices.iter().take(PINNED_AHEAD) {
            self.prefetch_pinned(id);
        }
        for (b, o) in out.chunks_exact_mut(dim).enumerate() {
            o.fill(0.0);
            let (lo, hi) = (offsets[b] as usize, offsets[b + 1] as usize);
            for k in lo..hi {
                if let Some(&ahead) = indices.get(k + PINNED_AHEAD) {
                    self.prefetch_pinned(ahead);
                }
                let p = self.pinned_place(indices[k]);
                self.decode(chunks[p.chunk].lock().row(p, rb), &mut row);
                match weights {
                    Some(w) => {
                        let w = w[k];
                        o.iter_mut().zip(&row).for_each(|(a, x)| *a += *x * w);
                    }
                    None => o.iter_mut().zip(&row).for_each(|(a, x)| *a += *x),
                }
            }
            if mean && hi > lo {
                let n = (hi - lo) as f32;
                o.iter_mut().for_each(|a| *a /= n);
            }
        }
        let mut c = Local {
            lookups: indices.len() as u64,
            ..Local::default()
        };
        c.hits[*tier] = indices.len() as u64;
        c.publish(&self.counters);
        true
    }

    /// Serve `ids`' DRAM and PMem hits of a cached table into `out`
    /// (pinning them when `pins` is given) and return the misses.
    pub(super) fn probe(
        &self,
        shards: &[Mutex<Shard>],
        ids: &[u64],
        out: &mut [f32],
        ctx: &mut Ctx,
        mut pins: Option<&mut Vec<u64>>,
    ) -> Vec<Miss> {
        let dim = self.dim;
        let mut misses = Vec::new();
        // The rows of `out` are written in the shards' order, not the
        // batch's: ask for each a few positions ahead (by address: the
        // visit holds `out` mutably).
        let (out_at, out_len) = (out.as_ptr() as usize, out.len());
        let row_len = dim * std::mem::size_of::<f32>();
        let write_ahead = |pos: usize, ()| {
            if pos * dim < out_len {
                crate::hint::prefetch_bytes(out_at + pos * row_len, row_len)
            }
        };
        walk_prefetched(
            shards,
            ids,
            &vec![(); ids.len()],
            write_ahead,
            |sh, pos, id, ()| match sh.locate(id, ctx) {
                Some(slot) => {
                    if let Some(p) = pins.as_deref_mut() {
                        if sh.top().pin(slot) {
                            p.push(id);
                        }
                    }
                    if !out.is_empty() {
                        self.decode(sh.top().row(slot), &mut out[pos * dim..(pos + 1) * dim])
                    }
                }
                None => misses.push(Miss {
                    id,
                    seq: sh.wb_seq,
                    k: pos,
                    log: sh.logged_at(id),
                }),
            },
        );
        misses
    }

    /// Publish pending accounting and, once enough displaced dirty rows have
    /// gathered, write them back in one batch. Write-back errors are not the
    /// caller's: the rows stay pending (in memory, authoritative) and are
    /// retried by the next write-back or flush.
    pub(super) fn finish(&self, ssd: &Ssd, ctx: &mut Ctx) {
        let pending = self.publish_pending(ctx);
        // While a checkpoint writes its snapshot, the pending rows are its
        // to write.
        if ctx.new_pending > 0
            && pending >= self.wb_batch
            && !self.snapshot_open.load(Ordering::Relaxed)
            && self.write_back(ssd).is_err()
        {
            ctx.c.writeback_errors += 1;
        }
    }

    /// Add this call's pending-byte delta to the table's; returns the total.
    /// Calls publish their deltas in any order, so the total can dip below
    /// zero for a moment; it is read clamped at zero.
    pub(super) fn publish_pending(&self, ctx: &mut Ctx) -> usize {
        let l = std::mem::take(&mut ctx.later_delta) as i64;
        let later = (l != 0).then(|| self.later_bytes.fetch_add(l, Ordering::Relaxed) + l);
        let d = std::mem::take(&mut ctx.pending_delta) as i64;
        let pending = self.pending_bytes.fetch_add(d, Ordering::Relaxed) + d;
        // Only a call that added rows can raise the peak (most add none).
        if d > 0 || l > 0 {
            let later = later.unwrap_or_else(|| self.later_bytes.load(Ordering::Relaxed));
            self.pending_peak
                .fetch_max(waiting_bytes(pending, later), Ordering::Relaxed);
        }
        pending.max(0) as usize
    }

    /// Read missed rows from SSD, install them in DRAM, and call
    /// `act(shard, slot, misses_of_that_id)` under the shard lock. Rows are
    /// installed group by group as each read completes, while the batch's
    /// other reads are still in flight.
    pub(super) fn resolve_misses(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        misses: Vec<Miss>,
        ctx: &mut Ctx,
        mut act: impl FnMut(&mut Shard, usize, &[Miss], &mut Ctx),
    ) -> Result<()> {
        let gb = self.entry.layout.group_bytes();
        let mut buf = ssd.take_buf();
        let r = self.resolve_misses_in(ssd, shards, misses, ctx, &mut act, gb, &mut buf);
        ssd.put_buf(buf);
        r
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn resolve_misses_in(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        mut misses: Vec<Miss>,
        ctx: &mut Ctx,
        act: &mut impl FnMut(&mut Shard, usize, &[Miss], &mut Ctx),
        gb: usize,
        buf: &mut AlignedBuf,
    ) -> Result<()> {
        let mut row = vec![0u8; self.row_bytes];
        let mut attempts = 0;
        while !misses.is_empty() {
            attempts += 1;
            let (locs, ranges) = self.group_misses(&mut misses);
            let epoch = self.wb_epoch.load(Ordering::Acquire);
            let mut retry: Vec<Miss> = Vec::new();
            let mut corrupt: Option<Error> = None;
            let mut left = misses.len();
            let misses_ref = &misses;
            let offsets: Vec<u64> = locs
                .iter()
                .map(|&l| ssd.loc_offset(&self.entry, l))
                .collect();
            let windowed = ctx.windowed;
            let read = ssd.read_misses(windowed, &offsets, gb, buf, &mut |gi, blocks| {
                let (lo, hi) = ranges[gi];
                let mut i = Install {
                    shards,
                    epoch,
                    attempts,
                    row: &mut row,
                    ctx: &mut *ctx,
                    retry: &mut retry,
                    corrupt: &mut corrupt,
                    left: &mut left,
                };
                self.install_group(ssd, &mut i, locs[gi], blocks, &misses_ref[lo..hi], act);
            });
            ctx.c.ssd_read_ops += locs.len() as u64;
            ctx.c.ssd_bytes_read += (locs.len() * gb) as u64;
            read?;
            self.end_round(corrupt, attempts, &retry)?;
            misses = retry;
        }
        Ok(())
    }

    /// Sort `misses` by where they read (home group or row-log block) and
    /// id, and split them by place: the places in order, and the range of
    /// `misses` in each.
    pub(super) fn group_misses(&self, misses: &mut [Miss]) -> (Vec<Loc>, Vec<(usize, usize)>) {
        let e = &self.entry;
        misses.sort_unstable_by_key(|m| (m.loc(e), m.id));
        let mut locs: Vec<Loc> = Vec::new();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (i, m) in misses.iter().enumerate() {
            let l = m.loc(e);
            if locs.last() != Some(&l) {
                locs.push(l);
                ranges.push((i, i));
            }
            ranges.last_mut().expect("pushed").1 = i + 1;
        }
        (locs, ranges)
    }

    /// The outcome of one round of miss reads: the first corruption seen,
    /// or an error if misses still race with write-backs after the last
    /// attempt.
    pub(super) fn end_round(
        &self,
        corrupt: Option<Error>,
        attempts: usize,
        retry: &[Miss],
    ) -> Result<()> {
        if let Some(err) = corrupt {
            return Err(err);
        }
        if attempts >= MAX_MISS_RETRIES && !retry.is_empty() {
            return Err(Error::config(format!(
                "table {:?}: row {} kept racing with write-backs",
                self.name, retry[0].id
            )));
        }
        Ok(())
    }

    /// A row-log block as read: checked (sealed, its number, an epoch that
    /// may be read, this table's rows), then decoded.
    pub(super) fn checked_log_block<'b>(
        &self,
        ssd: &Ssd,
        b: u32,
        blocks: &'b [u8],
    ) -> std::result::Result<embtier_format::rowlog::LogBlock<'b>, embtier_format::FormatError>
    {
        let lb = ssd.check_log_block(b, blocks)?;
        let offset = ssd.log_block(b) * BLOCK_SIZE as u64;
        if lb.table != self.index || lb.row_bytes != self.row_bytes {
            return Err(embtier_format::FormatError::InvalidField {
                field: "table",
                offset: offset + embtier_format::rowlog::TABLE as u64,
                value: format!(
                    "{} with rows of {} bytes, where the index says table {} ({} bytes)",
                    lb.table, lb.row_bytes, self.index, self.row_bytes
                ),
            });
        }
        Ok(lb)
    }

    /// Row `id`'s bytes in the log block `lb` read at `loc`, which the log
    /// map says holds it.
    pub(super) fn logged_row<'b>(
        &self,
        ssd: &Ssd,
        loc: Loc,
        lb: &'b embtier_format::rowlog::LogBlock<'_>,
        id: u64,
    ) -> std::result::Result<&'b [u8], embtier_format::FormatError> {
        match lb.ids.iter().position(|&x| x == id) {
            Some(k) => Ok(lb.row(k)),
            None => Err(embtier_format::FormatError::InvalidField {
                field: "row log block",
                offset: ssd.loc_offset(&self.entry, loc),
                value: format!("does not hold row {id}, which the log map places there"),
            }),
        }
    }

    /// Install the misses `run` (sorted by id, all read from `loc`) from
    /// the blocks just read there, and call `act` for each id under its
    /// shard lock. Misses that raced with a write-back go to `i.retry`; a
    /// place that fails its checks sets `i.corrupt`.
    pub(super) fn install_group(
        &self,
        ssd: &Ssd,
        i: &mut Install<'_>,
        loc: Loc,
        blocks: &[u8],
        run: &[Miss],
        act: &mut impl FnMut(&mut Shard, usize, &[Miss], &mut Ctx),
    ) {
        let e = &self.entry;
        if i.corrupt.is_some() {
            return;
        }
        let corrupt = |source| Error::Corrupt {
            path: ssd.path().to_path_buf(),
            table: self.name.clone(),
            id: run[0].id,
            source,
        };
        let mut home = None;
        let mut log = None;
        match loc {
            Loc::Home(g) => match ssd.check_group(e, g, blocks) {
                Ok(s) => home = Some(s),
                Err(source) => {
                    let now = self.wb_epoch.load(Ordering::Acquire);
                    if (now != i.epoch || now % 2 == 1) && i.attempts < MAX_MISS_RETRIES {
                        // Raced with a write of this group: read it again.
                        i.retry.extend_from_slice(run);
                    } else {
                        *i.corrupt = Some(corrupt(source));
                    }
                    return;
                }
            },
            // A log block is never rewritten while a map points at it.
            Loc::Log(b) => match self.checked_log_block(ssd, b, blocks) {
                Ok(lb) => log = Some(lb),
                Err(source) => {
                    *i.corrupt = Some(corrupt(source));
                    return;
                }
            },
        }
        for same in run.chunk_by(|a, b| a.id == b.id) {
            let id = same[0].id;
            *i.left = i.left.saturating_sub(same.len());
            match (&home, &log) {
                (Some(state), _) => row_from_group(e, *state, blocks, id, i.row),
                (_, Some(lb)) => match self.logged_row(ssd, loc, lb, id) {
                    Ok(bytes) => i.row.copy_from_slice(bytes),
                    Err(source) => {
                        *i.corrupt = Some(corrupt(source));
                        return;
                    }
                },
                _ => unreachable!("one of the two was read"),
            }
            let mut sh = i.shards[self.shard_of(id, i.shards.len())].lock();
            let slot = if let Some(s) = sh.locate(id, i.ctx) {
                s // someone brought it in meanwhile: theirs is newer
            } else if sh.wb_seq != same[0].seq {
                // Written back meanwhile: read it again, from where it is now.
                let (seq, log) = (sh.wb_seq, sh.logged_at(id));
                i.retry.extend(same.iter().map(|m| Miss { seq, log, ..*m }));
                continue;
            } else {
                i.ctx.c.ssd_rows_read += 1;
                if log.is_some() {
                    i.ctx.c.log_rows_read += 1;
                }
                sh.insert_top(id, i.row, false, i.ctx)
            };
            act(&mut sh, slot, same, i.ctx);
        }
        if let (Loc::Home(g), Some(state)) = (loc, home) {
            self.fill_from_group(i, g, state, blocks, run);
        }
    }

    /// Warm restart: read `ids` (unique, in range) into the tiers through
    /// the miss path, without counting them as lookups; rows already in
    /// memory stay where they are. Returns the rows read.
    pub(crate) fn warm(&self, ssd: &Ssd, ids: &[u64]) -> Result<u64> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(0);
        };
        let n = shards.len();
        let mut misses = Vec::with_capacity(ids.len());
        let (order, start) = by_shard(ids, n, |id| self.shard_of(id, n));
        for s in 0..n {
            let sh = shards[s].lock();
            for &p in &order[start[s] as usize..start[s + 1] as usize] {
                let id = ids[p as usize];
                if !sh.holds(id) {
                    misses.push(Miss {
                        id,
                        seq: sh.wb_seq,
                        k: 0,
                        log: sh.logged_at(id),
                    });
                }
            }
        }
        let mut ctx = Ctx::new();
        ctx.windowed = true;
        // A buffer of the batch's own, freed when it is done, not one of
        // the SSD tier's pool: every id of a warm batch is a miss (the
        // plan leaves out the rows already held), so its reads fill up to
        // a batch's 2048 places (8 MiB of 4 KiB groups; 32 MiB when a
        // batch was 8192 ids), and the pool keeps up to four buffers that
        // size for the lookups after: 100 MB more resident for the rest
        // of the run after a SIGKILLed W5's restart.
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        let gb = self.entry.layout.group_bytes();
        let r = self.resolve_misses_in(
            ssd,
            shards,
            misses,
            &mut ctx,
            &mut |_, _, _, _| {},
            gb,
            &mut buf,
        );
        drop(buf);
        ctx.c.warmed = ctx.c.ssd_rows_read;
        let read = ctx.c.ssd_rows_read;
        // Rows a concurrent lookup brought in meanwhile are found by the
        // installs; those finds are not lookups and must not count as hits.
        ctx.c.hits = Default::default();
        ctx.c.pending_hits = 0;
        self.finish(ssd, &mut ctx);
        ctx.c.publish(&self.counters);
        r.map(|()| read)
    }

    /// The ids resident in each of the store's `tiers` tiers, ascending
    /// (empty for a pinned table, which is loaded whole at open anyway).
    pub(crate) fn resident_ids(&self, tiers: usize) -> Vec<Vec<u64>> {
        let mut out = vec![Vec::new(); tiers];
        if let TableKind::Cached { shards, .. } = &self.kind {
            for sh in shards {
                let sh = sh.lock();
                for (t, c) in sh.caches() {
                    out[t].extend(c.ids());
                }
            }
        }
        for ids in &mut out {
            ids.sort_unstable();
        }
        out
    }

    /// Warm restart, the rows' bytes: call `f(ids, rows)` with the clean
    /// rows tier `tier` holds, at most `max_rows` a call, the rows packed
    /// [`Table::row_bytes`] apart. Returns the rows given. Each shard's
    /// rows are copied out under its lock and given after it is let go, so
    /// that a slow sink (a paced file) never holds a lookup back; the copy
    /// holds at most one shard's rows and a run.
    pub(crate) fn clean_rows_in(
        &self,
        tier: usize,
        max_rows: usize,
        f: &mut RowsSink<'_>,
    ) -> std::io::Result<u64> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(0);
        };
        let rb = self.row_bytes;
        let max_rows = max_rows.max(1);
        let mut ids: Vec<u64> = Vec::new();
        let mut rows: Vec<u8> = Vec::new();
        let mut given = 0;
        for sh in shards {
            {
                let sh = sh.lock();
                for (_, c) in sh.caches().filter(|&(t, _)| t == tier) {
                    for (id, row) in c.clean_rows() {
                        ids.push(id);
                        rows.extend_from_slice(row);
                    }
                }
            }
            // Whole runs now; the rest waits for the next shard's rows.
            let whole = ids.len() / max_rows * max_rows;
            for (i, r) in ids[..whole]
                .chunks(max_rows)
                .zip(rows[..whole * rb].chunks(max_rows * rb))
            {
                f(i, r)?;
            }
            given += whole as u64;
            ids.drain(..whole);
            rows.drain(..whole * rb);
        }
        if !ids.is_empty() {
            f(&ids, &rows)?;
            given += ids.len() as u64;
        }
        Ok(given)
    }

    /// Warm restart from the rows' bytes: put `rows` (of `ids`, packed
    /// [`Table::row_bytes`] apart: the committed values, which the caller
    /// checked) into the first tier, each tier's victims moving down as on
    /// a miss, unless the row is already in memory or out of range. Not
    /// lookups. Returns the rows put back.
    pub(crate) fn install_rows(&self, ids: &[u64], rows: &[u8]) -> u64 {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return 0;
        };
        let rb = self.row_bytes;
        debug_assert_eq!(ids.len() * rb, rows.len());
        let n = shards.len();
        let (order, start) = by_shard(ids, n, |id| self.shard_of(id, n));
        let mut ctx = Ctx::new();
        let mut put = 0;
        for s in 0..n {
            let mut sh = shards[s].lock();
            for &p in &order[start[s] as usize..start[s + 1] as usize] {
                let (id, p) = (ids[p as usize], p as usize);
                if id < self.entry.rows && !sh.holds(id) {
                    sh.insert_top(id, &rows[p * rb..(p + 1) * rb], false, &mut ctx);
                    put += 1;
                }
            }
        }
        ctx.c.warmed = put;
        // Clean rows only: no victim becomes pending, nothing to write.
        self.publish_pending(&mut ctx);
        ctx.c.publish(&self.counters);
        put
    }

    /// Stop filling the first tier from block reads (a warm restart knows
    /// better which rows to bring back).
    pub(crate) fn close_fill(&self) {
        self.fill_open.store(false, Ordering::Relaxed);
    }

    /// Filling a cold cache: install the other rows of home group `g`, just
    /// read for the misses `run`, into the first tier while it has free
    /// room, so that a cold cache warms at a group's rows per read instead
    /// of one. Admission: only into free slots beyond those the round's
    /// other misses will take (nothing is evicted for a row nobody asked
    /// for, neither now nor by the rest of the round), and the first time
    /// a shard is full the table stops filling for good. Consistency: the group's bytes are a
    /// row's newest copy only if the row is in no tier, not pending and not
    /// in the row log, and no write-back of the table has started since the
    /// read was issued (`wb_epoch` unchanged and even), all checked under
    /// the row's shard lock.
    fn fill_from_group(
        &self,
        i: &mut Install<'_>,
        g: u64,
        state: BlockState,
        blocks: &[u8],
        run: &[Miss],
    ) {
        if !self.fill_open.load(Ordering::Relaxed) || i.epoch % 2 == 1 {
            return;
        }
        let e = &self.entry;
        let mut asked = run.iter().map(|m| m.id).peekable();
        for id in e.layout.rows_of(g, e.rows) {
            while asked.next_if(|&a| a < id).is_some() {}
            if asked.next_if_eq(&id).is_some() {
                while asked.next_if_eq(&id).is_some() {}
                continue;
            }
            let mut sh = i.shards[self.shard_of(id, i.shards.len())].lock();
            if sh.top().room() <= *i.left {
                if !sh.top().has_room() {
                    self.fill_open.store(false, Ordering::Relaxed);
                }
                return;
            }
            if sh.holds(id) || sh.logged_at(id) != NOT_LOGGED {
                continue;
            }
            if self.wb_epoch.load(Ordering::Acquire) != i.epoch {
                return;
            }
            row_from_group(e, state, blocks, id, i.row);
            sh.insert_top(id, i.row, false, i.ctx);
            i.ctx.c.filled += 1;
        }
    }

    /// Apply `f(row_bytes, k)` to the rows `items = [(id, k)]` (ids unique,
    /// validated), marking them dirty. `overwrite` says `f` replaces the whole
    /// row, so a missing row need not be read first. The loop (a pinned
    /// table's in id order, a cached table's shard by shard) calls
    /// `ahead(k)` a few items before `f(.., k)`, for the caller to ask for
    /// what `f` will read at `k` (`k`, an index into the caller's values,
    /// jumps about in either order).
    pub(crate) fn modify(
        &self,
        ssd: &Ssd,
        items: &[(u64, usize)],
        overwrite: bool,
        ahead: impl Fn(usize),
        f: impl Fn(&mut [u8], usize),
    ) -> Result<()> {
        let f = RowFn::<_, fn(&[u8], usize)>::Write(f);
        self.visit(ssd, items, Some(overwrite), ahead, f)
    }

    /// Read the rows `items = [(id, k)]` (ids unique, validated) whole,
    /// optimizer state included: `f(row_bytes, k)`, as [`Table::modify`]
    /// finds them (a missed row is read into the cache, as a lookup's
    /// is), but marking nothing dirty and counting lookups, not updates.
    pub(crate) fn read_whole_rows(
        &self,
        ssd: &Ssd,
        items: &[(u64, usize)],
        f: impl Fn(&[u8], usize),
    ) -> Result<()> {
        let f = RowFn::<fn(&mut [u8], usize), _>::Read(f);
        self.visit(ssd, items, None, |_| {}, f)
    }

    /// [`Table::modify`] (`write` = `Some(overwrite)`, `f` a
    /// [`RowFn::Write`]) or [`Table::read_whole_rows`] (`None`, a
    /// [`RowFn::Read`], which is given the rows through `row`, so that a
    /// tier's slot stamps do not take a read for a change).
    fn visit<W: Fn(&mut [u8], usize), R: Fn(&[u8], usize)>(
        &self,
        ssd: &Ssd,
        items: &[(u64, usize)],
        write: Option<bool>,
        ahead: impl Fn(usize),
        f: RowFn<W, R>,
    ) -> Result<()> {
        let cached = |top: &mut crate::tier::cache::SlotCache, slot: usize, k: usize| match &f {
            RowFn::Write(w) => w(top.row_mut(slot), k),
            RowFn::Read(r) => r(top.row(slot), k),
        };
        let rb = self.row_bytes;
        let mut ctx = Ctx::new();
        let overwrite = write == Some(true);
        if write.is_some() {
            ctx.c.updates = items.len() as u64;
        } else {
            ctx.c.lookups = items.len() as u64;
        }
        match &self.kind {
            TableKind::Pinned { chunks, tier } => {
                for &(id, k) in items.iter().take(PINNED_AHEAD) {
                    self.prefetch_pinned(id);
                    ahead(k);
                }
                for (j, &(id, k)) in items.iter().enumerate() {
                    if let Some(&(next, next_k)) = items.get(j + PINNED_AHEAD) {
                        self.prefetch_pinned(next);
                        ahead(next_k);
                    }
                    let p = self.pinned_place(id);
                    let mut ch = chunks[p.chunk].lock();
                    match &f {
                        RowFn::Write(w) => {
                            w(ch.row_mut(p, rb), k);
                            ch.mark(p.local_group);
                        }
                        RowFn::Read(r) => r(ch.row(p, rb), k),
                    }
                }
                ctx.c.hits[*tier] = items.len() as u64;
            }
            TableKind::Cached { shards, .. } => {
                // Back-pressure: while write-backs fail (a full disk), refuse
                // new updates before touching anything.
                if write.is_some()
                    && self.pending_bytes.load(Ordering::Relaxed) > self.pending_limit as i64
                {
                    self.write_back(ssd)?;
                }
                let zero = vec![0u8; rb];
                let mut misses = Vec::new();
                // As a lookup's probe: one lock per shard per call, and
                // the cache misses of the ids ahead overlapped.
                let ids: Vec<u64> = items.iter().map(|&(id, _)| id).collect();
                walk_prefetched(
                    shards,
                    &ids,
                    items,
                    |_, (_, k)| ahead(k),
                    |sh, _, id, (_, k)| {
                        let slot = match sh.locate(id, &mut ctx) {
                            Some(s) => s,
                            None if overwrite => sh.insert_top(id, &zero, true, &mut ctx),
                            None => {
                                misses.push(Miss {
                                    id,
                                    seq: sh.wb_seq,
                                    k,
                                    log: sh.logged_at(id),
                                });
                                return;
                            }
                        };
                        if write.is_some() {
                            sh.before_write(slot, &mut ctx);
                        }
                        cached(sh.top(), slot, k);
                        if write.is_some() {
                            sh.top().set_dirty(slot);
                        }
                    },
                );
                let r = if misses.is_empty() {
                    Ok(())
                } else {
                    self.resolve_misses(ssd, shards, misses, &mut ctx, |sh, slot, run, ctx| {
                        if write.is_some() {
                            sh.before_write(slot, ctx);
                        }
                        for m in run {
                            cached(sh.top(), slot, m.k);
                        }
                        if write.is_some() {
                            sh.top().set_dirty(slot);
                        }
                    })
                };
                self.finish(ssd, &mut ctx);
                r?;
            }
        }
        ctx.c.publish(&self.counters);
        Ok(())
    }
}

/// What [`Table::visit`] does to each row: change it, or read it.
enum RowFn<W, R> {
    /// `f(row, k)` changes the row (it is marked dirty).
    Write(W),
    /// `f(row, k)` reads it.
    Read(R),
}

#[cfg(test)]
mod tests {
    use crate::{Init, Store, StoreConfig, TableConfig};

    use super::TableKind;

    /// The hot rows' sink runs with no shard locked: a slow sink (the
    /// paced hot-rows file) must never hold a lookup back. Every row the
    /// tier holds clean is given once.
    #[test]
    fn clean_rows_reach_the_sink_with_no_shard_locked() {
        let dir = tempfile::tempdir().unwrap();
        let rows = 20_000u64;
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, 8).init(Init::Zeros))
            .dram_capacity(4 << 20)
            .build();
        let store = Store::create(dir.path().join("s"), cfg).unwrap();
        let ids: Vec<u64> = (0..rows).step_by(3).collect();
        let vals = vec![1.0f32; ids.len() * 8];
        store.update("t", &ids, &vals).unwrap();
        store.checkpoint().unwrap(); // the rows are clean now
        let t = store.table("t").unwrap();
        let TableKind::Cached { shards, .. } = &t.kind else {
            panic!("table t is not cached");
        };
        assert!(shards.len() > 1, "{} shards", shards.len());
        let (mut given, mut calls) = (0u64, Vec::new());
        let n = t
            .clean_rows_in(0, 100, &mut |ids, rows| {
                for (i, sh) in shards.iter().enumerate() {
                    assert!(sh.try_lock().is_some(), "shard {i} locked in the sink");
                }
                assert!(ids.len() <= 100);
                assert_eq!(rows.len(), ids.len() * t.row_bytes);
                given += ids.len() as u64;
                calls.push(ids.len());
                Ok(())
            })
            .unwrap();
        assert_eq!(n, given);
        assert_eq!(given, ids.len() as u64, "every updated row is cached clean");
        // Runs are whole across shards (the file's chunks as before): all
        // but the last hold 100 rows.
        let (last, runs) = calls.split_last().unwrap();
        assert!(
            runs.len() > 1 && runs.iter().all(|&r| r == 100),
            "{calls:?}"
        );
        assert!(*last >= 1 && *last <= 100);
    }
}
