import os
import sys

import numpy as np
import pytest

import embtier


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
