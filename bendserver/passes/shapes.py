"""Fixed shapes: shape reads, the integer arithmetic on them and the guards they settle,
computed once when the graph is built.

The engine refuses a block of another shape, and a graph's buffers are bound once, so every
shape in the graph is the traced one. A streaming layer that checks its cache against the batch
(``if self.cache.shape[0] != x.shape[0]``) costs six Python calls per block for a branch that
cannot change; after this pass it costs none.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from ..tracing import is_guard
from .nodes import attribute

_PURE = {
    operator.getitem,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.mod,
    operator.neg,
    operator.not_,
    len,
}
_UNKNOWN = object()


def fixed_shape(gm: torch.fx.GraphModule, node: Any) -> torch.Size | None:
    """The fixed shape of a tensor node, if known."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "get_attr":
        value = attribute(gm, node.target)
        return value.shape if isinstance(value, torch.Tensor) else None
    shape = node.meta.get("shape")
    return torch.Size(shape) if shape is not None else None


def _value(gm: torch.fx.GraphModule, node: torch.fx.Node, known: dict) -> Any:
    """The value ``node`` always has, or ``_UNKNOWN``."""
    if node.op == "call_function" and node.target is getattr and node.args[1] in ("shape", "ndim"):
        shape = fixed_shape(gm, node.args[0])
        if shape is not None:
            return shape if node.args[1] == "shape" else len(shape)
    if node.op == "call_method" and node.target in ("size", "dim") and not node.kwargs:
        shape = fixed_shape(gm, node.args[0])
        if shape is not None and node.target == "dim":
            return len(shape)
        if shape is not None:
            return shape if len(node.args) == 1 else shape[_literal(node.args[1], known)]
    if node.op == "call_function" and node.target in _PURE and not node.kwargs:
        args = [_literal(arg, known) for arg in node.args]
        if _UNKNOWN not in args:
            return node.target(*args)
    return _UNKNOWN


def _literal(arg: Any, known: dict) -> Any:
    if isinstance(arg, torch.fx.Node):
        return known.get(arg, _UNKNOWN)
    return arg


def _emittable(value: Any) -> Any:
    """``value`` as a literal the generated code can hold (a shape becomes a tuple)."""
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, (bool, int, float)):
        return value
    return _UNKNOWN


def fold_shapes(gm: torch.fx.GraphModule) -> bool:
    """Compute shape reads, the arithmetic on them and the guards they settle once: the engine
    plays one block shape, so they cannot change."""
    known: dict[torch.fx.Node, Any] = {}
    changed = False
    for node in list(gm.graph.nodes):
        if is_guard(node):
            value = _literal(node.args[0], known)
            if value is not _UNKNOWN:
                try:
                    node.target(value, *node.args[1:])
                except Exception:
                    continue  # a guard that fails now fails at every call: keep it
                gm.graph.erase_node(node)
                changed = True
            continue
        value = _value(gm, node, known)
        if value is _UNKNOWN:
            continue
        known[node] = value
        literal = _emittable(value)
        if literal is not _UNKNOWN:
            for user in list(node.users):
                if user not in known and not is_guard(user):
                    user.replace_input_with(node, literal)
    for node in reversed(list(known)):
        if not node.users:
            gm.graph.erase_node(node)
            changed = True
    return changed
