"""Fixed views: slices of storage the graph owns, taken once when the graph is built.

A streaming layer of a TorchScript export reads its cache as ``cache[:batch]`` and hands the
tail of the concatenation back as ``cat[..., -pad:]``: two or three slicing calls per layer
and block (about 150 in a BRAVE export's block of 128) whose results are always the same
views of the same storage. Storage the graph writes in place (caches) and storage the passes
made (constants, preallocated outputs) is never swapped for other storage, so such a view can
be taken once and read as an attribute. Weights are not: a weight change swaps their storage.
"""

from __future__ import annotations

import torch
import torch.fx

from .nodes import add_buffer, attribute, is_view, mutates, written_roots

#: Attribute names the passes give storage they allocate (never swapped).
OWNED = ("_constant_", "_cat_storage_", "_view_")


def fixed(gm: torch.fx.GraphModule, node: object, written: set[str]) -> torch.Tensor | None:
    """The tensor ``node`` always is (the same object on every call) when its storage is never
    swapped: an attribute the graph writes into or one the passes made, or what an ``out=``
    call returns (its ``out``); else None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "get_attr":
        value = attribute(gm, node.target)
        owned = node.target in written or node.target.startswith(OWNED)
        return value if owned and isinstance(value, torch.Tensor) else None
    if node.op == "call_function" and "out" in node.kwargs:
        return fixed(gm, node.kwargs["out"], written)
    return None


def fixed_views(gm: torch.fx.GraphModule) -> bool:
    """Take views of storage that is never swapped (caches, preallocated outputs, constants)
    once, when the graph is built, and read them as attributes; a concatenation into such
    storage becomes a copy of each part into its view."""
    graph = gm.graph
    changed = _copied_parts(gm)
    written = written_roots(graph)
    for node in list(graph.nodes):
        if node.op not in ("call_function", "call_method") or not is_view(node) or mutates(node):
            continue
        source = fixed(gm, node.args[0] if node.args else None, written)
        rest = [*node.args[1:], *node.kwargs.values()]
        if source is None or any(isinstance(a, torch.fx.Node) for a in rest):
            continue
        view = _taken(node, source)
        if view is None:
            continue
        name = add_buffer(gm, "_view_", view)
        with graph.inserting_before(node):
            replacement = graph.get_attr(name)
        replacement.meta.update(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        written = written_roots(graph)  # a write through the view now names the view
        changed = True
    return changed


def _taken(node: torch.fx.Node, source: torch.Tensor) -> torch.Tensor | None:
    """``node``'s result for ``source``, where it is a view of ``source``'s storage."""
    args = (source, *node.args[1:])
    try:
        with torch.no_grad():
            if node.op == "call_method":
                view = getattr(source, node.target)(*args[1:], **node.kwargs)
            else:
                view = node.target(*args, **node.kwargs)
    except Exception:  # noqa: BLE001 - whatever it raises, the node stays as it was
        return None
    if not isinstance(view, torch.Tensor):
        return None
    same = view.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
    return view if same else None


def _copied_parts(gm: torch.fx.GraphModule) -> bool:
    """``torch.cat(parts, dim, out=storage)`` into storage the passes made, as one copy of
    each part into its fixed slice of the storage (``cat`` slices the storage anew for each
    part at every call)."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        out = node.kwargs.get("out") if node.op == "call_function" else None
        if node.target is not torch.cat or not isinstance(out, torch.fx.Node):
            continue
        storage = attribute(gm, out.target) if out.op == "get_attr" else None
        parts, dim = (*node.args, -1)[:2] if node.args else (node.kwargs.get("tensors"), -1)
        sizes = [_shape(gm, p) for p in parts] if isinstance(parts, (list, tuple)) else [None]
        if not isinstance(storage, torch.Tensor) or None in sizes or not isinstance(dim, int):
            continue
        with graph.inserting_before(node):
            start = 0
            for part, shape in zip(parts, sizes, strict=True):
                size = shape[dim]
                name = add_buffer(gm, "_view_", storage.narrow(dim, start, size))
                graph.call_function(torch.Tensor.copy_, (graph.get_attr(name), part))
                start += size
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        changed = True
    return changed


def _shape(gm: torch.fx.GraphModule, node: object) -> tuple[int, ...] | None:
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        value = attribute(gm, node.target)
        return tuple(value.shape) if isinstance(value, torch.Tensor) else None
    shape = node.meta.get("shape") if isinstance(node, torch.fx.Node) else None
    return tuple(shape) if shape is not None else None
