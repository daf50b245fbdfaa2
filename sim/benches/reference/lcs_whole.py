#!/usr/bin/env python3
"""libCacheSim 0.3.5, the whole process: open an oracleGeneral trace and run
one policy at one size (the baseline `emb-replay simulate` is timed against
with /usr/bin/time). Prints the miss ratio.

    /usr/bin/time python3 sim/benches/reference/lcs_whole.py TRACE SIZE [POLICY=LRU]
"""
import sys

import libcachesim as lcs

path, size = sys.argv[1], int(sys.argv[2])
policy = sys.argv[3] if len(sys.argv) > 3 else "LRU"
reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
cache = getattr(lcs, policy)(size)
print(cache.process_trace(reader)[0])
