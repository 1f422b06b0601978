"""Calls of a graph made while it is built (to time it, to see its tensors' layouts) leave
nothing behind: what they write and draw is put back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

from ..bending.base import forward_state


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
