"""Offline rendering through the same ``StreamEngine.process`` path as live playing.

A score is a text file of timed control messages, one per line: ``time address args...``
(time in seconds; ``#`` starts a comment), in the OSC address space of :mod:`.control`. Each
message applies at the first block that starts at or after its time, exactly as a timetagged
OSC bundle would live.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from tqdm import tqdm

from .audiofile import fit_channels, output_subtype, read_sound, resample_audio, streams_for
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


#: Extensions of the sound files a folder given to ``render`` is searched for.
SOUND_EXTENSIONS = (".wav", ".flac", ".ogg", ".aif", ".aiff", ".mp3")


def sound_files(paths: list[Path]) -> list[Path]:
    """``paths`` with each folder replaced by the sound files in it, by name."""
    files: list[Path] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in SOUND_EXTENSIONS)
        if not found:
            raise BendingError(f"no sound files ({', '.join(SOUND_EXTENSIONS)}) in {path}")
        files += found
    return files


def render_file(
    engine: StreamEngine,
    source: Path,
    output: Path,
    score: list[ScoreEvent] | None = None,
    force: bool = False,
    resample: bool = True,
    progress: tqdm | None = None,
    mono: bool = False,
    sample_rate: int | None = None,
    keep_latency: bool = False,
) -> float:
    """Render ``source`` through ``engine`` into ``output`` (format from the extension).

    The file keeps its channels (one stream per channel: an engine made without ``streams``
    takes the file's; ``mono`` mixes down first), its length and its rate (soxr to the model's rate
    and back; ``sample_rate`` chooses another), and its subtype where the output format allows.
    The model's latency is trimmed (the input is followed by that much silence and the output
    starts that much later) unless ``keep_latency``: then the output starts with it and is
    that much longer. The output is written block by block, so an interrupted render leaves a
    valid, shorter file. ``progress`` is advanced by the seconds of input rendered. Returns the
    rendered duration in seconds.
    """
    if engine.spec.in_ratio != 1 or engine.spec.out_ratio != 1:
        raise BendingError(f"render plays audio-to-audio methods; '{engine.method}' is not one")
    output = Path(output)
    output_subtype(output)
    if output.exists() and not force:
        raise BendingError(f"{output} exists: pass --force to overwrite it")
    audio, info = read_sound(Path(source))
    rate, frames = info.samplerate, audio.shape[-1]
    if mono:
        audio = fit_channels(audio, 1)
    if engine.adapts:  # made without streams: one stream per channel of this file
        engine.set_streams(streams_for(audio.shape[0], engine.spec.in_channels))
    if audio.shape[0] > engine.in_channels:
        raise BendingError(
            f"{source} has {audio.shape[0]} channels and the engine plays {engine.in_channels}: "
            f"make it with streams={audio.shape[0] // engine.spec.in_channels} (one stream a "
            "channel), or mix down (--mono)"
        )
    audio = fit_channels(audio, engine.in_channels, str(source))
    if rate != engine.sample_rate and not resample:
        raise BendingError(
            f"{source} is at {rate} Hz and the model at {engine.sample_rate} Hz: allow "
            "resampling or convert the file first"
        )
    played = resample_audio(audio, rate, engine.sample_rate)
    latency = engine.latency  # the model's output of the file's end comes that much after it
    played = np.pad(played, ((0, 0), (0, latency)))
    if score:
        _schedule_in(engine, score, frames / rate, source)
    out_rate = int(sample_rate or rate)
    wanted = round(frames * out_rate / rate)
    if keep_latency:
        wanted += round(latency * out_rate / engine.sample_rate)
    output.parent.mkdir(parents=True, exist_ok=True)
    with sf.SoundFile(
        str(output), "w", out_rate, engine.out_channels, subtype=output_subtype(output, info)
    ) as file:
        written = _write_blocks(
            engine,
            played,
            file,
            out_rate,
            wanted,
            0 if keep_latency else latency,
            progress,
            frames / rate,
        )
    for line in engine.failures():
        log.error("%s (the render went on; counted in errors)", line)
    return written / out_rate


def _schedule_in(engine: StreamEngine, score: list[ScoreEvent], end: float, source: Path) -> None:
    """Schedule the score's events before ``end`` (seconds), warning about the others."""
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


def _write_blocks(
    engine: StreamEngine,
    played: np.ndarray,
    file: sf.SoundFile,
    rate: int,
    wanted: int,
    skip: int,
    progress: tqdm | None,
    seconds: float,
) -> int:
    """Stream ``played`` through the engine into ``file`` at ``rate``: the first ``skip``
    output frames dropped, ``wanted`` frames in all (cut, or completed with silence)."""
    channels = engine.out_channels
    resampler = None
    if rate != engine.sample_rate:
        resampler = soxr.ResampleStream(engine.sample_rate, rate, channels, dtype="float32")
    written = 0

    def write(frames: np.ndarray) -> None:  # [frames, channels]
        nonlocal written
        frames = frames[: wanted - written]
        if resampler is not None and engine.fuse is not None:
            engine.fuse.hold(frames)  # the resampler may overshoot the ceiling
        file.write(frames)
        written += len(frames)

    step = engine.block / engine.sample_rate
    for block in engine.stream(played):
        cut = min(skip, block.shape[-1])
        skip -= cut
        frames = np.ascontiguousarray(block[:, cut:].T)
        write(resampler.resample_chunk(frames) if resampler else frames)
        if progress is not None:
            advance = min(step, seconds)
            seconds -= advance
            progress.update(advance)
    if resampler is not None:
        write(resampler.resample_chunk(np.zeros((0, channels), np.float32), last=True))
    write(np.zeros((max(0, wanted - written), channels), np.float32))
    return written
