"""OSC control of a running server: an intake process that drains the socket and coalesces, a
worker thread that parses and applies.

See docs/osc.md for the address space (generated from :data:`bendserver.control.ADDRESSES`).
"""

from .access import AccessList
from .packets import Incoming, MalformedPacket, parse_datagram
from .receiver import DEFAULT_RCVBUF, OscReceiver
from .replies import ReplySender, encode
from .service import OscService
from .worker import ControlWorker

__all__ = [
    "DEFAULT_RCVBUF",
    "AccessList",
    "ControlWorker",
    "Incoming",
    "MalformedPacket",
    "OscReceiver",
    "OscService",
    "ReplySender",
    "encode",
    "parse_datagram",
]
