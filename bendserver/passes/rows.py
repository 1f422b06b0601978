"""Convolutions over storage the graph owns, as one copy and one matrix product into storage
allocated once.

A cached convolution of a small block reads a concatenation that the passes write into storage
of their own (:mod:`.streaming`): its input is the same tensor at every block. Computed as rows
(the input viewed frames-major, ``[frames, channels * taps]``, times the weight as stored), the
window view of that input is then fixed too, and so are the rows' storage and the product's:
the convolution is one copy into the rows and one product written in place, where torch's call
(or the rows form called as a function) makes ten to fifteen operator calls, most of them
allocating (views, reshapes, an im2col or a contiguous copy). The result is read through a
fixed view of the product, ``[batch, out, frames]`` (channels-major, as the graph expects), by
consumers that never keep it past the block.

Only convolutions giving at most :data:`FRAMES` frames are rewritten (a rule of the shape: the
same on every machine), the small blocks whose cost is calls, not arithmetic.
"""

from __future__ import annotations

import torch
import torch.fx
import torch.nn.functional as F

from .convolution import row_conv1d, strided_conv1d, tap_sum_conv1d
from .nodes import add_buffer, attribute, copy_meta, leaves, written_roots
from .views import fixed

#: The most output frames a convolution is rewritten for.
FRAMES = 16

_CONV1D = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_FORM = ("input", "weight", "bias", "dilation", "stride")
_SIGNATURES = {
    F.conv1d: _CONV1D,
    torch.conv1d: _CONV1D,
    torch.ops.aten.conv1d.default: _CONV1D,
    row_conv1d: _FORM,
    strided_conv1d: _FORM,
    tap_sum_conv1d: _FORM,
}


def _arguments(node: torch.fx.Node) -> dict[str, object] | None:
    """A convolution node's arguments by name (one-element lists as their element)."""
    if node.op != "call_function" or node.target not in _SIGNATURES:
        return None
    args = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}
    args |= dict(zip(_SIGNATURES[node.target], node.args, strict=False)) | dict(node.kwargs)
    return {k: v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v for k, v in args.items()}


def fixed_rows(gm: torch.fx.GraphModule) -> bool:
    """Convolutions (no padding, one group, at most :data:`FRAMES` frames) reading storage the
    graph owns: one copy into fixed rows and one matrix product into fixed storage."""
    graph = gm.graph
    changed = False
    written = written_roots(graph)
    for node in list(graph.nodes):
        args = _arguments(node)
        if args is None or args["padding"] != 0 or args["groups"] != 1:
            continue
        x, weight, bias = args["input"], args["weight"], args["bias"]
        stride, dilation = args["stride"], args["dilation"]
        source = fixed(gm, x, written)
        if (
            source is None
            or source.dim() != 3
            or not isinstance(weight, torch.fx.Node)
            or weight.op != "get_attr"
            or not isinstance(stride, int)
            or not isinstance(dilation, int)
            or leaves(node)
        ):
            continue
        tensor = attribute(gm, weight.target)
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 3 or not tensor.is_contiguous():
            continue
        batch, channels, length = source.shape
        out_channels, _, taps = tensor.shape
        frames = (length - dilation * (taps - 1) - 1) // stride + 1
        if not 0 < frames <= FRAMES or tensor.shape[1] != channels:
            continue
        s_batch, s_channel, s_frame = source.stride()
        window = source.as_strided(
            (batch, frames, channels, taps),
            (s_batch, stride * s_frame, s_channel, dilation * s_frame),
            source.storage_offset(),
        )
        like = {"dtype": source.dtype, "device": source.device}
        rows = torch.empty((batch * frames, channels * taps), **like)
        product = torch.empty((batch * frames, out_channels), **like)
        result = product.view(batch, frames, out_channels).transpose(1, 2)
        fixed_tensors = (window, rows.view(window.shape), rows, product, result)
        names = [add_buffer(gm, "_view_", t) for t in fixed_tensors]
        with graph.inserting_before(node):
            window_, rows4_, rows_, product_, result_ = (graph.get_attr(n) for n in names)
            graph.call_function(torch.Tensor.copy_, (rows4_, window_))
            flat = graph.call_method("view", (weight, out_channels, channels * taps))
            transposed = graph.call_method("t", (flat,))
            graph.call_function(torch.mm, (rows_, transposed), {"out": product_})
            if bias is not None:
                graph.call_method("add_", (product_, bias))
        node.replace_all_uses_with(copy_meta(node, result_))
        graph.erase_node(node)
        changed = True
    return changed
