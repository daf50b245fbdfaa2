"""Type stubs of the compiled module ``embtier._embtier`` (the Rust store).

Arrays: ids, indices and offsets are 1-D, C-contiguous, aligned
``int64`` or ``uint64`` numpy arrays, copied as they are read (so that
another thread cannot change them mid-call); values, gradients and
``out`` are C-contiguous, aligned ``float32``, read and written in place.
A wrong dtype, a non-array or an array another call holds raises
:class:`embtier.ArgumentTypeError` (a :class:`TypeError`); a strided or
unaligned array, a wrong shape, length, offset or a NaN raises
:class:`embtier.InvalidArgumentError` (a :class:`ValueError`); both name
the argument. A plain argument of the wrong Python type (a table name
that is not a ``str``, a float ``start``) raises Python's own
:class:`TypeError` from the binding. Every call that reads, writes or
computes releases the GIL; a :class:`Store` may be shared between threads.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, Type, Union

import numpy as np
import numpy.typing as npt

IdArray = Union[npt.NDArray[np.int64], npt.NDArray[np.uint64]]
F32Array = npt.NDArray[np.float32]
Mode = Literal["sum", "mean"]

__version__: str

def give_back_freed_memory_promptly() -> bool:
    """Make glibc's malloc give every freed allocation of 128 KiB or more
    back to the operating system at once, instead of keeping it in its
    heaps (where a checkpoint's buffers stay resident until the next trim).

    **Process-wide**: the trainer's own allocations follow it too. Meant for
    a process that sets ``[ssd] overhead_in_budget`` to keep within a hard
    memory limit (in W5 it lowered the peak RSS by 76-113 MiB and cost 8%
    of the rows/s: large short-lived buffers become a fresh mapping each).
    Returns whether it applied: ``True`` with glibc on Linux,
    ``False`` (and nothing done) elsewhere.
    """

class Prefetch:
    """Rows being read into DRAM in the background, pinned there until
    :meth:`release` (or the end of the ``with`` block): a ``lookup`` or
    ``step`` of them then hits DRAM. Pinning is bounded (half of each DRAM
    shard); rows past the bound are read but not pinned."""

    def wait(self) -> int:
        """Wait for the reads; returns the rows pinned. Raises what the
        reads raised."""
    def release(self) -> None:
        """Drop the pins (after the batch's step). Idempotent."""
    @property
    def done(self) -> bool:
        """Whether the reads have finished."""
    def __enter__(self) -> Prefetch: ...
    def __exit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class PendingCheckpoint:
    """A checkpoint begun by :meth:`Store.begin_checkpoint`, being written
    and committed on a thread of its own while the caller trains on."""

    def wait(self) -> Dict[str, Union[int, float]]:
        """Wait until it is committed; returns what :meth:`Store.checkpoint`
        returns and raises what it raises. Idempotent."""
    @property
    def done(self) -> bool:
        """Whether it has finished (committed or failed)."""

class Store:
    """An open embtier store: tables of ``rows x dim`` float32 rows (stored
    as f32, f16, bf16 or int8), cached in DRAM and PMem over SSD.

    Use it as a context manager, or call :meth:`close`. A call on a closed
    store raises :class:`embtier.ClosedError`."""

    @staticmethod
    def create(path: Union[str, os.PathLike[str]], config: Union[Mapping[str, Any], str, os.PathLike[str]]) -> Store:
        """Create a store in ``path`` (which must not exist, or be empty).

        ``config`` is a dict with the schema of ``store.toml`` (``tables``:
        a list of ``{"name", "rows", "dim", ...}``; ``dram``, ``pmem``,
        ``ssd`` sections; see the Rust docs of ``StoreConfig``) or the path
        of a ``store.toml``. A failed create leaves nothing behind (but a
        tier file's ``.lock`` outside the store's directory)."""
    @staticmethod
    def open(path: Union[str, os.PathLike[str]], cold: bool = False) -> Store:
        """Open the store in ``path``, recovering its last checkpoint.
        Unless ``cold``, the rows each cache tier held at that checkpoint
        are read back in the background (a warm restart; see
        :meth:`wait_warm`)."""
    def wait_warm(self) -> int:
        """Wait until the warm restart's read-back has finished; returns
        the rows it read (0 when there was nothing to read back). The
        store serves calls while it runs."""
    def close(self, keep: bool = False) -> None:
        """Release the store, waiting for calls in flight on other threads
        (and a :meth:`begin_checkpoint` until it commits): once it returns,
        the store's lock is released and it can be opened again.
        Idempotent. Updates since the last :meth:`checkpoint` are not
        durable, unless ``keep``: then it checkpoints first, and each cache
        tier that lives in a file (a PMem tier, or a DRAM tier given a
        ``path``, on ``/dev/shm`` shared memory) is kept, so that the next
        :meth:`open` takes its rows back where they lie, reading nothing
        (:attr:`rows_kept_at_open`)."""
    @property
    def rows_kept_at_open(self) -> int:
        """Rows this open took back where they lay in tiers that live in
        files: all a ``close(keep=True)`` kept, or, after a plain close or a
        crash in the same boot of the machine, the rows whose bytes the
        last checkpoint holds (by the tiers' slot stamps). 0 after other
        tier settings, a reboot or a cold open."""
    @property
    def row_log_at_open(self) -> dict:
        """How this open rebuilt the row log's map: ``blocks`` (of the
        committed log), ``from_index`` (True: from the row-log index,
        reading no log block; an open after a crash or a plain close in the
        same boot of the machine), ``index_refused`` (why the index was not
        used, or None) and ``seconds``."""
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
    @property
    def tables(self) -> List[str]:
        """Table names, in catalog order."""
    @property
    def path(self) -> str:
        """The store's directory."""
    def shape(self, table: str) -> Tuple[int, int]:
        """``(rows, dim)`` of ``table``."""
    def lookup(self, table: str, ids: IdArray, out: Optional[F32Array] = None) -> F32Array:
        """Rows ``ids`` as a ``(len(ids), dim)`` float32 array. With ``out``
        (C-contiguous float32 of that shape) the rows are written into it and
        it is returned: no allocation. Duplicate ids are allowed."""
    def update(self, table: str, ids: IdArray, values: F32Array) -> None:
        """Overwrite rows: row ``ids[i]`` becomes ``values[i]`` (shape
        ``(len(ids), dim)``); for a duplicate id the last wins."""
    def step(self, table: str, ids: IdArray, grads: F32Array) -> None:
        """The table's fused optimizer step with ``grads`` (``(len(ids),
        dim)``); duplicate ids' gradients are summed in order, then applied
        once."""
    def lookup_pooled(
        self,
        table: str,
        indices: IdArray,
        offsets: IdArray,
        mode: Mode = "sum",
        per_sample_weights: Optional[F32Array] = None,
        out: Optional[F32Array] = None,
    ) -> F32Array:
        """Pooled embedding bags in FBGEMM's TBE layout: ``offsets`` has
        ``B + 1`` entries from 0 to ``len(indices)``, bag ``b`` is
        ``indices[offsets[b]:offsets[b+1]]``. Returns ``(B, dim)``: each
        bag's sum (times ``per_sample_weights``, sum mode only) or mean; an
        empty bag pools to zeros."""
    def step_pooled(
        self,
        table: str,
        indices: IdArray,
        offsets: IdArray,
        grad: F32Array,
        mode: Mode = "sum",
        per_sample_weights: Optional[F32Array] = None,
    ) -> None:
        """The backward of :meth:`lookup_pooled` fused with the table's
        optimizer: every index receives its bag's gradient (``grad`` is
        ``(B, dim)``), times its weight or divided by the bag's length; the
        same as :meth:`step` with the expanded gradients, bit for bit."""
    def lookup_many(self, batches: List[Tuple[str, IdArray]]) -> List[F32Array]:
        """:meth:`lookup` of several ``(table, ids)`` at once, every
        table's misses read in one queue; one ``(len(ids), dim)`` array per
        batch. Every part is checked before any is read."""
    def lookup_pooled_many(
        self, batches: List[Tuple[str, IdArray, IdArray, Mode, Optional[F32Array]]]
    ) -> List[F32Array]:
        """:meth:`lookup_pooled` of several ``(table, indices, offsets,
        mode, per_sample_weights)`` at once, every table's misses read in
        one queue; one ``(B, dim)`` array per batch."""
    def step_pooled_many(
        self, batches: List[Tuple[str, IdArray, IdArray, F32Array, Mode, Optional[F32Array]]]
    ) -> None:
        """:meth:`step_pooled` of several ``(table, indices, offsets, grad,
        mode, per_sample_weights)`` at once, the tables stepped side by side."""
    def prefetch(self, table: str, ids: IdArray) -> Prefetch:
        """Start reading ``ids``' rows into DRAM in the background and pin
        them there until the handle is released."""
    def export_rows(self, table: str, start: int, count: int, out: Optional[F32Array] = None) -> F32Array:
        """Rows ``start .. start + count`` in id order, ``(count, dim)``:
        call it chunk by chunk to stream out a table larger than memory."""
    def import_rows(self, table: str, start: int, values: F32Array) -> None:
        """Overwrite rows ``start .. start + len(values)`` (optimizer state
        kept): call it chunk by chunk to load a table larger than memory."""
    def state_bytes(self, table: str) -> int:
        """Bytes of optimizer state a row holds (0 for SGD)."""
    def export_state(self, table: str, start: int, count: int) -> npt.NDArray[np.uint8]:
        """The optimizer state of rows ``start .. start + count``, uint8
        ``(count, state_bytes)``, the bytes as a row holds them (a read)."""
    def import_state(self, table: str, start: int, state: npt.NDArray[np.uint8]) -> None:
        """Overwrite the optimizer state of rows ``start .. start +
        len(state)`` (weights kept), from :meth:`export_state`'s bytes."""
    def check_import_rows(self, table: str, start: int, values: F32Array) -> None:
        """Raise what :meth:`import_rows` would raise for these arguments,
        writing nothing: check every table's chunks before loading any, so
        that a refused value leaves the store as it was."""
    def check_import_state(self, table: str, start: int, state: npt.NDArray[np.uint8]) -> None:
        """Raise what :meth:`import_state` would raise, writing nothing.
        A sum of squares (Adagrad's, Adam's second moment) may be ``+inf``
        (a step whose gradient's square overflowed leaves one)."""
    def checkpoint(self) -> Dict[str, Union[int, float]]:
        """Make the current state durable and atomic; a crash later recovers
        exactly it. Returns ``generation``, ``epoch``, ``groups_journaled``,
        ``journal_bytes``, ``row_log_merged_rows`` (logged rows merged home
        inside the checkpoint: 0 unless it had to merge the whole log),
        ``row_log_blocks`` (the log's committed blocks),
        ``row_log_blocks_freed`` (blocks the log's start moved past after a
        background pass), ``row_log_bytes_released``, ``hot_rows``,
        ``hot_row_bytes``, ``paused_seconds`` (a float: how long other
        threads' calls were held back; a snapshot checkpoint, the default,
        holds them only while it marks the dirty rows and commits, and
        commits the state as it was when it began) and
        ``pending_peak_bytes`` (the most bytes of rows that waited in memory
        to be written at once while it ran, summed over the tables: memory
        beyond the cache budget)."""
    def begin_checkpoint(self) -> PendingCheckpoint:
        """Begin a :meth:`checkpoint` and return once its moment has
        passed: it commits exactly the updates made before this returned,
        and is written and committed on a thread of its own while the
        caller goes on training. ``wait()`` on the result returns its
        report. Another checkpoint, or ``import_rows``, waits for it."""
    def merge_row_log(self) -> Dict[str, Union[int, float]]:
        """A :meth:`checkpoint` that also merges the row log into the
        tables whatever its fill: every logged row is written home and the
        log is emptied. Pay that cost when you choose (after a bulk
        :meth:`import_rows`, before copying the store) instead of inside a
        later checkpoint. Returns what :meth:`checkpoint` returns."""
    def flush(self) -> None:
        """A :meth:`checkpoint` without the report."""
    def stats(self) -> Dict[str, Any]:
        """The store's figures: per table (``tables[name]``) lookups,
        updates, and per tier (``dram``, ``pmem``, ``ssd``) hits, misses,
        evictions, bytes, resident rows; ``writeback_errors`` and
        ``pending_rows`` (write-backs that failed and the rows waiting in
        memory for one); the I/O engine and the SSD read latency; the row
        log's ``row_log_capacity_blocks``, ``row_log_used_blocks``,
        ``row_log_merges`` (checkpoints that merged the whole log) and
        ``row_log_passes`` (checkpoints that freed a background pass's
        blocks)."""
    def __enter__(self) -> Store: ...
    def __exit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
