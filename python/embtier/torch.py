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

Beyond FBGEMM's sum and mean it pools by ``"max"`` as ``nn.EmbeddingBag``
does, returns a row per index with ``"none"`` (FBGEMM's
``PoolingMode.NONE``, TorchRec's sequence embeddings), skips
``padding_idx`` as ``nn.EmbeddingBag`` does, and takes ``nn.EmbeddingBag``'s
``T * B`` offsets with ``include_last_offset=False``.

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
import inspect
import operator
import sys
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

#: The pooling modes: nn.EmbeddingBag's three, and FBGEMM's
#: PoolingMode.NONE (a row per index, as TorchRec's sequence embeddings).
_MODES = ("sum", "mean", "max", "none")


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


class _Part:
    """One table's share of a batch: its indices (pads dropped), local
    offsets and weights, where its entries sat in the batch (``lo``,
    ``n``), and which of them were kept (``keep``: None when none was a
    pad)."""

    __slots__ = ("name", "indices", "offsets", "weights", "lo", "n", "keep")

    def __init__(
        self,
        name: str,
        indices: np.ndarray,
        offsets: np.ndarray,
        weights: Optional[np.ndarray],
        lo: int,
        n: int,
        keep: Optional[np.ndarray],
    ) -> None:
        self.name = name
        self.indices = indices
        self.offsets = offsets
        self.weights = weights
        self.lo = lo
        self.n = n
        self.keep = keep


class _Bags:
    """One batch split by table: per table, its indices, local offsets and
    weights (numpy views where possible), the pads dropped."""

    def __init__(
        self,
        tables: Sequence[str],
        indices: torch.Tensor,
        offsets: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor],
        include_last_offset: bool = True,
        pads: Optional[Sequence[int]] = None,
    ) -> None:
        #: The pins of the prefetch this batch consumes (see _Pins).
        self.pins: Optional[_Pins] = None
        # Whether the per-sample weights will get a gradient (set by the
        # module's forward): the forward then keeps the rows it read.
        self.psw_grad = False
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
        idx = _index_host(indices, "indices")
        off = _index_host(offsets, "offsets")
        if include_last_offset:
            n = offsets.numel() - 1
            if n < 0 or n % t != 0:
                raise InvalidArgumentError(
                    f"offsets: expected T * B + 1 entries for T = {t} tables, got "
                    f"{offsets.numel()}",
                    argument="offsets",
                    got=offsets.numel(),
                )
        else:
            n = offsets.numel()
            if n % t != 0 or (n == 0 and idx.shape[0] > 0):
                raise InvalidArgumentError(
                    f"offsets: expected T * B entries for T = {t} tables (the bags' "
                    f"starts: include_last_offset is False), got {offsets.numel()}"
                    + (f" with {idx.shape[0]} indices" if n == 0 else ""),
                    argument="offsets",
                    got=offsets.numel(),
                )
            # The end of the last bag is the indices' end.
            off = np.append(off, np.int64(idx.shape[0]))
        self.batch = n // t
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
                    expected=int(idx.shape[0]),
                    got=int(per_sample_weights.numel()),
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
        down = np.flatnonzero(off[1:] < off[:-1])
        if down.size:
            at = int(down[0]) + 1
            if not include_last_offset and at == off.shape[0] - 1:
                raise InvalidArgumentError(
                    f"offsets: entry {at - 1} is {int(off[at - 1])}, past the end of the "
                    f"{idx.shape[0]} indices",
                    argument="offsets",
                    at=at - 1,
                    got=int(off[at - 1]),
                )
            raise InvalidArgumentError(
                f"offsets: entry {at} is {int(off[at])}, below entry {at - 1} "
                f"({int(off[at - 1])}); offsets never decrease",
                argument="offsets",
                at=at,
                got=int(off[at]),
            )
        b = self.batch
        self.parts: List[_Part] = []
        for i, name in enumerate(tables):
            o = off[i * b : (i + 1) * b + 1]
            lo, hi = int(o[0]), int(o[-1])
            local = o - o[0] if lo else o
            ti = idx[lo:hi]
            tw = None if w is None else w[lo:hi]
            keep = None
            if pads is not None and pads[i] is not None:
                is_pad = ti == pads[i]
                if is_pad.any():
                    # The pads leave their bags: each bag's end moves back
                    # by the pads up to it (nn.EmbeddingBag's
                    # padding_idx: not pooled, not counted by a mean, and
                    # given no gradient).
                    keep = np.flatnonzero(~is_pad)
                    pads_upto = np.concatenate(([0], np.cumsum(is_pad)))
                    local = local - pads_upto[local]
                    ti = ti[keep]
                    tw = None if tw is None else tw[keep]
            self.parts.append(
                _Part(name, ti, np.ascontiguousarray(local), tw, lo, hi - lo, keep)
            )
        #: Entries in the batch, pads included.
        self.entries = int(idx.shape[0])


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


def _max_pool(rows: np.ndarray, offsets: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each bag's elementwise max of ``rows`` (``offsets``: ``B + 1``
    entries), zeros for an empty bag, as ``nn.EmbeddingBag`` gives; with
    the bags that are not empty and, for each of them and each column, the
    first entry that holds the max (where its gradient goes)."""
    bags = offsets.shape[0] - 1
    out = np.zeros((bags, rows.shape[1]), dtype=np.float32)
    full = np.flatnonzero(np.diff(offsets) > 0)
    if full.size == 0:
        return out, full, np.zeros((0, rows.shape[1]), dtype=np.int64)
    starts = offsets[:-1][full]
    top = np.maximum.reduceat(rows, starts, axis=0)
    out[full] = top
    bag_of = np.repeat(np.arange(full.size), np.diff(offsets)[full])
    at = np.where(rows == top[bag_of], np.arange(rows.shape[0])[:, None], rows.shape[0])
    first = np.minimum.reduceat(at, starts, axis=0)
    return out, full, first


def _singles(p: _Part) -> np.ndarray:
    """Offsets that make each of a part's entries a bag of its own."""
    return np.arange(p.indices.shape[0] + 1, dtype=np.int64)


def _max_grads(rows: int, g: np.ndarray, full: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The gradient of :func:`_max_pool` at each entry: each bag's
    gradient goes, column by column, to the entry that held the max (a
    column whose max is NaN, possible only in a table that allows
    non-finite values, sends its gradient nowhere; nn.EmbeddingBag sends
    it to the NaN)."""
    dim = g.shape[1]
    grads = np.zeros((rows, dim), dtype=np.float32)
    cols = np.broadcast_to(np.arange(dim), first.shape)
    ok = first < rows  # a column whose max no entry equals (NaN) gets none
    grads[first[ok], cols[ok]] = g[full][ok]
    return grads


def _one_step_a_table(steps: List[Tuple[Any, ...]]) -> List[Tuple[Any, ...]]:
    """``step_pooled_many``'s parts with each table's features in one part:
    a table listed twice (two features sharing it, FBGEMM's
    ``feature_table_map=[0, 1, 0]``) gets the bags of both in one call, so
    each row's gradients are summed and the row stepped once, as autograd
    over one shared ``nn.EmbeddingBag`` weight and an optimizer step
    would. (Stepped once a feature, row-wise Adagrad, Adagrad and Adam
    moved a shared row further, and Adam counted two steps a batch.)"""
    by_table: Dict[str, List[Tuple[Any, ...]]] = {}
    for st in steps:
        by_table.setdefault(st[0], []).append(st)
    if len(by_table) == len(steps):
        return steps
    out = []
    for name, group in by_table.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        offsets = [group[0][2]]
        base = int(group[0][1].shape[0])
        for st in group[1:]:
            offsets.append(st[2][1:] + base)
            base += int(st[1].shape[0])
        ws = [st[5] for st in group]
        weights = None
        if any(w is not None for w in ws):
            weights = np.concatenate(
                [np.ones(st[1].shape[0], np.float32) if w is None else w for st, w in zip(group, ws)]
            )
        out.append(
            (
                name,
                np.concatenate([st[1] for st in group]),
                np.concatenate(offsets),
                np.concatenate([st[3] for st in group]),
                group[0][4],
                weights,
            )
        )
    return out


class _PooledFunction(torch.autograd.Function):
    """Forward: every table's lookups, pooled by the module's mode.
    Backward: the fused step."""

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
        mode = module.mode
        ctx.maxes = None
        ctx.rows = None
        if mode in ("sum", "mean"):
            outs = module.store.lookup_pooled_many(
                [(p.name, p.indices, p.offsets, mode, p.weights) for p in bags.parts]
            )
            if bags.psw_grad:
                # The weights' gradient is the rows as this forward saw
                # them: another forward's step in the same backward may
                # change them before this one's runs.
                ctx.rows = module.store.lookup_many([(p.name, p.indices) for p in bags.parts])
            y = torch.from_numpy(np.concatenate(outs, axis=1) if len(outs) > 1 else outs[0])
        elif mode == "max":
            outs, maxes = [], []
            looked = module.store.lookup_many([(p.name, p.indices) for p in bags.parts])
            for p, rows in zip(bags.parts, looked):
                out, full, first = _max_pool(rows, p.offsets)
                outs.append(out)
                maxes.append((full, first))
            ctx.maxes = maxes
            y = torch.from_numpy(np.concatenate(outs, axis=1) if len(outs) > 1 else outs[0])
        else:  # "none": every entry's row, in the order of the indices
            out = np.zeros((bags.entries, module.dims[0]), dtype=np.float32)
            looked = module.store.lookup_many([(p.name, p.indices) for p in bags.parts])
            for p, rows in zip(bags.parts, looked):
                if p.keep is None:
                    out[p.lo : p.lo + p.n] = rows
                else:
                    out[p.lo + p.keep] = rows
            y = torch.from_numpy(out)
        ctx.module = module
        # The forward's mode, whatever the module's is by the backward.
        ctx.mode = mode
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
        mode = ctx.mode
        # Frozen tables (requires_grad_(False)) are not stepped; a backward
        # then runs only for the per-sample weights' gradient.
        step = ctx.needs_input_grad[0]
        if mode == "none" and not step:
            pass
        elif mode == "none":
            # Each index its own bag of one: step_pooled_many checks every
            # table's ids and gradients before it steps any (a failure
            # leaves the store as it was), and steps as `step` would, bit
            # for bit.
            steps = []
            for p in bags.parts:
                gp = g[p.lo : p.lo + p.n]
                gp = gp[p.keep] if p.keep is not None else np.ascontiguousarray(gp)
                steps.append((p.name, p.indices, _singles(p), gp, "sum", None))
            module.store.step_pooled_many(_one_step_a_table(steps))
        else:
            grads = []
            col = 0
            for dim in module.dims:
                grads.append(np.ascontiguousarray(g[:, col : col + dim]))
                col += dim
            grad_psw = None
            if ctx.psw_grad:
                # d out[b] / d w[k] = row(indices[k]), the rows the
                # forward read. A pad's weight gets none.
                gw = np.zeros(bags.entries, dtype=np.float32)
                for p, gb, rows in zip(bags.parts, grads, ctx.rows):
                    bag_of = np.repeat(np.arange(p.offsets.shape[0] - 1), np.diff(p.offsets))
                    part = (rows * gb[bag_of]).sum(axis=1)
                    if p.keep is None:
                        gw[p.lo : p.lo + p.n] = part
                    else:
                        gw[p.lo + p.keep] = part
                grad_psw = torch.from_numpy(gw).to(ctx.device)
            if not step:
                pass
            elif mode == "max":
                module.store.step_pooled_many(
                    _one_step_a_table(
                        [
                            (
                                p.name,
                                p.indices,
                                _singles(p),
                                _max_grads(p.indices.shape[0], gb, full, first),
                                "sum",
                                None,
                            )
                            for p, gb, (full, first) in zip(bags.parts, grads, ctx.maxes)
                        ]
                    )
                )
            else:
                module.store.step_pooled_many(
                    _one_step_a_table(
                        [
                            (p.name, p.indices, p.offsets, gb, mode, p.weights)
                            for p, gb in zip(bags.parts, grads)
                        ]
                    )
                )
        if bags.pins is not None:
            bags.pins.release()
        if mode == "none":
            return None, None, None, None, None, None, None
        return None, None, None, grad_psw, None, None, None


class TieredEmbeddingBags(nn.Module):
    """Table-batched embedding bags over an embtier store.

    ``store``: an open :class:`embtier.Store`; ``tables``: the names of the
    tables this module pools, in the order of its output columns (their
    optimizers, precisions and tiers are the store's); ``mode``:

    - ``"sum"`` or ``"mean"``: FBGEMM's pooling (an empty bag gives zeros);
    - ``"max"``: each bag's elementwise max, as ``nn.EmbeddingBag``'s
      (zeros for an empty bag); each column's gradient goes to the first
      entry holding its max, and every row of the bag is stepped with its
      gradient, zero where it held no max (as FBGEMM steps every row of a
      batch: with no weight decay SGD and row-wise Adagrad leave such a
      row as it was; weight decay and Adam's moments still move it);
    - ``"none"``: no pooling (FBGEMM's ``PoolingMode.NONE``): the output
      is ``(len(indices), dim)``, index ``k``'s row at ``k``; the tables
      must share one dim.

    ``padding_idx``: an index that every table skips, as
    ``nn.EmbeddingBag``'s: not pooled, not counted by a mean, never
    stepped; negative counts from each table's end. In mode ``"none"`` a
    pad's row is zeros. Its ``per_sample_weights`` get a zero gradient.

    ``forward(indices, offsets, per_sample_weights=None)`` follows FBGEMM's
    TBE: ``indices`` of all tables concatenated, ``offsets`` of ``T * B + 1``
    entries, table-major (table ``t``'s bag ``b`` is
    ``indices[offsets[t*B + b] : offsets[t*B + b + 1]]``); the output is
    ``(B, sum of dims)``. With ``include_last_offset=False`` the offsets
    are the ``T * B`` bags' starts, the last bag ending at the indices'
    end. ``per_sample_weights`` (sum mode) receive a gradient when they
    require one.

    The backward runs the tables' optimizers in the store: call
    ``loss.backward()`` once per forward, as with FBGEMM's fused TBE.
    """

    #: 2: the state_dict carries each table's optimizer state
    #: (``"<table>.optimizer_state"``); 1 had the weights only.
    _version = 2

    def __init__(
        self,
        store: Store,
        tables: Sequence[str],
        mode: str = "sum",
        *,
        padding_idx: Optional[int] = None,
        include_last_offset: bool = True,
    ) -> None:
        super().__init__()
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
        self._rows: List[int] = []
        self.dims: List[int] = []
        for t in self.tables:
            rows, dim = store.shape(t)
            self._rows.append(rows)
            self.dims.append(dim)
        self.mode = mode
        self.padding_idx = padding_idx
        self.include_last_offset = bool(include_last_offset)
        # Autograd needs an input that requires grad to call the backward;
        # the weights are in the store, so this scalar stands in for them
        # (FBGEMM's SSD TBE does the same). It is not a Parameter.
        self._anchor = torch.zeros((), requires_grad=True)
        self._prefetched: Deque[List[Prefetch]] = collections.deque()
        # The pins of forwards whose step has not run (weakly: a batch's
        # pins go with its graph).
        self._in_use: "weakref.WeakSet[_Pins]" = weakref.WeakSet()

    def requires_grad_(self, requires_grad: bool = True) -> "TieredEmbeddingBags":
        """``requires_grad_(False)`` freezes the tables, as it freezes an
        ``nn.EmbeddingBag``'s weight: the output records no gradient for
        them and no backward steps them (per-sample weights that require a
        gradient still get theirs). ``requires_grad_(True)`` trains them
        again. Call it on this module: the module has no ``nn.Parameter``,
        so a model's ``requires_grad_(False)``, or a loop over
        ``model.parameters()``, does not reach the tables."""
        self._anchor.requires_grad_(requires_grad)
        super().requires_grad_(requires_grad)
        return self

    @property
    def mode(self) -> str:
        """The pooling mode; set it, and the next forward pools by it."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in _MODES:
            raise InvalidArgumentError(
                f"mode: expected one of {', '.join(repr(m) for m in _MODES)}, got {mode!r}",
                argument="mode",
                got=mode,
            )
        if mode == "none" and len(set(self.dims)) > 1:
            raise InvalidArgumentError(
                "mode 'none' (FBGEMM's PoolingMode.NONE) returns one row per index, so "
                f"its tables must share one dim; got {dict(zip(self.tables, self.dims))}",
                argument="mode",
                got=self.dims,
            )
        self._mode = mode

    @property
    def padding_idx(self) -> Optional[int]:
        """The index every table skips (None: none); set it, and the next
        forward skips the new one."""
        return self._padding_idx

    @padding_idx.setter
    def padding_idx(self, padding_idx: Optional[int]) -> None:
        pads = None
        if padding_idx is not None:
            if isinstance(padding_idx, bool):
                raise ArgumentTypeError(
                    "padding_idx: expected an int or None, got bool", argument="padding_idx"
                )
            try:
                padding_idx = operator.index(padding_idx)  # numpy ints too
            except TypeError:
                raise ArgumentTypeError(
                    f"padding_idx: expected an int or None, got {type(padding_idx).__name__}",
                    argument="padding_idx",
                ) from None
            # Each table's padding row: negative counts from its end, as in
            # nn.EmbeddingBag (so with tables of different sizes -1 is each
            # one's last row).
            pads = []
            for name, rows in zip(self.tables, self._rows):
                if not -rows <= padding_idx < rows:
                    raise InvalidArgumentError(
                        f"padding_idx: {padding_idx} is outside table {name!r}'s "
                        f"{rows} rows (from -{rows} to {rows - 1})",
                        argument="padding_idx",
                        table=name,
                        got=padding_idx,
                    )
                pads.append(padding_idx + rows if padding_idx < 0 else padding_idx)
        self._padding_idx = padding_idx
        self._pads: Optional[List[int]] = pads

    @property
    def embedding_dim(self) -> int:
        """The output width: the sum of the tables' dims (the tables' one
        dim in mode ``"none"``)."""
        return self.dims[0] if self.mode == "none" else sum(self.dims)

    def forward(
        self,
        indices: torch.Tensor,
        offsets: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        # The rows a prefetch brought in stay pinned until this batch's
        # step; a forward that records no graph has no step, and a graph
        # freed without a backward never steps: both release them. A
        # forward refused for its input consumes its prefetch too, so that
        # the next forward takes the next batch's.
        pins = None
        if self._prefetched:
            handles = self._prefetched.popleft()
            for h in handles:
                h.wait()
            pins = _Pins(handles, self._in_use)
        try:
            if per_sample_weights is not None and self.mode != "sum":
                raise InvalidArgumentError(
                    "per_sample_weights need mode 'sum'", argument="per_sample_weights"
                )
            bags = _Bags(
                self.tables,
                indices,
                offsets,
                per_sample_weights,
                self.include_last_offset,
                self._pads,
            )
            # (Autograd's forward runs without grad: whether the weights
            # will get a gradient is known here.)
            bags.psw_grad = (
                per_sample_weights is not None
                and per_sample_weights.requires_grad
                and torch.is_grad_enabled()
            )
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
        bags = _Bags(self.tables, indices, offsets, None, self.include_last_offset, self._pads)
        self._prefetched.append(
            [self.store.prefetch(p.name, np.unique(p.indices)) for p in bags.parts]
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
        for name, dim in dict(zip(self.tables, self.dims)).items():
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
        for name, dim in dict(zip(self.tables, self.dims)).items():
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
                # The weights still load (non-strict): only the state,
                # missing, stays as the store holds it.
                missing_keys.append(skey)
                problems += 1
            plan.append((name, rows, w, st))
        # torch passes strict=True here whatever the caller asked (it sorts
        # the keys out after every module has loaded): the caller's own
        # choice is read from its load_state_dict call, and can only relax
        # a strict given here.
        enforce = strict and _caller_strict()
        if (enforce and problems) or error_msgs:
            return  # torch raises on them; nothing was written
        # Every value checked before any is written (a NaN weight, a
        # negative sum of squares), table after table, as the writes
        # below will take them: a refused value leaves every table as it
        # was.
        for name, rows, w, st in plan:
            for start in range(0, rows, CHUNK_ROWS):
                n = min(CHUNK_ROWS, rows - start)
                self.store.check_import_rows(name, start, _host(w[start : start + n], torch.float32))
                if st is not None:
                    self.store.check_import_state(
                        name, start, _host(st[start : start + n], torch.uint8)
                    )
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
        extra = ""
        if self.padding_idx is not None:
            extra += f", padding_idx={self.padding_idx}"
        if not self.include_last_offset:
            extra += ", include_last_offset=False"
        return f"tables={self.tables}, dims={self.dims}, mode={self.mode!r}{extra}"


# torch's own load_state_dict, under any wrapper installed over it.
_LOAD_STATE_DICT = inspect.unwrap(nn.Module.load_state_dict).__code__


def _caller_strict() -> bool:
    """The ``strict`` of the ``nn.Module.load_state_dict`` call this load
    runs in (on this module or a model holding it); True where there is
    none to read, so that a load in doubt writes nothing when a key is
    missing."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is _LOAD_STATE_DICT and "strict" in f.f_locals:
            return bool(f.f_locals["strict"])
        f = f.f_back
    return True


def _chunks(rows: int, chunk: int = CHUNK_ROWS) -> Iterator[Tuple[int, int]]:
    for start in range(0, rows, chunk):
        yield start, min(chunk, rows - start)
