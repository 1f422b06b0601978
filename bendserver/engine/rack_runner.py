"""A rack's audio side: one block through its nodes, a node swap's crossfade, the rack's output
stage (gain, mute, bypass) and the fuse.

The audio thread calls :meth:`RackRunner.process` once a block; offline commands call the rack
on a whole file (``stream``, ``__call__``), which plays it block after block the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch

from ..audiofile import fit_length, resample_audio
from ..errors import BendingError
from .switch import NodeSwap
from .wiring import IN, OUT, fed_by_in


class RackRunner:
    """The audio side of a rack, under the contract of
    :class:`~bendserver.engine.runner.NodeRunner`: it applies the nodes' due changes together,
    runs each node in order, sums and delays what edges carry, crossfades a node swap, applies
    the rack's output settings and limits the output; what a swap retires goes to the control
    side to be freed."""

    def process(self, block: np.ndarray) -> np.ndarray:
        """Apply due changes, run one block through every node, fuse. A block of another shape
        raises a BendingError; a failing model call outputs the dry signal (or silence) and
        counts."""
        started = time.perf_counter()
        dry = np.asarray(block, dtype=np.float32)
        if self._incoming is not None and self._fading is None:  # a swap starts at this block
            self._fading, self._incoming = self._incoming, None
            self._fading.node.time = self.nodes[self._fading.name].time
            self.swapped_at = self.time
            if self._fading.starts is not None:
                self._fading.starts(self.time)
        fading = self._fading
        modulation = self.modulation
        if modulation is not None:  # the output's gain driven as a node's (see apply_due)
            modulation.begin(self.time, dry)
            modulation.restore(self.output)
        self.output.apply_due(self.time)
        if modulation is not None:
            modulation.drive(self.output)
        outputs = {IN: dry}
        for name in self.order:
            x = self._gathered(name, outputs)
            self.recent[name].record(x)
            node = self.nodes[name]
            node_started = time.perf_counter()
            if fading is not None and fading.name == name:
                outputs[name] = fading.play(node, x)  # both nodes' time, counted as the node's
            else:
                outputs[name] = node.process(x)
            node.compute.record(time.perf_counter() - node_started, self._budget)
            if modulation is not None:
                modulation.heard(name, outputs[name], self.time)
        for name, frames in self.frame_taps.items():
            if name in outputs:
                frames.record(outputs[name])
        first = self.time == 0
        out = self.output.process(dry, self._gathered(OUT, outputs), first)
        if self.fuse is not None:
            out = self.fuse.process(out)
        out = self.output.muted(out, first)
        if self.tap is not None:
            self.tap.record(dry, out)
        if fading is not None and fading.done:
            self._swapped(fading)
        self.time += self.block
        self.stats.record(time.perf_counter() - started, self._budget)
        return out

    def _swapped(self, swap: NodeSwap) -> None:
        """The crossfade is over: play the swap's layout, the replaced node retired (audio
        side: reference writes, and the realigned branches' lines given the history they had,
        paired on the control side)."""
        old = self.nodes[swap.name]
        for line, before in swap.carries:
            line.carry(before)
        self._take(swap.layout)
        self.retired.append(old)
        self.swaps += 1
        self._fading = None

    def _gathered(self, target: str, outputs: dict[str, np.ndarray]) -> np.ndarray:
        """The sum of ``target``'s inputs, each delayed and scaled (one plain edge: as it is)."""
        total = None
        for edge in self._inputs[target]:
            x = outputs[edge.source]
            if edge.delay is not None:
                x = edge.delay.process(x)
            if edge.gain != 1.0:
                x = x * np.float32(edge.gain)
            total = x if total is None else total + x
        return total

    def stream(self, audio: np.ndarray) -> Iterator[np.ndarray]:
        """:meth:`process` over ``audio`` [channels, frames] (audio, or frames at the input's
        rate), block after block: the last block is padded with zeros and its output cut to
        what the input covers (a frame at a control rate that starts inside it counts)."""
        frames, step, out = audio.shape[-1], self.in_frames, self.out_frames
        for start in range(0, frames, step):
            chunk = audio[:, start : start + step]
            if chunk.shape[-1] < step:
                chunk = np.pad(chunk, ((0, 0), (0, step - chunk.shape[-1])))
            played = self.process(np.ascontiguousarray(chunk, dtype=np.float32))
            yield played[:, : min(out, -(-(frames - start) * out // step))]

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
        first = self.nodes[fed_by_in(self.edges)[0]]
        return f"model '{first.model.name}' takes {first.spec.in_channels} channel(s) a stream"

    def apply_due(self) -> None:
        """Apply the changes due at this block on every node (the first step of each node's
        ``process``)."""
        for node in self.nodes.values():
            node.apply_due()

    def _reset_fuse(self) -> None:
        if self.fuse is not None:
            self.fuse.reset()

    def reset_state(self) -> None:
        """Clear every node's streaming state (caches) and the fuse's filter, right now."""
        for node in self.nodes.values():
            node.reset_state()
        for inputs in self._inputs.values():
            for edge in inputs:
                if edge.delay is not None:
                    edge.delay.reset()
        self._reset_fuse()
