# Reference miss ratios for tests/policy_fidelity.rs, from libCacheSim 0.3.5
# (pip install libcachesim==0.3.5). Every object counts as one (sizes ignored).
# The LIRS traces are converted to oracleGeneral first (ids in file order,
# '*' lines skipped, next-access times computed), as the test reads them.
import gzip, os, struct, sys
import libcachesim as lcs

T = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/"

def lirs_to_og(name):
    out = "/tmp/" + name.replace(".trace.gz", ".og.bin")
    ids = [int(l) for l in (x.strip() for x in gzip.open(T + name, "rt")) if l and not l.startswith("*")]
    nxt, last = [-1] * len(ids), {}
    for i in range(len(ids) - 1, -1, -1):
        nxt[i] = last.get(ids[i], -1)
        last[ids[i]] = i
    with open(out, "wb") as f:
        for i, o in enumerate(ids):
            f.write(struct.pack("<IQIq", i + 1, o, 1, nxt[i]))
    return out

def reader(path):
    p = lcs.ReaderInitParam(ignore_obj_size=True)
    return lcs.TraceReader(trace=path, trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE, reader_init_params=p)

pols = {"lru": lcs.LRU, "fifo": lcs.FIFO, "clock": lcs.Clock, "lfu": lcs.LFU, "2q": lcs.TwoQ,
        "slru": lcs.SLRU, "arc": lcs.ARC, "s3fifo": lcs.S3FIFO, "sieve": lcs.Sieve,
        "wtinylfu": lcs.WTinyLFU, "belady": lcs.Belady}
traces = [("cloudphysics", T + "cloudPhysicsIO.oracleGeneral.bin", [100, 1000, 5000, 20000]),
          ("lirs_loop", lirs_to_og("lirs_loop.trace.gz"), [10, 100, 500, 900]),
          ("lirs_sprite", lirs_to_og("lirs_sprite.trace.gz"), [10, 100, 1000, 5000])]
for tn, path, sizes in traces:
    for pn, P in pols.items():
        vals = []
        for n in sizes:
            omr, _ = P(cache_size=n).process_trace(reader(path))
            vals.append(f"({n}, {omr!r})")
        print(f'("{tn}", "{pn}", &[{", ".join(vals)}]),', flush=True)

# REFERENCE_ODD_SIZES: CloudPhysics at sizes no multiple of 4 or 100, where
# the policies' integer splits round.
print("// REFERENCE_ODD_SIZES")
for pn, P in pols.items():
    vals = []
    for n in [101, 1003, 5002, 20001]:
        omr, _ = P(cache_size=n).process_trace(reader(traces[0][1]))
        vals.append(f"({n}, {omr!r})")
    print(f'("cloudphysics", "{pn}", &[{", ".join(vals)}]),', flush=True)
