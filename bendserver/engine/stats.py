"""Engine statistics: counters and a ring of per-block compute times (no mean alone)."""

from __future__ import annotations

import numpy as np


class EngineStats:
    """Written by the audio thread (cheap scalar writes), read by anyone."""

    def __init__(self, history: int = 8192) -> None:
        self._times = np.zeros(history, dtype=np.float64)
        self.blocks = 0
        self.late = 0
        self.errors = 0

    def record(self, seconds: float, budget: float) -> None:
        self._times[self.blocks % len(self._times)] = seconds
        self.blocks += 1
        if seconds > budget:
            self.late += 1

    def compute_ms(self) -> dict[str, float]:
        """p50, p99 and max of the recent blocks' compute times, in milliseconds."""
        count = min(self.blocks, len(self._times))
        if count == 0:
            return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
        times = self._times[:count] * 1e3
        p50, p99 = np.percentile(times, [50, 99])
        return {"p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(times.max())}

    def recent_ms(self, since: int) -> np.ndarray:
        """The compute times (ms) of the blocks after block count ``since`` (the newest ones
        the ring still holds), for a meter that reads them as they come."""
        count = max(0, min(self.blocks - since, len(self._times)))
        order = np.arange(self.blocks - count, self.blocks) % len(self._times)
        return self._times[order] * 1e3
