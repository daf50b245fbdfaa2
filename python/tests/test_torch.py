"""embtier.torch.TieredEmbeddingBags against a plain PyTorch reference
(nn.EmbeddingBag with the same optimizer written in a few lines), against
FBGEMM's CPU table-batched embedding bags, and across tier configurations.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="embtier.torch needs torch (the README's test command installs it)")

import embtier  # noqa: E402
from conftest import reference_step  # noqa: E402
from embtier.torch import TieredEmbeddingBags  # noqa: E402

TABLES = [("user", 200, 8), ("item", 300, 16)]
B = 32


def optimizer_cfg(kind, lr):
    if kind == "sgd":
        return {"kind": "sgd", "lr": lr}
    return {"kind": "rowwise_adagrad", "lr": lr, "eps": 1e-8}


def make_store(path, kind, lr, tiers="dram", seed=1):
    tables = []
    for name, rows, dim in TABLES:
        t = {
            "name": name,
            "rows": rows,
            "dim": dim,
            "seed": seed,
            "init": {"kind": "uniform", "scale": 0.1},
            "optimizer": optimizer_cfg(kind, lr),
        }
        if tiers == "pinned":
            t["placement"] = "pinned-dram"
        tables.append(t)
    cfg = {"tables": tables}
    if tiers == "tiny":
        cfg["dram"] = {"capacity": 6 * 64, "shards": 1}
        cfg["pmem"] = {"capacity": 10 * 64, "policy": "lru"}
    return embtier.Store.create(str(path), cfg)


def batches(n, seed=0, weights=False):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx, offs = [], [0]
        for _, rows, _ in TABLES:
            for _ in range(B):
                k = int(rng.integers(0, 6))
                idx.extend(rng.integers(0, rows, size=k).tolist())
                offs.append(len(idx))
        w = torch.tensor(rng.standard_normal(len(idx)), dtype=torch.float32) if weights else None
        target = torch.tensor(rng.standard_normal((B, sum(d for _, _, d in TABLES))), dtype=torch.float32)
        out.append((torch.tensor(idx, dtype=torch.int64), torch.tensor(offs, dtype=torch.int64), w, target))
    return out


class Reference(torch.nn.Module):
    """nn.EmbeddingBag per table; SGD or row-wise Adagrad in a few lines."""

    def __init__(self, weights, kind, lr, mode="sum"):
        super().__init__()
        self.bags = torch.nn.ModuleList(
            [torch.nn.EmbeddingBag.from_pretrained(w.clone(), freeze=False, mode=mode) for w in weights]
        )
        self.kind, self.lr = kind, lr
        self.state = [torch.zeros(w.shape[0]) for w in weights]

    def forward(self, indices, offsets, w=None):
        outs = []
        for t, bag in enumerate(self.bags):
            o = offsets[t * B : (t + 1) * B + 1]
            lo, hi = int(o[0]), int(o[-1])
            outs.append(bag(indices[lo:hi], (o - lo)[:-1], per_sample_weights=None if w is None else w[lo:hi]))
        self._last = (indices, offsets)
        return torch.cat(outs, dim=1)

    @torch.no_grad()
    def step(self):
        indices, offsets = self._last
        for t, bag in enumerate(self.bags):
            o = offsets[t * B : (t + 1) * B + 1]
            rows = torch.unique(indices[int(o[0]) : int(o[-1])])
            reference_step(bag.weight, self.state[t], rows, self.kind, self.lr)


def weights_of(store):
    return [torch.from_numpy(store.export_rows(name, 0, rows)) for name, rows, _ in TABLES]


def close(a, b, tol=1e-5):
    a, b = a.detach(), b.detach()
    return torch.allclose(a, b, rtol=tol, atol=tol * max(1.0, float(b.abs().max())))


@pytest.mark.parametrize("kind,lr", [("sgd", 0.05), ("rowwise_adagrad", 0.05)])
@pytest.mark.parametrize("mode,weights", [("sum", False), ("sum", True), ("mean", False)])
def test_against_a_plain_pytorch_reference(tmp_path, kind, lr, mode, weights):
    s = make_store(tmp_path / "s", kind, lr)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES], mode=mode)
    ref = Reference(weights_of(s), kind, lr, mode)
    for step, (idx, off, w, target) in enumerate(batches(60, seed=3, weights=weights)):
        out = m(idx, off, w)
        want = ref(idx, off, w)
        assert out.shape == (B, 24) and out.dtype == torch.float32
        assert close(out, want), f"step {step}: forward"
        loss = ((out - target) ** 2).mean()
        loss_ref = ((want - target) ** 2).mean()
        assert close(loss.detach(), loss_ref.detach()), f"step {step}: loss"
        loss.backward()
        loss_ref.backward()
        ref.step()
    for got, want in zip(weights_of(s), [b.weight.detach() for b in ref.bags]):
        assert close(got, want)
    s.close()


def test_pinned_dram_and_tiny_caches_agree_bit_for_bit(tmp_path):
    mods = []
    for tiers in ("pinned", "tiny"):
        s = make_store(tmp_path / tiers, "rowwise_adagrad", 0.1, tiers=tiers)
        mods.append(TieredEmbeddingBags(s, [n for n, _, _ in TABLES]))
    for idx, off, _, target in batches(40, seed=9):
        outs = [m(idx, off) for m in mods]
        assert torch.equal(outs[0], outs[1])
        for o in outs:
            ((o - target) ** 2).sum().backward()
    for a, b in zip(weights_of(mods[0].store), weights_of(mods[1].store)):
        assert torch.equal(a, b)
    st = mods[1].store.stats()["tables"]["item"]
    assert st["ssd"]["rows_read"] > 0 and st["pmem"]["hits"] > 0, "the tiny tiers were not exercised"


def test_per_sample_weight_gradients(tmp_path):
    s = make_store(tmp_path / "s", "sgd", 0.0)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    ref = Reference(weights_of(s), "sgd", 0.0)
    idx, off, w, target = batches(1, seed=5, weights=True)[0]
    w1 = w.clone().requires_grad_(True)
    w2 = w.clone().requires_grad_(True)
    ((m(idx, off, w1) - target) ** 2).sum().backward()
    ((ref(idx, off, w2) - target) ** 2).sum().backward()
    assert close(w1.grad, w2.grad)


def test_state_dict_streams_tables_out_and_in(tmp_path):
    s = make_store(tmp_path / "a", "sgd", 0.1)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    for idx, off, _, target in batches(5):
        ((m(idx, off) - target) ** 2).sum().backward()
    sd = m.state_dict()
    assert set(sd) == {"user.weight", "item.weight"}
    assert sd["item.weight"].shape == (300, 16)
    s2 = make_store(tmp_path / "b", "sgd", 0.1, seed=2)
    m2 = TieredEmbeddingBags(s2, [n for n, _, _ in TABLES])
    m2.load_state_dict(sd)
    for a, b in zip(weights_of(s), weights_of(s2)):
        assert torch.equal(a, b)
    bad = dict(sd)
    bad["item.weight"] = torch.zeros(3, 16)
    with pytest.raises(RuntimeError):
        m2.load_state_dict(bad)


def test_prefetch_overlaps_and_releases_its_pins(tmp_path):
    s = make_store(tmp_path / "s", "sgd", 0.1, tiers="tiny")
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    data = batches(10, seed=4)
    m.prefetch(data[0][0], data[0][1])
    for i, (idx, off, _, target) in enumerate(data):
        if i + 1 < len(data):
            m.prefetch(data[i + 1][0], data[i + 1][1])
        ((m(idx, off) - target) ** 2).sum().backward()
    assert s.stats()["tables"]["user"]["prefetched"] > 0
    m.release_prefetches()


@pytest.mark.parametrize("bad", ["offsets", "id", "weights"])
def test_a_refused_forward_consumes_its_prefetch(tmp_path, bad):
    """A forward refused for its input consumes the prefetch queued for
    it, whatever was wrong, so that the next forward takes the next
    batch's. Before, bad offsets or weights left it queued and every later
    forward took the batch before's prefetch; a bad id consumed it."""
    s = make_store(tmp_path / "s", "sgd", 0.1, tiers="tiny")
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    (idx, off, _, _), (idx2, off2, _, target2) = batches(2, seed=8)
    m.prefetch(idx, off)
    m.prefetch(idx2, off2)
    with pytest.raises(embtier.Error):
        if bad == "offsets":
            m(idx, off[:-1])
        elif bad == "id":
            m(torch.full_like(idx, 10_000), off)
        else:
            m(idx, off, torch.ones(3))
    # The next forward takes the second batch's prefetch: its rows hit.
    assert len(m._prefetched) == 1, "the refused forward's prefetch is still queued"
    ((m(idx2, off2) - target2) ** 2).sum().backward()
    assert len(m._prefetched) == 0
    m.release_prefetches()


def test_bad_input_to_the_module(tmp_path):
    s = make_store(tmp_path / "s", "sgd", 0.1)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    with pytest.raises(ValueError):
        m(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2, 3]))  # not T * B + 1 offsets for T = 2
    with pytest.raises(IndexError):
        off = torch.arange(2 * B + 1)
        idx = torch.full((2 * B,), 10_000)
        m(idx, off)
    with pytest.raises(KeyError):
        TieredEmbeddingBags(s, ["nope"])
    with pytest.raises(ValueError):
        TieredEmbeddingBags(s, ["user"], mode="median")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_tensors_are_copied_through_the_host(tmp_path):
    s = make_store(tmp_path / "s", "sgd", 0.1)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    idx, off, _, target = batches(1)[0]
    out = m(idx.cuda(), off.cuda())
    assert out.device.type == "cuda"
    ((out - target.cuda()) ** 2).sum().backward()


# --- conformance with FBGEMM ------------------------------------------------


def fbgemm_tbe(kind, lr, weights):
    fb = pytest.importorskip("fbgemm_gpu", reason="FBGEMM's CPU build (fbgemm-gpu-cpu) is not installed")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    del fb
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for _, rows, dim in TABLES],
        optimizer=OptimType.EXACT_SGD if kind == "sgd" else OptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=lr,
        eps=1e-8,
        pooling_mode=PoolingMode.SUM,
    )
    # FBGEMM's CPU TBE starts at zero: copy the store's initial weights in.
    for mine, theirs in zip(weights, tbe.split_embedding_weights()):
        theirs.data.copy_(mine)
    return tbe


@pytest.mark.parametrize("kind,lr", [("sgd", 0.05), ("rowwise_adagrad", 0.05)])
def test_conformance_with_fbgemm_cpu_tbe(tmp_path, kind, lr):
    s = make_store(tmp_path / "s", kind, lr)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    tbe = fbgemm_tbe(kind, lr, weights_of(s))
    for step, (idx, off, _, target) in enumerate(batches(60, seed=11)):
        out = m(idx, off)
        want = tbe(idx, off)
        assert close(out, want.detach()), f"step {step}: forward"
        ((out - target) ** 2).mean().backward()
        ((want - target) ** 2).mean().backward()
    for got, want in zip(weights_of(s), tbe.split_embedding_weights()):
        assert close(got, want.detach())


def test_under_torch_compile_the_module_graph_breaks_and_still_steps(tmp_path):
    s = make_store(tmp_path / "s", "sgd", 0.1)
    m = TieredEmbeddingBags(s, [n for n, _, _ in TABLES])
    ref = make_store(tmp_path / "r", "sgd", 0.1)
    mr = TieredEmbeddingBags(ref, [n for n, _, _ in TABLES])
    lin = torch.nn.Linear(24, 1)

    def loss(mod, idx, off):
        return lin(mod(idx, off)).sum()

    compiled = torch.compile(loss)
    for idx, off, _, _ in batches(3, seed=2):
        compiled(m, idx, off).backward()
        loss(mr, idx, off).backward()
    for a, b in zip(weights_of(s), weights_of(ref)):
        assert close(a, b)


def one_table_store(path, rows=10, dim=2, **tiers):
    cfg = {
        "tables": [
            {"name": "t", "rows": rows, "dim": dim, "init": {"kind": "zeros"}, "optimizer": {"kind": "sgd", "lr": 1.0}}
        ]
    }
    cfg.update(tiers)
    return embtier.Store.create(str(path), cfg)


def test_indices_changed_in_place_before_the_backward_are_refused(tmp_path):
    """A loader that refills its index buffer between the forward and the
    backward: autograd's in-place error, as nn.EmbeddingBag raises, and no
    row stepped (the backward used to step the new batch's rows)."""
    s = one_table_store(tmp_path / "s")
    m = TieredEmbeddingBags(s, ["t"])
    idx, off = torch.tensor([1, 2]), torch.tensor([0, 1, 2])
    out = m(idx, off)
    idx.copy_(torch.tensor([7, 8]))
    with pytest.raises(RuntimeError, match="inplace"):
        out.sum().backward()
    assert not s.lookup("t", np.arange(10, dtype=np.int64)).any()
    # Untouched, the same steps the rows of the forward.
    idx = torch.tensor([1, 2])
    m(idx, off).sum().backward()
    assert s.lookup("t", np.array([1, 2, 7, 8]))[:, 0].tolist() == [-1.0, -1.0, 0.0, 0.0]


def test_float_and_bool_indices_are_a_type_error(tmp_path):
    s = one_table_store(tmp_path / "s")
    m = TieredEmbeddingBags(s, ["t"])
    off = torch.tensor([0, 1])
    for bad in (torch.tensor([1.9]), torch.tensor([True])):
        with pytest.raises(TypeError, match="indices"):
            m(bad, off)
    with pytest.raises(TypeError, match="offsets"):
        m(torch.tensor([1]), torch.tensor([0.0, 1.0]))
    # int32, as nn.EmbeddingBag takes them, is fine.
    assert m(torch.tensor([1], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32)).shape == (1, 2)


def test_forwards_without_a_backward_release_their_prefetch_pins(tmp_path):
    """Evaluation (no graph) and a graph dropped unused release the pins of
    the prefetch they consumed; each backward releases its own batch's."""
    import gc

    s = one_table_store(tmp_path / "s", rows=100_000, dim=16, dram={"capacity": "4MiB", "shards": 1})
    m = TieredEmbeddingBags(s, ["t"])
    rng = np.random.default_rng(0)

    def batch():
        return torch.from_numpy(rng.integers(0, 100_000, 512).astype(np.int64)), torch.arange(0, 513, 4)

    def pinnable():
        before = s.stats()["tables"]["t"]["prefetch_pinned"]
        h = s.prefetch("t", np.unique(batch()[0]))
        h.wait()
        n = s.stats()["tables"]["t"]["prefetch_pinned"] - before
        h.release()
        return n

    fresh = pinnable()
    assert fresh > 400
    nxt = batch()
    m.prefetch(*nxt)
    with torch.no_grad():
        for _ in range(60):
            cur, nxt = nxt, batch()
            m.prefetch(*nxt)
            m(*cur)
    for _ in range(20):  # graphs made and dropped without a backward
        cur, nxt = nxt, batch()
        m.prefetch(*nxt)
        m(*cur).sum()
    gc.collect()
    assert len(m._in_use) == 0
    held = []
    for _ in range(3):  # graphs kept: their pins stay until their backward
        cur, nxt = nxt, batch()
        m.prefetch(*nxt)
        held.append(m(*cur).sum())
    assert len(m._in_use) == 3
    for loss in reversed(held):  # out of order: each releases its own
        loss.backward()
    assert len(m._in_use) == 0
    m.release_prefetches()
    assert pinnable() >= fresh - 5


@pytest.mark.parametrize("kind", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("mode,weights", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_a_table_listed_twice_is_stepped_once_with_the_features_summed(tmp_path, kind, mode, weights):
    """Two features of one table (FBGEMM's ``feature_table_map=[0, 1,
    0]``): as one ``nn.EmbeddingBag`` weight shared by both, each row's
    gradients from the two are summed and it is stepped once. Before,
    each feature stepped the table in turn: row-wise Adagrad moved a row
    both features used 1.7x as far as one step with the summed gradient.
    (FBGEMM's CPU TBE stepped the features of [0, 1, 0] in turn too, so
    the reference is autograd over a shared weight.)"""
    s = make_store(tmp_path / "s", kind, 0.05)
    m = TieredEmbeddingBags(s, ["user", "item", "user"], mode=mode)
    ws = weights_of(s)
    bags = [torch.nn.EmbeddingBag.from_pretrained(w.clone(), freeze=False, mode=mode) for w in ws]
    state = [torch.zeros(w.shape[0]) for w in ws]
    feature_table = [0, 1, 0]
    rng = np.random.default_rng(5)
    for step in range(30):
        idx, offs = [], [0]
        for t in feature_table:
            for _ in range(B):
                # Few rows, so that the two features share many.
                idx.extend(rng.integers(0, 20, size=int(rng.integers(0, 4))).tolist())
                offs.append(len(idx))
        idx, off = torch.tensor(idx), torch.tensor(offs)
        w = torch.tensor(rng.random(len(idx)), dtype=torch.float32) if weights else None
        target = torch.tensor(rng.standard_normal((B, 32)), dtype=torch.float32)
        outs = []
        for f, t in enumerate(feature_table):
            o = off[f * B : (f + 1) * B + 1]
            lo, hi = int(o[0]), int(o[-1])
            pw = None if w is None else w[lo:hi]
            outs.append(bags[t](idx[lo:hi], (o - lo)[:-1], per_sample_weights=pw))
        want = torch.cat(outs, dim=1)
        out = m(idx, off, w)
        assert close(out, want.detach()), f"step {step}: forward"
        ((out - target) ** 2).mean().backward()
        ((want - target) ** 2).mean().backward()
        with torch.no_grad():
            for t, bag in enumerate(bags):
                used = [idx[int(off[f * B]) : int(off[(f + 1) * B])] for f, ft in enumerate(feature_table) if ft == t]
                rows = torch.unique(torch.cat(used))
                if bag.weight.grad is None:
                    continue
                reference_step(bag.weight, state[t], rows, kind, 0.05)
    for got, bag in zip(weights_of(s), bags):
        assert close(got, bag.weight.detach())
