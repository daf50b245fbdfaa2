"""embtier under a PyTorch model: table-batched embedding bags whose weights
live in an embtier store and whose optimizers run inside it.

:class:`TieredEmbeddingBags` follows the convention of FBGEMM's
table-batched embedding bags (``SplitTableBatchedEmbeddingBagsCodegen`` and
its SSD variant): ``forward(indices, offsets)`` takes the indices of every
table concatenated and ``T * B + 1`` offsets, table-major, and returns a
``(B, sum of dims)`` float32 tensor, each table's pooled rows side by side.
Its backward calls :meth:`embtier.Store.step_pooled_many`: every table's
fused optimizer (SGD, row-wise Adagrad, Adagrad, Adam, as configured in the
store) runs inside the store, and no dense gradient of the weights is ever
made. So the module has no ``nn.Parameter`` for its weights: leave it out
of the torch optimizer (it has none to give).

CPU tensors reach the store without copies (``numpy()`` views of contiguous
tensors; the store copies indices and offsets as it reads them). CUDA
tensors are copied to the host and the output back to the device; the
store itself is on the host.

``torch.compile``: the module's forward and backward are an
``autograd.Function`` that calls into the store through numpy, which
TorchDynamo cannot trace; a compiled model runs them eagerly (a graph
break at the module) and compiles the rest.

Importing this module needs ``torch``; importing :mod:`embtier` does not.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ._embtier import Prefetch, Store
from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["TieredEmbeddingBags"]

#: Rows per chunk when a table is streamed in or out (state_dict).
CHUNK_ROWS = 1 << 16


def _index_host(t: torch.Tensor, arg: str) -> np.ndarray:
    """:func:`_host` of ``indices`` or ``offsets`` (tensors, as
    :class:`_Bags` checked): int64 or int32 only, as ``nn.EmbeddingBag``
    takes them (a float or bool index is an error, not a row)."""
    if t.dtype not in (torch.int64, torch.int32):
        raise ArgumentTypeError(
            f"{arg}: expected dtype torch.int64 or torch.int32, got {t.dtype}", argument=arg
        )
    return _host(t, torch.int64)


def _host(t: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """A contiguous host numpy view of ``t`` as ``dtype`` (a copy only when
    ``t`` is on a device, of another dtype, or not contiguous)."""
    if t.device.type != "cpu":
        t = t.to("cpu")
    t = t.detach()
    if t.dtype != dtype:
        t = t.to(dtype)
    return t.contiguous().numpy()


class _Bags:
    """One batch split by table: per table, its indices, local offsets and
    weights (numpy views where possible)."""

    def __init__(
        self,
        tables: Sequence[str],
        indices: torch.Tensor,
        offsets: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor],
    ) -> None:
        #: The pins of the prefetch this batch consumes (see _Pins).
        self.pins: Optional[_Pins] = None
        for arg, v in (("indices", indices), ("offsets", offsets)):
            if not isinstance(v, torch.Tensor):
                raise ArgumentTypeError(
                    f"{arg}: expected a torch.Tensor, got {type(v).__name__}", argument=arg
                )
        if indices.dim() != 1 or offsets.dim() != 1:
            raise InvalidArgumentError(
                f"indices and offsets must be 1-D, got shapes {tuple(indices.shape)} "
                f"and {tuple(offsets.shape)}",
                argument="offsets",
            )
        t = len(tables)
        n = offsets.numel() - 1
        if n < 0 or n % t != 0:
            raise InvalidArgumentError(
                f"offsets: expected T * B + 1 entries for T = {t} tables, got {offsets.numel()}",
                argument="offsets",
                got=offsets.numel(),
            )
        self.batch = n // t
        idx = _index_host(indices, "indices")
        off = _index_host(offsets, "offsets")
        w = None
        if per_sample_weights is not None:
            if not isinstance(per_sample_weights, torch.Tensor):
                raise ArgumentTypeError(
                    "per_sample_weights: expected a torch.Tensor, got "
                    f"{type(per_sample_weights).__name__}",
                    argument="per_sample_weights",
                )
            if per_sample_weights.dim() != 1 or per_sample_weights.numel() != idx.shape[0]:
                raise InvalidArgumentError(
                    f"per_sample_weights: expected shape ({idx.shape[0]},), one weight an "
                    f"index, got {tuple(per_sample_weights.shape)}",
                    argument="per_sample_weights",
                    expected=idx.shape[0],
                    got=tuple(per_sample_weights.shape),
                )
            w = _host(per_sample_weights, torch.float32)
        negative = np.flatnonzero(off < 0)
        if negative.size:
            at = int(negative[0])
            raise InvalidArgumentError(
                f"offsets: entry {at} is {int(off[at])}; an offset cannot be negative",
                argument="offsets",
                at=at,
                got=int(off[at]),
            )
        if off[0] != 0:
            raise InvalidArgumentError(
                f"offsets: must start at 0, got {off[0]}",
                argument="offsets",
                expected=0,
                got=int(off[0]),
                at=0,
            )
        if off[-1] != idx.shape[0]:
            raise InvalidArgumentError(
                f"offsets: must end at {idx.shape[0]} (the indices), got {off[-1]}",
                argument="offsets",
                expected=int(idx.shape[0]),
                got=int(off[-1]),
                at=int(off.shape[0] - 1),
            )
        b = self.batch
        self.parts: List[Tuple[str, np.ndarray, np.ndarray, Optional[np.ndarray]]] = []
        for i, name in enumerate(tables):
            o = off[i * b : (i + 1) * b + 1]
            lo, hi = int(o[0]), int(o[-1])
            if lo > hi:
                raise InvalidArgumentError(
                    f"offsets: table {name!r}'s offsets decrease ({lo} > {hi})",
                    argument="offsets",
                    table=name,
                )
            local = o - o[0] if lo else o
            self.parts.append(
                (
                    name,
                    idx[lo:hi],
                    np.ascontiguousarray(local),
                    None if w is None else w[lo:hi],
                )
            )
        self.indices_all = idx


class _Pins:
    """The prefetch handles of one batch: released once, by the batch's
    step, or when its forward recorded no graph, or when the graph is freed
    without a backward (an evaluation, a loss never backpropagated)."""

    def __init__(self, handles: List[Prefetch], held: "weakref.WeakSet[_Pins]") -> None:
        self.handles: Optional[List[Prefetch]] = handles
        self.held = held
        held.add(self)

    def release(self) -> None:
        handles, self.handles = self.handles, None
        self.held.discard(self)
        for h in handles or ():
            h.release()


class _PooledFunction(torch.autograd.Function):
    """Forward: pooled lookups of every table. Backward: the fused step."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        anchor: torch.Tensor,
        module: "TieredEmbeddingBags",
        bags: _Bags,
        psw: Optional[torch.Tensor],
        device: torch.device,
        indices: torch.Tensor,
        offsets: torch.Tensor,
    ) -> torch.Tensor:
        outs = module.store.lookup_pooled_many(
            [(name, i, o, module.mode, w) for (name, i, o, w) in bags.parts]
        )
        y = torch.from_numpy(np.concatenate(outs, axis=1) if len(outs) > 1 else outs[0])
        ctx.module = module
        ctx.bags = bags
        ctx.psw_grad = psw is not None and psw.requires_grad
        ctx.device = device
        # The backward steps the rows of these tensors, read through numpy
        # views of them: saved, so that autograd refuses a backward after
        # they were changed in place (a loader that refills its buffer),
        # as it does for nn.EmbeddingBag, rather than step other rows.
        if psw is None:
            ctx.save_for_backward(indices, offsets)
        else:
            ctx.save_for_backward(indices, offsets, psw)
        return y.to(device) if device.type != "cpu" else y

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):  # type: ignore[override]
        module: TieredEmbeddingBags = ctx.module
        bags: _Bags = ctx.bags
        _ = ctx.saved_tensors  # raises if the batch's tensors changed since the forward
        g = _host(grad_out, torch.float32)
        grads = []
        col = 0
        for dim in module.dims:
            grads.append(np.ascontiguousarray(g[:, col : col + dim]))
            col += dim
        grad_psw = None
        if ctx.psw_grad:
            # d out[b] / d w[k] = row(indices[k]), with the weights before
            # this step: read them before stepping.
            parts = []
            for (name, i, o, _), gb in zip(bags.parts, grads):
                rows = module.store.lookup(name, i)
                bag_of = np.repeat(np.arange(o.shape[0] - 1), np.diff(o))
                parts.append((rows * gb[bag_of]).sum(axis=1))
            grad_psw = torch.from_numpy(np.concatenate(parts).astype(np.float32))
            grad_psw = grad_psw.to(ctx.device)
        module.store.step_pooled_many(
            [
                (name, i, o, gb, module.mode, w)
                for (name, i, o, w), gb in zip(bags.parts, grads)
            ]
        )
        if bags.pins is not None:
            bags.pins.release()
        return None, None, None, grad_psw, None, None, None


class TieredEmbeddingBags(nn.Module):
    """Table-batched embedding bags over an embtier store.

    ``store``: an open :class:`embtier.Store`; ``tables``: the names of the
    tables this module pools, in the order of its output columns (their
    optimizers, precisions and tiers are the store's); ``mode``: ``"sum"``
    or ``"mean"``.

    ``forward(indices, offsets, per_sample_weights=None)`` follows FBGEMM's
    TBE: ``indices`` of all tables concatenated, ``offsets`` of ``T * B + 1``
    entries, table-major (table ``t``'s bag ``b`` is
    ``indices[offsets[t*B + b] : offsets[t*B + b + 1]]``); the output is
    ``(B, sum of dims)``. ``per_sample_weights`` (sum mode) receive a
    gradient when they require one.

    The backward runs the tables' optimizers in the store: call
    ``loss.backward()`` once per forward, as with FBGEMM's fused TBE.
    """

    #: 2: the state_dict carries each table's optimizer state
    #: (``"<table>.optimizer_state"``); 1 had the weights only.
    _version = 2

    def __init__(self, store: Store, tables: Sequence[str], mode: str = "sum") -> None:
        super().__init__()
        if mode not in ("sum", "mean"):
            raise InvalidArgumentError(
                f"mode: expected 'sum' or 'mean', got {mode!r}", argument="mode"
            )
        if isinstance(tables, (str, bytes)):
            raise ArgumentTypeError(
                f"tables: expected a list of table names, got the string {tables!r} "
                f"(write [{tables!r}] for one table)",
                argument="tables",
            )
        if not tables:
            raise InvalidArgumentError("tables: at least one table", argument="tables")
        self.store = store
        self.tables: List[str] = list(tables)
        self.mode = mode
        self.dims: List[int] = [store.shape(t)[1] for t in self.tables]
        # Autograd needs an input that requires grad to call the backward;
        # the weights are in the store, so this scalar stands in for them
        # (FBGEMM's SSD TBE does the same). It is not a Parameter.
        self._anchor = torch.zeros((), requires_grad=True)
        self._prefetched: Deque[List[Prefetch]] = collections.deque()
        # The pins of forwards whose step has not run (weakly: a batch's
        # pins go with its graph).
        self._in_use: "weakref.WeakSet[_Pins]" = weakref.WeakSet()

    @property
    def embedding_dim(self) -> int:
        """The output width: the sum of the tables' dims."""
        return sum(self.dims)

    def forward(
        self,
        indices: torch.Tensor,
        offsets: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if per_sample_weights is not None and self.mode != "sum":
            raise InvalidArgumentError(
                "per_sample_weights need mode 'sum'", argument="per_sample_weights"
            )
        bags = _Bags(self.tables, indices, offsets, per_sample_weights)
        # The rows a prefetch brought in stay pinned until this batch's
        # step; a forward that records no graph has no step, and a graph
        # freed without a backward never steps: both release them.
        pins = None
        if self._prefetched:
            handles = self._prefetched.popleft()
            for h in handles:
                h.wait()
            pins = _Pins(handles, self._in_use)
        try:
            y = _PooledFunction.apply(
                self._anchor, self, bags, per_sample_weights, indices.device, indices, offsets
            )
        except BaseException:
            if pins is not None:
                pins.release()
            raise
        if pins is not None:
            if y.requires_grad:
                bags.pins = pins
                weakref.finalize(bags, pins.release)
            else:
                pins.release()
        return y

    def prefetch(self, indices: torch.Tensor, offsets: torch.Tensor) -> None:
        """Start reading the rows of a coming batch (same layout as
        :meth:`forward`) while the current one computes. They are pinned in
        DRAM until the step of the forward that consumes them (prefetches
        are consumed in order, one per forward); a forward without a graph
        (``torch.no_grad()``, evaluation) releases them when it returns,
        and one whose graph is freed without a backward, then."""
        bags = _Bags(self.tables, indices, offsets, None)
        self._prefetched.append(
            [self.store.prefetch(name, np.unique(i)) for (name, i, _, _) in bags.parts]
        )

    def release_prefetches(self) -> None:
        """Drop every outstanding prefetch's pins (for example after an
        exception interrupted a training step)."""
        while self._prefetched:
            for h in self._prefetched.popleft():
                h.release()
        for pins in list(self._in_use):
            pins.release()

    # --- state_dict: tables streamed in and out in chunks ---------------

    def _save_to_state_dict(self, destination: Dict[str, Any], prefix: str, keep_vars: bool) -> None:
        for name, dim in zip(self.tables, self.dims):
            rows = self.store.shape(name)[0]
            w = torch.empty((rows, dim), dtype=torch.float32)
            wn = w.numpy()
            for start in range(0, rows, CHUNK_ROWS):
                n = min(CHUNK_ROWS, rows - start)
                self.store.export_rows(name, start, n, out=wn[start : start + n])
            destination[prefix + name + ".weight"] = w
            # The optimizer's state, as the rows hold it (uint8: f32s and,
            # for Adam, a u32 step count), so that training resumes as it
            # would have gone on.
            sb = self.store.state_bytes(name)
            if sb:
                st = torch.empty((rows, sb), dtype=torch.uint8)
                sn = st.numpy()
                for start in range(0, rows, CHUNK_ROWS):
                    n = min(CHUNK_ROWS, rows - start)
                    sn[start : start + n] = self.store.export_state(name, start, n)
                destination[prefix + name + ".optimizer_state"] = st

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        local_metadata: Dict[str, Any],
        strict: bool,
        missing_keys: List[str],
        unexpected_keys: List[str],
        error_msgs: List[str],
    ) -> None:
        # A state_dict of version 1 (before 2026-12-07) has the weights
        # only: its tables' optimizer state is not asked for, and stays as
        # the store holds it.
        with_state = local_metadata.get("version", 1) >= 2
        # Every key checked before anything is written: the store is
        # durable, so a load that fails must leave it as it was.
        plan = []
        problems = 0
        for name, dim in zip(self.tables, self.dims):
            rows = self.store.shape(name)[0]
            key = prefix + name + ".weight"
            if key not in state_dict:
                missing_keys.append(key)
                problems += 1
                continue
            w = state_dict[key]
            if tuple(w.shape) != (rows, dim):
                error_msgs.append(
                    f"size mismatch for {key}: the store's table is {(rows, dim)}, "
                    f"the state_dict's {tuple(w.shape)}"
                )
                problems += 1
                continue
            st = None
            sb = self.store.state_bytes(name)
            skey = prefix + name + ".optimizer_state"
            if sb and skey in state_dict:
                st = state_dict[skey]
                if tuple(st.shape) != (rows, sb) or st.dtype != torch.uint8:
                    error_msgs.append(
                        f"size mismatch for {skey}: the store's table holds {(rows, sb)} "
                        f"bytes of optimizer state (uint8), the state_dict's "
                        f"{tuple(st.shape)} {st.dtype} (another optimizer?)"
                    )
                    problems += 1
                    continue
            elif sb and with_state:
                missing_keys.append(skey)
                problems += 1
                continue
            plan.append((name, rows, w, st))
        if strict and problems:
            return  # torch raises on them; nothing was written
        for name, rows, w, st in plan:
            for start in range(0, rows, CHUNK_ROWS):
                n = min(CHUNK_ROWS, rows - start)
                self.store.import_rows(name, start, _host(w[start : start + n], torch.float32))
                if st is not None:
                    self.store.import_state(name, start, _host(st[start : start + n], torch.uint8))
        # When strict, every other key under this module's prefix is
        # unexpected, as nn.Module's own loading reports them (this module
        # has no children whose keys they could be).
        if strict:
            ours = {prefix + t + ".weight" for t in self.tables}
            ours |= {
                prefix + t + ".optimizer_state"
                for t in self.tables
                if self.store.state_bytes(t)
            }
            for k in state_dict:
                if k.startswith(prefix) and k not in ours:
                    unexpected_keys.append(k)

    def extra_repr(self) -> str:
        return f"tables={self.tables}, dims={self.dims}, mode={self.mode!r}"


def _chunks(rows: int, chunk: int = CHUNK_ROWS) -> Iterator[Tuple[int, int]]:
    for start in range(0, rows, chunk):
        yield start, min(chunk, rows - start)
