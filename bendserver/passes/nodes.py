"""Small facts about fx nodes that several passes need."""

from __future__ import annotations

import itertools
import operator
from typing import Any

import torch
import torch.fx

from .. import compat
from ..bending.graph import writes_into
from ..tracing import is_guard

#: Ops that return a view of their first argument (writing into the view writes into it).
VIEW_METHODS = {
    "view",
    "reshape",
    "squeeze",
    "unsqueeze",
    "transpose",
    "permute",
    "expand",
    "narrow",
    "select",
    "unfold",
    "as_strided",
    "flatten",
    "unflatten",
    "t",
    "view_as",
    "expand_as",
    "detach",
    "contiguous",
}
VIEW_FUNCTIONS = {
    operator.getitem,
    torch.reshape,
    torch.squeeze,
    torch.unsqueeze,
    torch.transpose,
    torch.permute,
    torch.narrow,
    torch.select,
    torch.flatten,
    torch.detach,
    torch.Tensor.detach,
}

#: Name parts of functions whose result changes from call to call (random draws).
_RANDOM = ("rand", "normal", "bernoulli", "multinomial", "dropout", "poisson", "uniform_")


def is_view(node: torch.fx.Node) -> bool:
    """True when ``node`` may return a view of its first argument."""
    if node.op == "call_method":
        return node.target in VIEW_METHODS
    return node.op == "call_function" and (
        node.target in VIEW_FUNCTIONS or compat.returns_view(node.target)
    )


def is_random(node: torch.fx.Node) -> bool:
    """True for a node that draws random numbers (folding or removing it changes the stream)."""
    name = getattr(node.target, "__name__", str(node.target))
    return any(part in name for part in _RANDOM)


def mutates(node: torch.fx.Node) -> bool:
    """True when ``node`` writes into a tensor (in-place method, ``out=``, setitem...)."""
    if "out" in node.kwargs:
        return True
    return (
        bool(node.args)
        and isinstance(node.args[0], torch.fx.Node)
        and writes_into(node, node.args[0])
    )


def is_impure(node: torch.fx.Node) -> bool:
    """Nodes a pass must keep even when nothing reads their value."""
    return (
        node.op in ("placeholder", "output", "call_module")
        or mutates(node)
        or is_guard(node)
        or is_random(node)
        or (node.op == "call_method" and node.target == "forward")
    )


def leaves(node: torch.fx.Node) -> bool:
    """Whether ``node``'s value may be kept past the block: read by the output, written into,
    or read through a view that may."""
    for user in node.users:
        if user.op in ("output", "call_module") or (mutates(user) and user.args[0] is node):
            return True
        if user.op == "call_method" and user.target == "forward":  # a bending op may keep it
            return True
        if is_view(user) and user.args and user.args[0] is node and leaves(user):
            return True
    return False


def written_roots(graph: torch.fx.Graph) -> set[str]:
    """Attribute names (``get_attr`` targets) that some node writes into, through views."""
    roots: set[str] = set()
    for node in graph.nodes:
        if mutates(node):
            root = node.args[0] if node.args else node.kwargs.get("out")
            while isinstance(root, torch.fx.Node) and is_view(root):
                root = root.args[0]
            if isinstance(root, torch.fx.Node) and root.op == "get_attr":
                roots.add(root.target)
            out = node.kwargs.get("out")
            if isinstance(out, torch.fx.Node) and out.op == "get_attr":
                roots.add(out.target)
    return roots


def state_only(guard: torch.fx.Node, written: set[str]) -> set[torch.fx.Node] | None:
    """The nodes ``guard`` computes from (itself included), or None where one of them is an
    input of the graph or a tensor the graph writes (``written``: :func:`written_roots`)."""
    needed, pending = set(), [guard]
    while pending:
        node = pending.pop()
        if node in needed:
            continue
        if node.op == "placeholder" or (node.op == "get_attr" and node.target in written):
            return None
        if node.op not in ("get_attr", "call_function", "call_method"):
            return None
        needed.add(node)
        pending.extend(node.all_input_nodes)
    return needed


def single(value: Any) -> Any:
    """A one-element list or tuple's element (torch's ``[1]`` for ``1``); anything else as it is."""
    return value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value


def called_before(
    gm: torch.fx.GraphModule,
    before: torch.fx.Node,
    prefix: str,
    held: Any,
    function: Any,
    inputs: list[torch.fx.Node],
    outputs: int,
) -> list[torch.fx.Node]:
    """Insert before ``before`` one call ``function(held, *inputs)``, ``held`` kept on ``gm``
    as a plain attribute named after ``prefix``; the nodes standing for its ``outputs`` results
    (the call itself for one, its items for several, none for none)."""
    index = next(i for i in itertools.count() if not hasattr(gm, f"{prefix}{i}"))
    object.__setattr__(gm, f"{prefix}{index}", held)  # not a module's attribute
    graph = gm.graph
    with graph.inserting_before(before):
        owner = graph.create_node("get_attr", f"{prefix}{index}")
        call = graph.call_function(function, (owner, *inputs))
        if outputs == 1:
            return [call]
        return [graph.call_function(operator.getitem, (call, i)) for i in range(outputs)]


def attribute(module: torch.nn.Module, target: str) -> Any:
    """``module.a.b.c`` for ``target == "a.b.c"``."""
    return operator.attrgetter(target)(module)


def copy_meta(source: torch.fx.Node, node: torch.fx.Node) -> torch.fx.Node:
    """Give ``node`` the shape and dtype the tracer recorded for ``source``."""
    node.meta.update({k: v for k, v in source.meta.items() if k in ("shape", "dtype")})
    return node


def add_buffer(gm: torch.fx.GraphModule, prefix: str, tensor: torch.Tensor) -> str:
    """Register ``tensor`` on ``gm`` under a new name starting with ``prefix``; return it (a name
    looked up, not every buffer listed: a pass adding hundreds spent seconds listing them)."""
    index = 0
    while hasattr(gm, f"{prefix}{index}"):
        index += 1
    gm.register_buffer(f"{prefix}{index}", tensor, persistent=False)
    return f"{prefix}{index}"
