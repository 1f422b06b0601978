"""The LFO op played live as a modulator: an ``Oscillate`` a rack plays becomes an LFO
modulator driving a ``Modulate`` op in its place (docs/modulation.md, "The LFO op").

``Oscillate``'s ``freq`` counts cycles per element along its ``dim``; the modulator's ``rate``
is in Hz: the conversion multiplies by the activation's time steps per second, from the traced
shape over one block (``shape[dim]`` steps each ``block`` samples). The modulator writes the
sine step by step into the op's buffer, so the op plays what ``Oscillate`` played (within
float rounding). Its route, ``/bend/<op>/w`` at depth 0.5 over -1..1, adds the sine itself;
the op's ``depth`` is ``Oscillate``'s. ``/bend/<op>/freq`` keeps reaching the modulator
(deprecated: it logs so once), and ``/get`` answers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..bending.base import BendingOp
from ..bending.module import BendedModule
from ..bending.ops import Modulate, Oscillate
from ..errors import BendingError
from .kinds import Lfo
from .modulators import Modulators, modulators_of
from .state import ModState, Route, from_list, new_mod

log = logging.getLogger("bendserver.modulation")

#: The route of a converted LFO: ``w`` over its whole range -1..1 at depth 0.5 is the sine.
ROUTE = (0.5, -1.0, 1.0)


def steps_per_second(node: Any, op_id: str, dim: int) -> float:
    """Time steps per second along ``dim`` at the activations op ``op_id`` bends (the traced
    shape over one block); a BendingError says why there is no one rate (weights, or
    activations of several lengths)."""
    activations, weights = node.bent_by(op_id)
    if weights or not activations:
        raise BendingError(f"op '{op_id}' bends weights, computed once, not per block")
    return steps_at(node.bended, activations, dim, node.sample_rate / node.block)


def steps_at(bended: BendedModule, activations: Sequence[str], dim: int, blocks: float) -> float:
    """Time steps per second along ``dim`` at ``activations`` (``fn:name`` for a method other
    than ``forward``), traced for one block (``blocks``: blocks a second); a BendingError
    where their lengths differ."""
    lengths = set()
    for activation in activations:
        method, _, name = activation.rpartition(":")
        lengths.add(bended.activation_shape(name, method or "forward")[dim])
    if len(lengths) != 1:
        raise BendingError(
            f"{', '.join(activations)}: {len(lengths)} lengths along dim {dim} "
            f"({sorted(lengths)} a block): no one rate in Hz"
        )
    return lengths.pop() * blocks


def as_oscillate(
    op_id: str, op: BendingOp, modulators: list[Any] | None, steps: float
) -> BendingOp:
    """The ``Oscillate`` a preset's ``Modulate`` plays where its LFO modulator drives it as a
    converted one does (a route to its ``w`` at depth 0.5 over -1..1, no phase, ``w`` 0), at
    ``steps`` a second; ``op`` itself otherwise. For an exported file: it has no modulators."""
    if not isinstance(op, Modulate) or not modulators or op.get("w") != 0.0:
        return op
    for mod in from_list(modulators):
        routes = [(r.depth, r.low, r.high) for r in mod.routes if r.address == f"/bend/{op_id}/w"]
        if mod.kind == "lfo" and routes == [ROUTE] and mod.value("phase") == 0.0:
            return Oscillate(op.get("depth"), mod.value("rate") / steps, dim=op.dim)
    return op


def convert(rack: Any, at: int | None = None) -> list[str]:
    """Play each ``Oscillate`` op (``over="time"``) of the rack's nodes as an LFO modulator
    driving a ``Modulate`` op of the same id, from the block of ``at`` (None: the next). One
    that cannot be (it bends weights, activations of several lengths, or runs past the
    LFO's rate) stays an op, logged. Returns the modulators made."""
    several = len(rack.nodes) > 1
    made = []
    for name, node in rack.nodes.items():
        for op_id, op in node.ops.items():
            if isinstance(op, Oscillate) and op.over == "time":
                mod_id = _converted(rack, name if several else "", node, op_id, op, at)
                made += [mod_id] if mod_id else []
    return made


def starting(rack: Any, modulators: list[Any] | None = None) -> None:
    """A rack made to play (``serve``, ``render``): its preset's ``modulators`` (None: none)
    and its ``Oscillate`` ops played as LFO modulators from its first block."""
    if modulators:
        modulators_of(rack).load(modulators)
    convert(rack)


def joining(rack: Any, old: Any, node: Any) -> Callable[[dict[str, Any]], Any] | None:
    """A node about to replace ``old`` in ``rack`` (``/model/load``, ``/<node>/load``): its
    ``Oscillate`` ops made ``Modulate`` ops now (its warm-up plays them), and what the rack's
    modulators become from the swap's first block (``Rack.swap``'s ``brings``), over the
    nodes the rack then plays: ``old``'s LFO modulators gone, one made for each op of
    ``node``, starting there. None where the rack has no modulators and gets none."""
    rates = {
        op_id: (rate, node.state.op(op_id).param("freq"))
        for op_id, op in node.ops.items()
        if isinstance(op, Oscillate) and op.over == "time" and (rate := _rate(node, op_id, op))
    }
    if not rates and rack.modulation is None:
        return None
    for op_id in rates:
        op = node.op(op_id)
        node.replace_op(op_id, Modulate(depth=node.state.op(op_id).param("depth"), dim=op.dim))

    def brings(nodes: dict[str, Any]) -> Callable[[int], None]:
        mods = modulators_of(rack)
        name = next(key for key, value in nodes.items() if value is node)
        prefix = f"/{name}" if len(nodes) > 1 else ""
        gone = {driving(mods.state, f"{prefix}/bend/{op_id}/w") for op_id in _modulated(old)}
        state = tuple(mod for mod in mods.state if mod.mod_id not in gone)
        made = set()
        for op_id, (rate, freq) in rates.items():
            mod_id = _free(state, f"{name}_{op_id}" if prefix else op_id)
            state += (_lfo(mod_id, rate, f"{prefix}/bend/{op_id}/w"),)
            made.add(mod_id)
            _logged(op_id, freq, mod_id, rate, prefix)
        return mods.swapping(state, nodes, made)

    return brings


def _modulated(node: Any) -> list[str]:
    """The ids of ``node``'s ``Modulate`` ops (those an LFO may play as an ``Oscillate``)."""
    return [op_id for op_id, op in node.ops.items() if isinstance(op, Modulate)]


def _lfo(mod_id: str, rate: float, address: str) -> ModState:
    """The LFO modulator playing an ``Oscillate`` at ``rate`` Hz, routed to ``address``."""
    return new_mod(mod_id, "lfo", {"rate": rate}).routed(Route(address, *ROUTE))


def _rate(node: Any, op_id: str, op: Oscillate) -> float:
    """The rate in Hz of the LFO modulator playing ``op`` (op ``op_id`` of ``node``), or 0
    where it stays an op (logged, saying why)."""
    freq = node.state.op(op_id).param("freq")  # the float32 value the op played
    high = Lfo.knobs["rate"].high
    try:
        rate = freq * steps_per_second(node, op_id, op.dim)
        if rate > high:
            raise BendingError(f"its freq {freq:g} is {rate:g} Hz, past the LFO's {high:g} Hz")
    except BendingError as why:
        log.info("op '%s' stays an Oscillate op: %s", op_id, why)
        return 0.0
    return rate


def _logged(op_id: str, freq: float, mod_id: str, rate: float, prefix: str) -> None:
    log.info(
        "op '%s' (Oscillate, freq %g a step) plays as the LFO modulator '%s' (rate %g Hz) "
        "driving %s/bend/%s/w of a Modulate op: /mod/%s/rate sets it in Hz",
        op_id, freq, mod_id, rate, prefix, op_id, mod_id,
    )  # fmt: skip


def _converted(rack: Any, name: str, node: Any, op_id: str, op: Oscillate, at: int | None) -> str:
    """The modulator playing ``op`` (made here), or "" where it stays an op."""
    rate = _rate(node, op_id, op)
    if not rate:
        return ""
    own = node.state.op(op_id)  # the float32 values the op played: the same sine
    mods = modulators_of(rack)
    prefix = f"/{name}" if name else ""
    address = f"{prefix}/bend/{op_id}/w"
    before = driving(mods.state, address)  # a preset loaded again: its LFO made again
    mod_id = before or _free(mods.state, f"{name}_{op_id}" if name else op_id)
    node.replace_op(op_id, Modulate(depth=own.param("depth"), dim=op.dim), at=at)
    if before:
        mods.remove(before, at=at)
    mods.add(mod_id, "lfo", {"rate": rate}, at=at)
    mods.route(mod_id, address, *ROUTE, at=at)
    _logged(op_id, own.param("freq"), mod_id, rate, prefix)
    return mod_id


def driving(state: Sequence[ModState], address: str) -> str:
    """The LFO modulator of ``state`` whose route drives ``address`` ("" where none does)."""
    for mod in state:
        if mod.kind == "lfo" and any(route.address == address for route in mod.routes):
            return mod.mod_id
    return ""


def _free(state: Sequence[ModState], wanted: str) -> str:
    """``wanted``, or ``wanted_2``, ``wanted_3``...: the first no modulator of ``state`` has."""
    taken = {mod.mod_id for mod in state}
    mod_id, number = wanted, 1
    while mod_id in taken:
        number += 1
        mod_id = f"{wanted}_{number}"
    return mod_id


def _lfo_of(engine: Any, op_id: str) -> tuple[Modulators, str, float] | None:
    """The LFO modulator playing op ``op_id`` of ``engine`` (a rack of one node, or a rack's
    node) in place of an ``Oscillate``, and the op's steps per second; None where the op is
    not one."""
    nodes = getattr(engine, "nodes", None)
    node = next(iter(nodes.values())) if nodes is not None and len(nodes) == 1 else engine
    mods = getattr(node, "modulated", None)
    if mods is None or not isinstance(node.op(op_id), Modulate):
        return None
    name = next(key for key, value in mods.rack.nodes.items() if value is node)
    prefix = f"/{name}" if len(mods.rack.nodes) > 1 else ""
    mod_id = driving(mods.state, f"{prefix}/bend/{op_id}/w")
    if not mod_id:
        return None
    return mods, mod_id, steps_per_second(node, op_id, node.op(op_id).dim)


def set_freq(engine: Any, op_id: str, freq: float, at: int | None = None) -> bool:
    """``/bend/<op>/freq`` of an op played as an LFO modulator: its ``rate``, converted to Hz
    (logged as deprecated once per op). False where the op is not one (the op's own
    parameter, then)."""
    found = _lfo_of(engine, op_id)
    if found is None:
        return False
    mods, mod_id, steps = found
    freq = Oscillate.params["freq"].validate(op_id, freq)
    rate, high = freq * steps, Lfo.knobs["rate"].high
    if rate > high:
        raise BendingError(
            f"/bend/{op_id}/freq {freq:g} is {rate:g} Hz, past the LFO's {high:g} Hz: op "
            f"'{op_id}' plays as the LFO modulator '{mod_id}' (send /mod/{mod_id}/rate in Hz)"
        )
    if (mod_id, op_id) not in mods.deprecated:
        mods.deprecated.add((mod_id, op_id))
        log.warning(
            "/bend/%s/freq is deprecated: op '%s' plays as the LFO modulator '%s'; "
            "send /mod/%s/rate in Hz (freq x %g steps a second)",
            op_id, op_id, mod_id, mod_id, steps,
        )  # fmt: skip
    mods.set(mod_id, "rate", rate, at=at)
    return True


def get_freq(engine: Any, op_id: str) -> float | None:
    """``/get/bend/<op>/freq`` of an op played as an LFO modulator: its rate in cycles per
    step (None where the op is not one)."""
    found = _lfo_of(engine, op_id)
    if found is None:
        return None
    mods, mod_id, steps = found
    return mods.get(mod_id, "rate") / steps
