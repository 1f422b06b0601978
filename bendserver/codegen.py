"""The Python code fx generates for a graph compiled in a helper process while audio plays.

A graph module's ``forward`` is Python source that fx compiles with ``compile``, which holds the
interpreter throughout: for a traced model of a few thousand nodes (wavae: 45 000 characters)
that is 6 ms, longer than the audio's compute thread may wait for it at the default ``--ahead``
(measured with ``scripts/gil_holds.py``). So while work runs in slices on a live server's control
worker (:func:`bendserver.slices.active`: ``/model/load``, a rebuilt graph), a long source goes
to a helper interpreter that compiles it and hands back the code object marshalled;
``marshal.loads`` takes 0.07 ms for that code. Waiting on the helper's pipe leaves the interpreter
to the audio. Short sources, and any work not in slices, are compiled here as before; a helper
that fails or dies changes nothing but the place (the source is compiled here then).
"""

from __future__ import annotations

import atexit
import marshal
import struct
import subprocess
import sys
import threading
import types

from . import compat
from .slices import active

#: Characters of source compiled here even in slices (compile takes about 0.13 ms per thousand).
ASIDE = 4000

#: The helper: reads (length, filename NUL source) records, answers (length, marshalled code),
#: a length of 0 when the source does not compile (then it is compiled here, for the error).
_HELPER = r"""
import marshal, struct, sys
read, write = sys.stdin.buffer, sys.stdout.buffer
while header := read.read(8):
    filename, _, source = read.read(struct.unpack("<Q", header)[0]).partition(b"\0")
    try:
        code = marshal.dumps(compile(source.decode(), filename.decode(), "exec", dont_inherit=True))
    except Exception:
        code = b""
    write.write(struct.pack("<Q", len(code)) + code)
    write.flush()
"""


class Helper:
    """A helper interpreter (the same Python) that compiles sources; started on first use."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.compiled = 0  #: sources compiled by the helper so far

    def compile(self, source: str, filename: str) -> types.CodeType | None:
        """``source`` compiled by the helper, or None when it could not (compile it here)."""
        with self._lock:
            try:
                data = self._ask(f"{filename}\0{source}".encode())
            except (OSError, ValueError, struct.error):  # it died: the next source starts one
                self.close()
                return None
            if not data:
                return None
            self.compiled += 1
            return marshal.loads(data)

    def _ask(self, record: bytes) -> bytes:
        process = self._process
        if process is None or process.poll() is not None:
            process = self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _HELPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(struct.pack("<Q", len(record)) + record)
        process.stdin.flush()
        (length,) = struct.unpack("<Q", _read(process.stdout, 8))
        return _read(process.stdout, length)

    def close(self) -> None:
        """Stop the helper (a later source starts another)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()


def _read(pipe, size: int) -> bytes:
    data = pipe.read(size)
    if len(data) != size:
        raise ValueError("the compile helper ended")
    return data


#: The process's helper (stopped at exit; a forked child's Popen finds it not its own and
#: starts one of its own).
helper = Helper()
atexit.register(helper.close)


def compile_source(source: str, filename: str) -> types.CodeType:
    """``source`` (fx's generated code, a model's Python file) compiled: by the helper when this
    thread works in slices and the source is long, else here."""
    if active() and len(source) >= ASIDE:
        code = helper.compile(source, filename)
        if code is not None:
            return code
    return compile(source, filename, "exec", dont_inherit=True)


def compile_aside() -> None:
    """Route fx's code generation through :func:`compile_source` (once is enough)."""
    compat.route_fx_compile(compile_source)
