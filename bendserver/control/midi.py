"""Handlers of the MIDI mappings: learn, map, unmap, list, save, load, and a program change."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..midi.mappings import Mapping, read_mappings, write_mappings
from ..presets.library import check_name
from . import presets
from .grammar import Match, Reply
from .mods import rack_modulators

if TYPE_CHECKING:
    from .controller import Controller


def _mapping(ctl: Controller, address: str, source: list[Any], options: list[Any]) -> Mapping:
    """A mapping to ``address`` from ``source`` (kind, channel, number), checked against what
    the address takes: a number or an on/off of a coalescing address (a parameter), a range
    inside the parameter's (its whole range by default), a ramp only where it ramps."""
    match = ctl.table.route(address)
    entry, path = match.entry, match.path
    arg = entry.schema.required[0] if len(entry.schema.required) == 1 else None
    if not entry.coalesce or arg is None or arg.kind not in ("number", "flag", "value"):
        raise BendingError(f"MIDI maps to parameters (see /list bends), not to {address}")
    low, high = arg.low, arg.high
    if "param" in path:
        param = ctl.engine.op(path["id"]).param(path["param"])
        low, high = param.low, param.high
    if "mod" in path and "name" in path:
        low, high = rack_modulators(ctl).param_range(path["mod"], path["name"])
    if arg.kind == "flag":
        low, high = 0.0, 1.0
    defaults = (None, None, "linear", False, 0.0)
    given_low, given_high, curve, invert, ramp_ms = (*options, *defaults[len(options) :])
    if (given_low is None) != (given_high is None):
        raise BendingError(f"a MIDI range is low and high, both: {address} ... low high")
    if given_low is not None:
        for bound in (given_low, given_high):
            if not low <= bound <= high:
                raise BendingError(f"{address} takes {low:g}..{high:g}, not {bound:g}")
        low, high = given_low, given_high
    if not (math.isfinite(low) and math.isfinite(high)):
        raise BendingError(f"{address} has no bounded range: give one, e.g. {address} 0 1")
    if ramp_ms and "ramp_ms" not in {a.name for a in entry.schema.optional}:
        raise BendingError(f"{address} does not ramp: map it with ramp_ms 0")
    kind, channel, number = source
    if not (float(channel).is_integer() and float(number).is_integer()):
        raise BendingError(f"MIDI channels and numbers are whole numbers, got {channel} {number}")
    return Mapping(
        address, kind, int(channel), int(number), low, high, curve, bool(invert), ramp_ms,
        toggle=arg.kind == "flag",
    )  # fmt: skip


def learn(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    if ctl.midi_port is None:
        raise BendingError("no MIDI input: start the server with --midi to learn")
    address, *options = args
    ctl.midi.learn(_mapping(ctl, address, ["cc", 1, 0], options))
    return [("/midi/learning", [address])]


def map_control(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    address, kind, channel, number, *options = args
    ctl.midi.add(_mapping(ctl, address, [kind, channel, number], options))


def unmap(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    return [("/midi/unmapped", [ctl.midi.remove(args[0] if args else None)])]


def listing(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    mappings = ctl.midi.mappings()
    learning = ctl.midi.learning
    return [
        *(("/midi/mapping", mapping.describe()) for mapping in mappings),
        ("/midi/list", [len(mappings), ctl.midi_port or "", learning or ""]),
    ]


def save(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    name, *overwrite = args
    path = ctl.midi_folder / f"{check_name(name)}.json"
    if path.exists() and not (overwrite and overwrite[0]):
        raise BendingError(f"MIDI mappings '{name}' exist: /midi/save {name} 1 replaces them")
    write_mappings(path, ctl.midi.mappings())
    return [("/midi/saved", [name])]


def load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    path = ctl.midi_folder / f"{check_name(args[0])}.json"
    if not path.is_file():
        raise BendingError(f"no MIDI mappings '{args[0]}' (saved with /midi/save {args[0]})")
    mappings = read_mappings(path)
    presets.check_mappings(ctl, mappings, f"MIDI mappings '{args[0]}'")
    ctl.midi.replace(mappings)


def program(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    names = ctl.presets.names()
    number = int(args[0])
    if number >= len(names):
        raise BendingError(f"program {number}: there are {len(names)} presets (/list presets)")
    presets.load(ctl, m, [names[number]], at)
