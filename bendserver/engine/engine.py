"""StreamEngine: one bended model method played block by block, a one-node rack.

The node (:mod:`.node`) is the model's traced graph with its bending state and the control
side's changes; the rack (:mod:`.rack`) is the block loop, the fuse, the stats. A
``StreamEngine`` is a rack of one node that answers the node's control methods itself
(``engine.set_param(...)`` is ``engine.node.set_param(...)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..loader import LoadedModel
from ..presets.library import Preset, load_preset
from .node import Node
from .rack import Rack


class StreamEngine(Rack):
    """Runs ``model.<method>`` on blocks of ``block`` audio frames (see :class:`Node` for the
    arguments but ``fuse`` and ``ceiling``, the rack's output fuse). A rack's ``preset`` gives
    the node the part saved under its name (a preset of other nodes is refused, naming them).

    ``process(block)`` takes and returns float32 arrays ``[channels, frames]``; every control
    method and attribute of the node (``set_param``, ``state``, ``model``, ``versions``, ...)
    is the engine's own.
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

    def __getattr__(self, name: str) -> Any:
        """What the rack does not have is the node's (its control methods and attributes)."""
        if "nodes" not in self.__dict__:  # not set yet: no recursion while constructing
            raise AttributeError(name)
        return getattr(self.node, name)
