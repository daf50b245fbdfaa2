"""Several tables' lookups in one call (`Store.lookup_many`) against the
same lookups one table at a time, on a store whose rows are on the disk
and whose DRAM cache is cold: wall and CPU seconds, alternating, in one
run.

    python python/bench/lookup_many.py [DIR]

DIR (default: a temporary directory) gets a store of 8 tables x 2 M rows
x 64 f32 (4.4 GB of data file, written once).
"""

import shutil
import sys
import tempfile
import time

import numpy as np

import embtier

T, ROWS, DIM, IDS, BATCHES, ROUNDS = 8, 2_000_000, 64, 4096, 10, 3


def build(path):
    cfg = {
        "dram": {"capacity": "64MiB"},
        "tables": [
            {"name": f"t{i}", "rows": ROWS, "dim": DIM, "init": {"kind": "zeros"}} for i in range(T)
        ],
    }
    with embtier.Store.create(path, cfg) as s:
        chunk = 1 << 18
        for t in range(T):
            for lo in range(0, ROWS, chunk):
                n = min(chunk, ROWS - lo)
                s.import_rows(f"t{t}", lo, np.full((n, DIM), t + 1, np.float32))
        s.merge_row_log()


def run(path, how, rng):
    batches = [
        [(f"t{t}", rng.integers(0, ROWS, IDS).astype(np.int64)) for t in range(T)]
        for _ in range(BATCHES)
    ]
    with embtier.Store.open(path, cold=True) as s:
        w0, c0 = time.perf_counter(), time.process_time()
        for b in batches:
            if how == "many":
                s.lookup_many(b)
            else:
                for name, ids in b:
                    s.lookup(name, ids)
        return time.perf_counter() - w0, time.process_time() - c0


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="embtier-many-")
    path = f"{root}/store"
    shutil.rmtree(path, ignore_errors=True)
    build(path)
    rng = np.random.default_rng(1)
    res = {"one table a call": [], "lookup_many": []}
    for r in range(ROUNDS):
        order = ["one", "many"] if r % 2 == 0 else ["many", "one"]
        for how in order:
            key = "lookup_many" if how == "many" else "one table a call"
            res[key].append(run(path, how, rng))
    print(f"{T} tables x {BATCHES} batches x {IDS} ids, cold cache, rows on disk")
    for k, v in res.items():
        walls = " ".join(f"{w:.2f}" for w, _ in v)
        cpus = " ".join(f"{c:.2f}" for _, c in v)
        print(f"{k:>17}: wall {walls} s; cpu {cpus} s")
    if len(sys.argv) <= 1:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
