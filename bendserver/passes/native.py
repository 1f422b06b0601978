"""Native runs: runs of a small block's graph played as C compiled for that graph, with no
operator call at all.

After the other passes, a block of 128 of a BRAVE export is some 450 operators on a few
hundred values each (copies into caches and rows, matrix products of one to eight rows, leaky
ReLUs): each costs torch 2 to 5 us of dispatch, argument checks and loop set-up, several times
its arithmetic. Every tensor such a run touches has the same layout at every block (its storage
is the graph's own, or a weight), so each operator can be written out once as loops with its
sizes, strides and offsets as constants (:mod:`.csource`), compiled by the machine's C compiler
(:mod:`.cbuild`) and called once per run through a table of pointers.

What stays live: a weight change swaps a weight's storage, so weights' pointers are read again
at each call; a bending op's parameters are tensors read where they lie; a bending op itself,
a random draw, a flow guard and anything not written here stay torch calls between runs. A
change of the graph's structure builds a new graph and its runs again, off the audio thread (a
compiled source is kept by digest: a graph built again loads it).

Layouts come from one call of the graph when it is built, with its state put back after
(:mod:`.state`). Only small operands are taken (:data:`MOST_ELEMENTS`, matrix products of at
most :data:`MOST_ROWS` rows): at large blocks torch's kernels win.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from .. import compat
from ..slices import breathe
from ..tracing import flow
from . import csource
from .cbuild import CompileError, library
from .convolution import FORMS, folded_conv_transpose1d
from .csource import Operand, literal
from .grouped import grouped_conv1d
from .nodes import attribute, called_before, is_view, mutates, single, written_roots
from .state import recorded
from .views import OWNED

log = logging.getLogger("bendserver.passes")

#: The most elements an operand of a native operator may have.
MOST_ELEMENTS = 1 << 12
#: The most rows of a matrix product played natively (a convolution's frames at small blocks).
MOST_ROWS = 16
#: The fewest operators (views not counted) a run must have to be worth a call from Python.
SHORTEST = 16

#: Element-wise functions of one tensor, as C expressions of its element ``a0``.
_UNARY = {
    "tanh": "tanhf(a0)",
    "sigmoid": "1.0f / (1.0f + expf(-a0))",
    "relu": "(a0 > 0.0f ? a0 : 0.0f)",
    "neg": "-a0",
    "exp": "expf(a0)",
    "sin": "sinf(a0)",
    "cos": "cosf(a0)",
    "abs": "fabsf(a0)",
    "sqrt": "sqrtf(a0)",
}
#: Element-wise functions of two operands: C operators.
_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "truediv": "/"}
#: Ops returning their first argument itself where the layout already fits.
_ALIASES = ("type_as", "to", "contiguous", "detach")


class _Refused(Exception):
    """A node that cannot play natively."""


def _name(node: torch.fx.Node) -> str | None:
    """The operator a node calls, by name (``add``, ``add_``, ``leaky_relu``...)."""
    if node.op == "call_method":
        return str(node.target)
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        return "getitem"
    return compat.aten_name(node.target) or getattr(node.target, "__name__", None)


#: What an entry of the pointer table points at: a value made outside the runs (set at each
#: call from the tensor passed), a weight (read again at each call: a change swaps its
#: storage), the graph's own storage (caches, the passes' buffers) or a run's own buffer.
INPUT, WEIGHT, FIXED, OWN = "input", "weight", "fixed", "own"


@dataclass
class _Entry:
    """One pointer of the table: the tensor the layouts were recorded against and, but for an
    input, the tensor whose pointer it holds."""

    kind: str
    node: torch.fx.Node
    recorded: torch.Tensor
    live: torch.Tensor | None

    def storage(self) -> int:
        return self.recorded.untyped_storage().data_ptr()


class _Plan:
    """The pointer table of a graph's native runs, and each native node's value in it."""

    def __init__(self, gm: torch.fx.GraphModule, values: dict[torch.fx.Node, Any]) -> None:
        self.gm, self.values = gm, values
        targets = written_roots(gm.graph)
        self.written = {  # storage written in place (never swapped), as the call saw it
            values[n].untyped_storage().data_ptr()
            for n in gm.graph.nodes
            if n.op == "get_attr"
            and n.target in targets
            and isinstance(values.get(n), torch.Tensor)
        }
        self.entries: list[_Entry] = []
        self.roots: dict[torch.fx.Node, int] = {}  # a node's entry (through views and writes)
        self.native: dict[torch.fx.Node, str | None] = {}  # native nodes: their C (None: a view)
        self._by_storage: dict[int, int] = {}  # the graph's attributes' entries

    def attempt(self, node: torch.fx.Node) -> None:
        """Make ``node`` native, or raise :class:`_Refused` leaving the plan as it was."""
        kept = len(self.entries), dict(self.roots), dict(self._by_storage)
        try:
            self.native[node] = _statement(self, node)
        except Exception as error:  # arguments the writer does not expect: the node stays torch
            del self.entries[kept[0] :]
            self.roots, self._by_storage = kept[1], kept[2]
            if isinstance(error, _Refused):
                raise
            raise _Refused(f"{node}: {type(error).__name__}: {error}") from None

    def tensor(self, node: Any) -> torch.Tensor:
        value = self.values.get(node) if isinstance(node, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
            raise _Refused(f"{node} is not a float32 tensor")
        if value.device.type != "cpu":
            raise _Refused(f"{node} is not on the CPU")
        return value

    def entry_of(self, node: torch.fx.Node) -> int:
        """The table entry ``node``'s storage is reached through (a new one for an attribute
        or a value made outside the runs)."""
        if node in self.roots:
            return self.roots[node]
        tensor = self.tensor(node)
        if node.op != "get_attr":
            return self._add(node, _Entry(INPUT, node, tensor, None))
        storage = tensor.untyped_storage().data_ptr()
        if storage not in self._by_storage:
            live = attribute(self.gm, node.target)  # the call saw a copy of it
            if not isinstance(live, torch.Tensor) or _layout(live) != _layout(tensor):
                raise _Refused(f"{node} is not laid out as recorded")
            kind = FIXED if storage in self.written or _owned(node) else WEIGHT
            if kind == WEIGHT and not live.is_contiguous():  # a change swaps in a dense one
                raise _Refused(f"{node} is a weight not stored contiguous")
            self._by_storage[storage] = self._add(node, _Entry(kind, node, tensor, live))
        self.roots[node] = self._by_storage[storage]
        return self.roots[node]

    def inputs(self, nodes: list[torch.fx.Node]) -> list[torch.fx.Node]:
        """The values made outside the runs that ``nodes`` read, through views included."""
        found: dict[torch.fx.Node, None] = {}
        for node in nodes:
            for arg in node.all_input_nodes:
                entry = self.entries[self.roots[arg]] if arg in self.roots else None
                if entry is not None and entry.kind == INPUT:
                    found[entry.node] = None
        return list(found)

    def _add(self, node: torch.fx.Node, entry: _Entry) -> int:
        self.entries.append(entry)
        self.roots[node] = len(self.entries) - 1
        return self.roots[node]

    def operand(self, node: Any) -> Operand:
        """``node``'s value as an operand: its entry, offset and layout."""
        value = self.tensor(node)
        entry = self.entries[self.entry_of(node)]
        if entry.storage() != value.untyped_storage().data_ptr():
            raise _Refused(f"{node} is not in its source's storage")
        offset = value.storage_offset() - entry.recorded.storage_offset()
        operand = Operand(self.roots[node], offset, tuple(value.shape), tuple(value.stride()))
        _within(operand, entry.live if entry.live is not None else entry.recorded)
        return operand

    def alias(self, node: torch.fx.Node, source: Any) -> Operand:
        """``node``'s value lies in ``source``'s storage (a view, or what a write returns)."""
        if not isinstance(source, torch.fx.Node):
            raise _Refused(f"{node} views a constant")
        if source not in self.roots:
            self.entry_of(source)
        self.roots[node] = self.roots[source]
        return self.operand(node)

    def parts(self, node: torch.fx.Node, source: Any) -> None:
        """``node``'s value is a tuple of views of ``source`` (``chunk``), read by ``getitem``."""
        value = self.values.get(node)
        storage = self.tensor(source).untyped_storage().data_ptr()
        if not isinstance(value, tuple) or not all(
            isinstance(p, torch.Tensor) and p.untyped_storage().data_ptr() == storage for p in value
        ):
            raise _Refused(f"{node} is not made of views")
        self.entry_of(source)
        self.roots[node] = self.roots[source]

    def result(self, node: torch.fx.Node) -> Operand:
        """A buffer of the runs' own for ``node``'s new value, laid out as the call saw it."""
        value = self.tensor(node)
        buffer = torch.empty_strided(value.shape, value.stride())
        self._add(node, _Entry(OWN, node, value, buffer))
        return Operand(self.roots[node], 0, tuple(value.shape), tuple(value.stride()))

    def buffer(self, node: torch.fx.Node, sizes: tuple[int, ...]) -> Operand:
        """Contiguous scratch storage of the runs' own, for ``node``'s steps."""
        scratch = torch.empty(sizes)
        self.entries.append(_Entry(OWN, node, scratch, scratch))
        return Operand(len(self.entries) - 1, 0, sizes, tuple(scratch.stride()))

    def check(self, operand: Operand) -> Operand:
        """``operand`` (a view the C takes of an entry), refused where outside its storage."""
        entry = self.entries[operand.entry]
        _within(operand, entry.live if entry.live is not None else entry.recorded)
        return operand

    def returned(self, node: torch.fx.Node) -> torch.Tensor:
        """The tensor object standing for native ``node``'s value after its run (the same at
        every block), or raise :class:`_Refused` where it has none."""
        entry = self.entries[self.roots[node]]
        if entry.kind not in (FIXED, OWN) or self.kept(node):
            raise _Refused(f"{node} is read after its run from storage the run does not own")
        value = self.tensor(node)
        offset = value.storage_offset() - entry.recorded.storage_offset()
        live = entry.live
        return live.as_strided(value.shape, value.stride(), live.storage_offset() + offset)

    def kept(self, node: torch.fx.Node) -> bool:
        """Whether ``node``'s value may be kept past the block or written by torch: read by the
        graph's output, a module or a bending op, written into, or read through a view (one
        the call showed sharing its storage) that may be."""
        for user in node.users:
            if user.op in ("output", "call_module") or user.target == "forward":
                return True
            if user not in self.native and mutates(user) and user.args[0] is node:
                return True
            if self._shares(user, node) and self.kept(user):
                return True
        return False

    def _shares(self, node: torch.fx.Node, source: torch.fx.Node) -> bool:
        """Whether the call showed ``node``'s value in ``source``'s storage."""

        def storages(value: Any) -> set[int]:
            values = value if isinstance(value, tuple) else (value,)
            return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)}

        return bool(storages(self.values.get(node)) & storages(self.values.get(source)))


def _statement(plan: _Plan, node: torch.fx.Node) -> str | None:
    """The C for ``node`` (None for a view), or raise :class:`_Refused`. A node's new value
    gets its buffer last, once everything it reads is known to be playable."""
    name = _name(node)
    if name is None or node.op not in ("call_function", "call_method"):
        raise _Refused(f"{node} is not an operator call")
    args, kwargs = node.args, node.kwargs
    if not args:
        raise _Refused(f"{node}: arguments by keyword")
    source = args[0]
    if name == "chunk":
        plan.parts(node, source)
        return None
    if name == "getitem" and source in plan.native and isinstance(args[1], int):
        plan.tensor(node)
        plan.alias(node, source)
        return None
    for arg in [*args, *kwargs.values()]:
        for item in arg if isinstance(arg, (list, tuple)) else [arg]:
            if isinstance(item, torch.fx.Node) and not isinstance(
                plan.values.get(item), torch.Tensor
            ):
                raise _Refused(f"{node} reads a value that is not a tensor")
    if is_view(node) or name in _ALIASES or node.target is flow.latent:
        plan.tensor(node)
        plan.alias(node, source)
        return None
    if name == "copy_":
        copied = plan.operand(args[1])
        return csource.elementwise(plan.alias(node, source), [copied], "a0")
    if name == "mm":
        a, b = (plan.operand(x) for x in args[:2])
        if a.sizes[0] > MOST_ROWS or set(kwargs) - {"out"}:
            raise _Refused(f"{node}: a matrix product of {a.sizes[0]} rows")
        out = plan.alias(node, kwargs["out"]) if "out" in kwargs else plan.result(node)
        return csource.matrix_product(out, a, b)
    if name == "batch_norm" and node.target is torch.batch_norm and len(args) >= 8:
        x, weight, bias, mean, var, training, _, eps = args[:8]
        if training or mean is None or var is None or kwargs:
            raise _Refused(f"{node}: batch statistics")
        stats = [plan.operand(t) for t in (x, mean, var)]
        affine = [None if t is None else plan.operand(t) for t in (weight, bias)]
        _small(node, stats[0])
        return csource.batch_norm(plan.result(node), *stats, *affine, float(eps))
    if name in _SHAPED:
        return _SHAPED[name](plan, node)
    convolution = _convolution_arguments(node, name)
    if convolution is not None:
        return _conv1d(plan, node, *convolution)
    transposed = _transposed_arguments(node, name)
    if transposed is not None:
        return _conv_transpose1d(plan, node, *transposed)
    expression, operands = _pointwise(plan, node, name)
    for operand in operands:
        _small(node, operand)
    out = plan.alias(node, source) if name.endswith("_") else plan.result(node)
    _small(node, out)
    return csource.elementwise(out, operands, expression)


def _convolution_arguments(node: torch.fx.Node, name: str) -> tuple | None:
    """(input, weight, bias, stride, dilation, groups) of a convolution without padding, from
    torch's call or the passes' forms; None for anything else."""
    args = [single(a) for a in node.args]
    if node.kwargs:
        return None
    if node.target in (torch.conv1d, F.conv1d) and 2 <= len(args) <= 7:
        defaults = (None, 1, 0, 1, 1)  # bias, stride, padding, dilation, groups
        x, weight, bias, stride, padding, dilation, groups = [*args, *defaults[len(args) - 2 :]]
        if padding != 0:
            return None
        return x, weight, bias, stride, dilation, groups
    if node.target is grouped_conv1d and len(args) == 6:
        return tuple(args)
    if node.target in FORMS.values() and len(args) in (4, 5):
        stride = args[4] if len(args) == 5 else 1
        return args[0], args[1], args[2], stride, args[3], 1
    del name
    return None


def _transposed_arguments(node: torch.fx.Node, name: str) -> tuple | None:
    """(input, weight, bias, stride) of a transposed convolution without padding, one group,
    no dilation; None for anything else."""
    args = [single(a) for a in node.args]
    if node.kwargs:
        return None
    if node.target in (torch.conv_transpose1d, F.conv_transpose1d) and 2 <= len(args) <= 8:
        defaults = (None, 1, 0, 0, 1, 1)  # bias, stride, padding, output_padding, groups, dilation
        x, weight, bias, stride, padding, output_padding, groups, dilation = [
            *args,
            *defaults[len(args) - 2 :],
        ]
        if padding == 0 and output_padding == 0 and groups == 1 and dilation == 1:
            return x, weight, bias, stride
    if node.target is folded_conv_transpose1d and len(args) == 4:
        return tuple(args)
    del name
    return None


def _contiguous(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _weight(plan: _Plan, weight: Any) -> tuple[Operand, int]:
    """A convolution's weight ``[out, in, taps]`` and the stride of its rows read flat (``in``
    and ``taps`` as one dimension): refused where they cannot be."""
    operand = plan.operand(weight)
    _, channels, taps = operand.sizes
    _, s_channel, s_tap = operand.strides
    if taps == 1:
        return operand, s_channel
    if channels > 1 and s_channel != taps * s_tap:
        raise _Refused(f"{weight}'s rows are not flat")
    return operand, s_tap


def _added_bias(plan: _Plan, out: Operand, bias: Any) -> list[str]:
    """Adding a per-channel bias to ``out`` ([batch, channels, frames])."""
    if bias is None:
        return []
    b = plan.operand(bias)
    per_channel = Operand(b.entry, b.offset, (b.sizes[0], 1), (b.strides[0], 0))
    return [csource.elementwise(out, [out, per_channel], "a0 + a1")]


def _conv1d(plan: _Plan, node: torch.fx.Node, x, weight, bias, stride, dilation, groups) -> str:
    """A convolution of a few frames: its windows copied into rows, one matrix product per
    group (each weight row read once), the bias added."""
    if not all(isinstance(v, int) for v in (stride, dilation, groups)):
        raise _Refused(f"{node}: a convolution's arguments")
    X, (W, flat) = plan.operand(x), _weight(plan, weight)
    batch, _, _ = X.sizes
    out_channels, group_channels, taps = W.sizes
    out = plan.tensor(node)
    frames = out.shape[-1]
    if frames > MOST_ROWS or out_channels % groups:
        raise _Refused(f"{node}: a convolution of {frames} frames")
    s0, s1, s2 = X.strides
    sizes = (batch, groups, frames, group_channels, taps)
    window = plan.check(
        Operand(X.entry, X.offset, sizes, (s0, group_channels * s1, stride * s2, s1, dilation * s2))
    )
    rows = plan.buffer(node, window.sizes)
    result = plan.result(node)
    o0, o1, o2 = result.strides
    steps = [csource.elementwise(rows, [window], "a0")]
    per_group, width = out_channels // groups, group_channels * taps
    for b in range(batch):
        for g in range(groups):
            a = Operand(rows.entry, (b * groups + g) * frames * width, (frames, width), (width, 1))
            at = W.offset + g * per_group * W.strides[0]
            w = Operand(W.entry, at, (width, per_group), (flat, W.strides[0]))
            o = Operand(result.entry, b * o0 + g * per_group * o1, (frames, per_group), (o2, o1))
            steps.append(csource.matrix_product(o, a, w))
    return "\n".join(steps + _added_bias(plan, result, bias))


def _conv_transpose1d(plan: _Plan, node: torch.fx.Node, x, weight, bias, stride) -> str:
    """A transposed convolution of a few frames: each frame times the weight (each weight row
    read once), the frames' taps then added where they fall."""
    if not isinstance(stride, int):
        raise _Refused(f"{node}: a convolution's arguments")
    X, W = plan.operand(x), plan.operand(weight)
    if W.strides != _contiguous(W.sizes):
        raise _Refused(f"{weight} is not contiguous")
    batch, in_channels, frames = X.sizes
    _, out_channels, taps = W.sizes
    if frames > MOST_ROWS:
        raise _Refused(f"{node}: a convolution of {frames} frames")
    s0, s1, s2 = X.strides
    rows = plan.buffer(node, (batch, frames, in_channels))
    columns = plan.buffer(node, (batch, frames, out_channels * taps))
    result = plan.result(node)
    o0, o1, o2 = result.strides
    transposed = Operand(X.entry, X.offset, rows.sizes, (s0, s2, s1))
    steps = [csource.elementwise(rows, [transposed], "a0"), csource.elementwise(result, [], "0.0f")]
    width = out_channels * taps
    flat = Operand(W.entry, W.offset, (in_channels, width), (width, 1))
    for b in range(batch):
        a = Operand(rows.entry, b * frames * in_channels, (frames, in_channels), (in_channels, 1))
        c = Operand(columns.entry, b * frames * width, (frames, width), (width, 1))
        steps.append(csource.matrix_product(c, a, flat))
        for t in range(frames):
            at = Operand(result.entry, b * o0 + t * stride * o2, (out_channels, taps), (o1, o2))
            tap = Operand(columns.entry, (b * frames + t) * width, (out_channels, taps), (taps, 1))
            steps.append(csource.elementwise(at, [at, tap], "a0 + a1"))
    return "\n".join(steps + _added_bias(plan, result, bias))


def _parts(plan: _Plan, node: torch.fx.Node) -> str:
    """``stack`` and ``cat``: each part copied into its place in the result."""
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not isinstance(parts, (list, tuple)) or not isinstance(dim, int) or len(node.kwargs) > 1:
        raise _Refused(f"{node}: parts")
    operands = [plan.operand(p) for p in parts]
    result = plan.result(node)
    dim %= len(result.sizes)
    steps, at = [], 0
    for part in operands:
        sizes, strides = list(result.sizes), list(result.strides)
        offset = at * strides[dim]
        if _name(node) == "stack":
            del sizes[dim], strides[dim]
            at += 1
        else:
            sizes[dim] = part.sizes[dim]
            at += part.sizes[dim]
        place = Operand(result.entry, offset, tuple(sizes), tuple(strides))
        steps.append(csource.elementwise(place, [part], "a0"))
    return "\n".join(steps)


def _summed(plan: _Plan, node: torch.fx.Node) -> str:
    """``sum`` over some dimensions: the result zeroed, then every element added into it."""
    args = node.args
    dims = args[1] if len(args) > 1 else node.kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else node.kwargs.get("keepdim", False)
    if set(node.kwargs) - {"dim", "keepdim", "dtype"} or node.kwargs.get("dtype") is not None:
        raise _Refused(f"{node}: a sum's arguments")
    X = plan.operand(args[0])
    dims = range(len(X.sizes)) if dims is None else [dims] if isinstance(dims, int) else dims
    dims = {d % len(X.sizes) for d in dims}
    result = plan.result(node)
    kept = iter(result.strides)
    strides = []
    for d in range(len(X.sizes)):
        if d in dims:
            strides.append(0)
            if keepdim:
                next(kept)
        else:
            strides.append(next(kept))
    into = Operand(result.entry, 0, X.sizes, tuple(strides))
    zero = csource.elementwise(result, [], "0.0f")
    return zero + "\n" + csource.elementwise(into, [into, X], "a0 + a1")


def _flipped(plan: _Plan, node: torch.fx.Node) -> str:
    """``flip``: a copy read backwards along the dimensions named."""
    X = plan.operand(node.args[0])
    named = node.args[1:] if len(node.args) > 2 else node.args[1]  # x.flip(0, 1), flip(x, [0])
    dims = {d % len(X.sizes) for d in (named if isinstance(named, (list, tuple)) else [named])}
    offset = X.offset + sum((X.sizes[d] - 1) * X.strides[d] for d in dims)
    strides = tuple(-s if d in dims else s for d, s in enumerate(X.strides))
    backwards = plan.check(Operand(X.entry, offset, X.sizes, strides))
    return csource.elementwise(plan.result(node), [backwards], "a0")


def _reshaped(plan: _Plan, node: torch.fx.Node) -> str:
    """A reshape that copies: the elements in order into a contiguous result."""
    value = plan.tensor(node)
    if not value.is_contiguous():
        raise _Refused(f"{node}: a reshape")
    X = plan.operand(node.args[0])
    result = plan.result(node)
    return csource.elementwise(Operand(result.entry, 0, X.sizes, _contiguous(X.sizes)), [X], "a0")


#: Operators whose C depends on their result's shape, by name.
_SHAPED: dict[str, Callable[[_Plan, torch.fx.Node], str]] = {
    "stack": _parts,
    "cat": _parts,
    "sum": _summed,
    "flip": _flipped,
    "reshape": _reshaped,
}


def _pointwise(plan: _Plan, node: torch.fx.Node, name: str) -> tuple[str, list[Operand]]:
    """An element-wise op as a C expression and the operands it reads (``a0``, ``a1``)."""
    args, kwargs = node.args, dict(node.kwargs)
    base = name.rstrip("_")
    if base in ("ones_like", "zeros_like") and base == name:
        if kwargs.get("dtype") not in (None, torch.float32) or len(args) > 1:
            raise _Refused(f"{node}: another dtype")
        plan.tensor(args[0])
        return ("1.0f" if base == "ones_like" else "0.0f"), []
    first = plan.operand(args[0])
    if base in _UNARY and len(args) == 1 and not kwargs:
        return _UNARY[base], [first]
    if base == "leaky_relu" and not kwargs.get("inplace", False):
        slope = kwargs.get("negative_slope", args[1] if len(args) > 1 else 0.01)
        return f"(a0 > 0.0f ? a0 : a0 * {_scalar(slope)})", [first]
    if base == "softplus" and not set(kwargs) - {"beta", "threshold"}:
        beta = _scalar(kwargs.get("beta", args[1] if len(args) > 1 else 1.0))
        threshold = _scalar(kwargs.get("threshold", args[2] if len(args) > 2 else 20.0))
        scaled = f"(a0 * {beta})"
        return f"({scaled} > {threshold} ? a0 : log1pf(expf({scaled})) / {beta})", [first]
    if base == "pow" and len(args) == 2 and not kwargs and not isinstance(args[1], torch.fx.Node):
        return ("a0 * a0" if args[1] == 2 else f"powf(a0, {_scalar(args[1])})"), [first]
    if base in _BINARY and len(args) == 2 and set(kwargs) <= {"alpha"}:
        other, alpha = args[1], kwargs.get("alpha", 1)
        if alpha != 1 and base not in ("add", "sub"):
            raise _Refused(f"{node}: alpha")
        if not isinstance(other, torch.fx.Node):
            return f"a0 {_BINARY[base]} {_scalar(other * alpha)}", [first]
        scaled = "a1" if alpha == 1 else f"({_scalar(alpha)} * a1)"
        return f"a0 {_BINARY[base]} {scaled}", [first, plan.operand(other)]
    raise _Refused(f"{node}: {name} is not written natively")


def _within(operand: Operand, base: torch.Tensor) -> None:
    """Refuse an operand reaching outside its storage (a layout not as recorded)."""
    if not math.prod(operand.sizes):
        return
    start = base.storage_offset() + operand.offset
    reach = [(size - 1) * stride for size, stride in zip(operand.sizes, operand.strides,
                                                         strict=True)]  # fmt: skip
    first = start + sum(r for r in reach if r < 0)
    last = start + sum(r for r in reach if r > 0)
    if first < 0 or last * base.element_size() >= base.untyped_storage().nbytes():
        raise _Refused("an operand outside its storage")


def _scalar(value: Any) -> str:
    """A Python number as a C float literal."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(f"a scalar {value!r}")
    return literal(float(value))


def _small(node: torch.fx.Node, operand: Operand) -> None:
    """Refuse ``node`` where an operand is larger than :data:`MOST_ELEMENTS`."""
    if math.prod(operand.sizes) > MOST_ELEMENTS:
        raise _Refused(f"{node} is large")


@dataclass
class _Segment:
    """One native run: its nodes, the values made outside the runs it reads (through views
    too), and its nodes read after it by torch."""

    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node] = field(default_factory=list)
    outputs: list[torch.fx.Node] = field(default_factory=list)


def _layout(tensor: torch.Tensor) -> tuple:
    return tuple(tensor.shape), tensor.stride(), tensor.storage_offset(), tensor.dtype


def _owned(node: torch.fx.Node) -> bool:
    """Whether an attribute is storage the passes made (never swapped)."""
    return node.target.removeprefix("_direct_").startswith(OWNED)


def _planned(gm: torch.fx.GraphModule, values: dict[torch.fx.Node, Any]):
    """The plan and its runs: nodes that turn out not worth a run, or whose values torch
    reads after it from storage the runs do not own, stay torch and everything is planned
    again without them."""
    refused: set[torch.fx.Node] = set()
    while True:
        plan = _Plan(gm, values)
        for node in gm.graph.nodes:
            if node.op in ("call_function", "call_method") and node not in refused:
                with contextlib.suppress(_Refused):
                    plan.attempt(node)
        segments = _segments(gm.graph, plan)
        again = set()
        for segment in segments:
            if sum(plan.native[n] is not None for n in segment.nodes) < SHORTEST:
                again.update(segment.nodes)
                continue
            for node in segment.outputs:
                try:
                    plan.returned(node)
                except _Refused:
                    again.add(node)
        if not again:
            return plan, segments
        refused |= again


def _segments(graph: torch.fx.Graph, plan: _Plan) -> list[_Segment]:
    """Maximal runs of consecutive native nodes (attribute reads between them belong to none)
    with their inputs and outputs."""
    segments: list[_Segment] = []
    current: list[torch.fx.Node] = []
    for node in graph.nodes:
        if node.op == "get_attr":
            continue
        if node in plan.native:
            current.append(node)
        elif current:
            segments.append(_Segment(current))
            current = []
    if current:
        segments.append(_Segment(current))
    for segment in segments:
        segment.inputs = plan.inputs(segment.nodes)
        segment.outputs = [n for n in segment.nodes if any(u not in plan.native for u in n.users)]
    return segments


class NativeRun:
    """One native run's call: its inputs' and weights' pointers written into the table, the
    compiled function called, the fixed tensors standing for its outputs returned."""

    def __init__(
        self,
        function: Callable[..., None],
        table: ctypes.Array,
        inputs: list[tuple[int, tuple[int, ...], torch.Tensor]],
        weights: list[tuple[int, torch.Tensor]],
        outputs: tuple[torch.Tensor, ...],
        held: list[torch.Tensor],
    ) -> None:
        self.function, self.table = function, table
        self.inputs, self.weights, self.outputs = inputs, weights, outputs
        self.held = held  #: the tensors the table points into, kept alive with it

    def __call__(self, *values: torch.Tensor) -> Any:
        table = self.table
        for (entry, strides, spare), value in zip(self.inputs, values, strict=True):
            if value.stride() != strides:  # laid out otherwise than when recorded
                spare.copy_(value)
                value = spare
            table[entry] = value.data_ptr()
        for entry, weight in self.weights:
            table[entry] = weight.data_ptr()
        self.function(table)
        return self.outputs[0] if len(self.outputs) == 1 else self.outputs


def play_native(run: NativeRun, *inputs: torch.Tensor) -> Any:
    """One native run, in a graph (kept by dead-code elimination: it writes state)."""
    return run(*inputs)


torch.fx.node.has_side_effect(play_native)


def native_runs(gm: torch.fx.GraphModule) -> bool:
    """Play runs of at least :data:`SHORTEST` operators on small CPU tensors as compiled C, one
    call each (where a C compiler is found; else the runs stay torch, with a log line)."""
    if any(t.device.type != "cpu" for t in [*gm.parameters(), *gm.buffers()]):
        return False
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1 or "shape" not in placeholders[0].meta:
        return False
    values = recorded(gm)
    if values is None:
        return False
    breathe()
    copies = _copied_outputs(gm, values)
    plan, segments = _planned(gm, values)
    needed = [c for c in copies if c.args[0] in plan.native]  # else the output is torch's
    _dropped([c for c in copies if c not in needed])
    if not segments:
        return False
    functions = [
        csource.function(f"run{i}", [plan.native[n] for n in s.nodes if plan.native[n]])
        for i, s in enumerate(segments)
    ]
    try:
        compiled = library(csource.PRELUDE + "\n" + "\n".join(functions))
    except CompileError as error:
        log.warning("native runs not compiled (%s): the runs play torch", error)
        _dropped(needed)
        return False
    breathe()
    table = (ctypes.c_void_p * len(plan.entries))()
    held = [entry.live for entry in plan.entries if entry.live is not None]
    for index, entry in enumerate(plan.entries):
        if entry.live is not None:
            table[index] = entry.live.data_ptr()
    for index, segment in enumerate(segments):
        function = getattr(compiled, f"run{index}")
        function.argtypes, function.restype = [ctypes.c_void_p], None
        run = NativeRun(function, table, *_wiring(plan, segment), held)
        _replaced(gm, segment, run, plan.native.keys())
    for node in reversed([n for s in segments for n in s.nodes]):
        gm.graph.erase_node(node)
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    return True


def _copied_outputs(gm: torch.fx.GraphModule, values: dict) -> list[torch.fx.Node]:
    """A copy of each tensor the graph returns, made by torch: what the engine keeps of a block
    is a new tensor, so the run making it may write it into storage of its own."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    copies = []
    for node in output.all_input_nodes:
        if node.op in ("call_function", "call_method") and isinstance(
            values.get(node), torch.Tensor
        ):
            with gm.graph.inserting_before(output):
                copy = gm.graph.call_function(torch.clone, (node,))
            output.replace_input_with(node, copy)
            values[copy] = values[node].clone()
            copies.append(copy)
    return copies


def _dropped(copies: list[torch.fx.Node]) -> None:
    """Take copies made by :func:`_copied_outputs` out again."""
    for copy in copies:
        copy.replace_all_uses_with(copy.args[0])
        copy.graph.erase_node(copy)


def _wiring(plan: _Plan, segment: _Segment):
    """A run's inputs (entry, recorded strides, a spare laid out so), the weights it reads
    (entry, tensor) and the tensors standing for its outputs."""
    inputs = []
    for node in segment.inputs:
        value = plan.tensor(node)
        spare = torch.empty_strided(value.shape, value.stride())
        inputs.append((plan.roots[node], tuple(value.stride()), spare))
    read = {plan.roots[a] for n in segment.nodes for a in n.all_input_nodes if a in plan.roots}
    weights = [
        (index, plan.entries[index].live)
        for index in sorted(read)
        if plan.entries[index].kind == WEIGHT
    ]
    return inputs, weights, tuple(plan.returned(n) for n in segment.outputs)


def _replaced(
    gm: torch.fx.GraphModule, segment: _Segment, run: NativeRun, native: Collection[torch.fx.Node]
) -> None:
    """One call of ``run`` in place of ``segment``'s nodes, for the nodes that are not native
    (all native nodes are erased after)."""
    count = len(segment.outputs)
    results = called_before(
        gm, segment.nodes[0], "_native_", run, play_native, segment.inputs, count
    )
    for node, result in zip(segment.outputs, results, strict=True):
        result.meta.update({k: v for k, v in node.meta.items() if k in ("shape", "dtype")})
        node.replace_all_uses_with(result, delete_user_cb=lambda user: user not in native)
