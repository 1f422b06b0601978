"""Activation bending as a graph transform, and graph-module construction.

An activation op becomes a ``call_module`` node right after the node it bends; every consumer of
that node reads the op's output instead, wherever the node appears in its arguments (inside
lists, tuples, dicts, keyword arguments), except consumers that write into it in place (they keep
writing into the real tensor, e.g. a streaming cache).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch import nn

from .. import compat
from ..tracing import is_guard

#: What a converted TorchScript method's graph carries besides its nodes: the tensor constants
#: its nodes read, the scalar attributes it froze.
_GRAPH_DATA = ("constants", "attribute_reads")

# Functions that write into their first argument.
_INPLACE_FUNCTIONS = {
    operator.setitem,
    operator.iadd,
    operator.isub,
    operator.imul,
    operator.itruediv,
    operator.ifloordiv,
    operator.imod,
    operator.ipow,
    operator.iand,
    operator.ior,
    operator.ixor,
    operator.ilshift,
    operator.irshift,
    operator.imatmul,
}


def writes_into(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    """True when ``user`` mutates ``node`` in place (``node.add_(...)``, ``node[i] = ...``,
    ``torch.Tensor.copy_(node, ...)``, ``aten.copy_(node, ...)``: any fx graph's forms)."""
    if not user.args or user.args[0] is not node:
        return False
    if user.op == "call_method":
        return _inplace_name(user.target)
    if user.op != "call_function":
        return False
    if user.target in _INPLACE_FUNCTIONS or compat.writes_first_argument(user.target):
        return True
    return _inplace_name(str(getattr(user.target, "__name__", "")))  # torch.Tensor.copy_


def _inplace_name(name: str) -> bool:
    """``add_``, ``copy_``: torch's names of in-place methods (not ``__iadd__``'s dunders)."""
    return name.endswith("_") and not name.endswith("__")


def activation_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Nodes that can be bent: floating-point tensors computed by the graph or given to it."""
    return [
        node
        for node in graph.nodes
        if node.op in ("placeholder", "call_module", "call_function", "call_method")
        and not is_guard(node)
        and "dtype" in node.meta
        and node.meta["dtype"].is_floating_point
    ]


def copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of a traced graph, keeping its node metadata and ``flow_steps``."""
    new = torch.fx.Graph()
    output = new.graph_copy(graph, {})
    new.output(output)
    new.flow_steps = list(getattr(graph, "flow_steps", []))
    for name in _GRAPH_DATA:  # a converted TorchScript method's (bendserver.tracing.script)
        if hasattr(graph, name):
            setattr(new, name, dict(getattr(graph, name)))
    return new


def insert_ops(
    graph: torch.fx.Graph, bound: Sequence[tuple[str, str]]
) -> tuple[torch.fx.Graph, dict[str, str]]:
    """Copy ``graph`` with a ``call_module`` node per ``(activation, module_name)``, in order.

    Several ops on one activation chain in the given order. Returns the new graph and, for each
    bent activation, the name of the node holding its bended value.
    """
    new = copy_graph(graph)
    nodes = {node.name: node for node in new.nodes}
    last: dict[str, torch.fx.Node] = {}
    for activation, module_name in bound:
        source = last.get(activation, nodes[activation])
        with new.inserting_after(source):
            op_node = new.call_module(module_name, (source,))
        op_node.meta.update({k: v for k, v in source.meta.items() if k in ("shape", "dtype")})
        source.replace_all_uses_with(
            op_node,
            delete_user_cb=lambda user, s=source, o=op_node: (
                user is not o and not writes_into(user, s)
            ),
        )
        last[activation] = op_node
    new.lint()
    return new, {name: node.name for name, node in last.items()}


def graph_module(
    graph: torch.fx.Graph, roots: Sequence[nn.Module], extra: dict[str, Any] | None = None
) -> torch.fx.GraphModule:
    """A GraphModule running a copy of ``graph``, each target taken from the first root that has
    it (the shadow module, then extra attributes such as bound ops)."""
    graph = copy_graph(graph)
    attributes: dict[str, Any] = {**getattr(graph, "constants", {}), **(extra or {})}
    for node in graph.nodes:
        if node.op in ("call_module", "get_attr") and node.target not in attributes:
            attributes[node.target] = _resolve(roots, node.target)
    gm = torch.fx.GraphModule(attributes, graph, class_name=type(roots[0]).__name__)
    return gm


def _resolve(roots: Sequence[nn.Module], target: str) -> Any:
    for root in roots:
        try:
            return operator.attrgetter(target)(root)
        except AttributeError:
            continue
    raise AttributeError(f"no attribute {target!r} in the module")
