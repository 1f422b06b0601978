"""A rack's output stage: its gain and bypass before the fuse, its mute after it.

What a node does to its own output (a gain and a dry/wet mix moved linearly across the block
when they change, :func:`mix_and_gain`) the rack does to its whole output: ``gain`` is that
gain, ``bypass`` moves the mix to the rack's input (dry) and back, and ``mute`` fades the
fused output to silence and back, each across one block, without a click. The control side
submits each setting as a command (its value, absolute) for the next block or the block at a
sample time; the audio side writes it at that block boundary and hands the command back to be
dropped there.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..errors import BendingError
from .commands import CommandQueue

#: The settings of the output stage and what each takes.
SETTINGS = {"gain": "a number in [0, 16]", "mute": "0 or 1", "bypass": "0 or 1"}


@dataclass(frozen=True)
class OutputState:
    """The rack's output settings: ``gain`` (0..16), ``mute`` and ``bypass`` (its input out)."""

    gain: float = 1.0
    mute: bool = False
    bypass: bool = False


def ramped(old: float, new: float, frames: int) -> float | np.ndarray:
    """``new``, or a line from ``old`` to it across a block of ``frames`` where it changed."""
    if old == new:
        return new
    return np.linspace(old, new, frames, endpoint=True, dtype=np.float32)


def mix_and_gain(
    dry: np.ndarray, wet: np.ndarray, mix: float | np.ndarray, gain: float | np.ndarray
) -> np.ndarray:
    """``wet`` mixed with ``dry`` by ``mix`` (1: wet alone; ignored where their shapes
    differ), times ``gain``: each a number or a line across the block (:func:`ramped`)."""
    if dry.shape == wet.shape and not (np.isscalar(mix) and mix == 1.0):
        wet = dry + (wet - dry) * mix
    return wet * gain if not (np.isscalar(gain) and gain == 1.0) else wet


class RackOutput:
    """The output stage of a rack giving ``frames`` frames a block (its control side under
    its own lock; :meth:`process` on the audio side)."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self.commands = CommandQueue()
        #: What plays (written by the audio side when a command applies; ``gain`` also by
        #: the modulators routed to ``/rack/gain``, riding on ``own_gain``, the value set).
        self.gain, self.mute, self.bypass = 1.0, False, False
        self.own_gain = 1.0
        self._played = (1.0, 1.0)  # the mix and gain the last block ended at
        self._level = 1.0  # the level (0: muted) the last block ended at
        #: Changes due wait while set (a rack's preset applies with its nodes' parts).
        self.held = False
        self._lock = threading.Lock()
        #: Each setting's latest change in time order: (sample time, order, value).
        self._latest: dict[str, tuple[int, int, float | bool]] = {}
        self._order = 0
        self._applied = self._pending = OutputState()

    # -- the control side ------------------------------------------------------------------

    def set(self, name: str, value: float | bool, now: int, at: int | None = None) -> None:
        """Play setting ``name`` at ``value`` from the next block (``now``: the rack's time)
        or the block starting at or after sample ``at``."""
        if name not in SETTINGS:
            raise BendingError(f"the rack's output has {', '.join(SETTINGS)}, not {name!r}")
        value = check_setting(name, value)
        with self._lock:
            when = now if at is None else int(at)
            self._order += 1
            latest = self._latest.get(name)
            if latest is None or (when, self._order) >= latest[:2]:
                self._latest[name] = (when, self._order, value)
            self.commands.submit((name, value), at, f"rack {name}")
            self.commands.drain_released()

    @property
    def pending(self) -> OutputState:
        """What plays once every submitted change has applied (presets save it)."""
        with self._lock:
            now = OutputState(**{name: latest[2] for name, latest in self._latest.items()})
            if now != self._pending:
                self._pending = now
            return self._pending

    @property
    def applied(self) -> OutputState:
        """What plays now, its gain as set (``/get`` reads it): the same object while nothing
        changes."""
        now = OutputState(self.own_gain, self.mute, self.bypass)
        if now != self._applied:
            self._applied = now
        return self._applied

    def collect(self) -> None:
        """Drop the commands the audio side applied (control side)."""
        with self._lock:
            self.commands.drain_released()

    # -- the audio side --------------------------------------------------------------------

    def apply_due(self, time: int) -> None:
        """Write the settings due at the block starting at ``time`` (scalar writes)."""
        if self.held:
            return
        for command in self.commands.due(time):
            if not command.cancelled:
                name, value = command.payload
                setattr(self, name, value)
                if name == "gain":
                    self.own_gain = value
                self.commands.applied += 1
            self.commands.finish(command)

    def process(self, dry: np.ndarray, wet: np.ndarray, first: bool) -> np.ndarray:
        """``wet`` (what ``out`` sums) with the bypass and gain playing, each moved across the
        block where it changed (``first``: the stream's first block, at once), before the
        fuse. ``dry`` is the rack's input: bypassed, a rack whose output is not its input's
        shape plays silence."""
        mix = 0.0 if self.bypass else 1.0
        played_mix, played_gain = self._played if not first else (mix, self.gain)
        self._played = (mix, self.gain)
        if (mix, self.gain, played_mix, played_gain) == (1.0, 1.0, 1.0, 1.0):
            return wet
        if dry.shape != wet.shape and (mix, played_mix) != (1.0, 1.0):
            dry = np.zeros_like(wet)
        mixed = ramped(played_mix, mix, self.frames)
        return mix_and_gain(dry, wet, mixed, ramped(played_gain, self.gain, self.frames))

    def muted(self, out: np.ndarray, first: bool) -> np.ndarray:
        """``out`` faded out (or in) across the block where ``mute`` changed, after the fuse:
        muted, the output is silent (the fuse's DC blocker would still ring after a step)."""
        level = 0.0 if self.mute else 1.0
        played = self._level if not first else level
        self._level = level
        if level == played == 1.0:
            return out
        return mix_and_gain(out, out, 1.0, ramped(played, level, self.frames))


def check_setting(name: str, value: float | bool) -> float | bool:
    """``value`` as setting ``name`` takes it, or a BendingError saying what it takes."""
    if name != "gain":
        if value not in (0, 1):
            raise BendingError(f"rack {name} takes {SETTINGS[name]}, got {value!r}")
        return bool(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BendingError(f"rack gain takes {SETTINGS['gain']}, got {value!r}") from None
    if not 0.0 <= number <= 16.0:  # NaN fails too
        raise BendingError(f"rack gain takes {SETTINGS['gain']}, got {value!r}")
    return number
