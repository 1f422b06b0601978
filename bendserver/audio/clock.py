"""The audio clock: which stream sample is played at which wall-clock time.

OSC timetags are wall-clock times (``time.time()``'s clock); engine commands take sample times.
The audio callback marks ``(frames so far, time.time())`` at every callback. A callback can only
run late, never early, so the smallest ``wall - frames / rate`` over recent callbacks is the best
estimate of when frame 0 was due; a window of them follows the slow drift of a sound card's
clock against the system's.
"""

from __future__ import annotations

import math

import numpy as np


class AudioClock:
    """Maps wall-clock time to stream frames. Marked by the audio thread, read by any."""

    def __init__(self, sample_rate: int, window: int = 64) -> None:
        self.sample_rate = sample_rate
        self._origins = np.full(window, np.inf)
        self.callbacks = 0  #: callbacks marked so far
        self._next_frame = 0

    def mark(self, frame: int, wall: float, frames: int) -> None:
        """The callback for ``frames`` frames from stream frame ``frame`` ran at ``wall``
        (called by the audio thread)."""
        self._origins[self.callbacks % len(self._origins)] = wall - frame / self.sample_rate
        self._next_frame = frame + frames
        self.callbacks += 1

    def origin(self) -> float | None:
        """The wall time at which frame 0 was due, or None before the first callback."""
        if self.callbacks == 0:
            return None
        return float(np.min(self._origins))

    def frame_at(self, wall: float) -> int | None:
        """The first frame due at or after ``wall`` (None before the stream runs)."""
        origin = self.origin()
        if origin is None:
            return None
        return math.ceil((wall - origin) * self.sample_rate - 1e-6)

    def next_due(self) -> float | None:
        """When the next callback is due (None before the stream runs)."""
        return self.wall_at(self._next_frame)

    def wall_at(self, frame: int) -> float | None:
        """When ``frame`` is due (None before the stream runs)."""
        origin = self.origin()
        return None if origin is None else origin + frame / self.sample_rate
