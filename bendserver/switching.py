"""``/model/load`` and ``/<node>/load``: another model loaded, checked and warmed up on the
control side, then swapped live into the rack that plays (``Rack.swap``).

The steps, each on the control worker's thread (queries are answered between them): the file
is loaded and called once in a forked child first (:mod:`bendserver.probe`, unless
``--trust-model``), so a model that crashes, fails, or gives the wrong shape or NaN never enters
the server; then it is loaded here, traced and optimised into a node for the block, rate and
channels of the node it replaces, which must match; its preset's ``Oscillate`` ops become
``Modulate`` ops; it plays the last blocks that node was given (its caches filled, its first
block not slow), and must give finite values without errors; then the rack crossfades to it at
a block boundary, the rack's modulators driving it from that block on (the LFO modulators of
those ops made, the replaced node's gone), and the old node, once replaced, is freed here.
Any refusal leaves the old model playing and says why.
"""

from __future__ import annotations

import gc
import math
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .codegen import compile_aside
from .compat import call_at_each_fx_node, unlink_fx_node
from .engine.node import Node
from .engine.rack import Rack
from .engine.switch import checked_fade
from .errors import BendingError
from .limits import LOAD_INTERVAL
from .loader import TORCHSCRIPT_SUFFIXES, check_code, model_location
from .midi.mappings import Mapping
from .modulation.oscillators import joining
from .probe import probe_model
from .rackspec import NodeSpec, RackSpec, split_method
from .slices import breathe

#: Seconds to wait for the crossfade beyond its own length (the audio may be stopped).
FADE_GRACE = 2.0

#: Builds a node playing a model (``model[.method]``) with a preset name (None: the model's
#: own) like a node that plays, with the MIDI mappings of that preset.
Builder = Callable[[str, "str | None", Node], "tuple[Node, list[Mapping]]"]


@dataclass
class Loaded:
    """What a switch did: the node that plays and its name, its preset's mappings, and what
    each step took (seconds; the probe's None when skipped)."""

    name: str
    node: Node
    mappings: list[Mapping]
    probe_s: float | None
    load_s: float
    warm_s: float
    swapped: bool  #: the crossfade finished while we waited


class ModelSwitcher:
    """Loads models into the nodes of ``rack`` live, crossfading over ``fade_ms``; ``search``:
    folders to find model names in; ``trust``: skip the probe; ``code_from``: folders beside
    the model folders that Python code may be imported from (a load names its model in a
    message: :func:`bendserver.loader.check_code`). ``build`` makes a node like a playing one
    for another model (default: :meth:`node_like`)."""

    def __init__(
        self,
        rack: Rack,
        search: Iterable[str | Path] = (),
        trust: bool = False,
        fade_ms: float = 50.0,
        build: Builder | None = None,
        code_from: Iterable[str | Path] = (),
    ) -> None:
        self.rack = rack
        self.search = list(search)
        self.code_from = list(code_from)
        self.trust = trust
        self.fade_ms = checked_fade(fade_ms)
        self.build = self.node_like if build is None else build
        self.switches = 0  #: models swapped in
        self.loading: str | None = None  #: the model a load in progress loads
        self._began = -math.inf  #: when the last load began (``time.monotonic``)
        compile_aside()  # a load's generated code compiled off the interpreter the audio needs
        call_at_each_fx_node(breathe)  # and its graph work pausing at any node for a block

    def node_like(self, source: str, preset: str | None, like: Node) -> tuple[Node, list[Mapping]]:
        """A node like ``like`` (block, streams, device, optimisation) playing another model
        (``model[.method]``) with ``preset``, and that preset's MIDI mappings."""
        model, method = split_method(source)
        spec = NodeSpec("incoming", model, method, preset)
        return spec.load(
            like.block, str(like.device), like.optimize, like.streams, self.search, self.code_from
        )

    def load(self, source: str, preset: str | None = None, node: str | None = None) -> Loaded:
        """Probe, load, check and warm up ``source`` (with ``preset``) for node ``node`` (None:
        the only node, which then takes the new model's name), swap it in and wait for the
        crossfade; a BendingError (the old model still playing) says why not. One load runs at
        a time, and their work (the probe on) begins at most once every :data:`LOAD_INTERVAL`
        seconds."""
        if self.loading is not None:
            raise BendingError(
                f"a load of {self.loading!r} runs: one load at a time; send this one again once "
                "it is answered"
            )
        self.loading = source
        try:
            return self._load(source, preset, node)
        finally:
            self.loading = None

    def _load(self, source: str, preset: str | None, node: str | None) -> Loaded:
        """:meth:`load`, once it may run."""
        rack = self.rack
        rack.check_idle()
        if not source.strip():
            raise BendingError("a load takes a model: a name, a model folder or a .ts file")
        name, rename = self._place(source, node)
        old = rack.nodes[name]
        self._free()
        model = split_method(source)[0]
        location = model_location(model, self.search)
        if location is not None and location.suffix not in TORCHSCRIPT_SUFFIXES:
            check_code(model, location, self.search, self.code_from)  # before the probe runs it
        wait = self._began + LOAD_INTERVAL - time.monotonic()
        if wait > 0:
            raise BendingError(
                f"a load began {LOAD_INTERVAL - wait:.2f} s ago: loads begin at most one every "
                f"{LOAD_INTERVAL:g} s; send this one again in {wait:.2f} s"
            )
        self._began = time.monotonic()
        started = time.perf_counter()
        probed = not self.trust and probe_model(
            model, self.search, check=True, block=old.block, code_from=self.code_from
        )
        probe_s = time.perf_counter() - started if probed else None
        breathe()
        loading = time.perf_counter()
        try:
            new, mappings = self.build(source, preset, old)
        except BendingError:
            raise
        except Exception as error:  # the model's own code failed (a trusted model, unprobed)
            raise BendingError(
                f"model {source!r} failed to load: {type(error).__name__}: {error}"
            ) from None
        if new.sample_rate != old.sample_rate:
            raise BendingError(
                f"model {source!r} runs at {new.sample_rate} Hz; the rack plays "
                f"{old.sample_rate} Hz: serve it at its own rate (a server of its own)"
            )
        breathe()
        brings = joining(rack, old, new)  # its Oscillate ops played by LFO modulators
        warming = time.perf_counter()
        self._warm_up(new, name, source)
        warm_s = time.perf_counter() - warming
        rack.swap(name, new, self.fade_ms, rename, brings)
        self.switches += 1
        swapped = self._wait_for_fade()
        self._free()
        breathe()
        gc.collect()  # the load's own garbage (a tracer's cycles), before the worker freezes
        return Loaded(rename or name, new, mappings, probe_s, warming - loading, warm_s, swapped)

    def _place(self, source: str, node: str | None) -> tuple[str, str | None]:
        """The node a load replaces and its name afterwards (None: the same)."""
        nodes = self.rack.nodes
        if node is not None:
            if node not in nodes:
                raise BendingError(f"no rack node {node!r} (nodes: {self.rack.names})")
            return node, None
        if len(nodes) > 1:
            raise BendingError(
                f"/model/load replaces a one-model server's model; this rack plays "
                f"{self.rack.names}: load into one of them (/<node>/load MODEL [PRESET])"
            )
        (name,) = nodes
        return name, RackSpec.chain([source]).nodes[0].name

    def _warm_up(self, node: Node, name: str, source: str) -> None:
        """Play the last blocks node ``name`` was given into ``node`` (silence before any), and
        refuse it if it failed or gave values that are not finite."""
        nonfinite = 0
        blocks = self.rack.recent[name].blocks()
        for chunk in blocks:
            out = node.process(chunk)
            nonfinite += int(np.count_nonzero(~np.isfinite(out)))
            breathe()
        failures = node.failures()
        if failures or node.stats.errors:
            raise BendingError(
                f"model {source!r} failed on the input playing: {'; '.join(failures)}"
            )
        if nonfinite:
            raise BendingError(
                f"model {source!r} gave {nonfinite} values that are not finite (NaN or "
                f"infinite) in {len(blocks)} blocks of the input playing"
            )

    def _wait_for_fade(self) -> bool:
        """Wait until the rack finished the crossfade (False: the audio did not get there)."""
        deadline = time.monotonic() + self.fade_ms / 1000 + FADE_GRACE
        while self.rack.busy and time.monotonic() < deadline:
            time.sleep(0.002)
            breathe()
        return not self.rack.busy

    def _free(self) -> None:
        """Free the nodes the rack replaced (control side)."""
        for node in self.rack.take_retired():
            node.collect()  # what its own changes replaced
            release(node, self.rack)


def release(engine: Node, keep: object) -> None:
    """Free what a replaced node holds that ``keep`` (the rack that plays) does not. A server
    keeps what it loaded out of the collector (``gc.freeze``: a full collection holds the
    interpreter for a second), so the reference cycles of an engine (its graphs, bound methods)
    are never collected: here, on the control side, its tensors' storage is emptied, its fx
    graphs' nodes unlinked and its objects' (bendserver's, fx's) attributes dropped, which
    leaves no cycle behind, so that reference counting frees them (memory flat over live loads:
    docs/serve.md)."""
    kept = {id(item) for item in _reachable(keep)}
    dropped = [item for item in _reachable(engine) if id(item) not in kept]
    empty = torch.empty(0)
    with torch.no_grad():
        while dropped:  # taken out one by one: what is freed, is freed a little at a time
            item = dropped.pop()
            if isinstance(item, torch.Tensor):
                item.data = empty
            elif isinstance(item, torch.fx.Node):
                unlink_fx_node(item)
            elif type(item).__module__.startswith(_EMPTIED) and hasattr(item, "__dict__"):
                vars(item).clear()
            del item
            if len(dropped) % 64 == 0:
                breathe()


def _reachable(root: object) -> list[object]:
    """The objects reachable from ``root`` through objects, containers and modules, not through
    classes, Python modules or functions (what every engine shares); tensors, not what they
    hold."""
    seen: set[int] = set()
    found: list[object] = []
    stack = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _SHARED):
            continue
        seen.add(id(item))
        found.append(item)
        if not isinstance(item, torch.Tensor):
            stack.extend(gc.get_referents(item))
        if len(seen) % 256 == 0:
            breathe()
    return found


#: The packages whose objects a replaced node held alone are emptied (their attributes
#: dropped): bendserver's own and fx's (graph modules, graphs), which hold the cycles.
_EMPTIED = ("bendserver.", "torch.fx.")
#: What :func:`_reachable` does not walk through.
_SHARED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    types.GeneratorType,
)
