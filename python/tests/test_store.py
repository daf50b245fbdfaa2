"""Every call of embtier.Store against a numpy reference, and every bad
input against its exception."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import embtier
from conftest import config, ids


def ref_pool(rows, offsets, mode, w=None):
    """The reference pooling: in-order float32 accumulation per bag."""
    dim = rows.shape[1]
    out = np.zeros((len(offsets) - 1, dim), dtype=np.float32)
    for b in range(len(offsets) - 1):
        lo, hi = offsets[b], offsets[b + 1]
        acc = np.zeros(dim, dtype=np.float32)
        for k in range(lo, hi):
            acc += rows[k] * (np.float32(1) if w is None else w[k])
        if mode == "mean" and hi > lo:
            acc /= np.float32(hi - lo)
        out[b] = acc
    return out


def test_create_open_shape_and_tables(store_dir):
    with embtier.Store.create(store_dir, config([{"name": "t", "rows": 10, "dim": 4}])) as s:
        assert s.tables == ["t"]
        assert s.shape("t") == (10, 4)
        s.update("t", ids(2), np.full((1, 4), 3.0, dtype=np.float32))
        s.checkpoint()
    assert s.closed
    with embtier.Store.open(store_dir) as s:
        assert s.lookup("t", ids(2)).tolist() == [[3.0] * 4]


def test_config_from_a_store_toml(tmp_path):
    toml = tmp_path / "store.toml"
    toml.write_text('[[tables]]\nname = "x"\nrows = 5\ndim = 2\n[tables.init]\nkind = "zeros"\n')
    with embtier.Store.create(str(tmp_path / "s"), str(toml)) as s:
        assert s.shape("x") == (5, 2)
        assert s.lookup("x", ids(4)).tolist() == [[0.0, 0.0]]


def test_lookup_into_out_writes_in_place_and_returns_it(small_store):
    out = np.empty((3, 8), dtype=np.float32)
    r = small_store.lookup("a", ids(1, 2, 1), out=out)
    assert r is out
    ref = small_store.lookup("a", ids(1, 2, 1))
    assert np.array_equal(out, ref)
    assert np.array_equal(out[0], out[2])


def test_uint64_and_int64_ids_agree(small_store):
    a = small_store.lookup("a", np.array([5, 6], dtype=np.uint64))
    b = small_store.lookup("a", ids(5, 6))
    assert np.array_equal(a, b)


def test_update_and_step_match_a_numpy_reference(store_dir):
    rng = np.random.default_rng(3)
    lr = 0.25
    with embtier.Store.create(
        store_dir,
        config(
            [
                {
                    "name": "t",
                    "rows": 64,
                    "dim": 5,
                    "init": {"kind": "zeros"},
                    "optimizer": {"kind": "sgd", "lr": lr},
                }
            ],
            dram={"capacity": 5 * 4 * 8},
        ),
    ) as s:
        ref = np.zeros((64, 5), dtype=np.float32)
        for _ in range(50):
            i = rng.integers(0, 64, size=20).astype(np.int64)
            if rng.random() < 0.3:
                v = rng.standard_normal((20, 5)).astype(np.float32)
                s.update("t", i, v)
                for k in range(20):  # the last duplicate wins
                    ref[i[k]] = v[k]
            else:
                g = rng.standard_normal((20, 5)).astype(np.float32)
                s.step("t", i, g)
                summed = {}
                for k in range(20):  # duplicates summed in order, applied once
                    summed[i[k]] = summed[i[k]] + g[k] if i[k] in summed else g[k].copy()
                for r, gs in summed.items():
                    ref[r] = ref[r] - np.float32(lr) * gs
        got = s.lookup("t", np.arange(64, dtype=np.int64))
        assert np.array_equal(got, ref)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_pooled_calls_match_the_reference_bit_for_bit(store_dir, mode):
    rng = np.random.default_rng(7)
    lr = 0.1
    with embtier.Store.create(
        store_dir,
        config(
            [
                {
                    "name": "t",
                    "rows": 300,
                    "dim": 6,
                    "init": {"kind": "uniform", "scale": 0.2},
                    "optimizer": {"kind": "sgd", "lr": lr},
                }
            ],
            dram={"capacity": 20 * 24},
        ),
    ) as s:
        ref = s.export_rows("t", 0, 300).copy()
        for step in range(30):
            lens = rng.integers(0, 6, size=16)
            offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            idx = rng.integers(0, 300, size=int(offsets[-1])).astype(np.int64)
            w = rng.standard_normal(idx.shape[0]).astype(np.float32) if mode == "sum" and step % 2 else None
            out = s.lookup_pooled("t", idx, offsets, mode=mode, per_sample_weights=w)
            assert out.dtype == np.float32 and out.shape == (16, 6)
            assert np.array_equal(out, ref_pool(ref[idx], offsets, mode, w))
            grad = rng.standard_normal((16, 6)).astype(np.float32)
            s.step_pooled("t", idx, offsets, grad, mode=mode, per_sample_weights=w)
            # The reference: expand, sum duplicates in order, SGD once.
            summed = {}
            for b in range(16):
                for k in range(offsets[b], offsets[b + 1]):
                    if mode == "mean":
                        g = grad[b] / np.float32(offsets[b + 1] - offsets[b])
                    elif w is not None:
                        g = grad[b] * w[k]
                    else:
                        g = grad[b].copy()
                    r = idx[k]
                    summed[r] = summed[r] + g if r in summed else g
            for r, g in summed.items():
                ref[r] = ref[r] - np.float32(lr) * g
        assert np.array_equal(s.export_rows("t", 0, 300), ref)


def test_many_forms_equal_single_table_calls(small_store):
    s = small_store
    ia, oa = ids(1, 2, 3, 1), ids(0, 3, 4)
    ib, ob = ids(4, 4), ids(0, 0, 2)
    outs = s.lookup_pooled_many([("a", ia, oa, "sum", None), ("b", ib, ob, "mean", None)])
    assert np.array_equal(outs[0], s.lookup_pooled("a", ia, oa))
    assert np.array_equal(outs[1], s.lookup_pooled("b", ib, ob, mode="mean"))
    before = s.export_rows("a", 0, 1000).copy()
    s.step_pooled_many([("a", ia, oa, np.ones((2, 8), np.float32), "sum", None)])
    assert not np.array_equal(s.export_rows("a", 0, 1000), before)


def test_lookup_many_equals_lookup_table_by_table(small_store):
    s = small_store
    s.update("b", ids(7), np.full((1, 3), 2.5, np.float32))
    ia, ib = ids(5, 999, 5, 0), ids(7, 7, 49)
    outs = s.lookup_many([("a", ia), ("b", ib), ("a", ids())])
    assert [o.shape for o in outs] == [(4, 8), (3, 3), (0, 8)]
    assert np.array_equal(outs[0], s.lookup("a", ia))
    assert np.array_equal(outs[1], s.lookup("b", ib))
    assert outs[1][0].tolist() == [2.5] * 3
    assert s.lookup_many([]) == []
    # A bad part is named, whichever it is, and nothing is read.
    with pytest.raises(IndexError) as e:
        s.lookup_many([("a", ia), ("b", ids(50))])
    assert (e.value.table, e.value.id, e.value.rows) == ("b", 50, 50)
    with pytest.raises(KeyError) as e:
        s.lookup_many([("a", ia), ("nope", ids(1))])
    assert e.value.table == "nope"
    with pytest.raises(TypeError):
        s.lookup_many([("a",)])


def test_export_and_import_stream_a_table(small_store):
    s = small_store
    whole = np.concatenate([s.export_rows("a", st, 300) for st in (0, 300, 600)] + [s.export_rows("a", 900, 100)])
    assert whole.shape == (1000, 8)
    assert np.array_equal(whole, s.lookup("a", np.arange(1000, dtype=np.int64)))
    new = np.arange(8000, dtype=np.float32).reshape(1000, 8)
    for st in range(0, 1000, 128):
        s.import_rows("a", st, new[st : st + 128])
    assert np.array_equal(s.export_rows("a", 0, 1000), new)
    with pytest.raises(IndexError):
        s.export_rows("a", 990, 20)


def test_prefetch_pins_and_releases(small_store):
    with small_store.prefetch("a", ids(1, 2, 3)) as p:
        assert p.wait() == 3
        assert p.done
    p.release()  # idempotent


def test_checkpoint_flush_and_stats(small_store):
    small_store.update("b", ids(1), np.ones((1, 3), np.float32))
    c = small_store.checkpoint()
    assert c["generation"] == 1
    small_store.flush()
    st = small_store.stats()
    assert set(st["tables"]) == {"a", "b"}
    t = st["tables"]["b"]
    assert t["updates"] == 1 and "hit_ratio" in t["dram"] and "rows_read" in t["ssd"]
    assert st["writeback_errors"] == 0 and st["pending_rows"] == 0


def test_begin_checkpoint_commits_the_state_at_its_moment(store_dir):
    # A cache far smaller than the rows updated: rows are evicted dirty
    # while the checkpoint is written, and updated again before it wrote
    # them.
    cfg = config(
        [{"name": "t", "rows": 10_000, "dim": 4, "init": {"kind": "zeros"}}],
        dram={"capacity": 200 * 16},
    )
    every = np.arange(0, 10_000, 7, dtype=np.int64)
    with embtier.Store.create(store_dir, cfg) as s:
        s.update("t", every, np.full((len(every), 4), 1.0, np.float32))
        p = s.begin_checkpoint()
        assert isinstance(p, embtier.PendingCheckpoint)
        # After its moment: not in it.
        s.update("t", every, np.full((len(every), 4), 2.0, np.float32))
        c = p.wait()
        assert p.done and c["generation"] == 1
        assert isinstance(c["paused_seconds"], float) and c["paused_seconds"] >= 0.0
        # Its flush took the cache's dirty rows (16 bytes each) into memory.
        assert c["pending_peak_bytes"] >= 16
        assert p.wait() == c  # idempotent
        np.testing.assert_array_equal(s.lookup("t", every), 2.0)
    # Closed without another checkpoint: the reopen holds its moment.
    with embtier.Store.open(store_dir) as s:
        np.testing.assert_array_equal(s.lookup("t", every), 1.0)


def test_a_tier_list_config_and_its_stats(store_dir):
    # Two DRAM tiers with their own policies, then PMem: the [[tiers]] form.
    cfg = config([{"name": "t", "rows": 1000, "dim": 4}])
    cfg.pop("dram", None)
    cfg["tiers"] = [
        {"kind": "dram", "capacity": 16 * 8, "policy": "sieve"},
        {"kind": "dram", "capacity": 16 * 16, "policy": "lru"},
        {"kind": "pmem", "capacity": 16 * 32},
    ]
    with embtier.Store.create(store_dir, cfg) as s:
        for _ in range(2):
            s.lookup("t", np.arange(100, dtype=np.int64))
        t = s.stats()["tables"]["t"]
    kinds = [x["kind"] for x in t["tiers"]]
    assert kinds == ["dram", "dram", "pmem"]
    assert [x["capacity_rows"] for x in t["tiers"]] == [8, 16, 32]
    # Each lower tier is asked what the tier above missed.
    assert t["tiers"][1]["lookups"] == t["tiers"][0]["misses"] > 0
    assert t["tiers"][2]["lookups"] == t["tiers"][1]["misses"]
    assert t["dram"] == t["tiers"][0] and t["pmem"] == t["tiers"][2]
    assert t["placement"] == "cached"


def test_overhead_in_budget_caches_fewer_rows_for_the_same_capacity(store_dir, tmp_path):
    # 64-float rows (256 B): charged 256 + 54 + 16 = 326 B with the
    # store's memory beyond the rows counted against the DRAM capacity.
    def rows_cached(path, on):
        cfg = config([{"name": "t", "rows": 100_000, "dim": 64}], dram={"capacity": 326 * 1000})
        cfg["ssd"] = {"overhead_in_budget": on}
        with embtier.Store.create(path, cfg) as s:
            s.lookup("t", np.arange(50, dtype=np.int64))
            assert s.lookup("t", ids(7)).shape == (1, 64)
            return s.stats()["tables"]["t"]["dram"]["capacity_rows"]

    off = rows_cached(store_dir, False)
    on = rows_cached(tmp_path / "on", True)
    assert off == 326 * 1000 // 256
    assert 990 <= on <= 1000


def test_freed_memory_goes_back_at_once_when_asked():
    # Process-wide, so in a child: with the call, 95 MiB of 1 MiB buffers
    # freed after a 16 MiB one leave (almost) nothing resident.
    import platform
    import subprocess
    import sys

    code = """
import sys, embtier
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
applied = embtier.give_back_freed_memory_promptly()
big = bytearray(16 << 20); del big
before = rss()
bufs = [bytearray(b"x" * (1 << 20)) for _ in range(96)]
last = bufs.pop(); del bufs
print(applied, rss() - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    applied, left = out.stdout.split()
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        assert applied == "False"
        pytest.skip("not glibc on Linux: the call does nothing there")
    assert applied == "True"
    assert int(left) < 8 << 20, f"{int(left) >> 20} MiB left resident"


def test_a_store_closed_with_keep_takes_its_tiers_back(store_dir, tmp_path):
    # A DRAM tier in a file (on /dev/shm in practice: shared memory):
    # close(keep=True) leaves its rows there, and the next open takes them
    # back where they lie, reading nothing.
    cfg = config([{"name": "t", "rows": 100_000, "dim": 8}])
    cfg.pop("dram", None)
    cfg["tiers"] = [{"kind": "dram", "capacity": 2000 * 32, "path": str(tmp_path / "dram.shm")}]
    hot = np.arange(0, 100_000, 97, dtype=np.int64)[:1000]
    with embtier.Store.create(store_dir, cfg) as s:
        s.update("t", hot, np.arange(len(hot) * 8, dtype=np.float32).reshape(-1, 8))
        want = s.lookup("t", hot)
        s.close(keep=True)
        assert s.closed
    with embtier.Store.open(store_dir) as s:
        assert s.rows_kept_at_open >= len(hot)
        np.testing.assert_array_equal(s.lookup("t", hot), want)
        t = s.stats()["tables"]["t"]
        assert t["ssd"]["rows_read"] == 0 and t["dram"]["hits"] == len(hot)
    # Closed without keep (as `with` does; a crash leaves the same): the
    # open takes back, by the tier's slot stamps, the rows whose bytes the
    # last checkpoint holds, and no row written since.
    with embtier.Store.open(store_dir) as s:
        kept = s.rows_kept_at_open
        assert kept >= len(hot)
        s.update("t", hot[:100], np.zeros((100, 8), dtype=np.float32))
    with embtier.Store.open(store_dir) as s:
        assert s.rows_kept_at_open == kept - 100
        np.testing.assert_array_equal(s.lookup("t", hot), want)


def test_a_crashed_store_maps_its_row_log_from_the_index(store_dir):
    # Rows written past a small cache go to the row log; a store closed
    # without keep (what a crash leaves) reopens in the same boot with the
    # log's map from its index, reading no log block, and the values of
    # the last checkpoint; without the index it reads the log. Cold: a
    # warm open reads the log where the hot set's rows fill it, as they
    # fill this small one.
    cfg = config([{"name": "t", "rows": 100_000, "dim": 8}], dram={"capacity": 500 * 32})
    ids = np.arange(0, 100_000, 7, dtype=np.int64)[:6000]
    with embtier.Store.create(store_dir, cfg) as s:
        s.update("t", ids, np.arange(len(ids) * 8, dtype=np.float32).reshape(-1, 8))
        s.checkpoint()
        want = s.lookup("t", ids)
        s.update("t", ids[:3000], np.zeros((3000, 8), dtype=np.float32))
    with embtier.Store.open(store_dir) as s:
        at = s.row_log_at_open
        assert not at["from_index"] and "the hot set" in at["index_refused"], at
        np.testing.assert_array_equal(s.lookup("t", ids), want)
    with embtier.Store.open(store_dir, cold=True) as s:
        at = s.row_log_at_open
        assert at["blocks"] > 0 and at["from_index"], at
        assert at["index_refused"] is None
        np.testing.assert_array_equal(s.lookup("t", ids), want)
    os.remove(os.path.join(store_dir, "log-index.emb"))
    with embtier.Store.open(store_dir, cold=True) as s:
        at = s.row_log_at_open
        assert not at["from_index"] and "no index" in at["index_refused"], at
        np.testing.assert_array_equal(s.lookup("t", ids), want)


def test_a_reopened_store_warms_its_hot_set(store_dir):
    cfg = config([{"name": "t", "rows": 100_000, "dim": 8}], dram={"capacity": 2000 * 32})
    hot = np.arange(0, 100_000, 97, dtype=np.int64)[:1000]
    with embtier.Store.create(store_dir, cfg) as s:
        want = s.lookup("t", hot)
        c = s.checkpoint()
    assert c["hot_rows"] >= len(hot)
    # The rows' bytes too (`warm_rows`, on by default): ids and rows.
    assert c["hot_row_bytes"] >= c["hot_rows"] * (8 + 32)
    with embtier.Store.open(store_dir) as s:
        assert s.wait_warm() == c["hot_rows"]
        t = s.stats()["tables"]["t"]
        assert t["warmed"] == c["hot_rows"] and t["lookups"] == 0
        np.testing.assert_array_equal(s.lookup("t", hot), want)
        t = s.stats()["tables"]["t"]
        # Put back from the hot rows: nothing read from the data file.
        assert t["dram"]["hits"] == len(hot) and t["ssd"]["rows_read"] == 0
    with embtier.Store.open(store_dir, cold=True) as s:
        assert s.wait_warm() == 0
        np.testing.assert_array_equal(s.lookup("t", hot), want)


def test_merge_row_log_writes_every_logged_row_home(store_dir):
    # A DRAM cache of 64 rows: a bulk import evicts most rows to the row log.
    cfg = config([{"name": "t", "rows": 5000, "dim": 16}], dram={"capacity": 64 * 80})
    new = np.arange(5000 * 16, dtype=np.float32).reshape(5000, 16)
    with embtier.Store.create(store_dir, cfg) as s:
        for st in range(0, 5000, 1000):
            s.import_rows("t", st, new[st : st + 1000])
        s.checkpoint()
        assert s.stats()["row_log_used_blocks"] > 0
        c = s.merge_row_log()
        assert c["generation"] == 2 and c["row_log_merged_rows"] > 0
        st = s.stats()
        assert st["row_log_used_blocks"] == 0 and st["row_log_merges"] == 1
    with embtier.Store.open(store_dir) as s:
        assert np.array_equal(s.export_rows("t", 0, 5000), new)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (a DataLoader's default start method)")
def test_a_forked_worker_does_not_keep_the_store_locked(store_dir):
    # A DataLoader worker forks the trainer with its store open and never
    # execs; the store must reopen once the trainer closes it.
    s = embtier.Store.create(store_dir, config([{"name": "t", "rows": 10, "dim": 4}]))
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        s.close()
        with embtier.Store.open(store_dir) as again:
            assert again.shape("t") == (10, 4)
            with pytest.raises(embtier.LockedError):
                embtier.Store.open(store_dir)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# --- bad input ------------------------------------------------------------


def test_errors_are_typed_with_facts(small_store):
    s = small_store
    with pytest.raises(IndexError) as e:
        s.lookup("a", ids(0, 1000))
    assert isinstance(e.value, embtier.IdOutOfRangeError) and isinstance(e.value, embtier.Error)
    assert (e.value.table, e.value.id, e.value.rows) == ("a", 1000, 1000)
    with pytest.raises(IndexError):
        s.lookup("a", ids(-1))  # reads as an id far out of range
    with pytest.raises(KeyError) as e:
        s.lookup("nope", ids(1))
    assert e.value.table == "nope" and isinstance(e.value, embtier.UnknownTableError)
    with pytest.raises(ValueError) as e:
        s.update("a", ids(1), np.full((1, 8), np.nan, np.float32))
    assert isinstance(e.value, embtier.InvalidArgumentError) and e.value.id == 1
    with pytest.raises(ValueError) as e:
        s.update("a", ids(1, 2), np.ones((1, 8), np.float32))
    assert e.value.argument == "values"
    with pytest.raises(ValueError) as e:
        s.lookup_pooled("a", ids(1, 2), ids(0, 2, 1))
    assert (e.value.argument, e.value.at) == ("offsets", 2)
    with pytest.raises(ValueError):
        s.lookup_pooled("a", ids(1), ids(0, 1), mode="max")
    with pytest.raises(ValueError):
        s.lookup_pooled("a", ids(1), ids(0, 1), mode="mean", per_sample_weights=np.ones(1, np.float32))


@pytest.mark.parametrize(
    "bad",
    [
        [1, 2],  # a list, not an array
        np.array([1.0, 2.0]),  # float ids
        np.array([1, 2], dtype=np.int32),  # int32 ids
        np.array([[1, 2]], dtype=np.int64),  # 2-D
        np.arange(10, dtype=np.int64)[::2],  # not contiguous
    ],
)
def test_bad_arrays_raise_type_or_value_errors_never_crash(small_store, bad):
    with pytest.raises((TypeError, ValueError)):
        small_store.lookup("a", bad)


def test_bad_out_arrays(small_store):
    with pytest.raises(TypeError):
        small_store.lookup("a", ids(1), out=np.empty((1, 8), np.float64))
    with pytest.raises(ValueError):
        small_store.lookup("a", ids(1), out=np.empty((2, 8), np.float32))
    with pytest.raises(ValueError):
        small_store.lookup("a", ids(1, 2), out=np.empty((8, 2), np.float32).T)
    ro = np.empty((1, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError):
        small_store.lookup("a", ids(1), out=ro)


def test_files_and_configs(tmp_path, store_dir):
    with pytest.raises(OSError) as e:
        embtier.Store.open(str(tmp_path / "nothing-here"))
    assert isinstance(e.value, embtier.Error)
    with pytest.raises(ValueError) as e:
        embtier.Store.create(store_dir, {"tables": [{"name": "t", "rows": 10, "dim": 0}]})
    assert isinstance(e.value, embtier.ConfigError)
    with pytest.raises(ValueError):
        embtier.Store.create(store_dir, {"tables": [{"name": "t", "rows": 10, "dim": 2, "bogus": 1}]})
    with pytest.raises(TypeError):
        embtier.Store.create(store_dir, 42)
    s = embtier.Store.create(store_dir, {"tables": [{"name": "t", "rows": 10, "dim": 2}]})
    with pytest.raises(OSError) as e:
        embtier.Store.open(store_dir)  # locked by this process's open store
    assert isinstance(e.value, embtier.LockedError)
    s.close()
    with pytest.raises(FileExistsError):
        embtier.Store.create(store_dir, {"tables": [{"name": "t", "rows": 10, "dim": 2}]})


def test_a_corrupt_file_is_an_oserror_naming_it(store_dir):
    import os

    with embtier.Store.create(store_dir, {"tables": [{"name": "t", "rows": 10, "dim": 2}]}) as s:
        s.checkpoint()
    meta = os.path.join(store_dir, "embtier.meta")
    b = bytearray(open(meta, "rb").read())
    b[70] ^= 1
    b[4096 + 70] ^= 1
    open(meta, "wb").write(bytes(b))
    with pytest.raises(OSError) as e:
        embtier.Store.open(store_dir)
    assert isinstance(e.value, embtier.CorruptError)
    assert e.value.path.endswith("embtier.meta") and e.value.offset == 0


def test_a_closed_store_raises_and_does_not_crash(small_store):
    small_store.close()
    small_store.close()
    for call in (
        lambda: small_store.lookup("a", ids(1)),
        lambda: small_store.tables,
        lambda: small_store.stats(),
        lambda: small_store.checkpoint(),
    ):
        with pytest.raises(embtier.ClosedError):
            call()


def test_threads_share_one_store(store_dir):
    with embtier.Store.create(
        store_dir,
        config(
            [{"name": "t", "rows": 500, "dim": 4, "init": {"kind": "zeros"}, "optimizer": {"kind": "sgd", "lr": 1.0}}],
            dram={"capacity": 64 * 16},
        ),
    ) as s:
        counts = np.zeros(500, dtype=np.int64)
        lock = threading.Lock()
        errors = []

        def work(seed):
            try:
                rng = np.random.default_rng(seed)
                for _ in range(100):
                    i = rng.integers(0, 500, size=32).astype(np.int64)
                    s.step("t", i, np.ones((32, 4), np.float32))
                    with lock:
                        np.add.at(counts, i, 1)
                    s.lookup("t", i)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        got = s.lookup("t", np.arange(500, dtype=np.int64))
        assert np.array_equal(got[:, 0], -counts.astype(np.float32))
