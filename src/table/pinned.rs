//! Pinned tables: loaded whole at open, flushed chunk by chunk at a checkpoint.

use super::*;

impl Table {
    /// Fill a pinned table from SSD (or with initial values when fresh).
    pub(super) fn load_pinned(&self, ssd: &Ssd, fresh: bool) -> Result<()> {
        let TableKind::Pinned { chunks, .. } = &self.kind else {
            return Ok(());
        };
        let e = &self.entry;
        let rb = self.row_bytes;
        if fresh {
            for ch in chunks {
                let mut ch = ch.lock();
                for i in 0..ch.rows {
                    let id = ch.first_row + i as u64;
                    init_row_bytes(
                        e.init,
                        e.init_scale,
                        e.seed,
                        id,
                        self.elem,
                        self.dim,
                        ch.row_mut(id, rb),
                    );
                }
            }
            return Ok(());
        }
        let total_groups = e.rows.div_ceil(e.layout.rows_per_group as u64);
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        let gb = e.layout.group_bytes();
        let rpc = GROUPS_PER_CHUNK * e.layout.rows_per_group as u64;
        let mut g0 = 0u64;
        while g0 < total_groups {
            let g1 = (g0 + LOAD_BATCH_GROUPS as u64).min(total_groups);
            let groups: Vec<u64> = (g0..g1).collect();
            ssd.read_groups(e, &groups, &mut buf)?;
            for (gi, &g) in groups.iter().enumerate() {
                let blocks = &buf.as_slice()[gi * gb..(gi + 1) * gb];
                let first = g * e.layout.rows_per_group as u64;
                let state = self.checked_group(ssd, g, blocks)?;
                let last = (first + e.layout.rows_per_group as u64).min(e.rows);
                for id in first..last {
                    let mut ch = chunks[(id / rpc) as usize].lock();
                    row_from_group(e, state, blocks, id, ch.row_mut(id, rb));
                }
            }
            g0 = g1;
        }
        Ok(())
    }

    pub(super) fn flush_pinned(&self, ssd: &Ssd, chunks: &[Mutex<Chunk>]) -> Result<()> {
        let e = &self.entry;
        let rb = self.row_bytes;
        let rpg = e.layout.rows_per_group as u64;
        let gb = e.layout.group_bytes();
        let mut buf = self.wb_lock.lock();
        for ch in chunks {
            let mut c = ch.lock();
            let dirty: Vec<usize> = (0..GROUPS_PER_CHUNK as usize)
                .filter(|&lg| c.dirty[lg / 64] >> (lg % 64) & 1 == 1)
                .collect();
            if dirty.is_empty() {
                continue;
            }
            buf.ensure(dirty.len() * gb);
            let first_group = c.first_row / rpg;
            let mut groups = Vec::with_capacity(dirty.len());
            let mut rows_written = 0u64;
            for (i, &lg) in dirty.iter().enumerate() {
                let g = first_group + lg as u64;
                groups.push(g);
                let blocks = &mut buf.as_mut_slice()[i * gb..(i + 1) * gb];
                blocks.fill(0);
                let first = g * rpg;
                let last = (first + rpg).min(e.rows);
                for id in first..last {
                    write_group_payload(blocks, e.layout.offset_in_group(id), c.row(id, rb));
                }
                rows_written += last - first;
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
