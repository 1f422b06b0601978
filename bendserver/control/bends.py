"""Handlers of what plays in a node: ops and their parameters, weight versions, the engine's
settings (gain, mix, bypass, reset) and an nn~ file's attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..bending.ops import OPS
from ..errors import BendingError
from ..modulation.oscillators import set_freq
from .grammar import Handler, Match

if TYPE_CHECKING:
    from .controller import Controller


def set_param(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    value, *ramp = args
    if m.path["param"] == "freq" and set_freq(ctl.engine, m.path["id"], value, at):
        return  # an Oscillate played as an LFO modulator (deprecated)
    ctl.engine.set_param(m.path["id"], m.path["param"], value, ramp[0] if ramp else 0.0, at=at)


def enable(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.enable_op(m.path["id"], args[0], at=at)


def add(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    op_id, op_name, key, *options = args
    if op_name not in OPS:
        raise BendingError(f"unknown op {op_name!r}; ops: {sorted(OPS)}")
    kwargs = dict(zip(options[::2], options[1::2], strict=True))
    try:
        op = OPS[op_name](**kwargs)
        # options are checked where they are used: an option of the wrong type (seed "x",
        # dim 0.5) fails building the op or its state, and nothing is kept (add_op's own rule)
        ctl.engine.add_op(op_id, op, key, at=at)
    except (TypeError, ValueError, IndexError) as error:
        raise BendingError(f"bad arguments for {op_name} {options}: {error}") from None


def remove(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.remove_op(args[0], at=at)


def clear(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.clear_ops(at=at)


def interp(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.set_interpolation(dict(zip(args[::2], args[1::2], strict=True)), at=at)


def version(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.set_version(args[0], at=at)


def engine_setting(setter: str) -> Handler:
    """A handler calling ``engine.<setter>(value, at=at)`` (``set_gain``...)."""

    def handler(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
        getattr(ctl.engine, setter)(args[0], at=at)

    return handler


def attribute(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.set_attribute(m.path["name"], args, at=at)


def reset(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    ctl.engine.request_reset(at=at)
