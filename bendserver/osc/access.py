"""Which hosts may control the server: loopback always, other networks only when allowed.

The check runs in the OSC intake process (:class:`bendserver.osc.intake.AccessList`); here the
``--allow`` values are checked first, with a message that says what to write.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import BendingError
from .intake import AccessList, allowed_networks

__all__ = ["AccessList", "checked_networks"]


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
