//! A kept tier's regions (`crate::store::kept`): what a close records of
//! each cache shard's slab in a file-backed tier, and what an open takes
//! back from it.

use embtier_format::kept::{KeptRegion, FREE_SLOT};

use super::{Table, TableKind};
use crate::tier::cache::SlotCache;
use crate::tier::stamps::{Gen, StampFile};

impl Table {
    /// The regions of tier `tier`'s file that this table's cache shards
    /// hold, each with the id in each of its slots, after writing each
    /// through to the file. None when a row of the table is dirty or waits
    /// to be written: only a committed, clean cache may be kept. A pinned
    /// table has none (its rows are loaded from the data file at open).
    pub(crate) fn kept_regions(&self, tier: usize) -> std::io::Result<Option<Vec<KeptRegion>>> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(Some(Vec::new()));
        };
        let mut out = Vec::new();
        for (s, sh) in shards.iter().enumerate() {
            let sh = sh.lock();
            if !sh.pending.is_empty() || !sh.later.is_empty() {
                return Ok(None);
            }
            for (_, c) in sh.caches().filter(|&(t, _)| t == tier) {
                let (Some(offset), Some(slots)) = (c.slab().file_offset(), c.slots(FREE_SLOT))
                else {
                    return Ok(None);
                };
                c.slab().flush()?;
                out.push(self.region(s, offset, c, slots));
            }
        }
        Ok(Some(out))
    }

    /// This table's caches in tier `tier`, shard by shard: (shard, where
    /// its slab lies in the tier's file, capacity in rows). What a kept
    /// tier's regions must match to be taken.
    pub(crate) fn tier_regions(&self, tier: usize) -> Vec<(u32, Option<u64>, u32)> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (s, sh) in shards.iter().enumerate() {
            let sh = sh.lock();
            for (_, c) in sh.caches().filter(|&(t, _)| t == tier) {
                out.push((s as u32, c.slab().file_offset(), c.capacity() as u32));
            }
        }
        out
    }

    /// Take the rows region `r` of a kept tier recorded into shard
    /// `r.shard`'s cache of tier `tier`, new and lying where `r` does
    /// ([`Table::tier_regions`]): each slot's bytes are its row's already.
    /// A row another tier of the shard holds is left out. Returns the rows
    /// taken.
    pub(crate) fn adopt_region(&self, tier: usize, r: &KeptRegion, generation: u64) -> u64 {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return 0;
        };
        let Some(sh) = shards.get(r.shard as usize) else {
            return 0;
        };
        let rows = self.entry.rows;
        let mut sh = sh.lock();
        let sh = &mut *sh;
        let (top, lower) = (&mut sh.top, &mut sh.lower);
        let taken = if tier == 0 {
            top.adopt(&r.slots, FREE_SLOT, rows, generation, |id| {
                lower.iter().any(|(_, c)| c.get(id).is_some())
            })
        } else {
            let Some(k) = lower.iter().position(|(t, _)| *t == tier) else {
                return 0;
            };
            let (before, rest) = lower.split_at_mut(k);
            let ((_, cache), after) = rest.split_first_mut().expect("the tier's cache");
            cache.adopt(&r.slots, FREE_SLOT, rows, generation, |id| {
                top.get(id).is_some()
                    || before
                        .iter()
                        .chain(after.iter())
                        .any(|(_, c)| c.get(id).is_some())
            })
        };
        if taken > 0 {
            self.close_fill();
        }
        taken as u64
    }

    /// Give each of this table's caches in tier `tier`, shard by shard
    /// (the order of [`Table::tier_regions`]), its stamps from `file`.
    pub(crate) fn attach_stamps(&self, tier: usize, file: &mut StampFile, gen: &Gen) {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return;
        };
        for sh in shards {
            let mut sh = sh.lock();
            let sh = &mut *sh;
            let caches =
                std::iter::once((0, &mut sh.top)).chain(sh.lower.iter_mut().map(|(t, c)| (*t, c)));
            for (_, c) in caches.filter(|&(t, _)| t == tier) {
                c.attach_stamps(file.carve(c.capacity(), gen));
            }
        }
    }

    /// What this table's caches in tier `tier` hold, by their stamps, with
    /// the bytes of checkpoint `generation`, as a kept tier's regions
    /// (in the order of [`Table::tier_regions`]); and the rows they held
    /// whose bytes changed after it.
    pub(crate) fn stamped_regions(&self, tier: usize, generation: u64) -> (Vec<KeptRegion>, u64) {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return (Vec::new(), 0);
        };
        let mut out = Vec::new();
        let mut changed = 0;
        for (s, sh) in shards.iter().enumerate() {
            let sh = sh.lock();
            for (_, c) in sh.caches().filter(|&(t, _)| t == tier) {
                let Some(offset) = c.slab().file_offset() else {
                    continue;
                };
                let (slots, n) = c.stamped_slots(generation, FREE_SLOT);
                changed += n;
                out.push(self.region(s, offset, c, slots));
            }
        }
        (out, changed)
    }

    /// Shard `shard`'s cache `c`, whose slab lies at `offset` of its tier's
    /// file, as a kept tier's region holding `slots`.
    fn region(&self, shard: usize, offset: u64, c: &SlotCache, slots: Vec<u64>) -> KeptRegion {
        KeptRegion {
            table: self.index,
            shard: shard as u32,
            offset,
            capacity: c.capacity() as u32,
            row_bytes: self.row_bytes as u32,
            slots,
        }
    }
}
