"""The control address space: OSC-style messages turned into engine changes.

One table (:data:`ADDRESSES`, :mod:`.table`) is the address space: each entry carries its
pattern, its argument schema (:mod:`.grammar`) and its handler, and :meth:`Controller.dispatch`
(:mod:`.controller`) routes through it alone, so nothing outside the table is reachable. The
same table gives ``/list addresses``, docs/osc.md and the checks on the shipped patches. A
message is parsed and checked against its schema before its handler runs; a refused message
raises a BendingError and changes nothing. Every number may arrive as a float (Pure Data sends
nothing else): integer and flag arguments accept floats. ``/get`` reads what plays now;
``/scheduled`` what a client scheduled ahead; ``/preset/save`` saves the engine's pending state
(what plays once every change sent for now has applied). A client's message for later than
:data:`LEAD` seconds ahead waits, checked but not prepared, in its bounded
:class:`~bendserver.schedule.Schedule` until it is that close.

The handlers, grouped by what they drive: :mod:`.bends` (ops, versions, engine settings),
:mod:`.presets`, :mod:`.queries` (list, get, scheduled, stats, ping), :mod:`.midi`,
:mod:`.live` (models loaded live, frames), :mod:`.mods` (modulators), :mod:`.takes`.
"""

from ..roots import ROOT_WORDS
from .controller import LEAD, Controller, Counters, Switcher
from .grammar import Address, Arg, Handler, Match, Reply, Schema, Table
from .table import ADDRESSES, TABLE, coalescing_pattern, route

__all__ = [
    "ADDRESSES",
    "LEAD",
    "ROOT_WORDS",
    "TABLE",
    "Address",
    "Arg",
    "Controller",
    "Counters",
    "Handler",
    "Match",
    "Reply",
    "Schema",
    "Switcher",
    "Table",
    "coalescing_pattern",
    "route",
]
