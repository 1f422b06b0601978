"""A tap on an engine's blocks: copies of the last input and output, for meters and a scope.

The audio side only copies each block into preallocated rings (no reduction, no allocation
beyond slice views); levels, spectra and scopes are computed from :meth:`BlockTap.read` on the
control side, at whatever rate a reader wants. A reader racing the writer may see one block
half old and half new: the rings are for looking at, never for playing.
"""

from __future__ import annotations

import numpy as np

#: Frames the rings hold: a reader that falls further behind reads the newest ones.
TAP_FRAMES = 16384
#: Frames next to the write position a reader leaves alone (the block being written).
_MARGIN = 4096


class BlockTap:
    """Rings of the input and output frames of one engine (``[channels, frames]`` each)."""

    def __init__(self, in_channels: int, out_channels: int, frames: int = TAP_FRAMES) -> None:
        self.input = np.zeros((in_channels, frames), dtype=np.float32)
        self.output = np.zeros((out_channels, frames), dtype=np.float32)
        self.written = 0  #: frames recorded so far (advanced after each copy)

    def record(self, dry: np.ndarray, out: np.ndarray) -> None:
        """Copy one block in and out (audio side); a block of other channels is skipped."""
        size = self.output.shape[1]
        frames = out.shape[-1]
        if dry.shape != (self.input.shape[0], frames) or out.shape[0] != self.output.shape[0]:
            return
        if frames > size - _MARGIN:
            return
        start = self.written % size
        first = min(frames, size - start)
        self.input[:, start : start + first] = dry[:, :first]
        self.output[:, start : start + first] = out[:, :first]
        if first < frames:
            self.input[:, : frames - first] = dry[:, first:]
            self.output[:, : frames - first] = out[:, first:]
        self.written += frames

    def read(self, since: int, most: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Copies of the input and output frames recorded after frame ``since`` (at most
        ``most``, the newest), and the frame count they end at (control side)."""
        written = self.written
        size = self.output.shape[1]
        count = min(written - since, size - _MARGIN, most if most is not None else size)
        count = max(count, 0)
        order = np.arange(written - count, written) % size
        return self.input[:, order], self.output[:, order], written
