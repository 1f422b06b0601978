"""Replies to OSC clients: encoded with python-osc's builder, sent to a fixed reply port.

Max's ``[udpreceive]`` and Pd's ``[netreceive]`` listen on a fixed port, so replies go to the
reply port of the sender's host (or of a configured host), not to the sender's source port.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any

from pythonosc.osc_message_builder import OscMessageBuilder

log = logging.getLogger("bendserver.osc")

_INT32 = range(-(2**31), 2**31)


def encode(address: str, args: Sequence[Any]) -> bytes:
    """One OSC message. Integers outside int32 and other numbers go as floats (Pd's
    ``[oscparse]`` reads i, f and s); anything else is sent as its text."""
    builder = OscMessageBuilder(address)
    for value in args:
        if isinstance(value, bool):
            builder.add_arg(int(value), "i")
        elif isinstance(value, int) and value in _INT32:
            builder.add_arg(value, "i")
        elif isinstance(value, (int, float)):
            builder.add_arg(float(value), "f")
        else:
            builder.add_arg(str(value), "s")
    return builder.build().dgram


class ReplySender:
    """Sends replies to ``(host, port)``; ``host`` None means the sender's own host."""

    def __init__(self, port: int, host: str | None = None) -> None:
        self.port = port
        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket6: socket.socket | None = None
        self.sent = 0
        self.failed = 0

    def send(self, sender_host: str, address: str, args: Sequence[Any] = ()) -> None:
        """Send one reply; a failure (no route, a full buffer) is counted, never raised."""
        host = self.host or sender_host
        try:
            self._socket_for(host).sendto(encode(address, args), (host, self.port))
            self.sent += 1
        except (OSError, ValueError) as error:
            self.failed += 1
            if self.failed == 1:
                log.warning("cannot send replies to %s:%d: %s", host, self.port, error)

    def _socket_for(self, host: str) -> socket.socket:
        if ":" not in host:
            return self._socket
        if self._socket6 is None:
            self._socket6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        return self._socket6

    def close(self) -> None:
        self._socket.close()
        if self._socket6 is not None:
            self._socket6.close()
