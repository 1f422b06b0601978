"""Offline rendering through the same ``StreamEngine.process`` path as live playing.

A score is a text file of timed control messages, one per line: ``time address args...``
(time in seconds; ``#`` starts a comment), in the OSC address space of :mod:`.control`. Each
message applies at the first block that starts at or after its time, exactly as a timetagged
OSC bundle would live.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from tqdm import tqdm

from .audiofile import FORMATS, read_audio
from .control import Controller
from .engine import StreamEngine
from .errors import BendingError

log = logging.getLogger("bendserver.render")


@dataclass(frozen=True)
class ScoreEvent:
    time: float
    address: str
    args: tuple[Any, ...]


def parse_score(text: str, source: str = "score") -> list[ScoreEvent]:
    """Parse ``time address args...`` lines; numbers become floats, the rest strings."""
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if len(words) < 2 or not words[1].startswith("/"):
            raise BendingError(f"{source}:{number}: expected 'time /address args...', got {line!r}")
        try:
            time = float(words[0])
        except ValueError:
            raise BendingError(
                f"{source}:{number}: {words[0]!r} is not a time in seconds"
            ) from None
        if time < 0:
            raise BendingError(f"{source}:{number}: negative time {time}")
        events.append(ScoreEvent(time, words[1], tuple(_word(w) for w in words[2:])))
    return sorted(events, key=lambda e: e.time)


def _word(word: str) -> Any:
    try:
        return float(word)
    except ValueError:
        return word


def schedule(engine: StreamEngine, events: list[ScoreEvent]) -> None:
    """Submit every score event to the engine at its sample time (a ``/preset/save`` saves
    the state at its time)."""
    controller = Controller(engine)
    for event in events:
        try:
            controller.dispatch(event.address, event.args, at=engine.samples(event.time))
        except BendingError as error:
            raise BendingError(f"score at {event.time} s, {event.address}: {error}") from None


def stream(engine: StreamEngine, audio: np.ndarray, progress: bool = False) -> Iterator[np.ndarray]:
    """Yield the engine's output block by block for ``audio`` [channels, frames] (the last block
    is padded with zeros and its output trimmed to the input's length)."""
    frames = audio.shape[-1]
    blocks = range(0, frames, engine.block)
    for start in tqdm(blocks, unit="block", disable=not progress, leave=False):
        chunk = audio[:, start : start + engine.block]
        if chunk.shape[-1] < engine.block:
            chunk = np.pad(chunk, ((0, 0), (0, engine.block - chunk.shape[-1])))
        yield engine.process(np.ascontiguousarray(chunk, dtype=np.float32))[
            :, : min(engine.block, frames - start)
        ]


def render_file(
    engine: StreamEngine,
    source: Path,
    output: Path,
    score: list[ScoreEvent] | None = None,
    force: bool = False,
    resample: bool = True,
    progress: bool = False,
) -> float:
    """Render ``source`` through ``engine`` into ``output`` (format from the extension).

    The output is written block by block, so an interrupted render leaves a valid, shorter
    file. Returns the rendered duration in seconds.
    """
    if engine.spec.in_ratio != 1 or engine.spec.out_ratio != 1:
        raise BendingError(f"render plays audio-to-audio methods; '{engine.method}' is not one")
    output = Path(output)
    subtype = FORMATS.get(output.suffix.lower())
    if subtype is None:
        raise BendingError(f"output format from the extension: one of {sorted(FORMATS)}")
    if output.exists() and not force:
        raise BendingError(f"{output} exists: pass --force to overwrite it")
    audio = read_audio(Path(source), engine.sample_rate, engine.in_channels, resample)
    if score:
        end = audio.shape[-1] / engine.sample_rate
        late = [event for event in score if event.time >= end]
        if late:
            log.warning(
                "score: %d event(s) at or after the end of %s (%.2f s) are not played: %s",
                len(late),
                source,
                end,
                ", ".join(f"{e.time:g} s {e.address}" for e in late[:5]),
            )
        schedule(engine, [event for event in score if event.time < end])
    output.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with sf.SoundFile(
        str(output), "w", engine.sample_rate, engine.out_channels, subtype=subtype
    ) as file:
        for block in stream(engine, audio, progress):
            file.write(block.T)
            written += block.shape[-1]
    for line in engine.failures():
        log.error("%s (the render went on; counted in errors)", line)
    return written / engine.sample_rate
