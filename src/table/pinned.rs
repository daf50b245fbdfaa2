//! Pinned tables: loaded whole at open, flushed chunk by chunk at a checkpoint.

use super::*;

impl Table {
    /// Fill a pinned table from SSD (or with initial values when fresh).
    pub(super) fn load_pinned(&self, ssd: &Ssd, fresh: bool) -> Result<()> {
        let TableKind::Pinned { chunks, .. } = &self.kind else {
            return Ok(());
        };
        let e = &self.entry;
        let l = e.layout;
        let rb = self.row_bytes;
        if fresh {
            for ch in chunks {
                let mut ch = ch.lock();
                for g in ch.first_group..ch.first_group + ch.groups as u64 {
                    for id in l.rows_of(g, e.rows) {
                        let p = self.pinned_place(id);
                        init_row_bytes(
                            e.init,
                            e.init_scale,
                            e.seed,
                            id,
                            self.elem,
                            self.dim,
                            ch.row_mut(p, rb),
                        );
                    }
                }
            }
            return Ok(());
        }
        let total_groups = l.groups_for(e.rows);
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        let gb = l.group_bytes();
        let mut g0 = 0u64;
        while g0 < total_groups {
            let g1 = (g0 + LOAD_BATCH_GROUPS as u64).min(total_groups);
            let groups: Vec<u64> = (g0..g1).collect();
            ssd.read_groups(e, &groups, &mut buf)?;
            for (gi, &g) in groups.iter().enumerate() {
                let blocks = &buf.as_slice()[gi * gb..(gi + 1) * gb];
                let state = self.checked_group(ssd, g, blocks)?;
                let mut ch = chunks[(g / GROUPS_PER_CHUNK) as usize].lock();
                for id in l.rows_of(g, e.rows) {
                    let p = self.pinned_place(id);
                    row_from_group(e, state, blocks, id, ch.row_mut(p, rb));
                }
            }
            g0 = g1;
        }
        Ok(())
    }

    pub(super) fn flush_pinned(&self, ssd: &Ssd, chunks: &[Mutex<Chunk>]) -> Result<()> {
        let e = &self.entry;
        let l = e.layout;
        let rb = self.row_bytes;
        let gb = l.group_bytes();
        let mut buf = self.wb_lock.lock();
        for ch in chunks {
            let mut c = ch.lock();
            let dirty: Vec<usize> = (0..c.groups)
                .filter(|&lg| c.dirty[lg / 64] >> (lg % 64) & 1 == 1)
                .collect();
            if dirty.is_empty() {
                continue;
            }
            buf.ensure(dirty.len() * gb);
            let mut groups = Vec::with_capacity(dirty.len());
            let mut rows_written = 0u64;
            for (i, &lg) in dirty.iter().enumerate() {
                let g = c.first_group + lg as u64;
                groups.push(g);
                let blocks = &mut buf.as_mut_slice()[i * gb..(i + 1) * gb];
                blocks.fill(0);
                for id in l.rows_of(g, e.rows) {
                    let p = self.pinned_place(id);
                    write_group_payload(blocks, l.locate(id).offset, c.row(p, rb));
                    rows_written += 1;
                }
            }
            // Written under the chunk lock: updates to these rows wait, so
            // clearing the dirty bits after success loses nothing.
            ssd.write_groups(e, &groups, &mut buf)?;
            c.dirty.iter_mut().for_each(|w| *w = 0);
            self.counters.wrote_groups(groups.len(), gb, rows_written);
        }
        Ok(())
    }
}
