# LRU requests/s of libCacheSim 0.3.5 on an oracleGeneral trace, best of N
# runs (the reader is opened outside the timed region).
import os, sys, time
import libcachesim as lcs
path, size, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n_req = os.path.getsize(path) // 24
best, omr = 0.0, float("nan")
for _ in range(runs):
    r = lcs.TraceReader(trace=path, trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE,
                        reader_init_params=lcs.ReaderInitParam(ignore_obj_size=True))
    c = lcs.LRU(cache_size=size)
    t = time.perf_counter()
    omr, _ = c.process_trace(r)
    best = max(best, n_req / (time.perf_counter() - t))
print(f"{best:.0f} {omr!r}")
