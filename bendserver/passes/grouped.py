"""Grouped 1-d convolutions on a few frames as one batched matrix product.

Torch runs a grouped convolution (``groups > 1``) through oneDNN, which reorders the whole
weight into its blocked layout at every call: on a small block that reorder is the call. A
BRAVE export's last encoder layer (512 channels in two groups, 5 taps) on the one frame a block
of 128 gives it took 0.86 to 1.0 ms that way, and 0.29 to 0.37 ms as a batched matrix product
of the frames' rows with the weight as stored (measured here, one thread, the weights read
from memory as a block reads them). At 16 frames the two are even, and from about a hundred on
torch's is faster, so only convolutions giving at most :data:`FRAMES` frames are rewritten: a
rule of the shape, the same on every machine and run.
"""

from __future__ import annotations

import torch
import torch.fx

from .nodes import attribute, copy_meta, single

#: The most output frames a grouped convolution is rewritten for.
FRAMES = 8

_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONVOLUTIONS = (torch.conv1d, torch.nn.functional.conv1d, torch.ops.aten.conv1d.default)


def grouped_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    dilation: int,
    groups: int,
) -> torch.Tensor:
    """``F.conv1d(x, weight, bias, stride, 0, dilation, groups)`` as ``rows @ weight^T`` per
    group: the rows a frames-major strided view of ``x`` (copied once reshaped), the weight
    read as stored."""
    batch, channels, length = x.shape
    out_channels, group_channels, taps = weight.shape
    frames = (length - dilation * (taps - 1) - 1) // stride + 1
    s_batch, s_channel, s_frame = x.stride()
    rows = x.as_strided(
        (batch, groups, frames, group_channels, taps),
        (s_batch, group_channels * s_channel, stride * s_frame, s_channel, dilation * s_frame),
        x.storage_offset(),
    ).reshape(batch, groups, frames, group_channels * taps)
    per_group = weight.reshape(groups, out_channels // groups, group_channels * taps)
    y = torch.matmul(rows, per_group.transpose(1, 2))  # [batch, groups, frames, out / groups]
    y = y.transpose(2, 3).reshape(batch, out_channels, frames)
    return y if bias is None else y + bias.unsqueeze(-1)


def grouped_convolutions(gm: torch.fx.GraphModule) -> bool:
    """Rewrite grouped 1-d convolutions (no padding) giving at most :data:`FRAMES` frames
    as batched matrix products (:func:`grouped_conv1d`)."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _CONVOLUTIONS:
            continue
        args = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}
        args |= dict(zip(_ARGS, node.args, strict=False)) | node.kwargs
        args = {name: single(value) for name, value in args.items()}
        x, weight, groups = args["input"], args["weight"], args["groups"]
        stride, dilation = args["stride"], args["dilation"]
        if not (
            isinstance(groups, int)
            and groups > 1
            and args["padding"] == 0
            and isinstance(stride, int)
            and isinstance(dilation, int)
            and isinstance(x, torch.fx.Node)
            and len(x.meta.get("shape", ())) == 3
            and isinstance(weight, torch.fx.Node)
            and weight.op == "get_attr"
        ):
            continue
        tensor = attribute(gm, weight.target)
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 3 or tensor.shape[1] == 1:
            continue  # depthwise: as many products as channels, torch's is better
        length, taps = x.meta["shape"][-1], tensor.shape[-1]
        if (length - dilation * (taps - 1) - 1) // stride + 1 > FRAMES:
            continue
        with gm.graph.inserting_before(node):
            arguments = (x, weight, args["bias"], stride, dilation, groups)
            new = gm.graph.call_function(grouped_conv1d, arguments)
        node.replace_all_uses_with(copy_meta(node, new))
        gm.graph.erase_node(node)
        changed = True
    return changed
