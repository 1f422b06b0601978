"""DriveTCN: a streaming causal temporal convolutional network that learned a drive effect.

The network is a WaveNet-style stack of gated, dilated, *cached* causal convolutions. Each
call to :meth:`DriveTCN.forward` processes one block of audio and remembers the last input
samples of every convolution in a registered buffer, so consecutive blocks join seamlessly:
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

    The ``cache`` buffer holds the last ``dilation * (kernel_size - 1)`` input frames. Each call
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
        """Convolve one block ``x`` [1, in, T] -> [1, out, T], continuing from the last call."""
        padded = torch.cat([self.cache, x], dim=-1)
        self.cache.copy_(padded[..., -self.context :].detach())
        return self.conv(padded)

    def reset_state(self) -> None:
        """Forget the past input (as if the stream started now)."""
        self.cache.zero_()


class GatedResidualLayer(nn.Module):
    """One dilated layer: ``tanh(a) * sigmoid(b)`` gate, 1x1 mix, residual connection.

    Returns the residual output (input of the next layer) and the gated activation (a skip
    feature that the output head of :class:`DriveTCN` mixes).
    """

    def __init__(self, channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.dilated = CachedConv1d(channels, 2 * channels, kernel_size, dilation)
        self.filter_act = nn.Tanh()
        self.gate_act = nn.Sigmoid()
        self.mix = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Process [1, C, T]; return ``(residual output, skip feature)``, both [1, C, T]."""
        filt, gate = self.dilated(x).chunk(2, dim=1)
        z = self.filter_act(filt) * self.gate_act(gate)
        return x + self.mix(z), z


class DriveTCN(nn.Module):
    """A causal TCN drive effect: [1, 1, T] audio in, [1, 1, T] audio out, no latency.

    Layer ``i`` has dilation ``2 ** i``, so the receptive field is
    ``1 + (kernel_size - 1) * (2 ** layers - 1)`` samples (2047 samples, 43 ms at 48 kHz with
    the defaults): enough for the filters and the slow DC drift of asymmetric clipping that the
    target effect has. The output head is a 1x1 convolution over every layer's gated
    activation plus the dry input (a direct linear path).

    Args:
        channels: width of every hidden layer.
        layers: number of gated dilated layers (dilations 1, 2, 4, ...).
        kernel_size: kernel size of the dilated convolutions.
    """

    def __init__(self, channels: int = 16, layers: int = 10, kernel_size: int = 3):
        super().__init__()
        self.inp = nn.Conv1d(1, channels, 1)
        self.layers = nn.ModuleList(
            GatedResidualLayer(channels, kernel_size, 2**i) for i in range(layers)
        )
        self.head = nn.Conv1d(channels * layers + 1, 1, 1)
        self.receptive_field = 1 + (kernel_size - 1) * (2**layers - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Process one block of audio [1, 1, T] (any T >= 1) -> [1, 1, T]."""
        h = self.inp(x)
        skips = [x]
        for layer in self.layers:
            h, z = layer(h)
            skips.append(z)
        return self.head(torch.cat(skips, dim=1))

    def reset_state(self) -> None:
        """Zero every cache in place: the next block starts a new stream."""
        for module in self.modules():
            if isinstance(module, CachedConv1d):
                module.reset_state()
