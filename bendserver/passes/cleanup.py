"""Clean-up passes: detaches dropped, constants folded, dead code removed."""

from __future__ import annotations

import torch
import torch.fx
from torch import nn

from .nodes import add_buffer, attribute, is_impure, is_random, is_view, mutates, written_roots


def drop_detach(gm: torch.fx.GraphModule) -> bool:
    """Remove ``detach()`` calls: the engine runs graphs under ``torch.inference_mode``, where a
    detach is a no-op that still costs a call."""
    changed = False
    for node in list(gm.graph.nodes):
        is_detach = (node.op == "call_method" and node.target == "detach") or (
            node.op == "call_function" and node.target in (torch.detach, torch.Tensor.detach)
        )
        if is_detach and len(node.args) == 1 and not node.kwargs:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            changed = True
    return changed


def _written_through(node: torch.fx.Node) -> bool:
    """True when some use writes into ``node``'s value, directly or through a view."""
    for user in node.users:
        if mutates(user) and (user.args and user.args[0] is node or node in user.kwargs.values()):
            return True
        if is_view(user) and user.args[0] is node and _written_through(user):
            return True
    return False


def fold_constants(gm: torch.fx.GraphModule) -> bool:
    """Compute once what no input, weight or op can change: pure calls whose tensor inputs are
    buffers nothing writes into (or other constants), never written into themselves."""
    written = written_roots(gm.graph)
    constant: dict[torch.fx.Node, object] = {}
    folded: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = attribute(gm, node.target)
            live = isinstance(value, nn.Parameter) or node.target in written
            if isinstance(value, torch.Tensor) and not live:
                constant[node] = value
            continue
        if node.op not in ("call_function", "call_method") or is_impure(node) or is_random(node):
            continue
        inputs = node.all_input_nodes
        if not all(n in constant for n in inputs) or _written_through(node):
            continue
        args = torch.fx.node.map_arg(node.args, lambda n: constant[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: constant[n])
        with torch.no_grad():
            if node.op == "call_function":
                value = node.target(*args, **kwargs)
            else:
                value = getattr(args[0], node.target)(*args[1:], **kwargs)
        constant[node] = value
        if isinstance(value, torch.Tensor):
            folded.append(node)
    changed = False
    for node in folded:
        if all(user in constant for user in node.users):
            continue  # only its folded consumers read it
        name = add_buffer(gm, "_constant_", constant[node].clone())
        with gm.graph.inserting_before(node):
            replacement = gm.graph.get_attr(name)
        replacement.meta.update(node.meta)
        node.replace_all_uses_with(replacement)
        changed = True
    return changed  # what the folded nodes leave unread goes in the dead-code pass


def dead_code(gm: torch.fx.GraphModule) -> bool:
    """Remove nodes whose value nothing reads and that write nothing, draw no random numbers
    and guard nothing."""
    return gm.graph.eliminate_dead_code(is_impure_node=is_impure)
