"""StreamEngine: one bended model method played block by block, a one-node rack.

The node (:mod:`.node`) is the model's traced graph with its bending state and the control
side's changes; the rack (:mod:`.rack`) is the block loop, the fuse, the stats. A
``StreamEngine`` is a rack of one node that answers the node's control methods itself
(``engine.set_param(...)`` is ``engine.node.set_param(...)``, as any rack of one node does)
and names a few of the node's attributes (``device``, ``gain``, ``timeline``...); anything else
of the node is ``engine.node``'s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..loader import LoadedModel
from ..presets.library import Preset, load_preset
from .commands import CommandQueue
from .cuda_graph import CudaGraphs
from .node import Node
from .rack import Rack
from .state import BendingState
from .timeline import Timeline


class StreamEngine(Rack):
    """Runs ``model.<method>`` on blocks of ``block`` audio frames (see :class:`Node` for the
    arguments but ``fuse`` and ``ceiling``, the rack's output fuse). A rack's ``preset`` gives
    the node the part saved under its name (a preset of other nodes is refused, naming them).

    ``process(block)`` takes and returns float32 arrays ``[channels, frames]``; the node's
    control methods (``set_param``, ``state``, ``model``, ``versions``, ...) are the engine's
    own, with the attributes named below; the rest of the node is :attr:`node`'s.
    """

    def __init__(
        self,
        model: str | Path | torch.nn.Module | LoadedModel,
        method: str = "forward",
        block: int | None = None,
        sample_rate: int | None = None,
        device: str = "cpu",
        preset: str | Path | Preset | None = None,
        fuse: bool = True,
        ceiling: float = 0.99,
        optimize: str = "passes",
        streams: int | None = None,
        cuda_graph: bool = True,
    ) -> None:
        chosen = load_preset(preset) if isinstance(preset, (str, Path)) else preset
        whole = chosen if chosen is not None and chosen.nodes else None  # a rack's preset
        node = Node(
            model, method, block, sample_rate, device, None if whole else chosen, optimize,
            streams, cuda_graph,
        )  # fmt: skip
        super().__init__({node.model.name: node}, None, fuse, ceiling)
        if whole is not None:  # its part for this one node, by the node's name, or refused
            self.load_parts(whole)
            self.apply_due()

    @property
    def node(self) -> Node:
        """The one node the engine plays (another once a swap replaced it)."""
        return self._first

    # What the node has and a rack of several nodes does not (each is the one node's).

    @property
    def device(self) -> torch.device:
        return self.node.device

    @property
    def runs_on(self) -> str:
        return self.node.runs_on

    @property
    def gain(self) -> float:
        """The node's gain as the control side last set it."""
        return self.node.gain

    @property
    def commands(self) -> CommandQueue:
        return self.node.commands

    @property
    def timeline(self) -> Timeline:
        return self.node.timeline

    def state_at(self, at: int | None) -> BendingState:
        return self.node.state_at(at)

    @property
    def folded_ops(self) -> list[str]:
        return self.node.folded_ops

    @property
    def compile_report(self) -> list[str]:
        return self.node.compile_report

    @property
    def cuda_graphs(self) -> CudaGraphs | None:
        return self.node.cuda_graphs
