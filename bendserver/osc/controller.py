"""The control address space of :mod:`bendserver.control`, with the server's counters in
``/stats`` (xruns, messages received, dropped, malformed, refused) beside the engine's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..control import Controller, Reply
from ..engine import StreamEngine
from ..loader import PRESETS_DIR

Counters = Callable[[], dict[str, float]]


class ServerController(Controller):
    """A :class:`Controller` whose ``/stats`` reply also carries ``counters()``."""

    def __init__(
        self, engine: StreamEngine, counters: Counters, presets: Path = PRESETS_DIR
    ) -> None:
        super().__init__(engine, presets)
        self.counters = counters

    def _stats(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        (address, flat), *_ = super()._stats(rest, args, at)
        pairs = list(zip(flat[::2], flat[1::2], strict=True))
        server = [(k, _rounded(v)) for k, v in self.counters().items()]
        ordered = pairs[:1] + server + pairs[1:]  # blocks first, then xruns ... then the rest
        return [(address, [x for pair in ordered for x in pair])]


def _rounded(value: float) -> float:
    return round(value, 3) if isinstance(value, float) else value
