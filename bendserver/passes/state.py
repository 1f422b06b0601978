"""Calls of a graph made while it is built (to time it, to see its tensors' layouts) leave
nothing behind: what they write and draw is put back, or they play a copy."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.fx

from ..bending.base import forward_state
from ..slices import breathe
from ..tracing import is_guard
from .nodes import is_random


@contextlib.contextmanager
def put_back(module: torch.nn.Module, state: Iterable[torch.Tensor] = ()) -> Iterator[None]:
    """Meanwhile, calls may write ``module``'s buffers, its ops' state and ``state``, and draw
    from its ops' generators and torch's own: all put back after (nothing plays yet)."""
    tensors, generators = forward_state(module, state)
    saved = [t.detach().clone() for t in tensors]
    drawn = [g.get_state() for g in generators]
    stream = torch.random.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for tensor, value in zip(tensors, saved, strict=True):
                tensor.copy_(value)
        for generator, value in zip(generators, drawn, strict=True):
            generator.set_state(value)
        torch.random.set_rng_state(stream)


def recorded(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, Any] | None:
    """Every node's value in one call of ``gm`` on zeros of its input's shape (what a block of a
    fixed size always lays out alike), or None where ``gm`` cannot be copied. The call plays a
    copy of ``gm``: a graph built while a server plays shares its caches and ops' state with the
    graph playing, which goes on meanwhile. Its flow guards are not checked (zeros may take
    another path than the traced one, which the graph plays anyway) and its random draws are
    zeros of their shape (torch's generator is the one playing)."""
    try:
        twin = copy.deepcopy(gm)
    except Exception:  # an op holding what cannot be copied: no layouts
        return None
    nodes = {node.name: node for node in gm.graph.nodes}
    values: dict[torch.fx.Node, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            breathe()  # while a server plays, its audio gets its turns between the nodes
            if is_guard(node):
                result = None
            elif is_random(node) and "shape" in node.meta:
                result = torch.zeros(tuple(node.meta["shape"]), dtype=node.meta.get("dtype"))
            else:
                result = super().run_node(node)
            values[nodes[node.name]] = result
            return result

    placeholder = next(n for n in twin.graph.nodes if n.op == "placeholder")
    with torch.inference_mode():
        Recorder(twin).run(torch.zeros(tuple(placeholder.meta["shape"])))
    return values
