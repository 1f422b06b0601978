"""``bendserver bench``: the engine against raw eager per block size, in one process."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from .options import Parents, blocks, positive, retune, sizes


def run(args: argparse.Namespace) -> int:
    """Print the figures of :mod:`bendserver.measure.bench` (a table, or JSON)."""
    import torch

    from ..measure.bench import bench_blocks, bench_rack, bench_weight_apply, format_results
    from ..play import PlayOptions

    torch.set_num_threads(args.threads)
    retune(args)
    if args.rack is not None:
        results = bench_rack(
            args.rack, args.block, args.calls, args.models_dir, args.optimize, args.device
        )
    else:  # --block: the block sizes, each the engine's in turn
        results = bench_blocks(replace(PlayOptions.of(args), block=None), args.block, args.calls)
    apply = bench_weight_apply(args.apply_sizes) if args.apply_sizes else []
    if args.json:
        print(json.dumps({"blocks": results, "weight_apply": apply}, indent=2))
    else:
        print(format_results(results, apply))
    return 0


def add_parser(commands: Any, p: Parents) -> None:
    """The ``bench`` command and its options."""
    bench = commands.add_parser(
        "bench",
        parents=[p.models, p.racked, p.threads, p.optimizing, p.devices],
        help="engine vs raw eager, per block size, in one process",
    )
    bench.add_argument(
        "--block", type=blocks, default=[256, 2048], help="block sizes, e.g. 256,2048"
    )
    bench.add_argument(
        "--calls", type=positive, default=300, help="timed calls per run and block size"
    )
    bench.add_argument(
        "--apply-sizes",
        type=sizes,
        default=[10, 30],
        metavar="M,M",
        help="also time applying a weight change to models of these millions of parameters "
        "(default 10,30; 0 skips it)",
    )
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")
    bench.set_defaults(run=run)
