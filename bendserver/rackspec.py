"""Rack specs: which model methods a rack plays and how they are joined, from ``-m`` or TOML.

Repeated ``-m`` chain their models in order (``-m drive -m wavae``); each is ``model``,
``model.method`` (``wavae.encode``) or ``file.ts:method``. A rack file (TOML, docs/rack.md)
names its nodes and may join them in any graph without loops, parallel branches mixed with a
gain each; an edge with a ``name`` becomes a node of its own whose ``latent`` activation is
bendable like any other (latent controls between two models).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from .bending.module import BendedModule
from .engine.node import Node
from .engine.rack import IN, OUT, Edge, Rack
from .errors import BendingError
from .limits import MAX_RACK_BYTES, MAX_RACK_EDGES, MAX_RACK_NODES
from .loader import LoadedModel, MethodSpec, load_model, model_source
from .midi.mappings import Mapping
from .paths import SHIPPED_RACKS
from .presets.library import Preset, load_preset, preset_for
from .readers import read_toml
from .roots import ROOT_WORDS
from .tracing.flow import latent

#: A node's name: what its OSC addresses start with.
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class NodeSpec:
    """One node: ``model``'s ``method``, under ``name``, with a preset (None: the model's own;
    ``"none"``: no preset)."""

    name: str
    model: str
    method: str = "forward"
    preset: str | None = None

    def load(
        self,
        block: int | None = None,
        device: str = "cpu",
        optimize: str = "passes",
        streams: int | None = None,
        search: Iterable[str | Path] = (),
        code_from: Iterable[str | Path] | None = None,
    ) -> tuple[Node, list[Mapping]]:
        """The node (its own copy of its model) playing ``block`` (None: the model's), and the
        MIDI mappings of its preset: the one given, else the model's own for ``forward`` (a
        model's preset bends its forward, not its other methods). ``code_from``: where its
        Python code may come from (:func:`bendserver.loader.check_code`; None: anywhere)."""
        model = load_model(self.model, device, search, code_from=code_from)
        chosen = self.preset
        if chosen is None and self.method != "forward":
            chosen = "none"
        name = preset_for(model, chosen)
        preset = load_preset(name) if name is not None else None
        node = Node(
            model,
            self.method,
            model.block if block is None else block,
            device=device,
            preset=preset,
            optimize=optimize,
            streams=streams,
        )
        return node, preset.midi if preset is not None else []


@dataclass(frozen=True)
class EdgeSpec:
    """An edge; with ``name``, a bendable node on it (its activation ``latent``)."""

    source: str
    target: str
    gain: float = 1.0
    name: str | None = None


@dataclass(frozen=True)
class RackSpec:
    """Nodes and edges (empty: a chain in the nodes' order)."""

    nodes: tuple[NodeSpec, ...]
    edges: tuple[EdgeSpec, ...] = field(default=())

    @classmethod
    def chain(cls, models: Sequence[str]) -> RackSpec:
        """The rack of repeated ``-m``: each ``model[.method]`` or ``file.ts:method``, in order,
        named after its model (and method), ``_2``... where a name repeats."""
        nodes: list[NodeSpec] = []
        for text in models:
            model, method = split_method(text)
            base = _safe_name(Path(model).stem if "/" in model or "." in model else model)
            base = base if method == "forward" else f"{base}_{method}"
            name, count = base, 1
            while any(node.name == name for node in nodes):
                count += 1
                name = f"{base}_{count}"
            nodes.append(NodeSpec(name, model, method))
        return cls(tuple(nodes))

    @classmethod
    def find(cls, name: str) -> RackSpec:
        """The rack file ``name``: a path, else a shipped rack's name (``wavae_drive``)."""
        path = Path(name)
        shipped = SHIPPED_RACKS / f"{path.stem}.toml"
        if not path.exists() and path.name == name and shipped.is_file():
            return cls.read(shipped)
        if not path.exists():
            names = sorted(p.stem for p in SHIPPED_RACKS.glob("*.toml"))
            raise BendingError(
                f"no rack file {name}: give the path of a TOML rack file or a shipped rack's "
                f"name ({', '.join(names) or 'none shipped'})"
            )
        return cls.read(path)

    @classmethod
    def read(cls, path: Path) -> RackSpec:
        """A rack file (TOML): ``[[node]]`` tables (``name``, ``model``, ``method``, ``preset``)
        and ``[[edge]]`` tables (``from``, ``to``, ``gain``, ``name``); no edges: a chain.
        Model paths are relative to the file."""
        data = read_toml(path, "rack file", MAX_RACK_BYTES)
        unknown = set(data) - {"node", "edge"}
        if unknown:
            raise BendingError(f"rack file {path}: unknown keys {sorted(unknown)} (node, edge)")
        nodes = tuple(_node(path, i, table) for i, table in enumerate(_tables(path, data, "node")))
        edges = tuple(_edge(path, i, table) for i, table in enumerate(_tables(path, data, "edge")))
        if not nodes:
            raise BendingError(f"rack file {path} has no [[node]]: a rack plays at least one")
        return cls(nodes, edges)

    def check(self) -> None:
        """Names are valid and distinct (the ends ``in`` and ``out`` are taken); at most
        :data:`MAX_RACK_NODES` nodes (named edges included) and :data:`MAX_RACK_EDGES` edges."""
        names = [node.name for node in self.nodes] + [e.name for e in self.edges if e.name]
        if len(names) > MAX_RACK_NODES or len(self.edges) > MAX_RACK_EDGES:
            raise BendingError(
                f"a rack plays at most {MAX_RACK_NODES} nodes (named edges included) joined by "
                f"at most {MAX_RACK_EDGES} edges; this one has {len(names)} and {len(self.edges)}"
            )
        for name in names:
            if not NAME.match(name) or name in (IN, OUT) or name in ROOT_WORDS:
                raise BendingError(
                    f"rack name {name!r}: a letter, then letters, digits, '_' or '-', and not "
                    f"'in', 'out' (the rack's ends) nor {', '.join(sorted(ROOT_WORDS))} (OSC "
                    "addresses start with them)"
                )
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise BendingError(f"rack names must differ: {repeated} given more than once")

    def build(
        self,
        block: int | None = None,
        device: str = "cpu",
        optimize: str = "passes",
        streams: int | None = None,
        fuse: bool = True,
        search: Iterable[str | Path] = (),
        preset: str | None = None,
    ) -> Rack:
        """Load every node (each its own copy of its model) and join them into a rack playing
        ``block`` (None: the first model's). ``preset`` (what ``-p`` sets) is a rack's preset
        (``/preset/save`` of a rack: each node it names gets its part), else the first node's
        where its spec gives none; a node's default is its model's own preset (none for a
        method other than ``forward``)."""
        self.check()
        search = tuple(search)
        whole = _rack_preset(preset)
        nodes: dict[str, Node] = {}
        for index, spec in enumerate(self.nodes):
            if index == 0 and spec.preset is None and whole is None:
                spec = replace(spec, preset=preset)
            nodes[spec.name], _ = spec.load(block, device, optimize, streams, search)
            block = nodes[spec.name].block
        edges = self._edges(nodes, block, device, optimize, streams)
        rack = Rack(nodes, edges, fuse)
        if whole is not None:
            rack.load_parts(whole)
            rack.apply_due()
        return rack

    def _edges(
        self,
        nodes: dict[str, Node],
        block: int | None,
        device: str,
        optimize: str,
        streams: int | None,
    ) -> list[Edge] | None:
        """The rack's edges, a named edge made a node of its own (None: a chain)."""
        if not self.edges:
            return None
        edges: list[Edge] = []
        for edge in self.edges:
            if edge.name is None:
                edges.append(Edge(edge.source, edge.target, edge.gain))
                continue
            source = nodes.get(edge.source)
            if source is None:
                raise BendingError(
                    f"edge {edge.name!r} starts at {edge.source!r}: a named edge leaves a node"
                )
            nodes[edge.name] = Node(
                wire(source, edge.name),
                block=block,
                device=device,
                optimize=optimize,
                streams=streams,
            )
            edges += [Edge(edge.source, edge.name), Edge(edge.name, edge.target, edge.gain)]
        return edges


def _rack_preset(name: str | None) -> Preset | None:
    """The rack's preset ``name`` names (None: none, or one model's preset)."""
    if name is None or name == "none":
        return None
    preset = load_preset(name)
    return preset if preset.nodes else None


class Wire(torch.nn.Module):
    """What an edge carries, passed through a node named ``latent`` (bendable by any op)."""

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(latent(self.encode(x)))


def wire(source: Node, name: str) -> LoadedModel:
    """A model passing ``source``'s output on as it is, at its rate and channels."""
    spec = source.spec
    carried = MethodSpec(spec.out_channels, spec.out_ratio, spec.out_channels, spec.out_ratio)
    return LoadedModel(
        name=name,
        bended=BendedModule(Wire()),
        sample_rate=source.sample_rate,
        block=source.block,
        block_multiple=spec.out_ratio,
        methods={"forward": carried},
        description=f"the edge {name}",
    )


def counted(rack: Rack) -> str:
    """What a rack plays, as the banner and ``info`` say it: its model nodes, and the named
    edges that are nodes of their own (``4 nodes and the named edge z``)."""
    edges = [n for n in rack.order if isinstance(rack.nodes[n].bended.module, Wire)]
    models = len(rack.nodes) - len(edges)
    nodes = f"{models} node{'s' if models > 1 else ''}"
    if not edges:
        return nodes
    return f"{nodes} and the named edge{'s' if len(edges) > 1 else ''} {', '.join(edges)}"


def split_method(text: str) -> tuple[str, str]:
    """``model.method`` or ``file.ts:method`` into (model, method); a plain model, a folder,
    a file or ``file.py:Class`` plays ``forward``."""
    text = model_source(text)
    if ":" in text:
        model, method = text.rsplit(":", 1)
        if model.endswith(".ts") and method.isidentifier():
            return model, method
        return text, "forward"
    if "/" not in text and not Path(text).exists() and "." in text:
        model, method = text.rsplit(".", 1)
        if model and method.isidentifier() and method not in ("ts", "py"):
            return model, method
    return text, "forward"


def _safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", text)
    return name if name[:1].isalpha() else f"m{name}"


def _tables(path: Path, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise BendingError(f"rack file {path}: '{key}' is a list of tables ([[{key}]])")
    return tables


def _text(path: Path, what: str, table: dict[str, Any], key: str, default: Any = None) -> Any:
    value = table.get(key, default)
    if value is not None and not isinstance(value, str):
        raise BendingError(f"rack file {path}, {what}: '{key}' is text, got {value!r}")
    return value


def _node(path: Path, index: int, table: dict[str, Any]) -> NodeSpec:
    what = f"node {index + 1}"
    _only(path, what, table, {"name", "model", "method", "preset"})
    model = _text(path, what, table, "model")
    if model is None:
        raise BendingError(f'rack file {path}, {what}: give its model (model = "drive")')
    local = path.parent / model
    model = str(local) if local.exists() else model
    if _text(path, what, table, "method") is None:
        model, method = split_method(model)
    else:
        method = table["method"]
    name = _text(path, what, table, "name") or _safe_name(Path(model).stem)
    return NodeSpec(name, model, method, _text(path, what, table, "preset"))


def _edge(path: Path, index: int, table: dict[str, Any]) -> EdgeSpec:
    what = f"edge {index + 1}"
    _only(path, what, table, {"from", "to", "gain", "name"})
    source, target = _text(path, what, table, "from"), _text(path, what, table, "to")
    if source is None or target is None:
        raise BendingError(f"rack file {path}, {what}: give 'from' and 'to' (node names)")
    gain = table.get("gain", 1.0)
    if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not -16 <= gain <= 16:
        raise BendingError(f"rack file {path}, {what}: 'gain' is a number in [-16, 16]")
    return EdgeSpec(source, target, float(gain), _text(path, what, table, "name"))


def _only(path: Path, what: str, table: dict[str, Any], keys: set[str]) -> None:
    unknown = set(table) - keys
    if unknown:
        raise BendingError(
            f"rack file {path}, {what}: unknown keys {sorted(unknown)} ({', '.join(sorted(keys))})"
        )
