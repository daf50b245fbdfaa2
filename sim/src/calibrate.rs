//! Measure this machine's tiers and write them as a device profile
//! ([`crate::profile`]): DRAM (a heap buffer), PMem (a file mapped from a
//! directory, as the store maps its PMem tier) and SSD (a file in that
//! directory, through the store's own I/O engine).
//!
//! Each figure is measured on its own:
//! - **latency**: one access with nothing else in flight: a pointer chase
//!   through the rows of the region in a random cycle (each row holds the
//!   next row's index), so every read waits for the one before; for the
//!   SSD, single random 4 KiB reads one after another (the median);
//! - **IOPS**: independent random accesses, as many in flight as the
//!   device takes (256-byte row copies; 4 KiB reads at queue depth 64);
//! - **parallelism**: IOPS x latency, the accesses in flight that the two
//!   imply (Little's law);
//! - **read and write bandwidth**: sequential copies out of and into the
//!   region (1 MiB O_DIRECT reads and writes for the SSD), separately.
//!
//! The "PMem" directory is often not persistent memory: on a file system
//! without DAX the mapping is the page cache, that is DRAM. [`medium_of`]
//! says what the directory is on, from `/proc/mounts`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use embtier::init::mix64;

use crate::profile::{DeviceProfile, Profiles};

/// Bytes of a row in the memory measurements (the store's typical row).
const ROW: usize = 256;

/// What a directory is on: its mount point, file system, and whether the
/// mount has DAX (direct access to persistent memory, no page cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Medium {
    /// The mount point holding the directory.
    pub mount: PathBuf,
    /// The file system type (`ext4`, `xfs`, `tmpfs`, ...).
    pub fs_type: String,
    /// Mounted with `dax` (or `dax=always`, `dax=inode`).
    pub dax: bool,
}

impl Medium {
    /// Whether a mapping of a file here is persistent memory: DAX.
    pub fn is_pmem(&self) -> bool {
        self.dax
    }

    /// What a mapping of a file here is backed by, in words.
    pub fn memory(&self) -> &'static str {
        if self.dax {
            "persistent memory (DAX)"
        } else if self.fs_type == "tmpfs" || self.fs_type == "ramfs" {
            "DRAM (no DAX; an emulation of PMem)"
        } else {
            "the page cache, that is DRAM (no DAX)"
        }
    }

    /// The file system, mount point and [`Medium::memory`], in words.
    pub fn describe(&self) -> String {
        format!(
            "{} at {}: {}",
            self.fs_type,
            self.mount.display(),
            self.memory()
        )
    }
}

/// The mount of `dir` in `mounts` (the text of `/proc/mounts`): the
/// longest mount point that contains it.
pub fn medium_in(mounts: &str, dir: &Path) -> Option<Medium> {
    let mut best: Option<Medium> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        // /proc/mounts escapes spaces, tabs, newlines and backslashes.
        let mount = PathBuf::from(
            f[1].replace("\\040", " ")
                .replace("\\011", "\t")
                .replace("\\012", "\n")
                .replace("\\134", "\\"),
        );
        if !dir.starts_with(&mount) {
            continue;
        }
        if best
            .as_ref()
            .is_some_and(|b| b.mount.as_os_str().len() > mount.as_os_str().len())
        {
            continue;
        }
        let dax = f[3]
            .split(',')
            .any(|o| o == "dax" || o == "dax=always" || o == "dax=inode");
        best = Some(Medium {
            mount,
            fs_type: f[2].to_string(),
            dax,
        });
    }
    best
}

/// What `dir` is on, from `/proc/mounts` (`None` where that cannot be read).
pub fn medium_of(dir: &Path) -> Option<Medium> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    medium_in(&mounts, &dir)
}

/// The outcome of [`calibrate`].
#[derive(Debug, Clone)]
pub struct Calibration {
    /// `dram`, `pmem` and `ssd`.
    pub profiles: Profiles,
    /// What the PMem and SSD files were on.
    pub medium: Option<Medium>,
    /// The SSD's I/O engine (`uring` or `psync`).
    pub ssd_engine: String,
    /// Whether the SSD file was read and written with O_DIRECT (without it
    /// the SSD figures are the page cache's).
    pub ssd_direct: bool,
}

/// Measure DRAM, PMem (a file mapped from `dir`) and SSD (a file in `dir`);
/// `mib` (at least 16) sizes the buffers and files. The files are removed.
pub fn calibrate(dir: &Path, mib: usize) -> embtier::Result<Calibration> {
    let bytes = mib.max(16) << 20;
    let mut profiles = Profiles::new();
    let mut dram = vec![1u8; bytes];
    profiles.insert("dram".into(), measure_memory(&mut dram));
    drop(dram);
    let pmem_path = dir.join("calibrate.pmem");
    let pmem = measure_mapped(&pmem_path, bytes);
    let _ = std::fs::remove_file(&pmem_path);
    profiles.insert("pmem".into(), pmem?);
    let ssd_path = dir.join("calibrate.ssd");
    let ssd = measure_ssd(&ssd_path, bytes);
    let _ = std::fs::remove_file(&ssd_path);
    let (ssd, ssd_engine, ssd_direct) = ssd?;
    profiles.insert("ssd".into(), ssd);
    for p in profiles.values_mut() {
        *p = rounded(p);
    }
    Ok(Calibration {
        profiles,
        medium: medium_of(dir),
        ssd_engine,
        ssd_direct,
    })
}

/// `p` to 4 significant digits: measurements repeat to no more.
fn rounded(p: &DeviceProfile) -> DeviceProfile {
    let r = |x: f64| -> f64 { format!("{x:.3e}").parse().unwrap_or(x) };
    DeviceProfile {
        latency_us: r(p.latency_us),
        read_gbps: r(p.read_gbps),
        write_gbps: r(p.write_gbps),
        iops: r(p.iops),
        parallelism: r(p.parallelism),
    }
}

/// A file of `bytes` mapped as the store maps its PMem tier, measured.
fn measure_mapped(path: &Path, bytes: usize) -> embtier::Result<DeviceProfile> {
    // Blocks reserved, so that the stores below cannot raise SIGBUS on a
    // full file system: the calibration fails with an error instead.
    let f = embtier::io::reserve::create_reserved(path, bytes as u64)?;
    // SAFETY: the file was just created by us in the calibration directory
    // and is not shared; the mapping lives only in this function. Its
    // blocks are allocated, so no store into it can fault for want of
    // space.
    let mut map =
        unsafe { memmap2::MmapMut::map_mut(&f) }.map_err(|source| embtier::Error::Io {
            path: path.to_path_buf(),
            op: "mmap",
            offset: 0,
            source,
        })?;
    map.fill(1); // fault every page in before timing
    Ok(measure_memory(&mut map))
}

/// Latency, IOPS, parallelism and bandwidths of a memory region.
fn measure_memory(region: &mut [u8]) -> DeviceProfile {
    let rows = region.len() / ROW;
    // Latency: a pointer chase along a random cycle through every row
    // (Sattolo's shuffle), each row holding the index of the next.
    let mut order: Vec<u32> = (0..rows as u32).collect();
    let mut x = 0x5eed_u64;
    for i in (1..rows).rev() {
        x = mix64(x);
        let j = (x % i as u64) as usize;
        order.swap(i, j);
    }
    for (i, &next) in order.iter().enumerate() {
        region[i * ROW..i * ROW + 8].copy_from_slice(&(next as u64).to_le_bytes());
    }
    drop(order);
    let steps = 1_000_000usize;
    let mut r = 0usize;
    let start = Instant::now();
    for _ in 0..steps {
        let at = r * ROW;
        r = u64::from_le_bytes(region[at..at + 8].try_into().expect("8 bytes")) as usize;
    }
    let latency = start.elapsed().as_secs_f64() / steps as f64;
    std::hint::black_box(r);
    // IOPS: independent random row copies.
    let n = 2_000_000usize;
    let mut out = [0u8; ROW];
    let mut sink = 0u64;
    let start = Instant::now();
    for _ in 0..n {
        x = mix64(x);
        let at = (x % rows as u64) as usize * ROW;
        out.copy_from_slice(&region[at..at + ROW]);
        sink = sink.wrapping_add(out[ROW - 1] as u64);
    }
    let iops = n as f64 / start.elapsed().as_secs_f64();
    std::hint::black_box(sink);
    // Bandwidth: the region copied out, chunk by chunk, into a buffer that
    // stays in cache (reads), then a cached buffer copied over it (writes).
    let chunk = 1 << 20;
    let mut buf = vec![0u8; chunk];
    let passes = 4;
    let start = Instant::now();
    for _ in 0..passes {
        for c in region.chunks(chunk) {
            buf[..c.len()].copy_from_slice(c);
            std::hint::black_box(&buf);
        }
    }
    let read_gbps = (passes * region.len()) as f64 / start.elapsed().as_secs_f64() / 1e9;
    let start = Instant::now();
    for _ in 0..passes {
        for c in region.chunks_mut(chunk) {
            let n = c.len();
            c.copy_from_slice(&buf[..n]);
        }
        std::hint::black_box(&region);
    }
    let write_gbps = (passes * region.len()) as f64 / start.elapsed().as_secs_f64() / 1e9;
    DeviceProfile {
        latency_us: latency * 1e6,
        read_gbps,
        write_gbps,
        iops,
        parallelism: (iops * latency).max(1.0),
    }
}

/// An SSD file of `bytes` through the store's engine: the profile, the
/// engine's name, and whether it used O_DIRECT.
fn measure_ssd(path: &Path, bytes: usize) -> embtier::Result<(DeviceProfile, String, bool)> {
    let cfg = embtier::config::SsdConfig {
        queue_depth: 64,
        ..Default::default()
    };
    let (engine, choice) = embtier::io::open_engine(path, &cfg.engine_options())?;
    let io = |f: embtier::io::IoFailure| f.into_error(path);
    let mb = 1usize << 20;
    let chunks = (bytes / mb) as u64;
    // Sequential writes, 1 MiB at a time, then fdatasync.
    let mut buf = embtier::io::AlignedBuf::new(8 * mb);
    buf.as_mut_slice().fill(7);
    let start = Instant::now();
    for c in 0..chunks {
        engine
            .write_extents(&[c * mb as u64], mb, &buf)
            .map_err(io)?;
    }
    engine.sync().map_err(io)?;
    let write_gbps = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    // Sequential reads, eight 1 MiB extents per call.
    let start = Instant::now();
    let all: Vec<u64> = (0..chunks).map(|c| c * mb as u64).collect();
    for part in all.chunks(8) {
        engine.read_extents(part, mb, &mut buf).map_err(io)?;
    }
    let read_gbps = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    // Random 4 KiB reads.
    let blocks = (bytes / 4096) as u64;
    let mut x = 99u64;
    let mut random = |n: usize| -> Vec<u64> {
        (0..n)
            .map(|_| {
                x = mix64(x);
                (x % blocks) * 4096
            })
            .collect()
    };
    // Latency: one read at a time; the median.
    let mut one = embtier::io::AlignedBuf::new(4096);
    let mut lat: Vec<Duration> = Vec::new();
    let start = Instant::now();
    for off in random(20_000) {
        let t = Instant::now();
        engine.read_extents(&[off], 4096, &mut one).map_err(io)?;
        lat.push(t.elapsed());
        if start.elapsed() > Duration::from_millis(500) && lat.len() >= 100 {
            break;
        }
    }
    lat.sort_unstable();
    let latency = lat[lat.len() / 2].as_secs_f64();
    // IOPS: batches of 4096 reads, 64 in flight.
    let offsets = random(4096);
    let mut rbuf = embtier::io::AlignedBuf::new(offsets.len() * 4096);
    let start = Instant::now();
    let mut reads = 0u64;
    while start.elapsed() < Duration::from_secs(1) {
        engine.read_extents(&offsets, 4096, &mut rbuf).map_err(io)?;
        reads += offsets.len() as u64;
    }
    let iops = reads as f64 / start.elapsed().as_secs_f64();
    let profile = DeviceProfile {
        latency_us: latency * 1e6,
        read_gbps,
        write_gbps,
        iops,
        parallelism: (iops * latency).max(1.0),
    };
    Ok((profile, choice.engine, choice.direct))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_name_the_medium() {
        let mounts = "/dev/vda1 / ext4 rw,relatime 0 0\n\
                      tmpfs /dev/shm tmpfs rw,nosuid 0 0\n\
                      /dev/pmem0 /mnt/pmem ext4 rw,relatime,dax=always 0 0\n\
                      /dev/pmem1 /mnt/my\\040pmem xfs rw,dax 0 0\n";
        let m = |p: &str| medium_in(mounts, Path::new(p)).unwrap();
        assert_eq!(m("/work/x").mount, PathBuf::from("/"));
        assert!(!m("/work/x").is_pmem());
        assert_eq!(
            m("/work/x").describe(),
            "ext4 at /: the page cache, that is DRAM (no DAX)"
        );
        assert_eq!(m("/dev/shm/a").fs_type, "tmpfs");
        assert!(m("/dev/shm/a").describe().contains("emulation"));
        assert!(m("/mnt/pmem/store").is_pmem());
        assert!(m("/mnt/my pmem").is_pmem());
        // A mount point is a path prefix by component, not by bytes.
        assert_eq!(m("/mnt/pmemx").mount, PathBuf::from("/"));
    }

    /// Each figure measured on its own: latency is not 1/IOPS, and
    /// parallelism is what the two imply.
    #[test]
    fn memory_figures_are_measured_separately() {
        let mut region = vec![0u8; 16 << 20];
        let p = measure_memory(&mut region);
        assert!(p.latency_us > 0.0 && p.iops > 0.0 && p.read_gbps > 0.0 && p.write_gbps > 0.0);
        assert_ne!(p.read_gbps, p.write_gbps);
        assert!(
            (p.parallelism - (p.iops * p.latency_us * 1e-6).max(1.0)).abs() < 1e-9,
            "{p:?}"
        );
    }
}
