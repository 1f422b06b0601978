"""A TorchScript file's latency at load: what the measurement costs, and what it finds against
an impulse compared with silence through the engine (same state, same seed).

Usage: ``python scripts/bench_latency.py FILE.ts [FILE.ts ...]`` (one torch thread).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

import bendserver as tb


def impulse_onset(engine: tb.StreamEngine, amplitude: float, blocks: int = 8) -> int | None:
    """The first output sample an impulse at sample 0 changes, compared with silence."""
    silence = np.zeros((engine.in_channels, engine.block * blocks), np.float32)
    impulse = silence.copy()
    impulse[:, 0] = amplitude
    outputs = []
    for signal in (silence, impulse):
        engine.reset_state()
        torch.manual_seed(0)
        outputs.append(np.concatenate(list(engine.stream(signal)), -1))
    changed = np.flatnonzero((outputs[0] != outputs[1]).any(0))
    return int(changed[0]) if len(changed) else None


def main(files: list[str]) -> None:
    torch.set_num_threads(1)
    for file in files:
        start = time.perf_counter()
        tb.load_model(file, latency=0)
        given = time.perf_counter() - start
        start = time.perf_counter()
        model = tb.load_model(file)
        measured = time.perf_counter() - start
        engine = tb.StreamEngine(model, fuse=False)
        onsets = {a: impulse_onset(engine, a) for a in (1.0, 100.0)}
        print(
            f"{file}: latency {model.latency} samples ({model.latency_source}), "
            f"{1000 * model.latency / model.sample_rate:.2f} ms at {model.sample_rate} Hz; load "
            f"{given:.2f} s given, {measured:.2f} s measured; an impulse through the engine "
            f"first changes sample {onsets[1.0]} (amplitude 1), {onsets[100.0]} (amplitude 100)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
