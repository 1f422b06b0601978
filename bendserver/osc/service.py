"""The server's OSC side put together: receiver thread, control worker thread, replies."""

from __future__ import annotations

from collections.abc import Iterable

from ..control import Controller
from .access import AccessList
from .receiver import DEFAULT_RCVBUF, OscReceiver
from .replies import ReplySender
from .worker import Clock, ControlWorker


class OscService:
    """Listens on ``host:port``, applies messages through ``controller``, replies to
    ``reply_port`` (of the sender's host, or of ``reply_host``)."""

    def __init__(
        self,
        controller: Controller,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 9000,
        reply_port: int = 9001,
        reply_host: str | None = None,
        allow: Iterable[str] = (),
        rcvbuf: int = DEFAULT_RCVBUF,
    ) -> None:
        self.replies = ReplySender(reply_port, reply_host)
        self.worker = ControlWorker(controller, self.replies, clock)
        try:
            self.receiver = OscReceiver(
                host, port, self.worker.submit, self.worker.refuse, AccessList(allow), rcvbuf
            )
        except Exception:
            self.replies.close()
            raise

    @property
    def port(self) -> int:
        return self.receiver.port

    @property
    def rcvbuf(self) -> int:
        return self.receiver.rcvbuf

    def start(self) -> None:
        self.worker.start()
        self.receiver.start()

    def stop(self) -> None:
        self.receiver.stop()
        self.worker.stop()
        self.replies.close()

    def counters(self) -> dict[str, float]:
        """Messages received, lost (full queue or full socket buffer), refused, errors."""
        receiver, worker = self.receiver, self.worker
        return {
            "received": receiver.messages,
            "dropped": worker.dropped + receiver.kernel_dropped,
            "malformed": receiver.malformed,
            "denied": receiver.denied,
            "osc_errors": worker.errors,
        }
