"""How a rack's nodes are joined: edges from ``in`` through nodes to ``out``, the delays that
align parallel branches, and the checks and order of a layout (control side, when a rack is
made or a node swapped)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import BendingError
from .node import Node

#: The rack's input and output, as ends of edges.
IN, OUT = "in", "out"


@dataclass(frozen=True)
class Edge:
    """``source``'s output into ``target``'s input (``in``/``out``: the rack's), times ``gain``."""

    source: str
    target: str
    gain: float = 1.0


class Delay:
    """A fixed delay of ``frames`` frames on blocks of ``[channels, block]`` (audio side: no
    allocation beyond the block it returns)."""

    def __init__(self, channels: int, frames: int, block: int) -> None:
        self.frames = frames
        self._line = np.zeros((channels, frames + block), dtype=np.float32)

    def process(self, x: np.ndarray) -> np.ndarray:
        line, frames = self._line, self.frames
        line[:, frames:] = x
        out = line[:, : x.shape[-1]].copy()
        line[:, :frames] = line[:, x.shape[-1] :]
        return out

    def reset(self) -> None:
        self._line.fill(0.0)

    def carry(self, other: Delay) -> None:
        """Take the newest history ``other`` holds (as much as this line delays by): a branch
        realigned to another delay goes on with what it had (audio side, no allocation)."""
        count = min(self.frames, other.frames)
        if count and self._line.shape[0] == other._line.shape[0]:
            self._line[:, self.frames - count : self.frames] = other._line[
                :, other.frames - count : other.frames
            ]


@dataclass
class Input:
    """One edge as its target reads it: from which output, delayed, scaled."""

    source: str
    gain: float
    delay: Delay | None


def edges_into(edges: Sequence[Edge], target: str) -> list[Edge]:
    return [edge for edge in edges if edge.target == target]


def fed_by_in(edges: Sequence[Edge]) -> list[str]:
    """The nodes the rack's input feeds."""
    return [edge.target for edge in edges if edge.source == IN and edge.target != OUT]


def carried_by(nodes: Mapping[str, Node], edges: Sequence[Edge], source: str) -> tuple[int, int]:
    """What ``source``'s output carries: (channels per stream, audio samples per frame)."""
    if source == IN:
        first = nodes[fed_by_in(edges)[0]]
        return first.spec.in_channels, first.spec.in_ratio
    spec = nodes[source].spec
    return spec.out_channels, spec.out_ratio


def check_edges(nodes: Mapping[str, Node], edges: Sequence[Edge]) -> None:
    """Every edge joins outputs and inputs of the same channels, rate, block and sample rate:
    refused here, naming the edge, before anything plays."""
    first = next(iter(nodes.values()))
    for name, node in nodes.items():
        if (node.block, node.sample_rate, node.streams) != (
            first.block,
            first.sample_rate,
            first.streams,
        ):
            raise BendingError(
                f"rack node '{name}' plays blocks of {node.block} at {node.sample_rate} Hz, "
                f"{node.streams} stream(s), and the first node {first.block} at "
                f"{first.sample_rate} Hz, {first.streams}: give the rack one block and rate"
            )
    if not fed_by_in(edges):
        raise BendingError("no edge from 'in' into a node: the rack's input goes nowhere")
    for edge in edges:
        if edge.target == IN or edge.source == OUT:
            raise BendingError(
                f"edge {edge.source} -> {edge.target}: 'in' only feeds, 'out' only takes"
            )
        carried = carried_by(nodes, edges, edge.source)
        if edge.target == OUT:
            into_out = {carried_by(nodes, edges, e.source) for e in edges_into(edges, OUT)}
            wanted = carried if len(into_out) == 1 else None
        else:
            spec = nodes[edge.target].spec
            wanted = (spec.in_channels, spec.in_ratio)
        if carried != wanted:
            raise BendingError(
                f"edge {edge.source} -> {edge.target}: {edge.source} gives "
                f"{carrying(carried)} and {edge.target} takes "
                f"{carrying(wanted) if wanted else 'another signal from its other edges'}: "
                "join outputs to inputs of the same channels and rate (an encode's latent "
                "into a decode, audio into audio)"
            )


def node_plays(node: Node) -> str:
    spec = node.spec
    return (
        f"{carrying((spec.in_channels, spec.in_ratio))} in, "
        f"{carrying((spec.out_channels, spec.out_ratio))} out, blocks of {node.block} at "
        f"{node.sample_rate} Hz, {node.streams} stream(s)"
    )


def carrying(carried: tuple[int, int]) -> str:
    channels, ratio = carried
    rate = "audio" if ratio == 1 else f"frames at 1/{ratio} of the audio rate"
    return f"{channels} channel(s) of {rate}"


def in_order(names: list[str], edges: Sequence[Edge]) -> list[str]:
    """The nodes in an order where each comes after every node feeding it; refuses unknown
    names, cycles, and nodes that nothing feeds or whose output goes nowhere."""
    known = {IN, OUT, *names}
    for edge in edges:
        for end in (edge.source, edge.target):
            if end not in known:
                raise BendingError(
                    f"edge {edge.source} -> {edge.target}: no node '{end}' (nodes: "
                    f"{', '.join(names)}; 'in' and 'out' are the rack's input and output)"
                )
    for name in [*names, OUT]:
        if not any(edge.target == name for edge in edges):
            raise BendingError(f"nothing feeds '{name}': add an edge into it")
    for name in names:
        if not any(edge.source == name for edge in edges):
            raise BendingError(f"the output of '{name}' goes nowhere: add an edge from it")
    order: list[str] = []
    placed = {IN}
    while len(order) < len(names):
        ready = [
            name
            for name in names
            if name not in placed
            and all(edge.source in placed for edge in edges if edge.target == name)
        ]
        if not ready:
            left = [name for name in names if name not in placed]
            raise BendingError(
                f"the edges make a loop through {', '.join(left)}: a rack is "
                "played in one pass, with no feedback"
            )
        order.extend(ready)
        placed.update(ready)
    return order
