//! Small file systems for the full-disk tests: a tmpfs, an ext4 image on a
//! loop device, or a read-only bind mount, each unmounted when its guard is
//! dropped. Mounting needs root; a refused mount is an `Err` with the
//! reason, which the caller prints as a skip.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted file system, unmounted (and its image removed) on drop.
pub struct Mount {
    /// The mount point.
    pub dir: PathBuf,
    // Holds the mount point and the ext4 image; removed after the unmount.
    _tmp: tempfile::TempDir,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Mount {
    fn mount_point() -> Result<(tempfile::TempDir, PathBuf), String> {
        let tmp = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let dir = tmp.path().join("mnt");
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir: {e}"))?;
        Ok((tmp, dir))
    }

    /// A tmpfs of `bytes` bytes.
    pub fn tmpfs(bytes: u64) -> Result<Mount, String> {
        let (tmp, dir) = Mount::mount_point()?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir))?;
        Ok(Mount { dir, _tmp: tmp })
    }

    /// An ext4 file system of `bytes` bytes (4 KiB blocks, no blocks
    /// reserved for root) in an image on a loop device.
    pub fn ext4(bytes: u64) -> Result<Mount, String> {
        let (tmp, dir) = Mount::mount_point()?;
        let image = tmp.path().join("fs.img");
        File::create(&image)
            .and_then(|f| f.set_len(bytes))
            .map_err(|e| format!("{}: {e}", image.display()))?;
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-b", "4096"])
            .arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&dir))?;
        Ok(Mount { dir, _tmp: tmp })
    }

    /// `src` bind-mounted read-only.
    pub fn read_only_bind(src: &Path) -> Result<Mount, String> {
        let (tmp, dir) = Mount::mount_point()?;
        run(Command::new("mount").arg("--bind").arg(src).arg(&dir))?;
        let m = Mount { dir, _tmp: tmp };
        run(Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(&m.dir))?;
        Ok(m)
    }

    /// Bytes free on the file system.
    pub fn free_bytes(&self) -> u64 {
        free_bytes(&self.dir)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if run(Command::new("umount").arg(&self.dir)).is_err() {
            // Busy (a file still open): detach it now, unmount when unused.
            let _ = run(Command::new("umount").arg("-l").arg(&self.dir));
        }
    }
}

/// Bytes free on the file system holding `path` (`f_bavail`: ext4 keeps a
/// few blocks back for its metadata, which no file can get).
pub fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call, and `st`
    // is a plain C struct the call fills in; an all-zero statvfs is valid.
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0, "statvfs {path:?}");
        st
    };
    st.f_bavail * st.f_frsize
}

/// Fill the file system holding `dir` with a file `dir/name`, written (not
/// reserved) until the file system says ENOSPC, then synced; returns its
/// path. Deleting it frees the space again.
pub fn fill(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    // Twice: with delayed allocation (ext4) the sync after the first pass
    // returns blocks that were held back for metadata.
    for _ in 0..2 {
        for chunk in [1 << 20, 64 << 10, 4 << 10, 512, 1] {
            let buf = vec![0x5au8; chunk];
            loop {
                match f.write(&buf) {
                    Ok(n) if n == chunk => continue,
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling {path:?}: {e}"),
                }
            }
        }
        match f.sync_all() {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
            Err(e) => panic!("syncing {path:?}: {e}"),
        }
    }
    path
}
