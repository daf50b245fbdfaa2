import os
import sys

import numpy as np
import pytest

import embtier


def reference_step(weight, state, rows, kind, lr, eps=1e-8):
    """The reference optimizer of the module tests, in a few lines: SGD or
    row-wise Adagrad (FBGEMM's) on ``rows`` of ``weight`` (a torch
    Parameter with a dense gradient; ``state`` one float a row), then the
    gradient cleared. Call it under ``torch.no_grad()``."""
    g = weight.grad[rows]
    if kind == "sgd":
        weight[rows] -= lr * g
    else:
        state[rows] += (g * g).mean(dim=1)
        weight[rows] -= lr * g / (state[rows].sqrt()[:, None] + eps)
    weight.grad = None


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


def config(tables, **tiers):
    """A store.toml-shaped dict."""
    cfg = {"tables": tables}
    cfg.update(tiers)
    return cfg


@pytest.fixture
def small_store(store_dir):
    s = embtier.Store.create(
        store_dir,
        config(
            [
                {"name": "a", "rows": 1000, "dim": 8, "init": {"kind": "uniform", "scale": 0.5}},
                {"name": "b", "rows": 50, "dim": 3, "init": {"kind": "zeros"}},
            ]
        ),
    )
    yield s
    s.close()


def ids(*v):
    return np.array(v, dtype=np.int64)
