"""The streaming cache pattern with preallocated storage.

A cached convolution concatenates its cache with the block, convolves, and copies the tail back
into the cache: ``cat([cache, x]) ... cache.copy_(tail)``. The block shape is fixed, so the
concatenation can write into storage allocated once, when the graph is built: no fresh
allocation per block (``torch.cat(..., out=buffer)`` measured as fast as the allocating form).
"""

from __future__ import annotations

import torch
import torch.fx
import torch.nn.functional as F

from .convolution import folded_conv_transpose1d, row_conv1d, strided_conv1d, tap_sum_conv1d
from .grouped import grouped_conv1d
from .nodes import add_buffer, attribute, is_view, mutates

#: Functions that read their input and return a fresh tensor (never a view of it).
_FRESH = {
    F.conv1d,
    F.conv2d,
    F.conv_transpose1d,
    F.linear,
    torch.matmul,
    strided_conv1d,
    tap_sum_conv1d,
    row_conv1d,
    folded_conv_transpose1d,
    grouped_conv1d,
    torch.ops.aten.conv1d.default,
    torch.ops.aten.conv_transpose1d.default,
}
#: The concatenation, as traced and as a converted TorchScript method calls it.
_CATS = (torch.cat, torch.ops.aten.cat.default)


def _stays_inside(node: torch.fx.Node) -> bool:
    """True when ``node``'s value never leaves the block: every use reads it into a fresh
    tensor, is copied from, or is a view whose uses do the same."""
    for user in node.users:
        if _is_copy(user) and user.args[0] is not node:
            continue
        if user.op == "call_function" and user.target in _FRESH and user.args[0] is node:
            if node not in user.args[1:] and node not in user.kwargs.values():
                continue
        if is_view(user) and not mutates(user) and user.args[0] is node and _stays_inside(user):
            continue
        return False
    return True


def _is_copy(node: torch.fx.Node) -> bool:
    """``x.copy_(y)`` in any of its forms (a method, ``torch.Tensor.copy_``, ``aten.copy_``)."""
    if node.op == "call_method":
        return node.target == "copy_"
    name = getattr(node.target, "__name__", "")
    return node.op == "call_function" and name in ("copy_", "copy_.default")


def _cache_cat(node: torch.fx.Node) -> bool:
    """``torch.cat([cache, x], ...)`` (the cache an attribute or a view of one, as a
    TorchScript export slices it) with a known shape, not already written ``out=``."""
    if node.op != "call_function" or node.target not in _CATS or "out" in node.kwargs:
        return False
    parts = node.args[0] if node.args else node.kwargs.get("tensors")
    return (
        isinstance(parts, (list, tuple))
        and bool(parts)
        and _cache_root(parts[0]) is not None
        and "shape" in node.meta
        and "dtype" in node.meta
    )


def _cache_root(node: object) -> torch.fx.Node | None:
    """The attribute ``node`` reads, directly or through views, or None."""
    while isinstance(node, torch.fx.Node) and node.op != "get_attr" and is_view(node):
        node = node.args[0] if node.args else None
    return node if isinstance(node, torch.fx.Node) and node.op == "get_attr" else None


def preallocated_cache(gm: torch.fx.GraphModule) -> bool:
    """Concatenations of a cache with the block write into storage allocated once, where the
    result never leaves the block (read by convolutions, copied from)."""
    changed = False
    for node in list(gm.graph.nodes):
        if not _cache_cat(node) or not _stays_inside(node):
            continue
        cache = attribute(gm, _cache_root(node.args[0][0]).target)
        if not isinstance(cache, torch.Tensor):
            continue
        shape, dtype = tuple(node.meta["shape"]), node.meta["dtype"]
        name = add_buffer(gm, "_cat_storage_", torch.empty(shape, dtype=dtype, device=cache.device))
        with gm.graph.inserting_before(node):
            out = gm.graph.get_attr(name)
        node.target = torch.cat  # aten.cat.default has no out=
        node.kwargs = {**node.kwargs, "out": out}
        changed = True
    return changed
