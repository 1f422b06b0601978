"""Helpers shared by the training scripts (``train_drive.py``, ``train_wavae.py``) and
``check_models.py``: seeding, loading a model class from its ``model.py``, streaming a signal
through a model block by block, the ESR metric, saving weights and writing ``manifest.toml``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bendserver.files import write_text, writing

ROOT = Path(__file__).resolve().parent.parent
"""Repository root (the parent of ``scripts/``)."""


def parse_args(name: str, description: str) -> argparse.Namespace:
    """The common command line: ``[--out DIR] [--quick]``; ``--out`` defaults to the shipped
    model's folder, ``models/<name>``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "models" / name,
        help="model directory to write (default: %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few steps on little data: a smoke test that takes seconds",
    )
    return parser.parse_args()


def seed_everything(seed: int) -> np.random.Generator:
    """Seed torch, use one thread (the other core stays free) and return a numpy generator."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    return np.random.default_rng(seed)


def load_model_class(model_file: Path, class_name: str) -> type[nn.Module]:
    """Import ``model_file`` as a standalone module and return its class ``class_name``.

    Model files are self-contained, so importing them by path (not as a package) is enough.
    """
    spec = importlib.util.spec_from_file_location(f"_bundled_{model_file.parent.name}", model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, class_name)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def to_tensor(audio: np.ndarray) -> torch.Tensor:
    """A mono numpy signal as a [1, 1, T] float32 tensor."""
    return torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)).view(1, 1, -1)


@torch.no_grad()
def stream(
    model: nn.Module, audio: np.ndarray, block: int, method: Callable | None = None
) -> np.ndarray:
    """Run ``audio`` through ``method`` (default ``model.forward``) in blocks of ``block``.

    The state is reset first, so the result is what a host would hear from a fresh stream.
    A trailing partial block is zero-padded and the output cut back to ``len(audio)``.
    """
    method = method or model.forward
    model.reset_state()
    frames = math.ceil(len(audio) / block) * block
    x = to_tensor(np.pad(audio, (0, frames - len(audio))))
    out = [method(x[..., i : i + block]) for i in range(0, frames, block)]
    return torch.cat(out, dim=-1)[0, 0, : len(audio)].numpy()


def esr(output: np.ndarray | torch.Tensor, target: np.ndarray | torch.Tensor) -> float:
    """Error-to-signal ratio ``sum((y - t)^2) / sum(t^2)``: 0 is perfect, 1 is silence."""
    y = np.asarray(output, dtype=np.float64)
    t = np.asarray(target, dtype=np.float64)
    return float(np.sum((y - t) ** 2) / max(np.sum(t**2), 1e-20))


def cosine_lr(step: int, steps: int, base: float, floor: float, warmup: int = 50) -> float:
    """Learning rate with a linear warm-up then a cosine decay from ``base`` to ``floor``."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + 0.5 * (base - floor) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def save_weights(model: nn.Module, path: Path) -> None:
    """Save the state dict (caches zeroed, tensors contiguous) as a safetensors file."""
    from safetensors.torch import save_file

    model.reset_state()
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    with writing(path) as temp:  # a model folder never holds half a weights file
        save_file(state, str(temp))


def _toml_value(value: Any) -> str:
    """One TOML value: strings quoted, floats to 4 digits, bools lowercase, lists inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(float(f"{value:.4g}"))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_lines(data: dict[str, Any], name: str) -> list[str]:
    """Lines of table ``name`` (scalars under a header), then its sub-tables, recursively."""
    scalars = [f"{key} = {_toml_value(v)}" for key, v in data.items() if not isinstance(v, dict)]
    lines = ([f"[{name}]"] if name and scalars else []) + scalars
    for key, value in data.items():
        if isinstance(value, dict):
            sub = _toml_lines(value, f"{name}.{key}" if name else key)
            lines += [""] + sub if lines else sub
    return lines


def format_toml(data: dict[str, Any]) -> str:
    """Format nested dicts as TOML: top-level scalars, then one ``[table]`` per nested dict."""
    return "\n".join(_toml_lines(data, "")) + "\n"


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.toml``, checking (where ``tomllib`` exists) that it parses back."""
    text = format_toml(manifest)
    try:
        import tomllib
    except ImportError:  # Python 3.10: no parser in the standard library
        tomllib = None
    if tomllib is not None and tomllib.loads(text) != _rounded(manifest):
        raise ValueError("manifest did not round-trip through TOML")
    write_text(path, text)


def _rounded(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with floats rounded as :func:`_toml_value` writes them (for the round trip)."""
    return {
        k: _rounded(v)
        if isinstance(v, dict)
        else float(f"{v:.4g}")
        if type(v) is float
        else list(v)
        if isinstance(v, tuple)
        else v
        for k, v in data.items()
    }


def step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    index: int,
    steps: int,
    start: float,
) -> None:
    """One optimizer step with gradients clipped to norm 1; progress every 100 steps."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if index % 100 == 0 or index == steps - 1:
        print(f"step {index:5d}  loss {loss.item():.4f}  {time.time() - start:6.1f} s", flush=True)
