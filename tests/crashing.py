"""A model folder whose own code may kill its process, fail or misbehave: the probe's and the
live switch's tests load it."""

import torch
from safetensors.torch import save_file

MODEL = """\
import ctypes
import os
import torch
{top}

class Crash(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 1, 1)

    def forward(self, x):
        {call}
        return self.conv(x)
"""


def crashing_model(folder, top="", call="pass"):
    folder.mkdir()
    (folder / "model.py").write_text(MODEL.format(top=top, call=call))
    (folder / "manifest.toml").write_text(
        'class = "model.py:Crash"\nblock = 256\n[versions]\ndefault = "w.safetensors"\n'
    )
    weights = {"conv.weight": torch.ones(1, 1, 1), "conv.bias": torch.zeros(1)}
    save_file(weights, str(folder / "w.safetensors"))
    return folder
