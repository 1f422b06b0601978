"""WaveAE: a streaming waveform autoencoder (cached causal convolutions, pixel-shuffle decoder).

The encoder turns audio [1, 1, T] into a latent sequence [1, D, T / r] with strided causal
convolutions (r = product of ``strides``); the decoder maps it back to audio [1, 1, T] with
"pixel shuffle" upsampling: a causal convolution makes ``s * C`` channels per latent frame
which are reshaped into ``s`` consecutive frames of ``C`` channels. Nothing overlaps between
frames, so no transposed-convolution overlap has to be carried between blocks.

Every convolution with a kernel wider than its stride is a :class:`CachedConv1d` that keeps
its past input in a buffer updated in place, so :meth:`WaveAE.encode`, :meth:`WaveAE.decode`
and :meth:`WaveAE.forward` stream: one call on a whole signal equals consecutive calls on
its blocks, for any blocks whose length is a multiple of r (latent blocks: any length).
Encoder and decoder have separate caches, so each can run on its own stream.

The trunk (input/output convolutions, strided convolutions, pixel shuffles) is linear; the
nonlinearity (LeakyReLU) lives in residual units at every rate. With the defaults the ratio is
32 and the latent has 8 channels at 1.5 kHz, a 4x reduction of the sample count.

Timing: a latent frame summarizes the r input samples it ends with, and the decoder writes
those r samples from it, so ``forward`` is causal at the granularity of r-sample frames and
adds no delay beyond the block buffering a host already does (latency 0).

Self-contained: imports only ``torch``.
"""

from __future__ import annotations

import torch
from torch import nn


class CachedConv1d(nn.Module):
    """A causal, optionally strided ``Conv1d`` that keeps its past input in a buffer.

    The ``cache`` holds the last ``dilation * (kernel_size - 1) + 1 - stride`` input frames.
    Each call prepends it to the block and convolves without padding; with stride ``s`` a
    block of ``n * s`` frames gives ``n`` output frames, output frame ``j`` ending exactly at
    input frame ``j * s + s - 1``. The new tail of the input is stored in place, one row per
    stream of the batch (made again, as silence, when the batch changes).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        dilation: int = 1,
    ):
        super().__init__()
        self.context = dilation * (kernel_size - 1) + 1 - stride
        if self.context < 1:
            raise ValueError("CachedConv1d needs a kernel wider than its stride")
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size, stride=stride, dilation=dilation
        )
        self.register_buffer("cache", torch.zeros(1, in_channels, self.context))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolve one block [1, in, n * stride] -> [1, out, n], continuing the last call."""
        if self.cache.shape[0] != x.shape[0]:  # one cache row per stream (batch item)
            self.cache = self.cache.new_zeros(x.shape[0], *self.cache.shape[1:])
        padded = torch.cat([self.cache, x], dim=-1)
        self.cache.copy_(padded[..., -self.context :].detach())
        return self.conv(padded)


class ResidualUnit(nn.Module):
    """``x + conv1x1(act(cached dilated conv(act(x))))``: adds context without changing rate.

    The 1x1 output conv starts at zero, so a new unit is the identity: the untrained network
    is a linear trunk (convolutions and pixel shuffles) that trains fast and stably, and the
    nonlinear branches grow in from there.
    """

    def __init__(self, channels: int, dilation: int):
        super().__init__()
        self.act1 = nn.LeakyReLU(0.2)
        self.conv = CachedConv1d(channels, channels, 3, dilation=dilation)
        self.act2 = nn.LeakyReLU(0.2)
        self.mix = nn.Conv1d(channels, channels, 1)
        nn.init.zeros_(self.mix.weight)
        nn.init.zeros_(self.mix.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[1, C, T] -> [1, C, T]."""
        return x + self.mix(self.act2(self.conv(self.act1(x))))


class DownBlock(nn.Module):
    """Residual units at the input rate, then a strided causal conv (kernel ``2 * stride``)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.units = nn.Sequential(ResidualUnit(in_channels, 1), ResidualUnit(in_channels, 3))
        self.down = CachedConv1d(in_channels, out_channels, 2 * stride, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[1, in, n * stride] -> [1, out, n]."""
        return self.down(self.units(x))


class PixelShuffleUp(nn.Module):
    """Causal conv to ``factor * out`` channels, reshaped into ``factor`` frames per input frame.

    Output frame ``j * factor + i`` takes channels ``[c * factor + i]`` of input frame ``j``.
    """

    def __init__(self, in_channels: int, out_channels: int, factor: int):
        super().__init__()
        self.out_channels = out_channels
        self.factor = factor
        self.conv = CachedConv1d(in_channels, out_channels * factor, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[1, in, n] -> [1, out, n * factor]."""
        y = self.conv(x)
        y = y.reshape(y.shape[0], self.out_channels, self.factor, y.shape[-1])
        return y.transpose(2, 3).reshape(y.shape[0], self.out_channels, -1)


class UpBlock(nn.Module):
    """Pixel-shuffle upsampling by ``stride``, then residual units at the new rate."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.up = PixelShuffleUp(in_channels, out_channels, stride)
        self.units = nn.Sequential(ResidualUnit(out_channels, 1), ResidualUnit(out_channels, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[1, in, n] -> [1, out, n * stride]."""
        return self.units(self.up(x))


class Encoder(nn.Module):
    """Audio [1, 1, T] -> latent [1, latent_dim, T / ratio]."""

    def __init__(self, channels: list[int], strides: list[int], latent_dim: int):
        super().__init__()
        self.inp = CachedConv1d(1, channels[0], 7)
        self.blocks = nn.Sequential(
            *(DownBlock(channels[i], channels[i + 1], s) for i, s in enumerate(strides))
        )
        self.out = CachedConv1d(channels[-1], latent_dim, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode one block of audio."""
        return self.out(self.blocks(self.inp(x)))


class Decoder(nn.Module):
    """Latent [1, latent_dim, N] -> audio [1, 1, N * ratio]."""

    def __init__(self, channels: list[int], strides: list[int], latent_dim: int):
        super().__init__()
        self.inp = CachedConv1d(latent_dim, channels[-1], 3)
        self.blocks = nn.Sequential(
            *(
                UpBlock(channels[i + 1], channels[i], s)
                for i, s in reversed(list(enumerate(strides)))
            )
        )
        self.out = CachedConv1d(channels[0], 1, 7)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Decode one block of latent frames."""
        return self.out(self.blocks(self.inp(z)))


class WaveAE(nn.Module):
    """Streaming waveform autoencoder: ``encode`` audio to a slow latent, ``decode`` it back.

    Args:
        latent_dim: latent channels D.
        channels: encoder widths per rate, from the audio rate down (one more entry than
            ``strides``); the decoder mirrors them.
        strides: downsampling factor of each encoder stage; ``ratio`` is their product.

    Audio blocks must be multiples of ``ratio``; latent blocks may have any length.
    ``latent_dim`` and ``ratio`` are plain attributes (configuration, not state).
    """

    def __init__(
        self,
        latent_dim: int = 8,
        channels: list[int] | None = None,
        strides: list[int] | None = None,
    ):
        super().__init__()
        channels = list(channels or [16, 32, 64, 80, 96])
        strides = list(strides or [2, 2, 2, 4])
        if len(channels) != len(strides) + 1:
            raise ValueError("channels needs one more entry than strides")
        self.latent_dim = latent_dim
        self.ratio = 1
        for s in strides:
            self.ratio *= s
        self.encoder = Encoder(channels, strides, latent_dim)
        self.decoder = Decoder(channels, strides, latent_dim)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Audio block [1, 1, n * ratio] -> latent block [1, latent_dim, n]."""
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Latent block [1, latent_dim, n] -> audio block [1, 1, n * ratio]."""
        return self.decoder(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruct one audio block: ``decode(encode(x))``."""
        return self.decode(self.encode(x))

    def reset_state(self) -> None:
        """Zero the encoder and decoder caches in place: the next block starts a new stream."""
        for buffer in self.buffers():
            buffer.zero_()
