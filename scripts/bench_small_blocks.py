"""What each of the small-block passes wins: a model's forward built with the passes up to each
one, called in turn in one process (a busy machine slows each alike), with the direct call of
a ``.ts`` file (or the raw eager module) first.

Prints, per variant, the CPU time of a call (this thread's: the machine's other work does not
count, memory stalls do) and its wall time, p50/p99/max, the ratio of CPU p50s to the first
row, and the operator calls torch's profiler counts in one block (nested ones included).

Usage: ``python scripts/bench_small_blocks.py MODEL [--block 128] [--calls 300]
[--latency N]`` (a ``.ts`` file: give ``--latency`` to skip measuring it at load).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from bendserver.engine import StreamEngine
from bendserver.loader import load_model
from bendserver.passes import pipeline

#: The passes the native runs come with (guards and draws moved first, then the runs).
NATIVE = ("early-guards", "early-draws", "native-runs")
#: The variants: the passes but those named (the first: the passes before the small-block ones).
VARIANTS = {
    "passes before": ("grouped-convolutions", "fixed-views", "fixed-rows", "scripted-runs")
    + NATIVE,
    "+ grouped convolutions": ("fixed-views", "fixed-rows", "scripted-runs", *NATIVE),
    "+ fixed views": ("fixed-rows", "scripted-runs", *NATIVE),
    "+ fixed rows": ("scripted-runs", *NATIVE),
    "+ scripted runs": NATIVE,
    "+ native runs (all)": (),
}


def _forward(model: str, block: int, latency: int | None, left_out: tuple[str, ...]):
    everything = pipeline.PASSES
    pipeline.PASSES = tuple(p for p in everything if p.name not in left_out)
    try:
        engine = StreamEngine(load_model(model, latency=latency), block=block, fuse=False)
    finally:
        pipeline.PASSES = everything
    return engine.node._forward


def _operators(forward: Callable, x: torch.Tensor) -> int:
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as run:
        forward(x)
    return sum(1 for event in run.events() if event.name.startswith("aten::"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--latency", type=int)
    args = parser.parse_args()
    torch.set_num_threads(1)
    raw = load_model(args.model, latency=args.latency)
    method = raw.module.forward
    runs = {"direct call" if raw.bended.scripted else "raw eager": method}
    for name, left_out in VARIANTS.items():
        runs[name] = _forward(args.model, args.block, args.latency, left_out)
    x = 0.3 * torch.randn(1, 1, args.block)
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for forward in runs.values():
            for _ in range(20):
                forward(x)
        for _ in range(args.calls):
            for name, forward in runs.items():
                started, spent = time.perf_counter(), time.thread_time()
                forward(x)
                cpu[name].append(time.thread_time() - spent)
                wall[name].append(time.perf_counter() - started)
    first = float(np.median(next(iter(cpu.values()))))
    print(f"{args.model} at block {args.block}, one thread, {args.calls} calls of each in turn")
    print(f"{'':26} {'cpu p50':>8} {'p99':>7} {'max':>7} {'wall p50':>9} {'p99':>7} {'max':>7}"
          f" {'cpu / 1st':>9} {'operators':>9}")  # fmt: skip
    for name, forward in runs.items():
        c, w = np.asarray(cpu[name]) * 1e3, np.asarray(wall[name]) * 1e3
        print(
            f"{name:26} {np.median(c):8.3f} {np.percentile(c, 99):7.3f} {c.max():7.3f} "
            f"{np.median(w):9.3f} {np.percentile(w, 99):7.3f} {w.max():7.3f} "
            f"{np.median(c) / first / 1e3:8.2f}x {_operators(forward, x):9d}"
        )


if __name__ == "__main__":
    main()
