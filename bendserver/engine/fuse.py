"""The output fuse: what stands between a bended model and the speakers.

Bending can make a model output NaN, Inf, a DC offset or a level that would hurt. The fuse works
sample by sample, so its output does not depend on how the stream is cut into blocks: non-finite
samples become 0 (counted), a DC blocker (a one-pole high-pass filter with its state carried from
block to block) removes offsets, and a soft limiter leaves every sample under the knee as it is
and bends the ones above it towards the ceiling (tanh).

The one-pole recursion is solved in closed form, in float64, by a cumulative sum (numpy's):
``scipy.signal.lfilter`` computed it before, but importing ``scipy.signal`` cost 1.56x the CPU
time of importing torch and numpy alone (a server's start waited for it).
"""

from __future__ import annotations

import math

import numpy as np

#: The largest growth of the closed form's weights within one piece of a block (2**10): float64
#: then keeps the recursion exact to far below float32's resolution.
_GROWTH = 10 * math.log(2)


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
        self._pole = math.exp(-2 * math.pi * dc_cutoff_hz / sample_rate)
        self._gain = (1 + self._pole) / 2
        # y[n] = p^n (p y[-1] + sum_{k<=n} p^-k u[k]), over pieces short enough that p^-k stays
        # under 2**10 (one piece for a block under 10 000 samples at 5 Hz and 48 kHz).
        piece = int(_GROWTH / -math.log(self._pole)) if 0 < self._pole < 1 else 1
        steps = np.arange(max(1, min(piece, 1 << 16)), dtype=np.float64)
        self._decay, self._gain_growth = self._pole**steps, self._gain * self._pole**-steps
        self._last_in = np.zeros(channels)  # x[-1] and y[-1] of each channel
        self._last_out = np.zeros(channels)
        self.nonfinite_samples = 0
        self.limited_samples = 0

    def reset(self) -> None:
        """Forget the DC blocker's past (as when the stream starts)."""
        self._last_in[:] = 0.0
        self._last_out[:] = 0.0

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
        if self.dc_cutoff_hz > 0 and block.shape[-1] > 0:
            out = self._dc_block(block)
        else:
            out = block.copy()
        if out.size:
            self._limit(out)
        return out

    def _dc_block(self, block: np.ndarray) -> np.ndarray:
        """The DC blocker over ``[channels, frames]`` (float32 out), its state carried on."""
        x = block.astype(np.float64)
        frames, piece = x.shape[-1], len(self._decay)
        if frames > piece:  # a block longer than a piece: piece by piece
            parts = [self._dc_block(block[:, i : i + piece]) for i in range(0, frames, piece)]
            return np.concatenate(parts, -1)
        growth = self._gain_growth[:frames]  # g p^-k
        y = x * growth  # the sum's terms: g p^-k (x[k] - x[k-1])
        y[:, 1:] -= x[:, :-1] * growth[1:]
        y[:, 0] -= self._gain * self._last_in
        np.cumsum(y, axis=-1, out=y)
        y += (self._pole * self._last_out)[:, None]
        y *= self._decay[:frames]
        self._last_in, self._last_out = x[:, -1].copy(), y[:, -1].copy()
        return y.astype(np.float32)

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
