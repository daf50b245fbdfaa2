//! The store's lock: one process, and one open in it, at a time.

use super::*;

/// The store directories this process holds open, by (device, inode) of
/// the directory, so that a path alias (a symlink, a bind mount) is the
/// same store; and the tier files outside them, by their lock file's.
pub(super) static OPEN_STORES: parking_lot::Mutex<Vec<(u64, u64)>> =
    parking_lot::Mutex::new(Vec::new());

/// The store's exclusive lock: an open-file-description lock
/// (`fcntl(F_OFD_SETLK)`, Linux 3.15 on; a POSIX record lock elsewhere)
/// on the LOCK file against other processes, and [`OPEN_STORES`] against
/// a second open in this one. Released when dropped or when the process
/// dies (so a dead process's lock never blocks).
///
/// Not a record lock (`F_SETLK`): closing *any* descriptor of the file in
/// the holding process releases one, and a user's `cp -r` or
/// `shutil.copytree` of the open store from the training process did,
/// letting a second process open the store beside it. An OFD lock goes
/// only with the description it was taken on. Like an `flock`, that
/// description is shared with a child forked while the store is open (a
/// DataLoader worker), which kept the store locked after its owner closed
/// it: the fork handler ([`crate::fork::lock_fd`]) closes the child's copy
/// of the descriptor at the fork.
pub(super) struct LockFile {
    file: Option<File>,
    key: (u64, u64),
    /// The fork generation it was taken in ([`crate::fork`]).
    generation: u64,
    /// Its slot among the descriptors a forked child closes.
    fork_slot: Option<usize>,
}

impl LockFile {
    pub(super) fn acquire(dir: &Path) -> Result<LockFile> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, "stat", e))?;
        Self::acquire_at(dir.join(LOCK_FILE), Some((meta.dev(), meta.ino())))
    }

    /// The lock of a tier's file outside the store's directory
    /// (`<tier file>.lock`, made if missing): two stores naming one tier
    /// file (two trainers started from one config template) would each
    /// truncate and map it, serving and checkpointing each other's bytes.
    /// Keyed by the lock file's own (device, inode) in [`OPEN_STORES`].
    pub(super) fn acquire_tier(file: &Path) -> Result<LockFile> {
        // A tier file in a directory that does not exist is the config's
        // mistake: named as the tier file, not as its lock.
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                let e = std::io::Error::from_raw_os_error(libc::ENOENT);
                return Err(Error::io(file, "open", e));
            }
        }
        let mut name = file.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        Self::acquire_at(lock.clone(), None).map_err(|e| match e {
            // A lock that cannot be made beside the file (a read-only or
            // unwritable directory): the file cannot be either, and it is
            // the one the config named.
            Error::Io {
                path,
                op: "open",
                source,
                ..
            } if path == lock => Error::io(file, "open", source),
            e => e,
        })
    }

    /// Lock the file at `path`, registered under `key`, or where None,
    /// the file's own (device, inode). The registry is checked before the
    /// file is opened: opening and closing a descriptor of a file this
    /// process holds a record lock on would release that lock.
    fn acquire_at(path: PathBuf, key: Option<(u64, u64)>) -> Result<LockFile> {
        use std::os::unix::fs::MetadataExt;
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        let mut open = OPEN_STORES.lock();
        let known = key.or_else(|| std::fs::metadata(&path).ok().map(id));
        if known.is_some_and(|k| open.contains(&k)) {
            return Err(Error::Locked {
                path,
                pid: std::process::id(),
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, "open", e))?;
        // A file made since the check is another inode, not registered:
        // the registry's mutex is held throughout.
        let key = match key {
            Some(k) => k,
            None => id(file.metadata().map_err(|e| Error::io(&path, "stat", e))?),
        };
        Self::lock(path, file, key, &mut open)
    }

    /// Take the record lock on `file` (at `path`), write this process's
    /// pid into it and register `key`; the registry's mutex is held.
    fn lock(
        path: PathBuf,
        mut file: File,
        key: (u64, u64),
        open: &mut Vec<(u64, u64)>,
    ) -> Result<LockFile> {
        use std::os::fd::AsRawFd;
        // SAFETY: `flock` is a plain C struct for which all-zero bytes are
        // valid; the fields that matter are set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as _;
        lock.l_whence = libc::SEEK_SET as _;
        // l_start = 0, l_len = 0: the whole file; l_pid = 0, as an OFD
        // lock requires.
        #[cfg(target_os = "linux")]
        let cmd = libc::F_OFD_SETLK;
        #[cfg(not(target_os = "linux"))]
        let cmd = libc::F_SETLK;
        let fd = file.as_raw_fd();
        let try_lock = || {
            // SAFETY: fcntl on a valid open descriptor with a pointer to
            // an initialised `flock` that outlives the call.
            let mut rc = unsafe { libc::fcntl(fd, cmd, &lock) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                // A kernel before OFD locks (3.15): a record lock.
                // SAFETY: as above.
                rc = unsafe { libc::fcntl(fd, libc::F_SETLK, &lock) };
            }
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // A child this process spawns (`posix_spawn`, which runs no fork
        // handler) shares the lock's description from its clone until its
        // exec closes it (close-on-exec): a close and reopen of the store
        // in that window finds the file locked, and naming this process.
        // Such a holder goes within milliseconds; another process that
        // holds the lock wrote its own pid, and is reported at once.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let err = match try_lock() {
                Ok(()) => break,
                Err(err) => err,
            };
            if !matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                return Err(Error::io(&path, "fcntl(F_OFD_SETLK)", err));
            }
            // Another holder. Closing this descriptor is harmless: this
            // process holds no lock on the file.
            let mut s = String::new();
            let _ = std::io::Seek::seek(&mut &file, std::io::SeekFrom::Start(0));
            let _ = (&file).read_to_string(&mut s);
            let pid: u32 = s.trim().parse().unwrap_or(0);
            if pid != std::process::id() || std::time::Instant::now() >= deadline {
                return Err(Error::Locked { path, pid });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        file.set_len(0)
            .map_err(|e| Error::io(&path, "truncate", e))?;
        write!(file, "{}", std::process::id()).map_err(|e| Error::io(&path, "write", e))?;
        open.push(key);
        let fork_slot = crate::fork::lock_fd(file.as_raw_fd());
        Ok(LockFile {
            file: Some(file),
            key,
            generation: crate::fork::generation(),
            fork_slot,
        })
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // A forked copy: the registry's mutex may have been held by a
        // thread at the fork, so only the descriptor goes. The fork
        // handler closed it already where it had a slot (its number may
        // name another file now); else closing this copy leaves the
        // opener's lock, on its own descriptor, as it is.
        if crate::fork::forked_since(self.generation) {
            let file = self.file.take();
            if self.fork_slot.is_some() {
                std::mem::forget(file);
            }
            return;
        }
        if let Some(slot) = self.fork_slot {
            crate::fork::unlock_fd(slot);
        }
        // Release the lock (by closing its descriptor) before the
        // registry lets this process open the store again: the other order
        // would let a new open's lock be released by this close.
        let mut open = OPEN_STORES.lock();
        drop(self.file.take());
        open.retain(|k| *k != self.key);
    }
}
