//! The store's lock: one process, and one open in it, at a time.

use super::*;

/// The store directories this process holds open, by (device, inode) of
/// the directory, so that a path alias (a symlink, a bind mount) is the
/// same store; and the tier files outside them, by their lock file's.
pub(super) static OPEN_STORES: parking_lot::Mutex<Vec<(u64, u64)>> =
    parking_lot::Mutex::new(Vec::new());

/// The store's exclusive lock: a POSIX record lock (`fcntl(F_SETLK)`) on
/// the LOCK file against other processes, and [`OPEN_STORES`] against a
/// second open in this one. Released when dropped or when the process dies
/// (so a dead process's lock never blocks).
///
/// Not `flock`: a child forked while the store is open (a DataLoader
/// worker, or any subprocess between its fork and its exec) inherits the
/// descriptor, and an `flock` stays held until every copy is closed, so the
/// store stayed locked after its owner closed it. A record lock belongs to
/// the process and is not inherited. Its one hazard, that closing *any*
/// descriptor of the file releases it, is why a second open in this
/// process is refused by the registry before the file is opened again.
pub(super) struct LockFile {
    file: Option<File>,
    key: (u64, u64),
    /// The fork generation it was taken in ([`crate::fork`]).
    generation: u64,
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
        // l_start = 0, l_len = 0: the whole file.
        // SAFETY: fcntl(F_SETLK) on a valid open descriptor with a pointer
        // to an initialised `flock` that outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                // Another process holds it. Closing this descriptor is
                // harmless: this process holds no lock on the file.
                let mut s = String::new();
                let _ = file.read_to_string(&mut s);
                return Err(Error::Locked {
                    path,
                    pid: s.trim().parse().unwrap_or(0),
                });
            }
            return Err(Error::io(&path, "fcntl(F_SETLK)", err));
        }
        file.set_len(0)
            .map_err(|e| Error::io(&path, "truncate", e))?;
        write!(file, "{}", std::process::id()).map_err(|e| Error::io(&path, "write", e))?;
        open.push(key);
        Ok(LockFile {
            file: Some(file),
            key,
            generation: crate::fork::generation(),
        })
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // A forked copy holds no record lock (they are not inherited),
        // and the registry's mutex may have been held by a thread at the
        // fork: only the descriptor goes.
        if crate::fork::forked_since(self.generation) {
            return;
        }
        // Release the record lock (by closing its descriptor) before the
        // registry lets this process open the store again: the other order
        // would let a new open's lock be released by this close.
        let mut open = OPEN_STORES.lock();
        drop(self.file.take());
        open.retain(|k| *k != self.key);
    }
}
