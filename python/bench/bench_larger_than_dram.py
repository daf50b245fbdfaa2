#!/usr/bin/env python3
"""A table ten times larger than the DRAM budget: TieredEmbeddingBags (a
DRAM cache over SSD) against nn.EmbeddingBag's kernel over a memory-mapped
tensor (torch.from_file(..., shared=True)). Same weights, same Zipf
batches, SGD, forward + backward.

Both engines run in a child process held by a memory cgroup to the same
budget, the way the peer harness holds its mmap engine:

1. A calibration child imports what the engine needs, locks every page it
   has mapped so far (mlockall(MCL_CURRENT): the interpreter, torch's and
   embtier's libraries), then runs the same loop on a tiny table. Its peak
   resident set (VmHWM) is the engine's base: memory that is not the
   table's.
2. The measured child does the same, then runs on the real table in a
   cgroup limited to base + budget. Because the libraries are locked, the
   kernel cannot give their pages to the table: the mapped table's page
   cache gets the budget, and so does everything embtier holds (its DRAM
   cache, index, buffers).

The mmap engine is advised MADV_RANDOM; both checkpoint every 25 steps
(embtier: checkpoint, merging its row log when half full; mmap: msync +
fsync) and once at the end, inside the measured window.

    python python/bench/bench_larger_than_dram.py [--dram-mib 64] [--ratio 10] [--steps 150]

Needs root (cgroup, mlockall, dropping the page cache between runs);
without a memory cgroup it says so and exits 2.
"""

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

DIM = 64
MCL_CURRENT = 1
MADV_RANDOM = 1
MS_SYNC = 4


def batches(rows, n, bags, pooling, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx = (rng.zipf(1.05, size=bags * pooling) - 1) % rows
        # Spread the hot ids over the table, as hashing does.
        idx = (idx * 2654435761) % rows
        out.append(
            (
                torch.from_numpy(idx.astype(np.int64)),
                torch.arange(0, bags * pooling + 1, pooling, dtype=torch.int64),
            )
        )
    return out


def run_steps(step, persist, data, warmup, max_secs, every, limit=None):
    """Run `warmup` steps, then the remaining batches (or `limit` of them)
    or `max_secs` seconds, whichever ends first (at least one step), with
    `persist()` (a checkpoint) after every `every` measured steps and once
    at the end. Returns each measured step's seconds (a checkpoint's time
    added to the step before it: deferred work is paid inside the window)
    and the major faults and bytes read from storage over the window."""
    for i in range(warmup):
        step(*data[i % len(data)])
    persist()
    io_start = io_now()
    t0 = time.perf_counter()
    times = []
    for i in range(warmup, len(data) if limit is None else min(len(data), warmup + limit)):
        t = time.perf_counter()
        step(*data[i])
        if every and len(times) % every == every - 1:
            persist()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - t0 > max_secs:
            break
    t = time.perf_counter()
    persist()
    times[-1] += time.perf_counter() - t
    io_end = io_now()
    return times, io_end[0] - io_start[0], io_end[1] - io_start[1]


def io_now():
    """(major faults, bytes read from storage) of this process so far."""
    import resource

    io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt, int(io["read_bytes"])


def rates(times):
    """Steps per second over all measured steps, the first 20 and the last 20."""
    return {
        "steps_per_s": len(times) / sum(times),
        "first_20": min(20, len(times)) / sum(times[:20]),
        "last_20": min(20, len(times)) / sum(times[-20:]),
        "steps": len(times),
    }


def lock_mapped():
    """Lock every page mapped so far (libraries, interpreter)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(MCL_CURRENT) != 0:
        sys.exit(f"mlockall: {os.strerror(ctypes.get_errno())}")


def child(a):
    """Runs in the cgroup: one engine's SGD loop, on the real table or on a
    tiny one (calibration)."""
    if a.engine == "embtier":
        import embtier
        from embtier.torch import TieredEmbeddingBags
    lock_mapped()
    rows = a.rows
    data = batches(rows, a.steps + a.warmup, a.bags, a.pooling)
    g = torch.full((a.bags, DIM), 1e-3)
    # Calibration makes every batch (they are part of the base) but runs few.
    limit = 2 if a.calibrate else None
    warmup = 1 if a.calibrate else a.warmup
    result = {}
    if a.engine == "mmap":
        w = torch.from_file(a.file, shared=True, size=rows * DIM, dtype=torch.float32).view(rows, DIM)
        # The strongest honest mmap: random access advised, so a fault reads
        # its page and not a readahead window the budget then evicts.
        length = (rows * DIM * 4 + 4095) & ~4095
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.madvise(w.data_ptr(), length, MADV_RANDOM) != 0:
            sys.exit(f"madvise: {os.strerror(ctypes.get_errno())}")
        bag = torch.repeat_interleave(torch.arange(a.bags), a.pooling)

        fd = os.open(a.file, os.O_RDWR)
        libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

        def persist():
            # What a checkpoint of a mapped table is: write the dirty pages
            # back and make them durable.
            if libc.msync(w.data_ptr(), length, MS_SYNC) != 0:
                sys.exit(f"msync: {os.strerror(ctypes.get_errno())}")
            os.fsync(fd)

        def step(idx, off):
            out = torch.nn.functional.embedding_bag(idx, w, off[:-1], mode="sum")
            del out
            # The backward of a sum bag: each index gets its bag's gradient.
            w.index_add_(0, idx, g[bag], alpha=-0.01)

    else:
        s = embtier.Store.open(a.file)
        m = TieredEmbeddingBags(s, ["t"])

        def step(idx, off):
            m(idx, off).backward(g)

        def persist():
            s.checkpoint()

    times, faults, read = run_steps(step, persist, data, warmup, a.max_secs, a.checkpoint_every, limit)
    result.update(rates(times))
    result["major_faults_per_step"] = faults / len(times)
    result["read_kib_per_step"] = read / len(times) / 1024
    if a.engine == "embtier":
        st = s.stats()
        result["hit_ratio"] = st["tables"]["t"]["dram"]["hit_ratio"]
        result["row_log_merges"] = st["row_log_merges"]
        s.close()
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
    result["vmhwm"] = int(status["VmHWM"].split()[0]) * 1024
    print(json.dumps(result))


def make_cgroup(name):
    root = "/sys/fs/cgroup/memory"
    if not os.path.exists(os.path.join(root, "cgroup.procs")):
        print(
            "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory: cannot hold the engines to the budget",
            file=sys.stderr,
        )
        sys.exit(2)
    p = os.path.join(root, f"embtier-bench-{os.getpid()}-{name}")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as e:
        sys.exit(f"memory cgroup {p}: {e}")
    return p


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError:
        print("could not drop the page cache (not root?): a run may start warm", file=sys.stderr)


def in_cgroup(name, args, limit=None):
    """Run this script as a child in a fresh memory cgroup; returns (its
    JSON result, its peak cgroup usage, its exit status)."""
    cg = make_cgroup(name)
    if limit is not None:
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))

    def join():
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    proc = subprocess.run([sys.executable, __file__] + args, stdout=subprocess.PIPE, text=True, preexec_fn=join)
    peak = int(open(os.path.join(cg, "memory.max_usage_in_bytes")).read())
    for _ in range(50):
        try:
            os.rmdir(cg)
            break
        except OSError:
            time.sleep(0.1)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    return result, peak, proc.returncode


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dram-mib", type=int, default=64, help="the memory budget of each engine, MiB")
    p.add_argument("--ratio", type=int, default=10, help="table size / budget")
    p.add_argument(
        "--cache-fraction",
        type=float,
        default=0.75,
        help="embtier's DRAM cache capacity as a fraction of the budget (the rest holds its index and buffers)",
    )
    p.add_argument("--bags", type=int, default=2048, help="bags a batch")
    p.add_argument("--pooling", type=int, default=20, help="ids a bag")
    p.add_argument("--steps", type=int, default=150, help="measured steps")
    p.add_argument("--warmup", type=int, default=10, help="steps before the measurement")
    p.add_argument("--max-secs", type=float, default=200, help="end a measurement after this long")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=25,
        help="steps between checkpoints (embtier: checkpoint; mmap: msync + fsync), 0: only at the end",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=["mmap", "embtier"], help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)

    import embtier

    budget = a.dram_mib << 20
    rows = budget * a.ratio // (DIM * 4)
    tmp = tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    sys.stdout.reconfigure(line_buffering=True)
    print(f"table {rows} x {DIM} f32 = {rows * DIM * 4 >> 20} MiB, budget {a.dram_mib} MiB per engine")

    def build(path, wfile, n, capacity):
        """A store of `n` written rows (merged home, so the row log is
        empty) and the same weights in `wfile` for the mmap engine."""
        cfg = {
            "tables": [{"name": "t", "rows": n, "dim": DIM, "optimizer": {"kind": "sgd", "lr": 0.01}}],
            "dram": {"capacity": capacity},
        }
        with embtier.Store.create(path, cfg) as s, open(wfile, "wb") as f:
            chunk = 1 << 16
            for start in range(0, n, chunk):
                k = min(chunk, n - start)
                rows_np = s.export_rows("t", start, k)
                s.import_rows("t", start, rows_np)  # written rows, not lazy ones
                f.write(rows_np.tobytes())
            s.merge_row_log()

    capacity = int(budget * a.cache_fraction)
    big = (os.path.join(tmp.name, "store"), os.path.join(tmp.name, "weights.f32"))
    tiny = (os.path.join(tmp.name, "tiny-store"), os.path.join(tmp.name, "tiny-weights.f32"))
    t0 = time.perf_counter()
    build(*big, rows, capacity)
    build(*tiny, 4096, 1 << 20)
    print(f"built both stores in {time.perf_counter() - t0:.1f} s")

    common = ["--child", "--bags", str(a.bags), "--pooling", str(a.pooling)]
    out = {}
    for engine in ("embtier", "mmap"):
        store, wfile = (big[0], big[1]) if engine == "embtier" else (big[1], big[1])
        tstore = tiny[0] if engine == "embtier" else tiny[1]
        drop_caches()
        calib, _, rc = in_cgroup(
            f"{engine}-calibrate",
            common + ["--engine", engine, "--file", tstore, "--rows", "4096", "--calibrate"]
            + ["--steps", str(a.steps), "--warmup", str(a.warmup), "--max-secs", "60"],
        )
        if calib is None:
            sys.exit(f"{engine} calibration child failed ({rc})")
        # The base is the calibration's peak resident set (locked libraries,
        # the interpreter's and torch's heap, the batches), not its cgroup
        # peak: that also counts page cache it read once (modules) and the
        # kernel may reclaim, which would give the engine more than the
        # budget.
        base = calib["vmhwm"]
        drop_caches()
        res, peak, rc = in_cgroup(
            engine,
            common
            + ["--engine", engine, "--file", store, "--rows", str(rows)]
            + ["--steps", str(a.steps), "--warmup", str(a.warmup), "--max-secs", str(a.max_secs)]
            + ["--checkpoint-every", str(a.checkpoint_every)],
            limit=base + budget,
        )
        if res is None:
            sys.exit(f"{engine} child failed ({rc}) in a cgroup of {(base + budget) >> 20} MiB")
        res.update(base=base, peak=peak)
        out[engine] = res
        print(
            f"{engine}: {res['steps_per_s']:.2f} steps/s over {res['steps']} steps (first 20 {res['first_20']:.2f}, "
            f"last 20 {res['last_20']:.2f}), {res['read_kib_per_step']:.0f} KiB read and "
            f"{res['major_faults_per_step']:.0f} major faults a step; base {base >> 20} MiB (locked), "
            f"limit {(base + budget) >> 20} MiB, peak {peak >> 20} MiB"
        )
    shutil.rmtree(tmp.name, ignore_errors=True)
    e, m = out["embtier"], out["mmap"]
    print(
        f"| table {a.ratio}x the budget ({rows * DIM * 4 >> 20} MiB, budget {a.dram_mib} MiB), "
        f"{a.bags} bags of {a.pooling}, SGD, a checkpoint every {a.checkpoint_every} steps | embtier {e['steps_per_s']:.2f} steps/s "
        f"(last 20: {e['last_20']:.2f}; DRAM cache {capacity >> 20} MiB, hit ratio {e['hit_ratio']:.3f}, "
        f"{e['row_log_merges']} merges) | mmap nn.EmbeddingBag {m['steps_per_s']:.2f} (last 20: {m['last_20']:.2f}) | "
        f"embtier / mmap {e['steps_per_s'] / m['steps_per_s']:.2f} (last 20: {e['last_20'] / m['last_20']:.2f}) |"
    )


if __name__ == "__main__":
    main()
