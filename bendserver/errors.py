"""Errors raised by bendserver's public API, and how any error reaches a user.

Every error a user can provoke is a :class:`BendingError` (or a subclass) whose message says what
went wrong and what to do about it. :func:`describe` is the one path from an exception to what a
user reads (the command line and the OSC edge both use it): one line of bounded length, and
anything that is not a BendingError or a file the system refused is named as a bug.
"""

from __future__ import annotations

from .limits import MAX_MESSAGE_CHARS


class BendingError(Exception):
    """Base class of bendserver's errors: bad keys, bad shapes, bad configs, bad inputs."""


class FlowGuardError(BendingError):
    """An input would take another control-flow path than the one frozen at trace time."""


class ShapeError(BendingError):
    """A shape-bound bending op was given a tensor of another shape than the traced one."""


class ModelCrashed(BendingError):
    """A model's own code killed the process that ran it (a signal, or an exit of its own)."""


def is_bug(error: BaseException) -> bool:
    """Whether ``error`` is a bug in bendserver: neither a BendingError nor the system refusing a
    file (an OSError naming it: no such folder, permission denied)."""
    if isinstance(error, BendingError):
        return False
    return not (isinstance(error, OSError) and error.filename is not None)


def describe(error: BaseException) -> str:
    """What a user reads about ``error``, on one line: a BendingError's message, the file and the
    reason the system gave, or, for a bug, ``internal error`` with its type and message."""
    if isinstance(error, BendingError):
        text = str(error)
    elif not is_bug(error):
        text = f"cannot use {error.filename}: {error.strerror or error}"
    else:
        text = f"internal error, a bug in bendserver: {type(error).__name__}: {error}"
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE_CHARS:  # what a user gave, quoted whole, would be all of it
        text = f"{text[:MAX_MESSAGE_CHARS]}... ({len(text) - MAX_MESSAGE_CHARS} characters more)"
    return text
