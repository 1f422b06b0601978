"""The server's side of the OSC intake process (:mod:`bendserver.osc.intake`).

:class:`OscReceiver` starts the intake as a process of its own (the script imports the standard
library only), hands it the socket's address, the networks allowed and which addresses
coalesce, and reads what it forwards from the shared ring: ``take`` waits on a pipe that the
intake writes a byte to, so the control worker sleeps without holding the interpreter lock.
Counters come from the ring's header. Not python-osc's servers: ``ThreadingOSCUDPServer`` starts
a thread per packet (it drained 7k msg/s and lost most of a burst) and the blocking server
sleeps on a future timetag; and not a thread in the audio process: draining 20 000 datagrams a
second there took the lock from the audio (163 xruns in 8 s at block 256, measured).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import select
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from ..errors import BendingError
from . import intake
from .intake import Letter, Ring

#: Receive buffer asked for: Linux grants it to a process allowed to pass ``net.core.rmem_max``,
#: else up to that, and reports twice the size (a small datagram takes ~830 bytes of it, so
#: 16 MiB hold a burst of ~40 000).
DEFAULT_RCVBUF = 16 * 1024 * 1024


class OscReceiver:
    """Receives OSC on ``(host, port)`` through the intake process; ``coalescing`` is a regular
    expression of the addresses whose values coalesce."""

    def __init__(
        self,
        host: str,
        port: int,
        coalescing: str,
        allow: Iterable[str] = (),
        rcvbuf: int = DEFAULT_RCVBUF,
    ) -> None:
        self.ring = Ring()
        self._final: dict[str, int] | None = None
        self._wake_read, wake_write = os.pipe()
        flags = fcntl.fcntl(wake_write, fcntl.F_GETFL)
        fcntl.fcntl(wake_write, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self._wake_write = os.dup(wake_write)  # ours: ``wake`` for in-process messages
        self._closing = threading.Lock()  # a wake from another thread never hits a closed pipe
        script = Path(intake.__file__)
        command = [sys.executable, str(script), host, str(port), str(rcvbuf), self.ring.path]
        command += [str(wake_write), coalescing, *allow]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, text=True, pass_fds=(wake_write,)
        )
        os.close(wake_write)
        answer = self.process.stdout.readline().split()
        if answer[:1] != ["ready"]:
            self.stop()
            reason = " ".join(answer[1:]) or "the intake process did not start"
            raise BendingError(
                f"cannot listen for OSC on {host}:{port} ({reason}): another program may use "
                "the port; pick another with --osc-port"
            )
        self.ring.unlink()  # both have it mapped
        self.host, self.port, self.rcvbuf = host, int(answer[1]), int(answer[2])
        self.networks = intake.allowed_networks(allow)
        #: Arrival times (``time.time()`` clock, the kernel's) of the last messages taken.
        self.arrivals: collections.deque[float] = collections.deque(maxlen=4096)

    def start(self) -> None:
        """Nothing to start: the intake runs from the constructor on (the port is bound)."""

    def stop(self) -> None:
        """Stop the intake process and free the ring."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        with self._closing:
            opened, self._wake_read = self._wake_read, -1
        if opened >= 0:
            os.close(opened)
            os.close(self._wake_write)
            self._final = self.ring.counters()  # what /stats and the summary read from now on
            self.ring.close()

    def wake(self) -> None:
        """Make a ``take`` waiting now return (the worker has an in-process message)."""
        with self._closing, contextlib.suppress(BlockingIOError):  # full: a wake-up waits
            if self._wake_read >= 0:
                os.write(self._wake_write, b"w")

    def take(self, timeout: float) -> Letter | None:
        """The next datagram the intake forwards, or None after ``timeout`` seconds."""
        item = self.ring.pop()
        if item is None and self._wake_read >= 0:
            readable, _, _ = select.select([self._wake_read], [], [], timeout)
            if readable:
                os.read(self._wake_read, 65536)
                item = self.ring.pop()
        if item is None:
            return None
        datagram, host, arrival = item
        self.arrivals.append(arrival)
        return Letter("", datagram, host, arrival, 0)

    def counters(self) -> dict[str, int]:
        """The intake's counters (:data:`~bendserver.osc.intake.COUNTERS`)."""
        return self.ring.counters() if self._final is None else self._final
