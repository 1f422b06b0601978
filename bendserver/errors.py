"""Errors raised by bendserver's public API.

Every error a user can provoke is a :class:`BendingError` (or a subclass) whose message says what
went wrong and what to do about it.
"""


class BendingError(Exception):
    """Base class of bendserver's errors: bad keys, bad shapes, bad configs, bad inputs."""


class FlowGuardError(BendingError):
    """An input would take another control-flow path than the one frozen at trace time."""


class ShapeError(BendingError):
    """A shape-bound bending op was given a tensor of another shape than the traced one."""
