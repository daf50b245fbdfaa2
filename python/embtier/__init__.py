"""embtier: a tiered store for the embedding tables of recommendation models.

Hot rows live in DRAM, warm rows in a memory-mapped file (PMem or CXL
memory), and every row's home is on SSD, read in batches with io_uring.
This package is the store reached from Python, over numpy arrays read in
place; :mod:`embtier.torch` (which needs PyTorch) puts it under a model as
a table-batched embedding-bag module with fused optimizers.

>>> import embtier, numpy as np, tempfile, os
>>> d = tempfile.mkdtemp()
>>> with embtier.Store.create(os.path.join(d, "s"), {"tables": [
...         {"name": "t", "rows": 1000, "dim": 4, "init": {"kind": "zeros"}}]}) as s:
...     s.update("t", np.array([3], dtype=np.int64), np.ones((1, 4), dtype=np.float32))
...     s.lookup("t", np.array([3, 4], dtype=np.int64)).tolist()
[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
"""

from . import errors
from ._embtier import (
    PendingCheckpoint,
    Prefetch,
    Store,
    __version__,
    give_back_freed_memory_promptly,
)
from .errors import (
    AlreadyExistsError,
    ArgumentTypeError,
    ClosedError,
    ConfigError,
    CorruptError,
    DiskFullError,
    Error,
    ForkedError,
    IdOutOfRangeError,
    InvalidArgumentError,
    LockedError,
    NotAStoreError,
    PoisonedError,
    StorageError,
    UnknownTableError,
)

__all__ = [
    "Store",
    "Prefetch",
    "PendingCheckpoint",
    "give_back_freed_memory_promptly",
    "errors",
    "Error",
    "IdOutOfRangeError",
    "UnknownTableError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "ConfigError",
    "ClosedError",
    "CorruptError",
    "StorageError",
    "DiskFullError",
    "PoisonedError",
    "LockedError",
    "ForkedError",
    "AlreadyExistsError",
    "NotAStoreError",
    "__version__",
]
