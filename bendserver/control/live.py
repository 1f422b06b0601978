"""Handlers of what only a live server has: models swapped in live (its switcher) and frames
streamed at a control rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..presets.library import check_name
from .grammar import Match, Reply

if TYPE_CHECKING:
    from .controller import Controller


def _live_frames(ctl: Controller) -> Any:
    if ctl.frames is None:
        raise BendingError(
            "no frames here: a live server (serve) streams those of methods at a control rate "
            "(/list addresses); render writes or reads them as frames files"
        )
    return ctl.frames


def subscribe(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    port = int(args[0]) if args else None
    return [("/out/subscribed", _live_frames(ctl).subscribe(m.client, port))]


def unsubscribe(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    port = int(args[0]) if args else None
    return [("/out/unsubscribed", [_live_frames(ctl).unsubscribe(m.client, port)])]


def frame_in(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _live_frames(ctl).hold(m.path["node"], m.path["method"], args)


def model_load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    loaded = _load(ctl, args, None)
    if loaded.mappings:  # a preset without mappings keeps those playing
        ctl.midi.replace(loaded.mappings)
    return [("/model/loaded", [loaded.node.model.name, *_timings(loaded)])]


def node_load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    loaded = _load(ctl, args, m.path["node"])
    return [("/node/loaded", [loaded.name, loaded.node.model.name, *_timings(loaded)])]


def _load(ctl: Controller, args: list[Any], node: str | None) -> Any:
    """Swap a model live into ``node`` of the rack (None: a one-model server's model)."""
    if ctl.switcher is None:
        raise BendingError(
            "loading a model live needs a live server (bendserver serve); a node of its rack "
            "loads with /node/<node>/load"
        )
    source, *preset = args
    if preset:
        check_name(preset[0])
    return ctl.switcher.load(source, preset[0] if preset else None, node)


def _timings(loaded: Any) -> list[float]:
    """What a load's steps took, in seconds (the probe's -1: not probed)."""
    probe = -1.0 if loaded.probe_s is None else round(loaded.probe_s, 3)
    return [probe, round(loaded.load_s, 3), round(loaded.warm_s, 3)]
