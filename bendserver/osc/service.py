"""The server's OSC side put together: receiver thread, control worker thread, replies."""

from __future__ import annotations

from collections.abc import Iterable

from ..audio.clock import AudioClock
from ..audio.gate import ComputeGate
from ..audio.priority import CONTROL, set_realtime
from ..control import Controller
from .access import AccessList
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
        self.realtime = False  #: whether the threads got a real-time priority
        self.replies = ReplySender(reply_port, reply_host)
        self.worker = ControlWorker(controller, self.replies, clock, gate)
        try:
            self.receiver = OscReceiver(
                host, port, self.worker.receive, AccessList(allow), rcvbuf, gate
            )
        except Exception:
            self.replies.close()
            raise

    @property
    def port(self) -> int:
        """The port listened on (the one asked for, or the one the OS chose for port 0)."""
        return self.receiver.port

    @property
    def rcvbuf(self) -> int:
        """The receive buffer the OS granted, in bytes (as Linux reports it: doubled)."""
        return self.receiver.rcvbuf

    def start(self) -> None:
        """Start both threads, at a real-time priority below the audio's where allowed (see
        :mod:`bendserver.audio.priority`: a thread holding the GIL must not be preempted)."""
        self.worker.start()
        self.receiver.start()
        threads = (self.worker.thread, self.receiver.thread)
        self.realtime = all([set_realtime(CONTROL, thread) for thread in threads])

    def stop(self) -> None:
        """Stop receiving, then the worker; close the reply socket."""
        self.receiver.stop()
        self.worker.stop()
        self.replies.close()

    def counters(self) -> dict[str, float]:
        """Datagrams received, parameter values coalesced, messages lost (full inbox or socket
        buffer), refused, errors."""
        receiver, worker = self.receiver, self.worker
        return {
            "received": receiver.accepted,
            "coalesced": worker.coalesced,
            "dropped": worker.dropped + receiver.kernel_dropped,
            "malformed": worker.malformed,
            "denied": receiver.denied,
            "osc_errors": worker.errors,
        }
