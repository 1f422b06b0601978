"""Batch render at scale, measured in one run: a folder of files rendered with ``--workers 1``,
``--workers N`` and (with ``--ray``) on a local Ray cluster of N CPUs, each as the command a
user runs (process start, model load and Ray's start included), and whether every output is
byte-identical to the sequential one. CPU seconds (those of the processes the command waited
for: not Ray's, which its own daemons run) say what the workers cost beyond the sequential
render, whatever else loads the machine.

    python scripts/bench_batch.py                  # 40 files of 10 s through drive, 1 vs 2 workers
    python scripts/bench_batch.py --ray            # and Ray with 2 CPUs
    python scripts/bench_batch.py -m rave.ts -p none --files 8 --seconds 10 --ray
"""

from __future__ import annotations

import argparse
import resource
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


def run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, of the command and the processes it waited
    for) of one ``bendserver`` command (exit status checked)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "bendserver.cli", *command], capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"bendserver {' '.join(command)} failed:\n{result.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def same_bytes(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.glob("*.wav"))
    return names == sorted(p.name for p in b.glob("*.wav")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default="drive")
    parser.add_argument("-p", "--preset", help="default: the model's own ('none': no preset)")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=48000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also on a local Ray cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as folder:
        root = Path(folder)
        make_inputs(root / "in", args.files, args.seconds, args.rate)
        preset = ["-p", args.preset] if args.preset else []
        base = ["render", str(root / "in"), "-m", args.model, *preset, "--trust-model"]
        runs = [("workers 1", ["--workers", "1"])]
        runs.append((f"workers {args.workers}", ["--workers", str(args.workers)]))
        if args.ray:
            runs.append((f"ray {args.workers} CPUs", ["--workers", str(args.workers), "--ray"]))
        audio = args.files * args.seconds
        named = args.preset or "its own preset"
        print(f"{args.files} files of {args.seconds:g} s through {args.model} ({named})")
        print(
            f"{'run':<16}{'wall s':>8}{'cpu s':>8}{'x real time':>13}{'speed-up':>10}  same bytes"
        )
        first = None
        for index, (name, options) in enumerate(runs):
            out = root / f"out{index}"
            seconds, cpu = run([*base, "-o", str(out), *options])
            first = first or seconds
            same = "-" if index == 0 else ("yes" if same_bytes(root / "out0", out) else "NO")
            figures = f"{seconds:>8.2f}{cpu:>8.2f}{audio / seconds:>13.1f}{first / seconds:>10.2f}"
            print(f"{name:<16}{figures}  {same}")


if __name__ == "__main__":
    main()
