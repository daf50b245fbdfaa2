//! The undo of a failed create: remove what it made, and only that.

use super::*;

/// What a `Store::create` has made so far, removed again if it fails: the
/// guard is dropped armed on every error path, and disarmed once the store
/// is assembled. It removes only what this create made: the files a store
/// keeps in its directory (and only once the directory is this create's,
/// see `owns_contents`), data and PMem files at configured paths that did not
/// exist before, and the directories it made, each only if empty.
pub(super) struct CreateUndo {
    pub(super) dir: PathBuf,
    /// Directories made by this create (the store directory and any missing
    /// parents), outermost first.
    pub(super) made_dirs: Vec<PathBuf>,
    /// Whether the store files in `dir` are this create's to remove: true
    /// from the moment it tries the store's lock, false again if another
    /// process holds it (another create raced this one into the same empty
    /// directory, and the files are that one's).
    pub(super) owns_contents: bool,
    /// Files made outside the store's own names: a configured data or PMem
    /// path that did not exist before this create.
    pub(super) outside: Vec<PathBuf>,
    pub(super) armed: bool,
}

/// The files a store keeps in its directory.
pub(super) const STORE_FILES: [&str; 9] = [
    LOCK_FILE,
    CONFIG_FILE,
    META_FILE,
    "embtier.meta.tmp",
    DATA_FILE,
    crate::durable::JOURNAL_FILE,
    PMEM_FILE,
    HOT_FILE,
    "hot.emb.tmp",
];

impl CreateUndo {
    pub(super) fn new(dir: &Path) -> CreateUndo {
        CreateUndo {
            dir: dir.into(),
            made_dirs: Vec::new(),
            owns_contents: false,
            outside: Vec::new(),
            armed: true,
        }
    }

    /// `fs::create_dir_all(dir)`, remembering which directories it made.
    pub(super) fn make_dirs(&mut self, dir: &Path) -> Result<()> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .take_while(|a| fs::symlink_metadata(a).is_err())
            .map(Path::to_path_buf)
            .collect();
        self.made_dirs = missing.into_iter().rev().collect();
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, "mkdir", e))
    }

    /// Remember `path` (a configured file outside the store's names) for
    /// removal, unless something is there already.
    pub(super) fn outside_file(&mut self, path: &Path) {
        if fs::symlink_metadata(path).is_err() {
            self.outside.push(path.into());
        }
    }
}

impl Drop for CreateUndo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Errors are ignored: this runs on an error path, and the error
        // being returned is the one that matters.
        if self.owns_contents {
            for name in STORE_FILES {
                let _ = fs::remove_file(self.dir.join(name));
            }
        }
        for p in &self.outside {
            let _ = fs::remove_file(p);
        }
        for d in self.made_dirs.iter().rev() {
            let _ = fs::remove_dir(d); // only if empty
        }
    }
}
