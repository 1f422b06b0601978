"""Dilated convolutions as one strided view and one matrix product.

Measured here (one thread, block 256, drive's 8-channel, 8-tap convolution with dilation 128):
torch's dilated path (``slow_conv_dilated2d``) takes twice as long as viewing the input as
``[batch, channels * taps, frames]`` columns and multiplying once. Undilated small convolutions
measured as fast or faster than either rewrite, so they stay convolutions.
"""

from __future__ import annotations

import torch
import torch.fx
import torch.nn.functional as F

from .nodes import copy_meta


def strided_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int
) -> torch.Tensor:
    """``F.conv1d(x, weight, bias, dilation=dilation)`` (no padding, stride 1, one group) as
    ``weight[out, in * taps] @ columns[in * taps, frames]``, the columns a strided view of ``x``."""
    batch, channels, length = x.shape
    out_channels, _, taps = weight.shape
    frames = length - dilation * (taps - 1)
    s_batch, s_channel, s_frame = x.stride()
    columns = x.as_strided(
        (batch, channels, taps, frames),
        (s_batch, s_channel, dilation * s_frame, s_frame),
        x.storage_offset(),
    ).reshape(batch, channels * taps, frames)
    y = torch.matmul(weight.reshape(out_channels, channels * taps), columns)
    return y if bias is None else y + bias.unsqueeze(-1)


_CONV1D_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONV1D_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}


def _single(value: object) -> object:
    return value[0] if isinstance(value, (tuple, list)) and len(value) == 1 else value


def _conv1d_args(node: torch.fx.Node) -> dict[str, object] | None:
    """The arguments of an ``F.conv1d`` node by name, or None for another node."""
    if node.op != "call_function" or node.target is not F.conv1d:
        return None
    return {**_CONV1D_DEFAULTS, **dict(zip(_CONV1D_ARGS, node.args, strict=False)), **node.kwargs}


def _rewritable(args: dict[str, object]) -> bool:
    return (
        _single(args["stride"]) == 1
        and _single(args["padding"]) == 0
        and args["groups"] == 1
        and isinstance(_single(args["dilation"]), int)
        and _single(args["dilation"]) > 1
    )


def dilated_conv_as_matmul(gm: torch.fx.GraphModule) -> bool:
    """Rewrite dilated 1-d convolutions (no padding, stride 1, one group) as
    :func:`strided_conv1d`: a strided view of the input and one matrix product."""
    changed = False
    for node in list(gm.graph.nodes):
        args = _conv1d_args(node)
        if args is None or not _rewritable(args):
            continue
        inputs = (args["input"], args["weight"], args["bias"], _single(args["dilation"]))
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(strided_conv1d, inputs)
        node.replace_all_uses_with(copy_meta(node, new))
        gm.graph.erase_node(node)
        changed = True
    return changed
