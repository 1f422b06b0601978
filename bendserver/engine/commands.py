"""Commands from the control side to the audio thread, and parameter ramps.

The control side prepares everything heavy (weight tensors, graph modules) and submits a
:class:`Command` holding it; the audio thread drains the queue at each block boundary and applies
every command that is due, in sample-time order. Applied (and cancelled) commands go back to the
control side through :attr:`CommandQueue.released`, with whatever they replaced, to be freed
there: the audio thread never frees a tensor or a graph module. A command cancelled before its
time (a later change re-planned it) leaves the audio side's queue soon, not at its time: a
client re-planning changes scheduled an hour ahead would otherwise grow it without limit.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import queue
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(order=True)
class Command:
    """A payload applied at the first block that starts at or after sample ``at`` (-1: next)."""

    at: int
    seq: int
    payload: Any = field(compare=False)
    what: str = field(default="", compare=False)
    #: Set by the control side when a later command replaces this one before it applies.
    cancelled: bool = field(default=False, compare=False)
    #: Set by the audio thread once the command has been applied (or skipped, if cancelled).
    done: bool = field(default=False, compare=False)
    #: The sample time of the block it applied at (set by the audio thread; -1: not yet).
    applied_at: int = field(default=-1, compare=False)


#: Cancelled commands the audio side's queue holds, beyond as many as live ones, before it
#: sweeps them out (each sweep costs one pass over the queue, paid for by that many cancels).
SWEEP_SLACK = 64


class CommandQueue:
    """Submitted from the control side; drained by the audio thread only."""

    def __init__(self) -> None:
        self._incoming: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._timeline: list[Command] = []
        self._seq = itertools.count()
        self._submitted = 0
        self.applied = 0  #: commands applied (audio thread)
        self.finished = 0  #: commands applied or skipped as cancelled (audio thread)
        #: Commands done with, handed back for the control side to drop (freeing what they hold).
        self.released: collections.deque[Command] = collections.deque()
        self.cancels = 0  #: commands cancelled (control side)
        self._swept = 0  #: ``cancels`` when the audio side last swept its queue
        #: Where submitted commands are also listed while set (a score's recording: the block
        #: each message's change applied at; control side).
        self.observer: list[Command] | None = None

    def submit(self, payload: Any, at: int | None = None, what: str = "") -> Command:
        command = Command(-1 if at is None else int(at), next(self._seq), payload, what)
        self._submitted += 1
        if self.observer is not None:
            self.observer.append(command)
        self._incoming.put(command)
        return command

    def cancel(self, command: Command) -> None:
        """Skip ``command``: a later one replaces it (control side)."""
        command.cancelled = True
        self.cancels += 1

    def due(self, block_start: int) -> list[Command]:
        """The commands to apply before the block that starts at ``block_start``, in order."""
        cancels = self.cancels  # each cancelled before now was submitted before the pull below
        while True:
            try:
                heapq.heappush(self._timeline, self._incoming.get_nowait())
            except queue.Empty:
                break
        ready = []
        while self._timeline and self._timeline[0].at <= block_start:
            ready.append(heapq.heappop(self._timeline))
            ready[-1].applied_at = block_start
        if 2 * (cancels - self._swept) >= len(self._timeline) + SWEEP_SLACK:
            self._sweep(cancels)
        return ready

    def _sweep(self, cancels: int) -> None:
        """Hand back the cancelled commands waiting in the queue (audio thread). Called once
        about half the queue may be cancelled: the queue stays within twice its live commands
        (plus :data:`SWEEP_SLACK`), and a sweep's pass is paid for by as many cancels."""
        live = []
        for command in self._timeline:
            if command.cancelled:
                self.finish(command)
            else:
                live.append(command)
        heapq.heapify(live)
        self._timeline = live
        self._swept = cancels

    def finish(self, command: Command) -> None:
        """Mark ``command`` done and hand it back (audio thread)."""
        command.done = True
        self.finished += 1
        self.released.append(command)

    def pending(self) -> int:
        """Commands submitted and not done yet."""
        return self._submitted - self.finished

    def drain_released(self) -> None:
        """Drop the commands the audio thread handed back, and what they hold (control side)."""
        while self.released:
            self.released.popleft()


class Ramp:
    """Moves a 0-d parameter tensor linearly to a target, one step per block (0 blocks: at
    once). Made on the control side; ``begin`` and ``advance`` run on the audio thread."""

    def __init__(self, tensor: torch.Tensor, target: float, blocks: int) -> None:
        self.tensor = tensor
        self.target = float(target)
        self.blocks = blocks
        self.start = self.target
        self.step = 0

    def begin(self) -> None:
        """Start from the tensor's current value (the first step is the next ``advance``)."""
        self.start = float(self.tensor)
        self.step = 0

    def advance(self) -> bool:
        """Write the next value; False once the target is reached."""
        self.step += 1
        fraction = min(1.0, self.step / max(1, self.blocks))
        self.tensor.fill_(self.start + (self.target - self.start) * fraction)
        return fraction < 1.0
