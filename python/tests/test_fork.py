"""A store used from a process forked after it was opened (a DataLoader
worker with the fork start method, ``os.fork``): the copy refuses every
call with ``ForkedError`` and its close does nothing, and the opener's
store goes on untouched. Before, a worker's lookup took the opener's
io_uring completions (both hung, or the worker panicked), and a close or
collection in the worker panicked joining threads it did not have."""

import os
import signal
import sys

import numpy as np
import pytest
import torch

import embtier
from conftest import config

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")

ROWS, DIM = 20_000, 16


def make_store(store_dir):
    # A small DRAM tier: most lookups read the data file (io_uring where
    # the kernel allows it).
    s = embtier.Store.create(
        store_dir,
        config([{"name": "t", "rows": ROWS, "dim": DIM}], dram={"capacity": "64KiB"}),
    )
    ids = np.arange(ROWS, dtype=np.uint64)
    vals = (np.arange(ROWS * DIM, dtype=np.float32) * 0.125).reshape(ROWS, DIM)
    s.update("t", ids, vals)
    s.checkpoint()
    return s, vals


def check(s, vals):
    ids = np.arange(0, ROWS, 3, dtype=np.uint64)
    assert np.array_equal(s.lookup("t", ids), vals[ids.astype(np.int64)])


def run_child(body):
    """Fork; the child runs `body` and exits 0 when it returns True, 1
    when False, 2 on any other exception. Returns the child's status, or
    None when it had to be killed after 60 s (a hang)."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if body() else 1
        except BaseException:  # noqa: BLE001 - the exit status says it
            code = 2
        finally:
            os._exit(code)
    for _ in range(3000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        import time

        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_a_forked_child_is_refused_and_the_parent_goes_on(store_dir):
    s, vals = make_store(store_dir)
    parent = os.getpid()

    def child():
        try:
            s.lookup("t", np.arange(256, dtype=np.uint64))
            return False
        except embtier.ForkedError as e:
            ok = e.pid == parent and isinstance(e, RuntimeError)
        try:
            s.checkpoint()
            return False
        except embtier.ForkedError:
            pass
        try:
            s.stats()  # took shard locks a parent thread may have held
            return False
        except embtier.ForkedError:
            pass
        s.close()  # lets go of the copy, without a panic
        return ok

    assert run_child(child) == 0
    check(s, vals)
    s.update("t", np.arange(4, dtype=np.uint64), vals[:4] + 1)
    s.checkpoint()
    s.close()
    with embtier.Store.open(store_dir) as again:
        assert np.array_equal(again.lookup("t", np.arange(4, dtype=np.uint64)), vals[:4] + 1)


def test_a_store_collected_in_a_forked_child_does_nothing(store_dir):
    s, vals = make_store(store_dir)
    holder = {"s": s}

    def child():
        del holder["s"]
        import gc

        gc.collect()
        return True

    assert run_child(child) == 0
    check(s, vals)
    s.close()


class Rows(torch.utils.data.Dataset):
    """A dataset that (wrongly) reads the trainer's store in its workers."""

    def __init__(self, store):
        self.store = store

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.from_numpy(self.store.lookup("t", np.array([i], dtype=np.uint64)))


def test_a_dataloader_worker_gets_forked_error_and_training_goes_on(store_dir):
    if "fork" not in torch.multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method")
    s, vals = make_store(store_dir)
    loader = torch.utils.data.DataLoader(
        Rows(s), batch_size=2, num_workers=2, multiprocessing_context="fork", timeout=60
    )
    with pytest.raises(embtier.ForkedError):
        for _ in loader:
            pass
    check(s, vals)
    s.checkpoint()
    s.close()


def test_copying_an_open_store_keeps_it_locked(store_dir, tmp_path):
    """A copy of the open store's files (``shutil.copytree``) opened and
    closed its LOCK in the training process, which released a POSIX
    record lock: a second process could then open the store beside it."""
    import shutil
    import subprocess

    s, vals = make_store(store_dir)
    shutil.copytree(store_dir, tmp_path / "copy")
    probe = (
        "import embtier, sys\n"
        "try:\n"
        "    embtier.Store.open(sys.argv[1])\n"
        "except embtier.LockedError as e:\n"
        "    sys.exit(0 if e.pid == int(sys.argv[2]) else 3)\n"
        "sys.exit(1)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe, store_dir, str(os.getpid())], timeout=120)
    assert r.returncode == 0, "another process opened the store after a copy of it"
    check(s, vals)
    s.close()


def test_a_pending_checkpoint_waited_in_a_forked_child_is_refused(store_dir):
    """Its thread is the opener's: a wait in the child panicked joining it."""
    s, vals = make_store(store_dir)
    s.update("t", np.arange(4, dtype=np.uint64), vals[:4] + 2)
    pending = s.begin_checkpoint()

    def child():
        try:
            pending.wait()
        except embtier.ForkedError:
            return True
        return False

    assert run_child(child) == 0
    pending.wait()
    check(s, np.concatenate([vals[:4] + 2, vals[4:]]))
    s.close()
