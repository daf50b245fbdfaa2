"""TieredEmbeddingBags' pooling modes and index conventions beyond FBGEMM's
sum and mean, each held to PyTorch's own module as the reference:

- ``mode="max"`` against ``nn.EmbeddingBag(mode="max")``;
- ``padding_idx`` against ``nn.EmbeddingBag(padding_idx=...)`` in every
  pooled mode, per-sample weights and their gradients included;
- ``include_last_offset=False`` (``T * B`` offsets, the bags' starts)
  against the default ``T * B + 1``;
- ``mode="none"`` (FBGEMM's PoolingMode.NONE: a row per index) against
  ``nn.Embedding``.

Each reference runs the same optimizer (SGD or row-wise Adagrad) in a few
lines over the weights' dense gradient, so the store's fused step is
checked with the forward.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="embtier.torch needs torch (the README's test command installs it)")

import embtier  # noqa: E402
from conftest import reference_step  # noqa: E402
from embtier.torch import TieredEmbeddingBags  # noqa: E402

B = 16


def make_store(path, tables, kind, lr, tiny=False):
    cfg = {
        "tables": [
            {
                "name": name,
                "rows": rows,
                "dim": dim,
                "seed": 7,
                "init": {"kind": "uniform", "scale": 0.1},
                "optimizer": {"kind": "sgd", "lr": lr}
                if kind == "sgd"
                else {"kind": "rowwise_adagrad", "lr": lr, "eps": 1e-8},
            }
            for name, rows, dim in tables
        ]
    }
    if tiny:
        # Rows spill to PMem and SSD: the modes' lookups and steps go
        # through every tier.
        cfg["dram"] = {"capacity": 6 * 64, "shards": 1}
        cfg["pmem"] = {"capacity": 10 * 64, "policy": "lru"}
    return embtier.Store.create(str(path), cfg)


def weights_of(store, tables):
    return [torch.from_numpy(store.export_rows(name, 0, rows)) for name, rows, _ in tables]


def make_batches(tables, n, seed, pad=None, weights=False):
    """``n`` batches in TBE layout; with ``pad`` (a row per table), a third
    of the indices are that table's pad, so that some bags hold only pads."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx, offs = [], [0]
        for t, (_, rows, _) in enumerate(tables):
            for _ in range(B):
                k = int(rng.integers(0, 6))
                ids = rng.integers(0, rows, size=k)
                if pad is not None:
                    ids = np.where(rng.random(k) < 0.33, pad[t], ids)
                idx.extend(ids.tolist())
                offs.append(len(idx))
        w = torch.tensor(rng.standard_normal(len(idx)), dtype=torch.float32) if weights else None
        out.append((torch.tensor(idx, dtype=torch.int64), torch.tensor(offs, dtype=torch.int64), w))
    return out


class Reference:
    """One nn.EmbeddingBag (or nn.Embedding for mode "none") per table, and
    SGD or row-wise Adagrad over the rows a batch touched."""

    def __init__(self, weights, kind, lr, mode, padding_idx=None):
        self.mode, self.kind, self.lr = mode, kind, lr
        if mode == "none":
            self.mods = [
                torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, padding_idx=padding_idx)
                for w in weights
            ]
        else:
            self.mods = [
                torch.nn.EmbeddingBag.from_pretrained(w.clone(), freeze=False, mode=mode, padding_idx=padding_idx)
                for w in weights
            ]
        self.pads = [None if padding_idx is None else padding_idx % w.shape[0] for w in weights]
        self.state = [torch.zeros(w.shape[0]) for w in weights]

    def __call__(self, indices, offsets, w=None):
        outs, self.parts = [], []
        for t, mod in enumerate(self.mods):
            o = offsets[t * B : (t + 1) * B + 1]
            lo, hi = int(o[0]), int(o[-1])
            self.parts.append(indices[lo:hi])
            if self.mode == "none":
                y = mod(indices[lo:hi])
                if self.pads[t] is not None:
                    # A pad's row is zeros (nn.Embedding's padding row, which
                    # its constructor zeroes and no step changes).
                    y = y * (indices[lo:hi] != self.pads[t])[:, None]
                outs.append(y)
            else:
                outs.append(mod(indices[lo:hi], (o - lo)[:-1], per_sample_weights=None if w is None else w[lo:hi]))
        return torch.cat(outs, dim=0 if self.mode == "none" else 1)

    @torch.no_grad()
    def step(self):
        for t, mod in enumerate(self.mods):
            rows = torch.unique(self.parts[t])
            if self.pads[t] is not None:
                rows = rows[rows != self.pads[t]]
            reference_step(mod.weight, self.state[t], rows, self.kind, self.lr)

    def weights(self):
        return [m.weight.detach() for m in self.mods]


def close(a, b, tol=1e-5):
    a, b = a.detach(), b.detach()
    return torch.allclose(a, b, rtol=tol, atol=tol * max(1.0, float(b.abs().max())))


TABLES = [("user", 50, 8), ("item", 80, 4)]


def train_both(tmp_path, tables, kind, mode, steps, padding_idx=None, weights=False, tiny=False, seed=3):
    s = make_store(tmp_path / "s", tables, kind, 0.05, tiny=tiny)
    m = TieredEmbeddingBags(s, [n for n, _, _ in tables], mode=mode, padding_idx=padding_idx)
    ref = Reference(weights_of(s, tables), kind, 0.05, mode, padding_idx)
    pads = None if padding_idx is None else [padding_idx % rows for _, rows, _ in tables]
    rng = np.random.default_rng(seed + 1)
    for step, (idx, off, w) in enumerate(make_batches(tables, steps, seed, pads, weights)):
        w1 = None if w is None else w.clone().requires_grad_(True)
        w2 = None if w is None else w.clone().requires_grad_(True)
        out = m(idx, off, w1)
        want = ref(idx, off, w2)
        assert out.shape == want.shape, f"step {step}: shape"
        assert close(out, want), f"step {step}: forward"
        target = torch.tensor(rng.standard_normal(tuple(out.shape)), dtype=torch.float32)
        ((out - target) ** 2).sum().backward()
        ((want - target) ** 2).sum().backward()
        if w is not None:
            assert close(w1.grad, w2.grad), f"step {step}: per-sample weights' gradient"
        ref.step()
    for t, (got, want) in enumerate(zip(weights_of(s, tables), ref.weights())):
        assert close(got, want), f"table {t}: weights after {steps} steps"
    return s


@pytest.mark.parametrize("kind", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("tiny", [False, True])
def test_max_mode_against_nn_embedding_bag(tmp_path, kind, tiny):
    s = train_both(tmp_path, TABLES, kind, "max", 40, tiny=tiny)
    if tiny:
        st = s.stats()["tables"]["item"]
        assert st["ssd"]["rows_read"] > 0, "the tiny tiers were not exercised"


@pytest.mark.parametrize("mode,weights", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
@pytest.mark.parametrize("padding_idx", [0, -1])
def test_padding_idx_against_nn_embedding_bag(tmp_path, mode, weights, padding_idx):
    s = train_both(tmp_path, TABLES, "rowwise_adagrad", mode, 30, padding_idx=padding_idx, weights=weights)
    # The pad rows were never stepped: they hold their initial values.
    fresh = make_store(tmp_path / "fresh", TABLES, "rowwise_adagrad", 0.05)
    for name, rows, _ in TABLES:
        p = padding_idx % rows
        assert np.array_equal(s.lookup(name, np.array([p])), fresh.lookup(name, np.array([p])))


def test_mode_none_against_nn_embedding(tmp_path):
    same_dim = [("user", 50, 8), ("item", 80, 8)]
    train_both(tmp_path, same_dim, "rowwise_adagrad", "none", 30)


def test_mode_none_with_padding_gives_zero_rows_and_steps_no_pad(tmp_path):
    same_dim = [("user", 50, 8), ("item", 80, 8)]
    train_both(tmp_path, same_dim, "sgd", "none", 20, padding_idx=3)


def test_include_last_offset_false_is_the_same_batch(tmp_path):
    """T * B offsets (the bags' starts, as nn.EmbeddingBag takes them by
    default) against T * B + 1: the same outputs and the same weights, bit
    for bit, through the same steps."""
    names = [n for n, _, _ in TABLES]
    a = make_store(tmp_path / "a", TABLES, "rowwise_adagrad", 0.05)
    b = make_store(tmp_path / "b", TABLES, "rowwise_adagrad", 0.05)
    ma = TieredEmbeddingBags(a, names, mode="mean")
    mb = TieredEmbeddingBags(b, names, mode="mean", include_last_offset=False)
    assert "include_last_offset=False" in repr(mb)
    rng = np.random.default_rng(0)
    for idx, off, _ in make_batches(TABLES, 10, seed=5):
        mb.prefetch(idx, off[:-1])
        ya, yb = ma(idx, off), mb(idx, off[:-1])
        assert torch.equal(ya, yb)
        g = torch.tensor(rng.standard_normal(tuple(ya.shape)), dtype=torch.float32)
        (ya * g).sum().backward()
        (yb * g).sum().backward()
    for x, y in zip(weights_of(a, TABLES), weights_of(b, TABLES)):
        assert torch.equal(x, y)
    # A last offset given anyway is one too many.
    idx, off, _ = make_batches(TABLES, 1, seed=6)[0]
    with pytest.raises(embtier.InvalidArgumentError) as e:
        mb(idx, off)
    assert e.value.argument == "offsets" and e.value.got == off.numel()


def test_bad_modes_and_pads_are_refused_with_their_facts(tmp_path):
    s = make_store(tmp_path / "s", TABLES, "sgd", 0.1)
    names = [n for n, _, _ in TABLES]
    with pytest.raises(embtier.InvalidArgumentError) as e:
        TieredEmbeddingBags(s, names, mode="median")
    assert e.value.argument == "mode" and e.value.got == "median"
    assert "'max'" in str(e.value) and "'none'" in str(e.value)
    with pytest.raises(embtier.InvalidArgumentError) as e:
        TieredEmbeddingBags(s, names, mode="none")  # dims 8 and 4
    assert e.value.argument == "mode" and e.value.got == [8, 4]
    with pytest.raises(embtier.InvalidArgumentError) as e:
        TieredEmbeddingBags(s, names, padding_idx=60)  # user has 50 rows
    assert e.value.argument == "padding_idx" and e.value.table == "user" and e.value.got == 60
    with pytest.raises(embtier.InvalidArgumentError):
        TieredEmbeddingBags(s, names, padding_idx=-51)
    with pytest.raises(TypeError):
        TieredEmbeddingBags(s, names, padding_idx=True)
    with pytest.raises(TypeError):
        TieredEmbeddingBags(s, names, padding_idx=1.0)
    with pytest.raises(embtier.InvalidArgumentError, match="per_sample_weights"):
        m = TieredEmbeddingBags(s, names, mode="max")
        m(torch.tensor([1]), torch.tensor([0] * (2 * B) + [1]), torch.tensor([1.0]))
    # An embedding_dim for each mode.
    assert TieredEmbeddingBags(s, names, mode="max").embedding_dim == 12
    assert TieredEmbeddingBags(s, ["user"], mode="none").embedding_dim == 8


def test_a_batch_of_only_pads_pools_to_zeros_and_steps_nothing(tmp_path):
    # With weight decay, a pad stepped with a zero gradient would still
    # move: so this fails if pads reach the step at all.
    s = embtier.Store.create(
        str(tmp_path / "s"),
        {
            "tables": [
                {"name": n, "rows": r, "dim": d, "optimizer": {"kind": "sgd", "lr": 1.0, "weight_decay": 0.5}}
                for n, r, d in TABLES
            ]
        },
    )
    before = weights_of(s, TABLES)
    for mode in ("sum", "mean", "max"):
        m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES], mode=mode, padding_idx=2)
        idx = torch.full((10,), 2)
        off = torch.tensor([0] * B + [5] * B + [10])
        m.prefetch(idx, off)
        y = m(idx, off)
        assert y.shape == (B, 12) and not y.any()
        y.sum().backward()
    for x, y in zip(before, weights_of(s, TABLES)):
        assert torch.equal(x, y)


@pytest.mark.parametrize("kind", ["sgd", "rowwise_adagrad"])
def test_mode_none_conforms_to_fbgemm_pooling_mode_none(tmp_path, kind):
    """FBGEMM's CPU TBE with PoolingMode.NONE, the same batches: the same
    rows out and the same weights after the steps."""
    pytest.importorskip("fbgemm_gpu", reason="FBGEMM's CPU build (fbgemm-gpu-cpu) is not installed")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    same_dim = [("user", 50, 8), ("item", 80, 8)]
    s = make_store(tmp_path / "s", same_dim, kind, 0.05)
    m = TieredEmbeddingBags(s, [n for n, _, _ in same_dim], mode="none")
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for _, rows, dim in same_dim],
        optimizer=OptimType.EXACT_SGD if kind == "sgd" else OptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=0.05,
        eps=1e-8,
        pooling_mode=PoolingMode.NONE,
    )
    for mine, theirs in zip(weights_of(s, same_dim), tbe.split_embedding_weights()):
        theirs.data.copy_(mine)
    rng = np.random.default_rng(12)
    for step, (idx, off, _) in enumerate(make_batches(same_dim, 30, seed=13)):
        out, want = m(idx, off), tbe(idx, off)
        assert close(out, want), f"step {step}: forward"
        target = torch.tensor(rng.standard_normal(tuple(out.shape)), dtype=torch.float32)
        ((out - target) ** 2).sum().backward()
        ((want - target) ** 2).sum().backward()
    for got, want in zip(weights_of(s, same_dim), tbe.split_embedding_weights()):
        assert close(got, want)


# --- a review's findings (2026-12-07) ---------------------------------------


def two_sgd_tables(path):
    return embtier.Store.create(
        str(path),
        {
            "tables": [
                {"name": n, "rows": 10, "dim": 4, "init": {"kind": "uniform", "scale": 0.1}, "optimizer": {"kind": "sgd", "lr": 0.1}}
                for n in ("a", "b")
            ]
        },
    )


def T(*a):
    return torch.tensor(a, dtype=torch.int64)


@pytest.mark.parametrize("mode", ["sum", "max", "none"])
def test_a_backward_that_fails_steps_no_table(tmp_path, mode):
    """A gradient the store refuses in the second table: the first table
    is not stepped either (the store is durable; a half-applied step would
    stay)."""
    s = two_sgd_tables(tmp_path / "s")
    m = TieredEmbeddingBags(s, ["a", "b"], mode=mode)
    before = [s.export_rows(n, 0, 10).copy() for n in ("a", "b")]
    y = m(T(1, 2), T(0, 1, 2))
    g = torch.ones_like(y)
    if mode == "none":
        g[1] = float("inf")  # index 1 is table b's
    else:
        g[:, 4:] = float("inf")
    with pytest.raises(embtier.InvalidArgumentError):
        y.backward(g)
    for n, b in zip(("a", "b"), before):
        assert np.array_equal(s.export_rows(n, 0, 10), b), f"table {n} was stepped"


@pytest.mark.parametrize("mode", ["sum", "mean", "max", "none"])
@pytest.mark.parametrize("pad", [None, 9])
def test_offsets_that_decrease_inside_a_table_are_refused_in_every_mode(tmp_path, mode, pad):
    s = two_sgd_tables(tmp_path / "s")
    m = TieredEmbeddingBags(s, ["a"], mode=mode, padding_idx=pad)
    for idx, off, at in ((T(1, 2, 3, 4), T(0, 3, 1, 4), 2), (T(1, 9, 9, 4), T(0, 3, 2, 4), 2), (T(1, 9, 3), T(0, 6, 3), 2)):
        with pytest.raises(embtier.InvalidArgumentError) as e:
            m(idx, off)
        assert e.value.argument == "offsets" and e.value.at == at, str(e.value)
    m = TieredEmbeddingBags(s, ["a"], mode=mode, padding_idx=pad, include_last_offset=False)
    with pytest.raises(embtier.InvalidArgumentError) as e:
        m(T(1, 2, 3), T(0, 5))  # a start past the indices' end
    assert e.value.at == 1 and e.value.got == 5 and "past the end" in str(e.value)


def test_an_empty_batch_without_the_last_offset(tmp_path):
    s = two_sgd_tables(tmp_path / "s")
    e = torch.empty(0, dtype=torch.int64)
    assert torch.nn.EmbeddingBag(10, 4)(e, e).shape == (0, 4)
    m = TieredEmbeddingBags(s, ["a", "b"], include_last_offset=False)
    m.prefetch(e, e)
    y = m(e, e)
    assert y.shape == (0, 8)
    y.sum().backward()
    with pytest.raises(embtier.InvalidArgumentError, match="with 2 indices"):
        m(T(1, 2), e)


def test_settings_changed_after_construction_take_effect_and_are_checked(tmp_path):
    s = two_sgd_tables(tmp_path / "s")
    m = TieredEmbeddingBags(s, ["a", "b"], padding_idx=np.int64(1))  # numpy ints, as nn takes them
    assert m.padding_idx == 1 and type(m.padding_idx) is int
    y = m(T(1, 1), T(0, 1, 2))
    assert not y.any()  # both bags hold only the pad
    m.padding_idx = None
    assert m(T(1, 1), T(0, 1, 2)).any()
    with pytest.raises(embtier.InvalidArgumentError):
        m.padding_idx = 10
    with pytest.raises(embtier.InvalidArgumentError):
        m.mode = "median"
    # The backward steps by the forward's mode, whatever the mode is by then.
    ref = two_sgd_tables(tmp_path / "r")
    mr = TieredEmbeddingBags(ref, ["a", "b"], mode="max")
    m.mode = "max"
    idx, off = T(1, 2, 3, 4), T(0, 2, 4)
    y, yr = m(idx, off), mr(idx, off)
    m.mode = "sum"
    g = torch.arange(8, dtype=torch.float32).reshape(1, 8)
    y.backward(g)
    yr.backward(g)
    for n in ("a", "b"):
        assert np.array_equal(s.export_rows(n, 0, 10), ref.export_rows(n, 0, 10))
