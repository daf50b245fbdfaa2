"""The second first-day review's defects in the PyTorch module (2026-12-07),
each held by a test that failed before its mend: a per-sample weights'
gradient read after another step, loads that wrote half a state_dict or
skipped a table's weights, a state_dict its own store refused, frozen
tables that still stepped, and a store pickled by accident."""

import copy
import io
import pickle

import numpy as np
import pytest
import torch

import embtier
from conftest import config
from embtier.torch import TieredEmbeddingBags


def sgd(lr=1.0):
    return {"kind": "sgd", "lr": lr}


def test_psw_gradient_uses_the_rows_its_forward_saw(store_dir):
    """Two forwards of one module in one graph: the second's step runs
    first, and the first's weights' gradient must not read its rows."""
    s = embtier.Store.create(store_dir, config([{"name": "a", "rows": 10, "dim": 2, "optimizer": sgd()}]))
    w0 = torch.from_numpy(s.export_rows("a", 0, 10).copy())
    m = TieredEmbeddingBags(s, ["a"])
    i, o = torch.tensor([3]), torch.tensor([0, 1])
    w = torch.tensor([1.0], requires_grad=True)
    (m(i, o, w).sum() + 3 * m(i, o).sum()).backward()
    ref = torch.nn.EmbeddingBag(10, 2, mode="sum", include_last_offset=True, _weight=w0.clone())
    wr = torch.tensor([1.0], requires_grad=True)
    (ref(i, o, wr).sum() + 3 * ref(i, o).sum()).backward()
    assert torch.allclose(w.grad, wr.grad, atol=1e-6), (w.grad, wr.grad)
    s.close()


def two_tables(store_dir):
    s = embtier.Store.create(
        store_dir,
        config(
            [
                {"name": "a", "rows": 100, "dim": 4},
                {"name": "b", "rows": 100, "dim": 4, "optimizer": {"kind": "rowwise_adagrad", "lr": 0.1}},
            ]
        ),
    )
    return s, TieredEmbeddingBags(s, ["a", "b"])


@pytest.mark.parametrize("bad", ["nan_weight", "negative_state", "nan_state"])
def test_a_load_refused_for_a_value_writes_nothing(store_dir, bad):
    s, emb = two_tables(store_dir)
    before = {t: (s.export_rows(t, 0, 100).copy(), s.export_state(t, 0, 100).copy()) for t in "ab"}
    sd = emb.state_dict()
    sd["a.weight"].fill_(0.25)
    sd["b.weight"].fill_(0.5)
    if bad == "nan_weight":
        sd["b.weight"][99, 0] = float("nan")
    elif bad == "negative_state":
        sd["b.optimizer_state"][99] = torch.from_numpy(np.array([-1.0], np.float32).view(np.uint8))
    else:
        sd["b.optimizer_state"].fill_(255)  # NaN bytes
    with pytest.raises(embtier.InvalidArgumentError) as e:
        emb.load_state_dict(sd)
    assert e.value.table == "b"
    for t in "ab":
        assert np.array_equal(s.export_rows(t, 0, 100), before[t][0]), f"{t}'s weights written"
        assert np.array_equal(s.export_state(t, 0, 100), before[t][1]), f"{t}'s state written"
    s.close()


def test_a_state_dict_with_overflowed_sums_of_squares_loads_back(store_dir, tmp_path):
    cfg = config([{"name": "a", "rows": 100, "dim": 4, "optimizer": {"kind": "rowwise_adagrad", "lr": 0.1}}])
    s = embtier.Store.create(store_dir, cfg)
    emb = TieredEmbeddingBags(s, ["a"])
    emb(torch.tensor([1]), torch.tensor([0, 1])).mul(3e19).sum().backward()  # finite, accepted
    state = s.export_state("a", 1, 1).view(np.float32)
    assert np.isposinf(state).all(), state
    sd = emb.state_dict()
    fresh = embtier.Store.create(str(tmp_path / "fresh"), cfg)
    other = TieredEmbeddingBags(fresh, ["a"])
    other.load_state_dict(sd)
    assert np.array_equal(fresh.export_state("a", 0, 100), s.export_state("a", 0, 100))
    # NaN and -inf are still refused, and a negative sum.
    for v in (np.nan, -np.inf, -1.0):
        with pytest.raises(embtier.InvalidArgumentError):
            fresh.import_state("a", 1, np.array([[v]], np.float32).view(np.uint8))
    s.close()
    fresh.close()


def test_a_non_strict_load_without_optimizer_state_loads_the_weights(store_dir):
    s, emb = two_tables(store_dir)
    sd = emb.state_dict()
    sd["b.weight"].fill_(0.75)
    state = s.export_state("b", 0, 100).copy()
    del sd["b.optimizer_state"]
    res = emb.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["b.optimizer_state"]
    assert (s.export_rows("b", 0, 100) == 0.75).all()
    assert np.array_equal(s.export_state("b", 0, 100), state)
    # torch hands every module strict=True: the caller's choice is the
    # one that counts, also through a model that holds the module.
    model = torch.nn.Sequential(emb)
    sd = model.state_dict()
    sd["0.b.weight"].fill_(0.5)
    del sd["0.a.weight"]
    a = s.export_rows("a", 0, 100).copy()
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict(sd)
    assert (s.export_rows("b", 0, 100) == 0.75).all(), "a strict load that fails writes nothing"
    res = model.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["0.a.weight"]
    assert (s.export_rows("b", 0, 100) == 0.5).all()
    assert np.array_equal(s.export_rows("a", 0, 100), a)
    s.close()


def test_frozen_tables_are_not_stepped(store_dir):
    s = embtier.Store.create(store_dir, config([{"name": "a", "rows": 10, "dim": 4, "optimizer": sgd(0.1)}]))
    emb = TieredEmbeddingBags(s, ["a"])
    emb.requires_grad_(False)
    w0 = s.export_rows("a", 0, 10).copy()
    i, o = torch.tensor([1, 2]), torch.tensor([0, 1, 2])
    out = emb(i, o)
    assert not out.requires_grad
    # With weights that want a gradient, it flows to them; the rows stay.
    psw = torch.tensor([1.0, 2.0], requires_grad=True)
    emb(i, o, psw).sum().backward()
    assert torch.allclose(psw.grad, torch.from_numpy(w0[[1, 2]].sum(axis=1)))
    assert np.array_equal(s.export_rows("a", 0, 10), w0)
    # Unfrozen, it steps again.
    emb.requires_grad_(True)
    emb(i, o).sum().backward()
    assert not np.array_equal(s.export_rows("a", 0, 10), w0)
    s.close()


def test_a_store_is_not_pickled_or_copied_by_accident(store_dir):
    s = embtier.Store.create(store_dir, config([{"name": "a", "rows": 10, "dim": 4}]))
    model = torch.nn.Sequential(TieredEmbeddingBags(s, ["a"]), torch.nn.Linear(4, 1))
    for what, f in [
        ("pickle", lambda: pickle.dumps(s)),
        ("deepcopy", lambda: copy.deepcopy(model)),
        ("torch.save", lambda: torch.save(model, io.BytesIO())),
    ]:
        with pytest.raises(TypeError) as e:
            f()
        assert isinstance(e.value, embtier.Error), what
        assert "state_dict" in str(e.value) and "Store.open" in str(e.value), str(e.value)
    # The state_dict is the way, and the store is unharmed.
    torch.save(model.state_dict(), io.BytesIO())
    assert s.lookup("a", np.array([1])).shape == (1, 4)
    s.close()


def test_non_strict_is_read_through_wrappers_and_direct_calls(store_dir, monkeypatch):
    """The review of the mend: a load_state_dict wrapped by another
    library, or a loader calling _load_from_state_dict with strict=False
    itself, loaded nothing; a non-strict load did not report the module's
    unexpected keys."""
    import functools

    s, emb = two_tables(store_dir)
    model = torch.nn.Sequential(emb)
    sd = model.state_dict()
    sd["0.a.weight"].fill_(0.125)
    del sd["0.b.optimizer_state"]
    sd["0.bogus"] = torch.zeros(1)
    orig = torch.nn.Module.load_state_dict

    @functools.wraps(orig)
    def wrapped(self, *args, **kwargs):
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", wrapped)
    res = model.load_state_dict(sd, strict=False)
    assert (s.export_rows("a", 0, 100) == 0.125).all(), "the wrapped non-strict load"
    assert res.missing_keys == ["0.b.optimizer_state"]
    assert res.unexpected_keys == ["0.bogus"]
    monkeypatch.undo()
    sd["0.a.weight"].fill_(0.375)
    missing, unexpected, errors = [], [], []
    emb._load_from_state_dict(sd, "0.", {"version": 2}, False, missing, unexpected, errors)
    assert (s.export_rows("a", 0, 100) == 0.375).all(), "a direct strict=False"
    assert missing == ["0.b.optimizer_state"] and not errors
    s.close()


def test_weights_without_a_gradient_cost_no_second_lookup(store_dir):
    s = embtier.Store.create(store_dir, config([{"name": "a", "rows": 10, "dim": 2}]))
    m = TieredEmbeddingBags(s, ["a"])
    i, o = torch.tensor([3, 4]), torch.tensor([0, 2])
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    lookups = lambda: s.stats()["tables"]["a"]["lookups"]  # noqa: E731
    before = lookups()
    with torch.no_grad():
        m(i, o, w)
    assert lookups() - before == 2
    before = lookups()
    m(i, o, w).sum().backward()
    assert lookups() - before == 4  # the forward's rows kept for w's gradient
    s.close()


def test_per_sample_weight_length_errors_count_elements(small_store):
    """The module's error gave `got` as a shape tuple beside an int
    `expected`, and the store's said "(3 ids x dim 1)"."""
    with pytest.raises(embtier.InvalidArgumentError) as e:
        small_store.lookup_pooled(
            "a", np.array([1, 2, 3]), np.array([0, 3]), per_sample_weights=np.ones(2, np.float32)
        )
    assert (e.value.expected, e.value.got) == (3, 2)
    assert "3 ids, one weight each" in str(e.value), str(e.value)
    m = TieredEmbeddingBags(small_store, ["a"])
    with pytest.raises(embtier.InvalidArgumentError) as e:
        m(torch.tensor([1, 2, 3]), torch.tensor([0, 3]), torch.ones(2))
    assert (e.value.expected, e.value.got) == (3, 2)
