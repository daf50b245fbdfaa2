#!/usr/bin/env bash
# Every test: the Rust suite, then the Python suite (the binding and the
# PyTorch module, against numpy, PyTorch and FBGEMM's CPU TBE). Creates a
# git-ignored virtual environment in .venv (reused when it is there) with
# the pinned torch / fbgemm-gpu-cpu pair, builds and installs the package
# from ./python into it. .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "$0")"
# Disk: the PyTorch wheels with their CUDA libraries take 5.5 GB installed
# and about 3 GB more while pip holds the downloads. Keep the Rust side
# small beside them: no incremental state (1.1 GB in a clean clone) and
# line tables instead of full debug info (backtraces keep file and line).
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
cargo test --locked --features embtier/deadlock-detection
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
# pip install, retried whole: torch and its CUDA libraries are about 5 GB,
# and a download cut off mid-way (pip's own resume can stall at the same
# byte) must not fail the run.
pip_install() {
  local attempt
  for attempt in 1 2 3 4 5; do
    if .venv/bin/python -m pip install -q --retries 10 "$@"; then
      return 0
    fi
    echo "test.sh: pip install $* failed (attempt $attempt of 5); retrying in $((attempt * 15)) s" >&2
    sleep $((attempt * 15))
  done
  echo "test.sh: pip install $* failed 5 times; the Python suite cannot run" >&2
  return 1
}
pip_install --upgrade pip
# A full disk fails pip with a bare "No space left on device" after the
# download; say up front what the install needs, and where it goes.
need_gb=9
free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if ! .venv/bin/python -m pip show -q torch >/dev/null 2>&1 && [ "$free_gb" -lt "$need_gb" ]; then
  echo "test.sh: $free_gb GiB free under $(pwd); torch with its CUDA libraries needs about $need_gb GiB more (5.5 installed, about 3 for the downloads while it installs)" >&2
fi
# torch 2.14.1 is the version fbgemm-gpu-cpu 1.9.0 is built for (it fails
# to load against 2.15); the CPU build of FBGEMM, never fbgemm-gpu (CUDA).
# --no-cache-dir: with its cache pip keeps a second copy of every wheel
# (about 3 GB more at the install's peak, and kept after it).
pip_install --no-cache-dir "torch==2.14.1" "fbgemm-gpu-cpu==1.9.0" "numpy>=1.21" "pytest>=7" "maturin>=1.5,<2"
.venv/bin/python -m pip install -q --force-reinstall --no-deps ./python
.venv/bin/python -m pytest -q python/tests
