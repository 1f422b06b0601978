"""A take recorded as a score: every change the engine applied, at the block it applied at.

A :class:`ScoreRecorder` sits in the controller's path (``/record/score``, ``serve
--record-score``): each message that changes what plays is given the time of a block boundary
still to come (the next block after the one playing, or its timetag's block), and the block its
change applied at is read back from the commands it made (the audio side stamps them), so a
change whose preparation outlasted a block is written where it really applied. Ops added
without a seed are written with the seed they drew. The score (``time /address args...``,
:mod:`bendserver.render`) plays the same changes at the same blocks: rendered over the same
input with the same block size (and the same preset) from the stream's first block, it gives
the same samples; over another input, rate or model it replays the gestures.
"""

from __future__ import annotations

import contextlib
import math
import shlex
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine.commands import Command
from .errors import BendingError
from .files import write_text
from .limits import MAX_SCORE_EVENTS

#: Addresses that change nothing that plays (or that a render cannot replay), not recorded.
UNRECORDED = ("/preset/save", "/midi/", "/record/", "/model/load", "/node/", "/out/", "/in/")


@dataclass
class _Event:
    at: int  #: the block boundary it was given
    address: str
    args: list[Any]
    commands: list[Command] = field(default_factory=list)

    def applied_at(self) -> int:
        """The block its change applied at (its first command's), or the time it was given."""
        stamped = [c.applied_at for c in self.commands if c.done and c.applied_at >= 0]
        return min(stamped, default=self.at)


class ScoreRecorder:
    """Records the changes applied to ``engine`` (a rack) from the next block on, into
    ``path`` when :meth:`stop` is called."""

    def __init__(self, engine: Any, path: Path, name: str = "", preroll: bool = False) -> None:
        self.engine = engine
        self.path = Path(path)
        self.name = name or self.path.stem
        self.start = engine.time  #: score times count from this block
        #: Whether the take starts at the stream's start (after only a server's warm-up, on
        #: silence): its score then plays that silence first (``/preroll``).
        self.preroll = preroll
        self.events: list[_Event] = []
        self.full = False  #: set once :data:`MAX_SCORE_EVENTS` were recorded
        self._lock = threading.Lock()

    def records(self, pattern: str) -> bool:
        return not pattern.startswith(UNRECORDED)

    @contextlib.contextmanager
    def recording(
        self, ctl: Any, pattern: str, address: str, args: Sequence[Any], at: int | None
    ) -> Iterator[int | None]:
        """Around applying one message: yields the time it is applied at (a block boundary
        still to come) and keeps the message with the commands it made, once it applied."""
        if not self.records(pattern) or self.full:
            yield at
            return
        block = self.engine.block
        soonest = self.engine.time + block  # the block playing now may have taken its changes
        due = soonest if at is None else max(soonest, -(-at // block) * block)
        event = _Event(due, address, list(args))
        queues = self._queues()
        for queue in queues:
            queue.observer = event.commands
        try:
            yield due
        finally:
            for queue in queues:
                queue.observer = None
        _seeded(ctl, event)
        with self._lock:
            self.events.append(event)
            self.full = len(self.events) >= MAX_SCORE_EVENTS

    def _queues(self) -> list[Any]:
        queues = [node.commands for node in self.engine.nodes.values()]
        queues.append(self.engine.output.commands)
        modulation = self.engine.modulation
        return queues if modulation is None else [*queues, modulation.commands]

    def text(self) -> str:
        """The score: one line per change, at the block it applied at (seconds from the
        start of the recording)."""
        rate, block = self.engine.sample_rate, self.engine.block
        lines = [
            f"# bendserver score '{self.name}': recorded at {rate} Hz, block {block}, from "
            f"sample {self.start}",
            f"# render over the same input with --block {block} to play the same samples",
        ]
        if self.preroll and self.start:  # the silence a server warmed up on, before its first block
            lines.append(f"0 /preroll {self.start}")
        with self._lock:
            events = sorted(self.events, key=lambda e: e.applied_at())
        for event in events:
            seconds = repr((event.applied_at() - self.start) / rate)
            words = [seconds, event.address, *(_word(a) for a in event.args)]
            lines.append(" ".join(words))
        if self.full:
            lines.append(f"# stopped at {MAX_SCORE_EVENTS} messages (a score's most)")
        return "\n".join(lines) + "\n"

    def stop(self) -> Path:
        """Write the score (replacing the file only once it is complete)."""
        write_text(self.path, self.text())
        return self.path


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise BendingError(f"a score holds finite numbers, not {value}")
        return repr(value) if isinstance(value, float) else str(value)
    return shlex.quote(str(value))


def _seeded(ctl: Any, event: _Event) -> None:
    """An op added without a seed, written with the seed it drew (so the render draws the
    same noise or mask)."""
    if not event.address.endswith("/bend/add") or len(event.args) < 3:
        return
    given = event.args[3::2]
    if "seed" in given:
        return
    try:
        seed = ctl.engine.op(event.args[0]).options().get("seed")
    except (BendingError, AttributeError):
        return
    if seed is not None:
        event.args += ["seed", seed]
