"""Early guards: the flow guards that read only the model's state, checked first in a block.

A converted TorchScript file checks flags it keeps (RAVE's ``warmed_up``, ``decode_params``)
where its code read them, between the layers. Such a guard reads nothing the block computes or
writes, so checking it before the block's first operator gives the same answer (and refuses a
block before any cache is written); the layers between which it stood become one run
(:mod:`.native`, :mod:`.scripted`).
"""

from __future__ import annotations

import torch.fx

from ..tracing import is_guard
from .nodes import state_only, written_roots


def early_guards(gm: torch.fx.GraphModule) -> bool:
    """Move each guard reading only state the graph never writes, with what it computes from,
    to the start of the graph (after its inputs), in their order."""
    graph = gm.graph
    written = written_roots(graph)
    moved: set[torch.fx.Node] = set()
    for guard in [n for n in graph.nodes if is_guard(n)]:
        needed = state_only(guard, written)
        if needed is not None:
            moved |= needed
    if not moved:
        return False
    last = [n for n in graph.nodes if n.op == "placeholder"][-1]
    changed = False
    for node in [n for n in graph.nodes if n in moved]:
        if node.prev is not last:
            last.append(node)
            changed = True
        last = node
    return changed
