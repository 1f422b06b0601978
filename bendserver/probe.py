"""A model's own code run once in a forked child before the command loads it.

A model folder's ``model.py`` (or a native extension it uses) may kill the process that runs it:
``os.abort()``, a segfault. Run in the command's own process, that ends ``info``, ``render`` or
``serve`` with no word. :func:`probe_model` loads the model and calls each streaming method once
on a block of zeros in a child forked from the command (torch is already imported there: the
probe costs one load and one call, not a new interpreter), and a child that dies becomes a
:class:`ModelCrashed` naming the model, what happened (signal, exit code), where in the model's
code, and that it is the model's code, not bendserver. Shipped models are bendserver's own and
are not probed; ``--trust-model`` skips the probe for others.

``check=True`` (a live server's ``/model/load``, which must not load into the process that plays
what it has not seen work) also refuses a model the child could not load (a truncated or corrupt
``.ts``, a file torch cannot read, a Python error) or whose first call gives the wrong shape or
values that are not finite, with the reason the child met; the waiting lets long work breathe
(:mod:`bendserver.slices`), so a control worker answers queries meanwhile.
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

from .errors import BendingError, ModelCrashed, describe
from .loader import TORCHSCRIPT_SUFFIXES, load_model, model_location
from .paths import PACKAGE, SHIPPED_MODELS
from .slices import breathe

#: Seconds the child may take (loading a large model included); past that it is stopped and
#: the command goes on without the probe's answer.
TIMEOUT = 120.0
#: How the child's last line on its steps pipe starts when the model failed without dying.
_FAILED = "failed: "
#: Seconds between two looks at the child while waiting (each a point where work may breathe).
_POLL = 0.02
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def probe_model(
    source: str,
    search: Iterable[str | Path] = (),
    check: bool = False,
    block: int | None = None,
    shipped: bool = False,
    code_from: Iterable[str | Path] | None = None,
) -> bool:
    """Load ``source`` and call each of its methods once (on blocks of ``block`` frames, None:
    the model's own) in a forked child; raise :class:`ModelCrashed` if that kills the child.
    A Python error in the child is left to the command's own load to report, unless ``check``:
    then it, an output of the wrong shape or not finite, and a child that does not finish are
    a BendingError. Shipped models are not probed, unless ``shipped`` (to measure the cost);
    nor is a source that names no file (its load says so). Returns whether it probed."""
    location = model_location(source, search)
    if location is None:
        return False
    if not shipped and location.resolve().is_relative_to(SHIPPED_MODELS.resolve()):
        return False
    steps_read, steps_write = os.pipe()
    trace_read, trace_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(steps_read)
        os.close(trace_read)
        _child(source, search, block, steps_write, trace_write, code_from)
    os.close(steps_write)
    os.close(trace_write)
    try:
        steps, trace, status = _wait(pid, steps_read, trace_read)
    finally:
        os.close(steps_read)
        os.close(trace_read)
    last = steps.splitlines()[-1] if steps else "starting"
    if status is None:
        if check:
            raise BendingError(
                f"model {source!r}: loading it and calling it once took longer than "
                f"{TIMEOUT:g} s in a child process; nothing was loaded"
            )
        return True
    if status != 0:
        raise ModelCrashed(_verdict(source, location, last, status, trace))
    if check and last.startswith(_FAILED):
        raise BendingError(f"model {source!r}: {last[len(_FAILED) :]} (nothing was loaded)")
    return True


def _child(
    source: str,
    search: Iterable[str | Path],
    frames: int | None,
    steps: int,
    trace: int,
    code_from: Iterable[str | Path] | None,
) -> None:
    """Load the model, call each method on zeros, saying each step on ``steps`` and, last, why
    it failed (an error, an output of the wrong shape or not finite); a fatal signal writes the
    Python stack to ``trace``. Exits 0 unless the model's code ends the process."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # prints come once
        faulthandler.enable(file=trace, all_threads=False)
        torch.set_num_threads(1)
        os.write(steps, b"while loading it\n")
        # the command's load measures the latency
        model = load_model(source, search=search, latency=0, code_from=code_from)
        block = frames or model.block
        for name, spec in model.methods.items():
            os.write(steps, f"at the first call of {name}()\n".encode())
            zeros = torch.zeros(1, spec.in_channels, block // spec.in_ratio)
            with torch.inference_mode():
                out = getattr(model.module, name)(zeros)
            _check_output(name, out, [1, spec.out_channels, block // spec.out_ratio])
    except BaseException as error:  # an error, not a death: said, for ``check``
        os.write(steps, f"{_FAILED}{describe(error)}\n".encode(errors="replace"))
    os._exit(0)


def _check_output(name: str, out: object, wanted: list[int]) -> None:
    """Refuse an output that is no tensor of the shape ``wanted``, or has values not finite."""
    if not isinstance(out, torch.Tensor):
        raise BendingError(f"{name}() returned a {type(out).__name__}, not a tensor")
    if list(out.shape) != wanted:
        raise BendingError(f"{name}() gave {list(out.shape)} for a block, not {wanted}")
    if not bool(torch.isfinite(out).all()):
        raise BendingError(f"{name}() gave values that are not finite (NaN or infinite)")


def _wait(pid: int, steps: int, trace: int) -> tuple[str, str, int | None]:
    """What the child said, its stack at a fatal signal, and its exit status (as
    ``os.waitstatus_to_exitcode``: minus the signal's number for a signal), or None when it
    took longer than :data:`TIMEOUT` and was stopped."""
    chunks: dict[int, list[bytes]] = {steps: [], trace: []}
    open_fds = [steps, trace]
    deadline = time.monotonic() + TIMEOUT
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select(open_fds, [], [], min(left, _POLL))
            breathe()  # may raise: the work waiting is stopped
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
    except BaseException as error:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if isinstance(error, TimeoutError):
            return "", "", None
        raise
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
