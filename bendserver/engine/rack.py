"""Rack: named nodes joined by edges, played together: one block loop, one fuse, one set of stats.

Edges run from ``in`` (the rack's input) through nodes to ``out`` (its output); without edges the
nodes form a chain in their order. A node (or ``out``) fed by several edges gets their sum, each
edge scaled by its gain and delayed so that every branch arrives as late as the latest one (the
nodes' measured latencies): parallel branches stay aligned to the sample. What an edge carries
(channels, audio or latent frames) is checked when the rack is made. Each node keeps its own
bending state and changes (:class:`~bendserver.engine.node.Node`); the rack owns what the nodes
share: the block loop and its time, its output stage (gain, mute, bypass: :mod:`.output`) and
the fuse, the meter's tap, the stats and failures, and the latency (the longest path's sum).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BendingError
from ..loader import MethodSpec
from .building import checked_streams
from .fuse import OutputFuse
from .node import Node
from .output import RackOutput
from .rack_control import RackControl
from .rack_runner import RackRunner
from .stats import EngineStats
from .switch import Layout, NodeSwap, RecentInput
from .tap import BlockTap
from .target import RackTarget
from .wiring import (
    IN,
    OUT,
    Delay,
    Edge,
    Input,
    carried_by,
    check_edges,
    edges_into,
    in_order,
)


class Rack(RackTarget, RackControl, RackRunner):
    """Plays named ``nodes`` joined by ``edges`` (None: a chain in the nodes' order) on blocks
    of ``[channels, frames]`` float32 audio.

    The output fuse (``fuse``, limiting towards ``ceiling``) works on audio outputs only
    (latent frames are not limited nor DC-blocked).

    Made of its sides as a node is: :class:`RackRunner` (the audio side) and
    :class:`RackControl` (swaps, held changes, reports); it is a controller's target through
    :class:`~bendserver.engine.target.RackTarget` (its one node's); this class lays the nodes
    out and says what the rack plays.
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        edges: Sequence[Edge] | None = None,
        fuse: bool = True,
        ceiling: float = 0.99,
    ) -> None:
        if not nodes:
            raise BendingError("a rack plays at least one node")
        if edges is None:
            ends = [IN, *nodes, OUT]
            edges = [Edge(a, b) for a, b in zip(ends, ends[1:], strict=False)]
        self.stats = EngineStats()
        self._take(self._layout(dict(nodes), list(edges)))
        for node in self.nodes.values():
            node.stats = self.stats
            node.on_reset = self._reset_fuse
        #: Copies of each block in and out for a meter (None: no copies; see ``engine.tap``).
        self.tap: BlockTap | None = None
        #: Copies of the frames of nodes giving frames, by node (see :mod:`.frames`).
        self.frame_taps: dict[str, Any] = {}
        self.fuse = (
            OutputFuse(self.out_channels, self.sample_rate, ceiling)
            if fuse and self.spec.out_ratio == 1
            else None
        )
        #: The rack's own gain, mute and bypass, before the fuse (see :mod:`.output`).
        self.output = RackOutput(self.out_frames)
        self.time = 0
        self._budget = self.block / self.sample_rate
        #: Nodes that played and were replaced by :meth:`swap`, for the control side to free.
        self.retired: collections.deque[Node] = collections.deque()
        self.swaps = 0  #: node swaps finished
        #: The rack time (samples) of the block the last swap's crossfade started at.
        self.swapped_at: int | None = None
        self._incoming: NodeSwap | None = None
        self._fading: NodeSwap | None = None
        #: The rack's modulators (:mod:`bendserver.modulation`; None: none were added).
        self.modulation: Any = None

    def _layout(self, nodes: dict[str, Node], edges: list[Edge]) -> Layout:
        """What the rack plays with ``nodes`` joined by ``edges``: checked, ordered, each
        target's inputs with the delays that align its branches, the latency at each node's
        output (the longest path to it). Nothing of the rack changes (control side)."""
        order = in_order(list(nodes), edges)
        check_edges(nodes, edges)
        first = next(iter(nodes.values()))
        arrival: dict[str, int] = {IN: 0}
        inputs: dict[str, list[Input]] = {}
        for target in [*order, OUT]:
            into = edges_into(edges, target)
            latest = max(arrival[edge.source] for edge in into)
            channels, ratio = carried_by(nodes, edges, into[0].source)
            inputs[target] = []
            for edge in into:
                lag = latest - arrival[edge.source]
                if lag % ratio:
                    raise BendingError(
                        f"the branches into '{target}' differ by {lag} samples, not a whole "
                        f"number of its frames ({ratio} samples each): they cannot be aligned"
                    )
                delay = (
                    Delay(channels * first.streams, lag // ratio, first.block // ratio)
                    if lag
                    else None
                )
                inputs[target].append(Input(edge.source, float(edge.gain), delay))
            if target != OUT:
                arrival[target] = latest + nodes[target].latency
        latency = max(arrival[edge.source] for edge in edges_into(edges, OUT))
        recent = {
            name: RecentInput(node.in_channels, node.in_frames) for name, node in nodes.items()
        }
        return Layout(nodes, edges, order, inputs, latency, recent)

    def _take(self, layout: Layout) -> None:
        """Play ``layout`` from now on: reference writes (on the audio side, at a swap's end)."""
        self.nodes, self.edges, self.order = layout.nodes, layout.edges, layout.order
        self._inputs, self.recent = layout.inputs, layout.recent
        #: Samples from a sample in to its effect out: the sum along the longest path.
        self.latency = layout.latency

    def inputs(self, target: str) -> list[Input]:
        """What ``target`` (a node or ``out``) sums, edge by edge: its source, gain and delay
        line (None: not delayed), the branches aligned."""
        return list(self._inputs[target])

    # -- what the rack plays -------------------------------------------------------------------

    @property
    def names(self) -> str:
        """The nodes' names in playing order, as ``/list nodes`` gives them and messages say."""
        return ", ".join(self.order)

    @property
    def _first(self) -> Node:
        return next(iter(self.nodes.values()))

    @property
    def block(self) -> int:
        return self._first.block

    @property
    def sample_rate(self) -> int:
        return self._first.sample_rate

    @property
    def spec(self) -> MethodSpec:
        """Channels and ratios of the rack as one method: what ``in`` feeds, what ``out`` gets."""
        in_channels, in_ratio = carried_by(self.nodes, self.edges, IN)
        last = edges_into(self.edges, OUT)[0].source
        out_channels, out_ratio = carried_by(self.nodes, self.edges, last)
        return MethodSpec(in_channels, in_ratio, out_channels, out_ratio)

    @property
    def method(self) -> str:
        """The nodes' methods, in order (one node: its method)."""
        if len(self.nodes) == 1:
            return self._first.method
        return " -> ".join(f"{name} ({self.nodes[name].method})" for name in self.order)

    @property
    def in_channels(self) -> int:
        return self.spec.in_channels * self.streams

    @property
    def in_frames(self) -> int:
        return self.block // self.spec.in_ratio

    @property
    def out_channels(self) -> int:
        return self.spec.out_channels * self.streams

    @property
    def out_frames(self) -> int:
        return self.block // self.spec.out_ratio

    @property
    def streams(self) -> int:
        return self._first.streams

    @property
    def adapts(self) -> bool:
        """Made without ``streams``: the batch follows the channels ``engine(audio, sr)`` gets."""
        return all(node.adapts for node in self.nodes.values())

    def samples(self, seconds: float) -> int:
        return int(round(seconds * self.sample_rate))

    def set_streams(self, streams: int) -> None:
        """Play ``streams`` streams from the next block on (see :meth:`Node.set_streams`);
        another count than now starts from a clear streaming state and fuse."""
        streams = checked_streams(streams)
        if streams == self.streams:
            return
        self.check_idle()
        done: list[tuple[Node, int]] = []
        try:
            for node in self.nodes.values():
                before = node.streams
                node.set_streams(streams)
                done.append((node, before))
        except BaseException:
            for node, before in reversed(done):  # what was rebuilt plays what it did
                node.set_streams(before)
            raise
        self._take(self._layout(self.nodes, self.edges))
        if self.fuse is not None:
            self.fuse = OutputFuse(self.out_channels, self.sample_rate, self.fuse.ceiling)
