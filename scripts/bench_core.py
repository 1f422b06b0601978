"""Cost of a bended call against the raw eager module, measured in one process.

A Conv1d stack on [1, 1, 2048], one torch thread, calls interleaved (raw, traced, bended, ...) so
that machine noise hits all three alike. Prints p50/p99/max per call and the ratios of medians:
    traced, no op            goal <= 1.05x raw eager
    2 activation ops + 1 weight op   goal <= 1.25x raw eager
Usage: python scripts/bench_core.py [--calls 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

import bendserver as tb


class ConvStack(nn.Module):
    """Five 1-d convolutions with tanh, 32 channels: a small audio-rate network."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(1, channels, 7, padding=3), nn.Tanh()]
        for _ in range(3):
            layers += [nn.Conv1d(channels, channels, 5, padding=2), nn.Tanh()]
        layers += [nn.Conv1d(channels, 1, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def percentiles(samples_us: list[float]) -> dict[str, float]:
    ordered = sorted(samples_us)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"p50_us": pick(0.5), "p99_us": pick(0.99), "max_us": ordered[-1]}


def measure(calls: int) -> dict[str, dict[str, float]]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = ConvStack().eval()
    x = torch.randn(1, 1, 2048)

    traced = tb.BendedModule(module)
    traced.trace(x=x)
    bended = tb.BendedModule(module)
    bended.trace(x=x)
    bended.bend(tb.Mask(0.7, dim=1), "net_2")
    bended.bend(tb.Scale(1.5), "net_5")
    bended.bend(tb.Noise(0.05), "net.4.weight")

    runs = {"raw eager": module, "traced, no op": traced, "2 act. ops + 1 weight op": bended}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for fn in runs.values():  # warm-up
            for _ in range(20):
                fn(x)
        for _ in range(calls):
            for name, fn in runs.items():
                start = time.perf_counter_ns()
                fn(x)
                samples[name].append((time.perf_counter_ns() - start) / 1e3)
    stats = {name: percentiles(s) for name, s in samples.items()}
    raw = stats["raw eager"]["p50_us"]
    for entry in stats.values():
        entry["ratio_p50"] = entry["p50_us"] / raw
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    stats = measure(args.calls)
    if args.json:
        print(json.dumps(stats, indent=2))
        return
    print(f"Conv1d stack, [1, 1, 2048], {args.calls} calls each, 1 torch thread")
    print(f"{'':28} {'p50 us':>9} {'p99 us':>9} {'max us':>9} {'p50 / raw':>10}")
    for name, s in stats.items():
        print(
            f"{name:28} {s['p50_us']:9.1f} {s['p99_us']:9.1f} {s['max_us']:9.1f} "
            f"{s['ratio_p50']:9.3f}x"
        )


if __name__ == "__main__":
    main()
