"""DriveNet: a small streaming network that learned a drive effect.

Filters, a per-sample nonlinearity and filters again, built from *cached* causal
convolutions. Each call to :meth:`DriveNet.forward` processes one block of audio and
remembers the last input samples of every convolution in a registered buffer, so
consecutive blocks join seamlessly:
processing a signal in one call equals processing it block by block, whatever the block
sizes. The state lives only in buffers updated in place, which lets a tracer freeze the
model into a fixed graph while keeping the streaming behaviour.

Self-contained: imports only ``torch``.
"""

from __future__ import annotations

import torch
from torch import nn


class CachedConv1d(nn.Module):
    """A causal ``Conv1d`` that keeps its past input in a buffer between calls.

    The ``cache`` buffer holds the last ``dilation * (kernel_size - 1)`` input frames, one row
    per stream of the batch (made again, as silence, when the batch changes). Each call
    prepends it to the block, convolves without padding (so the output has as many frames as
    the block) and stores the new tail in place. After :meth:`reset_state` the layer behaves
    exactly like a causal convolution of a zero-padded signal.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        self.context = dilation * (kernel_size - 1)
        if self.context < 1:
            raise ValueError("CachedConv1d needs kernel_size > 1; use nn.Conv1d for 1x1")
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)
        self.register_buffer("cache", torch.zeros(1, in_channels, self.context))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolve one block ``x`` [B, in, T] -> [B, out, T], continuing from the last call."""
        if self.cache.shape[0] != x.shape[0]:  # one cache row per stream (batch item)
            self.cache = self.cache.new_zeros(x.shape[0], *self.cache.shape[1:])
        padded = torch.cat([self.cache, x], dim=-1)
        self.cache.copy_(padded[..., -self.context :].detach())
        return self.conv(padded)

    def reset_state(self) -> None:
        """Forget the past input (as if the stream started now)."""
        self.cache.zero_()


class DriveNet(nn.Module):
    """A streaming drive effect: [1, 1, T] audio in, [1, 1, T] audio out, no latency.

    A Wiener-Hammerstein network, the classic structure of guitar-amp models, kept small so
    that it renders well over 100x real time on one CPU core:

    - ``pre``: a bank of short causal filters (pre-emphasis, input gain);
    - ``drive_in`` -> ``clip_in`` -> ``drive_out`` -> ``clip_out``: a per-sample nonlinearity
      (1x1 convolutions around tanh), where the clipping happens;
    - ``tone``: a causal filter mixing the channels back to one (the tone stack);
    - ``sag``: a sparse, dilated filter over the last ``sag_taps * sag_dilation`` samples, the
      slow part of the effect (the DC drift that asymmetric clipping causes).

    Args:
        channels: channels between the filters and the nonlinearity.
        hidden: width of the nonlinearity.
        pre_taps, tone_taps: lengths of the input and tone filters.
        sag_taps, sag_dilation: taps and spacing of the slow filter.
    """

    def __init__(
        self,
        channels: int = 8,
        hidden: int = 16,
        pre_taps: int = 4,
        tone_taps: int = 16,
        sag_taps: int = 8,
        sag_dilation: int = 128,
    ):
        super().__init__()
        self.pre = CachedConv1d(1, channels, pre_taps)
        self.drive_in = nn.Conv1d(channels, hidden, 1)
        self.clip_in = nn.Tanh()
        self.drive_out = nn.Conv1d(hidden, channels, 1)
        self.clip_out = nn.Tanh()
        self.tone = CachedConv1d(channels, 1, tone_taps)
        self.sag = CachedConv1d(channels, 1, sag_taps, sag_dilation)
        self.receptive_field = pre_taps + max(tone_taps, 1 + (sag_taps - 1) * sag_dilation) - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Process one block of audio [1, 1, T] (any T >= 1) -> [1, 1, T]."""
        h = self.clip_in(self.drive_in(self.pre(x)))
        h = self.clip_out(self.drive_out(h))
        return self.tone(h) + self.sag(h)

    def reset_state(self) -> None:
        """Zero every cache in place: the next block starts a new stream."""
        for module in self.modules():
            if isinstance(module, CachedConv1d):
                module.reset_state()
