"""Handlers of the queries, which change nothing: ``/list``, ``/get``, ``/scheduled``, ``/stats``,
``/ping``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..attributes import shown
from ..bending.ops import OPS
from ..engine.output import SETTINGS
from ..engine.rack import Rack
from ..errors import BendingError
from ..modulation import KINDS
from ..modulation.oscillators import get_freq
from ..presets.fit import fitting
from ..roots import ROOT_WORDS
from .grammar import Match, Reply
from .mods import modulation_state, rack_modulators

if TYPE_CHECKING:
    from .controller import Controller


def listing(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    what = args[0] if args else "addresses"
    engine = ctl.engine
    listings: dict[str, Callable[[], list[Any]]] = {
        "addresses": lambda: [a.pattern for a in ctl.table.entries],
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
        "modulators": lambda: [m.mod_id for m in modulation_state(ctl)],
        "kinds": lambda: list(KINDS),
    }
    if what not in listings:
        raise BendingError(f"/list takes one of {sorted(listings)}")
    return [(f"/list/{what}", list(listings[what]()))]


def get(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    address = m.path["address"]
    parts = address.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "mod":
        return [(f"/get{address}", [rack_modulators(ctl).get(parts[1], parts[2])])]
    if len(parts) == 2 and parts[0] == "rack" and parts[1] in SETTINGS and ctl.rack is not None:
        return [(f"/get{address}", [float(getattr(ctl.rack.output.applied, parts[1]))])]
    _one_node(ctl, "get", address)
    state = ctl.engine.applied_state
    parts = address.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "bend":
        op = state.op(parts[1])
        if parts[2] == "enable":
            value: Any = float(op.enabled)
        else:
            params = dict(op.params)
            freq = get_freq(ctl.engine, parts[1]) if parts[2] == "freq" else None
            if freq is not None:  # an Oscillate played as an LFO modulator (deprecated)
                params["freq"] = freq
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


def scheduled(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    address = m.path["address"]
    entry = ctl.table.route(address).entry  # a clear error for an address that does not exist
    if ctl.prefix == "" and not entry.rack:
        _one_node(ctl, "scheduled", address)
    item = ctl.schedule.last(ctl.prefix + address)
    if item is None:
        return [(f"/scheduled{address}", [])]
    seconds = max(0.0, (item.at - ctl.engine.time) / ctl.engine.sample_rate)
    return [(f"/scheduled{address}", [round(seconds, 3), *item.values])]


def stats(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    stats = ctl.engine.stats_dict()
    ordered = {"blocks": stats.pop("blocks"), **(ctl.counters() if ctl.counters else {}), **stats}
    flat: list[Any] = []
    for key, value in ordered.items():
        flat += [key, round(value, 3) if isinstance(value, float) else value]
    return [("/stats", flat)]


def ping(ctl: Controller, m: Match, args: list[Any], at: int | None) -> list[Reply]:
    return [("/pong", [])]
