"""A model's own code run once in a forked child before the command loads it.

A model folder's ``model.py`` (or a native extension it uses) may kill the process that runs it:
``os.abort()``, a segfault. Run in the command's own process, that ends ``info``, ``render`` or
``serve`` with no word. :func:`probe_model` loads the model and calls each streaming method once
on a block of zeros in a child forked from the command (torch is already imported there: the
probe costs one load and one call, not a new interpreter), and a child that dies becomes a
:class:`ModelCrashed` naming the model, what happened (signal, exit code), where in the model's
code, and that it is the model's code, not bendserver. Shipped models are bendserver's own and
are not probed; ``--trust-model`` skips the probe for others.
"""

from __future__ import annotations

import faulthandler
import os
import re
import select
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from .errors import ModelCrashed
from .loader import TORCHSCRIPT_SUFFIXES, load_model, model_location
from .paths import PACKAGE, SHIPPED_MODELS

#: Seconds the child may take (loading a large model included); past that it is stopped and
#: the command goes on without the probe's answer.
TIMEOUT = 120.0
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def probe_model(source: str, search: Iterable[str | Path] = ()) -> None:
    """Load ``source`` and call each of its methods once in a forked child; raise
    :class:`ModelCrashed` if that kills the child. A Python error in the child is left to the
    command's own load to report. Shipped models are not probed."""
    location = model_location(source, search)
    if location is None or location.resolve().is_relative_to(SHIPPED_MODELS.resolve()):
        return
    steps_read, steps_write = os.pipe()
    trace_read, trace_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(steps_read)
        os.close(trace_read)
        _child(source, search, steps_write, trace_write)
    os.close(steps_write)
    os.close(trace_write)
    try:
        steps, trace, status = _wait(pid, steps_read, trace_read)
    finally:
        os.close(steps_read)
        os.close(trace_read)
    if status is None or status == 0:
        return
    step = steps.splitlines()[-1] if steps else "starting"
    raise ModelCrashed(_verdict(source, location, step, status, trace))


def _child(source: str, search: Iterable[str | Path], steps: int, trace: int) -> None:
    """Load the model, call each method on zeros, saying each step on ``steps``; a fatal signal
    writes the Python stack to ``trace``. Exits 0 unless the model's code ends the process."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # prints come once
        faulthandler.enable(file=trace, all_threads=False)
        torch.set_num_threads(1)
        os.write(steps, b"while loading it\n")
        model = load_model(source, search=search, latency=0)  # the command's load measures it
        for name, spec in model.methods.items():
            os.write(steps, f"at the first call of {name}()\n".encode())
            block = torch.zeros(1, spec.in_channels, model.block // spec.in_ratio)
            with torch.inference_mode():
                getattr(model.module, name)(block)
    except BaseException:  # an error, not a death: the command's own load reports it
        pass
    os._exit(0)


def _wait(pid: int, steps: int, trace: int) -> tuple[str, str, int | None]:
    """What the child said, its stack at a fatal signal, and its exit status (as
    ``os.waitstatus_to_exitcode``: minus the signal's number for a signal), or None when it
    took longer than :data:`TIMEOUT` and was stopped."""
    chunks: dict[int, list[bytes]] = {steps: [], trace: []}
    open_fds = [steps, trace]
    deadline = time.monotonic() + TIMEOUT
    while open_fds:
        left = deadline - time.monotonic()
        ready, _, _ = select.select(open_fds, [], [], max(0.0, left))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "", "", None
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
    _, status = os.waitpid(pid, 0)
    text = {fd: b"".join(parts).decode(errors="replace") for fd, parts in chunks.items()}
    return text[steps], text[trace], os.waitstatus_to_exitcode(status)


def _verdict(source: str, location: Path, step: str, status: int, trace: str) -> str:
    """The one line said about a model whose code ended its process."""
    if status < 0:
        name = signal.Signals(-status).name
        what = f"was killed by {name} (signal {-status}, exit code {128 - status})"
    else:
        what = f"exited with code {status}"
    where = _model_frame(trace, location)
    kind = "TorchScript file" if location.suffix in TORCHSCRIPT_SUFFIXES else "code"
    return (
        f"model {source!r}: the process running it {what} {step}{where}. That is the model's "
        f"own {kind} ({location}), not bendserver: fix or replace the model (nothing was loaded)"
    )


def _model_frame(trace: str, location: Path) -> str:
    """`` in FILE line N (FUNCTION)``: the newest frame of the fatal signal's stack that is
    outside Python's library, torch and bendserver (the model's), or nothing."""
    library = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, PACKAGE)}
    for match in _FRAME.finditer(trace):
        file = Path(match["file"]).resolve()
        if not any(file.is_relative_to(folder) for folder in library):
            return f" in {file.name} line {match['line']} ({match['function']})"
    return ""
