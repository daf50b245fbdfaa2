#!/usr/bin/env python3
"""A table ten times larger than the DRAM budget: TieredEmbeddingBags (a
DRAM cache of the budget over SSD) against nn.EmbeddingBag's kernel over a
memory-mapped tensor (torch.from_file(..., shared=True)) whose process is
held to the same budget by a memory cgroup, as the peer harness holds its
mmap engine. Same weights, same Zipf batches, SGD, forward + backward.

    python python/bench/bench_larger_than_dram.py [--dram-mib 64] [--ratio 10] [--steps 30]

Needs root for the cgroup (and to drop the page cache between the runs);
without a memory cgroup it says so and exits 2.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

DIM = 64


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


def run_steps(step, data, warmup):
    for i in range(warmup):
        step(*data[i % len(data)])
    t0 = time.perf_counter()
    for i in range(warmup, len(data)):
        step(*data[i])
    return (len(data) - warmup) / (time.perf_counter() - t0)


def child_mmap(a):
    """In the cgroup: SGD through F.embedding_bag on the mapped file."""
    rows = a.rows
    w = torch.from_file(a.file, shared=True, size=rows * DIM, dtype=torch.float32).view(rows, DIM)
    data = batches(rows, a.steps + a.warmup, a.bags, a.pooling)
    g = torch.full((a.bags, DIM), 1e-3)

    def step(idx, off):
        out = torch.nn.functional.embedding_bag(idx, w, off[:-1], mode="sum")
        del out
        # The backward of a sum bag: each index gets its bag's gradient.
        bag = torch.repeat_interleave(torch.arange(a.bags), a.pooling)
        w.index_add_(0, idx, g[bag], alpha=-0.01)

    print(json.dumps({"steps_per_s": run_steps(step, data, a.warmup)}))


def make_cgroup(limit):
    for root, file in (("/sys/fs/cgroup/memory", "memory.limit_in_bytes"), ("/sys/fs/cgroup", "memory.max")):
        if os.path.exists(os.path.join(root, "cgroup.procs")):
            p = os.path.join(root, f"embtier-bench-{os.getpid()}")
            try:
                os.makedirs(p, exist_ok=True)
                with open(os.path.join(p, file), "w") as f:
                    f.write(str(limit))
                return p
            except OSError as e:
                sys.exit(f"memory cgroup {p}: {e}")
    print("no memory cgroup hierarchy here: cannot hold the mmap baseline to the budget", file=sys.stderr)
    sys.exit(2)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError:
        print("could not drop the page cache (not root?): the mmap run may start warm", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dram-mib", type=int, default=64)
    p.add_argument("--ratio", type=int, default=10)
    p.add_argument("--bags", type=int, default=2048)
    p.add_argument("--pooling", type=int, default=20)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--child", choices=["mmap", "calibrate"], help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child == "calibrate":
        # What the child costs without the table: interpreter, torch, one
        # small bag on a small mapped file.
        w = torch.zeros(1024, DIM)
        torch.nn.functional.embedding_bag(torch.arange(64), w, torch.arange(0, 64, 4), mode="sum")
        return
    if a.child:
        return child_mmap(a)

    import embtier
    from embtier.torch import TieredEmbeddingBags

    budget = a.dram_mib << 20
    rows = budget * a.ratio // (DIM * 4)
    tmp = tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    path = os.path.join(tmp.name, "store")
    print(f"table {rows} x {DIM} f32 = {rows * DIM * 4 >> 20} MiB, DRAM budget {a.dram_mib} MiB")

    # The same initial weights for both: the store's, exported to a file.
    cfg = {
        "tables": [{"name": "t", "rows": rows, "dim": DIM, "optimizer": {"kind": "sgd", "lr": 0.01}}],
        "dram": {"capacity": budget},
    }
    wfile = os.path.join(tmp.name, "weights.f32")
    with embtier.Store.create(path, cfg) as s, open(wfile, "wb") as f:
        chunk = 1 << 16
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            rows_np = s.export_rows("t", start, n)
            s.import_rows("t", start, rows_np)  # written rows, not lazy ones
            f.write(rows_np.tobytes())
        s.checkpoint()

    # embtier: reopened cold, the DRAM cache held to the budget.
    drop_caches()
    s = embtier.Store.open(path)
    m = TieredEmbeddingBags(s, ["t"])
    data = batches(rows, a.steps + a.warmup, a.bags, a.pooling)
    g = torch.full((a.bags, DIM), 1e-3)

    def step(idx, off):
        m(idx, off).backward(g)

    ours = run_steps(step, data, a.warmup)
    hit = s.stats()["tables"]["t"]["dram"]["hit_ratio"]
    s.close()

    # mmap: a child process in a memory cgroup of the budget plus what the
    # child costs without the table (measured: interpreter, torch), so the
    # page cache of the mapped table gets the budget.
    drop_caches()
    cg = make_cgroup(1 << 40)
    join = lambda: open(os.path.join(cg, "cgroup.procs"), "w").write(str(os.getpid()))  # noqa: E731
    subprocess.run([sys.executable, __file__, "--child", "calibrate"], check=True, preexec_fn=join)
    base = int(open(os.path.join(cg, "memory.max_usage_in_bytes")).read())
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(base + budget))
    print(f"mmap child: {base >> 20} MiB without the table, limit {(base + budget) >> 20} MiB")
    drop_caches()
    cmd = [sys.executable, __file__, "--child", "mmap", "--file", wfile, "--rows", str(rows),
           "--bags", str(a.bags), "--pooling", str(a.pooling), "--steps", str(a.steps), "--warmup", str(a.warmup)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=join)
    out, _ = proc.communicate()
    try:
        os.rmdir(cg)
    except OSError:
        pass
    if proc.returncode != 0:
        sys.exit(f"mmap child failed ({proc.returncode})")
    theirs = json.loads(out.strip().splitlines()[-1])["steps_per_s"]
    print(
        f"| table {a.ratio}x the DRAM budget ({rows * DIM * 4 >> 20} MiB, budget {a.dram_mib} MiB), "
        f"{a.bags} bags of {a.pooling}, SGD | embtier {ours:.2f} steps/s (DRAM hit ratio {hit:.3f}) | "
        f"mmap nn.EmbeddingBag in a {a.dram_mib} MiB cgroup {theirs:.2f} steps/s | embtier / mmap {ours / theirs:.2f} |"
    )


if __name__ == "__main__":
    main()
