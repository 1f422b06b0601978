"""The inbox between the OSC receiver and the control worker: the last word always lands.

A fader dump sends thousands of values for one address faster than the engine could apply
them, and only the last one matters. So a parameter message (an address whose table entry says
``coalesce``) that arrives while an older one for the same address still waits replaces it in
place (newest wins, counted as ``coalesced``), before anything is parsed or validated; every
other message (``/bend/add``, ``/preset/load``, ``/version``, queries...) is queued in order and
never coalesced. A parameter message that arrives after a structural one is queued after it, so
that the order per address, and against structural changes, is kept. What the inbox cannot hold
is ``dropped``: a message lost, which a server sized for its traffic never shows.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

from ..control import route
from ..errors import BendingError
from .packets import Incoming

_BUNDLE = b"#bundle\x00"


@dataclass
class Letter:
    """One waiting message: the raw datagram (parsed by the worker) or a parsed message."""

    address: str
    content: bytes | Incoming
    host: str
    arrival: float
    epoch: int


class Inbox:
    """Thread-safe: ``put`` from the receiver, ``take`` from the worker."""

    def __init__(self, capacity: int = 16384) -> None:
        self.capacity = capacity
        self._letters: collections.deque[Letter] = collections.deque()
        self._waiting: dict[str, Letter] = {}  # coalescable address -> its waiting letter
        self._coalescing: dict[str, bool] = {}  # address -> whether it coalesces (a cache)
        self._epoch = 0  # bumped by every message that is not coalesced
        self._ready = threading.Condition()
        self.coalesced = 0  #: parameter values replaced by a newer one before they applied
        self.dropped = 0  #: messages lost because the inbox was full

    def put(self, content: bytes | Incoming, host: str, arrival: float = 0.0) -> None:
        """Queue a datagram or a message, coalescing a parameter value with a waiting one."""
        address = _address(content)
        with self._ready:
            if address is not None and self._coalesces(address):
                waiting = self._waiting.get(address)
                if waiting is not None and waiting.epoch == self._epoch:
                    waiting.content, waiting.host, waiting.arrival = content, host, arrival
                    self.coalesced += 1
                    return
            if len(self._letters) >= self.capacity:
                self.dropped += 1
                return
            letter = Letter(address or "", content, host, arrival, self._epoch)
            if address is not None and self._coalesces(address):
                self._waiting[address] = letter
            else:
                self._epoch += 1
            self._letters.append(letter)
            self._ready.notify()

    def take(self, timeout: float) -> Letter | None:
        """The oldest waiting letter, or None after ``timeout`` seconds."""
        with self._ready:
            if not self._letters and not self._ready.wait(timeout):
                return None
            if not self._letters:
                return None
            letter = self._letters.popleft()
            if self._waiting.get(letter.address) is letter:
                del self._waiting[letter.address]
            return letter

    def __len__(self) -> int:
        return len(self._letters)

    def _coalesces(self, address: str) -> bool:
        known = self._coalescing.get(address)
        if known is None:
            try:
                known = route(address).entry.coalesce
            except BendingError:
                known = False  # unknown: queued, and answered with /error by the worker
            if len(self._coalescing) < 4096:  # addresses are few; a flood of odd ones is not
                self._coalescing[address] = known
        return known


def _address(content: bytes | Incoming) -> str | None:
    """The address of a bare message or a message without a timetag (a bundle, timetagged,
    is never coalesced), read without parsing the rest."""
    if isinstance(content, Incoming):
        return content.address if content.timetag is None else None
    if content.startswith(_BUNDLE) or not content.startswith(b"/"):
        return None
    end = content.find(b"\x00")
    try:
        return content[:end].decode("ascii") if end > 0 else None
    except UnicodeDecodeError:
        return None
