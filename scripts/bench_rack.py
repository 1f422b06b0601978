"""What a rack's block loop costs: a chain of models played as one rack against the same models
as separate engines called one after the other, per block (p50 and max, ms), in one process.

    python scripts/bench_rack.py --models drive,wavae --block 256 --calls 300
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bendserver.rackspec import RackSpec


def timed(calls: dict, block: np.ndarray, count: int) -> dict[str, tuple[float, float]]:
    """p50 and max (ms) of ``count`` timed calls of each of ``calls``, taken in turn (so that
    a busy machine slows each alike), after 20 untimed ones."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for index in range(20 + count):
        for name, call in calls.items():
            started = time.perf_counter()
            call(block)
            if index >= 20:
                times[name].append(time.perf_counter() - started)
    return {
        name: (float(np.percentile(np.array(t) * 1e3, 50)), 1e3 * max(t))
        for name, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="drive,wavae", help="models of the chain, in order")
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    models = args.models.split(",")
    rack = RackSpec.chain(models).build(block=args.block, fuse=False)
    # each model alone, with the same preset as in the rack (its own)
    engines = [RackSpec.chain([m]).build(block=args.block, fuse=False) for m in models]

    def separate(x: np.ndarray) -> np.ndarray:
        for engine in engines:
            x = engine.process(x)
        return x

    block = (0.3 * np.random.default_rng(0).standard_normal((1, args.block))).astype(np.float32)
    calls = {"rack": rack.process, "engines one after the other": separate}
    for name, (p50, most) in timed(calls, block, args.calls).items():
        print(
            f"{name:30s} p50 {p50:.3f} ms  max {most:.3f} ms  ({' -> '.join(models)}, "
            f"block {args.block}, {args.calls} calls)"
        )


if __name__ == "__main__":
    main()
