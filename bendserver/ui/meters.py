"""What the control page's meters show, computed on the control side at the page's rate.

From the engine's :class:`~bendserver.engine.tap.BlockTap` (the blocks in and out since the
last look), its compute times and fuse counters, and the server's counters: input and output
peak and RMS levels (dBFS), how much of the output the limiter touched, compute time against the
block's duration, xruns, and a spectrum and scope of the output. Nothing here runs on the audio
thread: the audio side only copies blocks into the tap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import StreamEngine
from ..engine.tap import BlockTap

#: Samples the spectrum is computed over (Hann window), and its log-spaced bands.
SPECTRUM_FRAMES = 2048
BANDS = 48
LOWEST_HZ = 30.0
#: Points of the scope (the newest output samples of the first channel).
SCOPE_POINTS = 256
#: The level shown for silence, in dBFS.
FLOOR_DB = -96.0


class Meters:
    """Meters of ``engine``: installs a tap on it; ``counters()`` gives the server's counters
    (``xruns``, ...), as ``/stats`` has them; ``frames()`` the newest frames of its methods at
    a control rate, for a plot (:meth:`bendserver.osc.frames.FrameStreams.recent`); ``errors()``
    the newest ``/error`` replies; the modulators' values come from the engine's."""

    def __init__(
        self,
        engine: StreamEngine,
        counters: Callable[[], dict[str, float]],
        frames: Callable[[], dict[str, Any]] | None = None,
        errors: Callable[[], list[Any]] | None = None,
    ) -> None:
        self.engine = engine
        self.counters = counters
        self.frames = frames
        #: The newest /error replies (numbered), from any source, for the page to show.
        self.errors = errors
        spec = engine.spec  # frames at a control rate are plotted, not metered: one channel
        self.tap = BlockTap(
            engine.in_channels if spec.in_ratio == 1 else 1,
            engine.out_channels if spec.out_ratio == 1 else 1,
        )
        engine.tap = self.tap
        self._frame = 0
        self._block = engine.stats.blocks
        self._limited = self._limited_samples()
        rate = engine.sample_rate
        edges = np.geomspace(LOWEST_HZ, rate / 2, BANDS + 1)
        bins = np.fft.rfftfreq(SPECTRUM_FRAMES, 1 / rate)
        #: Each FFT bin's band (bins below the lowest band: -1, left out).
        self._band_of = np.searchsorted(edges, bins, side="right") - 1
        self._band_of[self._band_of >= BANDS] = BANDS - 1
        self._window = np.hanning(SPECTRUM_FRAMES).astype(np.float32)

    def snapshot(self) -> dict[str, Any]:
        """The meters since the last snapshot (levels, limiter, compute) and now (spectrum,
        scope, counters), as JSON-ready numbers."""
        engine = self.engine
        dry, out, self._frame = self.tap.read(self._frame)
        frames = out.shape[-1]
        limited = self._limited_samples()
        limiting = (limited - self._limited) / max(1, frames * out.shape[0])
        self._limited = limited
        times = engine.stats.recent_ms(self._block)
        self._block = engine.stats.blocks
        _, recent, _ = self.tap.read(self._frame - SPECTRUM_FRAMES)
        counters = self.counters()
        return {
            "input": _levels(dry),
            "output": _levels(out),
            "limiting": round(min(1.0, limiting), 4),
            "compute_ms": {
                "p50": round(float(np.median(times)), 3) if len(times) else 0.0,
                "max": round(float(times.max()), 3) if len(times) else 0.0,
                "budget": round(1e3 * engine.block / engine.sample_rate, 3),
            },
            "xruns": int(counters.get("xruns", 0)),
            "late": int(engine.stats.late),
            "blocks": int(engine.stats.blocks),
            "spectrum": self._spectrum(recent),
            "spectrum_hz": [LOWEST_HZ, engine.sample_rate / 2],
            "scope": _scope(out if frames >= SCOPE_POINTS else recent),
            "frames": self.frames() if self.frames is not None else {},
            "modulators": engine.modulation.shown() if engine.modulation is not None else {},
            "errors": self.errors() if self.errors is not None else [],
        }

    def _limited_samples(self) -> int:
        fuse = self.engine.fuse
        return fuse.limited_samples if fuse is not None else 0

    def _spectrum(self, audio: np.ndarray) -> list[float]:
        """Band levels (dBFS of a full-scale sine's peak) of the newest output frames."""
        if audio.shape[-1] < SPECTRUM_FRAMES:
            return [FLOOR_DB] * BANDS
        mono = audio[:, -SPECTRUM_FRAMES:].mean(axis=0) * self._window
        power = np.abs(np.fft.rfft(mono)) ** 2
        keep = self._band_of >= 0
        bands = np.bincount(self._band_of[keep], weights=power[keep], minlength=BANDS)
        peak = 2 * np.sqrt(bands) / self._window.sum()
        return [round(float(v), 1) for v in _db(peak)]


def _levels(audio: np.ndarray) -> dict[str, float]:
    """Peak and RMS of every channel together, in dBFS."""
    if audio.size == 0:
        return {"peak": FLOOR_DB, "rms": FLOOR_DB}
    peak = float(np.abs(audio).max())
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))
    return {"peak": round(float(_db(peak)), 1), "rms": round(float(_db(rms)), 1)}


def _scope(audio: np.ndarray) -> list[float]:
    """The newest :data:`SCOPE_POINTS` samples of the first channel."""
    if audio.size == 0:
        return []
    return [round(float(v), 3) for v in audio[0, -SCOPE_POINTS:]]


def _db(value: Any) -> Any:
    return np.maximum(FLOOR_DB, 20 * np.log10(np.maximum(value, 1e-12)))
