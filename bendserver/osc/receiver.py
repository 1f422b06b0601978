"""The OSC socket: one thread reads datagrams, checks the sender, and hands them on.

Not python-osc's ``ThreadingOSCUDPServer`` (a thread per packet drained 7k msg/s and lost most
of a burst) nor its blocking server (it sleeps on a future timetag): a plain UDP socket read in a
loop, with a large receive buffer, drained as fast as the kernel fills it. Parsing and
everything else happen on the control worker, after the inbox has coalesced parameter values.
On Linux the kernel's arrival time of each datagram (``SO_TIMESTAMPNS``) is kept for latency
measurements, and the count of datagrams the kernel dropped because the buffer was full
(``SO_RXQ_OVFL``) is read from every datagram, so that no loss goes uncounted.
"""

from __future__ import annotations

import logging
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable

from ..audio.gate import ComputeGate
from ..errors import BendingError
from ..threads import LoopThread
from .access import AccessList

log = logging.getLogger("bendserver.osc")

#: Receive buffer asked for; Linux grants up to ``net.core.rmem_max`` (and reports double).
DEFAULT_RCVBUF = 4 * 1024 * 1024
_MAX_DATAGRAM = 65536
#: Datagrams read in one pass through the compute gate.
BATCH = 64

# Linux socket options that Python's socket module does not name.
_SO_TIMESTAMPNS = 35
_SO_RXQ_OVFL = 40

Deliver = Callable[[bytes, str, float], None]


class OscReceiver(LoopThread):
    """Reads OSC datagrams on ``(host, port)`` on its own thread.

    Each datagram from an allowed host goes to ``deliver(datagram, sender_host,
    arrival_time)``. Datagrams from hosts outside ``access`` are dropped and counted, without a
    reply. With a ``gate`` (see :mod:`bendserver.audio.gate`), reading in a burst waits for the
    gaps between blocks (the datagrams wait in the socket's buffer meanwhile).
    """

    def __init__(
        self,
        host: str,
        port: int,
        deliver: Deliver,
        access: AccessList | None = None,
        rcvbuf: int = DEFAULT_RCVBUF,
        gate: ComputeGate | None = None,
    ) -> None:
        self.deliver = deliver
        self._admission = gate.admission() if gate is not None else None
        self.access = access or AccessList()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_DGRAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        #: What the OS granted (Linux reports twice the usable size, its bookkeeping included).
        self.rcvbuf = self.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        self._linux = sys.platform.startswith("linux")
        if self._linux:
            self.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            self.socket.setsockopt(socket.SOL_SOCKET, _SO_RXQ_OVFL, 1)
        try:
            self.socket.bind((host, port))
        except OSError as error:
            self.socket.close()
            raise BendingError(
                f"cannot listen for OSC on {host}:{port} ({error.strerror}): another program "
                "may use the port; pick another with --osc-port"
            ) from None
        self.socket.settimeout(0.2)  # how quickly stop() is noticed
        self.host, self.port = self.socket.getsockname()[:2]
        self.packets = 0  #: datagrams read
        self.accepted = 0  #: datagrams from allowed hosts, handed on
        self.denied = 0  #: datagrams from hosts not allowed
        self._denied_hosts: set[str] = set()
        self.kernel_dropped = 0  #: datagrams the kernel dropped, its buffer full
        self.last_arrival = 0.0  #: arrival time (time.time() clock) of the last datagram
        self.arrivals: deque[float] = deque(maxlen=4096)  #: the last datagrams' arrival times
        super().__init__("osc-receiver")

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and close the socket."""
        super().stop(timeout)
        self.socket.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self.socket.recvmsg(_MAX_DATAGRAM, 256)
            except TimeoutError:
                continue
            except OSError as error:
                if not self._stop.is_set():
                    log.error("OSC socket failed: %s", error)
                return
            if self._admission is not None:
                self._admission.wait(0.01)
            self._drain(first)

    def _drain(self, first: tuple) -> None:
        """Handle ``first`` and whatever else waits in the socket, up to ``BATCH`` datagrams
        per pass through the gate (one check per datagram would cost more than the datagram)."""
        received = first
        for count in range(1, BATCH + 1):
            data, ancillary, _, sender = received
            try:
                self._handle(data, ancillary, sender[0])
            except Exception:  # one odd packet must not end the loop
                log.exception("OSC packet from %s not handled", sender[0])
            if count == BATCH:
                return
            try:
                received = self.socket.recvmsg(_MAX_DATAGRAM, 256, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # closed: the loop notices

    def _handle(self, data: bytes, ancillary: list[tuple[int, int, bytes]], host: str) -> None:
        arrival = self._read_ancillary(ancillary)
        self.packets += 1
        self.last_arrival = arrival
        self.arrivals.append(arrival)
        if not self.access.allows(host):
            self.denied += 1
            if host not in self._denied_hosts:  # once per host: a flood must not flood the log
                self._denied_hosts.add(host)
                networks = ", ".join(str(n) for n in self.access.networks)
                log.warning("OSC from %s denied: allowed are %s (--allow CIDR)", host, networks)
            return
        self.accepted += 1
        self.deliver(data, host, arrival)

    def _read_ancillary(self, ancillary: list[tuple[int, int, bytes]]) -> float:
        """The kernel's arrival time (else now); updates the kernel drop count."""
        arrival = None
        for level, kind, data in ancillary:
            if level != socket.SOL_SOCKET:
                continue
            if kind == _SO_TIMESTAMPNS and len(data) >= 16:
                seconds, nanoseconds = struct.unpack("qq", data[:16])
                arrival = seconds + nanoseconds * 1e-9
            elif kind == _SO_RXQ_OVFL and len(data) >= 4:
                self.kernel_dropped = struct.unpack("I", data[:4])[0]
        return time.time() if arrival is None else arrival
