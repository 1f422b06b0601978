"""The ``bendserver`` command: serve, render, info, bench, export, stress."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from . import __version__
from .errors import BendingError, describe, is_bug
from .files import check_writable
from .loader import DEFAULT_MODEL
from .passes import OPTIMIZE_MODES

NO_FUSE = "no output fuse (NaN guard, DC blocker, limiter): the model's output as it is"


def _positive(text: str) -> int:
    """An argument that is a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is expected, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a number above 0 is expected, got {value}")
    return value


def _blocks(text: str) -> list[int]:
    """Block sizes separated by commas (``256,2048``)."""
    return [_positive(b) for b in text.split(",")]


def _sizes(text: str) -> list[int]:
    """Sizes separated by commas, or ``0`` for none."""
    return [] if text.strip() == "0" else _blocks(text)


def _probe(args: argparse.Namespace) -> None:
    """Probe the model in a child process first (:mod:`bendserver.probe`), unless trusted."""
    if not args.trust_model:
        from .probe import probe_model

        probe_model(args.model, args.models_dir)


def _serve(args: argparse.Namespace) -> int:
    from .serve import ServeOptions, run

    if args.record:
        check_writable(args.record)
    _probe(args)
    options = ServeOptions(
        **{k: v for k, v in vars(args).items() if k in ServeOptions.__dataclass_fields__}
    )
    return run(options)


def _render(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from .audiofile import sound_info, streams_for
    from .engine import StreamEngine
    from .loader import add_versions, load_model
    from .presets import preset_for
    from .render import check_outputs, read_score, render_file, sound_files

    torch.set_num_threads(args.threads)

    score = read_score(Path(args.score)) if args.score else None
    inputs = sound_files([Path(i) for i in args.inputs])
    output = Path(args.output)
    into_folder = len(inputs) > 1 or any(Path(i).is_dir() for i in args.inputs)
    if into_folder or output.is_dir() or args.output.endswith(("/", os.sep)):
        targets = [output / f"{source.stem}{args.format}" for source in inputs]
    else:
        targets = [output]
    clashes = sorted({t.name for t in targets if targets.count(t) > 1})
    if clashes:
        raise BendingError(
            f"several inputs would be written to {clashes}: render them into separate folders"
        )
    if targets:  # they share a folder
        check_writable(targets[0])
    check_outputs(inputs, targets)
    _probe(args)
    infos = [sound_info(source) for source in inputs]
    total = sum(info.duration for info in infos)
    with tqdm(total=total, unit="s", disable=not sys.stderr.isatty(), leave=False) as bar:
        for source, target, info in zip(inputs, targets, infos, strict=True):
            model = load_model(args.model, args.device, search=args.models_dir)
            add_versions(model, args.version)
            channels = 1 if args.mono else info.channels
            engine = StreamEngine(
                model,
                block=args.block,
                device=args.device,
                preset=preset_for(model, args.preset),
                fuse=not args.no_fuse,
                optimize=args.optimize,
                streams=streams_for(channels, model.method("forward").in_channels),
            )
            try:
                rendered = render_file(
                    engine,
                    source,
                    target,
                    score,
                    args.force,
                    not args.no_resample,
                    progress=bar,
                    mono=args.mono,
                    sample_rate=args.sr,
                    keep_latency=args.keep_latency,
                )
            except KeyboardInterrupt:
                print(f"interrupted: nothing was written to {target}", file=sys.stderr)
                return 130
            stats = engine.stats_dict()
            bar.write(
                f"wrote {target} ({rendered.seconds:.2f} s, {engine.out_channels} ch, "
                f"{stats['blocks']} blocks of {engine.block}, compute p50 "
                f"{stats['p50_ms']:.2f} ms, max {stats['max_ms']:.2f} ms, "
                f"{stats['errors']} errors, {rendered.nonfinite} NaN/Inf, "
                f"{rendered.limited} limited)",
                file=sys.stdout,
            )
    return 0


def _ring_latency(block: int, rate: int) -> str:
    """What serve's ring mode adds to the model's latency, at a device period of the block and
    the model's rate (another period or rate: serve's banner and /stats say)."""
    from .audio.ring import default_ahead, prefill

    ahead = default_ahead(block, rate)
    frames = prefill(ahead, block, block)
    return (
        f"serve     the ring mode adds {frames} samples ({1e3 * frames / rate:.2f} ms: {ahead} "
        f"block{'s' if ahead > 1 else ''} ahead) on a device period of {block} at {rate} Hz, "
        "more where the model's compute takes a good part of a block; its banner and /stats "
        "say what it adds"
    )


def _info(args: argparse.Namespace) -> int:
    import torch

    from .loader import load_model

    _probe(args)
    model = load_model(args.model, search=args.models_dir)
    print(f"{model.name}: {model.description}")
    print(
        f"sample rate {model.sample_rate} Hz, block {model.block}, latency {model.latency} "
        f"samples, versions {model.bended.versions}, preset {model.preset}"
    )
    for name, spec in model.methods.items():
        print(
            f"  {name}: {spec.in_channels} ch x 1/{spec.in_ratio} -> "
            f"{spec.out_channels} ch x 1/{spec.out_ratio}"
        )
    if model.attributes:
        print(f"attributes {model.attributes}")
    print(_ring_latency(model.block, model.sample_rate))
    print("\nweights")
    model.bended.print_weights()
    if model.bended.scripted:
        print(
            "\nlayer outputs (a TorchScript file: per-channel Mask, Scale, Bias, Affine, Invert "
            "fold into these layers' weights; other activation ops need the Python model)"
        )
        model.bended.print_activations()
        return 0
    for name, spec in model.methods.items():
        argument = model.bended.argument_names(name)[0]
        example = torch.zeros(1, spec.in_channels, model.block // spec.in_ratio)
        model.bended.trace(name, **{argument: example})
        print(f"\nactivations of {name} (block {model.block})")
        model.bended.print_activations(name)
    return 0


def _bench(args: argparse.Namespace) -> int:
    import torch

    from .bench import bench_blocks, bench_weight_apply, format_results

    torch.set_num_threads(args.threads)
    results = bench_blocks(
        args.model,
        args.block,
        args.calls,
        args.preset,
        args.models_dir,
        args.optimize,
        args.device,
    )
    apply = bench_weight_apply(args.apply_sizes) if args.apply_sizes else []
    if args.json:
        print(json.dumps({"blocks": results, "weight_apply": apply}, indent=2))
    else:
        print(format_results(results, apply))
    return 0


def _export(args: argparse.Namespace) -> int:
    from .export import export_model

    output = Path(args.output)
    if output.exists() and not args.force:
        raise BendingError(f"{output} exists: give --force to replace it")
    attributes = export_model(args.model, output, args.preset, args.block, args.models_dir)
    print(f"wrote {output} (nn~ attributes: {', '.join(attributes) or 'none'})")
    return 0


def _stress(args: argparse.Namespace) -> int:
    from .stress import format_fuzz, format_rows, run_fuzz, run_stress

    if args.fuzz is not None:
        report = run_fuzz(
            args.model, args.preset, args.block[0], args.fuzz, args.rate, args.seed,
            args.models_dir,
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
        tuple(args.mode.split(",")),
        tuple(serve_args),
        args.period,
    )
    print(format_rows(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bendserver", description=__doc__)
    parser.add_argument("--version", action="version", version=f"bendserver {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error instead of its one-line message",
    )
    models = argparse.ArgumentParser(add_help=False, parents=[common])
    models.add_argument(
        "--models-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also look for model names in DIR (repeatable; before $BENDSERVER_MODELS, your "
        "models folder and the shipped models)",
    )
    trusting = argparse.ArgumentParser(add_help=False)
    trusting.add_argument(
        "--trust-model",
        action="store_true",
        help="skip the probe that first loads and calls a model that is not shipped in a child "
        "process, to name a model whose code kills its process (docs/engine.md)",
    )
    versions = argparse.ArgumentParser(add_help=False)
    versions.add_argument(
        "--version",
        action="append",
        default=[],
        metavar="FILE",
        help="add the weights of FILE (.ts of the same architecture, or .safetensors) as a "
        "version named after it, for /version and /interp (repeatable)",
    )
    optimizing = argparse.ArgumentParser(add_help=False)
    optimizing.add_argument(
        "--optimize",
        choices=OPTIMIZE_MODES,
        default="passes",
        help="none: the bended graph as traced; passes (default): the optimising passes; "
        "compile: the passes, then torch.compile where it measures faster at load, said with "
        "its figures (CPU, needs a C++ compiler; docs/engine.md)",
    )
    devices = argparse.ArgumentParser(add_help=False)
    devices.add_argument(
        "--device",
        default="cpu",
        help="where the model runs: cpu (default), cuda or cuda:N (pinned transfers, the "
        "bended graph captured as a CUDA graph; docs/engine.md)",
    )
    threads = argparse.ArgumentParser(add_help=False)
    threads.add_argument(
        "--threads",
        type=_positive,
        default=1,
        help="torch threads (default 1: a second busy thread slows every call down)",
    )

    serve = commands.add_parser(
        "serve",
        parents=[models, trusting, versions, threads, optimizing, devices],
        help="play a model live, controlled over OSC",
    )
    serve.add_argument("-m", "--model", default=DEFAULT_MODEL, help="model name or folder")
    serve.add_argument(
        "-p", "--preset", help="preset name or .json file (default: the model's; 'none': no preset)"
    )
    serve.add_argument("--osc-host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--osc-port", type=int, default=9000, help="OSC port to listen on")
    serve.add_argument("--reply-port", type=int, default=9001, help="port replies go to")
    serve.add_argument(
        "--oscquery-port",
        type=int,
        help="HTTP/WebSocket port of the OSCQuery namespace (default: the OSC port + 10; 0: off)",
    )
    serve.add_argument(
        "--no-zeroconf",
        dest="zeroconf",
        action="store_false",
        help="do not advertise OSCQuery over mDNS (clients then connect by address)",
    )
    serve.add_argument("--reply-host", help="host replies go to (default: the sender's)")
    serve.add_argument("--audio", help="device or host API name (e.g. jack), or null")
    serve.add_argument("--input", default="silence", help="input device, sound file or silence")
    serve.add_argument("--block", type=_positive, help="model block size (default: the model's)")
    serve.add_argument(
        "--device-block", type=_positive, help="frames per callback (default: block)"
    )
    serve.add_argument(
        "--output-channels",
        type=_positive,
        help="device outputs to open (default: all of them for a mono model, which plays on each)",
    )
    serve.add_argument(
        "--channels",
        type=_positive,
        help="channels played, one stream of the model each (default: the --input file's; "
        "one for silence or a device)",
    )
    serve.add_argument("--record", help="write the output to this sound file")
    serve.add_argument("--force", action="store_true", help="overwrite the --record file")
    serve.add_argument(
        "--latency-mode",
        choices=["ring", "direct", "threaded"],
        help="ring (the default on a device): the device callback is C and copies between "
        "rings, the model computes --ahead blocks ahead on its own thread, at any block and "
        "rate; direct (the default on the null backend): the model runs in a Python callback; "
        "threaded: on a worker, one device block later",
    )
    serve.add_argument(
        "--ahead",
        type=_positive,
        help="ring mode: model blocks computed ahead of what plays (default: those that last "
        "7 ms plus a block's compute, at least one; each adds a block of latency and absorbs "
        "that much jitter)",
    )
    serve.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CIDR",
        help="also accept OSC from this network (repeatable); loopback is always allowed",
    )
    serve.add_argument("--duration", type=float, help="stop after this many seconds")
    serve.add_argument("--no-fuse", action="store_true", help=NO_FUSE)
    serve.set_defaults(run=_serve)

    render = commands.add_parser(
        "render",
        parents=[models, trusting, versions, threads, optimizing, devices],
        help="render sound files through a bended model",
    )
    render.add_argument(
        "inputs", nargs="+", metavar="IN", help="input sound files, or folders of them"
    )
    render.add_argument("-m", "--model", default=DEFAULT_MODEL, help="model name or folder")
    render.add_argument(
        "-p", "--preset", help="preset name or .json file (default: the model's; 'none': no preset)"
    )
    render.add_argument("--score", help="text file of timed messages: time /address args...")
    render.add_argument("-o", "--output", required=True, help="output file, or folder")
    render.add_argument("--block", type=_positive, help="block size (default: the model's)")
    render.add_argument("--format", default=".wav", help="extension when -o is a folder")
    render.add_argument("--force", action="store_true", help="overwrite existing outputs")
    render.add_argument("--no-fuse", action="store_true", help=NO_FUSE)
    render.add_argument(
        "--no-resample", action="store_true", help="refuse inputs at another sample rate"
    )
    render.add_argument(
        "--mono",
        action="store_true",
        help="mix the input down to one channel first (default: every channel kept, one "
        "stream of the model each)",
    )
    render.add_argument("--sr", type=_positive, help="output sample rate (default: the input's)")
    render.add_argument(
        "--keep-latency",
        action="store_true",
        help="keep the model's latency at the start (default: trimmed, the output aligned "
        "with the input)",
    )
    render.set_defaults(run=_render)

    info = commands.add_parser(
        "info", parents=[models, trusting], help="print a model's weights and activations"
    )
    info.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model name or folder")
    info.set_defaults(run=_info)

    bench = commands.add_parser(
        "bench",
        parents=[models, threads, optimizing, devices],
        help="engine vs raw eager, per block size, in one process",
    )
    bench.add_argument("-m", "--model", default=DEFAULT_MODEL, help="model name or folder")
    bench.add_argument(
        "-p", "--preset", help="preset of the bended run (default: the model's; 'none': no preset)"
    )
    bench.add_argument(
        "--block", type=_blocks, default=[256, 2048], help="block sizes, e.g. 256,2048"
    )
    bench.add_argument(
        "--calls", type=_positive, default=300, help="timed calls per run and block size"
    )
    bench.add_argument(
        "--apply-sizes",
        type=_sizes,
        default=[10, 30],
        metavar="M,M",
        help="also time applying a weight change to models of these millions of parameters "
        "(default 10,30; 0 skips it)",
    )
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")
    bench.set_defaults(run=_bench)

    export = commands.add_parser(
        "export",
        parents=[models],
        help="write a bended model as an nn~ TorchScript file (its ops' parameters as attributes)",
    )
    export.add_argument("model", help="model name, folder, file.py:Class or .ts file")
    export.add_argument(
        "-p", "--preset", help="preset name or .json file (default: the model's; 'none': no preset)"
    )
    export.add_argument("-o", "--output", required=True, help="the .ts file to write")
    export.add_argument(
        "--block",
        type=_positive,
        help="block size a Python model is exported for (default: the model's)",
    )
    export.add_argument("--force", action="store_true", help="replace an existing file")
    export.set_defaults(run=_export)

    stress = commands.add_parser(
        "stress",
        parents=[models, threads],
        help="the live server under OSC load on a JACK dummy clock, as a table",
    )
    stress.add_argument("-m", "--model", default=DEFAULT_MODEL, help="model name or folder")
    stress.add_argument("-p", "--preset", help="preset (default: the model's; 'none': no preset)")
    stress.add_argument(
        "--block", type=_blocks, default=[128, 256], help="block sizes, e.g. 128,256"
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
        "--mode",
        default="ring",
        help="the server's latency modes, comma-separated, each served in turn (default ring; "
        "e.g. ring,direct,threaded to compare them in one run)",
    )
    stress.add_argument(
        "--period", type=_positive, help="the JACK server's period (default: the block)"
    )
    stress.add_argument("--ahead", type=_positive, help="serve's --ahead (default: serve's)")
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
        "--rate", type=_positive, default=10000, help="datagrams a second of --fuzz (10000)"
    )
    stress.add_argument("--seed", type=int, default=0, help="random seed of --fuzz (0)")
    stress.set_defaults(run=_stress)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; ``--debug`` also logs bendserver's debug lines (the tracebacks of errors
    a server survives) while it runs."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("bendserver")
    level = logger.level
    if args.debug:
        logger.setLevel(logging.DEBUG)
    with _terminate_as_interrupt():
        try:
            return _run(args)
        finally:
            logger.setLevel(level)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM ends a command as Ctrl-C does (KeyboardInterrupt), so that what it was writing
    is discarded and a server stops cleanly, whenever it comes: loading, rendering, serving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    """The one error path of the command line: every error ends here as one line
    (:func:`errors.describe`), exit 2 for what the user can fix, 1 for a bug (with the hint to
    rerun with ``--debug``, which raises it instead: its traceback), 130 for Ctrl-C or SIGTERM."""
    try:
        return args.run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("bendserver: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (``| head``): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:
        if args.debug:
            raise
        bug = is_bug(error)
        hint = "; rerun with --debug for the traceback" if bug else ""
        print(f"bendserver: {describe(error)}{hint}", file=sys.stderr)
        return 1 if bug else 2


if __name__ == "__main__":
    sys.exit(main())
