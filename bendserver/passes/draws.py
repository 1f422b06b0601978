"""Early draws: a model's own random draws from torch's generator, made first in a block.

RAVE's encoder samples its latent (``randn_like``) and its decoder draws noise between layers:
each draw is a call torch makes, which splits the runs around it (:mod:`.native`). A draw's
values depend only on the generator and the shape, so drawing them all at the start of the
block, in the same order, gives every draw the same numbers, and the operators between them
become one run. Done only where every draw of the graph from torch's generator can move (a
draw reading a tensor's values, or another generator's stream interleaved, keeps them all
where they are).
"""

from __future__ import annotations

import torch
import torch.fx

from .nodes import copy_meta, is_random
from .state import recorded

#: Draws with a shape and nothing else, and the ``*_like`` ones drawing that shape.
_SHAPED = (torch.randn, torch.rand)
_LIKE = {torch.randn_like: torch.randn, torch.rand_like: torch.rand}


def early_draws(gm: torch.fx.GraphModule) -> bool:
    """Move the graph's draws from torch's generator to its start, in order, a ``randn_like``
    of a contiguous tensor drawn as a ``randn`` of its shape."""
    graph = gm.graph
    draws = [n for n in graph.nodes if n.op in ("call_function", "call_method") and is_random(n)]
    if not draws or any(not _movable(n) for n in draws):
        return False
    like = [n for n in draws if n.target in _LIKE]
    values = recorded(gm) if like else {}
    if values is None or any(not _contiguous(values.get(n.args[0])) for n in like):
        return False
    last = [n for n in graph.nodes if n.op == "placeholder"][-1]
    for node in draws:
        if node.target in _LIKE:
            value = values[node.args[0]]  # the tensor whose shape the draw takes
            with graph.inserting_before(node):
                shaped = graph.call_function(
                    _LIKE[node.target], (list(value.shape),), {"dtype": value.dtype}
                )
            node.replace_all_uses_with(copy_meta(node, shaped))
            graph.erase_node(node)
            node = shaped
        last.append(node)
        last = node
    return True


def _movable(node: torch.fx.Node) -> bool:
    """A draw of torch's generator whose values depend on nothing the block computes."""
    if node.op != "call_function" or "generator" in node.kwargs:
        return False
    kwargs = {k: v for k, v in node.kwargs.items() if v is not None}
    if node.target in _SHAPED:
        plain = set(kwargs) <= {"dtype"}
        return plain and not any(isinstance(a, torch.fx.Node) for a in node.all_input_nodes)
    if node.target in _LIKE:
        return len(node.args) == 1 and set(kwargs) <= {"memory_format"}
    return False


def _contiguous(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.is_contiguous()
