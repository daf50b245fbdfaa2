#!/usr/bin/env python3
"""Benchmarks of the Python package, as ratios measured in one run
(docs/benchmarks.md, "Python and PyTorch"):

1. ``Store.lookup`` of a 4096-id batch from Python against the same lookup
   looped in Rust (``Store._time_lookup``), same store, same ids.
2. ``TieredEmbeddingBags`` forward + backward with the tables in DRAM
   against FBGEMM's CPU TBE (EXACT_SGD, EXACT_ROWWISE_ADAGRAD) and against
   ``nn.EmbeddingBag(sparse=True)`` + ``torch.optim.SGD``: same tables,
   batches and optimizer; with SGD, also the same step over the tables
   cached instead of pinned (the same DRAM: some rows are evicted and
   written back), against the pinned step.

    python python/bench/bench.py [--rows 1000000] [--dim 64] [--bags 4096] [--pooling 20] [--steps 20]
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch

import embtier
from embtier.torch import TieredEmbeddingBags


def timed(fn, steps, warmup=3):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--tables", type=int, default=2)
    p.add_argument("--bags", type=int, default=4096)
    p.add_argument("--pooling", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    tmp = tempfile.TemporaryDirectory()
    names = [f"t{i}" for i in range(a.tables)]

    # 1. lookup from Python against lookup in Rust.
    with embtier.Store.create(
        os.path.join(tmp.name, "lookup"),
        {"tables": [{"name": "t", "rows": a.rows, "dim": a.dim}], "dram": {"capacity": a.rows * a.dim * 8}},
    ) as s:
        ids = rng.integers(0, a.rows, size=4096).astype(np.int64)
        out = np.empty((4096, a.dim), dtype=np.float32)
        s.lookup("t", np.arange(a.rows, dtype=np.int64), None)  # everything in DRAM
        iters = 2000
        rust = s._time_lookup("t", ids, iters) / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            s.lookup("t", ids, out=out)
        py = (time.perf_counter() - t0) / iters
        rust2 = s._time_lookup("t", ids, iters) / iters
        rust = min(rust, rust2)
        print("| lookup of 4096 ids, dim %d | Rust %.1f us | Python %.1f us | Python / Rust speed %.3f |"
              % (a.dim, rust * 1e6, py * 1e6, rust / py))

    # 2. forward + backward against FBGEMM's CPU TBE and nn.EmbeddingBag.
    from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    batches = []
    for _ in range(8):
        idx = torch.from_numpy(rng.integers(0, a.rows, size=a.tables * a.bags * a.pooling).astype(np.int64))
        off = torch.arange(0, a.tables * a.bags * a.pooling + 1, a.pooling, dtype=torch.int64)
        batches.append((idx, off))
    grad = torch.randn(a.bags, a.tables * a.dim)
    for kind, fb_opt in [("sgd", OptimType.EXACT_SGD), ("rowwise_adagrad", OptimType.EXACT_ROWWISE_ADAGRAD)]:
        opt = {"kind": kind, "lr": 0.01} if kind == "sgd" else {"kind": kind, "lr": 0.01, "eps": 1e-8}
        s = embtier.Store.create(
            os.path.join(tmp.name, kind),
            {
                "tables": [
                    {"name": n, "rows": a.rows, "dim": a.dim, "placement": "pinned-dram", "optimizer": opt}
                    for n in names
                ],
                "dram": {"capacity": a.tables * a.rows * (a.dim * 4 + 4) + (64 << 20)},
            },
        )
        ours = TieredEmbeddingBags(s, names)
        tbe = SplitTableBatchedEmbeddingBagsCodegen(
            embedding_specs=[(a.rows, a.dim, EmbeddingLocation.HOST, ComputeDevice.CPU)] * a.tables,
            optimizer=fb_opt,
            learning_rate=0.01,
            eps=1e-8,
            pooling_mode=PoolingMode.SUM,
        )
        k = [0]

        def step(m):
            def f():
                idx, off = batches[k[0] % len(batches)]
                k[0] += 1
                m(idx, off).backward(grad)
            return f

        t_ours = timed(step(ours), a.steps)
        t_fb = timed(step(tbe), a.steps)
        line = "| %s, %d tables of %d x %d, %d bags of %d | embtier %.1f ms | FBGEMM CPU TBE %.1f ms | embtier / FBGEMM speed %.2f |" % (
            kind, a.tables, a.rows, a.dim, a.bags, a.pooling, t_ours * 1e3, t_fb * 1e3, t_fb / t_ours)
        if kind == "sgd":
            bags = [torch.nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True) for _ in names]
            sgd = torch.optim.SGD([b.weight for b in bags], lr=0.01)

            def plain():
                idx, off = batches[k[0] % len(batches)]
                k[0] += 1
                outs = []
                for t, b in enumerate(bags):
                    lo, hi = t * a.bags * a.pooling, (t + 1) * a.bags * a.pooling
                    outs.append(b(idx[lo:hi], off[t * a.bags : (t + 1) * a.bags] - lo))
                sgd.zero_grad()
                torch.cat(outs, 1).backward(grad)
                sgd.step()

            t_eb = timed(plain, a.steps)
            line += " nn.EmbeddingBag + SGD %.1f ms (embtier / it %.2f) |" % (t_eb * 1e3, t_eb / t_ours)
        print(line)
        s.close()
        if kind == "sgd":
            # The same step with the tables cached: the caches fill over
            # the warm-up (a fresh store), then the steady state is timed.
            c = embtier.Store.create(
                os.path.join(tmp.name, "cached"),
                {
                    "tables": [{"name": n, "rows": a.rows, "dim": a.dim, "optimizer": opt} for n in names],
                    "dram": {"capacity": a.tables * a.rows * (a.dim * 4 + 4) + (64 << 20)},
                },
            )
            t_cached = timed(step(TieredEmbeddingBags(c, names)), a.steps, warmup=3 * len(batches))
            print("| sgd, the tables cached (the same DRAM) | embtier cached %.1f ms | embtier pinned %.1f ms | cached / pinned time %.2f |"
                  % (t_cached * 1e3, t_ours * 1e3, t_cached / t_ours))
            c.close()


if __name__ == "__main__":
    main()
