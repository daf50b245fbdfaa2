//! The store's lock: one process, and one open in it, at a time.

use super::*;

/// The store directories this process holds open, by (device, inode) of
/// the directory, so that a path alias (a symlink, a bind mount) is the
/// same store; and the files outside them, by their lock file's. Each
/// entry carries the fork generation it was made in: a forked child
/// inherits the parent's entries, which are not its own (it holds no
/// store), and takes no notice of them.
pub(super) static OPEN_STORES: parking_lot::Mutex<Vec<((u64, u64), u64)>> =
    parking_lot::Mutex::new(Vec::new());

/// The store's exclusive lock: an open-file-description lock
/// (`fcntl(F_OFD_SETLK)`, Linux 3.15 on; a POSIX record lock elsewhere)
/// on the LOCK file against other processes, and [`OPEN_STORES`] against
/// a second open in this one. Released when dropped (explicitly, `F_UNLCK`,
/// then the descriptor closed) or when the process dies (so a dead
/// process's lock never blocks).
///
/// Not a record lock (`F_SETLK`): closing *any* descriptor of the file in
/// the holding process releases one, and a user's `cp -r` or
/// `shutil.copytree` of the open store from the training process did,
/// letting a second process open the store beside it. An OFD lock goes
/// only with the description it was taken on. Like an `flock`, that
/// description is shared with a child forked while the store is open (a
/// DataLoader worker) or being spawned: the fork handler
/// ([`crate::fork::lock_fd`]) closes a forked child's copy of the
/// descriptor, and the drop unlocks the description itself, which
/// releases the lock whatever copies of it live on.
pub(super) struct LockFile {
    file: Option<File>,
    key: (u64, u64),
    /// The fork generation it was taken in ([`crate::fork`]).
    generation: u64,
    /// Its slot among the descriptors a forked child closes.
    fork_slot: Option<usize>,
}

/// `fcntl` lock or unlock (`l_type`) of the whole file at `fd`: an OFD
/// lock where the kernel has them, else a record lock.
fn set_lock(fd: i32, l_type: i32) -> std::io::Result<()> {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are
    // valid; the fields that matter are set below.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = l_type as _;
    lock.l_whence = libc::SEEK_SET as _;
    // l_start = 0, l_len = 0: the whole file; l_pid = 0, as an OFD lock
    // requires.
    #[cfg(target_os = "linux")]
    let cmd = libc::F_OFD_SETLK;
    #[cfg(not(target_os = "linux"))]
    let cmd = libc::F_SETLK;
    // SAFETY: fcntl on a descriptor the caller holds open, with a pointer
    // to an initialised `flock` that outlives the call.
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
    /// file is opened, so that a second open in this process is refused
    /// naming this process (and, on a kernel without OFD locks, so that
    /// opening and closing a descriptor of a record-locked file cannot
    /// release the lock).
    fn acquire_at(path: PathBuf, key: Option<(u64, u64)>) -> Result<LockFile> {
        use std::os::unix::fs::MetadataExt;
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        let mut open = OPEN_STORES.lock();
        // Entries a parent made before this process was forked from it are
        // not this process's.
        let now = crate::fork::generation();
        open.retain(|&(_, g)| g == now);
        let known = key.or_else(|| std::fs::metadata(&path).ok().map(id));
        if known.is_some_and(|k| open.iter().any(|&(o, _)| o == k)) {
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

    /// Take the lock on `file` (at `path`), write this process's pid into
    /// it and register `key`; the registry's mutex is held.
    fn lock(
        path: PathBuf,
        file: File,
        key: (u64, u64),
        open: &mut Vec<((u64, u64), u64)>,
    ) -> Result<LockFile> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        // Registered for the fork handler before it is locked: a child
        // forked between the two would otherwise keep an unregistered copy
        // of the locked description for its whole life.
        let fork_slot = crate::fork::lock_fd(file.as_raw_fd());
        let unregister = || {
            if let Some(slot) = fork_slot {
                crate::fork::unlock_fd(slot);
            }
        };
        if let Err(err) = set_lock(file.as_raw_fd(), libc::F_WRLCK) {
            unregister();
            if matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                // Another process holds it. Closing this descriptor is
                // harmless: this process holds no lock on the file.
                let mut s = String::new();
                let _ = (&file).read_to_string(&mut s);
                return Err(Error::Locked {
                    path,
                    pid: s.trim().parse().unwrap_or(0),
                });
            }
            return Err(Error::io(&path, "fcntl(F_OFD_SETLK)", err));
        }
        // The pid at offset 0, whatever the descriptor's offset.
        let pid = std::process::id().to_string();
        if let Err(e) = file
            .set_len(0)
            .and_then(|()| file.write_all_at(pid.as_bytes(), 0))
        {
            let _ = set_lock(file.as_raw_fd(), libc::F_UNLCK);
            unregister();
            return Err(Error::io(&path, "write", e));
        }
        let generation = crate::fork::generation();
        open.push((key, generation));
        Ok(LockFile {
            file: Some(file),
            key,
            generation,
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
        // Release the lock before the registry lets this process open the
        // store again: unlocked explicitly, since a child being spawned
        // (or forked in the window before the handler closes its copy) may
        // hold a copy of the description, which would keep it locked
        // until that copy is closed.
        let mut open = OPEN_STORES.lock();
        if let Some(f) = self.file.take() {
            use std::os::fd::AsRawFd;
            let _ = set_lock(f.as_raw_fd(), libc::F_UNLCK);
            if let Some(slot) = self.fork_slot {
                crate::fork::unlock_fd(slot);
            }
            drop(f);
        }
        let generation = self.generation;
        open.retain(|&(k, g)| !(k == self.key && g == generation));
    }
}
