"""A rack exported as one nn~ file: how long the export takes, the file's size, and its time per
block called from plain torch against the live rack (without its fuse) on the same blocks, in
turn, one torch thread. Usage: ``python scripts/bench_rack_export.py [--block 256] [--calls 300]``
(racks: ``drive -> wavae`` and the shipped ``wavae_drive``)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bendserver.export.rack import export_rack
from bendserver.rackspec import RackSpec

RACKS = {"drive -> wavae": RackSpec.chain(["drive", "wavae"]), "wavae_drive": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"block {args.block}, {args.calls} timed blocks each, 1 torch thread")
    with tempfile.TemporaryDirectory() as folder:
        for name, spec in RACKS.items():
            spec = spec or RackSpec.find(name)
            path = Path(folder) / "rack.ts"
            start = time.perf_counter()
            export_rack(spec, path, block=args.block)
            exported = time.perf_counter() - start
            print(f"{name}: export {exported:.2f} s, file {path.stat().st_size / 1e6:.3f} MB")
            module = torch.jit.load(str(path))
            module.get_methods()  # as nn~ does on load
            rack = spec.build(block=args.block, fuse=False)
            runs = {
                "file": lambda b, m=module: m(torch.from_numpy(b)[None]),
                "live rack": lambda b, r=rack: r.process(b),
            }
            times: dict[str, list[float]] = {run: [] for run in runs}
            with torch.inference_mode():
                for index in range(args.calls + 20):  # the first 20 warm up, untimed
                    block = (0.3 * rng.standard_normal((1, args.block))).astype(np.float32)
                    for run, call in runs.items():
                        start = time.perf_counter()
                        call(block)
                        if index >= 20:
                            times[run].append(time.perf_counter() - start)
            for run, samples in times.items():
                ms = np.asarray(samples) * 1e3
                p50, p99 = np.percentile(ms, [50, 99])
                print(f"  {run:>9}: p50 {p50:.3f} ms, p99 {p99:.3f}, max {ms.max():.3f}")


if __name__ == "__main__":
    main()
