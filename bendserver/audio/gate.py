"""Keeping the GIL free for the audio: when it enters its callback and while it computes.

The audio callback needs the GIL to start, and the engine's torch calls release and retake it
around every operation. While other Python threads are busy (the control worker applying a
burst of messages, the OSC receiver parsing), each take can wait for the interpreter's switch
interval, and several waiting threads make it several rounds: measured during a burst of 10 000
messages, blocks of 2 ms took 24 ms, and callbacks started up to 6 ms after JACK called them.

So the control threads ask the gate before each message. It is closed while a block is computed
(``with gate:`` around the engine call) and, given the audio clock, for ``guard`` seconds before
the next callback is due until that callback has started: the control threads work in the gaps
between blocks and leave the GIL free when the audio needs it. A message held back past a block
boundary applies a block later (measured from oscsend to the first changed block at 256
frames: p50 3.7 ms, max 6.8 ms), which is what keeping the callback on time costs: at 128
frames and 1000 messages a second, letting the first messages of each block through right
before a callback gave 38 xruns in 20 s, waiting for the gap 1 (measured with
``bendserver stress``). An :class:`Admission` can still let ``free_per_block`` messages
through once the compute is done. The guard is at most a quarter of the block period: at 64
frames (1.3 ms) a whole millisecond left no gap once a block was computed, and every message
waited out its admission's timeout (20 messages a second).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What the gate needs of :class:`bendserver.audio.AudioClock`."""

    callbacks: int

    def next_due(self) -> float | None: ...


class ComputeGate:
    """Closed while a block is computed and just before a callback is due; open otherwise."""

    def __init__(
        self, clock: Clock | None = None, guard: float = 0.001, period: float | None = None
    ) -> None:
        self.clock = clock
        #: Seconds before a callback when no control work starts, at most a quarter of the
        #: block ``period`` (seconds) where it is given.
        self.guard = guard if period is None else min(guard, period / 4)
        self._open = threading.Event()
        self._open.set()
        self.blocks = 0  #: blocks computed so far

    def __enter__(self) -> ComputeGate:
        self._open.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self.blocks += 1
        self._open.set()

    def admission(self, free_per_block: int = 0) -> Admission:
        """A control thread's way through the gate (one per thread)."""
        return Admission(self, free_per_block)

    @property
    def computing(self) -> bool:
        """Whether a block is being computed now (a cheap check, no waiting)."""
        return not self._open.is_set()

    def block_count(self) -> int:
        """Callbacks so far (with a clock), else blocks computed: what "per block" counts."""
        return self.clock.callbacks if self.clock is not None else self.blocks

    def wait_computed(self, timeout: float) -> bool:
        """Wait until no block is being computed; False after ``timeout`` seconds."""
        return self._open.wait(timeout)

    def wait_open(self, timeout: float) -> bool:
        """Wait until no block is being computed and the next callback is not imminent; False
        when that took longer than ``timeout`` seconds (the audio may have stopped)."""
        deadline = time.monotonic() + timeout
        clock = self.clock
        while self._open.wait(max(0.0, deadline - time.monotonic())):
            due = None if clock is None else clock.next_due()
            if clock is None or due is None or time.time() < due - self.guard:
                return True
            if not _wait_for_callback(clock, deadline):
                return False
        return False


class Admission:
    """One control thread's use of a :class:`ComputeGate`. Every message waits while a block is
    computed: that costs no latency (blocks are computed at the start of their period, so the
    message still makes the next block). The first ``free_per_block`` messages of a block may
    then run right before a callback, later ones wait for it: a message held back past a block
    boundary would apply a block later, and only a burst needs keeping out of the way."""

    def __init__(self, gate: ComputeGate, free_per_block: int = 4) -> None:
        self.gate = gate
        self.free_per_block = free_per_block
        self._block = -1
        self._used = 0

    def wait(self, timeout: float) -> bool:
        """Wait for the gate as above; False if that timed out (go on anyway)."""
        block = self.gate.block_count()
        if block != self._block:
            self._block, self._used = block, 0
        self._used += 1
        if self._used <= self.free_per_block:
            return self.gate.wait_computed(timeout)
        return self.gate.wait_open(timeout)


def _wait_for_callback(clock: Clock, deadline: float) -> bool:
    """Wait for the next callback to start (False at ``deadline``)."""
    callbacks = clock.callbacks
    while clock.callbacks == callbacks:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True
