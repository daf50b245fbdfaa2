//! The boot record (`boot.emb`; FORMAT.md, "Boot record"): which boot of
//! the machine committed the last checkpoint. The written-group check
//! (`written.rs`) guards against a disk that acknowledged a write and then
//! lost it: that takes a power loss (or a crash of the kernel), and either
//! starts a new boot, with a new boot id. An open in the boot that
//! committed the checkpoint skips the check; any doubt (no record, a
//! damaged one, another generation, no boot id) keeps it.

use std::fs;
use std::path::Path;

use embtier_format::boot::BootRecord;

use crate::files::BOOT_FILE;

/// Where Linux keeps this boot's id.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id, if the system has one.
pub(crate) fn current() -> Option<Vec<u8>> {
    let b = fs::read(BOOT_ID_PATH).ok()?;
    let id = b.trim_ascii().to_vec();
    (!id.is_empty()).then_some(id)
}

/// Record that checkpoint `generation` committed in this boot. A hint
/// like the hot set: written after the commit (tmp, then rename; no
/// fsync: a power loss makes it useless anyway), and removed on failure.
pub(crate) fn record(dir: &Path, generation: u64) {
    let path = dir.join(BOOT_FILE);
    let tmp = dir.join(format!("{BOOT_FILE}.tmp"));
    let bytes = current().and_then(|boot_id| {
        BootRecord {
            generation,
            boot_id,
        }
        .encode()
    });
    let ok = bytes.is_some_and(|b| {
        fs::write(&tmp, b)
            .and_then(|()| fs::rename(&tmp, &path))
            .is_ok()
    });
    if !ok {
        let _ = fs::remove_file(&tmp);
        let _ = fs::remove_file(&path);
    }
}

/// Whether checkpoint `generation` committed in this boot of the machine.
pub(crate) fn same_boot(dir: &Path, generation: u64) -> bool {
    let (Ok(bytes), Some(now)) = (fs::read(dir.join(BOOT_FILE)), current()) else {
        return false;
    };
    BootRecord::decode(&bytes).is_ok_and(|r| r.generation == generation && r.boot_id == now)
}
