"""BendedModule: wrap any ``nn.Module``, trace its methods, bend weights and activations.

The API is torchbend's (``trace``, ``activation_names``, ``bend``, ``reset``, ``write``,
``interpolate`` ...), with these differences: graph modules are cached and rebuilt only when the
set of activation ops changes, keys are regular expressions matched in full, an activation op
reaches every consumer of its node, several ops on one target chain, the wrapped module is never
modified, and a traced graph checks at call time that the input takes the traced path.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from tabulate import tabulate
from torch import nn

from ..errors import BendingError
from ..files import write_text
from ..slices import breathe
from ..tracing import BendingTracer, restoring_buffers
from ..tracing.script import ConversionError, ScriptConverter, assigned_attributes, setter_writes
from .base import BendingOp, BoundOp
from .config import BendingConfig
from .fold import FoldLayer, fold_layers, fold_states, folding_ops, reader_folds
from .graph import activation_nodes, graph_module, insert_ops
from .inert import inert_nodes
from .weights import DEFAULT_VERSION, WeightBank, shadow_copy

_FN_KEY = re.compile(r"([A-Za-z_]\w*):(.*)", re.DOTALL)


@dataclass
class _Bend:
    """One ``bend(op, *keys)`` call: its resolved weights, and whether it bends activations."""

    op: BendingOp
    keys: tuple[str, ...]
    weights: tuple[str, ...]
    activations: bool


@dataclass
class Targets:
    """What keys make an op bend: weights (as weight ops), activations of traced graphs, and
    the per-tensor states of the layers' outputs it folds into (TorchScript)."""

    weights: list[str]
    activations: list[str]
    folds: dict[str, Any]
    #: the states that would fold the op into the layers reading its activations instead (see
    #: :func:`~bendserver.bending.fold.reader_folds`; asked for by the engine's passes)
    readers: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Runner:
    """The cached bended graph module of one traced method."""

    module: torch.fx.GraphModule
    bended_nodes: dict[str, str]  # activation name -> node holding its bended value


class BendedModule:
    """A bendable view of ``module``.

    ``leaf_modules`` are module classes kept whole in traced graphs (standard ``torch.nn`` modules
    are leaves by default); ``traced_modules`` are ``torch.nn`` classes to trace into instead.
    """

    def __init__(
        self,
        module: nn.Module,
        leaf_modules: Sequence[type[nn.Module]] = (),
        traced_modules: Sequence[type[nn.Module]] = (),
    ) -> None:
        if not isinstance(module, nn.Module):
            raise BendingError(f"BendedModule wraps a torch.nn.Module, got {type(module).__name__}")
        self.module = module
        #: A TorchScript module cannot be copied with aliased weights: it is bended in place
        #: (whoever loaded it owns it); its methods are converted into graphs instead of traced.
        self.scripted = isinstance(module, torch.jit.ScriptModule)
        self._shadow = module if self.scripted else shadow_copy(module)
        #: A TorchScript module's layers whose output channels per-channel ops fold into (while
        #: none of its methods is converted).
        self.fold_layers: dict[str, FoldLayer] = fold_layers(module) if self.scripted else {}
        #: A TorchScript module's methods that could not be converted, with the reason: they
        #: play as direct scripted calls.
        self.unconverted: dict[str, str] = {}
        #: A TorchScript module's attributes as its setters left them (``path.attr`` -> value):
        #: what conversions read.
        self.script_attributes: dict[str, Any] = {}
        self._examples: dict[str, dict[str, Any]] = {}
        self._weights = WeightBank(module, self._shadow)
        self._leaf_modules = tuple(leaf_modules)
        self._traced_modules = tuple(traced_modules)
        self._graphs: dict[str, torch.fx.Graph] = {}
        #: Per method: the graph and its nodes that bending cannot change (:mod:`.bending.inert`).
        self._inert: dict[str, tuple[torch.fx.Graph, dict[str, str]]] = {}
        self._bends: list[_Bend] = []
        self._runners: dict[str, _Runner] = {}
        self._bound: dict[tuple[int, str, str], tuple[BendingOp, BoundOp]] = {}
        #: Independent streams along dim 0 of the traced activations (a batch of channels, set
        #: by an engine): an op's per-unit state is drawn once and shared across them.
        self.streams = 1

    def describe(self) -> str:
        return f"{type(self.module).__name__}(id = {id(self.module)})"

    def __repr__(self) -> str:
        return f"BendedModule({self.describe()}, traced={sorted(self._graphs)})"

    # -- weights -----------------------------------------------------------------------------

    @property
    def weight_bank(self) -> WeightBank:
        """Versions, interpolation and weight ops (for engines that prepare weight changes)."""
        return self._weights

    @property
    def weight_names(self) -> list[str]:
        return self._weights.names

    def weight_shape(self, name: str) -> torch.Size:
        return self._weight(name).shape

    def _weight(self, name: str) -> torch.Tensor:
        try:
            return self._weights.versions[DEFAULT_VERSION][name]
        except KeyError:
            raise BendingError(self._unknown("weight", name, self.weight_names)) from None

    def print_weights(self, out: str | None = None) -> str:
        """Print a table of the module's weights (name, shape, dtype, statistics); ``out`` also
        writes it to that file. Returns the table."""
        rows = []
        for name in self.weight_names:
            w = self._weight(name).detach()
            stats = w.float()
            std = stats.std().item() if w.numel() > 1 else 0.0
            rows.append(
                (
                    name,
                    w.shape,
                    w.dtype,
                    stats.min().item(),
                    stats.max().item(),
                    stats.mean().item(),
                    std,
                )
            )
        headers = ("name", "shape", "dtype", "min", "max", "mean", "stddev")
        return _emit(tabulate(rows, headers=headers), out)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The wrapped module's own state dict (never bended)."""
        return self.module.state_dict()

    def streaming_state(self) -> list[torch.Tensor]:
        """The buffers the bended module runs with, those a model makes on its first call
        included (streaming caches): what a reset restores."""
        return list(self._shadow.buffers())

    def bended_state_dict(self) -> dict[str, torch.Tensor]:
        """The state dict as the bended module sees it: versions, interpolation and weight ops."""
        self._weights.sync()
        return self._shadow.state_dict()

    # -- tracing and activations -------------------------------------------------------------

    def trace(self, fn: str = "forward", _return_out: bool = False, **inputs: Any) -> Any:
        """Trace method ``fn`` on example ``inputs`` (argument name -> value).

        Returns the graph (``graph.flow_steps`` lists the control-flow decisions it froze), or
        ``(graph, (output,))`` with ``_return_out=True``. Tracing again replaces the graph.
        """
        self._weights.sync()
        if self.scripted:
            graph, output = self._convert(fn, inputs)
        else:
            tracer = BendingTracer(self._leaf_modules, self._traced_modules)
            graph, output = tracer.trace_method(self._shadow, fn, inputs)
        self._graphs[fn] = graph
        self._forget_runners(fn)
        return (graph, (output,)) if _return_out else graph

    def _convert(self, fn: str, inputs: dict[str, Any]) -> tuple[torch.fx.Graph, Any]:
        """A TorchScript method as a graph (:mod:`bendserver.tracing.script`); a method that
        does not convert raises a ConversionError and is listed in ``unconverted``."""
        converter = ScriptConverter(self.module, self.script_attributes)
        try:
            graph = converter.convert(fn, inputs)
        except ConversionError as error:
            self.unconverted[fn] = str(error)
            raise
        self.unconverted.pop(fn, None)
        self._examples[fn] = dict(inputs)
        return graph, converter.output

    def set_attributes(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> bool:
        """A TorchScript module's attributes as its setters (``set_<name>(*arguments)``, in
        order) would leave them: the converted graphs that froze one of them are converted
        again (control side; the module itself is untouched). True when a graph changed. A
        setter the converter cannot follow (it reads an object of the file's own class) is
        refused where a converted graph reads what it assigns."""
        if not self.scripted:
            return False
        written: dict[str, Any] = {}
        for name, arguments in calls:
            try:
                writes, _ = setter_writes(self.module, name, arguments, written)
            except ConversionError as error:
                self._check_unfollowed(name, error)
                continue
            written.update(writes)
        self.script_attributes = written
        stale = [
            fn
            for fn, graph in self._graphs.items()
            if not all(
                _same(written.get(path, frozen), frozen)
                for path, frozen in getattr(graph, "attribute_reads", {}).items()
            )
        ]
        for fn in stale:
            self._graphs[fn], _ = self._convert(fn, self._examples[fn])
            self._forget_runners(fn)
        return bool(stale)

    def _check_unfollowed(self, name: str, error: ConversionError) -> None:
        """Refuse a setter the converter cannot follow where a converted graph reads an
        attribute it assigns (that graph would go on with the old value)."""
        assigned = assigned_attributes(self.module, f"set_{name}")
        readers = [
            fn for fn, graph in self._graphs.items() if assigned & set(graph.attribute_reads)
        ]
        if readers:
            raise BendingError(
                f"set_{name} cannot be followed into the converted graph of {', '.join(readers)} "
                f"({error}): the attribute cannot be set while it plays converted"
            )

    def argument_names(self, fn: str = "forward") -> list[str]:
        """The arguments of the module's method ``fn``, in order."""
        method = getattr(self.module, fn, None)
        if not callable(method):
            raise BendingError(f"{type(self.module).__name__} has no method '{fn}'")
        if self.scripted:
            return [a.name for a in method.schema.arguments[1:]]
        return list(inspect.signature(method).parameters)

    @property
    def traced_methods(self) -> list[str]:
        return list(self._graphs)

    def graph(self, fn: str = "forward") -> torch.fx.Graph:
        """The traced graph of ``fn`` (unbended)."""
        return self._graph(fn)

    def _graph(self, fn: str | None) -> torch.fx.Graph:
        fn = fn or "forward"
        if fn not in self._graphs:
            raise BendingError(
                f"'{fn}' is not traced yet: call trace('{fn}', <arg>=<example input>) first"
            )
        return self._graphs[fn]

    def graph_module(self, fn: str = "forward") -> torch.fx.GraphModule:
        """The traced graph of ``fn`` as a GraphModule on the module's own (unbended) weights."""
        return graph_module(self._graph(fn), [self.module, self._shadow])

    def bend_graph(self, fn: str = "forward") -> torch.fx.Graph:
        """The graph of ``fn`` with its activation ops inserted."""
        return self.compiled(fn).graph

    @property
    def folds(self) -> dict[str, FoldLayer]:
        """The layers per-channel ops fold into: a TorchScript module's, while none of its
        methods is converted into a graph (then every activation is a node)."""
        return self.fold_layers if self.scripted and not self._graphs else {}

    def activation_names(self, fn: str | None = None) -> list[str]:
        """The activations of ``fn`` (of a TorchScript module none of whose methods converted:
        its layers' outputs that per-channel ops fold into, whatever ``fn``)."""
        if self.folds:
            return list(self.folds)
        return [node.name for node in self._bendable(fn)]

    def _bendable(self, fn: str | None) -> list[torch.fx.Node]:
        """The activation nodes of ``fn`` that an op can change the output through."""
        inert = self._inert_nodes(fn)
        return [node for node in activation_nodes(self._graph(fn)) if node.name not in inert]

    def _inert_nodes(self, fn: str | None) -> dict[str, str]:
        """``fn``'s tensors that bending cannot change, with what to bend instead (cached per
        graph)."""
        graph = self._graph(fn)
        cached = self._inert.get(fn or "forward")
        if cached is None or cached[0] is not graph:
            tensors = {node.name for node in activation_nodes(graph)}
            inert = {k: v for k, v in inert_nodes(graph).items() if k in tensors}
            cached = self._inert[fn or "forward"] = (graph, inert)
        return cached[1]

    def activation_shape(self, name: str, fn: str | None = None) -> torch.Size:
        return self._activation(name, fn).meta["shape"]

    def _activation(self, name: str, fn: str | None) -> torch.fx.Node:
        nodes = {node.name: node for node in activation_nodes(self._graph(fn))}
        if name not in nodes:
            raise BendingError(self._unknown(f"activation of {fn or 'forward'}()", name, nodes))
        return nodes[name]

    def print_activations(self, fn: str | None = None, out: str | None = None) -> str:
        """Print a table of ``fn``'s activations (name, node kind, shape). Returns the table."""
        if self.folds:
            rows = [(f.name, f.kind, f.channels) for f in self.folds.values()]
            return _emit(tabulate(rows, headers=("name", "layer", "channels")), out)
        rows = [(n.name, n.op, n.meta["shape"]) for n in self._bendable(fn)]
        return _emit(tabulate(rows, headers=("name", "node", "shape")), out)

    def get_activations(
        self, *names: str, fn: str = "forward", bended: bool = True, **inputs: Any
    ) -> dict[str, torch.Tensor]:
        """Run ``fn`` on ``inputs`` and return the named activations (bended or not).

        Streaming state is left as it was. Traces ``fn`` first if it is not traced yet.
        """
        if fn not in self._graphs:
            self.trace(fn, **inputs)
        for name in names:
            self._activation(name, fn)
        if bended:
            runner = self._runner(fn)
            module, wanted = runner.module, {runner.bended_nodes.get(n, n): n for n in names}
        else:
            module, wanted = self.graph_module(fn), {n: n for n in names}
        args = [
            inputs[n.target]
            for n in module.graph.nodes
            if n.op == "placeholder" and n.target in inputs
        ]
        capture = _Capture(module, wanted)
        with torch.no_grad(), restoring_buffers(self._shadow):
            capture.run(*args)
        return {name: capture.values[name] for name in names}

    # -- bending -----------------------------------------------------------------------------

    def resolve(self, key: str) -> list[str]:
        """The weight and activation names a key matches (in full). Activations of methods
        other than ``forward`` are named ``fn:name``; a key ``fn:regex`` looks only there."""
        fn, pattern = self._split_key(key)
        names = [] if fn else [w for w in self.weight_names if pattern.fullmatch(w)]
        names += [a for a in self.folds if pattern.fullmatch(a)]
        for traced in [fn] if fn else list(self._graphs):
            prefix = "" if traced == "forward" else f"{traced}:"
            names += [prefix + a for a in self._matching_activations(pattern, traced)]
        if not names:
            self._refuse_inert(key, fn, pattern)
            everything = (
                self.weight_names
                + list(self.folds)
                + [
                    a if f == "forward" else f"{f}:{a}"
                    for f in self._graphs
                    for a in self.activation_names(f)
                ]
            )
            close = difflib.get_close_matches(key, everything, n=5, cutoff=0.4)
            hint = f"; closest names: {close}" if close else ""
            traced = (
                f" (traced methods: {sorted(self._graphs)})"
                if self._graphs
                else (
                    " (a TorchScript module: its weights bend, and its layers' outputs with "
                    f"{', '.join(folding_ops())} per channel; other activation ops need the "
                    "Python model)"
                    if self.scripted
                    else " (no method is traced yet: trace() to bend activations)"
                )
            )
            raise BendingError(f"key {key!r} matches no weight or activation{traced}{hint}")
        return names

    def _refuse_inert(self, key: str, fn: str | None, pattern: re.Pattern[str]) -> None:
        """Refuse a key naming tensors that bending cannot change, saying what to bend instead."""
        for traced in [fn] if fn else list(self._graphs):
            for name, why in self._inert_nodes(traced).items():
                if pattern.fullmatch(name):
                    raise BendingError(f"key {key!r}: bending '{name}' would change nothing: {why}")

    def _split_key(self, key: str) -> tuple[str | None, re.Pattern[str]]:
        match = _FN_KEY.fullmatch(key)
        fn, pattern = (match.group(1), match.group(2)) if match else (None, key)
        if fn is not None and fn not in self._graphs:
            if hasattr(type(self.module), fn):
                raise BendingError(f"key {key!r}: method '{fn}' is not traced yet; trace it first")
            fn, pattern = None, key
        try:
            return fn, re.compile(pattern)
        except re.error as error:
            raise BendingError(f"key {key!r} is not a valid regular expression: {error}") from None

    def _matching_activations(self, pattern: re.Pattern[str], fn: str) -> list[str]:
        return [name for name in self.activation_names(fn) if pattern.fullmatch(name)]

    def bend(self, op: BendingOp | BendingConfig, *keys: str) -> None:
        """Bend the weights and activations matching ``keys`` with ``op``, or apply a config.

        Ops on the same target chain in the order they were given.
        """
        if isinstance(op, BendingConfig):
            if keys:
                raise BendingError("bend(config) takes no keys: they are in the config")
            for entry_op, entry_keys in op.entries:
                self.bend(entry_op, *entry_keys)
            return
        if not isinstance(op, BendingOp):
            raise BendingError(f"bend() takes a bending op or a BendingConfig, got {op!r}")
        targets = self.targets(op, *keys)
        for name in targets.weights:
            self._weights.add_op(name, op)
        for name, state in targets.folds.items():
            self._weights.add_op(name, op, state)
        self._bends.append(
            _Bend(op, tuple(keys), tuple(targets.weights), bool(targets.activations))
        )
        if targets.activations:
            self._runners.clear()

    def targets(self, op: BendingOp, *keys: str, readers: bool = False) -> Targets:
        """What ``keys`` make ``op`` bend; raises a BendingError when a key matches nothing or
        the op cannot bend what it matches. ``readers``: also say how the op would fold into
        the layers reading its activations, where it can (one traced method, every activation
        folding)."""
        if not keys:
            raise BendingError("bend(op, *keys) needs at least one key (a regular expression)")
        weights: list[str] = []
        layers: list[str] = []
        activations: list[str] = []
        for key in keys:
            names = self.resolve(key)
            weights += [n for n in names if n in self._weights.slots and n not in weights]
            layers += [n for n in names if n in self.folds and n not in layers]
            activations += [
                n
                for n in names
                if n not in self._weights.slots and n not in self.folds and n not in activations
            ]
        if (activations or layers) and not op.bends_activations:
            raise BendingError(f"{op!r} bends weights only; keys {keys} match activations")
        if weights and not op.bends_weights:
            raise BendingError(f"{op!r} bends activations only, not weights like '{weights[0]}'")
        folds: dict[str, Any] = {}
        for name in layers:
            layer = self.folds[name]
            folds.update(fold_states(op, layer, self._weights.slots[layer.weight]))
        reading = self._reader_folds(op, activations) if readers else {}
        return Targets(weights, activations, folds, reading)

    def _reader_folds(self, op: BendingOp, activations: list[str]) -> dict[str, Any]:
        """The states folding ``op`` into the readers of every activation in ``activations``,
        or {} unless all fold (and the module has one traced method: a layer may be called
        by several, on inputs the op does not bend)."""
        if len(self._graphs) != 1 or not activations:
            return {}
        graph = next(iter(self._graphs.values()))
        states: dict[str, Any] = {}
        for name in activations:
            folded = reader_folds(op, graph, self.module, name)
            if folded is None or states.keys() & folded.keys():
                return {}
            states.update(folded)
        return states

    def bending_config(self) -> BendingConfig:
        """The current bends as a config bound to this module."""
        return BendingConfig(*((b.op, *b.keys) for b in self._bends), module=self)

    def reset(self) -> None:
        """Remove every op and interpolation and select the default version: the bended module
        computes exactly what the wrapped module does. Traces and stored versions are kept."""
        self._bends.clear()
        self._bound.clear()
        self._runners.clear()
        self._weights.clear_ops()
        self._weights.mix = None
        self._weights.select(DEFAULT_VERSION)

    # -- versions ----------------------------------------------------------------------------

    @property
    def version(self) -> str:
        return self._weights.version

    @version.setter
    def version(self, name: str | None) -> None:
        self._weights.select(name)

    @property
    def versions(self) -> list[str]:
        return list(self._weights.versions)

    def write(self, name: str) -> None:
        """Store the current bended weights as version ``name`` and select it. The weight ops are
        now part of that version, so they are removed; activation ops stay."""
        if name == DEFAULT_VERSION:
            raise BendingError(
                f"'{DEFAULT_VERSION}' is the module's own weights; pick another name"
            )
        self._weights.sync()
        self._weights.versions[name] = self._weights.snapshot()
        for bend in self._bends:
            bend.weights = ()
        self._bends = [b for b in self._bends if b.activations]
        self._weights.clear_ops()
        self._weights.mix = None
        self._weights.select(name)

    def create_version(self, name: str, source: nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Add version ``name`` from another module of the same architecture or a state dict."""
        self._weights.add_version(name, source)

    @contextlib.contextmanager
    def set_version(self, name: str | None = None) -> Iterator[None]:
        """Within the block, use version ``name`` (default: the module's own weights)."""
        previous = self.version
        self.version = name
        try:
            yield
        finally:
            self.version = previous

    def set_interpolation(self, mix: Mapping[str, float] | None = None, **weights: float) -> None:
        """Use a normalised weighted sum of versions from now on (``None``: stop interpolating)."""
        if mix is None and not weights:
            self._weights.set_mix(None)
        else:
            self._weights.set_mix({**(mix or {}), **weights})

    @contextlib.contextmanager
    def interpolate(self, *default_weight: float, **weights: float) -> Iterator[None]:
        """Within the block, use ``(w0 * default + sum(w_i * version_i)) / sum(w)``:
        ``interpolate(1.0, bended=1.0)``."""
        if len(default_weight) > 1:
            raise BendingError("interpolate() takes one positional weight, for the default version")
        mix = {DEFAULT_VERSION: default_weight[0]} if default_weight else {}
        previous = self._weights.mix
        self._weights.set_mix({**mix, **weights})
        try:
            yield
        finally:
            self._weights.set_mix(previous)

    # -- calling -----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("forward", args, kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("forward", args, kwargs)

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("module")
        if (
            module is None
            or name.startswith("_")
            or not callable(getattr(type(module), name, None))
        ):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return _BendedMethod(self, name)

    def _call(self, fn: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        self._weights.sync()
        runner = self._runners.get(fn)
        if runner is None:
            if fn not in self._graphs:
                return getattr(self._shadow, fn)(*args, **kwargs)
            runner = self._runner(fn)
        return runner.module.forward(*args, **kwargs)

    def compiled(self, fn: str = "forward") -> torch.fx.GraphModule:
        """The bended graph module of ``fn`` (built once per set of activation ops). Calling its
        ``forward`` skips the weight-sync check that calling the BendedModule does: for an engine
        that applies weight changes itself."""
        return self._runner(fn).module

    def _runner(self, fn: str) -> _Runner:
        """The bended graph module of ``fn``, built once per set of activation ops."""
        runner = self._runners.get(fn)
        if runner is None:
            bends = [(b.op, b.keys) for b in self._bends if b.activations]
            runner = self._runners[fn] = self._build(fn, bends)
        return runner

    def build(
        self, fn: str, bends: Sequence[tuple[BendingOp, Sequence[str]]]
    ) -> torch.fx.GraphModule:
        """A bended graph module of ``fn`` with the given activation ``(op, keys)`` bends, in
        order, whatever this module's own bends are: for an engine that keeps its own. An op
        keeps its per-activation state across builds until :meth:`release`."""
        return self._build(fn, bends).module

    def release(self, *ops: BendingOp) -> None:
        """Forget the per-activation state of ``ops`` (an engine no longer uses them)."""
        gone = {id(op) for op in ops}
        self._bound = {k: v for k, v in self._bound.items() if id(v[0]) not in gone}

    def _build(self, fn: str, bends: Sequence[tuple[BendingOp, Sequence[str]]]) -> _Runner:
        graph = self._graph(fn)
        nodes = {node.name: node for node in activation_nodes(graph)}
        order: list[tuple[str, str]] = []
        extra: dict[str, BoundOp] = {}
        for op, keys in bends:
            breathe()
            for name in self._bend_targets(keys, fn):
                bound = self._bind(op, fn, nodes[name])
                module_name = f"bend_{len(order)}"
                order.append((name, module_name))
                extra[module_name] = bound
        graph, bended_nodes = insert_ops(graph, order)
        return _Runner(graph_module(graph, [self._shadow], extra), bended_nodes)

    def _bend_targets(self, keys: Sequence[str], fn: str) -> list[str]:
        names: list[str] = []
        for key in keys:
            key_fn, pattern = self._split_key(key)
            if key_fn in (None, fn):
                names += [n for n in self._matching_activations(pattern, fn) if n not in names]
        return names

    def _bind(self, op: BendingOp, fn: str, node: torch.fx.Node) -> BoundOp:
        """The op bound to one activation; reused across rebuilds so its state carries on."""
        key = (id(op), fn, node.name)
        if key not in self._bound:
            target = node.name if fn == "forward" else f"{fn}:{node.name}"
            shape, dtype = node.meta["shape"], node.meta["dtype"]
            state = op.init_state(target, self._per_stream(op, shape), dtype, self._device())
            self._bound[key] = (op, BoundOp(op, target, shape, state))
        return self._bound[key][1]

    def _per_stream(self, op: BendingOp, shape: torch.Size) -> torch.Size:
        """The shape an op's state is drawn for: one stream's (batch 1), so that every stream
        is bent alike, unless the op bends along dim 0 itself (``dim=0``)."""
        dims = getattr(op, "dim", None)
        along_batch = 0 in (dims if isinstance(dims, tuple) else (dims,))
        if self.streams == 1 or along_batch or not shape or shape[0] != self.streams:
            return shape
        return torch.Size((1, *shape[1:]))

    def _device(self) -> torch.device:
        first = next(iter(self._weights.slots.values()), None)
        return first.device if first is not None else torch.device("cpu")

    def _forget_runners(self, fn: str) -> None:
        self._runners.pop(fn, None)
        self._bound = {k: v for k, v in self._bound.items() if k[1] != fn}

    @staticmethod
    def _unknown(kind: str, name: str, known: Sequence[str] | Mapping[str, Any]) -> str:
        close = difflib.get_close_matches(name, list(known), n=5, cutoff=0.4)
        hint = f"; closest: {close}" if close else f"; known: {list(known)[:20]}"
        return f"no {kind} named {name!r}{hint}"


class _BendedMethod:
    """``bended.encode``: calls the module's method ``encode``, bended."""

    def __init__(self, bended: BendedModule, name: str) -> None:
        self.bended = bended
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.bended._call(self.__name__, args, kwargs)


class _Capture(torch.fx.Interpreter):
    """Runs a graph module and keeps the values of some nodes."""

    def __init__(self, module: torch.fx.GraphModule, wanted: Mapping[str, str]) -> None:
        super().__init__(module)
        self.wanted = wanted
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        value = super().run_node(n)
        if n.name in self.wanted:
            self.values[self.wanted[n.name]] = value
        return value


def _emit(table: str, out: str | None) -> str:
    print(table)
    if out is not None:
        write_text(out, table + "\n")
    return table


def _same(a: Any, b: Any) -> bool:
    """Whether two attribute values are the same: tensors by identity, containers item by item."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b
