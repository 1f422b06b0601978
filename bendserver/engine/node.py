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
import contextlib
import copy
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.fx

from ..attributes import Attribute, shown
from ..bending.base import BendingOp
from ..bending.config import BendingConfig
from ..bending.weights import DEFAULT_VERSION
from ..errors import BendingError
from ..loader import LoadedModel, load_model, resolve_device
from ..passes import OPTIMIZE_MODES, compile_forward, optimize
from ..preset_fit import bent_targets, check_fit
from ..presets import Preset, load_preset
from ..slices import breathe
from ..tracing import restoring_buffers
from ..tracing.script import ConversionError, setter_writes
from .bends import Bends, Payload
from .commands import CommandQueue, Ramp
from .cuda_graph import CudaGraphs
from .state import BendingState, OpState, check_op_count
from .stats import EngineStats
from .timeline import Change, Timeline
from .transfer import BlockTransfer

log = logging.getLogger("bendserver.engine")


class Node:
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
        self._set_channels(1 if streams is None else _checked_streams(streams))
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
        the model's own weights, a version, must stay untouched)."""
        self._transfer = self._block_transfer()
        if not cuda_graph:
            return
        if self.model.attributes:  # a set_<name> may change what runs: a capture would not see it
            log.warning(
                "model '%s' has nn~ attributes: playing eager CUDA (no CUDA graph)", self.model.name
            )
            return
        with torch.no_grad():
            for slot in self._slots.values():
                slot.data = slot.detach().clone()
        self.cuda_graphs = CudaGraphs(self._transfer.input)

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
        streams = _checked_streams(streams)
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

    # -- the audio side ----------------------------------------------------------------------

    def process(self, block: np.ndarray) -> np.ndarray:
        """Apply due changes, run one block, mix and gain. A block of another shape raises a
        BendingError; a failing model call outputs the dry signal (or silence) and counts."""
        self.apply_due()
        if block.shape != (self.in_channels, self.in_frames):
            raise BendingError(
                f"process() takes [{self.in_channels}, {self.in_frames}] frames, "
                f"got {list(block.shape)}"
            )
        dry = np.asarray(block, dtype=np.float32)
        out = self._mix_and_gain(dry, self._run(dry))
        self.time += self.block
        return out

    def _run(self, dry: np.ndarray) -> np.ndarray:
        if self.bypass:
            return self._dry_or_silence(dry)
        try:
            with torch.inference_mode():
                if self._transfer is not None:
                    return self._transfer.run(dry, self._forward)
                x = torch.from_numpy(dry).view(self.streams, -1, self.in_frames)
                y = self._forward(x if self._on_cpu else x.to(self.device))
                if not self._on_cpu or y.dtype != torch.float32:
                    y = y.to("cpu", torch.float32)
                return y.reshape(self.out_channels, self.out_frames).numpy()
        except Exception as error:  # a bended model may fail: the stream must not
            self.stats.errors += 1
            self._failed("model call", error)
            return self._dry_or_silence(dry)

    def _failed(self, what: str, error: Exception) -> None:
        """Keep the first failure of each kind for the control side to report."""
        kind = f"{what}: {type(error).__name__}"
        if kind not in self._failed_kinds:
            self._failed_kinds.add(kind)
            self._failures.append(f"{kind}: {error}")

    def _dry_or_silence(self, dry: np.ndarray) -> np.ndarray:
        if dry.shape == (self.out_channels, self.out_frames):
            return dry.copy()
        return np.zeros((self.out_channels, self.out_frames), dtype=np.float32)

    def _mix_and_gain(self, dry: np.ndarray, wet: np.ndarray) -> np.ndarray:
        """Dry/wet mix and output gain, each moved linearly across the block when it changes
        (from the stream's first block on: a preset's play at once, at any block size)."""
        if self.time == 0:
            self._applied_mix, self._applied_gain = self.mix, self.gain
        mix = self._smoothed(self._applied_mix, self.mix)
        gain = self._smoothed(self._applied_gain, self.gain)
        self._applied_mix, self._applied_gain = self.mix, self.gain
        if dry.shape == wet.shape and not (np.isscalar(mix) and mix == 1.0):
            wet = dry + (wet - dry) * mix
        return wet * gain if not (np.isscalar(gain) and gain == 1.0) else wet

    def _smoothed(self, old: float, new: float) -> float | np.ndarray:
        if old == new:
            return new
        return np.linspace(old, new, self.out_frames, endpoint=True, dtype=np.float32)

    def apply_due(self) -> None:
        """Apply the changes due at this block and advance the ramps (audio side: the first
        step of :meth:`process`)."""
        modulated = self.modulated
        with self._on_device_stream():  # on a GPU: weight copies and parameter writes
            due = () if self.held else self.commands.due(self.time)
            if modulated is not None and (due or self._ramps):  # they move the own values
                modulated.restore(self)
            for command in due:
                if not command.cancelled:
                    try:
                        self._apply(command.payload)
                        self.commands.applied += 1
                    except Exception as error:  # a change must never stop the stream
                        self.stats.errors += 1
                        self._failed(f"change {command.what!r}", error)
            if due and self._transfer is not None:
                self._transfer.settle()  # the control side may then free what the copies read
            for command in due:
                self.commands.finish(command)
            finished = [key for key, ramp in self._ramps.items() if not ramp.advance()]
            if modulated is not None:
                modulated.drive(self)
        for key in finished:
            del self._ramps[key]

    def _apply(self, payload: Payload) -> None:
        """Swap a prepared change in (audio thread): pointer swaps and scalar writes only; a
        captured CUDA graph's weights are copied into instead, on the engine's stream."""
        current = self._current
        for name, tensor in payload.weights.items():
            if self.cuda_graphs is not None:
                current[name].copy_(tensor, non_blocking=True)
                payload.replaced.append(tensor)  # freed on the control side, once copied
                continue
            payload.replaced.append(current[name])  # keeps the old storage alive, to free later
            current[name] = tensor
            self._slots[name].data = tensor
        for op, enabled in payload.enabled:
            op.enabled = enabled
        for key, ramp in payload.ramps:
            if ramp.blocks > 0:
                ramp.begin()
                self._ramps[key] = ramp
            else:
                self._ramps.pop(key, None)
                ramp.tensor.fill_(ramp.target)
        for name, value in payload.settings.items():
            setattr(self, name, value)
        if payload.forward is not None:
            payload.replaced.append(self._forward)
            self._forward = payload.forward
        for name, values in payload.attributes.items():
            code = self.model.attributes[name].apply(self.model.module, values)
            if code < 0:
                raise BendingError(f"set_{name} returned {code}: the file refused the value")
        if payload.reset:
            self.reset_state()
            if self.on_reset is not None:
                self.on_reset()

    def _on_device_stream(self) -> contextlib.AbstractContextManager:
        """Device work queued on the stream the blocks run on (the CPU: nothing to do)."""
        return contextlib.nullcontext() if self._transfer is None else self._transfer.on_stream()

    def reset_state(self) -> None:
        """Clear the streaming state (caches), right now."""
        with torch.no_grad(), self._on_device_stream():
            for buffer, initial in self._initial_state:
                buffer.copy_(initial)

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

    def _submit(
        self,
        change: Change,
        at: int | None,
        what: str,
        ramps: dict[tuple[int, str], int] | None = None,
    ) -> None:
        with self._control:  # "the next block" is now, in the timeline's order
            self.timeline.submit(change, self.time if at is None else at, what, ramps)

    # -- the control side: changes -----------------------------------------------------------

    def set_param(
        self, op_id: str, name: str, value: float, ramp_ms: float = 0.0, at: int | None = None
    ) -> None:
        """Set an op parameter, moving there over ``ramp_ms`` (one step per block at least).

        Weights an op bends are recomputed with the new value and swapped in whole (weights
        jump: only activation parameters ramp)."""
        with self._control:
            op = self.state.op(op_id)
            value = self._bends.op(op.uid).param(name).validate(op_id, value)
            if not math.isfinite(ramp_ms) or ramp_ms < 0:
                raise BendingError(f"ramp must be a finite number of ms >= 0, got {ramp_ms!r}")
            blocks = math.ceil(ramp_ms * self.sample_rate / 1000 / self.block)

            def change(state: BendingState) -> BendingState:
                return state.with_op(state.op(op_id).with_param(name, value))

            self._submit(change, at, f"set {op_id}.{name}", {(op.uid, name): blocks})

    def _set_live(self, uid: int, name: str, value: float) -> None:
        """``op.name = value`` on a live op: the same path as :meth:`set_param`."""
        with self._control:
            op_id = next((op.op_id for op in self.state.ops if op.uid == uid), None)
            if op_id is None:
                raise BendingError("this op is not played by the engine any more")
            self.set_param(op_id, name, value)

    def add_op(self, op_id: str, op: BendingOp, *keys: str, at: int | None = None) -> None:
        """Bend ``keys`` with ``op`` under the name ``op_id``; the graph is rebuilt here and
        swapped in at a block boundary, keeping the streaming state."""
        with self._control, self._creating() as created:
            check_op_count(len(self.state.ops) + 1, f"adding '{op_id}'")
            added = self._bends.create(op_id, op, keys)
            created.append(added)
            self._submit(lambda state: state.adding(added), at, f"add {op_id}")

    @contextlib.contextmanager
    def _creating(self) -> Iterator[list[OpState]]:
        """Ops created for a change are forgotten again if the change is refused."""
        created: list[OpState] = []
        try:
            yield created
        except BaseException:
            self._bends.discard(op.uid for op in created)
            raise

    def remove_op(self, op_id: str, at: int | None = None) -> None:
        self.state.op(op_id)
        self._submit(lambda state: state.removing(op_id), at, f"remove {op_id}")

    def clear_ops(self, at: int | None = None) -> None:
        self._submit(lambda state: replace(state, ops=()), at, "clear")

    def enable_op(self, op_id: str, enabled: bool, at: int | None = None) -> None:
        """Switch an op on or off (off: it passes its input through)."""
        enabled = bool(enabled)

        def change(state: BendingState) -> BendingState:
            return state.with_op(replace(state.op(op_id), enabled=enabled))

        self.state.op(op_id)
        self._submit(change, at, f"enable {op_id}")

    def set_interpolation(self, mix: Mapping[str, float] | None, at: int | None = None) -> None:
        """Use a normalised mix of weight versions (``None``: the selected version alone)."""
        weights = None if mix is None else self.bended.weight_bank.normalised(mix)
        self._submit(lambda state: state.weights(state.version, weights), at, "interpolation")

    def set_version(self, name: str | None, at: int | None = None) -> None:
        """Play weight version ``name`` (None: the model's own), ending any interpolation."""
        version = self.bended.weight_bank.default_name if name is None else name
        self.bended.weight_bank.check_version(version)
        self._submit(lambda state: state.weights(version, None), at, f"version {version}")

    def set_attribute(self, name: str, values: Any, at: int | None = None) -> None:
        """Set an nn~ TorchScript file's attribute (its ``set_<name>``) at a block boundary:
        ``values`` (a value, or a sequence of one per value the setter takes) typed as its
        setter takes them, a sound file read for a tensor or buffer
        (:mod:`bendserver.attributes`). A value the file's setter refuses (it returns -1) is
        refused here, changing nothing."""
        spec = self.attribute_spec(name)
        typed = spec.parse(list(values) if isinstance(values, (list, tuple)) else [values])
        try:
            _, code = setter_writes(
                self.model.module, name, spec.arguments(typed), self.bended.script_attributes
            )
        except ConversionError:  # a setter the converter cannot follow: its code is seen later
            code = 0
        if isinstance(code, int) and code < 0:
            shown_values = " ".join(str(shown(v)) for v in typed)
            raise BendingError(f"the file's set_{name} refuses {shown_values} (it returned {code})")
        self._submit(lambda state: state.with_attribute(name, typed), at, f"attribute {name}")

    def attribute(self, name: str) -> tuple[Any, ...]:
        """An attribute's pending values (the file's own, from its getter, until set)."""
        spec = self.attribute_spec(name)
        pending = dict(self.state.attributes)
        return pending[name] if name in pending else spec.read(self.model.module)

    def attribute_spec(self, name: str) -> Attribute:
        """The description of the file's attribute ``name`` (refused where there is none)."""
        spec = self.model.attributes.get(name)
        if spec is None:
            listed = ", ".join(self.model.attributes) or "none"
            raise BendingError(f"no attribute '{name}'; this model's attributes: {listed}")
        return spec

    def set_gain(self, gain: float, at: int | None = None) -> None:
        gain = _finite("gain", gain, 0.0, 16.0)
        self._submit(lambda state: state.engine(gain=gain), at, "gain")

    def set_mix(self, mix: float, at: int | None = None) -> None:
        mix = _finite("mix", mix, 0.0, 1.0)
        self._submit(lambda state: state.engine(mix=mix), at, "mix")

    def set_bypass(self, bypass: bool, at: int | None = None) -> None:
        bypass = bool(bypass)
        self._submit(lambda state: state.engine(bypass=bypass), at, "bypass")

    def request_reset(self, at: int | None = None) -> None:
        """Clear the streaming state at a block boundary."""
        self._submit(lambda state: state.engine(resets=state.resets + 1), at, "reset")

    def load_preset(self, preset: str | Path | Preset, at: int | None = None) -> Preset:
        """Replace the ops, weights and engine settings with a preset's. The whole preset is
        checked and built first: a refused preset changes nothing."""
        checked = self._checked(preset)
        config, preset = checked.config, checked.preset
        keys: dict[int, list[str]] = {}
        for op, op_keys in config.entries:
            keys.setdefault(id(op), []).extend(op_keys)
        with self._control, self._creating() as ops:
            for op_id, op in config.ops.items():
                breathe()
                ops.append(self._bends.create(op_id, op, tuple(keys[id(op)])))
            disabled = set(preset.disabled)
            loaded = tuple(_enabled(op, op.op_id not in disabled) for op in ops)

            def change(state: BendingState) -> BendingState:
                new = replace(state, ops=loaded, gain=checked.gain, mix=checked.mix)
                for name, values in checked.attributes:
                    new = new.with_attribute(name, values)
                return new.weights(checked.version, checked.interpolation)

            self._submit(change, at, f"preset {preset.name}")
        return preset

    def check_preset(self, preset: str | Path | Preset) -> Preset:
        """The preset, read and checked against this node's model (ops, weights, version,
        interpolation, gain and mix): a BendingError says what does not fit, changing nothing."""
        return self._checked(preset).preset

    def _checked(self, preset: str | Path | Preset) -> _CheckedPreset:
        preset = preset if isinstance(preset, Preset) else load_preset(preset)
        if preset.nodes:  # its parts are nodes' own: a rack gives each its own
            raise BendingError(
                f"preset '{preset.name}' is a rack's (it sets nodes {', '.join(preset.nodes)}): "
                "load it into a rack of those nodes, or give this node one model's preset"
            )
        listed = preset.config.get("ops") if isinstance(preset.config, dict) else None
        check_op_count(len(listed) if isinstance(listed, dict) else 0, f"preset '{preset.name}'")
        config = BendingConfig.from_dict(preset.config)
        check_fit(preset, config, self.bended, self.model.name)
        bank = self.bended.weight_bank
        version = preset.version or bank.default_name
        bank.check_version(version)
        interpolation = bank.normalised(preset.interpolation) if preset.interpolation else None
        gain, mix = _finite("gain", preset.gain, 0.0, 16.0), _finite("mix", preset.mix, 0.0, 1.0)
        attributes = []
        for name, values in preset.attributes.items():
            try:
                attributes.append((name, self.attribute_spec(name).parse(values)))
            except BendingError as error:
                raise BendingError(f"preset '{preset.name}': {error}") from None
        return _CheckedPreset(preset, config, version, interpolation, gain, mix, tuple(attributes))

    def bending_config(self, at: int | None = None) -> BendingConfig:
        """The bends of the pending state (or of the state at sample ``at``) as a config with
        the engine's op ids: copies of the ops, with that state's parameters."""
        with self._control:
            state = self.state_at(at)
            ops = {op.op_id: copy.deepcopy(self._bends.twin(op)) for op in state.ops}
            entries = [(ops[op.op_id], *op.keys) for op in state.ops]
            return BendingConfig(*entries, module=self.bended, names=ops)

    def preset(self, name: str, at: int | None = None) -> Preset:
        """The pending state (or the state at sample ``at``) as a preset named ``name``."""
        with self._control:
            state = self.state_at(at)
            own = self.bended.weight_bank.default_name  # saved as _default: it fits a renamed file
            return Preset(
                name=name,
                config=self.bending_config(at).to_dict(),
                version=None if state.version == own else state.version,
                interpolation=None
                if state.interpolation is None
                else {
                    DEFAULT_VERSION if v == own else v: w for v, w in state.interpolation.items()
                },
                gain=state.gain,
                mix=state.mix,
                model=self.model.name,
                disabled=[op.op_id for op in state.ops if not op.enabled],
                targets=bent_targets(self.bended, (k for op in state.ops for k in op.keys)),
                attributes={name: [shown(v) for v in values] for name, values in state.attributes},
            )

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


@dataclass(frozen=True)
class _CheckedPreset:
    """A preset checked against a node's model, with what loading it needs."""

    preset: Preset
    config: BendingConfig
    version: str
    interpolation: dict[str, float] | None
    gain: float
    mix: float
    attributes: tuple[tuple[str, tuple[Any, ...]], ...] = ()


def _zero_filled(call: Callable[..., Any], channels: int) -> Callable[..., Any]:
    """A direct scripted call whose output may have fewer channels than the method declares,
    completed with zeros as nn~ plays it (nn-tilde's buffer example before its buffer is
    filled); more channels are refused by the output's check."""

    def filled(x: torch.Tensor) -> torch.Tensor:
        y = call(x)
        missing = channels - y.shape[1]
        return torch.cat([y, y.new_zeros(y.shape[0], missing, y.shape[2])], 1) if missing else y

    return filled


def _checked_streams(streams: Any) -> int:
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise BendingError(f"streams is a whole number of channels >= 1, got {streams!r}")
    return streams


def _enabled(op: OpState, enabled: bool) -> OpState:
    """``op`` switched on or off (a slice of a long preset load)."""
    breathe()
    return op if op.enabled == enabled else replace(op, enabled=enabled)


def _finite(name: str, value: Any, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BendingError(f"{name} takes a number, got {value!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise BendingError(f"{name} must be in [{low}, {high}], got {value!r}")
    return number
