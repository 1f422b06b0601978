"""Batch render at scale, measured in one run: a folder of files rendered with ``--workers 1``,
``--workers N`` and (with ``--ray``) on a local Ray cluster of N CPUs, each as the command a
user runs (process start, model load and Ray's start included), and whether every output is
byte-identical to the sequential one. CPU seconds (those of the processes the command waited
for: not Ray's, which its own daemons run) say what the workers cost beyond the sequential
render, whatever else loads the machine, and cores (CPU seconds over wall seconds) how much of
the machine the run had: about 1 for ``--workers 2`` means another program held the second
core. ``--breakdown`` says where each run's time went: the command's start (imports, then the
manifest's digests and the inputs' headers), each process's (the command's, a pool process's
or a Ray actor's) first file, its files' render times and its time not rendering, how long the
others' files waited for the command to record them, and the end (the pool's stop and the
interpreter's exit).

    python scripts/bench_batch.py                  # 40 files of 10 s through drive, 1 vs 2 workers
    python scripts/bench_batch.py --ray            # and Ray with 2 CPUs
    python scripts/bench_batch.py --breakdown      # and where the time went
    python scripts/bench_batch.py -m rave.ts -p none --files 8 --seconds 10 --ray
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf


def make_inputs(folder: Path, files: int, seconds: float, rate: int) -> None:
    """``files`` mono files of ``seconds``: a tone of its own pitch and noise, swelling."""
    folder.mkdir(parents=True)
    t = np.arange(int(seconds * rate)) / rate
    for index in range(files):
        noise = np.random.default_rng(index).standard_normal(t.size)
        tone = np.sin(2 * np.pi * 55 * (index % 24 + 2) * t)
        swell = 0.5 + 0.5 * np.sin(2 * np.pi * 0.3 * t)
        audio = ((0.4 * tone + 0.2 * noise) * swell).astype(np.float32)
        sf.write(str(folder / f"in{index:03d}.wav"), audio, rate, subtype="FLOAT")


def run(command: list[str], timeline: Path | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, of the command and the processes it waited
    for) of one ``bendserver`` command (exit status checked); with ``timeline``, the command
    runs under :func:`timed` and writes its events there."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    wrapper = ["-m", "bendserver.cli"]
    if timeline is not None:
        wrapper = [__file__, "--timed", str(timeline), f"{started:.6f}"]
    result = subprocess.run([sys.executable, *wrapper, *command], capture_output=True, text=True)
    wall = time.time() - started
    if result.returncode:
        raise SystemExit(f"bendserver {' '.join(command)} failed:\n{result.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def timed(timeline: Path, started: float, argv: list[str]) -> None:
    """Run ``bendserver argv`` in this process, recording (seconds since ``started``) when
    the imports ended, when rendering began, every file (which process, when it began and
    ended, when the command had recorded it, that process's torch threads and threads in all),
    and when the command returned."""
    import torch

    import bendserver.render.batch as batch
    from bendserver.cli import main

    events: dict = {"imported": time.time() - started, "files": [], "command": os.getpid()}
    render, run_jobs = batch.Worker.render, batch.run_jobs

    def render_counted(self, *args, **kwargs):  # forked pool processes inherit it
        done = render(self, *args, **kwargs)
        done.threads = [torch.get_num_threads(), len(os.listdir("/proc/self/task"))]
        done.omp = os.environ.get("OMP_NUM_THREADS")
        return done

    def run_jobs_timed(recipe, plan, workers, ray_address, done, record):
        events["rendering"] = time.time() - started

        def done_timed(result):
            done(result)
            now = time.time()
            events["files"].append(
                {
                    "process": result.process,
                    "began": result.began - started,
                    "ended": result.ended - started,
                    "reported": now - started,
                    "threads": getattr(result, "threads", None),
                    "omp": getattr(result, "omp", None),
                }
            )

        return run_jobs(recipe, plan, workers, ray_address, done_timed, record)

    batch.Worker.render, batch.run_jobs = render_counted, run_jobs_timed
    code = main(argv)
    events["returned"] = time.time() - started
    timeline.write_text(json.dumps(events))
    raise SystemExit(code)


def breakdown(timeline: Path, wall: float) -> list[str]:
    """Where one run's time went, from the events :func:`timed` recorded."""
    events = json.loads(timeline.read_text())
    files, rendering = events["files"], events["rendering"]
    driver = events["command"]
    last = max(f["ended"] for f in files)
    lines = [
        f"  rendering {last - rendering:.2f} s (from its start to the last file's end); "
        f"start {rendering:.2f} s (imports {events['imported']:.2f} s, then the manifest's "
        f"digests and the inputs' headers {rendering - events['imported']:.2f} s); end "
        f"{wall - max(f['reported'] for f in files):.2f} s after the last file was recorded "
        f"(of which {wall - events['returned']:.2f} s the interpreter's exit)"
    ]
    processes = sorted({f["process"] for f in files}, key=lambda p: p != driver)
    for process in processes:
        own = [f for f in files if f["process"] == process]
        times = [f["ended"] - f["began"] for f in own]
        first = min(f["began"] for f in own)
        busy = sum(times)
        idle = last - first - busy
        threads, omp = own[0]["threads"], own[0]["omp"]
        name = "command" if process == driver else f"other {process}"
        lines.append(
            f"  {name:<11} first file at {first - rendering:5.2f} s after rendering began, "
            f"{len(own):3d} files, render p50 {statistics.median(times):.3f} s max "
            f"{max(times):.3f} s, busy {busy:.2f} s, not rendering {idle:.2f} s until the last "
            f"file ended; torch threads {threads[0] if threads else '?'}, threads in all "
            f"{threads[1] if threads else '?'}, OMP_NUM_THREADS {omp}"
        )
    waits = [f["reported"] - f["ended"] for f in files if f["process"] != driver]
    if waits:
        lines.append(
            f"  the others' files waited for the command to record them: p50 "
            f"{statistics.median(waits):.3f} s, max {max(waits):.3f} s"
        )
    return lines


def same_bytes(a: Path, b: Path) -> str:
    """``yes`` where the folders hold the same files with the same bytes; else which differ,
    and whether the two runs' convolution forms (each timed in its own run) differ too."""
    from bendserver.render.manifest import MANIFEST

    names = sorted(p.name for p in a.glob("*.wav"))
    if names != sorted(p.name for p in b.glob("*.wav")):
        return "NO (other files)"
    differ = [n for n in names if (a / n).read_bytes() != (b / n).read_bytes()]
    if not differ:
        return "yes"
    forms = [json.loads((f / MANIFEST).read_text())["forms"] for f in (a, b)]
    why = "the runs timed other forms" if forms[0] != forms[1] else "the same forms"
    return f"NO ({len(differ)} of {len(names)} files; {why})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default="drive")
    parser.add_argument("-p", "--preset", help="default: the model's own ('none': no preset)")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=48000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also on a local Ray cluster")
    parser.add_argument("--breakdown", action="store_true", help="say where each run's time went")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as folder:
        root = Path(folder)
        make_inputs(root / "in", args.files, args.seconds, args.rate)
        preset = ["-p", args.preset] if args.preset else []
        base = ["render", str(root / "in"), "-m", args.model, *preset, "--trust-model"]
        runs = [("workers 1", ["--workers", "1"])]
        runs.append((f"workers {args.workers}", ["--workers", str(args.workers)]))
        if args.ray:
            runs.append(
                (f"ray {args.workers} CPUs", ["--workers", str(args.workers), "--ray", "local"])
            )
        audio = args.files * args.seconds
        named = args.preset or "its own preset"
        print(f"{args.files} files of {args.seconds:g} s through {args.model} ({named})")
        print(
            f"{'run':<16}{'wall s':>8}{'cpu s':>8}{'cores':>7}{'x real time':>13}{'speed-up':>10}"
            "  same bytes"
        )
        first = None
        for index, (name, options) in enumerate(runs):
            out = root / f"out{index}"
            timeline = root / f"timeline{index}.json" if args.breakdown else None
            seconds, cpu = run([*base, "-o", str(out), *options], timeline)
            first = first or seconds
            same = "-" if index == 0 else same_bytes(root / "out0", out)
            figures = (
                f"{seconds:>8.2f}{cpu:>8.2f}{cpu / seconds:>7.2f}{audio / seconds:>13.1f}"
                f"{first / seconds:>10.2f}"
            )
            print(f"{name:<16}{figures}  {same}")
            if timeline is not None:
                print("\n".join(breakdown(timeline, seconds)), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--timed"]:
        timed(Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
    main()
