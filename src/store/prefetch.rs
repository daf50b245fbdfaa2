//! Prefetch: rows read into the first tier on a background thread and
//! pinned there until the handle is dropped.

use super::*;

/// Rows being read into DRAM by [`Store::prefetch`], pinned there until
/// this handle is dropped.
#[must_use = "dropping a Prefetch at once releases its pins"]
pub struct Prefetch<'a> {
    table: Arc<Table>,
    handle: Option<std::thread::JoinHandle<(Vec<u64>, Result<()>)>>,
    pins: Vec<u64>,
    /// The store's fork generation and opener ([`Store::check_process`]).
    opened_in: (u64, u32),
    _store: std::marker::PhantomData<&'a Store>,
}

impl Prefetch<'_> {
    /// Whether the reads have finished.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Wait for the reads; returns how many rows were pinned (the others
    /// were read but hit the pin bound). An error (a failed or corrupt read)
    /// leaves the rows it concerns out of DRAM, and a later lookup of them
    /// reports it again. The pins last until the handle is dropped.
    pub fn wait(&mut self) -> Result<usize> {
        // A forked copy: the thread is the opener's.
        if crate::fork::forked_since(self.opened_in.0) {
            return Err(Error::Forked {
                pid: self.opened_in.1,
            });
        }
        let Some(h) = self.handle.take() else {
            return Ok(self.pins.len());
        };
        match h.join() {
            Ok((pins, r)) => {
                self.pins = pins;
                r.map(|()| self.pins.len())
            }
            Err(_) => Err(Error::PrefetchPanicked {
                table: self.table.name.clone(),
            }),
        }
    }
}

impl Drop for Prefetch<'_> {
    fn drop(&mut self) {
        if crate::fork::forked_since(self.opened_in.0) {
            // A forked copy: neither the thread nor the pins are this
            // process's to wait for or release (see `Store`'s drop).
            std::mem::forget(self.handle.take());
            std::mem::forget(Arc::clone(&self.table));
            return;
        }
        let _ = self.wait();
        self.table.unpin(&self.pins);
    }
}

/// The store's prefetch threads still running: a drop or a close waits
/// for them, since their reads install rows and evict others, writing
/// dirty ones back through the store. (A detached handle may outlive the
/// store; the thread behind it may not, or it would write into the store
/// opened next, and move rows in a tier a close has kept.)
#[derive(Default)]
pub(super) struct Prefetching(Arc<Running>);

#[derive(Default)]
struct Running {
    threads: parking_lot::Mutex<usize>,
    idle: parking_lot::Condvar,
}

/// One prefetch thread, counted until it ends (or unwinds).
struct Counted(Arc<Running>);

impl Drop for Counted {
    fn drop(&mut self) {
        let mut n = self.0.threads.lock();
        *n -= 1;
        if *n == 0 {
            self.0.idle.notify_all();
        }
    }
}

impl Prefetching {
    fn enter(&self) -> Counted {
        *self.0.threads.lock() += 1;
        Counted(Arc::clone(&self.0))
    }

    /// Wait until no prefetch thread of the store runs.
    pub(super) fn wait_idle(&self) {
        let mut n = self.0.threads.lock();
        while *n > 0 {
            self.0.idle.wait(&mut n);
        }
    }
}

impl Drop for Prefetching {
    fn drop(&mut self) {
        self.wait_idle();
    }
}

impl Store {
    /// Start reading `ids`' rows into DRAM on a background thread (the SSD
    /// reads go through the store's engine, io_uring where available) and
    /// pin them there, so that a later [`Store::lookup`] or [`Store::step`]
    /// of those ids hits DRAM even while other batches run. The pins are
    /// released when the returned [`Prefetch`] is dropped: drop it after the
    /// batch's `step`, as in FBGEMM's prefetch pipeline.
    ///
    /// Pinning is bounded: at most half of each DRAM shard's rows are pinned
    /// at once, whatever the number of outstanding prefetches; rows beyond
    /// the bound are still read into DRAM, only not pinned. A `step` of rows
    /// that were not prefetched, or not pinned, is correct, only slower.
    /// Prefetch reads count as lookups in [`Store::stats`]. Pinned tables
    /// need no prefetch; theirs returns at once.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Optimizer, Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 1_000_000, 16).init(Init::Zeros)).build())?;
    /// let mut next = store.prefetch("t", &[7, 8, 9])?; // reads start now
    /// // ... compute the current batch ...
    /// next.wait()?;                              // rows 7, 8, 9 are in DRAM, pinned
    /// let mut rows = vec![0f32; 3 * 16];
    /// store.lookup("t", &[7, 8, 9], &mut rows)?; // DRAM hits
    /// store.step("t", &[7, 8, 9], &vec![0.1; 3 * 16])?;
    /// drop(next);                                // unpinned
    /// assert_eq!(store.pinned_rows(), 0);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn prefetch(&self, table: &str, ids: &[u64]) -> Result<Prefetch<'_>> {
        self.start_prefetch(table, ids)
    }

    /// [`Store::prefetch`] whose handle does not borrow the store, for
    /// owners that cannot hold a borrow (the Python binding). The handle
    /// keeps the table's memory alive until it is dropped; dropping or
    /// closing the store first is safe: that waits for the prefetch's
    /// reads to end, and its pins then go with the table.
    pub fn prefetch_detached(&self, table: &str, ids: &[u64]) -> Result<Prefetch<'static>> {
        self.start_prefetch(table, ids)
    }

    fn start_prefetch<'a>(&self, table: &str, ids: &[u64]) -> Result<Prefetch<'a>> {
        let t = Arc::clone(self.table(table)?);
        Self::check_ids(&t, ids)?;
        let ssd = Arc::clone(&self.ssd);
        let ids = ids.to_vec();
        let worker = Arc::clone(&t);
        let counted = self.prefetching.enter();
        let handle = std::thread::Builder::new()
            .name("embtier-prefetch".into())
            .spawn(move || {
                let _counted = counted;
                let mut pins = Vec::new();
                let mut out = vec![0f32; ids.len() * worker.dim];
                let _gate = ssd.read_gate();
                let r = worker.lookup_pinning(&ssd, &ids, &mut out, Some(&mut pins));
                (pins, r)
            })
            .map_err(|e| Error::io(&self.dir, "spawn prefetch thread", e))?;
        Ok(Prefetch {
            table: t,
            handle: Some(handle),
            pins: Vec::new(),
            opened_in: self.opened_in,
            _store: std::marker::PhantomData,
        })
    }

    /// Rows pinned in DRAM by outstanding prefetches, over all tables.
    pub fn pinned_rows(&self) -> u64 {
        self.tables.iter().map(|t| t.pinned_rows() as u64).sum()
    }
}
