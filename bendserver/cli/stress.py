"""``bendserver stress``: the live server under OSC load on a JACK dummy clock, or fuzzed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..loader import DEFAULT_MODEL
from .options import Parents, blocks, positive


def run(args: argparse.Namespace) -> int:
    """Print the stress table, or the fuzz report (exit 1 where the server failed it)."""
    from ..measure.stress import format_fuzz, format_rows, run_fuzz, run_stress

    if args.fuzz is not None:
        report = run_fuzz(
            args.model, args.preset, args.block[0], args.fuzz, args.rate, args.seed,
            args.models_dir, args.latency,
        )  # fmt: skip
        print(format_fuzz(report))
        return 0 if report.ok else 1

    def progress(row: object) -> None:
        print(f"measured: {row}", file=sys.stderr, flush=True)

    serve_args = ["--threads", str(args.threads)]
    if args.ahead:
        serve_args += ["--ahead", str(args.ahead)]
    if args.trust_model:
        serve_args.append("--trust-model")
    rows = run_stress(
        args.model,
        args.preset,
        args.block,
        args.load.split(","),
        args.seconds,
        progress,
        args.models_dir,
        args.latency,
        tuple(args.mode.split(",")),
        tuple(serve_args),
        args.period,
        args.jack_rate,
        args.modulators,
        args.page,
    )
    print(format_rows(rows))
    return 0


def add_parser(commands: Any, p: Parents) -> None:
    """The ``stress`` command and its options."""
    stress = commands.add_parser(
        "stress",
        parents=[p.models, p.threads],
        help="the live server under OSC load on a JACK dummy clock, as a table",
    )
    stress.add_argument("-m", "--model", default=DEFAULT_MODEL, help="model name or folder")
    stress.add_argument("-p", "--preset", help="preset (default: the model's; 'none': no preset)")
    stress.add_argument(
        "--block", type=blocks, default=[128, 256], help="block sizes, e.g. 128,256"
    )
    stress.add_argument(
        "--load",
        default="c,0,1k,10k,burst,reference",
        help="loads, comma-separated: 0 (no OSC), 1k, 10k and 20k (messages a second), burst "
        "(20 000 as fast as one client sends), reference (no server: a client without torch "
        "doing the server's median compute of numpy work per block: the Python floor), c (no "
        "server: JACK's example client in C, the machine's floor)",
    )
    stress.add_argument(
        "--seconds", type=float, default=20.0, help="seconds each load lasts (default 20)"
    )
    stress.add_argument(
        "--modulators",
        action="store_true",
        help="each server plays four modulators on eight routes (docs/modulation.md)",
    )
    stress.add_argument(
        "--page",
        action="store_true",
        help="the control page open in a headless Chromium on each server while it is measured",
    )
    stress.add_argument(
        "--mode",
        default="ring",
        help="the server's latency modes, comma-separated, each served in turn (default ring; "
        "e.g. ring,direct,threaded to compare them in one run)",
    )
    stress.add_argument(
        "--period", type=positive, help="the JACK server's period (default: the block)"
    )
    stress.add_argument(
        "--jack-rate",
        type=positive,
        default=48000,
        help="the JACK server's sample rate (default 48000; 44100 plays a 44.1 kHz model with "
        "no resampling)",
    )
    stress.add_argument("--ahead", type=positive, help="serve's --ahead (default: serve's)")
    stress.add_argument(
        "--trust-model", action="store_true", help="serve's --trust-model (a .ts export)"
    )
    stress.add_argument(
        "--fuzz",
        type=float,
        metavar="SECONDS",
        help="instead of the table: send random datagrams, bundles, timetags, addresses and "
        "argument types for SECONDS at the first --block size, checking /ping, a final value, "
        "/stats and each process's memory (exit 1 if the server died or lost the final value)",
    )
    stress.add_argument(
        "--rate", type=positive, default=10000, help="datagrams a second of --fuzz (10000)"
    )
    stress.add_argument("--seed", type=int, default=0, help="random seed of --fuzz (0)")
    stress.set_defaults(run=run)
