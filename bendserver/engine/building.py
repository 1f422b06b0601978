"""A node's building side: the method traced for the node's batch, optimised, captured.

What the control side builds and the audio side then plays (:class:`~bendserver.engine.node.Node`
is made of the three sides): the traced graph's ``forward`` for the block shape and stream count,
the pinned buffers and CUDA graphs of a GPU, the streaming state a reset returns to. Everything
here runs on the control side (construction, ``set_streams``, a rebuilt graph).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx

from ..errors import BendingError
from ..passes import compile_forward, optimize
from ..tracing import restoring_buffers
from ..tracing.script import ConversionError
from .cuda_graph import CudaGraphs, check_state_guards, follow_device
from .transfer import BlockTransfer

log = logging.getLogger("bendserver.engine")


class NodeBuilder:
    """Builds what a node plays (control side): checks the block, traces the method for the
    node's batch, optimises and captures the graph, rebuilds it for another stream count."""

    def _check_block(self) -> None:
        """Refuse a block the model cannot stream, naming blocks it can."""
        multiple = math.lcm(self.model.block_multiple, self.spec.in_ratio, self.spec.out_ratio)
        if self.block <= 0 or self.block % multiple:
            examples = [b for b in (64, 128, 256, 512, 1024, 2048, 4096) if b % multiple == 0]
            raise BendingError(
                f"model '{self.model.name}' ({self.method}) takes blocks that are positive "
                f"multiples of {multiple} (e.g. {', '.join(map(str, examples[:5]))}), "
                f"not {self.block}"
            )
        tensors = [*self.model.module.parameters(), *self.model.module.buffers()]
        if tensors and tensors[0].device != self.device:
            raise BendingError(
                f"the model is on {tensors[0].device}, not {self.device}: "
                "load it on the engine's device"
            )

    def _set_channels(self, streams: int) -> None:
        """The stream count and the channels of the blocks it makes."""
        self.streams = streams
        #: Channels of the blocks ``process`` takes and returns: ``streams`` x the method's.
        self.in_channels = streams * self.spec.in_channels
        self.out_channels = streams * self.spec.out_channels

    def _block_transfer(self) -> BlockTransfer:
        """Pinned buffers and a stream for blocks of the engine's batch (CUDA)."""
        in_shape = (self.streams, self.spec.in_channels, self.in_frames)
        out_shape = (self.streams, self.spec.out_channels, self.out_frames)
        return BlockTransfer(self.device, in_shape, out_shape)

    def _set_up_cuda(self, cuda_graph: bool) -> None:
        """Pinned buffers and a stream; with ``cuda_graph``, each weight slot gets storage of
        its own, which weight changes are copied into (a captured graph reads its addresses;
        the model's own weights, a version, must stay untouched). Convolutions and matrix
        products run in full float32, as on the CPU: torch's default TF32 convolutions put drive
        2e-4 of its peak away from the CPU's output, 4.5e-7 without (measured on an H200)."""
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        self._transfer = self._block_transfer()
        if not cuda_graph:
            return
        with torch.no_grad():
            for slot in self._slots.values():
                slot.data = slot.detach().clone()
        self.cuda_graphs = CudaGraphs(self._transfer.input)

    def _check_capturable(self) -> None:
        """After the first trace: a file's method that plays as its direct scripted call reads
        its nn~ attributes as it runs, so a capture would freeze the branch their setters pick:
        such a method plays eager CUDA (a converted one is converted and captured again when a
        setter changes what it reads)."""
        if self.cuda_graphs is None or not self.model.attributes:
            return
        if self.method in self.bended.unconverted:
            log.warning(
                "model '%s' has nn~ attributes and %s() plays as a direct scripted call: "
                "playing eager CUDA (no CUDA graph)",
                self.model.name,
                self.method,
            )
            self.cuda_graphs = None

    def _trace(self, unbended: bool = True) -> None:
        """Trace the method for the engine's batch; ``unbended``: play it without ops (what
        plays before the first change; a scripted file's method always). What the method
        draws meanwhile (RAVE's encoder samples) leaves torch's random stream as it was: the
        first block draws what a direct call after the same ``torch.manual_seed`` draws."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            self._traced(unbended)

    def _traced(self, unbended: bool) -> None:
        shape = (self.streams, self.spec.in_channels, self.in_frames)
        example = torch.zeros(shape, device=self.device)
        self.bended.streams = self.streams
        graph = self._converted(example) if self.bended.scripted else None
        if self.bended.scripted and graph is None:  # plays as it is, its weights swapped in
            self._forward: Callable[..., Any] = getattr(self.model.module, self.method)
            with torch.inference_mode(), restoring_buffers(self.model.module):
                with self._streams_refused():
                    shape = tuple(self._forward(example).shape)
            if len(shape) == 3 and shape[1] < self.spec.out_channels:  # as nn~: zeros for the
                self._forward = _zero_filled(self._forward, self.spec.out_channels)  # rest
                shape = (shape[0], self.spec.out_channels, shape[2])
            self._check_output(shape)
            self._forward = self._captured(self._forward, self.model.module)
        else:
            if graph is None:
                argument = next(iter(self.bended.argument_names(self.method)))
                with self._streams_refused():
                    graph = self.bended.trace(self.method, **{argument: example})
            output = next(node for node in graph.nodes if node.op == "output").args[0]
            self._check_output(getattr(output, "meta", {}).get("shape"))
            if unbended:
                self._forward = self._optimized(self.bended.build(self.method, []))
        # detached: a capture's warm-up points the buffers elsewhere, a reset writes the originals
        self._initial_state = [
            (b.detach(), b.detach().clone()) for b in self.bended.streaming_state()
        ]

    def _converted(self, example: torch.Tensor) -> torch.fx.Graph | None:
        """A TorchScript file's method converted into a graph, or None where it does not
        convert (it then plays as a direct scripted call: the reason is logged and kept in
        ``bended.unconverted``)."""
        argument = next(iter(self.bended.argument_names(self.method)))
        with self._streams_refused():
            try:
                return self.bended.trace(self.method, **{argument: example})
            except ConversionError as error:
                log.warning(
                    "model '%s': %s() plays as a direct scripted call: %s",
                    self.model.name,
                    self.method,
                    error,
                )
                return None

    def _optimized(self, gm: torch.fx.GraphModule) -> Callable[..., Any]:
        """A freshly built graph module's ``forward``, optimised, captured on a CUDA device
        (control side)."""
        if not self._on_cpu:
            follow_device(gm, self.device)
            check_state_guards(gm)
        forward = optimize(gm, self.optimize).forward
        if self.optimize == "compile":
            with torch.inference_mode():  # as blocks come: the guards check it
                example = torch.zeros((self.streams, self.spec.in_channels, self.in_frames))
            state = self.bended.streaming_state()
            forward, report = compile_forward(gm, example, state, self.stats.blocks == 0)
            self.compile_report.append(report)
            log.info("optimize compile: %s", report)
        return self._captured(forward, gm)

    def _captured(self, forward: Callable[..., Any], module: torch.nn.Module) -> Callable[..., Any]:
        """``forward`` as a CUDA graph where the engine captures (else, or if that fails, as it
        is); control side, as the model's streaming state stays what plays."""
        if self.cuda_graphs is None:
            return forward
        return self.cuda_graphs.capture(forward, module, self.bended.streaming_state())

    @contextlib.contextmanager
    def _streams_refused(self) -> Iterator[None]:
        """A model that fails on a batch of several streams is refused, saying why."""
        try:
            yield
        except Exception as error:
            if self.streams == 1:
                raise
            raise BendingError(
                f"model '{self.model.name}' cannot play {self.streams} streams at once (a batch "
                f"of {self.streams}: {type(error).__name__}: {error}). Its streaming state must "
                "follow the batch (see docs/engine.md); or mix down to one stream (--mono)"
            ) from None

    def _check_output(self, shape: Any) -> None:
        """The output must be ``[streams, out_channels, out_frames]``: a model whose strides do
        not divide the block gives fewer frames (refused here, before anything plays)."""
        wanted = (self.streams, self.spec.out_channels, self.out_frames)
        if shape is not None and tuple(shape) != wanted:
            raise BendingError(
                f"model '{self.model.name}' ({self.method}) gives {list(shape)} for a block of "
                f"{self.block} instead of {list(wanted)}: try a block that is a power of two, "
                "or set block_multiple in its manifest"
            )

    def set_streams(self, streams: int) -> None:
        """Play ``streams`` streams from the next block on; another count than now starts from
        a clear streaming state (the bending kept). An engine made without ``streams``
        rebuilds its batch here, on the caller's thread: call it between blocks, never while
        another thread plays the engine. One made with ``streams=`` plays that count only."""
        streams = checked_streams(streams)
        if streams == self.streams:
            return
        if not self.adapts:
            raise BendingError(
                f"this engine was made with streams={self.streams}: make it without streams "
                "to play any number of channels"
            )
        with self._control:
            before = self.streams
            try:
                self._rebatch(streams)
            except BaseException:
                self._rebatch(before)  # a model refusing the batch keeps playing what it did
                raise

    def _rebatch(self, streams: int) -> None:
        """Trace and build everything that depends on the batch again, for ``streams``."""
        self.timeline.prune()
        self._set_channels(streams)
        if self._transfer is not None:
            self._transfer = self._block_transfer()
            if self.cuda_graphs is not None:
                self.cuda_graphs = CudaGraphs(self._transfer.input)
        self._bends.rebatched(self.cuda_graphs)
        structure = self._bends.structure(self.timeline.base)
        self._trace(unbended=not structure)
        if structure:
            self._forward = self._bends.forward(structure)
        for entry in self.timeline.entries:  # changes to come: their graphs for this batch
            if entry.plan.structure is not None:
                entry.command.payload.forward = self._bends.forward(entry.plan.structure)
        self.reset_state()


def _zero_filled(call: Callable[..., Any], channels: int) -> Callable[..., Any]:
    """A direct scripted call whose output may have fewer channels than the method declares,
    completed with zeros as nn~ plays it (nn-tilde's buffer example before its buffer is
    filled); more channels are refused by the output's check."""

    def filled(x: torch.Tensor) -> torch.Tensor:
        y = call(x)
        missing = channels - y.shape[1]
        return torch.cat([y, y.new_zeros(y.shape[0], missing, y.shape[2])], 1) if missing else y

    return filled


def checked_streams(streams: Any) -> int:
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise BendingError(f"streams is a whole number of channels >= 1, got {streams!r}")
    return streams
