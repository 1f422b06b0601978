"""Which hosts may control the server: loopback always, other networks only when allowed.

The check runs in the OSC intake process (:class:`bendserver.osc.intake.AccessList`); here the
``--allow`` values are checked first, with a message that says what to write. The OSCQuery port
(its page and WebSocket can change the bending from a browser) also checks what a browser sends:
the ``Host`` a request names must be an address or this machine's name, so that a web page on
another site cannot reach the server under a name of its own (DNS rebinding), and an ``Origin``,
where a browser sends one, must be the server itself, so that another site's page cannot open
the WebSocket.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..errors import BendingError
from .intake import AccessList, allowed_networks

__all__ = ["AccessList", "checked_networks", "foreign_host", "foreign_origin", "local_names"]


def checked_networks(allow: Iterable[str]) -> list[str]:
    """The ``--allow`` values, each a network such as ``192.168.1.0/24`` or one address."""
    allow = list(allow)
    for text in allow:
        try:
            allowed_networks([text])
        except ValueError:
            raise BendingError(
                f"--allow takes a network in CIDR notation such as 192.168.1.0/24 "
                f"(or one address), got {text!r}"
            ) from None
    return allow


def local_names() -> set[str]:
    """The names a browser may call this machine by (besides its addresses)."""
    name = socket.gethostname().lower()
    return {"localhost", name, f"{name}.local"}


def foreign_host(host: str | None, names: Iterable[str]) -> bool:
    """True when a request's ``Host`` header names neither an address nor one of ``names``."""
    hostname = urlsplit(f"//{host or ''}").hostname
    if not hostname:
        return True
    try:
        ipaddress.ip_address(hostname)
        return False
    except ValueError:
        return hostname.rstrip(".") not in names


def foreign_origin(origin: str | None, host: str | None) -> bool:
    """True when a browser's ``Origin`` is another site than ``host`` (the request's ``Host``);
    no Origin (a client that is not a browser) is not foreign."""
    if origin is None:
        return False
    parts = urlsplit(origin)
    return parts.scheme not in ("http", "https") or parts.netloc.lower() != (host or "").lower()
