"""The output fuse: what stands between a bended model and the speakers.

Bending can make a model output NaN, Inf, a DC offset or a level that would hurt: the fuse
replaces non-finite samples with 0 (counting them), removes DC with a one-pole high-pass, and
soft-limits peaks to a ceiling (linear below the knee, tanh above it).
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter


class OutputFuse:
    """Per-block output protection; ``process`` returns a new array."""

    def __init__(
        self,
        channels: int,
        sample_rate: int,
        ceiling: float = 0.99,
        knee: float = 0.8,
        dc_cutoff_hz: float = 10.0,
    ) -> None:
        if not 0 < knee < 1 or ceiling <= 0:
            raise ValueError("the fuse needs ceiling > 0 and 0 < knee < 1")
        self.ceiling = float(ceiling)
        self.knee = float(knee) * self.ceiling
        pole = float(np.exp(-2 * np.pi * dc_cutoff_hz / sample_rate))
        self._b = np.array([1.0, -1.0])
        self._a = np.array([1.0, -pole])
        self._state = np.zeros((channels, 1))
        self.nonfinite_samples = 0
        self.limited_blocks = 0

    def reset(self) -> None:
        self._state[:] = 0.0

    def process(self, block: np.ndarray) -> np.ndarray:
        finite = np.isfinite(block)
        if not finite.all():
            self.nonfinite_samples += int(block.size - finite.sum())
            block = np.where(finite, block, 0.0)
        out, self._state = lfilter(self._b, self._a, block, axis=-1, zi=self._state)
        if max(out.max(), -out.min()) > self.knee:  # the limiter's work only when it bites
            self.limited_blocks += 1
            magnitude = np.abs(out)
            room = self.ceiling - self.knee
            squashed = self.knee + room * np.tanh((magnitude - self.knee) / room)
            out = np.where(magnitude > self.knee, np.sign(out) * squashed, out)
        return out.astype(np.float32)
