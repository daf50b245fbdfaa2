//! `embtier::memory::give_back_freed_memory_promptly`: what a freed buffer
//! leaves resident, with and without it. Each case runs in a child process
//! of this test binary (the setting is process-wide), which allocates the
//! way a checkpoint does: one large buffer freed (which raises glibc's
//! mapping threshold), then 96 buffers of 1 MiB written and all but the last
//! freed, and reports the resident memory the frees left behind.

use std::process::Command;

const CHILD: &str = "EMBTIER_MEMORY_TEST_CHILD";

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// In the child: allocate as a checkpoint does and print the resident bytes
/// the frees did not give back.
fn child(promptly: bool) {
    if promptly {
        assert!(embtier::memory::give_back_freed_memory_promptly());
    }
    let big = vec![1u8; 16 << 20];
    std::hint::black_box(&big);
    drop(big);
    let before = rss_bytes();
    let mut bufs: Vec<Vec<u8>> = (0..96).map(|i| vec![i as u8 | 1; 1 << 20]).collect();
    std::hint::black_box(&bufs);
    let last = bufs.pop();
    drop(bufs);
    let after = rss_bytes();
    std::hint::black_box(&last);
    println!("LEFT {}", after.saturating_sub(before));
}

fn run_child(promptly: bool) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "freed_buffers_leave_the_process_at_once",
            "--nocapture",
        ])
        .env(CHILD, if promptly { "promptly" } else { "default" })
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {text}");
    text.lines()
        .find_map(|l| l.strip_prefix("LEFT "))
        .unwrap_or_else(|| panic!("no LEFT line in {text}"))
        .parse()
        .unwrap()
}

#[test]
fn freed_buffers_leave_the_process_at_once() {
    match std::env::var(CHILD).as_deref() {
        Ok("promptly") => return child(true),
        Ok(_) => return child(false),
        Err(_) => {}
    }
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert!(!embtier::memory::give_back_freed_memory_promptly());
        eprintln!("skipped: not glibc on Linux, where the call does nothing");
        return;
    }
    let default = run_child(false);
    let promptly = run_child(true);
    eprintln!(
        "left resident by 95 MiB of frees: {} MiB by default, {} MiB promptly",
        default >> 20,
        promptly >> 20
    );
    assert!(promptly < 8 << 20, "{promptly} bytes left with the call");
    // The probe: whether this glibc keeps the frees without the call. If
    // it ever stops doing so, the call is moot (not wrong): say so.
    if default <= 64 << 20 {
        eprintln!(
            "note: glibc gave back the frees without the call ({default} bytes left): \
             the call changes nothing here"
        );
    }
}
