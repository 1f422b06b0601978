"""The server's OSC side put together: the intake process, the control worker thread, replies."""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..audio.clock import AudioClock
from ..audio.gate import ComputeGate
from ..audio.priority import CONTROL, set_realtime
from ..control import Controller, coalescing_pattern
from .access import checked_networks
from .intake import LOSSES
from .receiver import DEFAULT_RCVBUF, OscReceiver
from .replies import ReplySender
from .worker import ControlWorker


class OscService:
    """Listens on ``host:port``, applies messages through ``controller``, replies to
    ``reply_port`` (of the sender's host, or of ``reply_host``). ``clock`` converts timetags;
    ``gate`` keeps the control threads off the GIL while a block is computed."""

    def __init__(
        self,
        controller: Controller,
        clock: AudioClock | None = None,
        gate: ComputeGate | None = None,
        host: str = "127.0.0.1",
        port: int = 9000,
        reply_port: int = 9001,
        reply_host: str | None = None,
        allow: Iterable[str] = (),
        rcvbuf: int = DEFAULT_RCVBUF,
    ) -> None:
        self.realtime = False  #: whether the worker got a real-time priority
        self.replies = ReplySender(reply_port, reply_host)
        try:
            self.receiver = OscReceiver(
                host, port, coalescing_pattern(), checked_networks(allow), rcvbuf
            )
        except Exception:
            self.replies.close()
            raise
        self.worker = ControlWorker(controller, self.replies, clock, gate, source=self.receiver)

    @property
    def port(self) -> int:
        """The port listened on (the one asked for, or the one the OS chose for port 0)."""
        return self.receiver.port

    @property
    def rcvbuf(self) -> int:
        """The receive buffer the OS granted, in bytes (as Linux reports it: doubled)."""
        return self.receiver.rcvbuf

    def start(self) -> None:
        """Start the worker, at a real-time priority below the audio's where allowed (see
        :mod:`bendserver.audio.priority`: a thread holding the GIL must not be preempted)."""
        self.worker.start()
        self.realtime = set_realtime(CONTROL, self.worker.thread)

    def submit(self, datagram: bytes, host: str) -> None:
        """Handle a datagram that ``host`` sent another way (binary OSC on the OSCQuery
        WebSocket) as if it came to the OSC port: coalesced, applied by the worker."""
        self.worker.receive(datagram, host, time.time())
        self.worker.wake()

    def stop(self) -> None:
        """Stop the worker, then the intake; close the reply socket."""
        self.worker.stop()
        self.receiver.stop()
        self.replies.close()

    def counters(self) -> dict[str, float]:
        """Datagrams received, parameter values coalesced, messages lost (all, then by cause:
        no room in the intake's inbox, too large for the ring, dropped by the kernel with its
        buffer full), refused, errors."""
        intake, worker = self.receiver.counters(), self.worker
        causes = {name: intake[name] for name in LOSSES}
        return {
            "received": intake["accepted"],
            "coalesced": intake["coalesced"],
            "dropped": sum(causes.values()),
            **causes,
            "malformed": worker.malformed,
            "denied": intake["denied"],
            "osc_errors": worker.errors,
        }
