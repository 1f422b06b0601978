"""Benchmarks printed by ``bendserver bench``: engine against raw eager, in one process.

Per block size: the raw eager module, the engine unbended and the engine with a preset, called
in turn (so machine noise hits all three alike), reported as p50/p99/max per block, ratios of
medians to raw eager, and the real-time factor (block duration / p50). Also the cost of applying
a weight change (an interpolation of every weight) at a block boundary on a 10 M-parameter model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .engine import StreamEngine
from .loader import load_model
from .module import BendedModule


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1e3
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(values.max())}


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_blocks(
    model: str, blocks: Sequence[int], calls: int = 300, preset: str | None = None
) -> dict[str, Any]:
    """Engine vs raw eager for each block size (one torch thread)."""
    torch.set_num_threads(1)
    return {str(block): bench_block(model, block, calls, preset) for block in blocks}


def bench_block(model: str, block: int, calls: int, preset: str | None) -> dict[str, Any]:
    raw_model = load_model(model)
    plain = StreamEngine(load_model(model), block=block)
    preset = preset or raw_model.preset
    bended = StreamEngine(load_model(model), block=block, preset=preset)
    rng = np.random.default_rng(0)
    audio = (0.3 * rng.standard_normal((plain.in_channels, plain.in_frames))).astype(np.float32)
    tensor = torch.from_numpy(audio).unsqueeze(0)
    forward = getattr(raw_model.module, plain.method)

    def raw() -> None:
        with torch.inference_mode():
            forward(tensor)

    runs = {
        "raw eager": raw,
        "engine unbended": lambda: plain.process(audio),
        f"engine + preset {preset}": lambda: bended.process(audio),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        for _ in range(10):
            fn()
    for _ in range(calls):
        for name, fn in runs.items():
            samples[name].append(_timed(fn))
    duration_ms = 1e3 * block / plain.sample_rate
    stats = {name: _percentiles(s) for name, s in samples.items()}
    raw_p50 = stats["raw eager"]["p50_ms"]
    for entry in stats.values():
        entry["ratio_p50"] = entry["p50_ms"] / raw_p50
        entry["realtime_x"] = duration_ms / entry["p50_ms"]
    return {"block_ms": duration_ms, "runs": stats}


class _WideStack(nn.Module):
    """Three 512-channel convolutions: 10.2 M parameters, for the weight-apply measurement."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(nn.Conv1d(512, 512, 13) for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def bench_weight_apply(repeats: int = 50) -> dict[str, float]:
    """Cost, at the block boundary, of swapping in a prepared interpolation of all weights."""
    torch.manual_seed(0)
    bended = BendedModule(_WideStack())
    bended.create_version("other", _WideStack())
    bank = bended.weight_bank
    prepared = [
        bank.prepare(mix={"_default": 1.0, "other": w}) for w in (0.25, 0.75)
    ]  # the control side's work
    times = [_timed(lambda p=prepared[i % 2]: bank.commit(p)) for i in range(repeats)]
    params = sum(p.numel() for p in bended.module.parameters())
    us = np.asarray(times) * 1e6
    return {
        "parameters": params,
        "tensors": len(prepared[0]),
        "p50_us": float(np.percentile(us, 50)),
        "max_us": float(us.max()),
    }


def format_results(results: dict[str, Any], apply: dict[str, float]) -> str:
    lines = []
    for block, entry in results.items():
        lines.append(f"block {block} ({entry['block_ms']:.2f} ms of audio)")
        lines.append(
            f"  {'':34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'/ raw':>7} {'x realtime':>11}"
        )
        for name, s in entry["runs"].items():
            lines.append(
                f"  {name:34} {s['p50_ms']:8.3f} {s['p99_ms']:8.3f} {s['max_ms']:8.3f} "
                f"{s['ratio_p50']:6.2f}x {s['realtime_x']:10.1f}x"
            )
    lines.append(
        f"weight change applied at a block boundary ({apply['parameters'] / 1e6:.1f} M parameters, "
        f"{apply['tensors']} tensors): p50 {apply['p50_us']:.1f} us, max {apply['max_us']:.1f} us"
    )
    return "\n".join(lines)
