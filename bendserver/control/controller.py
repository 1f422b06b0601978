"""The controller: one message checked and applied to a node or a rack, now or at its time.

:meth:`Controller.dispatch` routes through the address table (:mod:`.table`) alone, so nothing
outside it is reachable; a message for a rack's node goes to that node's controller. A client's
message for later than :data:`LEAD` seconds ahead waits, checked but not prepared, in its
bounded :class:`~bendserver.schedule.Schedule` until it is that close.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..engine.rack import Rack
from ..engine.target import ControlTarget
from ..errors import BendingError
from ..midi.mappings import MidiMap
from ..modulation.oscillators import convert
from ..paths import user_dir
from ..presets.library import PresetLibrary
from ..roots import ROOT_WORDS
from ..schedule import SCHEDULE_CAPACITY, Schedule, Scheduled
from ..takes import ScoreRecorder
from .grammar import Address, Match, Reply
from .live import model_load, node_load
from .table import TABLE, route

Counters = Callable[[], dict[str, float]]
#: Seconds before its time that a scheduled message is prepared (submitted to the engine).
LEAD = 0.05
#: The queries that also take a node's name after their word (``/get/<node>/...``).
_NODE_QUERIES = ("get", "scheduled")


class Switcher(Protocol):
    """What ``/model/load`` and ``/node/<node>/load`` drive: a live server's
    :class:`~bendserver.switching.ModelSwitcher`."""

    loading: str | None  #: the model a load in progress loads (None: none)

    def load(self, source: str, preset: str | None = None, node: str | None = None) -> Any: ...


class Controller:
    """Applies control messages to one target: a node, or a rack (its nodes addressed as
    ``/<node>/...``; see :mod:`bendserver.engine.target`). ``counters`` adds a server's
    counters to ``/stats``; ``presets`` is where ``/preset/*`` reads and writes; ``capacity``:
    messages each client may schedule ahead; ``switcher``: what ``/model/load`` swaps models
    with (None: it is refused); ``frames``: a live server's frames at a control rate
    (:class:`~bendserver.osc.frames.FrameStreams`: ``/out/subscribe``, ``/in/...``; None: there
    are none)."""

    def __init__(
        self,
        engine: ControlTarget,
        presets: PresetLibrary | None = None,
        counters: Counters | None = None,
        capacity: int = SCHEDULE_CAPACITY,
        switcher: Switcher | None = None,
        frames: Any = None,
    ) -> None:
        self.engine = engine
        #: The address space it routes by (the handlers reach it here: the table holds them).
        self.table = TABLE
        self.presets = presets or PresetLibrary()
        self.counters = counters
        self.schedule = Schedule(capacity)
        self.midi = MidiMap()  #: the MIDI mappings (kept, saved and loaded with or without a port)
        self.midi_folder = user_dir() / "midi"  #: where ``/midi/save`` and ``/midi/load`` go
        self.midi_port: str | None = None  #: the MIDI input's name, set by the input when open
        self._nodes: dict[str, Controller] = {}  #: a controller per rack node addressed
        #: What the addresses of this controller's replies start with: ``/<node>`` for a rack
        #: node's controller (its replies say which node answered), "" for the server's.
        self.prefix = ""
        self.switcher = switcher
        self.frames = frames
        #: The take being recorded as a score (``/record/score``, ``serve --record-score``).
        self.recorder: ScoreRecorder | None = None
        self.scores_folder = user_dir() / "scores"  #: where ``/record/score <name>`` writes

    def dispatch(
        self,
        address: str,
        args: Sequence[Any] = (),
        at: int | None = None,
        client: str | None = None,
    ) -> list[Reply]:
        """Check and apply one message; returns replies. Raises BendingError on a bad message,
        having changed nothing. A message from a ``client`` for later than :data:`LEAD` ahead
        is checked and held in its schedule (see :meth:`due`). ``/<node>/...`` goes to that
        node of the rack (its own addresses), held in the same schedule, and answered under
        the node's address (``/<node>/get/...``); so is ``/get/<node>/...``."""
        ctl, inner = self._target(address)
        match = replace(route(inner), client=client)
        values = match.entry.schema.parse(inner, args)
        if client is not None and at is not None and not match.entry.query:
            if at > self._horizon():
                self.schedule.add(at, client, address, values, match)
                return []
        return self._handled(ctl, match, values, at, address, args)

    def _handled(
        self,
        ctl: Controller,
        match: Match,
        values: list[Any],
        at: int | None,
        address: str,
        args: Sequence[Any],
    ) -> list[Reply]:
        """Run a message's handler (recorded into a score while one records)."""
        recorder = self.recorder
        recording = (
            contextlib.nullcontext(at)
            if recorder is None or match.entry.query
            else recorder.recording(ctl, match.entry.pattern, address, args, at)
        )
        with recording as at:
            replies = ctl._answered(match.entry.handler(ctl, match, values, at))
            self._rerouted(match.entry, at)
        return replies

    def _rerouted(self, entry: Address, at: int | None) -> None:
        """After a change of what plays (ops, a preset, a model): the ``Oscillate`` ops it
        brought played as LFO modulators, the modulators' routes built again over the ops to
        come (``/mod/...`` builds its own)."""
        if entry.coalesce or entry.query:
            return
        if entry.pattern.startswith(("/mod/", "/midi/", "/preset/save", "/record/")):
            return
        if isinstance(self.engine, Rack):
            convert(self.engine, at)
        modulation = getattr(self.engine, "modulation", None)
        if modulation is not None:
            modulation.refresh(at)

    def _target(self, address: str) -> tuple[Controller, str]:
        """The controller an address is for (a rack node's, or this one) and the address it
        takes there: ``/<node>/...`` and the queries ``/get/<node>/...`` and
        ``/scheduled/<node>/...`` (the node's address after the query's word) go to the node."""
        nodes = self.nodes
        parts = address.split("/", 3)
        if len(parts) < 3 or parts[0] or not parts[2]:
            return self, address
        if parts[1] in nodes and parts[1] not in ROOT_WORDS:
            return self.node_controller(parts[1]), address[len(parts[1]) + 1 :]
        if parts[1] in _NODE_QUERIES and parts[2] in nodes and len(parts) == 4 and parts[3]:
            return self.node_controller(parts[2]), f"/{parts[1]}/{parts[3]}"
        return self, address

    def _answered(self, replies: list[Reply] | None) -> list[Reply]:
        """``replies`` under this controller's address (a node's name first)."""
        return [(self.prefix + address, values) for address, values in replies or []]

    def check(self, address: str, args: Sequence[Any] = ()) -> None:
        """Refuse a message that routes nowhere or has wrong arguments (nothing is applied)."""
        _, inner = self._target(address)
        route(inner).entry.schema.parse(inner, args)

    @property
    def nodes(self) -> dict[str, Any]:
        """The rack's nodes by name where the target is a rack (else none)."""
        return self.engine.nodes if isinstance(self.engine, Rack) else {}

    @property
    def rack(self) -> Rack | None:
        """The rack this controller drives as a whole (None: one node's controller)."""
        return self.engine if isinstance(self.engine, Rack) else None

    def node_controller(self, name: str) -> Controller:
        """A controller of one node, sharing the presets, counters and schedule (made once per
        node: a model switched in under the same name gets its own)."""
        node, made = self.nodes[name], self._nodes.get(name)
        if made is None or made.engine is not node:
            made = Controller(node, self.presets, self.counters)
            made.prefix, made.schedule = f"/{name}", self.schedule
            self._nodes[name] = made
        return made

    def refused_now(self, address: str) -> bool:
        """Whether a message arriving while a change is prepared is refused at once rather
        than held to follow it: a load while a load runs (one at a time)."""
        if self.switcher is None or self.switcher.loading is None:
            return False
        try:
            handler = route(self._target(address)[1]).entry.handler
        except BendingError:
            return False
        return handler in (model_load, node_load)

    def is_structural(self, address: str) -> bool:
        """Whether a message changes what plays as a whole (a preset loaded or saved, an op
        added, a version...: tens of milliseconds or more), not a parameter's value nor a
        query (False for an address that routes nowhere)."""
        try:
            entry = route(self._target(address)[1]).entry
        except BendingError:
            return False
        return not (entry.coalesce or entry.query)

    def is_query(self, address: str) -> bool:
        """Whether ``address`` is a query (False for an address that routes nowhere)."""
        try:
            return route(address).entry.query
        except BendingError:
            return False

    def due(self) -> list[Scheduled]:
        """The scheduled messages to prepare now (taken out of the schedule), in time order."""
        return self.schedule.due(self._horizon())

    def apply(self, item: Scheduled) -> list[Reply]:
        """Apply a scheduled message from :meth:`due` at its time (a node's: to that node)."""
        ctl, _ = self._target(item.address)
        values = list(item.values)
        return self._handled(ctl, item.route, values, item.at, item.address, values)

    def seconds_to_due(self) -> float | None:
        """Seconds until the next scheduled message is to be prepared, or None."""
        at = self.schedule.next_at()
        if at is None:
            return None
        return max(0.0, (at - self._horizon()) / self.engine.sample_rate)

    def _horizon(self) -> int:
        return self.engine.time + self.engine.samples(LEAD)
