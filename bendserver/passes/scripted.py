"""Runs of a graph's nodes played by TorchScript's interpreter: one call from Python per run.

A block of a small model is hundreds of small operators, and called from Python each costs
its arguments parsed and its result wrapped: about 4 us a call on a busy 2-core machine,
against 1.5 us from TorchScript's interpreter (the same kernels; 0.9 us from C++). So every run
of consecutive nodes that TorchScript can play becomes one TorchScript method, called once per
block; what it cannot play (a bending op, which reads its parameters and switch in Python; a
module call) stays a Python call between two runs.

Nothing is copied: the runs read the graph's weights, buffers and constants as the tensor
objects the graph module holds, so a weight change (a swap of a weight's data), an op parameter
written in place and a streaming cache written in place are what the next block reads. A
change of the graph's structure (an op added or removed) builds a new graph, whose runs are
written and compiled again off the audio thread (see :func:`scripted_runs`).
"""

from __future__ import annotations

import contextlib
import math
import operator
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from .. import compat
from ..slices import breathe
from ..tracing import flow
from .convolution import folded_conv_transpose1d, row_conv1d, strided_conv1d, tap_sum_conv1d
from .grouped import grouped_conv1d
from .nodes import attribute, called_before

#: Python functions a run may call: TorchScript compiles them with it.
_FUNCTIONS: dict[Callable[..., Any], str] = {
    strided_conv1d: "strided_conv1d",
    tap_sum_conv1d: "tap_sum_conv1d",
    row_conv1d: "row_conv1d",
    folded_conv_transpose1d: "folded_conv_transpose1d",
    grouped_conv1d: "grouped_conv1d",
}
_NAMES = {"torch": torch, "RuntimeError": RuntimeError, **{n: f for f, n in _FUNCTIONS.items()}}
_OPERATORS = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.truediv: "/",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.eq: "==",
    operator.ne: "!=",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
}
_READ = {flow.guard_bool: "bool({})", flow.guard_equal: "{}", flow.guard_len: "len({})"}
#: The fewest nodes a run must have: a call of a TorchScript method costs about what a few
#: operators called from Python do.
SHORTEST = 8
#: Nodes compiled in one method: TorchScript compiles a method in one call that keeps the
#: interpreter from the live audio, so a long run is compiled as several methods (the audio
#: getting its turns between them) and a method calling them in turn.
PIECE = 40


class _Unsupported(Exception):
    """A node TorchScript cannot play."""


class _Crossing(_Unsupported):
    """A value that is not a tensor would cross between TorchScript and Python: ``node`` (the
    one that reads or makes it) stays in Python."""

    def __init__(self, node: torch.fx.Node) -> None:
        super().__init__(f"{node.name} reads or makes a value that is not a tensor")
        self.node = node


class _Tensors:
    """The tensors the runs of one graph read, each once, by index."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.list: list[torch.Tensor] = []
        self._index: dict[int, int] = {}

    def read(self, node: torch.fx.Node) -> str:
        """A ``get_attr`` node's value as TorchScript source: ``t[i]`` for a tensor."""
        value = attribute(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            return _literal(value)
        if id(value) not in self._index:
            self._index[id(value)] = len(self.list)
            self.list.append(value)
        return f"t[{self._index[id(value)]}]"


class _Writer:
    """TorchScript statements for some consecutive nodes, and the values they read from
    outside (``inputs``)."""

    def __init__(self, tensors: _Tensors, nodes: list[torch.fx.Node]) -> None:
        self.tensors = tensors
        self.members = set(nodes)
        self.inputs: list[torch.fx.Node] = []
        self.lines: list[str] = []
        self._node: torch.fx.Node | None = None  # the node being written

    def value(self, arg: Any) -> str:
        """``arg`` (an fx node or a constant) as a TorchScript expression."""
        if isinstance(arg, torch.fx.Node):
            if arg.op == "get_attr":
                return self.tensors.read(arg)
            if arg not in self.members:
                if not _is_tensor(arg):
                    raise _Crossing(self._node)
                if arg not in self.inputs:
                    self.inputs.append(arg)
            return _name(arg)
        if isinstance(arg, (list, tuple)):
            return "[" + ", ".join(self.value(a) for a in arg) + "]"
        return _literal(arg)

    def _arguments(self, node: torch.fx.Node, skip: int = 0) -> str:
        parts = [self.value(a) for a in node.args[skip:]]
        parts += [f"{k}={self.value(v)}" for k, v in node.kwargs.items()]
        return ", ".join(parts)

    def write(self, node: torch.fx.Node) -> None:
        """Append the statement computing ``node``, or raise :class:`_Unsupported`."""
        self._node = node
        target, name = node.target, _name(node)
        if node.op == "call_method":
            if target == "forward" or not isinstance(node.args[0], torch.fx.Node):
                raise _Unsupported("a module's call")
            receiver = self.value(node.args[0])
            self.lines.append(f"{name} = {receiver}.{target}({self._arguments(node, 1)})")
        elif node.op != "call_function":
            raise _Unsupported(node.op)
        elif target in _READ:
            value, expected, step = node.args
            message = f"this input takes another path than the traced one: {step}"
            read = _READ[target].format(self.value(value))
            self.lines.append(f"if {read} != {self.value(expected)}:")
            self.lines.append(f"    raise RuntimeError({message!r})")
        elif target is flow.latent:
            self.lines.append(f"{name} = {self.value(node.args[0])}")
        elif target is operator.getitem:
            self.lines.append(f"{name} = {self._index(*node.args)}")
        elif target in _OPERATORS and len(node.args) == 2 and not node.kwargs:
            left, right = (self.value(a) for a in node.args)
            self.lines.append(f"{name} = {left} {_OPERATORS[target]} {right}")
        elif isinstance(target, types.MethodDescriptorType):  # torch.Tensor.copy_(x, y)
            receiver = self.value(node.args[0])
            self.lines.append(f"{name} = {receiver}.{target.__name__}({self._arguments(node, 1)})")
        else:
            self.lines.append(f"{name} = {_callee(target)}({self._arguments(node)})")

    def _index(self, source: Any, index: Any) -> str:
        """An index as slice and select calls, one per dimension sliced (TorchScript's own
        indexing slices every dimension named, ``:`` ones too); a list's item as it is."""
        if not (isinstance(source, torch.fx.Node) and _is_tensor(source)):
            return f"{self.value(source)}[{self.value(index)}]"
        expression = self.value(source)
        dim = 0
        for part in index if isinstance(index, tuple) else (index,):
            if isinstance(part, slice):
                if part != slice(None):
                    step = 1 if part.step is None else part.step
                    bounds = f"{_literal(part.start)}, {_literal(part.stop)}, {_literal(step)}"
                    expression = f"torch.ops.aten.slice({expression}, {dim}, {bounds})"
                dim += 1
            elif isinstance(part, int) and not isinstance(part, bool):
                expression = f"torch.ops.aten.select({expression}, {dim}, {part})"
            else:
                raise _Unsupported(f"an index {part!r}")  # ..., None, a tensor
        return expression


def _name(node: torch.fx.Node) -> str:
    return f"v_{node.name}"


def _is_tensor(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" or "shape" in node.meta


def _literal(value: Any) -> str:
    """A constant as TorchScript source."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, torch.device):
        return f'torch.device("{value}")'
    raise _Unsupported(f"a constant {value!r}")


def _callee(target: Any) -> str:
    """How TorchScript names the function ``target``."""
    if target in _FUNCTIONS:
        return _FUNCTIONS[target]
    name = compat.aten_name(target)
    if name is not None:
        return f"torch.ops.aten.{name}"  # the overload is chosen again by the arguments' types
    module = getattr(target, "__module__", None) or ""
    if isinstance(target, types.BuiltinFunctionType) and module.startswith("torch"):
        return f"{module}.{target.__name__}"
    if module == "torch.nn.functional" and getattr(F, target.__name__, None) is target:
        return f"torch.nn.functional.{target.__name__}"  # TorchScript compiles these itself
    raise _Unsupported(f"a call of {target!r}")


def _method(name: str, writer: _Writer, outputs: list[torch.fx.Node], lines: list[str]) -> str:
    """The TorchScript method ``name`` taking ``writer``'s inputs, running ``lines`` and
    returning ``outputs``."""
    arguments = "".join(f", {_name(n)}: Tensor" for n in writer.inputs)
    results = ", ".join(_name(n) for n in outputs)
    returns = {0: "None", 1: "Tensor"}.get(
        len(outputs), f"Tuple[{', '.join(['Tensor'] * len(outputs))}]"
    )
    body = "".join(f"    {line}\n" for line in ["t = self.t", *lines, f"return {results or None}"])
    return f"def {name}(self{arguments}) -> {returns}:\n{body}"


def _outputs(nodes: list[torch.fx.Node], after: list[torch.fx.Node] | None = None) -> list:
    """The nodes of ``nodes`` read after them (outside them, or by ``after``)."""
    members = set(nodes) - set(after or ())
    return [n for n in nodes if any(u not in members for u in n.users)]


class _Run:
    """One run of a graph: its method ``name``, calling its pieces in turn."""

    def __init__(self, tensors: _Tensors, nodes: list[torch.fx.Node], name: str) -> None:
        self.nodes, self.name = nodes, name
        self.outputs = _outputs(nodes)
        for node in self.outputs:
            if not _is_tensor(node):
                raise _Crossing(node)
        self.writer = _Writer(tensors, nodes)  # the run's own inputs
        self.sources: list[str] = []  # its pieces, then the run
        calls: list[str] = []
        for start, end in _pieces(nodes):
            piece = _Writer(tensors, nodes[start:end])
            for node in nodes[start:end]:
                piece.write(node)
            outputs = _outputs(nodes[start:end], nodes[end:])
            method = f"{name}_{len(self.sources)}"
            self.sources.append(_method(method, piece, outputs, piece.lines))
            for node in piece.inputs:
                self.writer.value(node)  # an input of the run, or an earlier piece's output
            call = f"self.{method}({', '.join(_name(n) for n in piece.inputs)})"
            calls.append(f"{', '.join(_name(n) for n in outputs)} = {call}" if outputs else call)
        self.sources.append(_method(name, self.writer, self.outputs, calls))


def _pieces(nodes: list[torch.fx.Node]) -> list[tuple[int, int]]:
    """Bounds of pieces of about :data:`PIECE` nodes, cut where only tensors cross."""
    bounds, start = [], 0
    for end in range(PIECE, len(nodes)):
        later = set(nodes[end:])
        if end - start >= PIECE and all(
            _is_tensor(n) or not (later & set(n.users)) for n in nodes[start:end]
        ):
            bounds.append((start, end))
            start = end
    return [*bounds, (start, len(nodes))]


def _runs(graph: torch.fx.Graph, refused: set[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """Maximal runs of consecutive computing nodes not in ``refused``, of at least
    :data:`SHORTEST` (attribute reads belong to no run: a run reads its tensors itself)."""
    runs: list[list[torch.fx.Node]] = [[]]
    for node in graph.nodes:
        if node.op == "get_attr":
            continue
        if node.op in ("call_function", "call_method") and node not in refused:
            runs[-1].append(node)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if len(run) >= SHORTEST]


def scripted_runs(gm: torch.fx.GraphModule) -> bool:
    """Play each run of at least :data:`SHORTEST` consecutive nodes that TorchScript can play
    as one call of a TorchScript method, which reads the graph's own tensors (CPU graphs)."""
    if any(t.device.type != "cpu" for t in [*gm.parameters(), *gm.buffers()]):
        return False  # a CUDA graph is captured whole (engine/cuda_graph.py)
    graph = gm.graph
    refused = {n for n in graph.nodes if not _playable(gm, n)}
    while True:
        tensors = _Tensors(gm)
        try:
            runs = [
                _Run(tensors, nodes, f"run{i}") for i, nodes in enumerate(_runs(graph, refused))
            ]
            break
        except _Crossing as crossing:  # that node stays in Python: its runs are written again
            if crossing.node in refused:
                raise RuntimeError(f"{crossing.node} was refused already") from None
            refused.add(crossing.node)
    if not runs:
        return False
    holder = compat.script_holder(
        tensors.list, [s for run in runs for s in run.sources], _NAMES.get, breathe
    )
    results: dict[torch.fx.Node, torch.fx.Node] = {}  # a run's outputs, as later runs read them
    for run in runs:
        _played(gm, run, getattr(holder, run.name), results)
    _first_calls(holder, tensors.list, runs)
    return True


def _playable(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Whether TorchScript can play ``node`` (which runs it may join is settled later)."""
    if node.op not in ("call_function", "call_method"):
        return False
    try:
        _Writer(_Tensors(gm), [node]).write(node)
    except _Crossing:
        return True
    except _Unsupported:
        return False
    return True


def _first_calls(
    holder: torch.jit.ScriptModule, played: list[torch.Tensor], runs: list[_Run]
) -> None:
    """Make each run's plan (its first call's work: a few milliseconds for a big run) by
    calling it once while ``holder`` holds uninitialised tensors in place of ``played`` (the
    graph's, put back after): what plays is never written, nor torch's random stream, and its
    first block on the audio thread plays at once."""
    holder.t = [torch.empty_like(t) for t in played]
    drawn = torch.random.get_rng_state()  # a run may draw (a RAVE encoder's latent noise)
    for run in runs:
        breathe()
        inputs = [
            torch.empty(tuple(n.meta.get("shape", ())), dtype=n.meta.get("dtype", torch.float32))
            for n in run.writer.inputs
        ]
        with torch.inference_mode(), contextlib.suppress(Exception):  # guards refuse garbage
            play(getattr(holder, run.name), *inputs)
    torch.random.set_rng_state(drawn)  # the stream a seeded render plays is left as it was
    holder.t = played


def play(run: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    """One run's call, without the TorchScript executor's optimisations: with them, the first
    calls profile the run and then optimise it for tens of milliseconds (on the audio thread);
    the plain plan is made once and plays as fast."""
    optimizing = compat.script_optimizing(False)
    try:
        return run(*inputs)
    finally:
        compat.script_optimizing(optimizing)


torch.fx.node.has_side_effect(play)


def _played(
    gm: torch.fx.GraphModule,
    run: _Run,
    method: Callable[..., Any],
    results: dict[torch.fx.Node, torch.fx.Node],
) -> None:
    """Put one call of the compiled ``method`` in place of ``run``'s nodes; ``results``: the
    nodes that stand for earlier runs' outputs (added to)."""
    graph = gm.graph
    members = set(run.nodes)
    inputs = [results.get(node, node) for node in run.writer.inputs]
    outputs = called_before(gm, run.nodes[0], "_scripted_", method, play, inputs, len(run.outputs))
    for node, result in zip(run.outputs, outputs, strict=True):
        results[node] = result
        result.meta.update(node.meta)
        node.replace_all_uses_with(result, delete_user_cb=lambda user: user not in members)
    for node in reversed(run.nodes):
        graph.erase_node(node)
    for node in list(graph.nodes):
        if node.op == "get_attr" and not node.users:
            graph.erase_node(node)
