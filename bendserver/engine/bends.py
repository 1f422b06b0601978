"""The ops an engine built, and what a change of bending state must apply.

Everything here runs on the control side. :class:`Bends` keeps, per op, the live object that the
bended graph calls (its parameter tensors are written by the audio thread only, when a change
applies) and a twin that computes weights, so that preparing a change never touches what plays.
:meth:`Bends.plan` describes what differs between two states without computing anything (so
plans are cheap to compare); :meth:`Bends.payload` computes the tensors and the graph a plan
needs, for the audio thread to swap in.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ..attributes import Attribute
from ..bending.base import BendingOp, State
from ..bending.module import BendedModule
from ..errors import BendingError
from ..slices import breathe
from .commands import Ramp
from .cuda_graph import CudaGraphs
from .state import OP_ID, BendingState, OpState

#: What a weight's value depends on: version, interpolation, and its ops (id, params, enabled).
Signature = tuple[Any, ...]
#: What a graph module depends on: its activation ops in order, as ``(uid, keys, enabled)``
#: (``enabled`` None where the graph reads the op's flag as it runs).
Structure = tuple[tuple[int, tuple[str, ...], bool | None], ...]


@dataclass
class LiveOp:
    """One op built by the engine: ``op`` is called by the graph, ``twin`` computes weights."""

    op: BendingOp
    twin: BendingOp
    keys: tuple[str, ...]
    weights: dict[str, State]  #: per-weight state (random fields...), shared by op and twin
    activations: tuple[str, ...]  #: the activations it bends in the traced graph
    #: per-tensor states of the layer outputs the op folds into (TorchScript files)
    folds: dict[str, State] = field(default_factory=dict)
    #: per-weight states folding it into the layers that read its activations, where it can
    #: be (see :meth:`Bends.folded`)
    readers: dict[str, State] = field(default_factory=dict)

    def bends(self, name: str, folded: bool = False) -> bool:
        """Whether this op changes weight ``name`` (directly or as a fold; ``folded``: with
        its activations folded into their readers)."""
        return name in self.weights or name in self.folds or (folded and name in self.readers)

    def states(self, name: str, folded: bool = False) -> list[State]:
        """Its states for weight ``name``: as a weight op, then as a fold."""
        sources = (self.weights, self.folds, self.readers if folded else {})
        return [s[name] for s in sources if name in s]


@dataclass(frozen=True)
class Plan:
    """What one change applies, without tensors: weights to recompute (with the signature they
    get), parameters to write (uid, name, value, ramp blocks), enabled flags, engine settings,
    the activation structure when it changes, and whether the streaming state resets."""

    weights: tuple[tuple[str, Signature], ...] = ()
    params: tuple[tuple[int, str, float, int], ...] = ()
    enabled: tuple[tuple[int, bool], ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()
    structure: Structure | None = None
    reset: bool = False
    attributes: tuple[tuple[str, Any], ...] = ()

    def covering(self, other: Plan) -> Plan:
        """This plan, also rewriting the weights ``other`` wrote (for a plan that replaces
        another which may already have applied)."""
        mine = dict(self.weights)
        extra = tuple((n, s) for n, s in other.weights if n not in mine)
        return Plan(
            self.weights + extra,
            self.params,
            self.enabled,
            self.settings,
            self.structure,
            self.reset,
            self.attributes,
        )


@dataclass
class Payload:
    """What the audio thread applies for a plan: cheap swaps and scalar writes. What it
    replaces is kept in ``replaced`` and freed on the control side."""

    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    ramps: list[tuple[tuple[int, str], Ramp]] = field(default_factory=list)
    enabled: list[tuple[BendingOp, bool]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    forward: Callable[..., Any] | None = None
    reset: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)
    replaced: list[Any] = field(default_factory=list)


class Bends:
    """The live ops of one engine (by uid) and the plans and payloads of its changes."""

    def __init__(
        self,
        bended: BendedModule,
        method: str,
        route: Callable[[int, str, float], None],
        optimize: Callable[[torch.fx.GraphModule], Callable[..., Any]],
        graphs: CudaGraphs | None = None,
        fold: bool = False,
        attributes: Mapping[str, Attribute] | None = None,
    ) -> None:
        """``route(uid, name, value)``: a bound method of the engine, called when a live op's
        parameter is assigned from Python; ``optimize``: what each built graph goes through;
        ``graphs``: the engine's CUDA graph capture, if any (while it captures, switching an
        activation op on or off builds another graph: a captured graph runs the ops that were
        on when it was captured); ``fold``: fold per-channel ops into the layers reading their
        activations where that is exact (:meth:`folded`); ``attributes``: a TorchScript
        file's nn~ attributes (what their setters are called with)."""
        self.bended = bended
        self.attributes = dict(attributes or {})
        self._optimize = optimize
        self.bank = bended.weight_bank
        self.method = method
        self.live: dict[int, LiveOp] = {}
        self._route = weakref.WeakMethod(route)
        self._cuda_graphs = graphs
        self._graphs: dict[Structure, Callable[..., Any]] = {}
        self._uids = itertools.count(1)
        self._played: set[int] = set()  #: ``id`` of each live op (a lookup, not a scan)
        self._fold = fold

    # -- ops ---------------------------------------------------------------------------------

    def create(self, op_id: str, op: BendingOp, keys: Sequence[str]) -> OpState:
        """Register ``op`` on ``keys`` (validated: raises a BendingError if a key matches
        nothing or the op cannot bend it) and return its state. ``op.name = value`` on it then
        goes through the engine's command path."""
        if not isinstance(op_id, str) or not OP_ID.fullmatch(op_id):
            raise BendingError(
                f"op ids are a letter then letters, digits or _ (e.g. mask_2), got {op_id!r}"
            )
        if op.on_set is not None or id(op) in self._played:
            raise BendingError(f"{op!r} is already played by an engine: create another op")
        targets = self.bended.targets(op, *keys, readers=self._fold)
        slots = self.bank.slots
        states = {
            n: op.init_state(n, slots[n].shape, slots[n].dtype, slots[n].device)
            for n in targets.weights
        }
        uid = next(self._uids)
        twin = copy.deepcopy(op)
        if self._cuda_graphs is not None:  # a capture reads a CPU scalar once, a device one live
            op.to(self._cuda_graphs.input.device)
        self._played.add(id(op))
        self.live[uid] = LiveOp(
            op,
            twin,
            tuple(keys),
            states,
            tuple(targets.activations),
            targets.folds,
            targets.readers,
        )
        op.on_set = _router(self._route, uid)
        return OpState(op_id, uid, tuple(keys), tuple(op.values().items()), op.enabled)

    def op(self, uid: int) -> BendingOp:
        return self.live[uid].op

    def twin(self, state: OpState) -> BendingOp:
        """The op's twin with the parameters of ``state`` (to compute weights or save it)."""
        twin = self.live[state.uid].twin
        for name, value in state.params:
            twin.value_tensor(name).fill_(value)
        twin.enabled = state.enabled
        return twin

    def keep_only(self, states: Iterable[BendingState]) -> None:
        """Forget the ops and graphs no state in ``states`` uses any more."""
        used = {op.uid for state in states for op in state.ops}
        self.discard(uid for uid in list(self.live) if uid not in used)
        self._graphs = {
            key: graph for key, graph in self._graphs.items() if all(e[0] in used for e in key)
        }

    def discard(self, uids: Iterable[int]) -> None:
        """Forget these ops: they are in no state (refused, or removed and applied)."""
        released = []
        for uid in list(uids):
            live = self.live.pop(uid, None)
            if live is None:
                continue
            live.op.on_set = None
            self._played.discard(id(live.op))
            released.append(live.op)
        if released:
            self.bended.release(*released)

    def rebatched(self, graphs: CudaGraphs | None) -> None:
        """Forget the graphs built for another batch (the engine's streams changed); capture
        with ``graphs`` from now on."""
        self._graphs.clear()
        self._cuda_graphs = graphs

    # -- plans -------------------------------------------------------------------------------

    def plan(
        self, before: BendingState, after: BendingState, ramps: dict[tuple[int, str], int]
    ) -> Plan:
        """What applying ``after`` over ``before`` must change (``ramps``: blocks per
        ``(uid, param)`` for the parameters this change moves gradually)."""
        folded_before, folded_after = self.folded(before), self.folded(after)
        weights = []
        for name in self._touched(before, after):
            signature = self.signature(after, name, folded_after)
            if self.signature(before, name, folded_before) != signature:
                weights.append((name, signature))
        old = {op.uid: op for op in before.ops}
        params, enabled = [], []
        for op in after.ops:
            previous = old.get(op.uid)
            if previous is None:
                continue
            old_values = dict(previous.params)
            params += [
                (op.uid, name, value, ramps.get((op.uid, name), 0))
                for name, value in op.params
                if old_values.get(name) != value
            ]
            if previous.enabled != op.enabled:
                enabled.append((op.uid, op.enabled))
        settings = tuple(
            (name, getattr(after, name))
            for name in ("gain", "mix", "bypass")
            if getattr(before, name) != getattr(after, name)
        )
        structure = self.structure(after)
        old_attributes = dict(before.attributes)
        attributes = tuple((k, v) for k, v in after.attributes if old_attributes.get(k) != v)
        return Plan(
            tuple(weights),
            tuple(params),
            tuple(enabled),
            settings,
            structure if structure != self.structure(before) else None,
            before.resets != after.resets,
            attributes,
        )

    def structure(self, state: BendingState) -> Structure:
        """The activation ops of ``state`` in order: what its graph module depends on."""
        graphs = self._cuda_graphs
        flags = graphs is not None and graphs.failure is None
        folded = self.folded(state)
        return tuple(
            (op.uid, op.keys, op.enabled if flags else None)
            for op in _slowly(state.ops)
            if self.live[op.uid].activations and op.uid not in folded
        )

    def folded(self, state: BendingState) -> set[int]:
        """The ops of ``state`` that play folded into the layers reading their activations:
        those that can, on activations no op that cannot fold bends (ops that fold are scales,
        which commute; another op's order against them would not be kept)."""
        if not self._fold:
            return set()
        unfoldable = {
            name
            for op in _slowly(state.ops)
            if not self.live[op.uid].readers
            for name in self.live[op.uid].activations
        }
        return {
            op.uid
            for op in _slowly(state.ops)
            if self.live[op.uid].readers and unfoldable.isdisjoint(self.live[op.uid].activations)
        }

    def signature(self, state: BendingState, name: str, folded: set[int]) -> Signature:
        """What weight ``name`` depends on in ``state`` (``folded``: ``self.folded(state)``)."""
        ops = tuple(
            (op.uid, op.params, op.enabled)
            for op in _slowly(state.ops)
            if self.live[op.uid].bends(name, op.uid in folded)
        )
        return (state.version, state.interp, ops)

    def _touched(self, before: BendingState, after: BendingState) -> list[str]:
        """Weights whose value may differ between the states (a superset)."""
        if (before.version, before.interp) != (after.version, after.interp):
            return list(self.bank.slots)
        changed = set(_slowly(before.ops)) ^ set(_slowly(after.ops))  # added, removed, changed
        names: dict[str, None] = {}
        for op in changed:
            breathe()
            names.update(dict.fromkeys(self.live[op.uid].weights))
            names.update(dict.fromkeys(self.live[op.uid].folds))
        for op in {*before.ops, *after.ops}:  # another op may fold or unfold this one
            breathe()
            names.update(dict.fromkeys(self.live[op.uid].readers))
        return list(names)

    # -- payloads ----------------------------------------------------------------------------

    def payload(self, plan: Plan, state: BendingState) -> Payload:
        """Compute what ``plan`` applies to reach ``state``: the heavy half of a change."""
        payload = Payload(
            settings=dict(plan.settings), reset=plan.reset, attributes=dict(plan.attributes)
        )
        folded = self.folded(state)
        for name, _ in plan.weights:
            payload.weights[name] = self.weight(state, name, folded)
        for uid, name, value, blocks in plan.params:
            tensor = self.live[uid].op.value_tensor(name)
            payload.ramps.append(((uid, name), Ramp(tensor, value, blocks)))
        payload.enabled = [(self.live[uid].op, flag) for uid, flag in plan.enabled]
        calls = [(name, self.attributes[name].arguments(v)) for name, v in state.attributes]
        if plan.attributes and self.bended.set_attributes(calls):
            self._graphs.clear()  # a converted .ts graph froze an attribute a setter changed
            payload.forward = self.forward(self.structure(state))
        elif plan.structure is not None:
            payload.forward = self.forward(plan.structure)
        self._computed()
        return payload

    def _computed(self) -> None:
        """On a GPU, wait until this thread's stream has computed what was prepared: the audio
        side reads it on its own stream, which does not wait for this one."""
        first = next(iter(self.bank.slots.values()), None)
        if first is not None and first.is_cuda:
            torch.cuda.current_stream(first.device).synchronize()

    def weight(self, state: BendingState, name: str, folded: set[int]) -> torch.Tensor:
        """Weight ``name`` as ``state`` bends it (``folded``: ``self.folded(state)``)."""
        chain = []
        for op in state.ops:
            breathe()
            if op.enabled:
                states = self.live[op.uid].states(name, op.uid in folded)
                chain += [(self.twin(op), weight_state) for weight_state in states]
        return self.bank.bended(name, state.version, state.interpolation, chain)

    def forward(self, structure: Structure) -> Callable[..., Any]:
        """The bended graph's ``forward`` for an activation structure (built, optimised and
        captured once, the ops switched as the structure says while that runs)."""
        if structure not in self._graphs:
            bends = [(self.live[uid].op, keys) for uid, keys, _ in structure]
            with self._enabled_as(structure):
                self._graphs[structure] = self._optimize(self.bended.build(self.method, bends))
        return self._graphs[structure]

    @contextlib.contextmanager
    def _enabled_as(self, structure: Structure) -> Iterator[None]:
        """The live ops switched as ``structure`` says, meanwhile: a capture runs them so.
        Only where the structure holds the flags, so no eager graph that plays reads them."""
        switched = [(self.live[uid].op, on) for uid, _, on in structure if on is not None]
        before = [op.enabled for op, _ in switched]
        for op, on in switched:
            op.enabled = on
        try:
            yield
        finally:
            for (op, _), enabled in zip(switched, before, strict=True):
                op.enabled = enabled


def _slowly(ops: Iterable[OpState]) -> Iterable[OpState]:
    """``ops`` with a pause point between each (:func:`bendserver.slices.breathe`)."""
    for op in ops:
        breathe()
        yield op


def _router(route: weakref.WeakMethod, uid: int) -> Callable[[str, float], None]:
    """``op.name = value`` on a live op: a change submitted through its engine (held weakly, so
    that an op outliving its engine does not keep it alive)."""

    def submit(name: str, value: float) -> None:
        method = route()
        if method is not None:
            method(uid, name, value)

    return submit
