//! Work split over two threads: one produces items (reads blocks, parses
//! lines) while the caller's thread consumes them in order, the items'
//! buffers going back for reuse.

use std::sync::mpsc;

/// The producer's end: hands items to the consumer and gets buffers back.
pub(super) struct Handoff<T> {
    full: mpsc::SyncSender<T>,
    free: mpsc::Receiver<T>,
}

impl<T: Default> Handoff<T> {
    /// Hand `item` on, waiting while the consumer is `depth` items behind;
    /// returns the buffer to fill next (one the consumer is done with, or
    /// a new one), or `None` when the consumer has stopped.
    pub(super) fn send(&mut self, item: T) -> Option<T> {
        self.full.send(item).ok()?;
        Some(self.free.try_recv().unwrap_or_default())
    }
}

/// Run `produce` on a thread named `name`, handing each item it sends
/// to `consume` on this thread, in order, at most `depth` items ahead;
/// then `produce`'s result. `None` when the system refuses the thread
/// (nothing was produced: the caller does the work itself). A panic of
/// either side reaches the caller.
pub(super) fn on_a_thread<T, R>(
    name: &str,
    depth: usize,
    produce: impl FnOnce(&mut Handoff<T>) -> R + Send,
    mut consume: impl FnMut(&mut T),
) -> Option<R>
where
    T: Default + Send,
    R: Send,
{
    std::thread::scope(|s| {
        let (full, full_rx) = mpsc::sync_channel::<T>(depth);
        let (free_tx, free) = mpsc::channel::<T>();
        let mut handoff = Handoff { full, free };
        let producer = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, move || produce(&mut handoff))
            .ok()?;
        for mut item in full_rx {
            consume(&mut item);
            // The producer may have finished: then the buffer is dropped.
            let _ = free_tx.send(item);
        }
        Some(
            producer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items arrive in order, buffers come back, and the result is
    /// `produce`'s.
    #[test]
    fn items_in_order_and_buffers_reused() {
        let mut got = Vec::new();
        let mut reused = 0;
        let r = on_a_thread(
            "t",
            2,
            |h: &mut Handoff<Vec<u32>>| {
                let mut buf = Vec::new();
                for i in 0..1000u32 {
                    if buf.capacity() > 0 {
                        reused += 1;
                    }
                    buf.clear();
                    buf.extend([i, i + 1]);
                    buf = h.send(buf)?;
                }
                Some(reused)
            },
            |b| got.push(b[0]),
        );
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
        let reused = r.expect("a thread").expect("not stopped");
        assert!(reused > 0, "no buffer came back");
    }
}
