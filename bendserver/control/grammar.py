"""The address grammar: arguments and their schemas, the table's entries, and routing by them.

An :class:`Address` is one entry of the address space (pattern, :class:`Schema`, effect,
handler); a :class:`Table` of them routes an address to its entry (literal parts before
``<names>``) and gives what is derived from the whole (the first words, the coalescing ones).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.state import OP_ID
from ..errors import BendingError

if TYPE_CHECKING:
    from .controller import Controller

Reply = tuple[str, list[Any]]


@dataclass(frozen=True)
class Arg:
    """One argument: ``kind`` is ``number`` (finite, within ``low``..``high``), ``flag``
    (0 or 1), ``text`` (a string) or ``value`` (a number or a string). ``choices`` names the
    ``/list`` whose reply are the values it takes (the OSCQuery namespace offers them)."""

    name: str
    kind: str = "number"
    low: float = -math.inf
    high: float = math.inf
    choices: str = ""

    @property
    def label(self) -> str:
        """How usage lines show the argument."""
        return "0|1" if self.kind == "flag" else self.name

    def parse(self, value: Any, address: str) -> Any:
        if self.kind == "text":
            if not isinstance(value, str):
                raise BendingError(f"{address}: {self.name} is a string, got {value!r}")
            return value
        if self.kind == "value" and isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BendingError(f"{address}: {self.name} is a number, got {value!r}")
        if not math.isfinite(value):
            raise BendingError(f"{address}: {self.name} must be finite, got {value!r}")
        if self.kind == "flag":
            if value not in (0, 1):
                raise BendingError(f"{address}: {self.name} is 0 or 1, got {value!r}")
            return bool(value)
        if self.kind == "value":
            return int(value) if float(value).is_integer() else float(value)
        if not self.low <= value <= self.high:
            raise BendingError(
                f"{address}: {self.name} must be in [{self.low:g}, {self.high:g}], got {value!r}"
            )
        return float(value)


@dataclass(frozen=True)
class Schema:
    """Arguments: ``required`` ones, then ``optional`` ones, then a ``repeated`` group (at
    least ``min_repeats`` times). Anything more is refused."""

    required: tuple[Arg, ...] = ()
    optional: tuple[Arg, ...] = ()
    repeated: tuple[Arg, ...] = ()
    min_repeats: int = 0

    def parse(self, address: str, args: Sequence[Any]) -> list[Any]:
        args = list(args)
        if len(args) < len(self.required):
            raise BendingError(f"usage: {address} {self.usage()}")
        values = [a.parse(v, address) for a, v in zip(self.required, args, strict=False)]
        rest = args[len(self.required) :]
        if not self.repeated:
            if len(rest) > len(self.optional):
                count = len(self.required) + len(self.optional)
                raise BendingError(
                    f"{address} takes at most {count} argument{'s' * (count != 1)}, got "
                    f"{len(args)}" + (f"; usage: {address} {self.usage()}" if count else "")
                )
            return values + [a.parse(v, address) for a, v in zip(self.optional, rest, strict=False)]
        size = len(self.repeated)
        if len(rest) % size or len(rest) // size < self.min_repeats:
            raise BendingError(f"usage: {address} {self.usage()}")
        group = self.repeated * (len(rest) // size)
        return values + [a.parse(v, address) for a, v in zip(group, rest, strict=True)]

    def usage(self) -> str:
        words = [a.label for a in self.required] + [f"[{a.label}]" for a in self.optional]
        if self.repeated:
            names = " ".join(a.label for a in self.repeated)
            words.append(f"{names} [{names} ...]" if self.min_repeats else f"[{names} ...]")
        return " ".join(words)


@dataclass(frozen=True)
class Match:
    """A routed message: its table entry, the values of the pattern's ``<names>``, and the
    host that sent it (None: this process)."""

    entry: Address
    path: dict[str, str]
    client: str | None = None


Handler = Callable[["Controller", Match, list[Any], "int | None"], "list[Reply] | None"]


@dataclass(frozen=True)
class Address:
    """One entry of the address space: pattern, arguments, effect, and its handler.

    ``coalesce``: a parameter message whose newest value per address may replace older ones not
    yet applied (faders); structural messages never are. ``query``: it changes nothing and is
    answered at once, whatever its timetag (also between the slices of a long change)."""

    pattern: str
    schema: Schema
    effect: str
    handler: Handler
    coalesce: bool = False
    query: bool = False
    #: The rack's own: sent without a node's name to a rack of several (``/stats``, a whole
    #: rack's preset); every other address is a node's there.
    rack: bool = False
    #: What of the controller it needs (``frames``: a live server's frames at a control rate;
    #: ``rack``: a rack as a whole, not one node): the namespace lists it only where the
    #: controller has it.
    needs: str = ""

    @property
    def args(self) -> str:
        """The arguments as documented (``value [ramp_ms]``)."""
        return self.schema.usage()

    @property
    def parts(self) -> list[str]:
        return self.pattern.strip("/").split("/")


class Table:
    """The address space: its entries in the order documented (:attr:`entries`), and the
    routing of an address to one of them."""

    def __init__(self, entries: tuple[Address, ...]) -> None:
        self.entries = entries
        #: In routing order: patterns with more literal parts first (``/<node>/...``, the one
        #: whose first word is a name, is routed by :meth:`Controller.dispatch`, before the table).
        self.routes = sorted(
            (a for a in entries if not a.parts[0].startswith("<")),
            key=lambda a: -sum(not p.startswith("<") for p in a.parts),
        )

    def route(self, address: str) -> Match:
        """Match ``address`` against the entries (literal parts before ``<names>``)."""
        parts = address.strip("/").split("/") if address.startswith("/") else None
        if parts:
            for entry in self.routes:
                path = match(entry.parts, parts)
                if path is not None:
                    return Match(entry, path)
        raise BendingError(f"unknown address {address!r}; send /list addresses for the list")

    def coalescing_pattern(self) -> str:
        """A regular expression of the addresses whose values coalesce (from the table: for the
        OSC intake, which runs without the rest of bendserver)."""
        name = OP_ID.pattern
        alternatives = [
            "/".join(name if part.startswith("<") else re.escape(part) for part in entry.parts)
            for entry in self.entries
            if entry.coalesce
        ]
        return "/(?:" + "|".join(alternatives) + ")"


def match(pattern: list[str], parts: list[str]) -> dict[str, str] | None:
    """The values of ``pattern``'s ``<names>`` in an address's ``parts``, or None where it does
    not match (``<address>`` takes the rest of the address)."""
    path: dict[str, str] = {}
    for index, word in enumerate(pattern):
        if word == "<address>":  # the rest of the address, for /get
            rest = parts[index:]
            if not rest or not all(rest):
                return None
            path["address"] = "/" + "/".join(rest)
            return path
        if index >= len(parts):
            return None
        if word.startswith("<"):
            if not OP_ID.fullmatch(parts[index]):
                return None
            path[word[1:-1]] = parts[index]
        elif word != parts[index]:
            return None
    return path if len(parts) == len(pattern) else None
