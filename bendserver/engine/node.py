"""Node: one model method's bended graph, run one block at a time, changed between blocks.

A node traces its model's method once for its fixed block shape and calls the bended graph
module directly. What the control side may change is one immutable :class:`BendingState`;
control methods (``set_param``, ``add_op``, ``set_interpolation``, ...) may be called from any
thread: each is a change from the pending state (what plays once every submitted change has
applied) to the next, prepared on the calling thread (weight tensors, a rebuilt graph) and
applied by :meth:`Node.process` at the start of the next block, or of the first block starting
at or after ``at`` (in samples). The audio side only applies: it swaps prepared tensors in,
writes scalars, and hands what it replaced back to the control side to be freed; it never logs.
A :class:`~bendserver.engine.rack.Rack` plays nodes together (fuse, stats, the block loop).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx

from ..bending.base import BendingOp
from ..errors import BendingError
from ..loader import LoadedModel, load_model, resolve_device
from ..passes import OPTIMIZE_MODES
from ..presets.library import Preset
from .bends import Bends
from .building import NodeBuilder, checked_streams
from .changes import NodeControl
from .commands import CommandQueue, Ramp
from .cuda_graph import CudaGraphs
from .runner import NodeRunner
from .state import BendingState
from .stats import EngineStats
from .timeline import Timeline
from .transfer import BlockTransfer

log = logging.getLogger("bendserver.engine")


class Node(NodeControl, NodeRunner, NodeBuilder):
    """Runs ``model.<method>`` on blocks of ``block`` audio frames, with its own bending state.

    ``process(block)`` takes and returns float32 arrays ``[channels, frames]``. For methods with
    other rates (``encode``: audio in, latent out), frames are scaled by the method's ratios.
    ``streams`` runs that many independent streams at once (a batch dimension through one graph
    call, each with its own streaming state, the bending shared): the channels of a block are
    ``streams`` times the method's, stream after stream (a mono model with ``streams=2`` plays
    stereo). Made without ``streams``, the engine starts with one and ``engine(audio,
    sample_rate)`` (or :meth:`set_streams`) rebuilds the batch for the channels it is given;
    ``streams=`` fixes the count, as a live engine needs before its first block. Torch's thread
    count is the caller's: live and offline commands set one thread.

    On a CUDA ``device`` (``cuda``, ``cuda:N``) blocks go through pinned buffers on the engine's
    own stream and, with ``cuda_graph`` (the default), the bended graph is captured as a CUDA
    graph and replayed per block; changes then write into the captured tensors (see
    docs/engine.md, "CUDA").

    The node is made of its three sides, each a class of its own: :class:`NodeBuilder`
    (building what plays), :class:`NodeRunner` (the audio side and its contract) and
    :class:`NodeControl` (the changes); this class holds the state they share and reads it.
    """

    def __init__(
        self,
        model: str | Path | torch.nn.Module | LoadedModel,
        method: str = "forward",
        block: int | None = None,
        sample_rate: int | None = None,
        device: str = "cpu",
        preset: str | Path | Preset | None = None,
        optimize: str = "passes",
        streams: int | None = None,
        cuda_graph: bool = True,
        stats: EngineStats | None = None,
    ) -> None:
        if optimize not in OPTIMIZE_MODES:
            raise BendingError(f"optimize is one of {', '.join(OPTIMIZE_MODES)}, not {optimize!r}")
        #: How built graphs are optimised: ``none``, ``passes``, ``compile`` (see
        #: :mod:`bendserver.passes`).
        self.optimize = optimize
        #: With ``compile``: for each graph built, what plays and why (measured figures).
        self.compile_report: list[str] = []
        self.device = resolve_device(device)
        if optimize == "compile" and self.device.type != "cpu":
            raise BendingError(
                "optimize='compile' is for the CPU: on CUDA the engine replays CUDA graphs "
                "(docs/engine.md); use optimize='passes'"
            )
        self.model = load_model(model, self.device)
        self.bended = self.model.bended
        self.method = method
        self.spec = self.model.method(method)
        self.block = int(self.model.block if block is None else block)
        self.sample_rate = int(self.model.sample_rate if sample_rate is None else sample_rate)
        self._on_cpu = self.device.type == "cpu"
        self._check_block()
        self.in_frames = self.block // self.spec.in_ratio
        self.out_frames = self.block // self.spec.out_ratio
        #: Made without ``streams``: the batch follows the channels ``engine(audio, sr)`` gets.
        self.adapts = streams is None
        self._set_channels(1 if streams is None else checked_streams(streams))
        #: Samples the node delays its input by: the model's, counted where the method gives
        #: audio (an ``encode``'s latent adds none, its ``decode`` counts the whole model's).
        self.latency = self.model.latency if self.spec.out_ratio == 1 else 0

        self._control = threading.RLock()
        self.commands = CommandQueue()
        self._slots = self.bended.weight_bank.slots
        #: Pinned buffers and the stream of a CUDA device (None on the CPU).
        self._transfer: BlockTransfer | None = None
        #: What captures the bended graph on a CUDA device (None: eager).
        self.cuda_graphs: CudaGraphs | None = None
        if not self._on_cpu:
            self._set_up_cuda(cuda_graph)
        #: Counters shared with the rack that plays the node (errors; blocks, for ``compile``).
        self.stats = EngineStats() if stats is None else stats
        #: This node's own compute time per block (written by the rack that plays it).
        self.compute = EngineStats()
        #: Called on the audio side after a requested reset (the rack clears its fuse).
        self.on_reset: Callable[[], None] | None = None
        self._trace()
        self._check_capturable()
        #: The tensor in each weight slot (audio side; reading ``slot.data`` would allocate).
        self._current = {name: slot.data for name, slot in self._slots.items()}
        self._bends = Bends(
            self.bended,
            method,
            self._set_live,
            self._optimized,
            self.cuda_graphs,
            fold=optimize != "none",
            attributes=self.model.attributes,
        )
        initial = BendingState(version=self.bended.weight_bank.default_name)
        self.timeline = Timeline(initial, self._bends, self.commands)
        self._ramps: dict[tuple[int, str], Ramp] = {}
        #: What plays now (written when a change applies): output gain, dry/wet mix, bypass.
        self.gain, self.mix, self.bypass = initial.gain, initial.mix, initial.bypass
        self._applied_gain, self._applied_mix = self.gain, self.mix
        #: Failures the audio thread met, for the control side to report (see ``failures``).
        self._failures: collections.deque[str] = collections.deque(maxlen=64)
        self._failed_kinds: set[str] = set()
        #: The sample time of the next block (advanced by ``process``).
        self.time = 0
        #: Changes due wait while set (the rack holds them to apply several nodes' at once).
        self.held = False
        #: The rack's modulators (:mod:`bendserver.modulation`), once it has some: around
        #: applying changes (and ramps), they put the parameters they drive back to their own
        #: values, and drive them again after.
        self.modulated: Any = None
        if preset is not None:
            self.load_preset(preset)
            self.apply_due()
        if self._transfer is not None:  # what was set up on other streams, done before a block
            torch.cuda.synchronize(self.device)

    # -- the control side: state -------------------------------------------------------------

    @property
    def state(self) -> BendingState:
        """The pending state: what plays once every submitted change has applied.
        ``/preset/save`` and ``bending_config`` read it."""
        return self.timeline.pending

    @property
    def applied_state(self) -> BendingState:
        """The state of the changes applied so far (what plays now; ``/get`` reads it)."""
        return self.timeline.applied

    def state_at(self, at: int | None) -> BendingState:
        """The state that plays from sample ``at`` on, given the changes submitted so far
        (None: the pending state)."""
        if at is None:
            return self.state
        with self._control:
            self.timeline.prune()
            state = self.timeline.base
            for entry in self.timeline.entries:
                if entry.at > at:
                    break
                state = entry.after
            return state

    @property
    def versions(self) -> list[str]:
        """The weight versions by name (see ``WeightBank.named_versions``)."""
        return self.bended.weight_bank.named_versions

    @property
    def ops(self) -> dict[str, BendingOp]:
        """The ops of the pending state by id (the objects the graph calls)."""
        return {op.op_id: self._bends.op(op.uid) for op in self.state.ops}

    def op(self, op_id: str) -> BendingOp:
        return self._bends.op(self.state.op(op_id).uid)

    def bends_activations(self, op_id: str) -> bool:
        """Whether op ``op_id`` of the pending state bends activations (its parameters are
        read as blocks run), not only weights."""
        return bool(self._bends.live[self.state.op(op_id).uid].activations)

    def bent_by(self, op_id: str) -> tuple[tuple[str, ...], bool]:
        """The activations op ``op_id`` of the pending state bends, and whether it bends
        weights too (directly or folded into a layer)."""
        live = self._bends.live[self.state.op(op_id).uid]
        return live.activations, bool(live.weights or live.folds)

    @property
    def folded_ops(self) -> list[str]:
        """The ops of the pending state that play folded into the weights of the layers
        reading their activations (``optimize="passes"``; docs/engine.md): no work per block."""
        folded = self._bends.folded(self.state)
        return [op.op_id for op in self.state.ops if op.uid in folded]

    def collect(self) -> None:
        """Free what applied changes replaced (control side; submitting a change does too)."""
        with self._control:
            self.timeline.prune()

    def stats_dict(self) -> dict[str, float]:
        """The node's own figures (``/<node>/stats``): blocks, compute time, changes applied
        and pending."""
        return {
            "blocks": self.compute.blocks,
            **self.compute.compute_ms(),
            "commands": self.commands.applied,
            "pending": self.commands.pending(),
        }

    def failures(self) -> list[str]:
        """Failures the audio side met since the last call (each kind once), to report."""
        lines = []
        while self._failures:
            lines.append(self._failures.popleft())
        return lines

    def samples(self, seconds: float) -> int:
        return int(round(seconds * self.sample_rate))

    # -- reporting ---------------------------------------------------------------------------

    @property
    def runs_on(self) -> str:
        """Where blocks run, in words: ``cpu``, ``cuda:0 (CUDA graph)``, ``cuda:0 (eager
        CUDA...)`` with the reason a capture failed."""
        if self._on_cpu:
            return "cpu"
        graphs = self.cuda_graphs
        if graphs is None:
            return f"{self.device} (eager CUDA)"
        if graphs.failure is not None:
            return f"{self.device} (eager CUDA: the capture failed, {graphs.failure})"
        return f"{self.device} (CUDA graph)"
