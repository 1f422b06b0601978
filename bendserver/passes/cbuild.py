"""A native run's C source compiled into a shared library by the machine's C compiler, kept in
the cache folder under the digest of what made it (source, compiler, flags): a graph built
again (a bend added, the server started again) loads it instead of compiling it."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ..paths import cache_dir

log = logging.getLogger("bendserver.passes")

#: Seconds a compilation may take before the run plays TorchScript instead.
TIMEOUT = 120


class CompileError(Exception):
    """No compiler, or the source did not compile: the runs play TorchScript."""


@functools.cache
def compiler() -> tuple[str, str]:
    """The C compiler (``$CC``, else ``cc``) and the first line of its ``--version``."""
    name = os.environ.get("CC", "cc")
    path = shutil.which(name)
    if path is None:
        raise CompileError(f"no C compiler ({name}) on PATH")
    try:
        version = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as error:
        raise CompileError(f"{name} --version failed: {error}") from None
    return path, version


def flags() -> list[str]:
    """Optimised, position-independent, for the vector units torch itself uses here (AVX2 and
    FMA where torch's CPU capability says so: a cached library never meets a CPU without)."""
    chosen = ["-O2", "-std=c11", "-shared", "-fPIC", "-fno-math-errno"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        chosen += ["-mavx2", "-mfma"]
    return chosen


def library(source: str) -> ctypes.CDLL:
    """``source`` compiled and loaded (from the cache folder where it was compiled before)."""
    path, version = compiler()
    options = flags()
    digest = hashlib.sha256("\0".join([source, version, *options]).encode()).hexdigest()[:32]
    kept = cache_dir() / "native" / f"{digest}.so"
    if not kept.exists():
        _compile(path, options, source, kept)
    return ctypes.CDLL(str(kept))


def _compile(path: str, options: list[str], source: str, kept: Path) -> None:
    """Compile into a temporary folder, then move the library into place whole (processes
    compiling the same source at once each move a complete file)."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        folder = kept.parent
    except OSError:
        folder = Path(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(dir=folder) as work:
        c_file, so_file = Path(work) / "run.c", Path(work) / "run.so"
        c_file.write_text(source)
        try:
            done = subprocess.run(
                [path, *options, "-o", str(so_file), str(c_file)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise CompileError(f"{path} failed: {error}") from None
        if done.returncode != 0:
            raise CompileError(f"{path} failed: {done.stderr.strip()[:400]}")
        os.replace(so_file, kept)
