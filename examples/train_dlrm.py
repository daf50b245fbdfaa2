#!/usr/bin/env python3
"""Train a small DLRM whose embedding tables live in embtier.

The model (Naumov et al., 2019): a bottom MLP over the dense features, one
embedding bag per categorical feature (all in one
``embtier.torch.TieredEmbeddingBags``, row-wise Adagrad fused into the
store), pairwise dot interactions between the bottom MLP's output and the
embeddings, and a top MLP to a click logit. The next batch's rows are
prefetched while the current batch computes.

Data: ``../shared/traces/criteo-train-head1000.tsv`` (the first 999 lines
of Criteo's ``train.txt``) when it is there, else synthetic data with a
planted signal (``--synthetic`` forces it). Prints the mean loss of each
epoch; the loss falls.

    python examples/train_dlrm.py --epochs 5
    python examples/train_dlrm.py --tiny    # tiny DRAM and PMem caches over SSD
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib

import numpy as np
import torch
from torch import nn

import embtier
from embtier.torch import TieredEmbeddingBags

CRITEO = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces", "criteo-train-head1000.tsv")
DENSE, SPARSE = 13, 26


def load_criteo(path: str, rows_per_table: int):
    """Labels, log-scaled dense features, and categorical ids hashed into
    ``rows_per_table`` rows (a missing value is row 0)."""
    labels, dense, sparse = [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            # Trailing empty (missing) categorical fields are cut off in
            # some lines of the sample: pad them back.
            if not 1 + DENSE <= len(cols) <= 1 + DENSE + SPARSE:
                sys.exit(f"{path}: line {n}: expected {1 + DENSE + SPARSE} columns, got {len(cols)}")
            cols += [""] * (1 + DENSE + SPARSE - len(cols))
            labels.append(float(cols[0]))
            dense.append([np.log1p(max(0.0, float(x))) if x else 0.0 for x in cols[1 : 1 + DENSE]])
            sparse.append(
                [1 + zlib.crc32(c.encode()) % (rows_per_table - 1) if c else 0 for c in cols[1 + DENSE :]]
            )
    return (
        np.array(labels, dtype=np.float32),
        np.array(dense, dtype=np.float32),
        np.array(sparse, dtype=np.int64),
    )


def synthetic(n: int, rows_per_table: int, seed: int = 0):
    """Zipf-distributed ids; the click probability depends on a hidden
    per-row score of three features and on two dense features."""
    rng = np.random.default_rng(seed)
    sparse = np.minimum(rng.zipf(1.2, size=(n, SPARSE)), rows_per_table) - 1
    dense = rng.standard_normal((n, DENSE)).astype(np.float32)
    score = rng.standard_normal((SPARSE, rows_per_table))
    logit = score[0, sparse[:, 0]] + score[1, sparse[:, 1]] - score[2, sparse[:, 2]] + dense[:, 0] - dense[:, 1]
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
    return labels, dense, sparse.astype(np.int64)


def mlp(sizes):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    def __init__(self, bags: TieredEmbeddingBags, dim: int):
        super().__init__()
        self.bags, self.dim = bags, dim
        self.bottom = mlp([DENSE, 64, dim])
        f = SPARSE + 1
        self.top = mlp([dim + f * (f - 1) // 2, 64, 1])
        self.iu = torch.triu_indices(f, f, offset=1)

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)  # (B, dim)
        e = self.bags(indices, offsets).view(-1, SPARSE, self.dim)  # (B, 26, dim)
        z = torch.cat([x[:, None, :], e], dim=1)  # (B, 27, dim)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def tbe_batch(sparse: np.ndarray):
    """One id per bag: FBGEMM's table-major layout (table t's bag b is the
    b-th sample's feature t)."""
    b = sparse.shape[0]
    indices = torch.from_numpy(np.ascontiguousarray(sparse.T).reshape(-1))
    offsets = torch.arange(SPARSE * b + 1, dtype=torch.int64)
    return indices, offsets


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--rows", type=int, default=20_000, help="rows per table (ids are hashed into them)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--synthetic", action="store_true", help="synthetic data even when the Criteo sample is there")
    p.add_argument("--samples", type=int, default=4096, help="synthetic samples")
    p.add_argument("--tiny", action="store_true", help="tiny DRAM and PMem caches, so rows go to SSD")
    p.add_argument("--store", help="store directory (default: a temporary one)")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or args.dim < 1 or args.rows < 2:
        p.error("--epochs, --batch, --dim must be at least 1 and --rows at least 2")

    torch.manual_seed(0)
    if not args.synthetic and os.path.exists(CRITEO):
        labels, dense, sparse = load_criteo(CRITEO, args.rows)
        source = f"Criteo sample ({len(labels)} rows)"
    else:
        labels, dense, sparse = synthetic(args.samples, args.rows)
        source = f"synthetic data with a planted signal ({len(labels)} rows)"

    tmp = None
    path = args.store
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "store")
    row_bytes = args.dim * 4 + 4  # weights and the row-wise Adagrad state
    cfg = {
        "tables": [
            {
                "name": f"C{t + 1}",
                "rows": args.rows,
                "dim": args.dim,
                "seed": t,
                "init": {"kind": "uniform", "scale": 0.05},
                "optimizer": {"kind": "rowwise_adagrad", "lr": args.lr},
            }
            for t in range(SPARSE)
        ],
        "dram": {"capacity": (64 if args.tiny else 4096) * row_bytes * SPARSE},
    }
    if args.tiny:
        cfg["pmem"] = {"capacity": 128 * row_bytes * SPARSE, "policy": "lru"}
    store = embtier.Store.create(path, cfg)
    bags = TieredEmbeddingBags(store, [f"C{t + 1}" for t in range(SPARSE)])
    model = DLRM(bags, args.dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)  # the MLPs; the tables step in the store
    loss_fn = nn.BCEWithLogitsLoss()
    print(f"DLRM over {SPARSE} embtier tables of {args.rows} x {args.dim}; {source}")

    n = len(labels)
    batches = [(i, min(i + args.batch, n)) for i in range(0, n, args.batch)]
    losses = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        total, count = 0.0, 0
        order = np.random.default_rng(epoch).permutation(len(batches))
        first = batches[order[0]]
        bags.prefetch(*tbe_batch(sparse[first[0] : first[1]]))
        for k, bi in enumerate(order):
            lo, hi = batches[bi]
            if k + 1 < len(order):  # the next batch's rows load while this one computes
                nlo, nhi = batches[order[k + 1]]
                bags.prefetch(*tbe_batch(sparse[nlo:nhi]))
            indices, offsets = tbe_batch(sparse[lo:hi])
            logit = model(torch.from_numpy(dense[lo:hi]), indices, offsets)
            loss = loss_fn(logit, torch.from_numpy(labels[lo:hi]))
            opt.zero_grad()
            loss.backward()  # the embedding tables' Adagrad runs in the store here
            opt.step()
            total += float(loss.detach()) * (hi - lo)
            count += hi - lo
        losses.append(total / count)
        print(f"epoch {epoch + 1}: loss {losses[-1]:.4f} ({time.perf_counter() - t0:.2f} s)")
    st = store.stats()
    hits = sum(t["dram"]["hits"] for t in st["tables"].values())
    looks = sum(t["dram"]["lookups"] for t in st["tables"].values())
    print(f"DRAM hit ratio {hits / max(1, looks):.3f}; loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    store.close()
    if tmp is not None:
        tmp.cleanup()
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
