"""Direct calls: leaf modules called without ``nn.Module.__call__``'s per-call overhead.

Convolutions, linear layers and activations become their functional form reading the module's
live weight attributes; other leaf modules (bound bending ops included) have ``forward`` called
directly. A module with hooks keeps its ``__call__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from ..compat import has_forward_hooks
from .nodes import attribute, copy_meta


def _functional(module: nn.Module) -> tuple[Callable[..., Any], tuple, dict[str, Any]] | None:
    """``(function, extra args, kwargs)`` computing ``module(x)`` as ``function(x, *extra)``,
    where extra args named ``"@name"`` are the module's live attribute ``name``."""
    if type(module) in (nn.Conv1d, nn.Conv2d) and module.padding_mode == "zeros":
        conv = F.conv1d if isinstance(module, nn.Conv1d) else F.conv2d
        bias = "@bias" if module.bias is not None else None
        extra = ("@weight", bias, module.stride, module.padding, module.dilation, module.groups)
        return conv, extra, {}
    if type(module) is nn.Linear:
        return F.linear, ("@weight", "@bias" if module.bias is not None else None), {}
    simple: dict[type, tuple[Callable[..., Any], dict[str, Any]]] = {
        nn.Tanh: (torch.tanh, {}),
        nn.Sigmoid: (torch.sigmoid, {}),
        nn.ReLU: (F.relu, {"inplace": getattr(module, "inplace", False)}),
        nn.SiLU: (F.silu, {"inplace": getattr(module, "inplace", False)}),
        nn.LeakyReLU: (
            F.leaky_relu,
            {
                "negative_slope": getattr(module, "negative_slope", 0.01),
                "inplace": getattr(module, "inplace", False),
            },
        ),
        nn.GELU: (F.gelu, {"approximate": getattr(module, "approximate", "none")}),
    }
    if type(module) in simple:
        function, kwargs = simple[type(module)]
        return function, (), {k: v for k, v in kwargs.items() if v is not False}
    return None


def direct_calls(gm: torch.fx.GraphModule) -> bool:
    """Call leaf modules without ``nn.Module.__call__``: functional forms for convolutions,
    linear layers and activations, ``module.forward(x)`` for the rest."""
    graph, changed = gm.graph, False
    for node in list(graph.nodes):
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            continue
        module = attribute(gm, node.target)
        if has_forward_hooks(module):
            continue
        functional = _functional(module)
        with graph.inserting_before(node):
            if functional is None:
                owner = graph.get_attr(node.target)
                new = graph.call_method("forward", (owner, node.args[0]))
            else:
                function, extra, kwargs = functional
                args = [node.args[0]]
                for value in extra:
                    is_attr = isinstance(value, str) and value.startswith("@")
                    args.append(graph.get_attr(f"{node.target}.{value[1:]}") if is_attr else value)
                new = graph.call_function(function, tuple(args), kwargs)
        node.replace_all_uses_with(copy_meta(node, new))
        graph.erase_node(node)
        changed = True
    return changed
