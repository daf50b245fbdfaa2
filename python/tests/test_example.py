"""examples/train_dlrm.py runs, and its loss falls (it exits 1 otherwise)."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the example needs torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "train_dlrm.py")
CRITEO = os.path.join(ROOT, "..", "shared", "traces", "criteo-train-head1000.tsv")


def run(*args):
    r = subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    losses = [float(x) for x in re.findall(r"epoch \d+: loss ([0-9.]+)", r.stdout)]
    assert len(losses) >= 2 and losses[-1] < losses[0], r.stdout
    return r.stdout


def test_synthetic_with_tiny_caches():
    out = run("--synthetic", "--samples", "1024", "--epochs", "3", "--tiny")
    assert "synthetic" in out


def test_criteo_sample():
    if not os.path.exists(CRITEO):
        pytest.skip(f"{CRITEO} is absent (the shared traces are not beside this checkout)")
    out = run("--epochs", "3")
    assert re.search(r"Criteo sample \(\d+ rows\)", out), out
