"""1-d convolutions in the form that measures fastest for their shape.

Three forms compute a small 1-d convolution (no padding, stride 1, one group), and which is
fastest depends on the shape and the machine:

- torch's convolution (``im2col`` and a matrix product; ``slow_conv_dilated2d`` when dilated);
- columns (:func:`strided_conv1d`): the input viewed as ``[batch, channels * taps, frames]``
  (a copy, once reshaped) and one matrix product;
- tap sums (:func:`tap_sum_conv1d`): one matrix product of the taps-major weight with the input
  and the sum of the taps' shifted rows, read through a strided view (no copy at all).

Measured here (one thread): drive's 8-to-1, 16-tap tone filter at block 2048 took 49 us as a
convolution, 40 us as columns, 18 us as tap sums; at block 256, 9.4, 13.3 and 11.7 us. Its
8-tap filter with dilation 128: 80, 25 and 15 us at 2048; 25, 12 and 12 us at 256. So the pass
times the forms on each convolution's shapes when it runs (off the audio thread, once per shape
in a process) and rewrites a convolution only into a form at least 10 % faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.fx
import torch.nn.functional as F

from .nodes import attribute, copy_meta


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


def tap_sum_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int
) -> torch.Tensor:
    """``F.conv1d(x, weight, bias, dilation=dilation)`` (no padding, stride 1, one group) as
    ``rows = weight[taps * out, in] @ x``, then ``y[o, t] = sum_k rows[k, o, t + k * dilation]``:
    the shifted rows are one strided view of ``rows``, so nothing is copied but the weight."""
    batch, _, length = x.shape
    out_channels, channels, taps = weight.shape
    frames = length - dilation * (taps - 1)
    taps_major = weight.permute(2, 0, 1).reshape(taps * out_channels, channels).contiguous()
    rows = torch.matmul(taps_major, x)  # [batch, taps * out, length], contiguous
    shifted = rows.as_strided(
        (batch, taps, out_channels, frames),
        (taps * out_channels * length, out_channels * length + dilation, length, 1),
    )
    y = shifted.sum(1)
    return y if bias is None else y.add_(bias.unsqueeze(-1))


#: The rewrites, by the name the measurements print.
FORMS: dict[str, Callable[..., torch.Tensor]] = {
    "columns": strided_conv1d,
    "tap sums": tap_sum_conv1d,
}
_CHOSEN: dict[tuple, Callable[..., torch.Tensor] | None] = {}


def fastest_form(
    x_shape: tuple[int, ...], weight_shape: tuple[int, ...], bias: bool, dilation: int
) -> Callable[..., torch.Tensor] | None:
    """The rewrite at least 10 % faster than torch's convolution for these shapes (timed on
    random tensors, the best of 15 calls each), or None: keep the convolution. Remembered
    per shape, so that a rebuild does not time again."""
    key = (x_shape, weight_shape, bias, dilation, torch.get_num_threads())
    if key not in _CHOSEN:
        random = torch.Generator().manual_seed(0)  # the caller's global stream stays untouched
        x = torch.randn(x_shape, generator=random)
        weight = torch.randn(weight_shape, generator=random)
        b = torch.randn(weight_shape[0], generator=random) if bias else None

        def conv(x, weight, b, dilation):
            return F.conv1d(x, weight, b, dilation=dilation)

        with torch.inference_mode():
            times = {f: _best_time(f, (x, weight, b, dilation)) for f in (conv, *FORMS.values())}
        best = min(times, key=times.get)
        _CHOSEN[key] = best if best is not conv and times[best] < 0.9 * times[conv] else None
    return _CHOSEN[key]


def form_plan() -> list[list]:
    """The forms chosen so far in this process, as JSON-able ``[key, form name or None]``
    pairs: a batch render hands them to every worker (and records them), so that each file is
    computed the same way whichever process renders it."""
    names = {form: name for name, form in FORMS.items()}
    return [
        [[list(x_shape), list(weight_shape), *rest], names.get(form)]
        for (x_shape, weight_shape, *rest), form in _CHOSEN.items()
    ]


def use_form_plan(plan: list[list]) -> None:
    """Adopt another process's choices (:func:`form_plan`) instead of timing those shapes."""
    for key, name in plan:
        x_shape, weight_shape, bias, dilation, threads = key
        _CHOSEN[(tuple(x_shape), tuple(weight_shape), bias, dilation, threads)] = (
            None if name is None else FORMS[name]
        )


def _best_time(fn: Callable[..., torch.Tensor], args: tuple, calls: int = 15) -> float:
    for _ in range(3):
        fn(*args)
    best = float("inf")
    for _ in range(calls):
        started = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - started)
    return best


_CONV1D_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONV1D_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}


def _single(value: object) -> object:
    return value[0] if isinstance(value, (tuple, list)) and len(value) == 1 else value


def _conv1d_args(node: torch.fx.Node) -> dict[str, object] | None:
    """The arguments of an ``F.conv1d`` node (or ``aten::conv1d``, from a converted TorchScript
    method) by name, or None for another node."""
    if node.op != "call_function" or node.target not in (F.conv1d, torch.ops.aten.conv1d.default):
        return None
    return {**_CONV1D_DEFAULTS, **dict(zip(_CONV1D_ARGS, node.args, strict=False)), **node.kwargs}


def _shapes(gm: torch.fx.GraphModule, args: dict[str, object]) -> tuple | None:
    """The input and weight shapes of a rewritable convolution (a CPU float32 one, no padding,
    stride 1, one group, more than one tap), or None."""
    if not (
        _single(args["stride"]) == 1
        and _single(args["padding"]) == 0
        and args["groups"] == 1
        and isinstance(_single(args["dilation"]), int)
    ):
        return None
    x, weight = args["input"], args["weight"]
    if not isinstance(x, torch.fx.Node) or "shape" not in x.meta:
        return None
    if not isinstance(weight, torch.fx.Node) or weight.op != "get_attr":
        return None
    tensor = attribute(gm, weight.target)
    if (
        not isinstance(tensor, torch.Tensor)
        or tensor.device.type != "cpu"
        or tensor.dtype != torch.float32
        or tensor.dim() != 3
        or tensor.shape[-1] < 2
        or len(x.meta["shape"]) != 3
    ):
        return None
    return tuple(x.meta["shape"]), tuple(tensor.shape)


def conv1d_forms(gm: torch.fx.GraphModule) -> bool:
    """Rewrite 1-d convolutions of more than one tap (no padding, stride 1, one group) into
    :func:`strided_conv1d` or :func:`tap_sum_conv1d` where one measures faster for their
    shapes (:func:`fastest_form`)."""
    changed = False
    for node in list(gm.graph.nodes):
        args = _conv1d_args(node)
        shapes = _shapes(gm, args) if args is not None else None
        if shapes is None:
            continue
        dilation = _single(args["dilation"])
        form = fastest_form(*shapes, args["bias"] is not None, dilation)
        if form is None:
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(
                form, (args["input"], args["weight"], args["bias"], dilation)
            )
        node.replace_all_uses_with(copy_meta(node, new))
        gm.graph.erase_node(node)
        changed = True
    return changed
