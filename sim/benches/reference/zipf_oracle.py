#!/usr/bin/env python3
"""Write a Zipf(0.9) oracleGeneral trace: N requests over 1 M objects with
scattered 64-bit ids (the whole-process benchmark's input).

    python3 sim/benches/reference/zipf_oracle.py OUT [N=5300000]   # needs numpy
"""
import sys

import numpy as np

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 5_300_000
rng = np.random.default_rng(7)
objects = 1_000_000
w = 1.0 / np.arange(1, objects + 1) ** 0.9
cdf = np.cumsum(w)
cdf /= cdf[-1]
ranks = np.searchsorted(cdf, rng.random(n))
ids = rng.permutation(objects).astype(np.uint64) * 7919 + 12345
rec = np.zeros(n, dtype=[("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("next", "<i8")])
rec["t"] = np.arange(n, dtype=np.uint32)
rec["id"] = ids[ranks]
rec["sz"] = 1
rec["next"] = -1
rec.tofile(out)
