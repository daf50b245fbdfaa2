#!/usr/bin/env bash
# Every test: the Rust suite, then the Python suite (the binding and the
# PyTorch module, against numpy, PyTorch and FBGEMM's CPU TBE). Creates a
# git-ignored virtual environment in .venv (reused when it is there) with
# the pinned torch / fbgemm-gpu-cpu pair, builds and installs the package
# from ./python into it. .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "$0")"
cargo test --locked --features embtier/deadlock-detection
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch 2.14.1 is the version fbgemm-gpu-cpu 1.9.0 is built for (it fails
# to load against 2.15); the CPU build of FBGEMM, never fbgemm-gpu (CUDA).
.venv/bin/python -m pip install -q "torch==2.14.1" "fbgemm-gpu-cpu==1.9.0" "numpy>=1.21" "pytest>=7" "maturin>=1.5,<2"
.venv/bin/python -m pip install -q --force-reinstall --no-deps ./python
.venv/bin/python -m pytest -q python/tests
