"""A model's own code run once in a forked child before the command loads it.

A model folder's ``model.py`` (or a native extension it uses) may kill the process that runs it:
``os.abort()``, a segfault. Run in the command's own process, that ends ``info``, ``render`` or
``serve`` with no word. :func:`probe_model` loads the model and calls each streaming method once
on a block of zeros in a child forked from the command (torch is already imported there: the
probe costs one load and one call, not a new interpreter), and a child that dies becomes a
:class:`ModelCrashed` naming the model, what happened (signal, exit code), where in the model's
code, and that it is the model's code, not bendserver. Shipped models are bendserver's own and
are not probed; ``--trust-model`` skips the probe for others. A TorchScript file holds all
its code: a file the probe passed (by its digest, with this torch) is not probed again.

``check=True`` (a live server's ``/model/load``, which must not load into the process that plays
what it has not seen work) also refuses a model the child could not load (a truncated or corrupt
``.ts``, a file torch cannot read, a Python error) or whose first call gives the wrong shape or
values that are not finite, with the reason the child met; the waiting lets long work breathe
(:mod:`bendserver.slices`), so a control worker answers queries meanwhile.

Whatever the mode, the command never loads a model whose child ended before it reported (an exit
of the model's own, ``os._exit(0)`` included), took longer than :data:`PROBE_SECONDS` (stopped),
or ran out of the address space it is given (:data:`PROBE_MEMORY` beyond what it was forked
with, plus twice the model's files): each is one line saying so. The child dies with the thread
that forked it (``PR_SET_PDEATHSIG``): a command killed while it probes leaves nothing running.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import re
import resource
import select
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from .cache import CacheFile, file_digest
from .errors import BendingError, ModelCrashed, describe
from .limits import PROBE_MEMORY, PROBE_SECONDS
from .loader import TORCHSCRIPT_SUFFIXES, load_model, model_location
from .paths import PACKAGE, SHIPPED_MODELS
from .slices import breathe

#: The child's last line on its steps pipe when the model loaded and answered.
_DONE = "done"
#: How that line starts when the model failed without dying, or ran out of memory.
_FAILED = "failed: "
_MEMORY = "memory: "
#: Linux's prctl option: the signal a process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1
#: Seconds between two looks at the child while waiting (each a point where work may breathe).
_POLL = 0.02
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
#: The TorchScript files the probe passed, by digest and block (a second probe of the same
#: file with the same torch runs the same code on the same zeros).
_PASSED = CacheFile("probed", {"torch": torch.__version__})


def probe_model(
    source: str,
    search: Iterable[str | Path] = (),
    check: bool = False,
    block: int | None = None,
    shipped: bool = False,
    code_from: Iterable[str | Path] | None = None,
) -> bool:
    """Load ``source`` and call each of its methods once (on blocks of ``block`` frames, None:
    the model's own) in a forked child; raise :class:`ModelCrashed` if the child ends before
    it reports (killed, or an exit of the model's own), a BendingError if it takes longer than
    :data:`PROBE_SECONDS` or runs out of memory. A Python error in the child is left to the
    command's own load to report, unless ``check``: then it, and an output of the wrong shape
    or not finite, are a BendingError. Shipped models are not probed, unless ``shipped`` (to
    measure the cost); nor is a source that names no file (its load says so). Returns whether
    it probed."""
    location = model_location(source, search)
    if location is None:
        return False
    if not shipped and location.resolve().is_relative_to(SHIPPED_MODELS.resolve()):
        return False
    passed = None  # the key of a file whose verdict is kept
    if location.suffix in TORCHSCRIPT_SUFFIXES and location.is_file():
        passed = f"{file_digest(location)} {block}"
        if _PASSED.get(passed) is True:
            return False
    memory = PROBE_MEMORY + 2 * _size(location)
    steps_read, steps_write = os.pipe()
    trace_read, trace_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(steps_read)
        os.close(trace_read)
        _child(source, search, block, steps_write, trace_write, code_from, parent, memory)
    os.close(steps_write)
    os.close(trace_write)
    try:
        steps, trace, status = _wait(pid, steps_read, trace_read)
    finally:
        os.close(steps_read)
        os.close(trace_read)
    lines = steps.splitlines()
    last = lines[-1] if lines else ""
    step = next((line for line in reversed(lines) if line.startswith(("while", "at "))), "")
    step = step or "while starting"
    if status is None:
        raise BendingError(
            f"model {source!r}: loading it and calling it once took longer than "
            f"{PROBE_SECONDS:g} s in a child process, which was stopped {step}; nothing was "
            "loaded (a model that needs longer loads with --trust-model)"
        )
    if status != 0 or not last.startswith((_DONE, _FAILED, _MEMORY)):
        raise ModelCrashed(_verdict(source, location, step, status, trace))
    if last.startswith(_MEMORY):
        raise BendingError(
            f"model {source!r} needed more than the {memory / 2**30:.1f} GiB of memory a probe "
            f"gives {step} ({last[len(_MEMORY) :]}); nothing was loaded (a model that needs "
            "more loads with --trust-model)"
        )
    if last.startswith(_FAILED):
        if check:
            raise BendingError(f"model {source!r}: {last[len(_FAILED) :]} (nothing was loaded)")
    elif passed is not None:
        _PASSED.settle(passed, True)
    return True


def _size(location: Path) -> int:
    """The bytes of a model's file, or of the files of its folder (its weights)."""
    try:
        if location.is_dir():
            return sum(entry.stat().st_size for entry in os.scandir(location) if entry.is_file())
        return location.stat().st_size
    except OSError:
        return 0


def _child(
    source: str,
    search: Iterable[str | Path],
    frames: int | None,
    steps: int,
    trace: int,
    code_from: Iterable[str | Path] | None,
    parent: int,
    memory: int,
) -> None:
    """Load the model, call each method on zeros, saying each step on ``steps`` and, last, that
    it is done or why it failed (an error, memory, an output of the wrong shape or not finite);
    a fatal signal writes the Python stack to ``trace``. Dies with ``parent``'s forking thread;
    its address space grows by ``memory`` bytes at most. Exits 0 unless the model's code ends
    the process (an exit of its own, even 0, leaves no last line)."""
    try:
        _die_with_parent(parent)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # prints come once (the command's)
        faulthandler.enable(file=trace, all_threads=False)
    except BaseException:  # never back into the command's code in this process
        os._exit(1)
    try:
        _limit_memory(memory)
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
        os.write(steps, f"{_DONE}\n".encode())
    except SystemExit as exit:  # the model's code ended the process: as os._exit would
        os._exit(exit.code if isinstance(exit.code, int) else 1)
    except BaseException as error:  # an error, not a death: said, for ``check``
        kind = _MEMORY if _out_of_memory(error) else _FAILED
        os.write(steps, f"{kind}{describe(error)}\n".encode(errors="replace"))
    os._exit(0)


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the thread that forked it ends (Linux), and end
    now if that happened already."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _limit_memory(memory: int) -> None:
    """Let this process's address space grow by ``memory`` bytes at most (``RLIMIT_AS``, where
    the system says how large it is): a model asking for more is refused the memory, as an
    error, before the machine runs out."""
    if not os.path.exists("/proc/self/statm"):
        return
    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = mapped + memory
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def _out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` (or one it comes from) is an allocation refused: Python's and numpy's
    MemoryError, torch's allocator, the system's ENOMEM."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, MemoryError) or "can't allocate memory" in str(seen):
            return True
        if isinstance(seen, OSError) and seen.errno == 12:  # ENOMEM
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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
    took longer than :data:`PROBE_SECONDS` and was stopped."""
    chunks: dict[int, list[bytes]] = {steps: [], trace: []}
    open_fds = [steps, trace]
    deadline = time.monotonic() + PROBE_SECONDS
    status: int | None = None
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
        if not isinstance(error, TimeoutError):
            raise
    else:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    text = {fd: b"".join(parts).decode(errors="replace") for fd, parts in chunks.items()}
    return text[steps], text[trace], status


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
