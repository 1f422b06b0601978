"""Handlers of the rack's own output: ``/rack/gain``, ``/rack/mute``, ``/rack/bypass``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from .grammar import Handler, Match

if TYPE_CHECKING:
    from .controller import Controller


def setting(name: str) -> Handler:
    """A handler setting the rack's output ``name`` (``gain``, ``mute``, ``bypass``)."""

    def handler(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
        if ctl.rack is None:
            raise BendingError(
                f"the rack's {name} is the whole rack's: send /rack/{name}, without a node's name"
            )
        ctl.rack.set_output(name, args[0], at=at)

    return handler
