"""Export a rack as one nn~ TorchScript file: each node exported as a single model is, played
in the rack's order by one ``forward``.

Each node (a named edge included) is what :func:`~bendserver.export.model.export_model` writes for
its model, method and preset, held as a submodule (``node_<i>``). The root's ``forward`` feeds
the nodes as the live :class:`~bendserver.engine.rack.Rack` does: each edge scaled by its gain,
the edges into a node summed, a branch that arrives early delayed by a line held in the file's
buffers (the same delays the live rack aligns its branches with); a node's preset gain and
dry/wet mix are applied as the live node applies them. Each node's attribute ``<a>`` is the
file's ``<node>_<a>``. Nothing of bendserver is needed to load it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from torch import nn

from ..engine.node import Node
from ..engine.rack import IN, OUT, Rack
from ..errors import BendingError
from ..files import writing
from ..loader import LoadedModel
from ..presets.library import Preset
from ..rackspec import RackSpec, wire
from .model import FLOAT_ATTRIBUTE, export_model


def export_rack(
    spec: RackSpec,
    output: str | Path,
    block: int | None = None,
    search: Iterable[str | Path] = (),
    preset: str | None = None,
    presets: Mapping[str, str | Path | Preset] | None = None,
) -> list[str]:
    """Write the rack ``spec`` (each node with its preset; ``preset``: the first node's where
    its spec gives none, as ``-p``; ``presets``: a preset for some nodes by name, a named edge
    included) to ``output`` as one nn~ file playing blocks of ``block`` samples (default: the
    first model's) through ``forward``. Returns the file's attributes."""
    search = tuple(search)
    rack = spec.build(block, optimize="none", fuse=False, search=search, preset=preset)
    for name, given in (presets or {}).items():
        if name not in rack.nodes:
            raise BendingError(
                f"no node '{name}' to give a preset: the rack's are {list(rack.nodes)}"
            )
        rack.nodes[name].load_preset(given)
        rack.nodes[name].apply_due()
    sources = _sources(spec, rack)
    nodes: dict[str, nn.Module] = {}
    attributes: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for index, name in enumerate(rack.order):
            node = rack.nodes[name]
            path = Path(folder) / f"node_{index}.ts"
            attributes[name] = export_model(
                sources[name],
                path,
                node.preset(name),
                rack.block,
                search,
                node.model.latency,
                [node.method],
            )
            nodes[name] = torch.jit.load(str(path))
    root = torch.jit.script(_Root(rack, nodes, attributes))
    root.define(_source(rack, attributes))
    with writing(output) as temp:
        torch.jit.save(root, str(temp))
    return list(root.get_attributes())


def _sources(spec: RackSpec, rack: Rack) -> dict[str, str | LoadedModel]:
    """What each node of the built ``rack`` is exported from: its model as the spec names it,
    or, for a named edge, a fresh passing model like the one the rack plays."""
    sources: dict[str, str | LoadedModel] = {node.name: node.model for node in spec.nodes}
    for edge in spec.edges:
        if edge.name is not None:
            sources[edge.name] = wire(rack.nodes[edge.source], edge.name)
    return sources


def _attribute(node: str, attribute: str) -> str:
    return f"{node.replace('-', '_')}_{attribute}"


def _file_attributes(rack: Rack, attributes: dict[str, list[str]]) -> list[str]:
    """The file's attributes, ``<node>_<a>`` in the rack's order; refused where two meet."""
    names = [_attribute(node, a) for node in rack.order for a in attributes[node]]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise BendingError(
            f"the rack's attributes {repeated} would be given twice in one file: rename the "
            "nodes so that no node's name and op id join into another's"
        )
    return names


def _delays(rack: Rack) -> dict[tuple[str, int], int]:
    """Frames each delayed edge is delayed by, keyed by (target, the edge's place among the
    target's inputs)."""
    return {
        (target, place): edge.delay.frames
        for target in [*rack.order, OUT]
        for place, edge in enumerate(rack.inputs(target))
        if edge.delay is not None
    }


class _Root(nn.Module):
    """The file's root: the nodes (``node_<i>`` in the rack's order), a delay line per delayed
    edge, nn~'s buffers, ``sr`` and ``block_size``."""

    def __init__(
        self, rack: Rack, nodes: dict[str, nn.Module], attributes: dict[str, list[str]]
    ) -> None:
        super().__init__()
        for index, name in enumerate(rack.order):
            self.add_module(f"node_{index}", nodes[name])
        for index, ((target, place), frames) in enumerate(_delays(rack).items()):
            channels = _channels(rack, rack.inputs(target)[place].source)
            block = rack.block // _ratio(rack, target)
            self.register_buffer(f"delay_{index}", torch.zeros(1, channels, frames + block))
        self.sr = int(rack.sample_rate)
        self.block_size = int(rack.block)  #: the one block size the file plays
        spec = rack.spec
        params = [spec.in_channels, spec.in_ratio, spec.out_channels, spec.out_ratio]
        self.register_buffer("forward_params", torch.tensor(params))
        for attribute in _file_attributes(rack, attributes):
            self.register_buffer(f"{attribute}_params", torch.tensor([FLOAT_ATTRIBUTE]))


def _channels(rack: Rack, source: str) -> int:
    if source == IN:
        return rack.spec.in_channels
    return rack.nodes[source].spec.out_channels


def _ratio(rack: Rack, target: str) -> int:
    """Audio samples per frame of what ``target`` takes."""
    return rack.spec.out_ratio if target == OUT else rack.nodes[target].spec.in_ratio


def _source(rack: Rack, attributes: dict[str, list[str]]) -> str:
    """TorchScript source of the root's methods: ``forward`` (the rack's graph), ``_delayed``
    (a delay line, as the live rack's), ``get_methods`` (readies every node's weights, as nn~
    and bendserver call it on load), ``get_attributes`` and the forwarding setters, getters."""
    index = {name: i for i, name in enumerate(rack.order)}
    lines = [
        "def _delayed(self, line: Tensor, x: Tensor) -> Tensor:",
        "    frames = line.size(-1) - x.size(-1)",
        "    line[:, :, frames:].copy_(x)",
        "    out = line[:, :, : x.size(-1)].clone()",
        "    line[:, :, :frames].copy_(line[:, :, x.size(-1) :].clone())",
        "    return out",
        "def forward(self, x: Tensor) -> Tensor:",
        f"    assert x.size(-1) == {rack.in_frames}, "
        f'"this file was exported for blocks of {rack.block} samples: set that buffer size"',
    ]
    values = {IN: "x"}
    delays = {key: i for i, key in enumerate(_delays(rack))}
    for target in [*rack.order, OUT]:
        terms = []
        for place, edge in enumerate(rack.inputs(target)):
            term = values[edge.source]
            if (target, place) in delays:
                term = f"self._delayed(self.delay_{delays[target, place]}, {term})"
            if edge.gain != 1.0:
                term = f"{term} * {edge.gain!r}"
            terms.append(term)
        lines.append(f"    {_variable(target, index)}_in = {' + '.join(terms)}")
        if target == OUT:
            break
        lines += _node_lines(rack.nodes[target], f"node_{index[target]}", _variable(target, index))
        values[target] = _variable(target, index)
    lines.append("    return out_in")
    lines += ["def get_methods(self) -> List[str]:"]
    lines += [f"    self.node_{i}.get_methods()" for i in range(len(rack.order))]
    lines += ['    return ["forward"]']
    lines += ["def get_attributes(self) -> List[str]:"]
    lines += [f"    return {_file_attributes(rack, attributes)!r}"]
    for name in rack.order:
        for attribute in attributes[name]:
            node, own = f"self.node_{index[name]}", _attribute(name, attribute)
            lines += [f"def set_{own}(self, value: float) -> int:"]
            lines += [f"    return {node}.set_{attribute}(value)"]
            lines += [f"def get_{own}(self) -> float:", f"    return {node}.get_{attribute}()"]
    return "\n".join(lines) + "\n"


def _variable(target: str, index: dict[str, int]) -> str:
    return "out" if target == OUT else f"y{index[target]}"


def _node_lines(node: Node, path: str, variable: str) -> list[str]:
    """The node's call, then its preset's dry/wet mix and gain where they are not 1 (what the
    live node does after its model)."""
    lines = [f"    {variable} = self.{path}.{node.method}({variable}_in)"]
    same = (node.spec.in_channels, node.spec.in_ratio) == (
        node.spec.out_channels,
        node.spec.out_ratio,
    )
    if same and node.mix != 1.0:
        lines.append(
            f"    {variable} = {variable}_in + ({variable} - {variable}_in) * {node.mix!r}"
        )
    if node.gain != 1.0:
        lines.append(f"    {variable} = {variable} * {node.gain!r}")
    return lines
