"""Control-flow decisions frozen at trace time, and the guards that check them at call time.

The tracer runs the model on concrete inputs, so every Python decision (``if`` on a tensor or a
shape, a loop count, ``len``, ``int(...)`` of a traced value, a non-tensor argument) is taken once
and baked into the graph. Each such decision is recorded as a :class:`FlowStep` and a guard node is
inserted in the graph: when a later input would take another path, the guard raises
:class:`~bendserver.errors.FlowGuardError` naming the step, instead of failing somewhere deep in
the generated code or, worse, silently computing something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.fx

from ..errors import FlowGuardError


@dataclass(frozen=True)
class FlowStep:
    """One frozen decision: the node that computed it, its traced value, where it was taken."""

    name: str
    value: Any
    file: str

    kind = "value"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name}, value={self.value!r}, file={self.file})"

    def describe(self) -> str:
        """The step in words, as the guard's error message quotes it."""
        return f"{self.kind} '{self.name}' at {self.file} was {self.value!r} when traced"


class LogicalFlowStep(FlowStep):
    """A branch: ``if`` / ``while`` / ``and`` on a traced tensor or shape."""

    kind = "branch"


class LoopFlowStep(FlowStep):
    """A count: ``len(x)``, iteration over a tensor or a shape, ``range(x.shape[0])``."""

    kind = "loop count"


class ValueFlowStep(FlowStep):
    """A specialised value: ``int(...)``/``float(...)`` of a traced value, a non-tensor argument."""

    kind = "value"


def _fail(step: str, value: Any) -> None:
    raise FlowGuardError(
        f"this input takes another path than the traced one: {step}, now {value!r}. "
        "The graph is frozen to the traced path: call trace() again with inputs like this one."
    )


@torch.fx.node.has_side_effect
def guard_bool(value: Any, expected: bool, step: str) -> None:
    """Raise unless ``bool(value)`` is the traced branch."""
    if bool(value) is not expected:
        _fail(step, bool(value))


@torch.fx.node.has_side_effect
def guard_equal(value: Any, expected: Any, step: str) -> None:
    """Raise unless ``value`` equals the traced count or specialised value."""
    if value != expected:
        _fail(step, value)


@torch.fx.node.has_side_effect
def guard_len(value: Any, expected: int, step: str) -> None:
    """Raise unless ``len(value)`` is the traced length."""
    if len(value) != expected:
        _fail(step, len(value))


GUARDS = (guard_bool, guard_equal, guard_len)


def is_guard(node: torch.fx.Node) -> bool:
    """True for the guard nodes the tracer inserts."""
    return node.op == "call_function" and node.target in GUARDS


def latent(z: Any) -> Any:
    """The latent between a model's ``encode`` and ``decode`` in its ``forward``: a node of its
    own named ``latent`` (RAVE VST's latent scale, bias and jitter are ops on it)."""
    return z


def names_latent(root: Any, method: str) -> bool:
    """True when ``method`` of ``root`` is a forward between an ``encode`` and a ``decode``."""
    return method == "forward" and all(
        callable(getattr(root, name, None)) for name in ("encode", "decode")
    )
