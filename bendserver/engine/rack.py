"""Rack: nodes played together block by block, one block loop, one fuse, one set of stats.

A rack plays its nodes in order on each block: the first takes the rack's input, each next one
the output of the one before, the last one's output goes through the rack's output fuse. Each
node keeps its own bending state and changes (:class:`~bendserver.engine.node.Node`); the rack
owns what the nodes share: the block loop and its time, the fuse, the meter's tap, the stats
and failures, and the latency (the sum of the nodes').
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..audiofile import fit_length, resample_audio
from ..errors import BendingError
from ..loader import MethodSpec
from .fuse import OutputFuse
from .node import Node, _checked_streams
from .stats import EngineStats
from .tap import BlockTap


class Rack:
    """Plays ``nodes`` one after the other on blocks of ``[channels, frames]`` float32 audio.

    The output fuse (``fuse``, limiting towards ``ceiling``) works on audio outputs only
    (latent frames are not limited nor DC-blocked).
    """

    def __init__(self, nodes: Sequence[Node], fuse: bool = True, ceiling: float = 0.99) -> None:
        if not nodes:
            raise BendingError("a rack plays at least one node")
        self.nodes = list(nodes)
        self.stats = EngineStats()
        for node in self.nodes:
            node.stats = self.stats
            node.on_reset = self._reset_fuse
        #: Copies of each block in and out for a meter (None: no copies; see ``engine.tap``).
        self.tap: BlockTap | None = None
        last = self.nodes[-1]
        self.fuse = (
            OutputFuse(last.out_channels, last.sample_rate, ceiling)
            if fuse and last.spec.out_ratio == 1
            else None
        )
        self.time = 0
        self._budget = self.block / self.sample_rate

    # -- what the rack plays -------------------------------------------------------------------

    @property
    def block(self) -> int:
        return self.nodes[0].block

    @property
    def sample_rate(self) -> int:
        return self.nodes[0].sample_rate

    @property
    def spec(self) -> MethodSpec:
        """Channels and ratios of the rack as one method: the first node's input, the last's
        output."""
        first, last = self.nodes[0].spec, self.nodes[-1].spec
        return MethodSpec(first.in_channels, first.in_ratio, last.out_channels, last.out_ratio)

    @property
    def method(self) -> str:
        """The nodes' methods, in order (one node: its method)."""
        return " -> ".join(node.method for node in self.nodes)

    @property
    def in_channels(self) -> int:
        return self.nodes[0].in_channels

    @property
    def in_frames(self) -> int:
        return self.nodes[0].in_frames

    @property
    def out_channels(self) -> int:
        return self.nodes[-1].out_channels

    @property
    def out_frames(self) -> int:
        return self.nodes[-1].out_frames

    @property
    def streams(self) -> int:
        return self.nodes[0].streams

    @property
    def adapts(self) -> bool:
        """Made without ``streams``: the batch follows the channels ``engine(audio, sr)`` gets."""
        return all(node.adapts for node in self.nodes)

    @property
    def latency(self) -> int:
        """Samples from a sample in to its effect out: the sum of the nodes' latencies."""
        return sum(node.latency for node in self.nodes)

    def samples(self, seconds: float) -> int:
        return int(round(seconds * self.sample_rate))

    def set_streams(self, streams: int) -> None:
        """Play ``streams`` streams from the next block on (see :meth:`Node.set_streams`);
        another count than now starts from a clear streaming state and fuse."""
        streams = _checked_streams(streams)
        if streams == self.streams:
            return
        done: list[tuple[Node, int]] = []
        try:
            for node in self.nodes:
                before = node.streams
                node.set_streams(streams)
                done.append((node, before))
        except BaseException:
            for node, before in reversed(done):  # what was rebuilt plays what it did
                node.set_streams(before)
            raise
        if self.fuse is not None:
            self.fuse = OutputFuse(self.out_channels, self.sample_rate, self.fuse.ceiling)

    # -- the audio side ------------------------------------------------------------------------

    def process(self, block: np.ndarray) -> np.ndarray:
        """Apply due changes, run one block through every node, fuse. A block of another shape
        raises a BendingError; a failing model call outputs the dry signal (or silence) and
        counts."""
        started = time.perf_counter()
        dry = np.asarray(block, dtype=np.float32)
        out = dry
        for node in self.nodes:
            out = node.process(out)
        if self.fuse is not None:
            out = self.fuse.process(out)
        if self.tap is not None:
            self.tap.record(dry, out)
        self.time += self.block
        self.stats.record(time.perf_counter() - started, self._budget)
        return out

    def stream(self, audio: np.ndarray) -> Iterator[np.ndarray]:
        """:meth:`process` over ``audio`` [channels, frames], block after block: the last block is
        padded with silence and its output cut to the input's length."""
        frames = audio.shape[-1]
        for start in range(0, frames, self.block):
            chunk = audio[:, start : start + self.block]
            if chunk.shape[-1] < self.block:
                chunk = np.pad(chunk, ((0, 0), (0, self.block - chunk.shape[-1])))
            out = self.process(np.ascontiguousarray(chunk, dtype=np.float32))
            yield out[:, : min(self.block, frames - start)]

    def __call__(
        self, audio: np.ndarray | torch.Tensor, sample_rate: int, reset: bool = True
    ) -> np.ndarray | torch.Tensor:
        """Play a whole signal, as pedalboard's ``board(audio, sr)``: a numpy array or tensor,
        ``[channels, frames]`` or 1-D mono, at ``sample_rate`` (resampled to the model's and
        back with soxr); returns the same type, shape and rate. ``reset=False`` continues the
        stream of the last call (joins are exact where calls are whole blocks long)."""
        if self.spec.in_ratio != 1 or self.spec.out_ratio != 1:
            raise BendingError(f"engine(audio, sr) plays audio methods; '{self.method}' is not")
        tensor = audio if isinstance(audio, torch.Tensor) else None
        signal = audio.detach().cpu().numpy() if tensor is not None else np.asarray(audio)
        mono = signal.ndim == 1
        signal = signal[None] if mono else signal
        per_stream = self.spec.in_channels
        if signal.ndim == 2 and self.adapts and reset and signal.shape[0] % per_stream == 0:
            self.set_streams(max(1, signal.shape[0] // per_stream))
        if signal.ndim != 2 or signal.shape[0] != self.in_channels:
            raise BendingError(
                f"this engine plays {self.in_channels} channel(s) ([{self.in_channels}, frames], "
                f"or 1-D for one), got {list(np.shape(audio))}: " + self._channels_hint(reset)
            )
        if reset:
            self.reset_state()
        frames = signal.shape[-1]
        played = resample_audio(signal.astype(np.float32), int(sample_rate), self.sample_rate)
        out = np.zeros((self.out_channels, played.shape[-1]), dtype=np.float32)
        position = 0
        for block in self.stream(played):
            out[:, position : position + block.shape[-1]] = block
            position += block.shape[-1]
        out = fit_length(resample_audio(out, self.sample_rate, int(sample_rate)), frames)
        if self.fuse is not None and int(sample_rate) != self.sample_rate:
            self.fuse.hold(out)  # the resampler may overshoot the ceiling
        out = out[0] if mono and self.out_channels == 1 else out
        if tensor is None:
            return out
        return torch.from_numpy(np.ascontiguousarray(out)).to(tensor.device, tensor.dtype)

    def _channels_hint(self, reset: bool) -> str:
        """What to do when ``engine(audio, sr)`` gets a channel count it cannot play."""
        if not self.adapts:
            return "make it without streams to play any number of channels, one stream each"
        if not reset:
            return "reset=True starts a stream with another number of channels"
        first = self.nodes[0]
        return f"model '{first.model.name}' takes {first.spec.in_channels} channel(s) a stream"

    def apply_due(self) -> None:
        """Apply the changes due at this block on every node (the first step of each node's
        ``process``)."""
        for node in self.nodes:
            node.apply_due()

    def _reset_fuse(self) -> None:
        if self.fuse is not None:
            self.fuse.reset()

    def reset_state(self) -> None:
        """Clear every node's streaming state (caches) and the fuse's filter, right now."""
        for node in self.nodes:
            node.reset_state()
        self._reset_fuse()

    # -- the control side ----------------------------------------------------------------------

    def collect(self) -> None:
        """Free what applied changes replaced, on every node (control side)."""
        for node in self.nodes:
            node.collect()

    def failures(self) -> list[str]:
        """Failures the audio side met since the last call (each kind once), to report."""
        return [line for node in self.nodes for line in node.failures()]

    def stats_dict(self) -> dict[str, float]:
        fuse = self.fuse
        return {
            "blocks": self.stats.blocks,
            "late": self.stats.late,
            "errors": self.stats.errors,
            **self.stats.compute_ms(),
            "nan": fuse.nonfinite_samples if fuse else 0,
            "limited": fuse.limited_samples if fuse else 0,
            "commands": sum(node.commands.applied for node in self.nodes),
            "pending": sum(node.commands.pending() for node in self.nodes),
        }
