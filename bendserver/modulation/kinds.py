"""The kinds of modulator: named parameters, and what each plays one block at a time.

A modulator is a control source that runs on the audio side: before each block the rack asks
it for one value (``unipolar`` kinds give 0..1, the others -1..1), which its routes turn into
parameter values. Everything a kind keeps between blocks (a phase, an envelope's level, the
sample its trigger came at) lives in the object, so a render of the same input with the same
block size and the same changes plays the same values as live. Objects are made on the control
side; ``value``, ``listen`` and ``trigger`` run on the audio thread: scalar arithmetic, no
allocation but a block's RMS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ..errors import BendingError

#: What a follower or an onset listens to when no source is given: the rack's input.
INPUT = "in"


@dataclass(frozen=True)
class Knob:
    """One parameter of a kind: default, range and what it does."""

    default: float
    low: float
    high: float
    doc: str


class Modulator:
    """Base class: ``knobs`` are the kind's parameters, ``values`` their current values
    (written on the audio side when a change applies), ``level`` the value last played."""

    kind: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    knobs: ClassVar[dict[str, Knob]] = {}
    unipolar: ClassVar[bool] = True
    #: Whether it hears a signal (``source``: the rack's input or a node's output).
    listens: ClassVar[bool] = False

    def __init__(self, values: dict[str, float], source: str = INPUT) -> None:
        self.values = dict(values)
        self.source = source
        self.level = 0.0

    def value(self, time: int, block: int, rate: int) -> float:
        """The value for the block that starts at sample ``time`` (audio side)."""
        raise NotImplementedError

    def add_steps(
        self, out: torch.Tensor, scratch: torch.Tensor, steps: torch.Tensor, span: float
    ) -> None:
        """Add ``span`` x its value at each of the block's ``len(steps)`` time steps to ``out``
        (float64; ``scratch`` as long; ``steps``: 0, 1, ...; audio side, no allocation): the
        value of the block at each, unless the kind moves within a block (an LFO)."""
        out.add_(self.level * span)

    def listen(self, signal: np.ndarray, time: int, block: int, rate: int) -> None:
        """Hear one block of the source, whose next block starts at ``time`` (audio side)."""

    def trigger(self, time: int) -> None:
        """Start again at sample ``time`` (audio side)."""

    def carry(self, old: Modulator) -> None:
        """Take what ``old`` (the same modulator before a change) kept between blocks."""
        self.level = old.level


def rms(signal: np.ndarray) -> float:
    """The root mean square of a block (all channels; a dot product: no temporary)."""
    flat = signal.reshape(-1)
    return math.sqrt(float(np.dot(flat, flat)) / flat.size) if flat.size else 0.0


def smoothing(ms: float, block: int, rate: int) -> float:
    """The one-pole coefficient that moves ``1 - 1/e`` of the way in ``ms``, per block."""
    if ms <= 0:
        return 0.0
    return math.exp(-block / (ms * rate / 1000.0))


class Lfo(Modulator):
    """A sine, ``rate`` cycles per second from ``phase`` (turns), -1..1."""

    kind = "lfo"
    doc = "a sine, -1..1"
    unipolar = False
    knobs = {
        "rate": Knob(1.0, 0.0, 100.0, "cycles per second"),
        "phase": Knob(0.0, 0.0, 1.0, "where it starts, in turns"),
    }

    def __init__(self, values: dict[str, float], source: str = INPUT) -> None:
        super().__init__(values, source)
        self.turns = 0.0
        self.start = 0.0  #: the block's first turn (its phase included)
        self.per_block = 0.0  #: turns a block

    def value(self, time: int, block: int, rate: int) -> float:
        self.start = self.turns + self.values["phase"]
        self.per_block = self.values["rate"] * block / rate
        self.level = math.sin(2 * math.pi * self.start)
        self.turns = (self.turns + self.per_block) % 1.0
        return self.level

    def add_steps(
        self, out: torch.Tensor, scratch: torch.Tensor, steps: torch.Tensor, span: float
    ) -> None:
        """The sine at each step: sample-accurate where a step is a sample."""
        turn = 2 * math.pi * self.per_block / steps.numel()
        torch.mul(steps, turn, out=scratch).add_(2 * math.pi * self.start).sin_()
        out.add_(scratch, alpha=span)

    def carry(self, old: Modulator) -> None:
        super().carry(old)
        self.turns = getattr(old, "turns", 0.0)


class Drift(Modulator):
    """Smoothed random: a new random point ``rate`` times a second (drawn from ``seed`` and
    its index, so the same seed drifts the same way), eased from one to the next, -1..1."""

    kind = "drift"
    doc = "a smooth random walk between points drawn from seed, -1..1"
    unipolar = False
    knobs = {
        "rate": Knob(0.5, 0.0, 50.0, "random points per second"),
        "seed": Knob(0.0, 0.0, 2**31 - 1, "which random points (a whole number)"),
    }

    def __init__(self, values: dict[str, float], source: str = INPUT) -> None:
        super().__init__(values, source)
        self.position = 0.0
        self._points = (-1, -1, 0.0, 0.0)  #: (seed, index, its point, the next): drawn once

    def value(self, time: int, block: int, rate: int) -> float:
        index = math.floor(self.position)
        ease = (1 - math.cos(math.pi * (self.position - index))) / 2
        seed = int(self.values["seed"])
        if self._points[:2] != (seed, index):
            self._points = (seed, index, _point(seed, index), _point(seed, index + 1))
        a, b = self._points[2:]
        self.level = a + (b - a) * ease
        self.position += self.values["rate"] * block / rate
        return self.level

    def carry(self, old: Modulator) -> None:
        super().carry(old)
        self.position = getattr(old, "position", 0.0)


def _point(seed: int, index: int) -> float:
    """A random number in -1..1 from ``seed`` and ``index`` (a 64-bit mix, as splitmix64)."""
    x = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    x ^= x >> 31
    return (x >> 11) / float(1 << 52) - 1.0


_MASK = (1 << 64) - 1


class Steps(Modulator):
    """A step sequence at a tempo: ``division`` steps a beat at ``bpm``, the values of
    ``/mod/<id>/steps`` in turn, 0..1."""

    kind = "steps"
    doc = "a tempo-synced step sequence of values 0..1"
    knobs = {
        "bpm": Knob(120.0, 1.0, 999.0, "beats per minute"),
        "division": Knob(4.0, 1.0, 64.0, "steps per beat (a whole number)"),
    }

    def __init__(self, values: dict[str, float], source: str = INPUT, steps=(1.0, 0.0)) -> None:
        super().__init__(values, source)
        self.steps = tuple(float(s) for s in steps)
        self.beats = 0.0

    def value(self, time: int, block: int, rate: int) -> float:
        step = math.floor(self.beats * int(self.values["division"]) + 1e-9)
        self.level = self.steps[step % len(self.steps)]
        self.beats += self.values["bpm"] / 60.0 * block / rate
        return self.level

    def carry(self, old: Modulator) -> None:
        super().carry(old)
        self.beats = getattr(old, "beats", 0.0)


class Follower(Modulator):
    """An envelope follower: the RMS of each block of ``source`` (the rack's input, or a node's
    output: a sidechain), times ``gain``, smoothed with ``attack_ms`` rising and
    ``release_ms`` falling, 0..1. A node's output is heard after the node ran: it moves the
    next block."""

    kind = "follower"
    doc = "the level of the input or of a node's output (a sidechain), 0..1"
    listens = True
    knobs = {
        "attack_ms": Knob(10.0, 0.0, 10000.0, "time to rise"),
        "release_ms": Knob(200.0, 0.0, 10000.0, "time to fall"),
        "gain": Knob(1.0, 0.0, 1000.0, "times the level before the 0..1 clip"),
    }

    def __init__(self, values: dict[str, float], source: str = INPUT) -> None:
        super().__init__(values, source)
        self.envelope = 0.0

    def value(self, time: int, block: int, rate: int) -> float:
        self.level = min(1.0, self.envelope * self.values["gain"])
        return self.level

    def listen(self, signal: np.ndarray, time: int, block: int, rate: int) -> None:
        level = rms(signal)
        ms = self.values["attack_ms" if level > self.envelope else "release_ms"]
        coefficient = smoothing(ms, block, rate)
        self.envelope = level + coefficient * (self.envelope - level)

    def carry(self, old: Modulator) -> None:
        super().carry(old)
        self.envelope = getattr(old, "envelope", 0.0)


class Envelope(Modulator):
    """Attack, hold, release from a trigger (``/mod/<id>/trigger``, a MIDI note mapped to it,
    or an onset: the RMS of a block of ``source`` rising to ``onset``; 0: none), 0..1."""

    kind = "envelope"
    doc = "attack/hold/release from a trigger (OSC, MIDI note, onset), 0..1"
    listens = True
    knobs = {
        "attack_ms": Knob(5.0, 0.0, 60000.0, "time to rise to 1"),
        "hold_ms": Knob(100.0, 0.0, 60000.0, "time held at 1"),
        "release_ms": Knob(300.0, 0.0, 60000.0, "time to fall to 0"),
        "onset": Knob(0.0, 0.0, 1.0, "RMS level of the source that triggers (0: none)"),
    }

    def __init__(self, values: dict[str, float], source: str = INPUT) -> None:
        super().__init__(values, source)
        self.started: int | None = None
        self.loud = False

    def value(self, time: int, block: int, rate: int) -> float:
        if self.started is None:
            self.level = 0.0
            return 0.0
        ms = (time - self.started) * 1000.0 / rate
        attack, hold, release = (self.values[k] for k in ("attack_ms", "hold_ms", "release_ms"))
        if ms < attack:
            self.level = ms / attack
        elif ms < attack + hold:
            self.level = 1.0
        elif ms < attack + hold + release:
            self.level = 1.0 - (ms - attack - hold) / release
        else:
            self.level = 0.0
        return self.level

    def listen(self, signal: np.ndarray, time: int, block: int, rate: int) -> None:
        threshold = self.values["onset"]
        loud = threshold > 0 and rms(signal) >= threshold
        if loud and not self.loud:
            self.started = time
        self.loud = loud

    def trigger(self, time: int) -> None:
        self.started = time

    def carry(self, old: Modulator) -> None:
        super().carry(old)
        self.started = getattr(old, "started", None)
        self.loud = getattr(old, "loud", False)


#: The kinds by name.
KINDS: dict[str, type[Modulator]] = {k.kind: k for k in (Lfo, Drift, Steps, Follower, Envelope)}


def kind_of(name: str) -> type[Modulator]:
    """The kind called ``name``, or a BendingError naming the kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise BendingError(f"no modulator kind {name!r}; kinds: {', '.join(KINDS)}") from None


def checked_value(kind: type[Modulator], name: str, value: float, where: str) -> float:
    """``value`` for parameter ``name`` of ``kind``, or a BendingError saying what it takes."""
    knob = kind.knobs.get(name)
    if knob is None:
        raise BendingError(
            f"{where}: the {kind.kind} has no parameter {name!r}; its parameters: "
            f"{', '.join(kind.knobs)}"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BendingError(f"{where}: {name} is a finite number, got {value!r}")
    if not knob.low <= value <= knob.high:
        raise BendingError(f"{where}: {name} must be in [{knob.low:g}, {knob.high:g}], got {value}")
    return float(value)
