"""The bending state: one immutable snapshot of everything the control side can change.

Ops (with their keys, live parameters and enabled flags), the weight version or interpolation
mix, and the engine's output gain, dry/wet mix and bypass. A control change is a function from
one state to the next; the engine prepares what a change must apply from the two states, never
from live tensors, so changes that arrive together or out of time order cannot undo each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..bending.weights import DEFAULT_VERSION
from ..errors import BendingError

#: What an op id may be: a name that fits one part of an OSC address (no leading "_").
OP_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: The most ops one engine plays at once (a preset or ``/bend/add`` past it is refused).
MAX_OPS = 32768


def check_op_count(count: int, what: str) -> None:
    """Refuse ``what`` when it would make an engine play more than :data:`MAX_OPS` ops."""
    if count > MAX_OPS:
        raise BendingError(
            f"{what}: {count} ops, past the limit of {MAX_OPS} ops per model; "
            "bend several weights or activations with one op (its keys are regular expressions)"
        )


@dataclass(frozen=True)
class OpState:
    """One op of a state. ``uid`` names the op object the engine built for it (its structure:
    class, options, keys); ``params`` and ``enabled`` are what the control side may change."""

    op_id: str
    uid: int
    keys: tuple[str, ...]
    params: tuple[tuple[str, float], ...]
    enabled: bool = True

    def param(self, name: str) -> float:
        return dict(self.params)[name]

    def with_param(self, name: str, value: float) -> OpState:
        return replace(self, params=tuple((k, value if k == name else v) for k, v in self.params))


@dataclass(frozen=True)
class BendingState:
    """What plays: ops in order, weights (``version``, or an interpolation ``interp`` of
    versions), and the engine's output ``gain``, dry/wet ``mix`` and ``bypass``."""

    ops: tuple[OpState, ...] = ()
    version: str = DEFAULT_VERSION
    interp: tuple[tuple[str, float], ...] | None = None
    gain: float = 1.0
    mix: float = 1.0
    bypass: bool = False
    #: Bumped by each reset request, so that a reset is a change of state like any other.
    resets: int = 0
    #: Attributes of an nn~ TorchScript file set so far (``set_<name>``), in the order set.
    attributes: tuple[tuple[str, Any], ...] = ()

    @property
    def op_ids(self) -> list[str]:
        return [op.op_id for op in self.ops]

    def op(self, op_id: str) -> OpState:
        for op in self.ops:
            if op.op_id == op_id:
                return op
        raise BendingError(f"no op '{op_id}'; ops are {sorted(self.op_ids)}")

    def with_op(self, op: OpState) -> BendingState:
        """This state with ``op`` replacing the op of the same id."""
        return replace(self, ops=tuple(op if o.op_id == op.op_id else o for o in self.ops))

    def adding(self, op: OpState) -> BendingState:
        if op.op_id in self.op_ids:
            raise BendingError(f"an op named '{op.op_id}' exists; remove it first")
        return replace(self, ops=(*self.ops, op))

    def removing(self, op_id: str) -> BendingState:
        self.op(op_id)
        return replace(self, ops=tuple(o for o in self.ops if o.op_id != op_id))

    def weights(self, version: str, interp: Mapping[str, float] | None) -> BendingState:
        mix = None if not interp else tuple(interp.items())
        return replace(self, version=version, interp=mix)

    def engine(self, **settings: Any) -> BendingState:
        """This state with ``gain``, ``mix``, ``bypass`` or ``resets`` changed."""
        return replace(self, **settings)

    def with_attribute(self, name: str, value: Any) -> BendingState:
        kept = tuple((k, v) for k, v in self.attributes if k != name)
        return replace(self, attributes=(*kept, (name, value)))

    @property
    def interpolation(self) -> dict[str, float] | None:
        """The interpolation as a dict (None: the version alone)."""
        return dict(self.interp) if self.interp else None
