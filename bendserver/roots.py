"""The first words of the OSC address space (``/bend``, ``/model``, ...), below both the
controller that routes by them and the rack files whose node names may not be one of them."""

from __future__ import annotations

#: First words of the control table's addresses (``control.ADDRESSES``; a test keeps them
#: equal): a rack node of that name would hide them.
ROOT_WORDS = frozenset(
    {
        "attr", "bend", "engine", "get", "in", "interp", "list", "midi", "mod", "model", "node",
        "out", "ping", "preset", "rack", "record", "scheduled", "stats", "version",
    }
)  # fmt: skip
