"""The output fuse: what stands between a bended model and the speakers.

Bending can make a model output NaN, Inf, a DC offset or a level that would hurt: the fuse
replaces non-finite samples with 0 (counting them), removes DC, and soft-limits peaks to a
ceiling (linear below the knee, tanh above it). It runs on every block, so its fast path (a
clean block) costs a few vector passes.
"""

from __future__ import annotations

import math

import numpy as np


class OutputFuse:
    """Per-block output protection; ``process`` returns a new float32 array.

    The DC blocker tracks each channel's mean at block rate (a one-pole low-pass with the
    cutoff ``dc_cutoff_hz``) and subtracts it, ramped linearly across the block so that the
    correction never steps.
    """

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
        self.sample_rate = sample_rate
        self.dc_cutoff_hz = dc_cutoff_hz
        self._dc = np.zeros((channels, 1), dtype=np.float32)
        self._ramps: dict[int, tuple[float, np.ndarray]] = {}
        self.nonfinite_samples = 0
        self.limited_blocks = 0

    def reset(self) -> None:
        self._dc[:] = 0.0

    def _ramp(self, frames: int) -> tuple[float, np.ndarray]:
        """The tracker's coefficient for blocks of ``frames``, and a 0..1 ramp across them."""
        if frames not in self._ramps:
            cutoff = 2 * math.pi * self.dc_cutoff_hz * frames / self.sample_rate
            ramp = np.arange(1, frames + 1, dtype=np.float32) / np.float32(frames)
            self._ramps[frames] = (1.0 - math.exp(-cutoff), ramp)
        return self._ramps[frames]

    def process(self, block: np.ndarray) -> np.ndarray:
        means = block.mean(axis=-1, keepdims=True)
        if not np.isfinite(means).all():
            finite = np.isfinite(block)
            self.nonfinite_samples += int(block.size - finite.sum())
            block = np.where(finite, block, np.float32(0.0))
            means = block.mean(axis=-1, keepdims=True)
        coefficient, ramp = self._ramp(block.shape[-1])
        start = self._dc
        self._dc = start + coefficient * (means - start)
        out = block - start
        out -= (self._dc - start) * ramp
        if np.abs(out).max() > self.knee:  # the limiter's work only when it bites
            self.limited_blocks += 1
            magnitude = np.abs(out)
            room = self.ceiling - self.knee
            squashed = self.knee + room * np.tanh((magnitude - self.knee) / room)
            out = np.where(magnitude > self.knee, np.sign(out) * squashed, out)
            np.clip(out, -self.ceiling, self.ceiling, out=out)  # float32 rounding of tanh
        return out.astype(np.float32, copy=False)
