"""Handlers of a take recorded as a score: ``/record/score`` and ``/record/stop``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..modulation import modulators_of
from ..presets.library import check_name
from ..takes import ScoreRecorder
from .grammar import Match, Reply
from .mods import rack_modulators

if TYPE_CHECKING:
    from .controller import Controller


def record(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    rack_modulators(ctl)  # a node's controller is refused: the take is the rack's
    if ctl.recorder is not None:
        raise BendingError(f"a score is recording ('{ctl.recorder.name}'): /record/stop first")
    name, *overwrite = args
    path = ctl.scores_folder / f"{check_name(name)}.txt"
    if path.exists() and not (overwrite and overwrite[0]):
        raise BendingError(f"score '{name}' exists: /record/score {name} 1 replaces it")
    path.parent.mkdir(parents=True, exist_ok=True)
    ctl.recorder = ScoreRecorder(ctl.engine, path, name)
    modulators_of(ctl.engine)  # their changes are recorded at the block they apply at
    return [("/record/started", [name, ctl.engine.time])]


def stop(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    recorder = ctl.recorder
    if recorder is None:
        raise BendingError("no score is recording: /record/score <name> starts one")
    ctl.recorder = None
    path = recorder.stop()
    return [("/record/stopped", [recorder.name, len(recorder.events), str(path)])]
