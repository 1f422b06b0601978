"""Handlers of presets: ``/preset/load`` and ``/preset/save`` (a node's, or a rack's by node), and
the check of the MIDI mappings a file brings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..midi.mappings import Mapping
from ..modulation import modulators_of
from ..presets.library import Preset, check_name
from .grammar import Address, Match, Reply

if TYPE_CHECKING:
    from .controller import Controller


def load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    preset = ctl.presets.load(check_name(args[0]))
    check_mappings(ctl, preset.midi, f"preset '{preset.name}'")
    nodes = ctl.nodes
    if preset.nodes:  # a rack's: each node its part (nodes it does not name keep theirs)
        if not nodes:
            raise BendingError(
                f"preset '{preset.name}' is a rack's: load it into the rack (/preset/load "
                f"{preset.name}, without a node's name)"
            )
        ctl.engine.load_parts(preset, at=at)
    elif len(nodes) > 1:
        raise BendingError(
            f"preset '{preset.name}' is one model's and this rack plays {ctl.engine.names}: "
            f"send it to one node (/{ctl.engine.order[0]}/preset/load {preset.name})"
        )
    else:
        ctl.engine.load_preset(preset, at=at)
    if preset.modulators is not None and hasattr(ctl.engine, "order"):  # the rack's own
        modulators_of(ctl.engine).load(preset.modulators, at=at)
    if preset.midi:  # a preset without mappings keeps those playing
        ctl.midi.replace(preset.midi)


def save(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    name, *overwrite = args
    nodes = ctl.nodes
    if len(nodes) > 1:  # a rack's: each node's state under its name, and its output gain
        parts = {node: part.preset(node, at=at) for node, part in nodes.items()}
        preset = Preset(check_name(name), nodes=parts, gain=ctl.engine.output.pending.gain)
    else:
        preset = ctl.engine.preset(check_name(name), at=at)
    preset.midi = ctl.midi.mappings()
    modulation = getattr(ctl.engine, "modulation", None)
    if modulation is not None and modulation.state:
        preset.modulators = modulation.to_list()
    ctl.presets.save(preset, overwrite=bool(overwrite and overwrite[0]))
    return [("/preset/saved", [name])]


def check_mappings(ctl: Controller, mappings: list[Mapping], where: str) -> None:
    """Refuse mappings read from a file whose address is not a parameter's address."""
    for mapping in mappings:
        try:
            entry: Address | None = ctl.table.route(mapping.address).entry
        except BendingError:
            entry = None
        if entry is None or not entry.coalesce:
            raise BendingError(f"{where}: {mapping.address!r} is no parameter address to map")
