"""Conversion time and memory of a TorchScript file's methods into graphs, for the closing note
of a change: ``python scripts/convert_ts.py file.ts [--block 2048]``.

Prints, per method, the wall time of the conversion (the IR walked on one example block) and of
the optimising passes, the graph's node count, and the process's peak resident memory before
and after (the file itself loaded once)."""

from __future__ import annotations

import argparse
import resource
import time

import torch

from bendserver.bending.graph import graph_module
from bendserver.loader import load_model
from bendserver.passes import optimize


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--block", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_model(args.file)
    parameters = sum(p.numel() for p in model.module.parameters())
    print(f"{args.file}: {parameters / 1e6:.1f} M parameters, peak {_peak_mib():.0f} MiB loaded")
    for name, spec in model.methods.items():
        argument = model.bended.argument_names(name)[0]
        example = torch.zeros(1, spec.in_channels, args.block // spec.in_ratio)
        started = time.perf_counter()
        graph = model.bended.trace(name, **{argument: example})
        converted = time.perf_counter() - started
        started = time.perf_counter()
        optimize(graph_module(graph, [model.module]), "passes")
        passes = time.perf_counter() - started
        print(
            f"  {name}: converted in {converted:.2f} s ({len(graph.nodes)} nodes), passes "
            f"{passes:.2f} s, peak {_peak_mib():.0f} MiB"
        )


if __name__ == "__main__":
    main()
