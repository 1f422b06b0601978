"""The OSC intake: a process of its own that drains the socket and coalesces, so that a flood
of messages never competes with the audio for the interpreter lock.

The server starts this file as a script (``python intake.py ...``: it imports the standard
library only, never torch or the rest of bendserver). The process reads datagrams as fast as
the kernel delivers them, drops those from hosts not allowed, and puts the rest in an
:class:`Inbox`, where a parameter value replaces an older one of the same address that still
waits (newest wins) and everything else keeps its order. The survivors go through a small
shared-memory :class:`Ring` (one writer, one reader) to the server's control worker, which parses
and applies them; a byte on a pipe wakes the worker. Small ring, so that a backlog waits in the
inbox, coalesced, rather than in the ring: a final value is at most a ring's length behind.

Counters (datagrams read, accepted, coalesced, denied, and each way of losing one: no room in
the inbox, too large for a ring slot, dropped by the kernel) live in the ring's header, for
``/stats``.
"""

from __future__ import annotations

import collections
import functools
import gc
import ipaddress
import math
import mmap
import os
import re
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: Linux socket options that Python's socket module does not name.
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
SO_RXQ_OVFL = 40
MAX_DATAGRAM = 65536
#: What the intake forwards in place of a datagram no ring slot holds, followed by its size,
#: a slot's capacity and its address (not OSC: a client's datagram starting so is one too).
TOO_LARGE = b"\x00too-large\x00"
_TOO_LARGE = struct.Struct("<II")
#: Denied hosts named in the log, one line each; past them, one line says the rest are only
#: counted (a sender's address is the client's to choose: remembering each would let spoofed
#: sources grow the intake without limit).
DENIED_LOGGED = 64
#: Datagrams read from the socket before they are sorted (a burst's worth on a small machine).
DRAIN = 4096
LOOPBACK = ("127.0.0.0/8", "::1/128")


def allowed_networks(allow: Iterable[str] = ()) -> list:
    """Loopback and the networks of ``allow`` (CIDR strings; ValueError when one is not)."""
    return [ipaddress.ip_network(text.strip(), strict=False) for text in (*LOOPBACK, *allow)]


class AccessList:
    """Which hosts may send: loopback always, other networks only when allowed."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self.networks = allowed_networks(allow)
        self._verdict = functools.lru_cache(maxsize=1024)(self._check)  # a burst: few hosts

    def allows(self, host: str) -> bool:
        """True when packets from ``host`` (an IP address string) may be handled."""
        return self._verdict(host)

    def _check(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


# -- coalescing --------------------------------------------------------------------------------


@dataclass
class Letter:
    """One waiting message: a raw datagram (or a parsed message) with its sender and arrival."""

    address: str
    content: Any
    host: str
    arrival: Any  #: a time, or the kernel's ancillary data it is read from (:func:`arrival_time`)
    epoch: int


class Inbox:
    """Messages in arrival order, parameter values coalesced per address (newest wins).

    ``coalesces(address)`` says which addresses carry parameter values. A value that arrives
    after a message that is not coalesced (a structural change) is queued after it, so that the
    order per address, and against structural changes, is kept. Thread-safe."""

    def __init__(self, coalesces: Callable[[str], bool], capacity: int = 16384) -> None:
        self.coalesces = functools.lru_cache(maxsize=4096)(coalesces)  # asked once an address
        self.capacity = capacity
        self._letters: collections.deque[Letter] = collections.deque()
        self._waiting: dict[str, Letter] = {}
        self._epoch = 0
        self._ready = threading.Condition()
        self.coalesced = 0  #: values replaced by a newer one before they were taken
        self.dropped = 0  #: messages lost because the inbox was full

    def put(self, address: str | None, content: Any, host: str, arrival: Any = 0.0) -> None:
        """Queue ``content``; ``address`` None: never coalesced (a bundle, a bad packet).
        ``arrival`` is kept as given (a time, or what the time is read from later)."""
        coalesces = address is not None and self.coalesces(address)
        with self._ready:
            if coalesces:
                waiting = self._waiting.get(address)
                if waiting is not None and waiting.epoch == self._epoch:
                    waiting.content, waiting.host, waiting.arrival = content, host, arrival
                    self.coalesced += 1
                    return
            if len(self._letters) >= self.capacity:
                self.dropped += 1
                return
            letter = Letter(address or "", content, host, arrival, self._epoch)
            if coalesces:
                self._waiting[address] = letter
            else:
                self._epoch += 1
            self._letters.append(letter)
            self._ready.notify()

    def take(self, timeout: float = 0.0) -> Letter | None:
        """The oldest letter, or None after ``timeout`` seconds."""
        with self._ready:
            if not self._letters and (timeout <= 0 or not self._ready.wait(timeout)):
                return None
            if not self._letters:
                return None
            letter = self._letters.popleft()
            if self._waiting.get(letter.address) is letter:
                del self._waiting[letter.address]
            return letter

    def __len__(self) -> int:
        return len(self._letters)


def too_large(datagram: bytes, capacity: int) -> bytes:
    """What the intake forwards for ``datagram``, larger than ``capacity``: its size and its
    address (at most 200 bytes of it), so that the worker answers with an /error."""
    end = datagram.find(b"\x00", 0, 200)
    address = datagram[: end if end >= 0 else 200]
    return TOO_LARGE + _TOO_LARGE.pack(len(datagram), capacity) + address


def read_too_large(content: bytes) -> tuple[int, int, str] | None:
    """The size, capacity and address a :func:`too_large` stand-in carries, or None for any
    other datagram."""
    head = len(TOO_LARGE) + _TOO_LARGE.size
    if not content.startswith(TOO_LARGE) or len(content) < head:
        return None
    size, capacity = _TOO_LARGE.unpack_from(content, len(TOO_LARGE))
    return size, capacity, content[head:].decode("ascii", "replace")


def address_of(datagram: bytes) -> str | None:
    """The address of a bare OSC message, read without parsing the rest (None for a bundle,
    which may carry a timetag and is never coalesced, or for anything else)."""
    end = datagram.find(b"\x00", 0, 1024)  # a longer address: never coalesced
    return _address(datagram[:end]) if end > 0 else None


@functools.lru_cache(maxsize=4096)
def _address(name: bytes) -> str | None:
    """The address spelled by the bytes before a datagram's first NUL (a burst repeats few)."""
    if not name.startswith(b"/"):  # "#bundle", or not OSC
        return None
    try:
        return name.decode("ascii")
    except UnicodeDecodeError:
        return None


# -- the ring ----------------------------------------------------------------------------------

#: The ways a message is lost: no room in the inbox, too large for a ring slot, dropped by the
#: kernel (its buffer full). Each has a counter; ``dropped`` in ``/stats`` is their sum.
LOSSES = ("dropped_full", "dropped_large", "dropped_kernel")
COUNTERS = ("packets", "accepted", "coalesced", "denied", *LOSSES)
#: The header's counts are read by one process while the other writes them, each with one
#: aligned 8-byte load or store (atomic on the platforms we run on), through a memoryview cast
#: to "Q". Not struct's pack_into: it zero-fills its bytes before it writes them, and a writer
#: that read the count meanwhile saw a read count of 0, a full ring where there was room (a
#: message lost now and then at 10 000 a second).
_COUNTS = struct.Struct("@2Q")
_HEADER = struct.Struct(f"@{2 + len(COUNTERS)}Q")
_SLOT_HEAD = struct.Struct("<IId48s")


class Ring:
    """A single-writer single-reader ring of datagrams in a memory-mapped file (in /dev/shm
    where there is one: memory, shared by the two processes).

    Header: write count, read count, then the intake's counters. Each slot: length, host
    length, arrival time, host, datagram. The writer owns the write count and the counters, the
    reader the read count; each advances its count only after the slot is written or read."""

    def __init__(self, path: str | None = None, slots: int = 64, slot_size: int = 4096) -> None:
        self.slots, self.slot_size = slots, slot_size
        size = _HEADER.size + slots * slot_size
        self.owner = path is None
        if self.owner:
            folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
            descriptor, path = tempfile.mkstemp(prefix="bendserver-osc-", dir=folder)
            os.ftruncate(descriptor, size)
        else:
            descriptor = os.open(path, os.O_RDWR)
        self.path = path
        try:
            self._map = mmap.mmap(descriptor, size)
        finally:
            os.close(descriptor)
        self.buffer = memoryview(self._map)
        self._counts = self.buffer[: _COUNTS.size].cast("Q")  #: write count, read count
        self._counters = self.buffer[_COUNTS.size : _HEADER.size].cast("Q")

    @property
    def capacity(self) -> int:
        """The largest datagram a slot holds."""
        return self.slot_size - _SLOT_HEAD.size

    def push(self, datagram: bytes, host: str, arrival: float) -> bool:
        """Write one datagram (writer); False when the ring is full."""
        counts = self._counts
        written, read = counts[0], counts[1]
        if written - read >= self.slots:
            return False
        offset = _HEADER.size + (written % self.slots) * self.slot_size
        encoded = host.encode("ascii", "replace")[:48]
        _SLOT_HEAD.pack_into(self.buffer, offset, len(datagram), len(encoded), arrival, encoded)
        start = offset + _SLOT_HEAD.size
        self.buffer[start : start + len(datagram)] = datagram
        counts[0] = written + 1
        return True

    def pop(self) -> tuple[bytes, str, float] | None:
        """Read the oldest datagram (reader), or None when the ring is empty."""
        counts = self._counts
        written, read = counts[0], counts[1]
        if read >= written:
            return None
        offset = _HEADER.size + (read % self.slots) * self.slot_size
        length, host_length, arrival, host = _SLOT_HEAD.unpack_from(self.buffer, offset)
        start = offset + _SLOT_HEAD.size
        datagram = bytes(self.buffer[start : start + length])
        counts[1] = read + 1
        return datagram, host[:host_length].decode("ascii"), arrival

    def write_counters(self, values: Iterable[int]) -> None:
        """Store the intake's counters, in the order of :data:`COUNTERS` (writer)."""
        for index, value in enumerate(values):
            self._counters[index] = value

    def counters(self) -> dict[str, int]:
        """The intake's counters by name (either side)."""
        return dict(zip(COUNTERS, self._counters.tolist(), strict=True))

    def waiting(self) -> int:
        """Datagrams written and not read yet (either side)."""
        return self._counts[0] - self._counts[1]

    def unlink(self) -> None:
        """Remove the ring's file once both processes mapped it: the memory lives as long as
        they do, and a server killed leaves no file behind."""
        if self.owner:
            os.unlink(self.path)
            self.owner = False

    def close(self) -> None:
        self._counts.release()
        self._counters.release()
        self.buffer.release()
        self._map.close()
        self.unlink()


# -- the process -------------------------------------------------------------------------------


class Intake:
    """The intake process's loop: socket -> access -> inbox -> ring (and a wake-up byte)."""

    def __init__(
        self,
        sock: socket.socket,
        access: AccessList,
        inbox: Inbox,
        ring: Ring,
        wake: int,
        signalled: int = -1,
    ) -> None:
        self.socket, self.access, self.inbox, self.ring, self.wake = sock, access, inbox, ring, wake
        #: A pipe the process's signals write a byte to (``signal.set_wakeup_fd``), watched
        #: beside the socket: a wait ends at SIGTERM, where Python would resume it (PEP 475).
        self.signalled = signalled
        self.packets = self.accepted = self.denied = self.kernel_dropped = self.too_large = 0
        self.unpushed = 0  #: letters the ring refused (cannot happen after its room is checked)
        self._denied_hosts: set[str] = set()
        self._large_told: dict[str, float] = {}  #: when each host was told of one too large
        self.running = True

    def run(self) -> None:
        """Until SIGTERM, or the server that started it is gone (killed: nobody would stop it,
        and it would hold the port)."""
        self.socket.setblocking(False)
        server = os.getppid()
        watched = [self.socket, *([self.signalled] if self.signalled >= 0 else [])]
        while self.running and os.getppid() == server:
            wait = 0.002 if len(self.inbox) else 0.2  # a backlog: flush again soon
            try:
                readable, _, _ = select.select(watched, [], [], wait)
            except InterruptedError:
                continue
            if self.signalled in readable:
                os.read(self.signalled, 64)
            if self.socket in readable:
                self._drain_socket()
            self._flush()

    def _drain_socket(self) -> None:
        """Read what waits in the socket, then sort it into the inbox.

        Two passes, because the kernel's buffer is what a burst must not overflow: the first
        only moves datagrams out of it (a kernel buffer of 8 MiB holds about 10 000 small
        datagrams; a list holds them for a tenth of the memory), the second checks senders and
        coalesces (``_sort``)."""
        receive = self.socket.recvmsg
        batch = []
        for _ in range(DRAIN):
            try:
                batch.append(receive(MAX_DATAGRAM, 256))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.running = False
                break
        if batch:
            self._sort(batch)

    def _sort(self, batch: list) -> None:
        """Access, size and coalescing for a drained batch; arrival times are read from the
        kernel's stamps only for letters that reach the inbox. A datagram no ring slot holds
        is dropped here, never held: the inbox's letters are each at most a slot's size."""
        self.packets += len(batch)
        self._read_kernel_drops(batch[-1][1])
        put, allows, capacity = self.inbox.put, self.access.allows, self.ring.capacity
        for data, ancillary, _, sender in batch:
            host = sender[0]
            if not allows(host):
                self._deny(host)
                continue
            self.accepted += 1
            if len(data) > capacity:  # dropped, and its sender told (once a second at most)
                self.too_large += 1
                if self._tell_large(host):
                    put(None, too_large(data, capacity), host, time.time())
                continue
            put(address_of(data), data, host, ancillary)

    def _tell_large(self, host: str) -> bool:
        """Whether to tell ``host`` of a datagram too large now: once a second per host (a
        flood of them must not fill the inbox), for the last :data:`DENIED_LOGGED` hosts."""
        now = time.monotonic()
        if now - self._large_told.get(host, -math.inf) < 1.0:
            return False
        if len(self._large_told) >= DENIED_LOGGED:
            self._large_told.clear()
        self._large_told[host] = now
        return True

    def _deny(self, host: str) -> None:
        """Count a denied datagram; name its host in the log once (a flood must not flood the
        log), for the first :data:`DENIED_LOGGED` hosts only."""
        self.denied += 1
        if host in self._denied_hosts or len(self._denied_hosts) > DENIED_LOGGED:
            return
        self._denied_hosts.add(host)
        if len(self._denied_hosts) > DENIED_LOGGED:
            line = f"more hosts denied: not named from now on ({DENIED_LOGGED} were)"
        else:
            networks = ", ".join(str(n) for n in self.access.networks)
            line = f"OSC from {host} denied: allowed are {networks} (--allow CIDR)"
        print(f"bendserver.osc: {line}", file=sys.stderr, flush=True)

    def _read_kernel_drops(self, ancillary: list) -> None:
        data = _socket_option(ancillary, SO_RXQ_OVFL, 4)
        if data is not None:
            self.kernel_dropped = struct.unpack("I", data[:4])[0]

    def _flush(self) -> None:
        """Move letters into the ring while it has room; wake the reader."""
        moved = False
        while len(self.inbox):
            if self.ring.slots <= self.ring.waiting():
                break
            letter = self.inbox.take()
            arrival = arrival_time(letter.arrival)
            if not self.ring.push(letter.content, letter.host, arrival):
                self.unpushed += 1  # cannot happen after the check above; never silent
                continue
            moved = True
        self.ring.write_counters(
            (
                self.packets,
                self.accepted,
                self.inbox.coalesced,
                self.denied,
                self.inbox.dropped + self.unpushed,
                self.too_large,
                self.kernel_dropped,
            )
        )
        if moved:
            try:
                os.write(self.wake, b"!")
            except (BlockingIOError, BrokenPipeError):
                pass


def arrival_time(stamp: float | list) -> float:
    """A letter's arrival: a time already, or the kernel's stamp read from the ancillary data
    ``recvmsg`` returned with the datagram (now, where the kernel gave none)."""
    if isinstance(stamp, float):
        return stamp
    data = _socket_option(stamp, SO_TIMESTAMPNS, 16)
    if data is None:
        return time.time()
    seconds, nanoseconds = struct.unpack("qq", data[:16])
    return seconds + nanoseconds * 1e-9


def _socket_option(ancillary: list, kind: int, size: int) -> bytes | None:
    """The data of socket-level option ``kind`` in ``recvmsg``'s ancillary data (at least
    ``size`` bytes), or None."""
    for level, option, data in ancillary:
        if level == socket.SOL_SOCKET and option == kind and len(data) >= size:
            return data
    return None


def _set_receive_buffer(sock: socket.socket, size: int) -> None:
    """Past ``net.core.rmem_max`` where the process may (Linux, CAP_NET_ADMIN), else up to it."""
    if sys.platform.startswith("linux"):
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
            return
        except PermissionError:
            pass
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def open_socket(host: str, port: int, rcvbuf: int) -> socket.socket:
    """A UDP socket bound to ``(host, port)`` with a large receive buffer (what a burst
    outruns the reader by waits there) and, on Linux, the kernel's arrival times and drop
    counts (OSError when the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    _set_receive_buffer(sock, rcvbuf)
    if sys.platform.startswith("linux"):
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def main(argv: list[str]) -> int:
    """``intake.py HOST PORT RCVBUF RING_PATH WAKE_FD COALESCING_REGEX [ALLOW ...]``: prints
    ``ready PORT RCVBUF`` (or ``error MESSAGE``), then runs until SIGTERM."""
    host, port, rcvbuf, ring_name, wake, pattern, *allow = argv
    try:
        sock = open_socket(host, int(port), int(rcvbuf))
    except (OSError, OverflowError) as error:  # a port taken, or none (70000)
        print(f"error {getattr(error, 'strerror', None) or error}", flush=True)
        return 1
    coalescing = re.compile(pattern)
    ring = Ring(ring_name)
    inbox = Inbox(lambda address: coalescing.fullmatch(address) is not None)
    signalled, signals = os.pipe()
    os.set_blocking(signals, False)
    signal.set_wakeup_fd(signals)
    intake = Intake(sock, AccessList(allow), inbox, ring, int(wake), signalled)

    def stop(*_: object) -> None:
        intake.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops it, not the terminal's Ctrl-C
    # A burst holds thousands of datagrams at once, and each collection their allocations
    # start would walk every object alive: what start-up made is set aside for good.
    gc.freeze()
    granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    print(f"ready {sock.getsockname()[1]} {granted}", flush=True)
    try:
        intake.run()
    finally:
        sock.close()
        ring.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
