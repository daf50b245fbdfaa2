"""The first-day review's defects (2026-11-29), each held by a test that
failed before its mend: inputs that panicked, a close that did not wait,
ids another thread rewrote mid-call, argument names, config dicts with
numpy scalars, and the PyTorch module's in-place indices, dtypes and
prefetch pins."""

import inspect
import os
import threading
import time

import numpy as np
import pytest

import embtier
from conftest import config, ids


def unaligned(values, dtype):
    """A C-contiguous but unaligned array of ``values`` (numpy.frombuffer
    one byte into a buffer)."""
    raw = b"H" + np.asarray(values, dtype=dtype).tobytes()
    a = np.frombuffer(raw, dtype=dtype, offset=1)
    assert a.flags.c_contiguous and not a.flags.aligned
    return a


def test_unaligned_arrays_are_a_value_error_naming_the_argument(small_store):
    with pytest.raises(embtier.InvalidArgumentError) as e:
        small_store.lookup("a", unaligned([1, 2], np.int64))
    assert e.value.argument == "ids"
    assert "aligned" in str(e.value)
    vals = unaligned(np.ones(16), np.float32).reshape(2, 8)
    with pytest.raises(embtier.InvalidArgumentError) as e:
        small_store.update("a", ids(1, 2), vals)
    assert e.value.argument == "values"
    # The store is unchanged and serves on.
    assert small_store.lookup("a", ids(1)).shape == (1, 8)


def test_export_rows_past_the_table_is_id_out_of_range_not_a_panic(small_store):
    for count in (10**15, 2**63, 1001):
        with pytest.raises(embtier.IdOutOfRangeError) as e:
            small_store.export_rows("a", 0, count)
        assert (e.value.table, e.value.rows) == ("a", 1000)
    with pytest.raises(embtier.IdOutOfRangeError):
        small_store.export_rows("a", 999, 2)
    assert small_store.export_rows("a", 999, 1).shape == (1, 8)
    assert small_store.export_rows("a", 1000, 0).shape == (0, 8)


def test_close_waits_for_calls_in_flight(store_dir):
    s = embtier.Store.create(
        store_dir,
        config(
            [{"name": "t", "rows": 400_000, "dim": 32, "optimizer": {"kind": "sgd", "lr": 0.1}}],
            dram={"capacity": "4MiB"},
        ),
    )
    many = np.random.default_rng(0).integers(0, 400_000, 400_000).astype(np.int64)
    g = np.full((len(many), 32), 1e-3, np.float32)
    s.step("t", many, g)  # the slow call, timed once: close must wait about this long
    done = []

    def work():
        s.step("t", many, g)
        done.append(time.monotonic())

    th = threading.Thread(target=work)
    th.start()
    time.sleep(0.05)
    s.close()
    closed_at = time.monotonic()
    th.join()
    assert done, "the call in flight failed"
    assert done[0] <= closed_at, "close() returned before the call in flight did"
    # The lock is released: the store opens again at once.
    with embtier.Store.open(store_dir) as again:
        assert again.shape("t") == (400_000, 32)


def test_ids_rewritten_by_another_thread_never_reach_the_store(store_dir):
    """The ids a call checks are the ids it uses: a thread rewriting the
    array mid-call gives IdOutOfRangeError or a result, never errors that
    blame the store's files (they were read at wild offsets before)."""
    with embtier.Store.create(
        store_dir,
        config(
            [{"name": "a", "rows": 100_000, "dim": 16, "optimizer": {"kind": "sgd", "lr": 0.1}}],
            dram={"capacity": "1MiB"},
        ),
    ) as s:
        arr = np.arange(100_000, dtype=np.int64)
        good, bad = arr.copy(), np.full_like(arr, 1 << 40)
        stop = []

        def flip():
            while not stop:
                arr[:] = bad
                arr[:] = good

        t = threading.Thread(target=flip)
        t.start()
        wrong = []
        g = np.full((len(arr), 16), 1e-3, np.float32)
        try:
            deadline = time.monotonic() + 4
            i = 0
            while time.monotonic() < deadline:
                try:
                    s.lookup("a", arr) if i % 2 else s.step("a", arr, g)
                except embtier.IdOutOfRangeError:
                    pass
                except embtier.Error as e:
                    wrong.append(f"{type(e).__name__}: {e}")
                i += 1
        finally:
            stop.append(1)
            t.join()
        assert not wrong, wrong[:3]
        path = s.path
    with embtier.Store.open(path) as s:
        assert s.lookup("a", good[:10]).shape == (10, 16)


def test_invalid_argument_names_the_python_argument(small_store):
    s = small_store
    i, o = ids(1, 2), ids(0, 2)
    nan = np.float32("nan")
    cases = {
        "values": lambda: s.update("a", i, np.full((2, 8), nan, np.float32)),
        "grads": lambda: s.step("a", i, np.full((2, 8), nan, np.float32)),
        "per_sample_weights": lambda: s.lookup_pooled(
            "a", i, o, per_sample_weights=np.array([nan, 1], np.float32)
        ),
        "grad": lambda: s.step_pooled("a", i, o, np.full((1, 8), nan, np.float32)),
    }
    for arg, call in cases.items():
        with pytest.raises(embtier.InvalidArgumentError) as e:
            call()
        assert e.value.argument == arg, (arg, e.value.argument, str(e.value))
        assert arg in str(e.value)
    with pytest.raises(embtier.InvalidArgumentError) as e:
        s.import_rows("a", 0, np.full((2, 8), nan, np.float32))
    assert e.value.argument == "values"
    with pytest.raises(embtier.InvalidArgumentError) as e:
        s.lookup_pooled("a", i, o, mode="mean", per_sample_weights=np.ones(2, np.float32))
    assert e.value.argument == "per_sample_weights"
    assert e.value.table == "a"


def test_config_dicts_take_numpy_scalars_and_name_bad_keys(tmp_path):
    counts = np.array([3, 9, 4])
    cfg = config(
        [
            {
                "name": "t",
                "rows": counts.max() + 1,  # numpy.int64
                "dim": np.int32(4),
                "seed": np.array(7),  # a 0-d array
                "optimizer": {"kind": "sgd", "lr": np.float32(0.5)},
            }
        ]
    )
    with embtier.Store.create(str(tmp_path / "a"), cfg) as s:
        assert s.shape("t") == (10, 4)
    cfg["tiers"] = [
        {"kind": "dram", "capacity": np.int64(1 << 20), "policy": np.str_("sieve")},
        {"kind": "dram", "capacity": np.array([1 << 20])[0], "policy": "lru"},
    ]
    with embtier.Store.create(str(tmp_path / "d"), cfg) as s:
        assert [t["kind"] for t in s.stats()["tables"]["t"]["tiers"]] == ["dram", "dram"]
    bad = config([{"name": "t", "rows": 10, "dim": 4, "optimizer": {"kind": "sgd", "lr": float("nan")}}])
    with pytest.raises(embtier.ConfigError) as e:
        embtier.Store.create(str(tmp_path / "b"), bad)
    assert e.value.key == 'config["tables"][0]["optimizer"]["lr"]', e.value.key
    assert "finite" in str(e.value)
    with pytest.raises(embtier.ConfigError) as e:
        embtier.Store.create(str(tmp_path / "c"), config([{"name": "t", "rows": 10, "dim": object()}]))
    assert e.value.key == 'config["tables"][0]["dim"]'
    assert not os.path.exists(tmp_path / "b") and not os.path.exists(tmp_path / "c")


def test_the_stub_has_every_method_with_its_signature():
    """_embtier.pyi against the extension: the same public names on Store,
    and the same parameters where the extension tells them."""
    stub = os.path.join(os.path.dirname(embtier.__file__), "_embtier.pyi")
    text = open(stub).read()
    for name in dir(embtier.Store):
        if name.startswith("_"):
            continue
        assert f"def {name}(" in text, f"Store.{name} is missing from _embtier.pyi"
        member = getattr(embtier.Store, name)
        try:
            params = list(inspect.signature(member).parameters)
        except (TypeError, ValueError):
            continue  # a property, or no text signature
        at = text.index(f"def {name}(")
        line = text[at : text.index('"""', at)]  # the whole def, over its lines
        for p in params:
            if p in ("self", "$self"):
                continue
            assert f"{p}" in line, f"Store.{name}: parameter {p!r} missing from the stub: {line.strip()}"


def test_help_shows_every_public_name_s_docs():
    """help(Store.lookup) showed nothing: the text lived in the stub only."""
    for cls in (embtier.Store, embtier.Prefetch, embtier.PendingCheckpoint):
        for name in dir(cls):
            if name.startswith("_"):
                continue
            doc = getattr(cls, name).__doc__ or ""
            # A text signature alone (a first line "name(...)") is not docs.
            text = "\n".join(l for l in doc.splitlines() if not l.startswith(f"{name}(")).strip()
            assert len(text) > 20, f"{cls.__name__}.{name} has no docstring: {doc!r}"


def test_type_errors_are_embtier_errors_naming_the_argument(small_store):
    cases = {
        "ids": lambda: small_store.lookup("a", np.array([1.0, 2.0])),
        "values": lambda: small_store.update("a", ids(1), np.ones((1, 8), np.float64)),
        "out": lambda: small_store.lookup("a", ids(1), out=np.empty((1, 8), np.float64)),
    }
    for arg, call in cases.items():
        with pytest.raises(embtier.ArgumentTypeError) as e:
            call()
        assert isinstance(e.value, TypeError) and isinstance(e.value, embtier.Error)
        assert e.value.argument == arg
    with pytest.raises(embtier.ArgumentTypeError) as e:
        small_store.lookup("a", [1, 2])
    assert e.value.argument == "ids"


def test_a_config_dict_s_errors_name_its_key_and_table_not_toml_lines(tmp_path):
    """A dict is not TOML: its errors name the key (as the dict spells it)
    and the table, and never a line and column of a TOML text the user
    never wrote."""

    def table(**kw):
        t = {"name": "users", "rows": 10, "dim": 4}
        t.update(kw)
        return t

    cases = [
        (config([table(optimizer={"kind": "sgdx", "lr": 1})]), 'config["tables"][0]["optimizer"]["kind"]', "users", "sgdx"),
        (config([table(optimizer={"kind": "adam", "lr": 1, "beta3": 2})]), 'config["tables"][0]["optimizer"]', "users", "beta3"),
        (config([table(), table(name="items", init={"kind": "uniform", "scal": 0.1})]), 'config["tables"][1]["init"]', "items", "scal"),
        (config([table(rows="ten")]), 'config["tables"][0]["rows"]', "users", "ten"),
        (config([table(placment="pinned-dram")]), 'config["tables"][0]["placment"]', "users", "placment"),
        (dict(config([table()]), dram={"capacity": "12XB"}), 'config["dram"]["capacity"]', None, "12XB"),
        (dict(config([table()]), dram={"policy": "2q"}), 'config["dram"]["policy"]', None, "simulation only"),
        (dict(config([table()]), ssd={"queue_dept": 4}), 'config["ssd"]["queue_dept"]', None, "queue_dept"),
    ]
    for i, (cfg, key, tbl, says) in enumerate(cases):
        with pytest.raises(embtier.ConfigError) as e:
            embtier.Store.create(str(tmp_path / str(i)), cfg)
        msg = str(e.value)
        assert e.value.key == key, (i, e.value.key, msg)
        assert getattr(e.value, "table", None) == tbl, (i, msg)
        assert says in msg and "line" not in msg and "column" not in msg, (i, msg)
        assert msg.startswith(key + ": "), (i, msg)
        assert not os.path.exists(tmp_path / str(i))
    # Settings read but refused by the checks after: the table named apart.
    for i, (cfg, tbl, says) in enumerate(
        [
            (config([table(optimizer={"kind": "sgd", "lr": -1})]), "users", "lr -1 is negative"),
            (config([table(), table(name="items", rows=0)]), "items", "rows 0"),
            (config([table(), table()]), "users", "duplicate"),
            (config([table(placement="pinned-pmem")]), "users", "no pmem tier"),
            # Past TOML's i64: a ConfigError, not a PanicException.
            (config([table(seed=2**63)]), "users", "seed 9223372036854775808 is past"),
        ]
    ):
        with pytest.raises(embtier.ConfigError) as e:
            embtier.Store.create(str(tmp_path / f"s{i}"), cfg)
        assert e.value.table == tbl and says in str(e.value), (i, str(e.value))
    # A store.toml file's errors keep its lines: there the user wrote them.
    p = tmp_path / "store.toml"
    p.write_text('[[tables]]\nname = "t"\nrows = "ten"\ndim = 4\n')
    with pytest.raises(embtier.ConfigError, match="line 3"):
        embtier.Store.create(str(tmp_path / "f"), str(p))
