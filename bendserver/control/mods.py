"""Handlers of the modulators (:mod:`bendserver.modulation`): the rack's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..modulation import Modulators, modulators_of
from .grammar import Match, Reply

if TYPE_CHECKING:
    from .controller import Controller


def rack_modulators(ctl: Controller) -> Modulators:
    """The modulators of the rack a controller plays (a node's controller: refused)."""
    if not hasattr(ctl.engine, "order"):
        raise BendingError("modulators are the rack's: send /mod/... without a node's name")
    return modulators_of(ctl.engine)


def modulation_state(ctl: Controller) -> tuple[Any, ...]:
    """The modulators the engine plays (none where it has no modulation)."""
    modulation = getattr(ctl.engine, "modulation", None)
    return () if modulation is None else modulation.state


def add(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    mod_id, kind, *values = args
    rack_modulators(ctl).add(mod_id, kind, dict(zip(values[::2], values[1::2], strict=True)), at=at)


def remove(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    rack_modulators(ctl).remove(args[0], at=at)


def clear(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    rack_modulators(ctl).clear(at=at)


def set_param(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    rack_modulators(ctl).set(m.path["mod"], m.path["name"], args[0], at=at)


def trigger(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    if args[0]:  # a note's release (0) triggers nothing
        rack_modulators(ctl).trigger(m.path["mod"], at=at)


def route(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    address, depth, *bounds = args
    rack_modulators(ctl).route(m.path["mod"], address, depth, *bounds, at=at)


def unroute(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    rack_modulators(ctl).unroute(m.path["mod"], args[0], at=at)


def source(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    rack_modulators(ctl).set_source(m.path["mod"], args[0], at=at)


def steps(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    rack_modulators(ctl).set_steps(m.path["mod"], args, at=at)


def listing(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    replies: list[Reply] = []
    for mod in modulation_state(ctl):
        flat = [x for pair in mod.values for x in pair]
        replies.append(("/mod/modulator", [mod.mod_id, mod.kind, mod.source, *flat]))
        for route in mod.routes:
            replies.append(("/mod/route", [mod.mod_id, route.address, route.depth, route.low,
                                           route.high]))  # fmt: skip
    return [*replies, ("/mod/list", [len(modulation_state(ctl))])]
