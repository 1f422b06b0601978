"""Blocks between the host and a CUDA device: pinned buffers, copies on one stream.

Each block is written into a pinned host buffer, copied to a static device tensor, run, and its
output copied back into another pinned buffer, all queued on the engine's own stream, then the
stream is waited on once. Nothing is allocated on the device per block: the forward's input is
always the same tensor, which is what a captured CUDA graph needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import torch


class BlockTransfer:
    """Host blocks ``[channels, frames]`` in and out of a forward on ``device``."""

    def __init__(
        self, device: torch.device, in_shape: tuple[int, ...], out_shape: tuple[int, ...]
    ) -> None:
        #: The stream every device call of the audio side goes on (copies, replays, writes).
        self.stream = torch.cuda.Stream(device)
        #: The forward's input: one device tensor, the same at every block.
        self.input = torch.zeros(in_shape, device=device)
        self._host_in = torch.zeros(in_shape, pin_memory=True)
        self._host_out = torch.zeros(out_shape, pin_memory=True)
        self._in = self._host_in.numpy().reshape(-1, in_shape[-1])
        self._out = self._host_out.numpy().reshape(-1, out_shape[-1])

    def on_stream(self) -> contextlib.AbstractContextManager:
        """Queue the device work of the block (weight copies, parameter writes) on the stream."""
        return torch.cuda.stream(self.stream)

    def run(self, block: np.ndarray, forward: Callable[[torch.Tensor], torch.Tensor]) -> np.ndarray:
        """``forward`` on ``block`` (float32 ``[channels, frames]``), its output as a new float32
        array ``[channels, frames]``."""
        self._in[...] = block
        with torch.cuda.stream(self.stream):
            self.input.copy_(self._host_in, non_blocking=True)
            self._host_out.copy_(forward(self.input), non_blocking=True)
        self.stream.synchronize()
        return self._out.copy()

    def settle(self) -> None:
        """Wait for the work queued so far (what it read may then be freed elsewhere)."""
        self.stream.synchronize()
