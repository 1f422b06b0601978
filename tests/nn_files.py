"""nn~ files made by the nn-tilde package itself, as performers make theirs.

``kinds_file`` builds one with nn-tilde 1.6 (installed in the environment): attributes of every
type nn~ has (float, int with a setter that refuses some values, bool, a string whose setter
names its choices, a list of mixed types, a tensor, a buffer), a method converting into a
graph, one reading the buffer, methods giving and taking frames at a control rate and one of
several channels in and out. ``legacy_file`` builds one with nn-tilde 1.5 (what acids-rave 2.3
exports with), which ``make install`` puts in a folder of its own beside the environment's
packages: a subprocess puts it on its path, so it never replaces the 1.6 package here.

``direct`` loads a file as nn~ does (``torch.jit.load``, ``set_sample_rate``): the reference
every test compares with.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

#: Where ``make install`` puts nn-tilde 1.5 (``--target``): on no path but the builder's.
LEGACY_NN_TILDE = Path(sys.prefix) / "nn-tilde-1.5"
#: Frames of the control-rate methods: one per this many samples.
RATIO = 256

_KINDS = """
from typing import Tuple

import nn_tilde
import torch


class Kinds(nn_tilde.Module):
    buf: Tuple[nn_tilde.Buffer]

    def __init__(self):
        super().__init__(sr=44100)
        self.register_attribute("gain", 1.0)
        self.register_attribute("steps", 2)
        self.register_attribute("flip", False)
        self.register_attribute("mode", "tanh")
        self.register_attribute("mix", (1, "dry", 0.5, True))
        self.register_attribute("table", torch.zeros(8))
        self.register_attribute("buf", (nn_tilde.Buffer(None, 1, 4096)))
        self.register_method("forward", 1, 1, 1, 1)
        self.register_method("loud", 1, 1, 1, 1)
        self.register_method("level", 1, 1, 2, RATIO)
        self.register_method("hold", 2, RATIO, 1, 1)
        self.register_method("spread", 2, 1, 3, 1)
        self.finish()

    @torch.jit.export
    def set_steps(self, steps: int) -> int:
        if steps < 1:
            return -1
        self.steps = (steps,)
        return 0

    @torch.jit.export
    def set_mode(self, mode: str) -> int:
        if mode != "tanh" and mode != "clip":
            return -1
        self.mode = (mode,)
        return 0

    @torch.jit.export
    def forward(self, x: torch.Tensor):
        y = x * self.gain[0] * float(self.steps[0])
        if self.flip[0]:
            y = -y
        if self.mode[0] == "tanh":
            y = torch.tanh(y)
        else:
            y = torch.clamp(y, -0.5, 0.5)
        count, kind, amount, on = self.mix
        if on:
            y = y * amount + 0.01 * float(count)
        if kind == "wet":
            y = y * 2.0
        return y + self.table[0].mean()

    @torch.jit.export
    def loud(self, x: torch.Tensor):
        buffer = self.buf[0]
        if buffer.has_value:
            level = buffer.value.pow(2).mean().sqrt().item() + float(buffer.sr) / 1e6
            return torch.full_like(x, fill_value=level)
        return torch.zeros_like(x)

    @torch.jit.export
    def level(self, x: torch.Tensor):
        frames = x.reshape(x.shape[0], x.shape[1], -1, RATIO)
        return torch.cat([frames.pow(2).mean(-1), frames.abs().amax(-1)], 1)

    @torch.jit.export
    def hold(self, x: torch.Tensor):
        held = x.repeat_interleave(RATIO, dim=-1)
        return (held[:, :1] * torch.sin(held[:, 1:] * 3.0)).contiguous()

    @torch.jit.export
    def spread(self, x: torch.Tensor):
        a, b = x[:, :1], x[:, 1:]
        return torch.cat([a, b, a - 0.5 * b], 1)


Kinds().export_to_ts(PATH)
"""

_LEGACY = """
import nn_tilde
import torch


class Legacy(nn_tilde.Module):
    def __init__(self):
        super().__init__()
        self.register_attribute("gain", 1.0)
        self.register_method("forward", 1, 1, 1, 1)
        self.register_method("encode", 1, 1, 2, RATIO)

    @torch.jit.export
    def get_gain(self) -> float:
        return self.gain[0]

    @torch.jit.export
    def set_gain(self, gain: float) -> int:
        self.gain = (gain,)
        return 0

    def forward(self, x: torch.Tensor):
        return x * self.gain[0]

    @torch.jit.export
    def encode(self, x: torch.Tensor):
        frames = x.reshape(x.shape[0], x.shape[1], -1, RATIO)
        return torch.cat([frames.mean(-1), frames.std(-1)], 1) * self.gain[0]


Legacy().export_to_ts(PATH)
"""


def _build(source: str, path: Path, legacy: bool = False) -> Path:
    """Run the builder ``source`` in a subprocess (nn-tilde's code generation writes files of
    its own), with nn-tilde 1.5 first on its path where ``legacy``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if legacy:
        env["PYTHONPATH"] = str(LEGACY_NN_TILDE)
    script = path.with_suffix(".py")  # TorchScript reads the class's source from its file
    code = textwrap.dedent(source).replace("RATIO", str(RATIO)).replace("PATH", repr(str(path)))
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return path


def kinds_file(folder: Path) -> Path:
    """The nn-tilde 1.6 file described above, in ``folder``."""
    return _build(_KINDS, folder / "kinds.ts")


def legacy_file(folder: Path) -> Path:
    """A file made by nn-tilde 1.5: it lists an attribute ``none`` with no getter nor setter;
    ``gain`` has both; ``encode`` gives two channels of frames."""
    if not (LEGACY_NN_TILDE / "nn_tilde").is_dir():
        pytest.skip(f"nn-tilde 1.5 is not in {LEGACY_NN_TILDE} (make install puts it there)")
    return _build(_LEGACY, folder / "legacy.ts", legacy=True)


def direct(path: Path, rate: int | None = None) -> torch.jit.ScriptModule:
    """The file as nn~ loads it: ``torch.jit.load``, ``eval``, ``set_sample_rate`` (with the
    file's own rate, as bendserver does)."""
    module = torch.jit.load(str(path)).eval()
    if rate is not None and hasattr(module, "set_sample_rate"):
        module.set_sample_rate(rate)
    return module
