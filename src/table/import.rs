//! Bulk load: rows written straight to their home block groups, whole
//! groups at a time, past the caches and the row log.

use super::*;

/// What a chunk's write covered, for [`Table::after_import_write`].
struct Imported<'a> {
    /// The chunk's rows.
    ids: &'a [u64],
    /// The call's first row (`encode` is indexed from it).
    start: u64,
    /// Whether the write failed.
    failed: bool,
}

impl Table {
    /// Whether [`Table::import_groups`] can take this table's rows: a
    /// cached table whose rows are weights only (an optimizer's state would
    /// have to be read to be kept).
    pub(crate) fn imports_directly(&self) -> bool {
        matches!(self.kind, TableKind::Cached { .. }) && self.row_bytes == self.weight_bytes
    }

    /// Write rows `start .. start + n` home, where `encode(i, row)` writes
    /// the bytes of row `start + i`; the range covers whole block groups
    /// (the caller splits off partial ones). The range's groups are
    /// journaled first, in one journal write and sync (never-written ones
    /// as holes, without an image). Then they are staged
    /// [`WB_CHUNK_BYTES`] at a time, the next chunk on a helper thread
    /// while the current one is written in one sequential write, and after
    /// each write the chunk's rows' copies in memory take the new bytes,
    /// its pending copy and its row-log entry are dropped (the home copy
    /// is now the newest), and the shards' `wb_seq` moves so that a miss
    /// that read the old group reads again. Caller holds the store's gate.
    pub(crate) fn import_groups(
        &self,
        ssd: &Ssd,
        start: u64,
        n: u64,
        encode: &(dyn Fn(usize, &mut [u8]) + Sync),
    ) -> Result<()> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            unreachable!("import_groups on a pinned table (see imports_directly)");
        };
        let e = &self.entry;
        let l = e.layout;
        let gb = l.group_bytes();
        let rb = self.row_bytes;
        let end = start + n;
        let max_groups = (WB_CHUNK_BYTES / gb).max(1);
        // Back-pressure, as for updates: while write-backs fail (a full
        // disk), refuse before touching anything.
        if self.pending_bytes.load(Ordering::Relaxed) > self.pending_limit as i64 {
            self.write_back(ssd)?;
        }
        let mut buf = self.wb_lock.lock();
        if n == 0 {
            return Ok(());
        }
        // Every group of the range journaled at once: one journal sync for
        // the call, where each chunk's write would sync its own (a bulk
        // load of fresh tables: one header block per 253 groups, no image).
        // Nothing is written yet if this fails.
        let (g, last) = (l.locate(start).group, l.locate(end - 1).group);
        // Every row of these groups is overwritten: a damaged group's old
        // image is journaled as it is, and the import repairs it.
        ssd.journal(e, &(g..=last).collect::<Vec<u64>>(), None, true)?;
        let mut stale = false;
        let mut freed = 0usize;
        let mut ctx = Ctx::new();
        // The chunks: at most `max_groups` whole groups each.
        let chunks: Vec<std::ops::Range<u64>> = (g..=last)
            .step_by(max_groups)
            .map(|c| c..(c + max_groups as u64).min(last + 1))
            .collect();
        // Each chunk's groups, its rows encoded into them (zeros elsewhere).
        let stage = |groups: &std::ops::Range<u64>, buf: &mut AlignedBuf| {
            let len = (groups.end - groups.start) as usize * gb;
            buf.ensure(len);
            buf.as_mut_slice()[..len].fill(0);
            let mut row = vec![0u8; rb];
            for (gi, g) in groups.clone().enumerate() {
                let blocks = &mut buf.as_mut_slice()[gi * gb..(gi + 1) * gb];
                for id in l.rows_of(g, e.rows) {
                    debug_assert!(id >= start && id < end, "a partial group");
                    encode((id - start) as usize, &mut row);
                    write_group_payload(blocks, l.locate(id).offset, &row);
                }
            }
        };
        // Two buffers: the next chunk is encoded on a helper thread while
        // this one writes the current chunk and updates memory after it.
        let mut spare = ssd.take_buf();
        let mut result = Ok(());
        if let Some(c) = chunks.first() {
            stage(c, &mut buf);
        }
        for (ci, chunk) in chunks.iter().enumerate() {
            if ci > 0 {
                // The helper staged this chunk.
                std::mem::swap(&mut *buf, &mut spare);
            }
            let groups: Vec<u64> = chunk.clone().collect();
            let ids: Vec<u64> = groups.iter().flat_map(|&g| l.rows_of(g, e.rows)).collect();
            let r = std::thread::scope(|scope| {
                if let Some(c) = chunks.get(ci + 1) {
                    let (stage, spare) = (&stage, &mut spare);
                    scope.spawn(move || stage(c, spare));
                }
                self.wb_epoch.fetch_add(1, Ordering::AcqRel);
                let r = ssd.write_groups(e, &groups, &mut buf);
                self.wb_epoch.fetch_add(1, Ordering::AcqRel);
                // A failed write leaves the groups unknown (some may have
                // reached the disk): the rows go pending, in memory and
                // authoritative, as a failed write-back's do, and the next
                // write-back or checkpoint retries them.
                if r.is_err() {
                    self.counters
                        .writeback_errors
                        .fetch_add(1, Ordering::Relaxed);
                } else {
                    self.counters
                        .wrote_groups(groups.len(), gb, ids.len() as u64);
                }
                let done = Imported {
                    ids: &ids,
                    start,
                    failed: r.is_err(),
                };
                self.after_import_write(shards, done, encode, &mut ctx, &mut freed, &mut stale);
                r
            });
            if r.is_err() {
                // Stop here: the next chunk would only fail the same way
                // and hold more rows in memory.
                result = r;
                break;
            }
        }
        ssd.put_buf(spare);
        self.finish_import(ssd, freed, stale, &mut ctx);
        result
    }

    /// Memory after a chunk's write (`done`): a miss that read a group
    /// before it and installed the old row before this locks its shard is
    /// corrected here; one that installs later sees `wb_seq` moved and
    /// reads the new group. After a failed write the rows not in a tier go
    /// pending.
    fn after_import_write(
        &self,
        shards: &[Mutex<Shard>],
        done: Imported<'_>,
        encode: &(dyn Fn(usize, &mut [u8]) + Sync),
        ctx: &mut Ctx,
        freed: &mut usize,
        stale: &mut bool,
    ) {
        let Imported { ids, start, failed } = done;
        let mut row = vec![0u8; self.row_bytes];
        let (order, bounds) = by_shard(ids, shards.len(), |id| self.shard_of(id, shards.len()));
        for (s, w) in bounds.windows(2).enumerate() {
            if w[0] == w[1] {
                continue;
            }
            let mut sh = shards[s].lock();
            let sh = &mut *sh;
            let mine = &order[w[0] as usize..w[1] as usize];
            // After a write that succeeded, only the rows the shard
            // holds (cached, pending or logged) need a change: when it
            // holds fewer than the chunk gives it (a bulk load into a
            // cold store), visit those instead of probing every row.
            let visit: Vec<u64> = if !failed && sh.held_rows() < mine.len() {
                sh.held_ids_in(ids[0]..ids[ids.len() - 1] + 1)
            } else {
                mine.iter().map(|&pos| ids[pos as usize]).collect()
            };
            for id in visit {
                let mut here = false;
                if let Some(slot) = sh.top.get(id) {
                    encode((id - start) as usize, sh.top.row_mut(slot));
                    here = true;
                }
                for (_, c) in sh.lower.iter_mut().filter(|_| !here) {
                    if let Some(slot) = c.get(id) {
                        encode((id - start) as usize, c.row_mut(slot));
                        here = true;
                        break;
                    }
                }
                if failed {
                    if !here {
                        encode((id - start) as usize, &mut row);
                        Shard::add_pending(&mut sh.pending, &mut sh.next_gen, id, &row, ctx);
                    }
                    continue;
                }
                if sh.pending.remove(&id).is_some() {
                    *freed += self.row_bytes;
                }
                *stale |= sh.unlog(id);
            }
            sh.wb_seq += 1;
        }
    }

    /// Publish what an import did to the pending bytes and the row log.
    fn finish_import(&self, ssd: &Ssd, freed: usize, stale: bool, ctx: &mut Ctx) {
        self.pending_bytes
            .fetch_sub(freed as i64, Ordering::Relaxed);
        self.publish_pending(ctx);
        if stale {
            ssd.log().mark_stale();
        }
    }
}
