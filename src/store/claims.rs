//! The files a config names, the data file and each tier's, checked before
//! any is opened: against each other, against the files a store keeps
//! beside them, and against the store directories they lie in. Each tier
//! file truncated and mapped by a second owner, or a store file mapped as a
//! tier, served other rows' bytes or destroyed the store.

use super::*;

use super::open::tier_files;
use crate::files::{JOURNAL_FILE, MERGE_SPILL_PREFIX};

/// Names of a store directory's own files (and their `.tmp` stand-ins),
/// which no configured file may take.
fn own_name(name: &str) -> bool {
    let base = name.strip_suffix(".tmp").unwrap_or(name);
    matches!(
        base,
        META_FILE
            | CONFIG_FILE
            | LOCK_FILE
            | JOURNAL_FILE
            | HOT_FILE
            | HOT_ROWS_FILE
            | BOOT_FILE
            | LOG_INDEX_FILE
            | "written-0.emb"
            | "written-1.emb"
    ) || name.starts_with(MERGE_SPILL_PREFIX)
}

/// The files a store keeps beside a tier or data file at `p`.
fn beside(p: &Path) -> [PathBuf; 5] {
    let with = |ext: &str| {
        let mut s = p.as_os_str().to_owned();
        s.push(ext);
        PathBuf::from(s)
    };
    [
        with(".stamps"),
        with(".kept"),
        with(".keep"),
        with(".keep.tmp"),
        with(".lock"),
    ]
}

/// `p` as the file system resolves it: symlinks followed and `..` taken,
/// the file itself where it exists, else its directory. None where the
/// directory does not exist (the open then fails naming the file).
fn resolve(p: &Path) -> Option<PathBuf> {
    if let Ok(r) = std::fs::canonicalize(p) {
        return Some(r);
    }
    let name = p.file_name()?;
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = std::fs::canonicalize(parent.unwrap_or(Path::new("."))).ok()?;
    Some(dir.join(name))
}

/// A configured file: what it is for, its path as configured, as resolved.
pub(super) struct Claim {
    what: String,
    path: PathBuf,
    real: PathBuf,
    /// (device, inode) where the file exists: one file under two resolved
    /// paths (a bind mount) is still one file.
    id: Option<(u64, u64)>,
    /// Whether it is the data file.
    data: bool,
    /// Whether it lies in the store's directory (by path or by device
    /// and inode), which the store's `LOCK` covers.
    at_home: bool,
}

/// Check the files `config` names for the store in `dir` (which exists),
/// before any of them is opened. Each refusal is a config error naming the
/// file.
pub(super) fn check(dir: &Path, config: &StoreConfig) -> Result<Vec<Claim>> {
    let home = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, "canonicalize", e))?;
    // The directory by (device, inode) too: reached through a bind mount,
    // it has another resolved path.
    let dir_id = |d: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(d).ok().map(|m| (m.dev(), m.ino()))
    };
    let home_id = dir_id(&home);
    let data = config
        .ssd
        .path
        .clone()
        .unwrap_or_else(|| dir.join(DATA_FILE));
    let mut claims = Vec::new();
    let tiers = config.tiers.iter().zip(tier_files(dir, config)).enumerate();
    let named = std::iter::once(("the data file ([ssd] path)".to_string(), data, true))
        .chain(tiers.filter_map(|(i, (t, p))| Some((format!("tier {i} ({})", t.kind), p?, false))));
    for (what, path, data) in named {
        use std::os::unix::fs::MetadataExt;
        let Some(real) = resolve(&path) else { continue };
        let id = std::fs::metadata(&real).ok().map(|m| (m.dev(), m.ino()));
        let parent = real.parent().unwrap_or(Path::new("/"));
        let at_home = parent == home || (home_id.is_some() && dir_id(parent) == home_id);
        claims.push(Claim {
            what,
            path,
            real,
            id,
            data,
            at_home,
        });
    }
    let refuse = |c: &Claim, why: String| {
        // The file as resolved, where the config spelled it otherwise.
        let real = if c.real == c.path {
            String::new()
        } else {
            format!(" (that is, {})", c.real.display())
        };
        Err(Error::config(format!(
            "{}{real}: {} {why}",
            c.path.display(),
            c.what
        )))
    };
    for (i, c) in claims.iter().enumerate() {
        let name = c.real.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = c.real.parent().unwrap_or(Path::new("/"));
        let at_home = c.at_home;
        if at_home && own_name(name) {
            return refuse(c, "is one of the store's own files".into());
        }
        if !at_home && parent.join(META_FILE).exists() {
            return refuse(
                c,
                format!("lies in {}, another store's directory", parent.display()),
            );
        }
        for o in &claims[..i] {
            if o.real == c.real || (o.id.is_some() && o.id == c.id) {
                return refuse(c, format!("is the file of {}", o.what));
            }
        }
        for o in &claims {
            if beside(&o.real).contains(&c.real) {
                return refuse(c, format!("names a file the store keeps beside {}", o.what));
            }
        }
    }
    Ok(claims)
}

/// Lock each claimed file outside the store's directory (`<file>.lock`, at
/// its resolved path, so that two spellings of one file are one lock); the
/// store's `LOCK` covers the files inside it. A block device has no lock
/// file.
pub(super) fn lock_outside(claims: &[Claim]) -> Result<Vec<LockFile>> {
    use std::os::unix::fs::FileTypeExt;
    let mut locks = Vec::new();
    for c in claims {
        if c.at_home {
            continue;
        }
        let device = std::fs::metadata(&c.real).is_ok_and(|m| m.file_type().is_block_device());
        if device {
            continue;
        }
        match LockFile::acquire_tier(&c.real) {
            Ok(l) => locks.push(l),
            // A data file made beforehand in a directory this process
            // cannot write (a provisioned `/mnt/nvme/x/data.emb`) has no
            // room for its lock beside it: it is used unlocked, as before
            // the lock.
            Err(Error::Io { source, .. })
                if c.data
                    && c.real.exists()
                    && matches!(
                        source.raw_os_error(),
                        Some(libc::EACCES) | Some(libc::EROFS) | Some(libc::EPERM)
                    ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(locks)
}
