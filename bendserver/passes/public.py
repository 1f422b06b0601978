"""Operators called as torch's public functions: a converted TorchScript method's nodes are
``torch.ops.aten`` overloads, each call of which goes through the overload's Python wrapper.

``torch.ops.aten.cat.default(parts, -1)`` and ``torch.cat(parts, -1)`` run the same kernel;
the second skips a Python frame (25 against 16 us per call measured on a busy 2-core machine,
a third of the cost of small ops): over the 500 to 600 nodes of a RAVE export, about 3 ms a
block. ``aten.slice``, which torch has no public function for, becomes indexing
(``x[..., -3:]``).
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from .. import compat
from .shapes import fixed_shape


def _public(name: str) -> Callable[..., Any] | None:
    """torch's C function or C tensor method of an operator's name, taking the operator's
    arguments as they are (Python wrappers such as ``torch.split`` may not), or None."""
    function = getattr(torch, name, None)
    if isinstance(function, types.BuiltinFunctionType):
        return function
    method = getattr(torch.Tensor, name, None)
    if isinstance(method, types.MethodDescriptorType):
        return method
    function = compat.nn_function(name)
    return function if isinstance(function, types.BuiltinFunctionType) else None


def _slice(gm: torch.fx.GraphModule, node: torch.fx.Node) -> tuple | None:
    """``aten.slice(x, dim, start, end, step)`` as the index ``x[index]`` takes, or None (a
    shape not known, an argument from the graph)."""
    x, dim, start, end, step = node.args + (0, None, None, 1)[len(node.args) - 1 :]
    shape = fixed_shape(gm, x)
    bounds = (start, end, step)
    if shape is None or node.kwargs or not isinstance(dim, int):
        return None
    if not all(b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds):
        return None
    return (slice(None),) * (dim % len(shape)) + (slice(start, end, step),)


def public_calls(gm: torch.fx.GraphModule) -> bool:
    """Call ``torch.ops.aten`` operators as torch's public functions and tensor methods of the
    same name where the name cannot pick another overload (one Python frame less per call),
    slices as indexing."""
    changed = False
    for node in list(gm.graph.nodes):
        name = compat.aten_name(node.target) if node.op == "call_function" else None
        if name is None:
            continue
        index = _slice(gm, node) if name == "slice" else None
        if index is not None:
            node.target, node.args = operator.getitem, (node.args[0], index)
            changed = True
            continue
        public = None if compat.aten_overload_ambiguous(node.target) else _public(name)
        if public is not None:
            node.target = public
            changed = True
    return changed
