"""The ``bendserver`` command: serve, render, sweep, info, bench, export, stress."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import __version__
from .errors import BendingError, describe, is_bug
from .files import check_writable
from .limits import MAX_CHANNELS
from .loader import DEFAULT_MODEL
from .passes import OPTIMIZE_MODES

NO_FUSE = "no output fuse (NaN guard, DC blocker, limiter): the model's output as it is"


def _whole(text: str, least: int) -> int:
    """An argument that is a whole number of at least ``least``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is expected, got {text!r}") from None
    if value < least:
        bound = "above 0" if least == 1 else f"of at least {least}"
        raise argparse.ArgumentTypeError(f"a number {bound} is expected, got {value}")
    return value


def _positive(text: str) -> int:
    """An argument that is a whole number above 0."""
    return _whole(text, 1)


class _AddVersion(argparse.Action):
    """``--add-version FILE``, repeatable. Its old spelling ``--version FILE`` hid the
    program's ``--version`` after a command: it still works for one release, saying so."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        if option == "--version":
            print(
                "bendserver: --version FILE is deprecated (it reads as bendserver --version) "
                "and goes in the next release: use --add-version FILE",
                file=sys.stderr,
            )
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), values])


def _port(text: str) -> int:
    """A network port: 0 (one the system chooses, or off where the option says so) to 65535."""
    value = _whole(text, 0)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def _channels(text: str) -> int:
    """A count of channels played: 1 to :data:`~bendserver.limits.MAX_CHANNELS`."""
    value = _positive(text)
    if value > MAX_CHANNELS:
        raise argparse.ArgumentTypeError(f"at most {MAX_CHANNELS} channels are played, got {value}")
    return value


def _milliseconds(text: str) -> float:
    """An argument that is a finite number of milliseconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of ms is expected, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a finite number of ms from 0 is expected, got {text}")
    return value


def _blocks(text: str) -> list[int]:
    """Block sizes separated by commas (``256,2048``)."""
    return [_positive(b) for b in text.split(",")]


def _samples(text: str) -> int:
    """An argument that is a whole number of samples, 0 or more."""
    return _whole(text, 0)


def _sizes(text: str) -> list[int]:
    """Sizes separated by commas, or ``0`` for none."""
    return [] if text.strip() == "0" else _blocks(text)


def _take_models(args: argparse.Namespace) -> None:
    """Repeated ``-m`` or ``--rack`` as ``args.rack`` (a RackSpec; None: one model), and
    ``args.model`` as the first model, for what takes one."""
    if not hasattr(args, "rack"):  # a command of one model
        return
    from .rackspec import RackSpec, split_method

    listed = args.model if isinstance(args.model, list) else None
    if listed and args.rack is not None:
        raise BendingError("give the models with -m or with --rack, not both")
    if args.rack is not None:
        args.rack = RackSpec.find(args.rack)
    else:
        models = listed or [args.model or DEFAULT_MODEL]
        args.model, method = split_method(models[0])
        several = len(models) > 1 or method != "forward"
        args.rack = RackSpec.chain(models) if several else None
    if args.rack is not None:
        args.rack.check()
        args.model = args.rack.nodes[0].model


def _probe(args: argparse.Namespace) -> None:
    """Probe the model (each of a rack's) in a child process first (:mod:`bendserver.probe`),
    unless trusted."""
    if not args.trust_model:
        from .probe import probe_model

        rack = getattr(args, "rack", None)
        models = [args.model] if rack is None else [node.model for node in rack.nodes]
        for model in dict.fromkeys(models):
            probe_model(model, args.models_dir)


def _serve(args: argparse.Namespace) -> int:
    from .serve import ServeOptions, run

    if args.record:
        check_writable(args.record)
    _probe(args)
    _retune(args)
    options = ServeOptions(
        **{k: v for k, v in vars(args).items() if k in ServeOptions.__dataclass_fields__}
    )
    return run(options)


def _missing(inputs: list[str], score: str | None) -> None:
    """Refuse inputs and a score that are not there, naming every one of them at once (the
    score alone was named, then the input on the next try)."""
    missing = [f"no input file {i}" for i in inputs if not Path(i).exists()]
    if score is not None and not Path(score).is_file():
        missing.append(f"no score file {score}")
    if missing:
        raise BendingError(", ".join(missing))


def _render(args: argparse.Namespace) -> int:
    from .render.offline import check_outputs, read_score, sound_files

    _missing(args.inputs, args.score)
    score = read_score(Path(args.score)) if args.score else []
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
    jobs = [_job(source, target, score) for source, target in zip(inputs, targets, strict=True)]
    return _run_batch(args, jobs, manifest=len(targets) > 1 or targets[0] != output)


def _sweep(args: argparse.Namespace) -> int:
    from .files import write_text
    from .render.contact import Cell, contact_sheet
    from .render.offline import check_outputs, read_score
    from .render.sweep import cell_events, cell_stem, cells, features, parse_vary, table

    _missing([args.input], args.score)
    source = Path(args.input)
    axes = [parse_vary(text) for text in args.vary]
    grid = cells(axes)
    score = read_score(Path(args.score)) if args.score else []
    folder = Path(args.output)
    targets = [folder / f"{cell_stem(source.stem, cell)}{args.format}" for cell in grid]
    check_writable(targets[0])
    check_outputs([source], targets)
    jobs = [
        _job(source, target, [*cell_events(axes, cell), *score], cell)
        for target, cell in zip(targets, grid, strict=True)
    ]
    code = _run_batch(args, jobs, manifest=True)
    if code:
        return code
    measured = [features(target, source) for target in targets]
    rows = [(t.name, c, m) for t, c, m in zip(targets, grid, measured, strict=True)]
    write_text(folder / "sweep.csv", table(axes, rows))
    sheet = [Cell(t, c, m) for t, c, m in zip(targets, grid, measured, strict=True)]
    preset = args.preset or "the model's own"
    title = f"{source.name} through {args.model}, preset {preset}"
    contact_sheet(axes, sheet, folder / "contact.png", folder / "index.html", title)
    print(f"wrote {folder / 'sweep.csv'}, {folder / 'contact.png'}, {folder / 'index.html'}")
    return 0


def _job(source: Path, target: Path, events: list, settings: tuple = ()) -> Any:
    from .render.batch import Job

    return Job(str(source), str(target), tuple(events), settings)


def _recipe(args: argparse.Namespace) -> Any:
    from .render.batch import Recipe

    return Recipe(
        model=args.model,
        rack=args.rack,
        models_dir=tuple(args.models_dir),
        versions=tuple(args.version),
        preset=args.preset,
        block=args.block,
        device=args.device,
        fuse=not args.no_fuse,
        optimize=args.optimize,
        mono=args.mono,
        sample_rate=args.sr,
        resample=not args.no_resample,
        keep_latency=args.keep_latency,
        latency=args.latency,
        threads=args.threads,
        seed=args.seed,
        retune=time.time() if args.retune else None,
    )


def _retune(args: argparse.Namespace) -> None:
    """``--retune``: the convolution forms the command meets are timed again."""
    if args.retune:
        from .passes.convolution import retune

        retune(time.time())


def _run_batch(args: argparse.Namespace, jobs: list, manifest: bool) -> int:
    """Render ``jobs`` (files skipped by the output folder's manifest, if ``manifest``) with
    one progress bar; Ctrl-C leaves the complete files and says how to go on."""
    from tqdm import tqdm

    from .render.batch import Done, Manifest, Plan, plan_jobs, run_jobs
    from .render.frames import source_info

    recipe = _recipe(args)
    folder = Path(jobs[0].target).parent
    if manifest:
        plan = plan_jobs(recipe, jobs, folder, args.force)
    else:  # one file: nothing to resume, no manifest beside it
        if Path(jobs[0].target).exists() and not args.force:
            raise BendingError(f"{jobs[0].target} exists: pass --force to overwrite it")
        plan = Plan(jobs, [], Manifest(folder), {})
    _probe(args)
    for job in plan.skipped:
        print(f"kept {job.target} (made by the same model, preset, score and options)")
    seconds = {job.target: source_info(Path(job.source)).duration for job in plan.jobs}
    written: list[str] = []
    tqdm.monitor_interval = 0  # no monitor thread: the pool's processes are forked from this one
    with tqdm(
        total=sum(seconds.values()), unit="s", disable=not sys.stderr.isatty(), leave=False
    ) as bar:

        def done(result: Done) -> None:
            written.append(result.target)
            bar.update(seconds[result.target])
            bar.write(result.line(), file=sys.stdout)

        try:
            run_jobs(recipe, plan, _workers(args), _ray_address(args), done, manifest)
        except KeyboardInterrupt:
            left = [job.target for job in plan.jobs if job.target not in written]
            if len(plan.jobs) == 1:
                print(f"interrupted: nothing was written to {left[0]}", file=sys.stderr)
            else:
                print(
                    f"interrupted: {len(written)} of {len(plan.jobs)} files written, nothing "
                    f"to the {len(left)} others: run the same command again to render them",
                    file=sys.stderr,
                )
            return 130
    return 0


def _workers(args: argparse.Namespace) -> int:
    from .render.batch import default_workers

    return args.workers or default_workers()


def _ray_address(args: argparse.Namespace) -> str | None:
    return args.ray


def _ring_latency(block: int, rate: int) -> str:
    """What serve's ring mode adds to the model's latency at least, at a device period of the
    block and the model's rate (the time a block needs comes from a warm-up at start: serve's
    banner and /stats say what the path adds)."""
    from .audio.ring import prefill_frames, slack_frames

    frames = prefill_frames(slack_frames(0.0, 0.0, rate, block), block, block)
    ahead = -(-frames // block)
    return (
        f"serve     the ring mode adds {frames} samples ({1e3 * frames / rate:.2f} ms: {ahead} "
        f"block{'s' if ahead > 1 else ''} ahead) on a device period of {block} at {rate} Hz, "
        "more where the model's compute takes a good part of a block; the direct mode adds "
        "what the device's stream holds (a block of a duplex stream on JACK); the banner and "
        "/stats say what the path adds"
    )


def _info(args: argparse.Namespace) -> int:
    import torch

    from .attributes import shown
    from .loader import load_model
    from .tracing.script import ConversionError

    _probe(args)
    if args.rack is not None:
        return _info_rack(args)
    model = load_model(args.model, search=args.models_dir, latency=args.latency)
    print(f"{model.name}: {model.description}")
    print(
        f"sample rate {model.sample_rate} Hz, block {model.block}, latency {model.latency} "
        f"samples ({model.latency_source}), versions {model.bended.weight_bank.named_versions}, "
        f"preset {model.preset}"
    )
    for name, spec in model.methods.items():
        print(
            f"  {name}: {spec.in_channels} ch x 1/{spec.in_ratio} -> "
            f"{spec.out_channels} ch x 1/{spec.out_ratio}"
        )
    if model.attributes:
        print("attributes (nn~: set_<name>, get_<name>)")
    for spec in model.attributes.values():
        try:
            value = " = " + " ".join(str(shown(v)) for v in spec.read(model.module))
        except BendingError as error:
            value = "" if not spec.readable else f": {error}"
        print(f"  {spec.describe()}{value}")
    print(_ring_latency(model.block, model.sample_rate))
    print("\nweights")
    model.bended.print_weights()
    for name, spec in model.methods.items():
        argument = model.bended.argument_names(name)[0]
        example = torch.zeros(1, spec.in_channels, model.block // spec.in_ratio)
        try:
            model.bended.trace(name, **{argument: example})
        except ConversionError as error:
            print(f"\n{name}: not converted into a graph, plays as a direct scripted call: {error}")
            continue
        print(f"\nactivations of {name} (block {model.block})")
        model.bended.print_activations(name)
    if model.bended.folds:
        print(
            "\nlayer outputs (no method converted: per-channel Mask, Scale, Bias, Affine, Invert "
            "fold into these layers' weights; other activation ops need the Python model)"
        )
        model.bended.print_activations()
    return 0


def _info_rack(args: argparse.Namespace) -> int:
    """A rack's nodes, edges, what each carries, and its latency."""
    from .rackspec import counted

    rack = args.rack.build(search=args.models_dir)
    print(f"rack of {counted(rack)}, block {rack.block}, {rack.sample_rate} Hz")
    for name in rack.order:
        node = rack.nodes[name]
        spec = node.spec
        print(
            f"  {name}: {node.model.name}.{node.method}, {spec.in_channels} ch x "
            f"1/{spec.in_ratio} -> {spec.out_channels} ch x 1/{spec.out_ratio}, latency "
            f"{node.latency} samples"
        )
    for edge in rack.edges:
        gain = "" if edge.gain == 1.0 else f" x {edge.gain:g}"
        print(f"  {edge.source} -> {edge.target}{gain}")
    ms = 1e3 * rack.latency / rack.sample_rate
    print(f"latency {rack.latency} samples ({ms:.2f} ms), the longest path's")
    return 0


def _bench(args: argparse.Namespace) -> int:
    import torch

    from .measure.bench import bench_blocks, bench_rack, bench_weight_apply, format_results

    torch.set_num_threads(args.threads)
    _retune(args)
    if args.rack is not None:
        results = bench_rack(
            args.rack, args.block, args.calls, args.models_dir, args.optimize, args.device
        )
    else:
        results = bench_blocks(
            args.model,
            args.block,
            args.calls,
            args.preset,
            args.models_dir,
            args.optimize,
            args.device,
            args.latency,
        )
    apply = bench_weight_apply(args.apply_sizes) if args.apply_sizes else []
    if args.json:
        print(json.dumps({"blocks": results, "weight_apply": apply}, indent=2))
    else:
        print(format_results(results, apply))
    return 0


def _export(args: argparse.Namespace) -> int:
    from .export.model import export_model
    from .export.rack import export_rack

    output = Path(args.output)
    if output.exists() and not args.force:
        raise BendingError(f"{output} exists: give --force to replace it")
    if args.rack is not None:
        attributes = export_rack(args.rack, output, args.block, args.models_dir, args.preset)
    else:
        attributes = export_model(
            args.model, output, args.preset, args.block, args.models_dir, args.latency
        )
    print(f"wrote {output} (nn~ attributes: {', '.join(attributes) or 'none'})")
    return 0


def _stress(args: argparse.Namespace) -> int:
    from .measure.stress import format_fuzz, format_rows, run_fuzz, run_stress

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
    models.add_argument(
        "--latency",
        type=_samples,
        metavar="N",
        help="the model's latency in samples (default: its manifest's; a .ts file's is "
        "measured at load, which this skips)",
    )
    # What plays: one model, a chain (-m repeated) or a rack file, and its preset; the same
    # options for every command that plays (export, which also takes a model by position, and
    # stress, which takes one model, declare theirs).
    racked = argparse.ArgumentParser(add_help=False)
    racked.add_argument(
        "-m",
        "--model",
        action="append",
        help="model name or folder, model.method or file.ts:method; repeated: a chain in order",
    )
    racked.add_argument(
        "--rack", metavar="FILE", help="a rack file (TOML, docs/rack.md) or a shipped one's name"
    )
    racked.add_argument(
        "-p", "--preset", help="preset name or .json file (default: the model's; 'none': no preset)"
    )
    trusting = argparse.ArgumentParser(add_help=False)
    trusting.add_argument(
        "--trust-model",
        action="store_true",
        help="skip the probe that first loads and calls a model that is not shipped in a child "
        "process, to name a model whose code kills its process (docs/engine.md); serve: also "
        "for /model/load",
    )
    versions = argparse.ArgumentParser(add_help=False)
    versions.add_argument(
        "--add-version",
        "--version",
        dest="version",
        action=_AddVersion,
        default=[],
        metavar="FILE",
        help="add the weights of FILE (.ts of the same architecture, or .safetensors) as a "
        "version named after it, for /version and /interp (repeatable; --version FILE, its "
        "old spelling, still works in this release)",
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
    optimizing.add_argument(
        "--retune",
        action="store_true",
        help="time again which form each convolution computes in on this machine (chosen once "
        "per shape and kept in the cache folder, so that a render writes the same bytes run "
        "after run; docs/engine.md)",
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
        parents=[models, racked, trusting, versions, threads, optimizing, devices],
        help="play a model live, controlled over OSC",
    )
    serve.add_argument("--osc-host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--osc-port", type=_port, default=9000, help="OSC port to listen on")
    serve.add_argument("--reply-port", type=_port, default=9001, help="port replies go to")
    serve.add_argument(
        "--oscquery-port",
        type=_port,
        help="HTTP/WebSocket port of the OSCQuery namespace (default: the OSC port + 10; 0: off)",
    )
    serve.add_argument(
        "--no-zeroconf",
        dest="zeroconf",
        action="store_false",
        help="do not advertise OSCQuery over mDNS (clients then connect by address)",
    )
    serve.add_argument("--reply-host", help="host replies go to (default: the sender's)")
    serve.add_argument(
        "--midi",
        nargs="?",
        const="",
        metavar="PORT",
        help="take MIDI in: a virtual port named bendserver (JACK MIDI when a JACK server "
        "runs), or an input named like PORT; map controls with /midi/learn (docs/midi.md)",
    )
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
        type=_channels,
        help="channels played, one stream of the model each (default: the --input file's; "
        "one for silence or a device)",
    )
    serve.add_argument(
        "--xfade-ms",
        type=_milliseconds,
        default=50.0,
        help="/model/load crossfades from the playing model to the new one over this many ms "
        "(default 50; 0: at a block boundary, no fade)",
    )
    serve.add_argument("--record", help="write the output to this sound file")
    serve.add_argument(
        "--record-score",
        metavar="FILE",
        help="write every change applied, at its block, as a score (render --score FILE "
        "--block N over the same input plays the same samples)",
    )
    serve.add_argument(
        "--force", action="store_true", help="overwrite the --record (--record-score) file"
    )
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
    serve.add_argument(
        "--allow-code-from",
        action="append",
        default=[],
        metavar="DIR",
        help="/model/load and /<node>/load may import Python code (a model folder, "
        "file.py:Class) from DIR (repeatable); without it they load model names and "
        "TorchScript files only (docs/security.md)",
    )
    serve.add_argument("--duration", type=float, help="stop after this many seconds")
    serve.add_argument("--no-fuse", action="store_true", help=NO_FUSE)
    serve.add_argument(
        "--frame-rate",
        type=float,
        default=100.0,
        help="methods at a control rate (features, encode): frames a second each sends over "
        "OSC at most (/out/<node>/<method>; default 100)",
    )
    serve.add_argument(
        "--seed",
        type=int,
        help="torch's random seed when the audio starts, for models that draw noise (RAVE's "
        "encoder): the same input then gives the same output",
    )
    serve.set_defaults(run=_serve)

    rendering = argparse.ArgumentParser(
        add_help=False,
        parents=[models, racked, trusting, versions, threads, optimizing, devices],
    )
    rendering.add_argument("--score", help="text file of timed messages: time /address args...")
    rendering.add_argument("--block", type=_positive, help="block size (default: the model's)")
    rendering.add_argument("--format", default=".wav", help="extension of files in a folder")
    rendering.add_argument("--force", action="store_true", help="overwrite existing outputs")
    rendering.add_argument("--no-fuse", action="store_true", help=NO_FUSE)
    rendering.add_argument(
        "--no-resample", action="store_true", help="refuse inputs at another sample rate"
    )
    rendering.add_argument(
        "--mono",
        action="store_true",
        help="mix the input down to one channel first (default: every channel kept, one "
        "stream of the model each)",
    )
    rendering.add_argument("--sr", type=_positive, help="output sample rate (default: the input's)")
    rendering.add_argument(
        "--keep-latency",
        action="store_true",
        help="keep the model's latency at the start (default: trimmed, the output aligned "
        "with the input)",
    )
    rendering.add_argument(
        "--seed",
        type=int,
        default=0,
        help="torch's random seed at the start of each file, for models that draw noise "
        "(RAVE's encoder): the same seed renders the same bytes (default 0)",
    )
    rendering.add_argument(
        "--workers",
        type=_positive,
        help="files rendered at once, each in a process of its own with the model loaded once "
        "(default: the cores; 1 renders in this process)",
    )
    rendering.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="render on a Ray cluster, one actor per worker (ADDRESS: the cluster's, e.g. "
        "auto or ray://head:10001; local: start one here, whose services listen on every "
        "interface of this machine, then give --ray local after IN); needs pip install "
        "'bendserver[ray]'",
    )

    render = commands.add_parser(
        "render", parents=[rendering], help="render sound files through a bended model"
    )
    render.add_argument(
        "inputs", nargs="+", metavar="IN", help="input sound files, or folders of them"
    )
    render.add_argument("-o", "--output", required=True, help="output file, or folder")
    render.set_defaults(run=_render)

    sweep = commands.add_parser(
        "sweep",
        parents=[rendering],
        help="render one file over a grid of settings: files, a CSV of features, a contact sheet",
    )
    sweep.add_argument("input", metavar="IN", help="the input sound file")
    sweep.add_argument(
        "--vary",
        action="append",
        required=True,
        metavar="OP.PARAM=VALUES",
        help="a varied setting: mask.prob=0:1:5 (5 values from 0 to 1), noise.std=0,0.1,0.3, "
        "or /engine/gain=0.5,1 (repeatable: the grid of all combinations)",
    )
    sweep.add_argument("-o", "--output", required=True, help="the folder written")
    sweep.set_defaults(run=_sweep)

    info = commands.add_parser(
        "info", parents=[models, trusting], help="print a model's weights and activations"
    )
    info.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model name or folder")
    info.add_argument("--rack", metavar="FILE", help="print a rack file's nodes and latency")
    info.set_defaults(run=_info)

    bench = commands.add_parser(
        "bench",
        parents=[models, racked, threads, optimizing, devices],
        help="engine vs raw eager, per block size, in one process",
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
        help="write a bended model, or a rack, as an nn~ TorchScript file (its ops' parameters "
        "as attributes)",
    )
    export.add_argument(
        "model",
        nargs="?",
        action="append",  # one list with -m's, in the command line's order
        default=argparse.SUPPRESS,  # else an absent one would undo -m
        help="model name, folder, file.py:Class or .ts file",
    )
    export.add_argument(
        "-m",
        "--model",
        action="append",
        dest="model",
        help="a model as above, model.method or file.ts:method; repeated: a chain in order, "
        "exported as one file (its attributes <node>_<op>_<param>)",
    )
    export.add_argument(
        "--rack", metavar="FILE", help="a rack file (TOML, docs/rack.md) or a shipped one's name"
    )
    export.add_argument(
        "-p",
        "--preset",
        help="preset name or .json file (default: the model's; 'none': no preset); of a rack, "
        "its first node's where the rack file gives none",
    )
    export.add_argument("-o", "--output", required=True, help="the .ts file to write")
    export.add_argument(
        "--block",
        type=_positive,
        help="block size a Python model (every rack) is exported for (default: the (first) "
        "model's)",
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
        "--period", type=_positive, help="the JACK server's period (default: the block)"
    )
    stress.add_argument(
        "--jack-rate",
        type=_positive,
        default=48000,
        help="the JACK server's sample rate (default 48000; 44100 plays a 44.1 kHz model with "
        "no resampling)",
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
        _take_models(args)
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
