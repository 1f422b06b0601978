"""``bendserver render`` and ``sweep``: sound files through a bended model (or a rack), in
worker processes or on Ray, resuming from the output folder's manifest."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import BendingError
from ..files import check_writable
from .options import NO_FUSE, Parents, positive, probe


def _missing(inputs: list[str], score: str | None) -> None:
    """Refuse inputs and a score that are not there, naming every one of them at once (the
    score alone was named, then the input on the next try)."""
    missing = [f"no input file {i}" for i in inputs if not Path(i).exists()]
    if score is not None and not Path(score).is_file():
        missing.append(f"no score file {score}")
    if missing:
        raise BendingError(", ".join(missing))


def run_render(args: argparse.Namespace) -> int:
    """Render each input into the output file, or into the output folder."""
    from ..render.offline import check_outputs, read_score, sound_files

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


def run_sweep(args: argparse.Namespace) -> int:
    """Render one input over the grid of settings; write the features' table and the
    contact sheet."""
    from ..files import write_text
    from ..render.contact import Cell, contact_sheet
    from ..render.offline import check_outputs, read_score
    from ..render.sweep import cell_events, cell_stem, cells, features, parse_vary, table

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
    from ..render.worker import Job

    return Job(str(source), str(target), tuple(events), settings)


def _recipe(args: argparse.Namespace) -> Any:
    from ..render.worker import Recipe

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


def _run_batch(args: argparse.Namespace, jobs: list, manifest: bool) -> int:
    """Render ``jobs`` (files skipped by the output folder's manifest, if ``manifest``) with
    one progress bar; Ctrl-C leaves the complete files and says how to go on."""
    from tqdm import tqdm

    from ..render.batch import Plan, plan_jobs, run_jobs
    from ..render.frames import source_info
    from ..render.manifest import Manifest
    from ..render.worker import Done

    recipe = _recipe(args)
    folder = Path(jobs[0].target).parent
    if manifest:
        plan = plan_jobs(recipe, jobs, folder, args.force)
    else:  # one file: nothing to resume, no manifest beside it
        if Path(jobs[0].target).exists() and not args.force:
            raise BendingError(f"{jobs[0].target} exists: pass --force to overwrite it")
        plan = Plan(jobs, [], Manifest(folder), {})
    probe(args)
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
    from ..render.batch import default_workers

    return args.workers or default_workers()


def _ray_address(args: argparse.Namespace) -> str | None:
    return args.ray


def add_parser(commands: Any, p: Parents) -> None:
    """The ``render`` and ``sweep`` commands and the options they share."""
    rendering = argparse.ArgumentParser(
        add_help=False,
        parents=[p.models, p.racked, p.trusting, p.versions, p.threads, p.optimizing, p.devices],
    )
    rendering.add_argument("--score", help="text file of timed messages: time /address args...")
    rendering.add_argument("--block", type=positive, help="block size (default: the model's)")
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
    rendering.add_argument("--sr", type=positive, help="output sample rate (default: the input's)")
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
        type=positive,
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
    render.set_defaults(run=run_render)

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
    sweep.set_defaults(run=run_sweep)
