"""The control worker: the one thread that turns received messages into engine changes.

The OSC intake process drains the socket and coalesces (a parameter value replaces an older one
of the same address that still waits); this worker takes what it forwards, parses it, and
``Controller.dispatch`` (validation, weight tensors, graph rebuilds) runs here, never on the
audio thread. A bundle's future timetag becomes a sample time against the audio clock and is
passed on as ``at``, so the change applies at the first block that starts at or after it; an
immediate or past timetag applies at the next block. A message for later waits in the
controller's schedule (per sender's host) and is prepared here shortly before it is due.

A long change (a preset of thousands of ops) is prepared in slices (:mod:`bendserver.slices`):
between two, queries that arrived meanwhile are answered (and a load while a load runs is
refused), changes are held to follow it in order, the audio gets the interpreter, and a stop
ends it. Meanwhile the collector runs only its
young generations (a full pass walks every object alive holding the interpreter: 0.25-0.3 s
with 4 000 ops loaded, measured), and what the change made is then set aside for good
(``gc.freeze``, as the server does with what it loaded at start).

The worker keeps out of the audio's way: in a burst it dispatches only in the gaps between blocks
(the compute gate; see :mod:`bendserver.audio.gate` for why), and at most ``per_block`` messages
per audio block, so that a burst cannot pile hundreds of changes onto one block boundary.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from ..audio.clock import AudioClock
from ..audio.gate import ComputeGate
from ..control import Controller, coalescing_pattern
from ..errors import BendingError, describe, is_bug
from ..slices import sliced
from ..threads import LoopThread
from .intake import Inbox, Letter, address_of, read_too_large
from .packets import Incoming, MalformedPacket, parse_datagram
from .replies import ReplySender

log = logging.getLogger("bendserver.osc")

#: The sender named by in-process control sources (MIDI): nothing is sent back to it; an error
#: is counted, and logged once per address (a control moved keeps sending the same one).
LOCAL = "local"
#: Addresses whose errors from in-process sources are logged, at most.
LOCAL_LOGGED = 64


class Stopping(BendingError):
    """Raised between the slices of a long change when the worker is asked to stop."""


class Source(Protocol):
    """Where the worker takes messages from: the intake (a process) or an in-process inbox."""

    def take(self, timeout: float) -> Letter | None: ...

    def wake(self) -> None:
        """Make a ``take`` waiting now return (an in-process message is waiting)."""


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
        # In-process messages (tools, tests, MIDI) wait here, coalesced as the intake does; taken
        # before the source's, which is woken for them.
        coalescing = re.compile(coalescing_pattern())
        self.inbox = Inbox(lambda a: coalescing.fullmatch(a) is not None, capacity)
        self.source = source or self.inbox
        self.handled = 0  #: messages dispatched without error
        self.errors = 0  #: messages answered with /error (malformed packets included)
        #: The newest errors, ``[number, address, message]`` (the control page shows them).
        self.recent_errors: collections.deque[list[Any]] = collections.deque(maxlen=8)
        self.malformed = 0  #: datagrams that were not OSC (or used unsupported types)
        self.scheduled = 0  #: messages with a future timetag, passed on with ``at``
        self._budget_block = -1
        self._budget = 0
        #: Changes that arrived while a long one was prepared: they follow it, in order.
        self._held: collections.deque[tuple[Incoming, str]] = collections.deque()
        self._long = False  #: a change runs in slices, the collector's full passes held
        self._logged: set[str] = set()  #: addresses whose local errors were logged
        self._bugs: set[tuple[str, str]] = set()  #: (address, error type) logged with a traceback
        super().__init__("osc-control")

    # -- an in-process inbox, for tools and tests ---------------------------------------------

    def receive(self, datagram: bytes, host: str, arrival: float = 0.0) -> None:
        """Queue one datagram from ``host`` in the in-process inbox."""
        self.inbox.put(address_of(datagram), datagram, host, arrival)

    def submit(self, message: Incoming, host: str, arrival: float = 0.0, wake: bool = True) -> None:
        """Queue one parsed message from ``host`` (:data:`LOCAL` for an in-process source) in
        the in-process inbox, from any thread. ``wake`` False: the caller queues more, then
        calls :meth:`wake` once (the inbox coalesces them meanwhile)."""
        address = message.address if message.timetag is None else None
        self.inbox.put(address, message, host, arrival)
        if wake:
            self.wake()

    def wake(self) -> None:
        """Have the worker look at the in-process inbox now."""
        if self.source is not self.inbox:
            self.source.wake()

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop, a wait for the source's next message ending at once."""
        self._stop.set()
        self.wake()
        super().stop(timeout)

    def pending(self) -> int:
        """Messages waiting in the in-process inbox."""
        return len(self.inbox)

    def _take(self, timeout: float) -> Letter | None:
        """The next letter: an in-process one first, else the source's (woken for both)."""
        if self.source is self.inbox:
            return self.inbox.take(timeout)
        return self.inbox.take(0) or self.source.take(timeout) or self.inbox.take(0)

    # -- the worker thread -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception as error:  # a bug between two messages: said once, the worker goes on
                self._log_bug("the control worker", error)
                time.sleep(0.01)  # a failure that repeats at once does not spin

    def _turn(self) -> None:
        """One turn of the loop: the scheduled messages due, then one held or received."""
        for item in self.controller.due():
            self._pace()
            self._answer(item.client, item.address, lambda i=item: self.controller.apply(i))
        if self._held:
            message, host = self._held.popleft()
            self._pace()
            self._handle(message, host)
            return
        letter = self._take(self._wait())
        if letter is None:
            return
        for message in self._messages(letter):
            self._pace()
            self._handle(message, letter.host)

    def _wait(self) -> float:
        """How long to wait for a message: until the next scheduled one is due, at most 0.2 s."""
        due = self.controller.seconds_to_due()
        return 0.2 if due is None else min(0.2, due)

    def _messages(self, letter: Letter) -> Iterator[Incoming]:
        """The messages of a letter; a malformed packet is answered and counted."""
        if isinstance(letter.content, Incoming):
            yield letter.content
            return
        large = read_too_large(letter.content)
        if large is not None:
            size, capacity, address = large
            self.errors += 1
            self.replies.send(
                letter.host,
                "/error",
                [address, f"a datagram of {size} bytes is larger than the {capacity} bytes the "
                 "server takes: send fewer or shorter arguments"],
            )  # fmt: skip
            return
        try:
            messages = parse_datagram(letter.content)
        except MalformedPacket as error:
            self.malformed += 1
            self.errors += 1
            self.replies.send(letter.host, "/error", ["", f"malformed packet: {error}"])
            return
        yield from messages

    def _handle(self, message: Incoming, host: str) -> None:
        def dispatch() -> list:
            _check_args(message.args)
            at = self._sample_time(message.timetag)
            return self.controller.dispatch(message.address, message.args, at=at, client=host)

        self._answer(host, message.address, dispatch)

    def _answer(self, host: str, address: str, call: Callable[[], list]) -> None:
        """Run ``call`` (a long one in slices) and send its replies to ``host``, or its error:
        a bad message or a bug (in the change, or in its replies) is answered, and the server
        runs on. A model's code ending its thread (``sys.exit``) is an error like another."""
        try:
            with self._slices():
                replies = call()
            for reply, args in replies if host != LOCAL else ():
                self.replies.send(host, reply, args)
        except (Exception, SystemExit) as error:
            self.errors += 1
            self.recent_errors.append([self.errors, address, describe(error)])
            if is_bug(error):
                self._log_bug(address, error)
            if host != LOCAL:
                self.replies.send(host, "/error", [address, describe(error)])
            elif address not in self._logged and len(self._logged) < LOCAL_LOGGED:
                self._logged.add(address)
                log.warning("%s (from an in-process source): %s", address, describe(error))
            return
        self.handled += 1

    def _log_bug(self, where: str, error: BaseException) -> None:
        """Log a bug in one line; its traceback the first time this kind of error comes from
        ``where`` (a bug that repeats with every message must not flood the log)."""
        kind = (where, type(error).__name__)
        first = kind not in self._bugs and len(self._bugs) < LOCAL_LOGGED
        if first:
            self._bugs.add(kind)
        log.error("%s: %s", where, describe(error), exc_info=error if first else None)

    @contextlib.contextmanager
    def _slices(self) -> Iterator[None]:
        """Run a change in slices (a query, nested between two, runs as it is)."""
        if self._long:
            yield
            return
        computing = None if self.gate is None else (lambda: self.gate.computing)
        try:
            with sliced(self._between_slices, pause=computing):
                yield
        finally:
            if self._long:  # what the long change made lives on: out of the full passes
                self._long = False
                gc.freeze()
                gc.enable()

    def _between_slices(self) -> None:
        """Between two slices of a long change: stop if asked, answer the queries that came
        meanwhile (holding the changes, to follow in order), leave the audio its turn."""
        if self._stop.is_set():
            raise Stopping("the server is stopping: this change is not applied")
        if self.gate is not None:  # the block being computed first: its torch calls want the GIL
            self.gate.wait_open(0.05)
        if not self._long and gc.isenabled():
            gc.disable()
            self._long = True
        if self._long:
            young_collections()
        while (letter := self._take(0)) is not None:
            for message in self._messages(letter):
                address = message.address
                if self.controller.is_query(address) or self.controller.refused_now(address):
                    self._handle(message, letter.host)
                else:
                    self._held.append((message, letter.host))

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


def young_collections() -> None:
    """The collector's young generations, as it would run them itself (with it disabled): what
    a long change's slices run between them."""
    young, middle = gc.get_count()[:2]
    thresholds = gc.get_threshold()
    if middle > thresholds[1]:
        gc.collect(1)
    elif young > thresholds[0]:
        gc.collect(0)


def _check_args(args: Sequence[Any]) -> None:
    for index, value in enumerate(args):
        if not isinstance(value, (int, float, str)):
            raise BendingError(
                f"argument {index + 1} is a {type(value).__name__}: the address space takes "
                "numbers and strings"
            )
