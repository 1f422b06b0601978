"""The modulators' state: what the control side may change, as immutable values.

Each modulator is a :class:`ModState` (its id, kind, parameter values, source, steps and
routes); the rack's modulators are a tuple of them, in the order added. A change is a new
tuple; presets save them as a list of plain dicts (:func:`to_list`, :func:`from_list`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..engine.state import OP_ID
from ..errors import BendingError
from ..limits import MAX_MODULATORS, MAX_ROUTES, MAX_STEPS
from ..readers import expect, only, optional
from .kinds import INPUT, Steps, checked_value, kind_of


@dataclass(frozen=True)
class Route:
    """A parameter driven by a modulator: the value played is the parameter's own plus
    ``depth`` x the modulator's value x (``high`` - ``low``), kept within ``low``..``high``."""

    address: str
    depth: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "depth": self.depth, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class ModState:
    """One modulator: ``values`` of its kind's parameters, what it listens to (``source``),
    a step sequence's ``steps``, its ``routes``."""

    mod_id: str
    kind: str
    values: tuple[tuple[str, float], ...]
    source: str = INPUT
    steps: tuple[float, ...] = ()
    routes: tuple[Route, ...] = ()

    def value(self, name: str) -> float:
        return dict(self.values)[name]

    def with_value(self, name: str, value: float) -> ModState:
        values = dict(self.values)
        values[name] = checked_value(kind_of(self.kind), name, value, f"/mod/{self.mod_id}")
        return replace(self, values=tuple(values.items()))

    def routed(self, route: Route) -> ModState:
        kept = tuple(r for r in self.routes if r.address != route.address)
        if len(kept) >= MAX_ROUTES:
            raise BendingError(f"modulator '{self.mod_id}' drives {MAX_ROUTES} parameters at most")
        return replace(self, routes=(*kept, route))

    def unrouted(self, address: str) -> ModState:
        if all(r.address != address for r in self.routes):
            listed = ", ".join(r.address for r in self.routes) or "none"
            raise BendingError(f"modulator '{self.mod_id}' drives no {address}; it drives {listed}")
        return replace(self, routes=tuple(r for r in self.routes if r.address != address))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.mod_id, "kind": self.kind, "params": dict(self.values)}
        if kind_of(self.kind).listens:
            data["source"] = self.source
        if self.steps:
            data["steps"] = list(self.steps)
        data["routes"] = [r.to_dict() for r in self.routes]
        return data


def new_mod(mod_id: str, kind: str, given: dict[str, Any]) -> ModState:
    """A modulator of ``kind`` with its defaults and the ``given`` values, checked."""
    if not isinstance(mod_id, str) or not OP_ID.fullmatch(mod_id):
        raise BendingError(
            f"modulator ids are a letter then letters, digits or _ (e.g. env_1), got {mod_id!r}"
        )
    cls = kind_of(kind)
    values = {name: knob.default for name, knob in cls.knobs.items()}
    for name, value in given.items():
        values[name] = checked_value(cls, name, value, f"/mod/{mod_id}")
    steps = (1.0, 0.0) if cls is Steps else ()
    return ModState(mod_id, kind, tuple(values.items()), steps=steps)


def checked_steps(mod_id: str, steps: list[Any]) -> tuple[float, ...]:
    """A step sequence's values: 1 to :data:`MAX_STEPS` numbers in 0..1."""
    if not 1 <= len(steps) <= MAX_STEPS:
        raise BendingError(f"/mod/{mod_id}/steps takes 1 to {MAX_STEPS} values, got {len(steps)}")
    for value in steps:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BendingError(f"/mod/{mod_id}/steps: values are numbers 0..1, got {value!r}")
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise BendingError(f"/mod/{mod_id}/steps: values are 0..1, got {value!r}")
    return tuple(float(v) for v in steps)


def to_list(mods: tuple[ModState, ...]) -> list[dict[str, Any]]:
    return [mod.to_dict() for mod in mods]


def from_list(data: Any, where: str = "modulators") -> tuple[ModState, ...]:
    """Modulators from a preset's list (every key and value checked; errors name the key)."""
    listed = expect(data, "list", where)
    if len(listed) > MAX_MODULATORS:
        raise BendingError(f"{where}: {MAX_MODULATORS} modulators at most")
    mods: list[ModState] = []
    for index, item in enumerate(listed):
        key = f"{where}[{index}]"
        expect(item, "object", key)
        only(item, ("id", "kind", "params", "source", "steps", "routes"), f"{key}.")
        params = optional(item, "params", "object", f"{key}.", {})
        try:
            mod = new_mod(expect(item.get("id"), "text", f"{key}.id"),
                          expect(item.get("kind"), "text", f"{key}.kind"), params)  # fmt: skip
        except BendingError as error:
            raise BendingError(f"{key}: {error}") from None
        if mod.mod_id in {m.mod_id for m in mods}:
            raise BendingError(f"{key}: a second modulator '{mod.mod_id}'")
        source = optional(item, "source", "text", f"{key}.", INPUT)
        steps = optional(item, "steps", "list", f"{key}.", None)
        if steps:
            mod = replace(mod, steps=checked_steps(mod.mod_id, steps))
        mod = replace(mod, source=source)
        for number, route in enumerate(optional(item, "routes", "list", f"{key}.", [])):
            rkey = f"{key}.routes[{number}]"
            expect(route, "object", rkey)
            only(route, ("address", "depth", "low", "high"), f"{rkey}.")
            mod = mod.routed(
                Route(
                    expect(route.get("address"), "text", f"{rkey}.address"),
                    expect(route.get("depth"), "number", f"{rkey}.depth"),
                    expect(route.get("low"), "number", f"{rkey}.low"),
                    expect(route.get("high"), "number", f"{rkey}.high"),
                )
            )
        mods.append(mod)
    return tuple(mods)
