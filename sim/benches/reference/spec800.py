#!/usr/bin/env python3
"""Write the 800-table workload spec of the trace-tools scale benchmark
(docs/benchmarks.md, "Trace tools at production scale").

    python3 sim/benches/reference/spec800.py BATCHES > spec800.toml

Rows log-uniform in [1e3, 5e5] (66.2 M rows in all), pooling log-uniform in
[1, 15.8], Zipf alpha uniform in [0.6, 1.2], 512 samples per batch: about
2.21 M accesses a batch, so 904 batches make 2.0e9 accesses.
"""
import math
import random
import sys

batches = int(sys.argv[1]) if len(sys.argv) > 1 else 904
r = random.Random(17)
print("seed = 17")
print(f"batches = {batches}")
print("batch_size = 512")
for i in range(800):
    rows = int(10 ** r.uniform(3, math.log10(5e5)))
    pooling = round(10 ** r.uniform(0, 1.2), 2)
    alpha = round(r.uniform(0.6, 1.2), 2)
    print()
    print("[[tables]]")
    print(f'name = "t{i:03d}"')
    print(f"rows = {rows}")
    print(f"pooling = {pooling}")
    print(f"alpha = {alpha}")
