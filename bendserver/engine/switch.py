"""A node of a rack swapped for another live, crossfaded between blocks.

The control side prepares the new node (loaded, traced, warmed up on the old node's recent input)
and what the rack becomes with it (its nodes, order, aligned inputs and latency: a
:class:`Layout`), then hands both over as a :class:`NodeSwap` (``Rack.swap``). The next block (a
block boundary) starts the crossfade: for ``fade`` frames both nodes run on the same input and
their outputs are mixed with curves prepared on the control side; then the rack takes the new
layout in a few reference writes, and the old node waits in ``Rack.retired`` for the control side
to free it. The audio side only calls the nodes, multiplies by the curves and writes references.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BendingError

if TYPE_CHECKING:
    from .node import Node
    from .wiring import Delay

#: Blocks of each node's input a rack keeps (a node loaded in its place warms up on them).
RECENT_BLOCKS = 4


def checked_fade(fade_ms: float) -> float:
    """A crossfade's length in ms: finite and >= 0 (0: the new node plays from the boundary)."""
    if not isinstance(fade_ms, int | float) or not math.isfinite(fade_ms) or fade_ms < 0:
        raise BendingError(f"a crossfade is a finite number of ms >= 0, got {fade_ms!r}")
    return float(fade_ms)


class RecentInput:
    """The last :data:`RECENT_BLOCKS` blocks a node was given (audio side: one copy a block)."""

    def __init__(self, channels: int, frames: int) -> None:
        self._blocks = np.zeros((RECENT_BLOCKS, channels, frames), dtype=np.float32)
        self.count = 0  #: blocks recorded so far

    def record(self, block: np.ndarray) -> None:
        if block.shape == self._blocks.shape[1:]:
            self._blocks[self.count % RECENT_BLOCKS] = block
            self.count += 1

    def blocks(self) -> list[np.ndarray]:
        """Copies of the recorded blocks, oldest first, silence before the first (control side;
        a block being written as it is read may be half new)."""
        count = self.count
        order = range(count - RECENT_BLOCKS, count)
        return [
            self._blocks[i % RECENT_BLOCKS].copy() if i >= 0 else np.zeros_like(self._blocks[0])
            for i in order
        ]


@dataclass
class Layout:
    """What a rack plays with: its nodes, edges, playing order, each target's aligned inputs,
    its latency, and each node's recent input."""

    nodes: dict[str, Node]
    edges: list[Any]
    order: list[str]
    inputs: dict[str, list[Any]]
    latency: int
    recent: dict[str, RecentInput]


class NodeSwap:
    """Node ``name`` of a rack replaced by ``node`` over ``frames`` frames of the node's output
    (equal-power curves for audio, two models' outputs being unrelated; linear for latents),
    then the rack plays ``layout``, each of its delay lines in ``carries`` taking the history
    of the playing line paired with it; ``starts``: what else plays from the crossfade's first
    block (the rack's modulators driving the new node), called there by the rack with its
    time."""

    def __init__(
        self,
        name: str,
        node: Node,
        layout: Layout,
        fade_ms: float,
        carries: Sequence[tuple[Delay, Delay]] = (),
        starts: Callable[[int], None] | None = None,
    ) -> None:
        self.name, self.node, self.layout, self.starts = name, node, layout, starts
        #: (a delay line of the layout, the playing line whose history it takes at the end)
        self.carries = list(carries)
        frames = round(checked_fade(fade_ms) * node.sample_rate / 1000) // node.spec.out_ratio
        per_block = node.out_frames
        length = max(1, math.ceil(frames / per_block)) * per_block
        ramp = np.clip((np.arange(length, dtype=np.float64) + 1) / max(frames, 1), 0.0, 1.0)
        if node.spec.out_ratio == 1:
            fade_in, fade_out = np.sin(0.5 * np.pi * ramp), np.cos(0.5 * np.pi * ramp)
        else:
            fade_in, fade_out = ramp, 1.0 - ramp
        self.fade_in = fade_in.astype(np.float32)
        self.fade_out = fade_out.astype(np.float32)
        self.position = 0

    @property
    def done(self) -> bool:
        return self.position >= len(self.fade_in)

    def play(self, old: Node, block: np.ndarray) -> np.ndarray:
        """One block of both nodes, mixed (audio side)."""
        start = self.position
        out = old.process(block)
        end = start + out.shape[-1]
        out = out * self.fade_out[start:end] + self.node.process(block) * self.fade_in[start:end]
        self.position = end
        return out
