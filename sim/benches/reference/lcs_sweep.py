#!/usr/bin/env python3
"""libCacheSim 0.3.5 running a policy x size grid over one oracleGeneral
trace on all cores, as `cachesim` does with its threads: the binding has no
threaded grid, so a pool of worker processes (or threads, with `threads`)
runs one (policy, size) each, every worker with its own reader. Prints
`POLICY SIZE MISS_RATIO` lines.

    /usr/bin/time python3 sim/benches/reference/lcs_sweep.py TRACE SIZES POLICIES [processes|threads]
"""
import concurrent.futures as cf
import os
import sys

import libcachesim as lcs


def run(job):
    path, policy, size = job
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    return policy, size, getattr(lcs, policy)(size).process_trace(reader)[0]


if __name__ == "__main__":
    path = sys.argv[1]
    sizes = [int(s) for s in sys.argv[2].split(",")]
    policies = sys.argv[3].split(",")
    pool = cf.ThreadPoolExecutor if sys.argv[4:] == ["threads"] else cf.ProcessPoolExecutor
    jobs = [(path, p, s) for p in policies for s in sizes]
    with pool(max_workers=os.cpu_count()) as ex:
        for policy, size, mr in ex.map(run, jobs):
            print(policy, size, f"{mr:.6f}")
