# Reference LRU miss ratios (object counts, sizes ignored) from libCacheSim 0.3.5.
import libcachesim as lcs, sys, time
path = "/work/shared/traces/cloudPhysicsIO.oracleGeneral.bin"
sizes = [int(s) for s in sys.argv[1:]] or [1, 10, 100, 1000, 5000, 10000, 20000, 48974]
for n in sizes:
    p = lcs.ReaderInitParam(ignore_obj_size=True)
    r = lcs.TraceReader(trace=path, trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE, reader_init_params=p)
    c = lcs.LRU(cache_size=n)
    t = time.time()
    omr, bmr = c.process_trace(r)
    print(n, repr(omr), f"{time.time()-t:.3f}s")
