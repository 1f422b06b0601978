"""1-d convolutions in the form that measures fastest for their shape.

Four forms compute a 1-d convolution (no padding, one group), and which is fastest depends on
the shape and the machine:

- torch's convolution (``im2col`` and a matrix product; ``slow_conv_dilated2d`` when dilated);
- columns (:func:`strided_conv1d`, stride 1): the input viewed as ``[batch, channels * taps,
  frames]`` (a copy, once reshaped) and one matrix product;
- tap sums (:func:`tap_sum_conv1d`, stride 1): one matrix product of the taps-major weight with
  the input and the sum of the taps' shifted rows, read through a strided view (no copy at all);
- rows (:func:`row_conv1d`, any stride, one tap too): the input viewed frames-major as
  ``[batch, frames, channels * taps]`` (a copy) times the weight as stored (``F.linear``).

Torch's convolution runs its matrix product with the weight on the side that BLAS repacks at
every call: on a layer of many channels and few frames (a RAVE encoder's last layers: 768
channels, 2 to 8 frames at block 2048) that costs 2 ms where ``F.linear`` reads the weight once
(0.2 ms), and its transposed convolution is worse (8.4 ms for 768 to 384 channels, 8 taps,
stride 4, on 2 frames). A transposed convolution (no padding, one group, no dilation) has one
other form, :func:`folded_conv_transpose1d`: one matrix product and the taps' overlap-add
(``F.fold``): 0.36 ms there.

Measured here (one thread): drive's 8-to-1, 16-tap tone filter at block 2048 took 49 us as a
convolution, 40 us as columns, 18 us as tap sums; at block 256, 9.4, 13.3 and 11.7 us. Its
8-tap filter with dilation 128: 80, 25 and 15 us at 2048; 25, 12 and 12 us at 256. So the pass
times the forms on each convolution's shapes (off the audio thread) and rewrites a convolution
only into a form at least 10 % faster.

The forms round differently (by about 1e-7), so a choice made by timing in each process would
make the same render write other bytes on a busy machine. A choice is made once per shape
(input, weight, bias, dilation, stride, torch threads) and machine (processor, torch, its CPU
kernels, the forms there are) and kept in the user's cache folder (:mod:`bendserver.cache`):
every later process, and every model with that shape, plays the same form. :func:`retune`
measures the choices again (``--retune``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from ..cache import CacheFile
from .nodes import attribute, copy_meta, single


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


def row_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int, stride: int = 1
) -> torch.Tensor:
    """``F.conv1d(x, weight, bias, stride, dilation=dilation)`` (no padding, one group) as
    ``rows[frames, in * taps] @ weight[out, in * taps]^T`` (``F.linear``: the weight read as
    stored), the rows a frames-major strided view of ``x`` (copied once reshaped)."""
    batch, channels, length = x.shape
    out_channels, _, taps = weight.shape
    frames = (length - dilation * (taps - 1) - 1) // stride + 1
    s_batch, s_channel, s_frame = x.stride()
    rows = x.as_strided(
        (batch, frames, channels, taps),
        (s_batch, stride * s_frame, s_channel, dilation * s_frame),
        x.storage_offset(),
    ).reshape(batch, frames, channels * taps)
    y = F.linear(rows, weight.reshape(out_channels, channels * taps), bias)
    return y.transpose(1, 2).contiguous()


def folded_conv_transpose1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: int
) -> torch.Tensor:
    """``F.conv_transpose1d(x, weight, bias, stride)`` (no padding, one group, no dilation) as
    ``x[frames, in] @ weight[in, out * taps]``, each frame's taps then added where they fall
    (``F.fold``: the overlap-add)."""
    batch, channels, frames = x.shape
    _, out_channels, taps = weight.shape
    length = (frames - 1) * stride + taps
    columns = torch.matmul(x.transpose(1, 2), weight.reshape(channels, out_channels * taps))
    y = F.fold(columns.transpose(1, 2), (1, length), (1, taps), stride=(1, stride))
    y = y.reshape(batch, out_channels, length)
    return y if bias is None else y + bias.unsqueeze(-1)


#: The rewrites of a convolution, by the name the measurements print; those in
#: :data:`STRIDED` take a stride after the dilation.
FORMS: dict[str, Callable[..., torch.Tensor]] = {
    "columns": strided_conv1d,
    "tap sums": tap_sum_conv1d,
    "rows": row_conv1d,
}
STRIDED = {row_conv1d}
#: The rewrites of a transposed convolution (``x, weight, bias, stride``).
TRANSPOSED_FORMS: dict[str, Callable[..., torch.Tensor]] = {"folded": folded_conv_transpose1d}
_CHOSEN: dict[tuple, Callable[..., torch.Tensor] | None] = {}
#: Choices stored before this time (``time.time()``) are measured again; None: kept.
_RETUNED_SINCE: float | None = None


def fastest_form(
    x_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    bias: bool,
    dilation: int,
    stride: int = 1,
    transposed: bool = False,
) -> Callable[..., torch.Tensor] | None:
    """The rewrite at least 10 % faster than torch's convolution (``transposed``: transposed
    convolution, dilation 1) for these shapes, or None: keep torch's. Chosen once per shape on
    this machine (:func:`_chosen`) and remembered in the process, so that a rebuild does not
    look again. Call the form with :func:`form_args`."""
    kind = () if (stride, transposed) == (1, False) else (stride, transposed)
    key = (x_shape, weight_shape, bias, dilation, torch.get_num_threads(), *kind)
    if key not in _CHOSEN:
        measure = functools.partial(
            _measured, x_shape, weight_shape, bias, dilation, stride, transposed
        )
        _CHOSEN[key] = _chosen(key, measure)
    return _CHOSEN[key]


def retune(since: float | None) -> None:
    """Measure again, as they are met, the choices stored before ``since`` (``time.time()``),
    keeping those stored since (by this run's other processes, which then agree); None: keep
    every stored choice."""
    global _RETUNED_SINCE
    _RETUNED_SINCE = since
    if since is not None:
        _CHOSEN.clear()


def _chosen(key: tuple, measure: Callable[[], Callable | None]) -> Callable | None:
    """The form stored for ``key`` on this machine, else the one ``measure`` finds, stored;
    where another process stored one meanwhile, that one (they agree)."""
    text = json.dumps(_listed(key))
    forms = FORMS | TRANSPOSED_FORMS

    def current(entry: Any) -> bool:
        """A well-formed entry made since the retuning began."""
        return (
            isinstance(entry, dict)
            and (entry.get("form") is None or entry.get("form") in forms)
            and isinstance(entry.get("decided"), (int, float))
            and (_RETUNED_SINCE is None or entry["decided"] >= _RETUNED_SINCE)
        )

    entry = _store().get(text)
    if not current(entry):
        form = measure()
        entry = {"form": _name(form), "decided": time.time()}
        entry = _store().settle(text, entry, current)
    return None if entry["form"] is None else forms[entry["form"]]


def _measured(
    x_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    bias: bool,
    dilation: int,
    stride: int,
    transposed: bool,
) -> Callable[..., torch.Tensor] | None:
    """The rewrite that times at least 10 % faster than torch's convolution here (on random
    tensors, the best of 15 calls each), or None."""
    random = torch.Generator().manual_seed(0)  # the caller's global stream stays untouched
    x = torch.randn(x_shape, generator=random)
    weight = torch.randn(weight_shape, generator=random)
    channels = weight_shape[1] if transposed else weight_shape[0]
    b = torch.randn(channels, generator=random) if bias else None
    if transposed:
        forms = list(TRANSPOSED_FORMS.values())
        torch_s = functools.partial(F.conv_transpose1d, stride=stride)
    else:
        one_tap = weight_shape[-1] == 1
        forms = [f for f in FORMS.values() if f in STRIDED or (stride == 1 and not one_tap)]
        torch_s = functools.partial(F.conv1d, stride=stride, dilation=dilation)
    with torch.inference_mode():
        times = {torch_s: _best_time(torch_s, (x, weight, b))}
        for form in forms:
            times[form] = _best_time(form, form_args(form, x, weight, b, dilation, stride))
    best = min(times, key=times.get)
    return best if best is not torch_s and times[best] < 0.9 * times[torch_s] else None


@functools.cache
def _store() -> CacheFile:
    """This machine's stored choices: a file of their own for each processor, torch build and
    set of forms (a home folder shared by several machines keeps each one's)."""
    header = {
        "machine": platform.machine(),
        "processor": _processor(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "forms": sorted(FORMS | TRANSPOSED_FORMS),
    }
    return CacheFile("convolution-forms", header)


def _processor() -> str:
    """The processor's model name (Linux: ``/proc/cpuinfo``; elsewhere what Python says)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("model name", "Model", "Hardware"):
                return value.strip()
    return platform.processor()


def _name(form: Callable | None) -> str | None:
    names = {form: name for name, form in (FORMS | TRANSPOSED_FORMS).items()}
    return names.get(form)


def _listed(key: tuple) -> list:
    """A choice's key as JSON lists it."""
    x_shape, weight_shape, *rest = key
    return [list(x_shape), list(weight_shape), *rest]


def form_args(
    form: Callable[..., torch.Tensor], x: Any, weight: Any, bias: Any, dilation: int, stride: int
) -> tuple:
    """The arguments ``form`` takes for a convolution of ``dilation`` and ``stride``."""
    if form in TRANSPOSED_FORMS.values():
        return (x, weight, bias, stride)
    return (x, weight, bias, dilation, stride) if stride != 1 else (x, weight, bias, dilation)


def form_plan() -> list[list]:
    """The forms chosen so far in this process, as JSON-able ``[key, form name or None]``
    pairs: a batch render hands them to every worker (and records them), so that each file is
    computed the same way whichever process (or machine) renders it."""
    return [[_listed(key), _name(form)] for key, form in _CHOSEN.items()]


def use_form_plan(plan: list[list]) -> None:
    """Adopt another process's choices (:func:`form_plan`) instead of looking those shapes up."""
    forms = FORMS | TRANSPOSED_FORMS
    for (x_shape, weight_shape, *rest), name in plan:
        _CHOSEN[(tuple(x_shape), tuple(weight_shape), *rest)] = (
            None if name is None else forms[name]
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
_TRANSPOSED_ARGS = (
    "input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"
)  # fmt: skip
_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "output_padding": 0, "dilation": 1}
_CONVOLUTIONS = {
    F.conv1d: _CONV1D_ARGS,
    torch.ops.aten.conv1d.default: _CONV1D_ARGS,
    F.conv_transpose1d: _TRANSPOSED_ARGS,
    torch.ops.aten.conv_transpose1d.default: _TRANSPOSED_ARGS,
}


def _conv1d_args(node: torch.fx.Node) -> dict[str, object] | None:
    """The arguments of an ``F.conv1d`` or ``F.conv_transpose1d`` node (or their ``aten`` ops,
    from a converted TorchScript method) by name, one-element lists as their element, or None
    for another node."""
    if node.op != "call_function" or node.target not in _CONVOLUTIONS:
        return None
    names = _CONVOLUTIONS[node.target]
    args = {**_DEFAULTS, "groups": 1, **dict(zip(names, node.args, strict=False)), **node.kwargs}
    args = {name: single(value) for name, value in args.items()}
    args["transposed"] = names is _TRANSPOSED_ARGS
    return args


def _shapes(gm: torch.fx.GraphModule, args: dict[str, object]) -> tuple | None:
    """The input and weight shapes of a rewritable convolution (a CPU float32 one, no padding,
    one group; transposed: no dilation either), or None."""
    if not (
        args["padding"] == 0
        and args["output_padding"] == 0
        and args["groups"] == 1
        and isinstance(args["stride"], int)
        and isinstance(args["dilation"], int)
        and (args["dilation"] == 1 or not args["transposed"])
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
        or len(x.meta["shape"]) != 3
    ):
        return None
    return tuple(x.meta["shape"]), tuple(tensor.shape)


def conv1d_forms(gm: torch.fx.GraphModule) -> bool:
    """Rewrite 1-d convolutions and transposed convolutions (no padding, one group) into the
    form that measures fastest for their shapes (:func:`fastest_form`), where one is faster
    than torch's."""
    changed = False
    for node in list(gm.graph.nodes):
        args = _conv1d_args(node)
        shapes = _shapes(gm, args) if args is not None else None
        if shapes is None:
            continue
        dilation, stride = args["dilation"], args["stride"]
        bias = args["bias"] is not None
        form = fastest_form(*shapes, bias, dilation, stride, args["transposed"])
        if form is None:
            continue
        with gm.graph.inserting_before(node):
            arguments = form_args(
                form, args["input"], args["weight"], args["bias"], dilation, stride
            )
            new = gm.graph.call_function(form, arguments)
        node.replace_all_uses_with(copy_meta(node, new))
        gm.graph.erase_node(node)
        changed = True
    return changed
