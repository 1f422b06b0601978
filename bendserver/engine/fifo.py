"""Adapting the device's block size to the model's with a pair of FIFOs.

Each device callback pushes ``device_block`` input frames and pops as many output frames; the
model runs whenever a whole model block is available. The output FIFO starts with just enough
zeros never to run dry, which is the latency this adds: ``block - gcd(block, device_block)``
frames when the device block does not divide into whole model blocks, else 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


class BlockAdapter:
    """Calls ``process`` on model-sized blocks for callers that deliver other sizes."""

    def __init__(
        self,
        process: Callable[[np.ndarray], np.ndarray],
        block: int,
        device_block: int,
        in_channels: int,
        out_channels: int,
    ) -> None:
        self.process_block = process
        self.block = block
        self.device_block = device_block
        self.latency = 0 if device_block % block == 0 else block - math.gcd(block, device_block)
        size = block + device_block + self.latency
        self._in = np.zeros((in_channels, size + block), dtype=np.float32)
        self._out = np.zeros((out_channels, size + block), dtype=np.float32)
        self._in_fill = 0
        self._out_fill = self.latency

    def process(self, frames: np.ndarray) -> np.ndarray:
        """Push ``frames`` [channels, n] in, pop ``n`` output frames."""
        n = frames.shape[-1]
        self._in[:, self._in_fill : self._in_fill + n] = frames
        self._in_fill += n
        while self._in_fill >= self.block:
            out = self.process_block(self._in[:, : self.block].copy())
            self._out[:, self._out_fill : self._out_fill + self.block] = out
            self._out_fill += self.block
            self._in[:, : self._in_fill - self.block] = self._in[:, self.block : self._in_fill]
            self._in_fill -= self.block
        result = self._out[:, :n].copy()
        self._out[:, : self._out_fill - n] = self._out[:, n : self._out_fill]
        self._out_fill -= n
        return result
