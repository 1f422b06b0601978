"""How the audio callback gets the engine's output: in the callback, or from a worker thread.

``direct``: ``engine.process`` runs inside the callback (through a :class:`BlockAdapter` when the
device block differs from the model's). Lowest latency; the compute must fit in one period.

``threaded``: a worker thread runs the engine; the callback hands it the input and plays the
output the worker made from the previous callback's input. One device block more latency, and a
compute spike up to almost a whole period long is absorbed. An output not ready in time is
played as silence and counted (``missed``); a worker that falls a whole ring behind skips ahead
(``overruns``, ``skipped_frames``) so that the latency stays what was reported.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..engine import BlockAdapter, StreamEngine
from .gate import ComputeGate
from .priority import AUDIO_WORKER, set_realtime

log = logging.getLogger("bendserver.audio")


class DirectProcessor:
    """Runs the engine in the caller's thread on device-sized blocks."""

    mode = "direct"

    def __init__(
        self, engine: StreamEngine, device_block: int, gate: ComputeGate | None = None
    ) -> None:
        self.engine = engine
        self.device_block = device_block
        self.gate = gate or ComputeGate()
        self.adapter = None
        if device_block != engine.block:
            self.adapter = BlockAdapter(
                engine.process,
                engine.block,
                device_block,
                engine.in_channels,
                engine.out_channels,
            )
        #: Samples this path adds to the model's own latency.
        self.latency = self.adapter.latency if self.adapter else 0
        self.missed = 0
        self.overruns = 0
        self.skipped_frames = 0

    def process(self, block: np.ndarray) -> np.ndarray:
        """``[in_channels, frames]`` in, ``[out_channels, frames]`` out."""
        with self.gate:
            if self.adapter is not None:
                return self.adapter.process(block)
            return self.engine.process(block)

    def start(self) -> None:
        """Nothing to start: the callback does the work."""

    def stop(self) -> None:
        """Nothing to stop."""


class ThreadedProcessor:
    """Runs the engine on a worker thread, one device block behind the callback."""

    mode = "threaded"

    def __init__(
        self,
        engine: StreamEngine,
        device_block: int,
        gate: ComputeGate | None = None,
        slots: int = 8,
    ) -> None:
        self.inner = DirectProcessor(engine, device_block, gate)
        self.gate = self.inner.gate
        self.device_block = device_block
        self.latency = self.inner.latency + device_block
        self._slots = slots
        self._in = np.zeros((slots, engine.in_channels, device_block), dtype=np.float32)
        self._out = np.zeros((slots, engine.out_channels, device_block), dtype=np.float32)
        self._silence = np.zeros((engine.out_channels, device_block), dtype=np.float32)
        self._done = np.full(slots, -1, dtype=np.int64)  # which input each output slot holds
        self._written = 0  # inputs handed over (written by the callback only)
        self._processed = 0  # inputs processed (written by the worker only)
        self.missed = 0  #: callbacks whose output was not ready
        self.overruns = 0  #: times the worker fell a ring behind and skipped ahead
        self.skipped_frames = 0  #: input frames the engine never saw (after overruns)
        self._wake = threading.Semaphore(0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audio-worker", daemon=True)

    def process(self, block: np.ndarray) -> np.ndarray:
        """Called by the audio callback: hand over ``block``, return the previous output."""
        index = self._written
        previous = (index - 1) % self._slots
        if index > 0 and self._done[previous] == index - 1:
            out = self._out[previous]
        else:
            out = self._silence
            if index > 0:
                self.missed += 1
        self._in[index % self._slots] = block
        self._written = index + 1
        self._wake.release()
        return out

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.release()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        set_realtime(AUDIO_WORKER)
        while not self._stop.is_set():
            if not self._wake.acquire(timeout=0.2):
                continue
            while self._processed < self._written and not self._stop.is_set():
                behind = self._written - self._processed
                if behind >= self._slots - 1:  # the oldest slots are being overwritten
                    self.overruns += 1
                    self.skipped_frames += (behind - 1) * self.device_block
                    self._processed = self._written - 1
                index = self._processed
                slot = index % self._slots
                try:
                    self._out[slot] = self.inner.process(self._in[slot])
                except Exception as error:  # never leave the callback without output
                    self._out[slot] = 0.0
                    log.error("audio worker: block failed: %s", error)
                self._done[slot] = index
                self._processed = index + 1
