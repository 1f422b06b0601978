"""A TorchScript file's latency at load: what the measurement costs, and what it finds against
an impulse compared with silence through the engine (same state, same seed): the first output
sample the impulse changes, the first whose change is within 60 dB and 120 dB of the largest,
and where the largest is (the peak of the impulse response, what a user's click test sees).

Usage: ``python scripts/bench_latency.py FILE.ts [FILE.ts ...]`` (one torch thread).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

import bendserver as tb


def impulse_response(engine: tb.StreamEngine, amplitude: float, blocks: int = 8) -> np.ndarray:
    """What an impulse at sample 0 changes in the output, against silence (per sample, the
    largest change over the channels)."""
    silence = np.zeros((engine.in_channels, engine.block * blocks), np.float32)
    impulse = silence.copy()
    impulse[:, 0] = amplitude
    outputs = []
    for signal in (silence, impulse):
        engine.reset_state()
        torch.manual_seed(0)
        outputs.append(np.concatenate(list(engine.stream(signal)), -1).astype(np.float64))
    return np.abs(outputs[1] - outputs[0]).max(0)


def first(changed: np.ndarray, floor: float = 0.0) -> int | None:
    """The first sample whose change is above ``floor``."""
    above = np.flatnonzero(changed > floor)
    return int(above[0]) if len(above) else None


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
        responses = {a: impulse_response(engine, a) for a in (1.0, 100.0)}
        onsets = {a: first(r) for a, r in responses.items()}
        response = responses[1.0]
        peak = float(response.max())
        print(
            f"{file}: latency {model.latency} samples ({model.latency_source}), "
            f"{1000 * model.latency / model.sample_rate:.2f} ms at {model.sample_rate} Hz; load "
            f"{given:.2f} s given, {measured:.2f} s measured; an impulse through the engine "
            f"first changes sample {onsets[1.0]} (amplitude 1), {onsets[100.0]} (amplitude "
            f"100); amplitude 1: within 120 dB of its peak from sample "
            f"{first(response, 1e-6 * peak)}, within 60 dB from {first(response, 1e-3 * peak)}, "
            f"peak {peak:.3g} at sample {int(np.argmax(response))}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
