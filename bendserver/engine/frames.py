"""Frames at a control rate in a live rack: what its methods at a lower rate give and take.

A node whose method gives frames (features, a RAVE ``encode``: one frame per ``out_ratio``
samples) has a :class:`FrameTap`: the audio side copies each block's frames into a
preallocated ring, the control side reads them (OSC, the page) at its own pace. A rack whose
first method takes frames (``decode``) plays the :class:`HeldFrame` the control side last set
(``/in/...``), repeated over the block as nn~ holds a signal. :class:`FrameEnds` is the rack as
the audio device plays it: frames in from the held frame, silence out where the rack gives
frames (they go out as OSC and to the page instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import BendingError
from .rack import Rack

#: Frames a tap holds: a reader further behind reads the newest ones.
TAP_FRAMES = 4096


class FrameTap:
    """A ring of the frames ``[channels, n]`` one node gives, block after block."""

    def __init__(self, channels: int, frames: int = TAP_FRAMES) -> None:
        self.frames = np.zeros((channels, frames), dtype=np.float32)
        self.written = 0  #: frames recorded so far (advanced after each copy)

    def record(self, block: np.ndarray) -> None:
        """Copy one block's frames in (audio side: no allocation); another shape is skipped."""
        size = self.frames.shape[1]
        count = block.shape[-1]
        if block.shape[0] != self.frames.shape[0] or count > size // 2:
            return
        start = self.written % size
        first = min(count, size - start)
        self.frames[:, start : start + first] = block[:, :first]
        if first < count:
            self.frames[:, : count - first] = block[:, first:]
        self.written += count

    def read(self, since: int) -> tuple[np.ndarray, int]:
        """Copies of the frames recorded after frame ``since`` (the newest half of the ring at
        most) and the index of the first of them (control side)."""
        written, size = self.written, self.frames.shape[1]
        first = max(since, written - size // 2)
        order = np.arange(first, written) % size
        return self.frames[:, order], first


class HeldFrame:
    """The frame a rack taking frames plays, set by the control side, held until the next."""

    def __init__(self, channels: int, frames: int) -> None:
        self.channels = channels
        self.current = np.zeros(channels, dtype=np.float32)
        self.updates = 0  #: frames set so far
        self._block = np.zeros((channels, frames), dtype=np.float32)

    def set(self, values: Any) -> None:
        """Hold ``values`` (one per channel) from the next block on (control side: a new
        array, taken in one reference write)."""
        frame = np.asarray(values, dtype=np.float32)
        if frame.shape != (self.channels,):
            raise BendingError(
                f"a frame here is {self.channels} values (one per channel), got {frame.size}"
            )
        if not np.isfinite(frame).all():
            raise BendingError("a frame's values are finite numbers")
        self.current = frame
        self.updates += 1

    def block(self) -> np.ndarray:
        """The held frame over a block (audio side: written into a preallocated block)."""
        self._block[:] = self.current[:, None]
        return self._block


class FrameEnds:
    """``rack`` as the audio device plays it where its input or output is at a control rate:
    frames in from ``held`` (the device's input unused: one channel), silence out where it
    gives frames (one channel). Everything else is the rack's."""

    def __init__(self, rack: Rack, held: HeldFrame | None) -> None:
        spec = rack.spec
        if (spec.in_ratio != 1) != (held is not None):
            raise BendingError("a rack taking frames plays a held frame, and only such a rack")
        self.rack, self.held = rack, held
        self.in_channels = rack.in_channels if held is None else 1
        self.out_channels = rack.out_channels if spec.out_ratio == 1 else 1
        self.in_frames = self.out_frames = rack.block
        self._silence = np.zeros((self.out_channels, rack.block), dtype=np.float32)
        self._silence.flags.writeable = False

    def process(self, block: np.ndarray) -> np.ndarray:
        out = self.rack.process(block if self.held is None else self.held.block())
        return out if self.rack.spec.out_ratio == 1 else self._silence

    def __getattr__(self, name: str) -> Any:
        if name == "rack":
            raise AttributeError(name)
        return getattr(self.rack, name)


def frame_taps(rack: Rack) -> dict[str, FrameTap]:
    """A tap for each node of ``rack`` whose method gives frames, by node name (set on the
    rack, which records them after each block)."""
    taps = {
        name: FrameTap(node.out_channels)
        for name, node in rack.nodes.items()
        if node.spec.out_ratio != 1
    }
    rack.frame_taps = taps
    return taps
