"""The output fuse: what stands between a bended model and the speakers.

Bending can make a model output NaN, Inf, a DC offset or a level that would hurt. The fuse works
sample by sample, so its output does not depend on how the stream is cut into blocks: non-finite
samples become 0 (counted), a DC blocker (a one-pole high-pass filter with its state carried from
block to block, run by ``scipy.signal.lfilter``) removes offsets, and a soft limiter leaves every
sample under the knee as it is and bends the ones above it towards the ceiling (tanh).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import lfilter


class OutputFuse:
    """Per-sample output protection for ``channels`` channels; ``process`` returns a new
    float32 array. ``dc_cutoff_hz`` is the DC blocker's -3 dB point (0: no DC blocker)."""

    def __init__(
        self,
        channels: int,
        sample_rate: int,
        ceiling: float = 0.99,
        knee: float = 0.8,
        dc_cutoff_hz: float = 5.0,
    ) -> None:
        if not 0 < knee < 1 or ceiling <= 0:
            raise ValueError("the fuse needs ceiling > 0 and 0 < knee < 1")
        self.ceiling = float(ceiling)
        self.knee = float(knee) * self.ceiling
        self.sample_rate = sample_rate
        self.dc_cutoff_hz = dc_cutoff_hz
        # y[n] = g * (x[n] - x[n-1]) + p * y[n-1]: unity gain at Nyquist, a zero at DC.
        pole = math.exp(-2 * math.pi * dc_cutoff_hz / sample_rate)
        gain = (1 + pole) / 2
        self._b = np.array([gain, -gain], dtype=np.float32)
        self._a = np.array([1.0, -pole], dtype=np.float32)
        self._state = np.zeros((channels, 1), dtype=np.float32)
        self.nonfinite_samples = 0
        self.limited_samples = 0

    def reset(self) -> None:
        """Forget the DC blocker's past (as when the stream starts)."""
        self._state[:] = 0.0

    def process(self, block: np.ndarray) -> np.ndarray:
        block = np.asarray(block, dtype=np.float32)
        # A huge finite sample would stay in the DC blocker's state for seconds: clip first
        # (the limiter puts anything this loud at the ceiling anyway). Two reductions tell
        # whether there is anything to clip or zero (NaN fails every comparison).
        limit = 16 * self.ceiling
        if block.size and not (-limit <= block.min() and block.max() <= limit):
            finite = np.isfinite(block)
            self.nonfinite_samples += int(block.size - finite.sum())
            block = np.clip(np.where(finite, block, np.float32(0.0)), -limit, limit)
        if self.dc_cutoff_hz > 0 and block.shape[-1] > 0:  # lfilter forgets its state on 0
            out, self._state = lfilter(self._b, self._a, block, axis=-1, zi=self._state)
            out = out.astype(np.float32, copy=False)
        else:
            out = block.copy()
        if out.size:
            self._limit(out)
        return out

    def hold(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` (float32, after a resampler) clipped in place to the ceiling: resampling
        what the limiter left may overshoot it (ringing near the new Nyquist), so the ceiling
        holds in a file at another rate too. Clipped samples count in ``limited_samples``."""
        if audio.size and np.abs(audio).max() > self.ceiling:
            self.limited_samples += int(np.count_nonzero(np.abs(audio) > self.ceiling))
            np.clip(audio, -self.ceiling, self.ceiling, out=audio)
        return audio

    def _limit(self, out: np.ndarray) -> None:
        """The soft limiter, in place: whole-block ufuncs and one masked copy (a block is a
        few hundred samples, where a call costs more than its arithmetic, and boolean indexing
        several calls)."""
        magnitude = np.abs(out)
        if magnitude.max() <= self.knee:
            return
        over = magnitude > self.knee
        self.limited_samples += int(np.count_nonzero(over))
        room = self.ceiling - self.knee
        soft = magnitude  # knee + room * tanh((|x| - knee) / room), at most the ceiling
        soft -= self.knee
        soft *= 1.0 / room
        np.tanh(soft, out=soft)
        soft *= room
        soft += self.knee
        np.minimum(soft, self.ceiling, out=soft)
        np.copysign(soft, out, out=soft)
        np.copyto(out, soft, where=over)
