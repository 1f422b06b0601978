"""Long control-side work in short slices: loops that may run long (building thousands of ops,
a weight through a long chain of ops) call :func:`breathe`; a thread that must stay responsive
runs them under :func:`sliced`, and its callback runs between slices (answering queries, leaving
the interpreter to the audio, or raising to stop the work). Elsewhere ``breathe`` costs one
lookup and does nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

#: Longest a slice runs before the callback, in seconds.
SLICE = 0.002

_Slicing = tuple[Callable[[], None], list[float], Callable[[], bool] | None]
_callback: ContextVar[_Slicing | None] = ContextVar("bendserver_slice", default=None)


@contextlib.contextmanager
def sliced(
    callback: Callable[[], None],
    every: float = SLICE,
    pause: Callable[[], bool] | None = None,
) -> Iterator[None]:
    """Run the block with ``callback`` called from :func:`breathe` at most every ``every``
    seconds of work (this thread only), and at once whenever ``pause()`` (a cheap check: the
    audio is computing a block) is true. What the callback raises ends the work."""
    token = _callback.set((callback, [time.perf_counter() + every, every], pause))
    try:
        yield
    finally:
        _callback.reset(token)


def active() -> bool:
    """Whether this thread's work runs in slices (:func:`sliced`): a live server's control
    worker, whose long holds of the interpreter the audio would feel."""
    return _callback.get() is not None


def breathe() -> None:
    """A point where long work may pause: the callback of :func:`sliced` runs here once its
    slice is used up, or as soon as its pause check says so."""
    current = _callback.get()
    if current is None:
        return
    callback, timing, pause = current
    if time.perf_counter() < timing[0] and (pause is None or not pause()):
        return
    callback()
    timing[0] = time.perf_counter() + timing[1]
