"""Cost of the output fuse per block (p50/p99/max, microseconds) at several block sizes, against
a plain ``np.clip`` of the same block, in one run. Usage: ``python scripts/bench_fuse.py``."""

from __future__ import annotations

import time

import numpy as np

from bendserver.engine import OutputFuse


def main(blocks: tuple[int, ...] = (128, 256, 2048), calls: int = 2000) -> None:
    rng = np.random.default_rng(0)
    print(f"{'block':>6} {'run':>16} {'p50 us':>8} {'p99 us':>8} {'max us':>8}")
    for block in blocks:
        audio = (0.3 * rng.standard_normal((1, block))).astype(np.float32)
        loud = audio * 4  # the limiter at work on most samples
        fuse = OutputFuse(1, 48000)
        runs = {
            "np.clip": lambda a=audio: np.clip(a, -0.99, 0.99),
            "fuse, clean": lambda a=audio, f=fuse: f.process(a),
            "fuse, limiting": lambda a=loud, f=fuse: f.process(a),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(calls):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        for name, samples in times.items():
            us = np.asarray(samples) * 1e6
            p50, p99 = np.percentile(us, [50, 99])
            print(f"{block:>6} {name:>16} {p50:8.1f} {p99:8.1f} {us.max():8.1f}")


if __name__ == "__main__":
    main()
