"""Messages scheduled ahead by clients (a bundle's future timetag), held until they are due.

Held as checked messages, not prepared changes: nothing is computed for a change an hour ahead,
and a change meant for now never waits behind one (the engine's timeline only holds what is due
soon). Each client (the sender's address, as the transport reports it) has its own bounded queue:
a full one refuses that client's newest scheduled message, never anything else.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .errors import BendingError

#: Messages one client may have scheduled ahead at once.
SCHEDULE_CAPACITY = 1024


@dataclass(order=True)
class Scheduled:
    """One message waiting for sample time ``at``: who sent it, its address and parsed values
    (``route``: what the controller routed it to)."""

    at: int
    seq: int
    client: str = field(compare=False)
    address: str = field(compare=False)
    values: tuple[Any, ...] = field(compare=False)
    route: Any = field(compare=False)


class Schedule:
    """Scheduled messages in time order, at most ``capacity`` per client. Used by one thread
    (the control worker)."""

    def __init__(self, capacity: int = SCHEDULE_CAPACITY) -> None:
        self.capacity = capacity
        self._heap: list[Scheduled] = []
        self._counts: Counter[str] = Counter()
        self._seq = itertools.count()

    def add(self, at: int, client: str, address: str, values: Any, route: Any) -> None:
        """Hold a message until ``at``; a BendingError when ``client`` has ``capacity`` held."""
        if self._counts[client] >= self.capacity:
            raise BendingError(
                f"{self.capacity} messages from {client} are scheduled ahead already: this one "
                "is refused (changes for now are not); wait for them or schedule fewer ahead"
            )
        item = Scheduled(int(at), next(self._seq), client, address, tuple(values), route)
        heapq.heappush(self._heap, item)
        self._counts[client] += 1

    def due(self, until: int) -> list[Scheduled]:
        """The messages due at or before sample ``until``, in time order (taken out)."""
        ready = []
        while self._heap and self._heap[0].at <= until:
            item = heapq.heappop(self._heap)
            self._counts[item.client] -= 1
            if not self._counts[item.client]:
                del self._counts[item.client]
            ready.append(item)
        return ready

    def next_at(self) -> int | None:
        """The sample time of the next message, or None."""
        return self._heap[0].at if self._heap else None

    def last(self, address: str) -> Scheduled | None:
        """The message to ``address`` that applies last, or None."""
        return max((item for item in self._heap if item.address == address), default=None)

    def __len__(self) -> int:
        return len(self._heap)
