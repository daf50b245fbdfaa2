//! Files written through a memory mapping, with their blocks reserved.
//!
//! A store into a page of a shared file mapping whose block was never
//! allocated makes the kernel allocate it then; when the file system is full
//! it cannot, and the storing thread gets SIGBUS, which no error path can
//! catch. So every file this crate writes through a mapping is created with
//! all of its blocks allocated (`fallocate` mode 0), and a file system that
//! cannot give them is an error at open, naming the file and the size.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};

/// Allocate the blocks of bytes `0..len` of `file` (growing it to `len` if
/// shorter): `fallocate` mode 0, or, where the file system does not support
/// it (EOPNOTSUPP), `posix_fallocate`, which writes the blocks instead. The
/// error is the OS's: ENOSPC when the file system is full.
pub(crate) fn reserve_blocks(file: &File, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(()); // fallocate refuses an empty range; nothing to reserve
    }
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: fallocate on a descriptor that `file` keeps open for the
        // call; it touches no memory of this process.
        let rc = unsafe { libc::fallocate(fd, 0, 0, len) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => break,
            _ => return Err(e),
        }
    }
    loop {
        // SAFETY: as above; posix_fallocate returns the error number
        // instead of setting errno.
        match unsafe { libc::posix_fallocate(fd, 0, len) } {
            0 => return Ok(()),
            libc::EINTR => continue,
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// Give the blocks of bytes `offset..offset + len` of `file` back to the
/// file system (`fallocate` with `FALLOC_FL_PUNCH_HOLE`, the file's length
/// unchanged): they read as zeros afterwards. Returns whether the file
/// system did it (false where it does not support punching holes).
pub fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: fallocate on a descriptor that `file` keeps open for the
        // call; it touches no memory of this process.
        let rc = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Create (or truncate) `path` as a file of `len` bytes, every block
/// allocated, ready to be mapped for writing. On failure the file is
/// truncated to nothing again, so that blocks reserved before the file
/// system ran out are given back; the error is [`Error::MapReserve`].
pub fn create_reserved(path: &Path, len: u64) -> Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))?;
    if let Err(source) = reserve_blocks(&f, len) {
        let _ = f.set_len(0);
        return Err(Error::MapReserve {
            path: path.into(),
            len,
            source,
        });
    }
    Ok(f)
}

/// Whether bytes `offset..offset + len` of `file` hold no data: the file
/// system reports no data there (`lseek` with `SEEK_DATA` finds the next
/// data at or past the end, or none before the file's end), so they read
/// as zeros. Best effort: false whenever it cannot tell (a file system
/// without `SEEK_DATA`, a range past the file's end, any error), and the
/// caller then reads the bytes to find out.
pub fn holds_no_data(file: &File, offset: u64, len: u64) -> bool {
    let (Ok(off), Some(end)) = (libc::off_t::try_from(offset), offset.checked_add(len)) else {
        return false;
    };
    match file.metadata() {
        Ok(m) if end <= m.len() => {}
        _ => return false,
    }
    // SAFETY: lseek on a descriptor that `file` keeps open for the call; it
    // touches no memory of this process. It moves the descriptor's file
    // offset, which no engine uses (every read and write names its offset).
    let next = unsafe { libc::lseek(file.as_raw_fd(), off, libc::SEEK_DATA) };
    if next >= 0 {
        return next as u64 >= end;
    }
    // ENXIO: no data from `offset` to the end of the file.
    io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::holds_no_data;

    /// A sparse file with one written block: the ranges around it hold no
    /// data, any range that touches it does, and a range past the end is
    /// "cannot tell". Skips where the file system reports no holes.
    #[test]
    fn holes_are_found_without_a_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("sparse"))
            .unwrap();
        let mib = 1u64 << 20;
        f.set_len(8 * mib).unwrap();
        if !holds_no_data(&f, 0, 8 * mib) {
            eprintln!("SKIP: this file system reports no holes in a fresh sparse file");
            return;
        }
        f.write_all_at(&[7u8; 4096], 4 * mib).unwrap();
        f.sync_all().unwrap();
        assert!(holds_no_data(&f, 0, 4 * mib), "before the block");
        assert!(holds_no_data(&f, 5 * mib, 3 * mib), "after it, to the end");
        assert!(
            !holds_no_data(&f, 0, 4 * mib + 1),
            "a range ending inside it"
        );
        assert!(!holds_no_data(&f, 4 * mib, 4096), "the block");
        assert!(!holds_no_data(&f, 3 * mib, 2 * mib), "a range across it");
        assert!(!holds_no_data(&f, 7 * mib, 2 * mib), "a range past the end");
    }
}
