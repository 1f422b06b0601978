"""MIDI mappings: which control (CC, 14-bit CC, note velocity, pitch bend) moves which address.

A :class:`Mapping` turns a control's position (0..1) into a value of one control address
(``/bend/mask/prob``), through a range, a curve (linear, exponential), an inversion and an
optional ramp. A :class:`MidiMap` holds the mappings of a server, learns new ones, and turns
raw MIDI bytes into ``(address, arguments)`` messages for the control path; nothing here opens
a port or touches the engine. Mappings are saved as JSON (with presets, or a mappings file).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import BendingError
from ..files import write_text
from ..limits import MAX_MAGNITUDE, MAX_RAMP_MS
from ..readers import expect, only, optional, read_json

#: The kinds of control a mapping follows.
KINDS = ("cc", "cc14", "note", "pitchbend")
CURVES = ("linear", "exp")
#: Keys of a mapping in JSON (a preset's ``midi`` list, a mappings file's ``mappings``).
KEYS = (
    "address",
    "kind",
    "channel",
    "number",
    "low",
    "high",
    "curve",
    "invert",
    "ramp_ms",
    "toggle",
)
#: Seconds after a learned CC (0-31) during which its LSB (CC + 32) makes it a 14-bit CC.
LSB_WINDOW = 0.5

Message = tuple[str, list[Any]]


@dataclass(frozen=True)
class Mapping:
    """``kind`` control ``number`` on MIDI ``channel`` (1-16) moves ``address`` over
    ``low``..``high``. ``toggle``: an on/off target (a position from one half turns it on)."""

    address: str
    kind: str
    channel: int
    number: int = 0  #: the CC or note number (0 for pitch bend)
    low: float = 0.0
    high: float = 1.0
    curve: str = "linear"
    invert: bool = False
    ramp_ms: float = 0.0
    toggle: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BendingError(f"MIDI kind is one of {list(KINDS)}, got {self.kind!r}")
        if self.curve not in CURVES:
            raise BendingError(f"MIDI curve is one of {list(CURVES)}, got {self.curve!r}")
        if not 1 <= self.channel <= 16:
            raise BendingError(f"MIDI channel is 1..16, got {self.channel}")
        top = 31 if self.kind == "cc14" else 127
        if not 0 <= self.number <= top:
            raise BendingError(f"a {self.kind} number is 0..{top}, got {self.number}")
        if self.curve == "exp" and not (self.low * self.high > 0):
            raise BendingError(
                f"{self.address}: an exponential curve needs low and high of one sign, neither "
                f"0 (got {self.low:g}..{self.high:g}): give a range such as 0.01 1"
            )
        if not 0 <= self.ramp_ms <= MAX_RAMP_MS:
            raise BendingError(f"ramp_ms is 0..{MAX_RAMP_MS:g}, got {self.ramp_ms:g}")
        for bound in (self.low, self.high):
            if not abs(bound) <= MAX_MAGNITUDE:
                raise BendingError(
                    f"{self.address}: a MIDI range's ends are within ±{MAX_MAGNITUDE:g}, got "
                    f"{bound:g}"
                )

    @property
    def source(self) -> tuple[str, int, int]:
        """What it listens to: (kind, channel, number)."""
        return (self.kind, self.channel, self.number)

    def value(self, position: float) -> float:
        """The target value at a control ``position`` in 0..1."""
        position = 1.0 - position if self.invert else position
        if self.toggle:
            return 1.0 if position >= 0.5 else 0.0
        if self.curve == "exp":
            return self.low * (self.high / self.low) ** position
        return self.low + (self.high - self.low) * position

    def message(self, position: float) -> Message:
        """The control message for ``position``: the value, and the ramp where there is one."""
        value = self.value(position)
        return (self.address, [value, self.ramp_ms] if self.ramp_ms else [value])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> list[Any]:
        """The mapping as ``/midi/list`` replies it (one OSC message's arguments)."""
        return [
            self.address, self.kind, self.channel, self.number, self.low, self.high,
            self.curve, int(self.invert), self.ramp_ms,
        ]  # fmt: skip


def mapping_from_dict(data: Any, where: str) -> Mapping:
    """A mapping read from JSON (``where`` names it in errors), every key checked."""
    expect(data, "object", where)
    only(data, KEYS, where)
    at = f"{where}."
    fields = dict(
        address=expect(data.get("address"), "text", f"{at}address"),
        kind=expect(data.get("kind"), "text", f"{at}kind"),
        channel=expect(data.get("channel"), "integer", f"{at}channel"),
        number=optional(data, "number", "integer", at, 0),
        low=optional(data, "low", "number", at, 0.0),
        high=optional(data, "high", "number", at, 1.0),
        curve=optional(data, "curve", "text", at, "linear"),
        invert=optional(data, "invert", "flag", at, False),
        ramp_ms=optional(data, "ramp_ms", "number", at, 0.0),
        toggle=optional(data, "toggle", "flag", at, False),
    )
    try:
        return Mapping(**fields)
    except BendingError as error:
        raise BendingError(f"{where}: {error}") from None


def mappings_from_list(data: Any, where: str) -> list[Mapping]:
    """A JSON list of mappings (a preset's ``midi``)."""
    expect(data, "list", where)
    return [mapping_from_dict(item, f"{where}[{i}]") for i, item in enumerate(data)]


def read_mappings(path: Path) -> list[Mapping]:
    """A mappings file: ``{"mappings": [...]}``."""
    data = read_json(path, "MIDI mappings")
    where = f"MIDI mappings {path.name}"
    expect(data, "object", where)
    only(data, ("mappings",), where)
    return mappings_from_list(data.get("mappings", []), f"{where}: mappings")


def write_mappings(path: Path, mappings: Iterable[Mapping]) -> None:
    """Write a mappings file (through a temporary file beside it)."""
    document = {"mappings": [m.to_dict() for m in mappings]}
    write_text(path, json.dumps(document, indent=2) + "\n")


@dataclass(frozen=True)
class Learning:
    """A learn in progress: the mapping it makes, less its source."""

    template: Mapping
    learned: Mapping | None = None
    at: float = 0.0  #: when it learned a CC that an LSB may still make 14-bit


class MidiMap:
    """A server's mappings, by the control they follow, and MIDI learn. Thread-safe: the control
    worker edits it, the MIDI input reads it (a lookup under a short lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mappings: list[Mapping] = []
        self._by_source: dict[tuple[str, int, int], list[Mapping]] = {}
        self._learning: Learning | None = None
        self._msb: dict[tuple[int, int], int] = {}  #: 14-bit CCs: the last MSB per (channel, cc)

    # -- editing (the control side) ------------------------------------------------------------

    def mappings(self) -> list[Mapping]:
        with self._lock:
            return list(self._mappings)

    def add(self, mapping: Mapping) -> None:
        """Add ``mapping``, replacing one from the same control to the same address."""
        with self._lock:
            self._add_locked(mapping)

    def remove(self, address: str | None = None) -> int:
        """Remove the mappings to ``address`` (None: all); returns how many."""
        with self._lock:
            kept = [m for m in self._mappings if address is not None and m.address != address]
            removed = len(self._mappings) - len(kept)
            self._set(kept)
            if address is None or (self._learning and self._learning.template.address == address):
                self._learning = None
            return removed

    def replace(self, mappings: Iterable[Mapping]) -> None:
        """Play ``mappings`` instead of the present ones."""
        with self._lock:
            self._set(list(mappings))

    def learn(self, template: Mapping) -> None:
        """Map the next control moved (a CC, a note, pitch bend) to ``template``'s address."""
        with self._lock:
            self._learning = Learning(template)

    @property
    def learning(self) -> str | None:
        """The address a learn waits for a control for, or None."""
        learning = self._learning
        return learning.template.address if learning and not learning.learned else None

    def _set(self, mappings: list[Mapping]) -> None:
        by_source: dict[tuple[str, int, int], list[Mapping]] = {}
        for mapping in mappings:
            by_source.setdefault(mapping.source, []).append(mapping)
        self._mappings, self._by_source = mappings, by_source

    # -- MIDI in (the MIDI input's thread) -----------------------------------------------------

    def translate(self, message: Any, now: float = 0.0) -> list[Message]:
        """The control messages of one MIDI message (a :class:`mido.Message`; ``now``:
        seconds, for learn's 14-bit window). A program change is ``/midi/program N``."""
        kind = message.type
        if kind == "program_change":
            return [("/midi/program", [message.program])]
        channel = message.channel + 1
        if kind == "control_change":
            return self._control_change(channel, message.control, message.value, now)
        if kind == "note_on" and message.velocity > 0:  # velocity 0 is a note off: ignored
            return self._moved("note", channel, message.note, message.velocity / 127, now)
        if kind == "pitchwheel":
            return self._moved("pitchbend", channel, 0, (message.pitch + 8192) / 16383, now)
        return []

    def _control_change(self, channel: int, number: int, value: int, now: float) -> list[Message]:
        messages = []
        if number < 32:  # an MSB: a 14-bit CC's LSB is reset by it (the MIDI rule)
            self._msb[(channel, number)] = value
            messages += self._moved("cc14", channel, number, value * 128 / 16383, now)
        elif number < 64:
            msb = self._msb.get((channel, number - 32))
            if msb is not None:
                self._upgrade(channel, number - 32, now)
                messages += self._moved("cc14", channel, number - 32, (msb << 7 | value) / 16383)
        return messages + self._moved("cc", channel, number, value / 127, now)

    def _moved(
        self, kind: str, channel: int, number: int, position: float, now: float | None = None
    ) -> list[Message]:
        """Messages of the mappings following this control; a learn in progress takes it."""
        source = (kind, channel, number)
        learning = self._learning
        if now is not None and learning is not None and learning.learned is None:
            if kind != "cc14":  # a learn hears a CC as a CC; its LSB may make it 14-bit
                with self._lock:
                    if self._learning is learning:
                        learned = replace(
                            learning.template, kind=kind, channel=channel, number=number
                        )
                        self._learning = Learning(learning.template, learned, now)
                        self._add_locked(learned)
        return [m.message(position) for m in self._by_source.get(source, ())]

    def _upgrade(self, channel: int, number: int, now: float) -> None:
        """A learned CC whose LSB came within :data:`LSB_WINDOW` becomes a 14-bit CC."""
        learning = self._learning
        learned = learning.learned if learning else None
        if learned is None or learned.source != ("cc", channel, number):
            return
        if now - learning.at > LSB_WINDOW:
            return
        with self._lock:
            if self._learning is learning:
                self._learning = None
                kept = [m for m in self._mappings if m != learned]
                self._set([*kept, replace(learned, kind="cc14")])

    def _add_locked(self, mapping: Mapping) -> None:
        kept = [
            m for m in self._mappings if (m.source, m.address) != (mapping.source, mapping.address)
        ]
        self._set([*kept, mapping])
