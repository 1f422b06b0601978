"""Export a bended model as an nn~ TorchScript file whose attributes move the bending.

The file follows nn~'s conventions: ``get_methods()``, a ``<method>_params`` buffer
``[in_channels, in_ratio, out_channels, out_ratio]`` per method, ``sr``, and ``get_attributes()``
with ``set_<a>``/``get_<a>`` (``<a>_params`` holds the type id, 2: float). Each live parameter of
the preset's ops is an attribute ``<op>_<param>``. A Python model's methods are the bended graphs
the engine plays (activation ops included), traced with ``torch.jit`` for one block size; a
TorchScript file's converted methods are its bended graphs too (a file that does not convert is
wrapped as it is). Weight ops and the ops folded into a TorchScript file's weights are
recomputed inside the file when one of their attributes is set; each weight is stored once (a
bended one shares its source's storage in the file until first use). Nothing of
bendserver is needed to load it: ``torch.jit.load`` is enough.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..bending.base import BendingOp, BoundOp
from ..bending.config import BendingConfig
from ..bending.fold import bend_tensor, folds_last
from ..bending.module import BendedModule
from ..bending.ops import Modulate
from ..errors import BendingError
from ..files import writing
from ..loader import LoadedModel, load_model
from ..modulation.oscillators import as_oscillate, steps_at
from ..presets.fit import check_fit
from ..presets.library import Preset, load_preset, preset_for
from ..tracing import restoring_buffers
from ..tracing.script import ConversionError

#: nn~'s type id of a float attribute.
FLOAT_ATTRIBUTE = 2


def export_model(
    model: str | Path | LoadedModel,
    output: str | Path,
    preset: str | Path | Preset | None = None,
    block: int | None = None,
    search: Iterable[str | Path] = (),
    latency: int | None = None,
    methods: Sequence[str] | None = None,
) -> list[str]:
    """Write ``model`` bended by ``preset`` (ops, version or interpolation; not the host's gain,
    mix nor fuse) to ``output`` as an nn~ file, for blocks of ``block`` samples (default: the
    model's) where it is a Python model (``latency``: given, not measured at load), with its
    ``methods`` (default: all; each is traced). Returns the file's attributes."""
    loaded = load_model(model, search=search, latency=latency)
    if methods is not None:
        loaded = replace(loaded, methods={name: loaded.method(name) for name in methods})
    block = int(loaded.block if block is None else block)
    bended = loaded.bended
    _check_block(loaded, block)
    for slot in bended.weight_bank.slots.values():  # the tensors the file runs with
        slot.requires_grad_(False)
    graphs = _trace_methods(loaded, block)
    ops = _bend(loaded, preset, block)
    methods, bound = _traced_methods(loaded, block) if graphs else (loaded.module, [])
    weights = _WeightRefresh(bended)
    with warnings.catch_warnings():  # tracing a fixed loop over the weights: as intended
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced_weights = torch.jit.trace(weights, torch.zeros(()), check_trace=False)
    fixed = block if graphs else 0  # bended graphs play one block size; a wrapped .ts any
    wrapper = torch.jit.script(_NnTilde(loaded, methods, traced_weights, ops, fixed))
    wrapper.define(_source(loaded, block, ops, _op_paths(ops, weights, bound), graphs, weights))
    with writing(output) as temp, weights.stored_once():
        torch.jit.save(wrapper, str(temp))
    return list(wrapper.get_attributes())


def _check_block(loaded: LoadedModel, block: int) -> None:
    for name, spec in loaded.methods.items():
        for ratio in (spec.in_ratio, spec.out_ratio):
            if block <= 0 or block % ratio or block % loaded.block_multiple:
                raise BendingError(
                    f"model '{loaded.name}' ({name}) cannot stream blocks of {block}: give "
                    f"--block a multiple of {loaded.block_multiple} and of its ratios"
                )


def _trace_methods(loaded: LoadedModel, block: int) -> bool:
    """Trace every method at the block shape (what the engine does for one; a TorchScript
    file's are converted). False when a TorchScript file's method does not convert: the file
    is then wrapped as it is."""
    for name, spec in loaded.methods.items():
        argument = loaded.bended.argument_names(name)[0]
        example = torch.zeros(1, spec.in_channels, block // spec.in_ratio)
        try:
            loaded.bended.trace(name, **{argument: example})
        except ConversionError:
            return False
    return True


def _bend(
    loaded: LoadedModel, preset: str | Path | Preset | None, block: int
) -> dict[str, BendingOp]:
    """Apply the preset's ops (the enabled ones) and weights; returns the ops by id. A
    ``Modulate`` its LFO modulator drives is the ``Oscillate`` it plays (a file has no
    modulators)."""
    if preset is None or isinstance(preset, str):
        preset = preset_for(loaded, preset)
    if preset is None:
        return {}
    preset = preset if isinstance(preset, Preset) else load_preset(preset)
    bended = loaded.bended
    config = BendingConfig.from_dict(preset.config)
    check_fit(preset, config, bended, loaded.name)
    if preset.interpolation:
        bended.set_interpolation(preset.interpolation)
    elif preset.version:
        bended.version = preset.version
    ops = {}
    for op_id, op in config.ops.items():
        if op_id in preset.disabled:
            continue
        keys = [k for o, ks in config.entries if o is op for k in ks]
        if isinstance(op, Modulate) and preset.modulators:
            activations = bended.targets(op, *keys).activations
            steps = steps_at(bended, activations, op.dim, loaded.sample_rate / block)
            op = as_oscillate(op_id, op, preset.modulators, steps)
        bended.bend(op, *keys)
        ops[op_id] = op
    return ops


class _Methods(nn.Module):
    """The bended graphs of a Python model's methods, one submodule each, traced together."""

    def __init__(self, graphs: dict[str, nn.Module]) -> None:
        super().__init__()
        self.graphs = nn.ModuleDict({f"{name}_graph": graph for name, graph in graphs.items()})
        for module in self.modules():
            if isinstance(module, BoundOp):
                _register_state(module, module.state)


def _register_state(module: nn.Module, state: Any, prefix: str = "state") -> None:
    """Make an op's per-target tensors (fields, LFO phases) buffers of its bound module, so
    that the traced file reads and updates them as its own state."""
    if isinstance(state, torch.Tensor):
        module.register_buffer(prefix, state)
    elif isinstance(state, dict):
        for key, value in state.items():
            _register_state(module, value, f"{prefix}_{key}")


def _traced_methods(
    loaded: LoadedModel, block: int
) -> tuple[torch.jit.ScriptModule, list[tuple[str, BendingOp]]]:
    """The model's bended methods traced for ``block``, its streaming state as it was, and the
    activation ops in them (path of the bound module in the file, op)."""
    graphs = {name: loaded.bended.compiled(name) for name in loaded.methods}
    methods = _Methods(graphs)
    examples = {}
    for name, spec in loaded.methods.items():
        examples[name] = torch.zeros(1, spec.in_channels, block // spec.in_ratio)
        setattr(methods, name, graphs[name].forward)  # what trace_module calls for ``name``
    with torch.no_grad(), restoring_buffers(methods), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shapes fixed: as intended
        traced = torch.jit.trace_module(methods, examples, check_trace=False)
    bound = [(f"model.{p}", m.op) for p, m in methods.named_modules() if isinstance(m, BoundOp)]
    return traced, bound


class _WeightRefresh(nn.Module):
    """Recomputes the bended weights in place from their sources and the ops' parameters
    (traced; the file calls it when an attribute of a weight op or a fold is set)."""

    def __init__(self, bended: BendedModule) -> None:
        super().__init__()
        bank = bended.weight_bank
        self.names = [name for name, chain in bank.ops.items() if chain]
        self.chains = {name: folds_last(bank.ops[name]) for name in self.names}
        ops = {id(op): op for chain in self.chains.values() for op, _ in chain}
        self.ops = nn.ModuleDict({f"op_{i}": op for i, op in enumerate(ops.values())})
        self.slots = [bank.slots[name] for name in self.names]
        for index, slot in enumerate(self.slots):
            self.register_buffer(f"source_{index}", bank.source(self.names[index]).detach().clone())
            self.register_buffer(f"target_{index}", slot)  # the tensor the graphs hold

    @contextlib.contextmanager
    def stored_once(self) -> Iterator[None]:
        """Meanwhile, each bended weight shares its source's storage: saved, the file holds one
        copy of it, and gives it storage of its own when first used (``_ready``)."""
        bent = [slot.data for slot in self.slots]
        for index, slot in enumerate(self.slots):
            slot.data = getattr(self, f"source_{index}")
        try:
            yield
        finally:
            for slot, tensor in zip(self.slots, bent, strict=True):
                slot.data = tensor

    def op_path(self, op: BendingOp) -> str | None:
        """Where ``op`` is in the file (None: it bends no weight)."""
        return next((f"weights.ops.{k}" for k, o in self.ops.items() if o is op), None)

    def forward(self, tick: torch.Tensor) -> torch.Tensor:
        for index, name in enumerate(self.names):
            weight = getattr(self, f"source_{index}")
            for op, state in self.chains[name]:
                weight = bend_tensor(op, state, weight)
            getattr(self, f"target_{index}").copy_(weight)
        return tick


class _NnTilde(nn.Module):
    """The exported file's root: the methods, the weight refresh, nn~'s buffers, ``sr`` and
    ``block_size`` (the one block size its graphs play, which bendserver loads it with)."""

    def __init__(
        self,
        loaded: LoadedModel,
        methods: nn.Module,
        weights: nn.Module,
        ops: dict[str, BendingOp],
        block_size: int,
    ) -> None:
        super().__init__()
        self.model = methods
        self.weights = weights
        self.sr = int(loaded.sample_rate)
        self.block_size = block_size  #: the one block size the file plays (0: any)
        for name, spec in loaded.methods.items():
            params = [spec.in_channels, spec.in_ratio, spec.out_channels, spec.out_ratio]
            self.register_buffer(f"{name}_params", torch.tensor(params))
        for attribute in _attributes(ops):
            self.register_buffer(f"{attribute}_params", torch.tensor([FLOAT_ATTRIBUTE]))
        self.register_buffer("tick", torch.zeros(()))
        self.weights_ready = False


def _attributes(ops: dict[str, BendingOp]) -> list[str]:
    return [f"{op_id}_{param}" for op_id, op in ops.items() for param in op.params]


def _source(
    loaded: LoadedModel,
    block: int,
    ops: dict[str, BendingOp],
    paths: dict[str, tuple[bool, list[str]]],
    graphs: bool,
    weights: _WeightRefresh,
) -> str:
    """TorchScript source of the file's methods, getters and setters (``graphs``: the methods
    are bended graphs for one block size). Each starts with ``_ready``: the bended weights,
    saved sharing their sources' storage, get their own and are computed (once, on first use;
    nn~ and bendserver call ``get_methods`` when they load a file)."""
    lines = ["def _ready(self) -> int:", "    if not self.weights_ready:"]
    lines += [
        f"        self.weights.target_{i}.set_(self.weights.source_{i}.clone())"
        for i in range(len(weights.names))
    ]
    lines += ["        self.weights(self.tick)", "        self.weights_ready = True"]
    lines += ["    return 0"]
    for name, spec in loaded.methods.items():
        frames = block // spec.in_ratio
        lines += [f"def {name}(self, x: Tensor) -> Tensor:", "    self._ready()"]
        if graphs:
            lines += [
                f"    assert x.size(-1) == {frames}, "
                f'"this file was exported for blocks of {block} samples: set that buffer size"'
            ]
        lines += [f"    return self.model.{name}(x)"]
    lines += ["def get_methods(self) -> List[str]:", "    self._ready()"]
    lines += [f"    return {list(loaded.methods)!r}"]
    lines += ["def get_attributes(self) -> List[str]:", f"    return {_attributes(ops)!r}"]
    for op_id, op in ops.items():
        refresh, places = paths[op_id]
        for param in op.params:
            where = [f"self.{path}._{param}" for path in places]
            lines += [f"def set_{op_id}_{param}(self, value: float) -> int:", "    self._ready()"]
            lines += [f"    {tensor}.fill_(value)" for tensor in where]
            if refresh:
                lines += ["    self.weights(self.tick)"]
            lines += ["    return 0"]
            lines += [f"def get_{op_id}_{param}(self) -> float:", f"    return float({where[0]})"]
    return "\n".join(lines) + "\n"


def _op_paths(
    ops: dict[str, BendingOp], weights: _WeightRefresh, bound: Sequence[tuple[str, BendingOp]]
) -> dict[str, tuple[bool, list[str]]]:
    """Per op: whether setting it recomputes weights, and where its parameter tensors live in
    the file (the weight refresh, the graphs' bound ops)."""
    paths = {}
    for op_id, op in ops.items():
        in_weights = weights.op_path(op)
        places = [] if in_weights is None else [in_weights]
        places += [f"{path}.op" for path, bound_op in bound if bound_op is op]
        paths[op_id] = (in_weights is not None, places)
    return paths
