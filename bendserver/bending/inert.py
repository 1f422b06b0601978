"""Activations that cannot change anything when bent, and what to bend instead.

An activation op replaces its tensor for every reader except those that write into it in place
(:func:`~bendserver.bending.graph.insert_ops`): the destination of a streaming cache's
``cache[...].copy_(new)``, or the unused result of that copy, has no other reader, so an op on
it would run and change nothing. Such nodes are found on the graph alone (any ``torch.fx``
graph: a traced Python method or a converted TorchScript one), left out of the listed
activations, and refused when named, with the tensor to bend instead.
"""

from __future__ import annotations

import torch.fx

from .graph import writes_into

#: Methods and attributes that read a tensor's shape, not its values.
_SHAPE_READS = {"size", "dim", "shape", "ndim", "numel", "dtype", "device"}


def inert_nodes(graph: torch.fx.Graph) -> dict[str, str]:
    """The nodes an op would have no reader of (every reader writes into them in place or reads
    their shape), each with why and what to bend instead, in words.

    Only direct readers count: a node read by a view of itself that is then written into (a
    slice of a cache) is not inert, since an op on it would redirect that write."""
    return {
        node.name: _instead(node)
        for node in graph.nodes
        if node.op != "output"
        and all(writes_into(user, node) or _reads_shape(user) for user in node.users)
    }


def _reads_shape(user: torch.fx.Node) -> bool:
    if user.op == "call_method":
        return user.target in _SHAPE_READS
    return user.op == "call_function" and user.target is getattr and user.args[1] in _SHAPE_READS


def _instead(node: torch.fx.Node) -> str:
    """Why bending ``node`` changes nothing, and what to bend instead."""
    for writer in node.users:
        if writes_into(writer, node):
            value = _written(writer)
            instead = f"'{value.name}' (what is written into it)" if value else f"'{writer}'"
            return f"it is only written into in place ({_call(writer)}); bend {instead} instead"
    if node.args and writes_into(node, node.args[0]) and _written(node) is not None:
        return (
            f"it is what {_call(node)} returns, and nothing reads it; bend "
            f"'{_written(node).name}' (what is written) instead"
        )
    return "nothing reads its value (at most its shape)"


def _written(writer: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor an in-place ``writer`` writes into its first argument, if one is a node."""
    value = writer.args[1] if len(writer.args) > 1 else None
    return value if isinstance(value, torch.fx.Node) else None


def _call(writer: torch.fx.Node) -> str:
    """An in-place write as code: ``cache.copy_(new)``."""
    args = [a.name if isinstance(a, torch.fx.Node) else repr(a) for a in writer.args[1:]]
    if writer.op == "call_method":
        return f"{writer.args[0].name}.{writer.target}({', '.join(args)})"
    name = getattr(writer.target, "__name__", str(writer.target))
    return f"{name}({', '.join([writer.args[0].name, *args])})"
