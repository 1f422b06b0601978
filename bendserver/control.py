"""The control address space: OSC-style messages turned into engine changes.

One table (:data:`ADDRESSES`) is the address space: each entry carries its pattern, its argument
schema and its handler, and :meth:`Controller.dispatch` routes through it alone, so nothing
outside the table is reachable. The same table gives ``/list addresses``, docs/osc.md and the
checks on the shipped patches. A message is parsed and checked against its schema before its
handler runs; a refused message raises a BendingError and changes nothing. Every number may
arrive as a float (Pure Data sends nothing else): integer and flag arguments accept floats.
``/get`` reads what plays now; ``/scheduled`` what a client scheduled ahead; ``/preset/save``
saves the engine's pending state (what plays once every change sent for now has applied).
A client's message for later than :data:`LEAD` seconds ahead waits, checked but not prepared,
in its bounded :class:`~bendserver.schedule.Schedule` until it is that close.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .attributes import shown
from .bending.ops import OPS
from .engine.rack import Rack
from .engine.state import OP_ID
from .engine.target import ControlTarget
from .errors import BendingError
from .limits import MAX_RAMP_MS
from .midi.mappings import Mapping, MidiMap, read_mappings, write_mappings
from .modulation import KINDS, Modulators, modulators_of
from .paths import user_dir
from .presets.fit import fitting
from .presets.library import Preset, PresetLibrary, check_name
from .schedule import SCHEDULE_CAPACITY, Schedule, Scheduled
from .takes import ScoreRecorder

Reply = tuple[str, list[Any]]
Counters = Callable[[], dict[str, float]]
#: Seconds before its time that a scheduled message is prepared (submitted to the engine).
LEAD = 0.05


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
    #: What of the controller it needs (``frames``: a live server's frames at a control rate):
    #: the namespace lists it only where the controller has it.
    needs: str = ""

    @property
    def args(self) -> str:
        """The arguments as documented (``value [ramp_ms]``)."""
        return self.schema.usage()

    @property
    def parts(self) -> list[str]:
        return self.pattern.strip("/").split("/")


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
        """After a change of what plays (ops, a preset, a model), the modulators' routes
        built again over the ops to come (``/mod/...`` builds its own)."""
        modulation = getattr(self.engine, "modulation", None)
        if modulation is not None and not (entry.coalesce or entry.query):
            if not entry.pattern.startswith(("/mod/", "/midi/", "/preset/save", "/record/")):
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
        return handler in (_model_load, _node_load)

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


def route(address: str) -> Match:
    """Match ``address`` against :data:`ADDRESSES` (literal parts before ``<names>``)."""
    parts = address.strip("/").split("/") if address.startswith("/") else None
    if parts:
        for entry in _ROUTES:
            path = _match(entry.parts, parts)
            if path is not None:
                return Match(entry, path)
    raise BendingError(f"unknown address {address!r}; send /list addresses for the list")


def _match(pattern: list[str], parts: list[str]) -> dict[str, str] | None:
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


# -- handlers: (controller, match, parsed args, at) -> replies ---------------------------------


def _set_param(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    value, *ramp = args
    ctl.engine.set_param(m.path["id"], m.path["param"], value, ramp[0] if ramp else 0.0, at=at)


def _enable(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.enable_op(m.path["id"], args[0], at=at)


def _add(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    op_id, op_name, key, *options = args
    if op_name not in OPS:
        raise BendingError(f"unknown op {op_name!r}; ops: {sorted(OPS)}")
    kwargs = dict(zip(options[::2], options[1::2], strict=True))
    try:
        op = OPS[op_name](**kwargs)
        # options are checked where they are used: an option of the wrong type (seed "x",
        # dim 0.5) fails building the op or its state, and nothing is kept (add_op's own rule)
        ctl.engine.add_op(op_id, op, key, at=at)
    except (TypeError, ValueError, IndexError) as error:
        raise BendingError(f"bad arguments for {op_name} {options}: {error}") from None


def _remove(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.remove_op(args[0], at=at)


def _clear(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.clear_ops(at=at)


def _interp(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.set_interpolation(dict(zip(args[::2], args[1::2], strict=True)), at=at)


def _version(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.set_version(args[0], at=at)


def _preset_load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    preset = ctl.presets.load(check_name(args[0]))
    _check_mappings(preset.midi, f"preset '{preset.name}'")
    nodes = ctl.nodes
    if preset.nodes:  # a rack's: each node its part (nodes it does not name keep theirs)
        if not nodes:
            raise BendingError(
                f"preset '{preset.name}' is a rack's: load it into the rack (/preset/load "
                f"{preset.name}, without a node's name)"
            )
        ctl.engine.load_parts(preset, at=at)
    elif len(nodes) > 1:
        raise BendingError(
            f"preset '{preset.name}' is one model's and this rack plays {ctl.engine.names}: "
            f"send it to one node (/{ctl.engine.order[0]}/preset/load {preset.name})"
        )
    else:
        ctl.engine.load_preset(preset, at=at)
    if preset.modulators is not None and hasattr(ctl.engine, "order"):  # the rack's own
        modulators_of(ctl.engine).load(preset.modulators, at=at)
    if preset.midi:  # a preset without mappings keeps those playing
        ctl.midi.replace(preset.midi)


def _preset_save(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    name, *overwrite = args
    nodes = ctl.nodes
    if len(nodes) > 1:  # a rack's: each node's state under its name
        parts = {node: part.preset(node, at=at) for node, part in nodes.items()}
        preset = Preset(check_name(name), nodes=parts)
    else:
        preset = ctl.engine.preset(check_name(name), at=at)
    preset.midi = ctl.midi.mappings()
    modulation = getattr(ctl.engine, "modulation", None)
    if modulation is not None and modulation.state:
        preset.modulators = modulation.to_list()
    ctl.presets.save(preset, overwrite=bool(overwrite and overwrite[0]))
    return [("/preset/saved", [name])]


def _node_address(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    """``/<node>/...`` reaches here only for a name that is no node of the rack."""
    raise BendingError(f"no rack node {m.path['node']!r}; send /list addresses for the list")


def _engine_setting(setter: str) -> Handler:
    """A handler calling ``engine.<setter>(value, at=at)`` (``set_gain``...)."""

    def handler(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
        getattr(ctl.engine, setter)(args[0], at=at)

    return handler


def _attribute(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.set_attribute(m.path["name"], args, at=at)


def _live_frames(ctl: Controller) -> Any:
    if ctl.frames is None:
        raise BendingError(
            "no frames here: a live server (serve) streams those of methods at a control rate "
            "(/list addresses); render writes or reads them as frames files"
        )
    return ctl.frames


def _subscribe(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    port = int(args[0]) if args else None
    return [("/out/subscribed", _live_frames(ctl).subscribe(m.client, port))]


def _unsubscribe(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    port = int(args[0]) if args else None
    return [("/out/unsubscribed", [_live_frames(ctl).unsubscribe(m.client, port)])]


def _frame_in(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _live_frames(ctl).hold(m.path["node"], m.path["method"], args)


def _reset(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.request_reset(at=at)


def _list(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    what = args[0] if args else "addresses"
    engine = ctl.engine
    listings: dict[str, Callable[[], list[Any]]] = {
        "addresses": lambda: [a.pattern for a in ADDRESSES],
        "nodes": lambda: list(engine.order) if isinstance(engine, Rack) else [],
        "weights": lambda: engine.bended.weight_names,
        "activations": lambda: engine.bended.activation_names(engine.method),
        "targets": lambda: [
            *engine.bended.activation_names(engine.method),
            *engine.bended.weight_names,
        ],
        "versions": lambda: engine.versions,
        "ops": lambda: engine.state.op_ids,
        "types": lambda: sorted(OPS),
        "bends": lambda: [
            f"/bend/{op.op_id}/{name}" for op in engine.state.ops for name, _ in op.params
        ],
        "presets": ctl.presets.names,
        "fitting": lambda: fitting(ctl.presets, ctl.nodes or {"": engine}),
        "attributes": lambda: list(engine.model.attributes),
        "modulators": lambda: [m.mod_id for m in _modulation_state(ctl)],
        "kinds": lambda: list(KINDS),
    }
    if what not in listings:
        raise BendingError(f"/list takes one of {sorted(listings)}")
    return [(f"/list/{what}", list(listings[what]()))]


def _get(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    address = m.path["address"]
    parts = address.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "mod":
        return [(f"/get{address}", [_mods(ctl).get(parts[1], parts[2])])]
    _one_node(ctl, "get", address)
    state = ctl.engine.applied_state
    parts = address.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "bend":
        op = state.op(parts[1])
        if parts[2] == "enable":
            value: Any = float(op.enabled)
        else:
            params = dict(op.params)
            if parts[2] not in params:
                raise BendingError(
                    f"op '{parts[1]}' has no parameter '{parts[2]}'; parameters: {sorted(params)}"
                )
            value = params[parts[2]]
    elif parts[0] == "engine" and len(parts) == 2 and parts[1] in ("gain", "mix", "bypass"):
        value = float(getattr(state, parts[1]))
    elif len(parts) == 2 and parts[0] == "attr":
        return [(f"/get{address}", [shown(v) for v in ctl.engine.attribute(parts[1])])]
    elif parts == ["version"]:
        value = state.version
    elif parts == ["interp"]:
        mix = state.interpolation or {state.version: 1.0}
        return [("/get/interp", [x for pair in mix.items() for x in pair])]
    else:
        raise BendingError(f"nothing to get at {address}; see /list addresses")
    return [(f"/get{address}", [value])]


def _one_node(ctl: Controller, query: str, address: str) -> None:
    """Refuse a node's ``query`` of ``address`` sent to a rack of several, saying how to ask
    one of them (a first word that is no address of a node's: an unknown node)."""
    nodes = list(ctl.engine.order) if isinstance(ctl.engine, Rack) else []
    if len(nodes) > 1:
        first = address.split("/")[1]
        if first not in ROOT_WORDS:
            raise BendingError(f"no rack node {first!r} (nodes: {', '.join(nodes)})")
        raise BendingError(
            f"this rack plays several nodes ({', '.join(nodes)}): ask one of them, "
            f"/{query}/<node>{address} (/{query}/{nodes[0]}{address} for instance)"
        )


def _scheduled(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    address = m.path["address"]
    entry = route(address).entry  # a clear error for an address that does not exist
    if ctl.prefix == "" and not entry.rack:
        _one_node(ctl, "scheduled", address)
    item = ctl.schedule.last(ctl.prefix + address)
    if item is None:
        return [(f"/scheduled{address}", [])]
    seconds = max(0.0, (item.at - ctl.engine.time) / ctl.engine.sample_rate)
    return [(f"/scheduled{address}", [round(seconds, 3), *item.values])]


def _midi_mapping(ctl: Controller, address: str, source: list[Any], options: list[Any]) -> Mapping:
    """A mapping to ``address`` from ``source`` (kind, channel, number), checked against what
    the address takes: a number or an on/off of a coalescing address (a parameter), a range
    inside the parameter's (its whole range by default), a ramp only where it ramps."""
    match = route(address)
    entry, path = match.entry, match.path
    arg = entry.schema.required[0] if len(entry.schema.required) == 1 else None
    if not entry.coalesce or arg is None or arg.kind not in ("number", "flag", "value"):
        raise BendingError(f"MIDI maps to parameters (see /list bends), not to {address}")
    low, high = arg.low, arg.high
    if "param" in path:
        param = ctl.engine.op(path["id"]).param(path["param"])
        low, high = param.low, param.high
    if "mod" in path and "name" in path:
        low, high = _mods(ctl).param_range(path["mod"], path["name"])
    if arg.kind == "flag":
        low, high = 0.0, 1.0
    defaults = (None, None, "linear", False, 0.0)
    given_low, given_high, curve, invert, ramp_ms = (*options, *defaults[len(options) :])
    if (given_low is None) != (given_high is None):
        raise BendingError(f"a MIDI range is low and high, both: {address} ... low high")
    if given_low is not None:
        for bound in (given_low, given_high):
            if not low <= bound <= high:
                raise BendingError(f"{address} takes {low:g}..{high:g}, not {bound:g}")
        low, high = given_low, given_high
    if not (math.isfinite(low) and math.isfinite(high)):
        raise BendingError(f"{address} has no bounded range: give one, e.g. {address} 0 1")
    if ramp_ms and "ramp_ms" not in {a.name for a in entry.schema.optional}:
        raise BendingError(f"{address} does not ramp: map it with ramp_ms 0")
    kind, channel, number = source
    if not (float(channel).is_integer() and float(number).is_integer()):
        raise BendingError(f"MIDI channels and numbers are whole numbers, got {channel} {number}")
    return Mapping(
        address, kind, int(channel), int(number), low, high, curve, bool(invert), ramp_ms,
        toggle=arg.kind == "flag",
    )  # fmt: skip


def _midi_learn(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    if ctl.midi_port is None:
        raise BendingError("no MIDI input: start the server with --midi to learn")
    address, *options = args
    ctl.midi.learn(_midi_mapping(ctl, address, ["cc", 1, 0], options))
    return [("/midi/learning", [address])]


def _midi_map(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    address, kind, channel, number, *options = args
    ctl.midi.add(_midi_mapping(ctl, address, [kind, channel, number], options))


def _midi_unmap(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    return [("/midi/unmapped", [ctl.midi.remove(args[0] if args else None)])]


def _midi_list(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    mappings = ctl.midi.mappings()
    learning = ctl.midi.learning
    return [
        *(("/midi/mapping", mapping.describe()) for mapping in mappings),
        ("/midi/list", [len(mappings), ctl.midi_port or "", learning or ""]),
    ]


def _midi_save(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    name, *overwrite = args
    path = ctl.midi_folder / f"{check_name(name)}.json"
    if path.exists() and not (overwrite and overwrite[0]):
        raise BendingError(f"MIDI mappings '{name}' exist: /midi/save {name} 1 replaces them")
    write_mappings(path, ctl.midi.mappings())
    return [("/midi/saved", [name])]


def _midi_load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    path = ctl.midi_folder / f"{check_name(args[0])}.json"
    if not path.is_file():
        raise BendingError(f"no MIDI mappings '{args[0]}' (saved with /midi/save {args[0]})")
    mappings = read_mappings(path)
    _check_mappings(mappings, f"MIDI mappings '{args[0]}'")
    ctl.midi.replace(mappings)


def _check_mappings(mappings: list[Mapping], where: str) -> None:
    """Refuse mappings read from a file whose address is not a parameter's address."""
    for mapping in mappings:
        try:
            entry: Address | None = route(mapping.address).entry
        except BendingError:
            entry = None
        if entry is None or not entry.coalesce:
            raise BendingError(f"{where}: {mapping.address!r} is no parameter address to map")


def _midi_program(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    names = ctl.presets.names()
    number = int(args[0])
    if number >= len(names):
        raise BendingError(f"program {number}: there are {len(names)} presets (/list presets)")
    _preset_load(ctl, m, [names[number]], at)


def _model_load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    loaded = _load(ctl, args, None)
    if loaded.mappings:  # a preset without mappings keeps those playing
        ctl.midi.replace(loaded.mappings)
    return [("/model/loaded", [loaded.node.model.name, *_timings(loaded)])]


def _node_load(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    loaded = _load(ctl, args, m.path["node"])
    return [("/node/loaded", [loaded.name, loaded.node.model.name, *_timings(loaded)])]


def _load(ctl: Controller, args: list[Any], node: str | None) -> Any:
    """Swap a model live into ``node`` of the rack (None: a one-model server's model)."""
    if ctl.switcher is None:
        raise BendingError(
            "loading a model live needs a live server (bendserver serve); a node of its rack "
            "loads with /node/<node>/load"
        )
    source, *preset = args
    if preset:
        check_name(preset[0])
    return ctl.switcher.load(source, preset[0] if preset else None, node)


def _timings(loaded: Any) -> list[float]:
    """What a load's steps took, in seconds (the probe's -1: not probed)."""
    probe = -1.0 if loaded.probe_s is None else round(loaded.probe_s, 3)
    return [probe, round(loaded.load_s, 3), round(loaded.warm_s, 3)]


def _stats(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    stats = ctl.engine.stats_dict()
    ordered = {"blocks": stats.pop("blocks"), **(ctl.counters() if ctl.counters else {}), **stats}
    flat: list[Any] = []
    for key, value in ordered.items():
        flat += [key, round(value, 3) if isinstance(value, float) else value]
    return [("/stats", flat)]


def _ping(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    return [("/pong", [])]


# -- modulators (bendserver.modulation): the rack's own ------------------------------------


def _mods(ctl: Controller) -> Modulators:
    """The modulators of the rack a controller plays (a node's controller: refused)."""
    if not hasattr(ctl.engine, "order"):
        raise BendingError("modulators are the rack's: send /mod/... without a node's name")
    return modulators_of(ctl.engine)


def _modulation_state(ctl: Controller) -> tuple[Any, ...]:
    modulation = getattr(ctl.engine, "modulation", None)
    return () if modulation is None else modulation.state


def _mod_add(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    mod_id, kind, *values = args
    _mods(ctl).add(mod_id, kind, dict(zip(values[::2], values[1::2], strict=True)), at=at)


def _mod_remove(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _mods(ctl).remove(args[0], at=at)


def _mod_clear(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _mods(ctl).clear(at=at)


def _mod_set(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _mods(ctl).set(m.path["mod"], m.path["name"], args[0], at=at)


def _mod_trigger(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    if args[0]:  # a note's release (0) triggers nothing
        _mods(ctl).trigger(m.path["mod"], at=at)


def _mod_route(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    address, depth, *bounds = args
    _mods(ctl).route(m.path["mod"], address, depth, *bounds, at=at)


def _mod_unroute(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _mods(ctl).unroute(m.path["mod"], args[0], at=at)


def _mod_source(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _mods(ctl).set_source(m.path["mod"], args[0], at=at)


def _mod_steps(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    _mods(ctl).set_steps(m.path["mod"], args, at=at)


def _mod_list(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    replies: list[Reply] = []
    for mod in _modulation_state(ctl):
        flat = [x for pair in mod.values for x in pair]
        replies.append(("/mod/modulator", [mod.mod_id, mod.kind, mod.source, *flat]))
        for route in mod.routes:
            replies.append(("/mod/route", [mod.mod_id, route.address, route.depth, route.low,
                                           route.high]))  # fmt: skip
    return [*replies, ("/mod/list", [len(_modulation_state(ctl))])]


def _record_score(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    _mods(ctl)  # a node's controller is refused: the take is the rack's
    if ctl.recorder is not None:
        raise BendingError(f"a score is recording ('{ctl.recorder.name}'): /record/stop first")
    name, *overwrite = args
    path = ctl.scores_folder / f"{check_name(name)}.txt"
    if path.exists() and not (overwrite and overwrite[0]):
        raise BendingError(f"score '{name}' exists: /record/score {name} 1 replaces it")
    path.parent.mkdir(parents=True, exist_ok=True)
    ctl.recorder = ScoreRecorder(ctl.engine, path, name)
    modulators_of(ctl.engine)  # their changes are recorded at the block they apply at
    return [("/record/started", [name, ctl.engine.time])]


def _record_stop(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    recorder = ctl.recorder
    if recorder is None:
        raise BendingError("no score is recording: /record/score <name> starts one")
    ctl.recorder = None
    path = recorder.stop()
    return [("/record/stopped", [recorder.name, len(recorder.events), str(path)])]


_RECORD_ADDRESSES = (
    Address(
        "/record/score",
        Schema((Arg("name", "text"),), (Arg("overwrite", "flag"),)),
        "record every change applied from the next block on, at its block, as a score in the "
        "user's scores folder (render --score plays it again; 1: replace one of that name); "
        "reply /record/started name sample",
        _record_score,
        rack=True,
    ),
    Address(
        "/record/stop",
        Schema(),
        "write the score being recorded; reply /record/stopped name messages path",
        _record_stop,
        rack=True,
    ),
)

#: The addresses of the modulators (``rack``: sent without a node's name).
_MOD_ADDRESSES = (
    Address(
        "/mod/add",
        Schema(
            (Arg("id", "text"), Arg("kind", "text", choices="kinds")),
            repeated=(Arg("param", "text"), Arg("value")),
        ),
        "add a modulator: kind lfo, drift, steps, follower or envelope, with parameters "
        "(docs/modulation.md); it drives nothing until routed",
        _mod_add,
        rack=True,
    ),
    Address(
        "/mod/remove",
        Schema((Arg("id", "text", choices="modulators"),)),
        "remove a modulator (what it drove goes back to its own value)",
        _mod_remove,
        rack=True,
    ),
    Address("/mod/clear", Schema(), "remove every modulator", _mod_clear, rack=True),
    Address(
        "/mod/<mod>/route",
        Schema(
            (Arg("address", "text"), Arg("depth", low=-100.0, high=100.0)),
            (Arg("low"), Arg("high")),
        ),  # fmt: skip
        "drive a parameter (/bend/<op>/<param> on activations, /engine/gain, /engine/mix; a "
        "rack's node's name first): its own value + depth x the modulator x (high - low), "
        "within low..high (default: the parameter's range)",
        _mod_route,
        rack=True,
    ),
    Address(
        "/mod/<mod>/unroute",
        Schema((Arg("address", "text"),)),
        "stop driving a parameter",
        _mod_unroute,
        rack=True,
    ),
    Address(
        "/mod/<mod>/source",
        Schema((Arg("name", "text", choices="nodes"),)),
        "what a follower or an envelope's onsets listen to: in (the input) or a node's output",
        _mod_source,
        rack=True,
    ),
    Address(
        "/mod/<mod>/steps",
        Schema((Arg("value", low=0.0, high=1.0),), repeated=(Arg("value", low=0.0, high=1.0),)),
        "a step sequence's values, 0..1, one per step",
        _mod_steps,
        rack=True,
    ),
    Address(
        "/mod/<mod>/trigger",
        Schema((Arg("on", "flag"),)),
        "start an envelope again at the next block (1; 0: nothing, as a note's release)",
        _mod_trigger,
        coalesce=True,
        rack=True,
    ),
    Address(
        "/mod/<mod>/<name>",
        Schema((Arg("value"),)),
        "set a modulator's parameter (lfo: rate phase; drift: rate seed; steps: bpm division; "
        "follower: attack_ms release_ms gain; envelope: attack_ms hold_ms release_ms onset)",
        _mod_set,
        coalesce=True,
        rack=True,
    ),
    Address(
        "/mod/list",
        Schema(),
        "reply /mod/modulator id kind source param value ... for each modulator, "
        "/mod/route id address depth low high for each route, then /mod/list count",
        _mod_list,
        query=True,
        rack=True,
    ),
)

#: The options of a MIDI mapping: its range (default: the parameter's), curve, inversion, ramp.
_MIDI_OPTIONS = (
    Arg("low"),
    Arg("high"),
    Arg("curve", "text"),
    Arg("invert", "flag"),
    Arg("ramp_ms", low=0.0, high=MAX_RAMP_MS),
)

ADDRESSES: tuple[Address, ...] = (
    Address(
        "/bend/<id>/<param>",
        Schema((Arg("value"),), (Arg("ramp_ms", low=0.0, high=MAX_RAMP_MS),)),
        "set an op parameter, ramped over ramp_ms",
        _set_param,
        coalesce=True,
    ),
    Address(
        "/bend/<id>/enable",
        Schema((Arg("on", "flag"),)),
        "switch an op off (0: pass-through) or on (1)",
        _enable,
        coalesce=True,
    ),
    Address(
        "/bend/add",
        Schema(
            (
                Arg("id", "text"),
                Arg("Op", "text", choices="types"),
                Arg("key", "text", choices="targets"),
            ),
            (),
            (
                Arg("param", "text"),
                Arg("value", "value"),
            ),
        ),
        "add an op on the weights/activations matching key (graph rebuilt off the audio thread)",
        _add,
    ),
    Address("/bend/remove", Schema((Arg("id", "text", choices="ops"),)), "remove an op", _remove),
    Address("/bend/clear", Schema(), "remove every op", _clear),
    Address(
        "/interp",
        Schema(repeated=(Arg("version", "text", choices="versions"), Arg("weight")), min_repeats=1),
        "weights of the version mix (normalised)",
        _interp,
        coalesce=True,
    ),
    Address(
        "/version",
        Schema((Arg("name", "text", choices="versions"),)),
        "switch weight version (ends interpolating)",
        _version,
    ),
    Address(
        "/preset/load",
        Schema((Arg("name", "text", choices="fitting"),)),
        "load a preset: the user's presets folder first, then the shipped presets",
        _preset_load,
        rack=True,
    ),
    Address(
        "/preset/save",
        Schema((Arg("name", "text"),), (Arg("overwrite", "flag"),)),
        "save the bending into the user's presets folder (1: replace one of that name)",
        _preset_save,
        rack=True,
    ),
    Address(
        "/engine/gain",
        Schema((Arg("value", low=0.0, high=16.0),)),
        "output gain, 0..16",
        _engine_setting("set_gain"),
        coalesce=True,
    ),
    Address(
        "/engine/mix",
        Schema((Arg("value", low=0.0, high=1.0),)),
        "dry/wet mix, 0 (dry) .. 1 (wet)",
        _engine_setting("set_mix"),
        coalesce=True,
    ),
    Address(
        "/engine/bypass",
        Schema((Arg("on", "flag"),)),
        "pass the input through",
        _engine_setting("set_bypass"),
        coalesce=True,
    ),
    Address("/engine/reset", Schema(), "clear the streaming state", _reset),
    Address(
        "/attr/<name>",
        Schema((Arg("value", "value"),), repeated=(Arg("value", "value"),)),
        "set an attribute of an nn~ TorchScript file (its set_<name>: one value for each it "
        "takes, a sound file's path for a tensor or buffer; /list attributes)",
        _attribute,
        coalesce=True,
    ),
    Address(
        "/out/subscribe",
        Schema((), (Arg("port", low=1, high=65535),)),
        "send the frames of every method at a control rate (/out/<node>/<method> f f ..., "
        "one float per channel) to the sender's host on port (default: the reply port); "
        "reply /out/subscribed with their addresses",
        _subscribe,
        query=True,
        rack=True,
        needs="frames",
    ),
    Address(
        "/out/unsubscribe",
        Schema((), (Arg("port", low=1, high=65535),)),
        "stop sending frames to the sender's host (on port; none given: any); reply "
        "/out/unsubscribed with how many stopped",
        _unsubscribe,
        query=True,
        rack=True,
        needs="frames",
    ),
    Address(
        "/in/<node>/<method>",
        Schema((Arg("value"),), repeated=(Arg("value"),)),
        "the frame a server whose first method takes frames (decode) plays from the next "
        "block on, held until the next: one value per channel",
        _frame_in,
        coalesce=True,
        rack=True,
        needs="frames",
    ),
    Address(
        "/list",
        Schema((), (Arg("what", "text"),)),
        "reply with names: addresses, nodes (a rack's, in playing order), weights, "
        "activations, targets (both), versions, ops, types, bends, presets, fitting (the "
        "presets that fit), attributes, modulators, kinds",
        _list,
        query=True,
        rack=True,
    ),
    Address(
        "/get/<address>",
        Schema(),
        "reply with the value playing now, e.g. /get/bend/mask/prob (a rack's node: "
        "/get/<node>/bend/mask/prob, answered /<node>/get/bend/mask/prob)",
        _get,
        query=True,
    ),
    Address(
        "/scheduled/<address>",
        Schema(),
        "reply with the message to an address scheduled last (seconds ahead, then its "
        "arguments; none: nothing scheduled)",
        _scheduled,
        query=True,
    ),
    Address(
        "/stats",
        Schema(),
        "reply: blocks N late N errors N p50_ms F p99_ms F max_ms F ... (a rack of several: "
        "<node>_p50_ms F <node>_max_ms F for each; /<node>/stats: that node's own)",
        _stats,
        query=True,
        rack=True,
    ),
    Address("/ping", Schema(), "reply /pong", _ping, query=True, rack=True),
    Address(
        "/model/load",
        Schema((Arg("model", "text"),), (Arg("preset", "text"),)),
        "swap in another model live (a name or a .ts file; a folder or file.py:Class from "
        "serve --allow-code-from only; its own preset, or the one named, none: no preset): "
        "probed in a child process, warmed up, crossfaded over --xfade-ms; "
        "reply /model/loaded name probe_s load_s warm_s (probe_s -1: not probed)",
        _model_load,
    ),
    Address(
        "/node/<node>/load",
        Schema((Arg("model", "text"),), (Arg("preset", "text"),)),
        "swap another model (model[.method], file.ts:method) live into a rack's node, which "
        "keeps its name and place: it must take and give what the node does; probed, warmed "
        "up on the node's input and crossfaded as /model/load; reply /node/loaded name model "
        "probe_s load_s warm_s",
        _node_load,
        rack=True,
    ),
    Address(
        "/midi/learn",
        Schema((Arg("address", "text"),), _MIDI_OPTIONS),
        "map the next MIDI control moved (CC, 14-bit CC, note, pitch bend) to a parameter",
        _midi_learn,
        rack=True,
    ),
    Address(
        "/midi/map",
        Schema(
            (
                Arg("address", "text"),
                Arg("kind", "text"),
                Arg("channel", low=1, high=16),
                Arg("number", low=0, high=127),
            ),
            _MIDI_OPTIONS,
        ),
        "map a MIDI control (kind cc, cc14, note or pitchbend; channel 1-16) to a parameter",
        _midi_map,
        rack=True,
    ),
    Address(
        "/midi/unmap",
        Schema((), (Arg("address", "text"),)),
        "remove the MIDI mappings to an address (none given: all); reply how many",
        _midi_unmap,
        rack=True,
    ),
    Address(
        "/midi/list",
        Schema(),
        "reply /midi/mapping address kind channel number low high curve invert ramp_ms for "
        "each mapping, then /midi/list count port learning",
        _midi_list,
        query=True,
        rack=True,
    ),
    Address(
        "/midi/save",
        Schema((Arg("name", "text"),), (Arg("overwrite", "flag"),)),
        "save the MIDI mappings as a mappings file in the user's folder (1: replace one)",
        _midi_save,
        rack=True,
    ),
    Address(
        "/midi/load",
        Schema((Arg("name", "text"),)),
        "load a mappings file saved with /midi/save",
        _midi_load,
        rack=True,
    ),
    Address(
        "/midi/program",
        Schema((Arg("number", low=0, high=127),)),
        "load preset number N of /list presets (what a MIDI program change does)",
        _midi_program,
        rack=True,
    ),
    *_MOD_ADDRESSES,
    *_RECORD_ADDRESSES,
    Address(
        "/<node>/<address>",
        Schema(),
        "any address above for one node of a rack (/drive/bend/mask/prob 0.5, /enc/interp ...; "
        "a one-node rack answers both, with and without its node's name); replies come under "
        "the node's address (/drive/get/...)",
        _node_address,
    ),
)

#: The table in routing order: patterns with more literal parts first (``/<node>/...`` is
#: routed by :meth:`Controller.dispatch`, before the table).
_ROUTES = sorted(
    (a for a in ADDRESSES if a.handler is not _node_address),
    key=lambda a: -sum(not p.startswith("<") for p in a.parts),
)
#: First words of the table's addresses: a node of that name would hide them.
ROOT_WORDS = frozenset(a.parts[0] for a in ADDRESSES if not a.parts[0].startswith("<"))
#: The queries that also take a node's name after their word (``/get/<node>/...``).
_NODE_QUERIES = ("get", "scheduled")


def coalescing_pattern() -> str:
    """A regular expression of the addresses whose values coalesce (from the table: for the
    OSC intake, which runs without the rest of bendserver)."""
    name = OP_ID.pattern
    alternatives = [
        "/".join(name if part.startswith("<") else re.escape(part) for part in entry.parts)
        for entry in ADDRESSES
        if entry.coalesce
    ]
    return "/(?:" + "|".join(alternatives) + ")"
