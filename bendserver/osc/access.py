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

__all__ = [
    "AccessList",
    "checked_networks",
    "foreign_host",
    "foreign_origin",
    "local_names",
    "malformed_host",
]


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


def malformed_host(host: str | None) -> bool:
    """True when a request's ``Host`` header cannot be read as a host and port (``[``)."""
    try:
        parts = urlsplit(f"//{host or ''}")
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:
        return True
    return not parts.hostname


def foreign_host(host: str | None, names: Iterable[str]) -> bool:
    """True when a request's ``Host`` header names neither an address nor one of ``names``
    (or cannot be read: :func:`malformed_host`)."""
    if malformed_host(host):
        return True
    hostname = urlsplit(f"//{host}").hostname
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
    try:
        parts = urlsplit(origin)
    except ValueError:  # not a URL at all
        return True
    return parts.scheme not in ("http", "https") or parts.netloc.lower() != (host or "").lower()
