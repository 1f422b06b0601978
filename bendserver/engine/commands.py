"""Commands from the control side to the audio thread, and parameter ramps.

The control side (OSC, a score, Python) does the heavy part of a change itself (validation,
weight tensors, graph rebuilds) and submits a :class:`Command` whose ``apply`` is cheap: a few
pointer swaps or in-place scalar writes. The audio thread drains the queue at each block
boundary and applies every command that is due.
"""

from __future__ import annotations

import heapq
import itertools
import queue
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(order=True)
class Command:
    """A change applied at the first block that starts at or after sample ``at`` (None: next)."""

    at: int
    seq: int
    apply: Callable[[], None] = field(compare=False)
    what: str = field(default="", compare=False)


class CommandQueue:
    """Submitted from any thread; drained by the audio thread only."""

    def __init__(self) -> None:
        self._incoming: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._timeline: list[Command] = []
        self._seq = itertools.count()
        self.applied = 0

    def submit(self, apply: Callable[[], None], at: int | None = None, what: str = "") -> None:
        self._incoming.put(Command(-1 if at is None else int(at), next(self._seq), apply, what))

    def due(self, block_start: int) -> list[Command]:
        """The commands to apply before the block that starts at ``block_start``, in order."""
        while True:
            try:
                heapq.heappush(self._timeline, self._incoming.get_nowait())
            except queue.Empty:
                break
        ready = []
        while self._timeline and self._timeline[0].at <= block_start:
            ready.append(heapq.heappop(self._timeline))
        return ready

    def pending(self) -> int:
        return len(self._timeline) + self._incoming.qsize()


class Ramp:
    """Moves a 0-d parameter tensor linearly to a target, one step per block."""

    def __init__(self, tensor: torch.Tensor, target: float, blocks: int) -> None:
        self.tensor = tensor
        self.start = float(tensor)
        self.target = float(target)
        self.blocks = max(1, blocks)
        self.step = 0

    def advance(self) -> bool:
        """Write the next value; False once the target is reached."""
        self.step += 1
        fraction = min(1.0, self.step / self.blocks)
        self.tensor.fill_(self.start + (self.target - self.start) * fraction)
        return fraction < 1.0
