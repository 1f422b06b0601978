"""The control worker: the one thread that turns received messages into engine changes.

The OSC intake process drains the socket and coalesces (a parameter value replaces an older one
of the same address that still waits); this worker takes what it forwards, parses it, and
``Controller.dispatch`` (validation, weight tensors, graph rebuilds) runs here, never on the
audio thread. A bundle's future timetag becomes a sample time against the audio clock and is
passed on as ``at``, so the change applies at the first block that starts at or after it; an
immediate or past timetag applies at the next block.

The worker keeps out of the audio's way: in a burst it dispatches only in the gaps between blocks
(the compute gate; see :mod:`bendserver.audio.gate` for why), and at most ``per_block`` messages
per audio block, so that a burst cannot pile hundreds of changes onto one block boundary.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import Any, Protocol

from ..audio.clock import AudioClock
from ..audio.gate import ComputeGate
from ..control import Controller, coalescing_pattern
from ..errors import BendingError, describe, is_bug
from ..threads import LoopThread
from .intake import Inbox, Letter, address_of
from .packets import Incoming, MalformedPacket, parse_datagram
from .replies import ReplySender

log = logging.getLogger("bendserver.osc")


class Source(Protocol):
    """Where the worker takes messages from: the intake (a process) or an in-process inbox."""

    def take(self, timeout: float) -> Letter | None: ...


class ControlWorker(LoopThread):
    """Dispatches messages taken from ``source`` on its own thread and sends the replies.
    Without a source it has an in-process :class:`Inbox` (fed by ``receive`` and ``submit``)."""

    def __init__(
        self,
        controller: Controller,
        replies: ReplySender,
        clock: AudioClock | None = None,
        gate: ComputeGate | None = None,
        source: Source | None = None,
        capacity: int = 16384,
        per_block: int = 64,
    ) -> None:
        self.controller = controller
        self.replies = replies
        self.clock = clock
        self.gate = gate
        self._admission = gate.admission() if gate is not None else None
        self.per_block = per_block
        if source is None:
            coalescing = re.compile(coalescing_pattern())
            self.inbox: Inbox | None = Inbox(
                lambda a: coalescing.fullmatch(a) is not None, capacity
            )
            source = self.inbox
        else:
            self.inbox = None
        self.source = source
        self.handled = 0  #: messages dispatched without error
        self.errors = 0  #: messages answered with /error (malformed packets included)
        self.malformed = 0  #: datagrams that were not OSC (or used unsupported types)
        self.scheduled = 0  #: messages with a future timetag, passed on with ``at``
        self._budget_block = -1
        self._budget = 0
        super().__init__("osc-control")

    # -- an in-process inbox, for tools and tests ---------------------------------------------

    def receive(self, datagram: bytes, host: str, arrival: float = 0.0) -> None:
        """Queue one datagram from ``host`` in the in-process inbox."""
        self.inbox.put(address_of(datagram), datagram, host, arrival)

    def submit(self, message: Incoming, host: str, arrival: float = 0.0) -> None:
        """Queue one parsed message from ``host`` in the in-process inbox."""
        address = message.address if message.timetag is None else None
        self.inbox.put(address, message, host, arrival)

    def pending(self) -> int:
        """Messages waiting in the in-process inbox."""
        return len(self.inbox) if self.inbox is not None else 0

    # -- the worker thread -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            letter = self.source.take(0.2)
            if letter is None:
                continue
            if isinstance(letter.content, Incoming):
                messages = [letter.content]
            else:
                try:
                    messages = parse_datagram(letter.content)
                except MalformedPacket as error:
                    self.malformed += 1
                    self.errors += 1
                    self.replies.send(letter.host, "/error", ["", f"malformed packet: {error}"])
                    continue
            for message in messages:
                self._pace()
                self._handle(message, letter.host)

    def _handle(self, message: Incoming, host: str) -> None:
        try:
            _check_args(message.args)
            at = self._sample_time(message.timetag)
            replies = self.controller.dispatch(message.address, message.args, at=at)
        except Exception as error:  # a bad message, or a bug: answered, and the server runs on
            self.errors += 1
            if is_bug(error):  # the traceback with serve --debug
                log.error("%s: %s", message.address, describe(error))
                log.debug("%s failed", message.address, exc_info=True)
            self.replies.send(host, "/error", [message.address, describe(error)])
            return
        self.handled += 1
        for address, args in replies:
            self.replies.send(host, address, args)

    def _sample_time(self, timetag: float | None) -> int | None:
        """The sample time of a future timetag, or None (next block)."""
        if timetag is None or self.clock is None or timetag <= time.time():
            return None
        frame = self.clock.frame_at(timetag)
        if frame is not None:
            self.scheduled += 1
        return frame

    def _pace(self) -> None:
        """Wait for the gate (see :mod:`bendserver.audio.gate`), and for the next block once
        ``per_block`` messages went into this one (at most 0.1 s: the audio may have stopped)."""
        gate = self.gate
        if gate is None or self._admission is None:
            return
        block = gate.block_count()
        if block != self._budget_block:
            self._budget_block, self._budget = block, 0
        if self._budget >= self.per_block:
            deadline = time.monotonic() + 0.1
            while gate.block_count() == block and time.monotonic() < deadline:
                time.sleep(0.0005)
            self._budget_block, self._budget = gate.block_count(), 0
        self._admission.wait(0.05)
        self._budget += 1


def _check_args(args: Sequence[Any]) -> None:
    for index, value in enumerate(args):
        if not isinstance(value, (int, float, str)):
            raise BendingError(
                f"argument {index + 1} is a {type(value).__name__}: the address space takes "
                "numbers and strings"
            )
