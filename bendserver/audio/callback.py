"""The audio callback: input, processing, output, recording, clock and counters.

One function shaped like sounddevice's callback (``indata, outdata, frames, time, status``),
used by the PortAudio backends and by the null backend alike. It never raises (an exception in a
PortAudio callback would stop the stream): a failing block is played as silence and counted.
Besides the audio it marks the clock (for timetags), counts xruns from the callback's status,
and keeps a :class:`BlockLog` of when each block ran and how loud it was.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

import numpy as np

from .clock import AudioClock
from .sources import Source

log = logging.getLogger("bendserver.audio")

#: Status flags of a PortAudio callback that mean the device lost or repeated samples.
XRUN_FLAGS = ("input_underflow", "input_overflow", "output_underflow", "output_overflow")


class Processor(Protocol):
    latency: int
    missed: int
    skipped_frames: int

    def process(self, block: np.ndarray) -> np.ndarray: ...


class Recorder(Protocol):
    def push(self, block: np.ndarray) -> None: ...


class BlockLog:
    """A ring of the last callbacks: wall-clock start and end, frame, mean absolute output.

    Preallocated and written with scalar stores, so logging costs the callback nothing; read by
    tests and tools to measure when a change reached the output."""

    def __init__(self, size: int = 4096) -> None:
        self.start = np.zeros(size)
        self.end = np.zeros(size)
        self.frame = np.zeros(size, dtype=np.int64)
        self.level = np.zeros(size)
        self.count = 0

    def record(self, start: float, end: float, frame: int, level: float) -> None:
        """Log one callback (audio thread)."""
        index = self.count % len(self.start)
        self.start[index], self.end[index] = start, end
        self.frame[index], self.level[index] = frame, level
        self.count += 1

    def recent(self) -> dict[str, np.ndarray]:
        """The logged callbacks, oldest first (a copy)."""
        size = len(self.start)
        count = min(self.count, size)
        order = (np.arange(self.count - count, self.count)) % size
        return {
            "start": self.start[order].copy(),
            "end": self.end[order].copy(),
            "frame": self.frame[order].copy(),
            "level": self.level[order].copy(),
        }


class AudioCallback:
    """Feeds ``processor`` from the device input (duplex streams) or ``source``."""

    def __init__(
        self,
        processor: Processor,
        source: Source,
        clock: AudioClock,
        recorder: Recorder | None = None,
    ) -> None:
        self.processor = processor
        self.source = source
        self.clock = clock
        self.recorder = recorder
        self.log = BlockLog()
        self.frames = 0  #: stream frames so far
        self.callbacks = 0
        self.xruns = 0  #: callbacks whose status reported an under- or overflow
        self.errors = 0  #: callbacks that failed (played as silence)

    def __call__(
        self, indata: np.ndarray | None, outdata: np.ndarray, frames: int, info: Any, status: Any
    ) -> None:
        started = time.time()
        self.clock.mark(self.frames - self.processor.skipped_frames, started, frames)
        if any(getattr(status, flag, False) for flag in XRUN_FLAGS):
            self.xruns += 1
        try:
            block = self.source.read(frames) if indata is None else indata.T
            out = self.processor.process(block)
            outdata[:] = out.T
            level = float(np.abs(out).mean())
            if self.recorder is not None:
                self.recorder.push(out)
        except Exception as error:  # the stream must go on
            outdata.fill(0.0)
            level = 0.0
            self.errors += 1
            if self.errors == 1:
                log.error("audio callback failed (%s: %s); playing silence", type(error), error)
        self.frames += frames
        self.callbacks += 1
        self.log.record(started, time.time(), self.frames - frames, level)

    def counters(self) -> dict[str, float]:
        """Xruns, outputs not ready in time (threaded mode), failed callbacks, and how far
        callbacks started from their period (jitter, ms: p50, p99, max over the last ones)."""
        return {
            "xruns": self.xruns,
            "missed": self.processor.missed,
            "callback_errors": self.errors,
            **self.jitter_ms(),
        }

    def jitter_ms(self) -> dict[str, float]:
        """|interval between callback starts - the period|, in ms (control side)."""
        recent = self.log.recent()
        starts, frames = recent["start"], recent["frame"]
        if len(starts) < 3:
            return {"jitter_p50_ms": 0.0, "jitter_p99_ms": 0.0, "jitter_max_ms": 0.0}
        intervals = np.diff(starts)
        periods = np.diff(frames) / self.clock.sample_rate
        jitter = 1e3 * np.abs(intervals - periods)
        p50, p99 = np.percentile(jitter, [50, 99])
        return {
            "jitter_p50_ms": float(p50),
            "jitter_p99_ms": float(p99),
            "jitter_max_ms": float(jitter.max()),
        }
