"""Direct attributes: what the graph reads from its modules, bound once as plain attributes.

A graph module reads ``self.pre.conv.weight`` through ``nn.Module.__getattr__`` at every level,
at every call (drive: 44 lookups, about 20 us per block here). The objects are stable: a weight
change swaps a parameter's data, never the parameter, and caches are written in place. So each
``get_attr`` can read one plain instance attribute bound to the same object.
"""

from __future__ import annotations

import torch.fx

from .nodes import attribute


def direct_attributes(gm: torch.fx.GraphModule) -> bool:
    """Read every attribute the graph uses from one plain instance attribute bound to the same
    object (a parameter stays the parameter whose data a weight change swaps)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op != "get_attr" or node.target.startswith("_direct_"):
            continue
        name = "_direct_" + node.target.replace(".", "_")
        if name not in gm.__dict__:
            # object.__setattr__: an nn.Module would register a parameter or submodule and
            # serve it through __getattr__ again.
            object.__setattr__(gm, name, attribute(gm, node.target))
        node.target = name
        changed = True
    return changed
