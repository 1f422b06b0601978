"""A rack's modulators: changed on the control side, played on the audio side.

:class:`Modulators` keeps the modulators' state (:mod:`.state`) and, for each change, builds
the :class:`~.setup.Setup` that plays it and submits it to a queue of its own
(:class:`~bendserver.engine.commands.CommandQueue`), applied at the first block that starts at
or after the change's time, like a node's changes. The rack calls :meth:`begin` before its
nodes run and :meth:`heard` after each; each node calls :meth:`restore` and :meth:`drive`
around applying its own changes. What a change replaced goes back to the control side.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..engine.commands import CommandQueue
from ..errors import BendingError
from ..limits import MAX_MODULATORS
from .kinds import INPUT, KINDS, Modulator, kind_of
from .setup import SettingTarget, Setup, StepTarget, Target, TensorTarget
from .state import ModState, Route, checked_steps, from_list, new_mod, to_list

#: The engine settings a route may drive, with their ranges.
SETTINGS = {"gain": (0.0, 16.0), "mix": (0.0, 1.0)}
#: The rack's own output gain, driven as a node's gain is (moved across the block).
RACK_GAIN = "/rack/gain"

Applied = Callable[["Modulators", int], None]


class Modulators:
    """The modulators of ``rack`` (made by :func:`modulators_of`, which installs them)."""

    def __init__(self, rack: Any) -> None:
        self.rack = rack
        self.commands = CommandQueue()
        self.state: tuple[ModState, ...] = ()  #: the pending state
        self._lock = threading.RLock()
        self._setup = Setup({}, {})  #: what plays (audio side)
        #: (modulator, op) pairs whose deprecated address was logged (:mod:`.oscillators`).
        self.deprecated: set[tuple[str, str]] = set()

    # -- the audio side ------------------------------------------------------------------------

    def begin(self, time: int, dry: np.ndarray) -> None:
        """Apply the changes due at the block that starts at ``time``; each modulator's value
        for it (the rack, before its nodes)."""
        due = self.commands.due(time)
        for command in due:
            if not command.cancelled:
                command.payload(self, time)
                self.commands.applied += 1
        for command in due:
            self.commands.finish(command)
        rack = self.rack
        self._setup.begin(time, rack.block, rack.sample_rate, dry)

    def heard(self, source: str, signal: np.ndarray, time: int) -> None:
        """Node ``source``'s output for the block at ``time`` (the rack, after the node)."""
        setup = self._setup
        if source in setup.listeners:
            rack = self.rack
            setup.heard(source, signal, time + rack.block, rack.block, rack.sample_rate)

    def restore(self, node: Any) -> None:
        """Put ``node``'s driven parameters back to their own values (before its changes)."""
        self._setup.restore(node)

    def drive(self, node: Any) -> None:
        """Write ``node``'s driven parameters modulated (after its changes)."""
        self._setup.drive(node)

    def _swap(self, setup: Setup) -> Applied:
        def apply(mods: Modulators, time: int) -> None:
            setup.carry(mods._setup)
            mods._setup = setup

        return apply

    # -- the control side ----------------------------------------------------------------------

    def _submit(self, state: tuple[ModState, ...], at: int | None, payload: Applied) -> None:
        self.commands.drain_released()
        self.commands.submit(payload, self.rack.time if at is None else at)
        self.state = state

    def _change(self, state: tuple[ModState, ...], at: int | None) -> None:
        """Play ``state`` from ``at`` on: a setup built here, swapped in there (a node
        swapped into the rack since is told where its modulators are)."""
        nodes = self.rack.nodes_to_come
        for node in nodes.values():
            node.modulated = self
        self._submit(state, at, self._swap(self.build(state, nodes)))

    def swapping(
        self, state: tuple[ModState, ...], nodes: dict[str, Any], fresh: set[str]
    ) -> Callable[[int], None]:
        """Play ``state`` from the first block of a node swap whose rack then plays ``nodes``
        (handed over with the swap, applied by the rack there: not a block before or after);
        the modulators ``fresh`` names start again rather than carry on from those of their
        id."""
        with self._lock:
            for node in nodes.values():
                node.modulated = self
            setup = self.build(state, nodes)
            setup.fresh = frozenset(fresh)
            self.commands.drain_released()
            self.state = state
            apply = self._swap(setup)
            return lambda time: apply(self, time)

    def mod(self, mod_id: str) -> ModState:
        for mod in self.state:
            if mod.mod_id == mod_id:
                return mod
        listed = ", ".join(m.mod_id for m in self.state) or "none"
        raise BendingError(f"no modulator '{mod_id}' (modulators: {listed}; add one: /mod/add)")

    def _replaced(self, mod: ModState) -> tuple[ModState, ...]:
        return tuple(mod if m.mod_id == mod.mod_id else m for m in self.state)

    def add(self, mod_id: str, kind: str, values: dict[str, Any], at: int | None = None) -> None:
        """Add a modulator of ``kind`` (``/mod/add``); it drives nothing until routed."""
        with self._lock:
            if any(m.mod_id == mod_id for m in self.state):
                raise BendingError(f"a modulator '{mod_id}' exists; remove it first")
            if len(self.state) >= MAX_MODULATORS:
                raise BendingError(f"a rack plays {MAX_MODULATORS} modulators at most")
            self._change((*self.state, new_mod(mod_id, kind, values)), at)

    def remove(self, mod_id: str, at: int | None = None) -> None:
        """Remove a modulator: the parameters it drove go back to their own values."""
        with self._lock:
            self.mod(mod_id)
            self._change(tuple(m for m in self.state if m.mod_id != mod_id), at)

    def clear(self, at: int | None = None) -> None:
        with self._lock:
            self._change((), at)

    def set(self, mod_id: str, name: str, value: float, at: int | None = None) -> None:
        """Set a parameter of a modulator: a scalar written on the audio side."""
        with self._lock:
            mod = self.mod(mod_id).with_value(name, value)
            number = mod.value(name)

            def apply(mods: Modulators, time: int) -> None:
                live = mods._setup.mods.get(mod_id)
                if live is not None:
                    live.values[name] = number

            self._submit(self._replaced(mod), at, apply)

    def set_source(self, mod_id: str, source: str, at: int | None = None) -> None:
        """What a follower or an onset listens to: ``in`` (the rack's input) or a node."""
        with self._lock:
            mod = self.mod(mod_id)
            if not kind_of(mod.kind).listens:
                raise BendingError(f"a {mod.kind} listens to nothing: only followers, envelopes")
            self._check_source(source)
            self._change(self._replaced(replace(mod, source=source)), at)

    def _check_source(self, source: str) -> None:
        nodes = list(self.rack.order)
        if source != INPUT and source not in nodes:
            raise BendingError(f"no source {source!r}: 'in' (the input) or a node: {nodes}")

    def set_steps(self, mod_id: str, steps: list[Any], at: int | None = None) -> None:
        with self._lock:
            mod = self.mod(mod_id)
            if mod.kind != "steps":
                raise BendingError(f"modulator '{mod_id}' is a {mod.kind}, not a step sequence")
            self._change(self._replaced(replace(mod, steps=checked_steps(mod_id, steps))), at)

    def trigger(self, mod_id: str, at: int | None = None) -> None:
        """Start an envelope again at the block of ``at`` (the next block by default)."""
        with self._lock:
            mod = self.mod(mod_id)
            if mod.kind != "envelope":
                raise BendingError(f"modulator '{mod_id}' is a {mod.kind}: only envelopes trigger")

            def apply(mods: Modulators, time: int) -> None:
                live = mods._setup.mods.get(mod_id)
                if live is not None:
                    live.trigger(time)

            self._submit(self.state, at, apply)

    def route(
        self,
        mod_id: str,
        address: str,
        depth: float,
        low: float | None = None,
        high: float | None = None,
        at: int | None = None,
    ) -> None:
        """Drive the parameter at ``address`` (``/bend/<op>/<param>``, ``/engine/gain`` or
        ``/engine/mix``, a rack's node's name first, or ``/rack/gain``) with ``depth`` over
        ``low``..``high`` (the parameter's whole range by default)."""
        with self._lock:
            mod = self.mod(mod_id)
            if not math.isfinite(depth):
                raise BendingError(f"a route's depth is a finite number, got {depth}")
            _, _, own_low, own_high = self._resolve(address)
            if (low is None) != (high is None):
                raise BendingError(f"a route's range is low and high, both: {address} depth lo hi")
            low = own_low if low is None else low
            high = own_high if high is None else high
            if not (math.isfinite(low) and math.isfinite(high)):
                raise BendingError(f"{address} has no bounded range: give one, e.g. depth 0 1")
            if not own_low <= low < high <= own_high:
                raise BendingError(f"{address} takes {own_low:g}..{own_high:g}: a range inside it")
            self._change(self._replaced(mod.routed(Route(address, depth, low, high))), at)

    def unroute(self, mod_id: str, address: str, at: int | None = None) -> None:
        with self._lock:
            self._change(self._replaced(self.mod(mod_id).unrouted(address)), at)

    def load(self, data: Any, at: int | None = None) -> None:
        """Play the modulators of a preset's list (checked whole first: a refused list
        changes nothing)."""
        with self._lock:
            state = from_list(data)
            for mod in state:
                if kind_of(mod.kind).listens:
                    self._check_source(mod.source)
                for route in mod.routes:
                    self._resolve(route.address)
            self._change(state, at)

    def refresh(self, at: int | None = None) -> None:
        """Build the routes again over the nodes' ops as they will be (after an op was added
        or removed, a preset or a model loaded)."""
        with self._lock:
            if any(mod.routes for mod in self.state):
                self._change(self.state, at)

    @property
    def levels(self) -> dict[str, float]:
        """The modulators' values as the last block played them (``/get``, the page)."""
        return {mod_id: mod.level for mod_id, mod in self._setup.mods.items()}

    def to_list(self) -> list[dict[str, Any]]:
        return to_list(self.state)

    def get(self, mod_id: str, name: str) -> float:
        """A parameter's pending value, or ``value``: what the last block played."""
        mod = self.mod(mod_id)
        if name == "value":
            return float(self.levels.get(mod_id, 0.0))
        kind_of(mod.kind).knobs.get(name) or mod.with_value(name, 0.0)  # names the parameters
        return mod.value(name)

    def shown(self) -> dict[str, Any]:
        """What the page shows (read on the control side, as the audio side writes): each
        modulator's last value and the addresses it drives, each driven address's value."""
        setup = self._setup
        routes = {mod.mod_id: [r.address for r in mod.routes] for mod in self.state}
        return {
            "levels": {
                mod_id: {"value": round(mod.level, 4), "drives": routes.get(mod_id, [])}
                for mod_id, mod in setup.mods.items()
            },
            "driven": {
                address: round(target.played, 6)
                for address, target in setup.addresses.items()
                if target.written
            },
        }

    def param_range(self, mod_id: str, name: str) -> tuple[float, float]:
        knob = kind_of(self.mod(mod_id).kind).knobs.get(name)
        if knob is None:
            raise BendingError(f"modulator '{mod_id}' has no parameter {name!r}")
        return knob.low, knob.high

    # -- building what plays -------------------------------------------------------------------

    def build(self, state: tuple[ModState, ...], nodes: dict[str, Any] | None = None) -> Setup:
        """The setup that plays ``state``: fresh modulators, routes over the pending ops of
        ``nodes`` (None: those the rack plays once a swap under way is done; a route whose
        parameter is gone drives nothing)."""
        mods: dict[str, Modulator] = {}
        for mod in state:
            cls = KINDS[mod.kind]
            made = cls(dict(mod.values), mod.source)
            if mod.steps:
                made.steps = mod.steps  # type: ignore[attr-defined]
            mods[mod.mod_id] = made
        targets: dict[Any, dict[tuple[str, ...], Target]] = {}
        addresses: dict[str, Target] = {}
        for mod in state:
            for route in mod.routes:
                try:
                    node, where, low, high = self._resolve(route.address, nodes)
                except BendingError:
                    continue
                per_node = targets.setdefault(node, {})
                target = per_node.get(where)
                if target is None:
                    target = self._target(node, where, low, high)
                    per_node[where] = target
                target.routes.append((mods[mod.mod_id], route.depth * (route.high - route.low)))
                addresses[route.address] = target
                target.low = min(target.low, route.low) if target.routes[1:] else route.low
                target.high = max(target.high, route.high) if target.routes[1:] else route.high
        return Setup(mods, {node: list(t.values()) for node, t in targets.items()}, addresses)

    def _target(self, node: Any, where: tuple[str, ...], low: float, high: float) -> Target:
        if where[0] in ("engine", "rack"):  # a node's output, or the rack's
            return SettingTarget(node, where[1], low, high)
        op = node.op(where[1])
        if where[2] in op.stepped:
            return StepTarget(op, where[2], low, high)
        return TensorTarget(op.value_tensor(where[2]), low, high)

    def _resolve(
        self, address: str, nodes: dict[str, Any] | None = None
    ) -> tuple[Any, tuple[str, ...], float, float]:
        """The node (the rack's output for ``/rack/gain``) and parameter an address names
        among ``nodes`` (None: those the rack plays once a swap under way is done), with the
        parameter's range; refused where a modulator cannot drive it (a weight's op: weights
        are computed on the control side; an op folded into weights; no such op, node or
        parameter)."""
        if address == RACK_GAIN:
            return (self.rack.output, ("rack", "gain"), *SETTINGS["gain"])
        parts = address.strip("/").split("/") if address.startswith("/") else []
        nodes = self.rack.nodes_to_come if nodes is None else nodes
        if parts and parts[0] in nodes and len(parts) > 2:
            name, parts = parts[0], parts[1:]
        elif len(nodes) == 1:
            name = next(iter(nodes))
        else:
            raise BendingError(
                f"{address}: this rack plays several nodes ({', '.join(nodes)}): name one, "
                f"/{next(iter(nodes))}{address}"
            )
        node = nodes[name]
        if len(parts) == 2 and parts[0] == "engine" and parts[1] in SETTINGS:
            return (node, tuple(parts), *SETTINGS[parts[1]])
        if len(parts) != 3 or parts[0] != "bend":
            raise BendingError(
                f"a modulator drives /bend/<op>/<param>, /engine/gain or /engine/mix "
                f"(a rack's node's name first) or {RACK_GAIN}, not {address}"
            )
        op_id, param_name = parts[1], parts[2]
        op = node.op(op_id)
        param = op.param(param_name)
        if not node.bends_activations(op_id):
            raise BendingError(
                f"{address}: op '{op_id}' bends weights (computed on the control side, not per "
                "block): a modulator drives ops on activations; send its value as messages"
            )
        if op_id in node.folded_ops:
            raise BendingError(
                f"{address}: op '{op_id}' plays folded into the weights of the layers reading "
                "its activations (no work per block, nothing a modulator could move): serve "
                "with --optimize none to drive it"
            )
        return node, ("bend", op_id, param_name), param.low, param.high


def exercised(rack: Any, routes: int = 8) -> list[str]:
    """Four modulators (an LFO, a drift, a step sequence, a follower) driving ``routes``
    routes round the parameters a modulator can drive (each node's ops on activations, output
    gain and mix, the rack's gain): what ``bench`` and ``stress`` measure. Returns the routes'
    addresses."""
    mods = modulators_of(rack)
    several = len(rack.nodes) > 1
    addresses = []
    for name, node in rack.nodes.items():
        prefix = f"/{name}" if several else ""
        for op_id in node.state.op_ids:
            if node.bends_activations(op_id) and op_id not in node.folded_ops:
                addresses += [f"{prefix}/bend/{op_id}/{p}" for p, _ in node.state.op(op_id).params]
        addresses += [f"{prefix}/engine/gain", f"{prefix}/engine/mix"]
    addresses.append(RACK_GAIN)
    kinds = {"lfo": {"rate": 2.0}, "drift": {"rate": 1.0, "seed": 1.0}, "steps": {},
             "follower": {}}  # fmt: skip
    for kind, values in kinds.items():
        mods.add(f"bench_{kind}", kind, values)
    routed = []
    for index in range(routes):
        address = addresses[index % len(addresses)]
        mods.route(f"bench_{list(kinds)[index % len(kinds)]}", address, 0.01)
        routed.append(address)
    return routed


def modulators_of(rack: Any) -> Modulators:
    """The rack's modulators, made and installed on the rack and its nodes the first time."""
    mods = rack.modulation
    if mods is None:
        mods = Modulators(rack)
        for node in rack.nodes.values():
            node.modulated = mods
        rack.modulation = mods
    return mods
