"""A slot holding the engine that plays, and the swap to another one, crossfaded, between blocks.

The audio side calls :meth:`EngineSlot.process` as it would call the engine's. The control side
prepares a new engine (loaded, traced, warmed up on the slot's recent input) and hands it over
with :meth:`EngineSlot.swap`; the next block (a block boundary) starts the crossfade: for
``fade`` frames both engines run on the same input and their outputs are mixed with an
equal-power curve prepared on the control side, then the new engine plays alone and
the old one waits in :attr:`EngineSlot.retired` for the control side to free it. The audio side
only calls the engines, multiplies by the curve and writes references.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Protocol

import numpy as np

from ..errors import BendingError
from .stats import EngineStats
from .tap import BlockTap


class Playable(Protocol):
    """What the slot needs of an engine (a :class:`~bendserver.engine.StreamEngine`, or a node
    of a rack that plays like one)."""

    block: int
    sample_rate: int
    in_channels: int
    out_channels: int
    latency: int
    time: int
    stats: Any
    tap: BlockTap | None

    def process(self, block: np.ndarray) -> np.ndarray: ...


class JoinedStats:
    """The statistics of an engine fading in: its block times add to the playing engine's (one
    block, both engines computed), anything read is the playing engine's."""

    def __init__(self, stats: EngineStats) -> None:
        self.shared = stats

    def record(self, seconds: float, budget: float) -> None:
        self.shared.extend_last(seconds, budget)

    @property
    def errors(self) -> int:
        return self.shared.errors

    @errors.setter
    def errors(self, value: int) -> None:
        self.shared.errors = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shared, name)


class EngineSlot:
    """The playing engine, and a swap to another at a block boundary, crossfaded over
    ``fade_ms`` milliseconds (0: at the boundary, no fade). ``recent`` keeps the last blocks in
    and out (the new engine warms up on them)."""

    def __init__(self, engine: Playable, fade_ms: float = 50.0) -> None:
        if not math.isfinite(fade_ms) or fade_ms < 0:
            raise BendingError(f"a crossfade is a finite number of ms >= 0, got {fade_ms!r}")
        self.engine = engine
        self.fade_ms = fade_ms
        self.recent = BlockTap(engine.in_channels, engine.out_channels)
        #: Engines that played and were replaced, for the control side to free.
        self.retired: collections.deque[Playable] = collections.deque()
        self.swaps = 0  #: crossfades finished
        #: The engine time (samples) of the block the last crossfade started at.
        self.swapped_at: int | None = None
        self._incoming: tuple[Playable, np.ndarray, np.ndarray] | None = None
        self._fading: tuple[Playable, np.ndarray, np.ndarray] | None = None
        self._position = 0

    # -- what the audio path reads: the playing engine's ------------------------------------------

    @property
    def block(self) -> int:
        return self.engine.block

    @property
    def sample_rate(self) -> int:
        return self.engine.sample_rate

    @property
    def in_channels(self) -> int:
        return self.engine.in_channels

    @property
    def out_channels(self) -> int:
        return self.engine.out_channels

    @property
    def latency(self) -> int:
        return self.engine.latency

    @property
    def time(self) -> int:
        return self.engine.time

    @property
    def stats(self) -> Any:
        return self.engine.stats

    @property
    def busy(self) -> bool:
        """Whether a swap was handed over and has not finished its crossfade yet."""
        return self._incoming is not None or self._fading is not None

    # -- the control side ---------------------------------------------------------------------

    def swap(self, engine: Playable) -> None:
        """Play ``engine`` from the next block on, crossfaded (control side). It must play what
        the slot plays (block, rate, channels: the caller checks, with a message); its block
        times count in the playing engine's statistics from now on."""
        self.check_idle()
        frames = round(self.fade_ms * self.sample_rate / 1000)
        length = max(1, math.ceil(frames / self.block)) * self.block
        ramp = np.clip((np.arange(length, dtype=np.float64) + 1) / max(frames, 1), 0.0, 1.0)
        # equal power (sine and cosine): two models' outputs are unrelated, their powers add
        fade_in, fade_out = np.sin(0.5 * np.pi * ramp), np.cos(0.5 * np.pi * ramp)
        engine.stats = JoinedStats(self.engine.stats)
        engine.time = self.engine.time
        self._incoming = (engine, fade_in.astype(np.float32), fade_out.astype(np.float32))

    def check_idle(self) -> None:
        """Refuse a swap while the last one has not finished its crossfade."""
        if self.busy:
            raise BendingError(
                "the last model loaded is not playing yet (is the audio running?): load another "
                "once it plays"
            )

    def take_retired(self) -> list[Playable]:
        """The engines replaced so far (control side: dropping them frees them)."""
        taken = []
        while self.retired:
            taken.append(self.retired.popleft())
        return taken

    # -- the audio side -----------------------------------------------------------------------

    def process(self, block: np.ndarray) -> np.ndarray:
        """One block of the playing engine, or of both engines crossfaded during a swap."""
        if self._incoming is not None and self._fading is None:
            self._fading, self._incoming = self._incoming, None
            self._fading[0].time = self.engine.time
            self._position = 0
            self.swapped_at = self.engine.time
        if self._fading is None:
            out = self.engine.process(block)
        else:
            out = self._crossfade(block)
        self.recent.record(block, out)
        return out

    def _crossfade(self, block: np.ndarray) -> np.ndarray:
        new, fade_in, fade_out = self._fading  # type: ignore[misc]
        old = self.engine
        start, end = self._position, self._position + block.shape[-1]
        out = old.process(block) * fade_out[start:end] + new.process(block) * fade_in[start:end]
        self._position = end
        if end >= len(fade_in):  # the new engine plays alone from the next block
            new.stats, new.tap, old.tap = old.stats, old.tap, None
            self.retired.append(old)
            self.swaps += 1
            self.engine, self._fading = new, None
        return out
