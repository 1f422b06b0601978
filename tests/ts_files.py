"""Scripted files the tests play: a small RAVE-like codec scripted here with cached_conv, and the
real RAVE exports found in the folder BENDSERVER_RAVE_DIR names."""

import os
from pathlib import Path

import pytest
import torch
from torch import nn

cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")

#: The shared builder's RAVE exports: v2 and causal (2 048-sample frames), BRAVE-style (128).
RAVE_FILES = ("rave_v2_streaming.ts", "rave_causal_streaming.ts")
BRAVE_FILE = "brave_c128_streaming.ts"


class Codec(nn.Module):
    """A small RAVE-like nn~ file: a strided cached-conv encoder to a 4-dim latent at 1/4 rate,
    a cached transposed-conv decoder with a branch on an attribute, ``encode``, ``decode``,
    ``forward = decode(encode(x))`` and their ``<method>_params``."""

    def __init__(self) -> None:
        super().__init__()
        cc.use_cached_conv(True)
        self.encoder = nn.Sequential(
            cc.Conv1d(1, 8, 5, padding=cc.get_padding(5, mode="causal")),
            nn.LeakyReLU(0.2),
            cc.Conv1d(8, 4, 8, stride=4, padding=cc.get_padding(8, 4, mode="causal")),
        )
        self.up = cc.ConvTranspose1d(4, 8, 8, stride=4, padding=2)
        self.out = cc.Conv1d(8, 1, 3, padding=cc.get_padding(3, mode="causal"))
        self.gate = True
        self.register_buffer("encode_params", torch.tensor([1, 1, 4, 4]))
        self.register_buffer("decode_params", torch.tensor([4, 4, 1, 1]))
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))
        self.sr = 44100

    @torch.jit.export
    def get_methods(self) -> list[str]:
        return ["encode", "decode", "forward"]

    @torch.jit.export
    def get_attributes(self) -> list[str]:
        return ["gate"]

    @torch.jit.export
    def get_gate(self) -> bool:
        return self.gate

    @torch.jit.export
    def set_gate(self, gate: bool) -> int:
        self.gate = gate
        return 0

    @torch.jit.export
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    @torch.jit.export
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.up(z))
        if self.gate:
            y = y * torch.sigmoid(y)
        for _ in range(2):
            y = y + 0.1 * y.mean(-1, keepdim=True)
        return self.out(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))


def codec_file(folder: Path, seed: int = 0) -> Path:
    """Script and save a Codec, its caches made and zeroed; returns the path."""
    torch.manual_seed(seed)
    model = Codec().eval()
    with torch.no_grad():
        model(torch.zeros(1, 1, 64))
        for buffer in model.buffers():
            if buffer.is_floating_point():
                buffer.zero_()
    path = folder / "codec.ts"
    torch.jit.script(model).save(str(path))
    return path


def rave_files(names: tuple[str, ...] = RAVE_FILES) -> list[Path]:
    """The exports among ``names`` found in BENDSERVER_RAVE_DIR (none where it is unset)."""
    folder = os.environ.get("BENDSERVER_RAVE_DIR")
    return [Path(folder) / f for f in names if (Path(folder) / f).is_file()] if folder else []
