"""What the probe costs: a model loaded and called once in a forked child, as ``/model/load`` and
the commands do before loading it themselves, against loading it in-process.

Usage: ``python scripts/probe_cost.py [--runs 5] MODEL [MODEL ...]`` (names, folders, ``.ts``
files; shipped models too, which the commands do not probe). Prints the median and the largest
of ``--runs`` probes and in-process loads, in seconds (one torch thread, as the server runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bendserver.loader import load_model
from bendserver.probe import probe_model


def timed(call, runs: int) -> tuple[float, float]:
    """The median and largest seconds of ``runs`` calls."""
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), max(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for model in args.models:
        loaded = load_model(model, latency=0)  # what the probe checks its outputs against
        block = loaded.block
        probe = timed(
            lambda m=model, b=block: probe_model(m, check=True, block=b, shipped=True), args.runs
        )
        load = timed(lambda m=model: load_model(m, latency=0), args.runs)
        print(
            f"{model} (block {block}): probe median {probe[0]:.3f} s, max {probe[1]:.3f} s; "
            f"in-process load median {load[0]:.3f} s, max {load[1]:.3f} s ({args.runs} runs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
