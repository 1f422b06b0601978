"""Offline rendering through the same ``StreamEngine.process`` path as live playing.

A score is a text file of timed control messages, one per line: ``time address args...``
(time in seconds, a finite decimal number; ``#`` starts a comment), in the OSC address space of
:mod:`.control`. Each message applies at the first block that starts at or after its time,
exactly as a timetagged OSC bundle would live; the render hands each to the engine as it reaches
its block, so a score may hold any number of them.

The output is written beside its destination and renamed into place when complete
(:mod:`.files`): an interrupted render leaves the old file or nothing.
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

from ..audiofile import (
    check_rate,
    fit_channels,
    output_subtype,
    read_sound,
    resample_audio,
    streams_for,
)
from ..control import Controller
from ..engine import StreamEngine
from ..errors import BendingError
from ..files import same_file, writing
from ..limits import MAX_SCORE_CHANGES, MAX_SCORE_EVENTS
from ..readers import decimal, read_text
from .frames import SUFFIXES as FRAMES
from .frames import is_frames_file, read_frames, write_frames
from .output import OutputWatch, OutputWriter, without_peak_time

log = logging.getLogger("bendserver.render")


@dataclass(frozen=True)
class ScoreEvent:
    time: float
    address: str
    args: tuple[Any, ...]
    where: str = "score"  #: ``file:line``, for errors

    def error(self, message: str) -> BendingError:
        return BendingError(f"{self.where}: at {self.time:g} s, {self.address}: {message}")


def read_score(path: Path) -> list[ScoreEvent]:
    """Read and parse a score file (UTF-8 text, see :func:`parse_score`)."""
    return parse_score(read_text(Path(path), "score"), str(path))


def parse_score(text: str, source: str = "score") -> list[ScoreEvent]:
    """Parse ``time address args...`` lines; decimal numbers become floats, the rest strings.
    Errors name the line."""
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{number}"
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:  # an unclosed quote
            raise BendingError(f"{where}: {error}: close it or remove it") from None
        if not words:
            continue
        if len(words) < 2 or not words[1].startswith("/"):
            raise BendingError(f"{where}: expected 'time /address args...', got {line!r}")
        time = decimal(words[0])
        if time is None:
            raise BendingError(
                f"{where}: {words[0]!r} is not a time in seconds (a finite decimal number)"
            )
        if time < 0:
            raise BendingError(f"{where}: negative time {time}")
        args = tuple(_word(w) for w in words[2:])
        events.append(ScoreEvent(time, words[1], args, where))
        if len(events) > MAX_SCORE_EVENTS:
            raise BendingError(
                f"{where}: a score holds at most {MAX_SCORE_EVENTS} messages: split it"
            )
    return sorted(events, key=lambda e: e.time)


def _word(word: str) -> Any:
    number = decimal(word)
    return word if number is None else number


class ScorePlayer:
    """Hands a score's events to an engine as the render reaches them: before each block,
    those due at it (their sample time at or before the block's start). Every event's address
    and arguments are checked when the player is made, before anything is rendered."""

    def __init__(self, engine: StreamEngine, events: list[ScoreEvent]) -> None:
        self.engine = engine
        self.controller = Controller(engine)
        for event in events:  # a recorded take's: the silence a server warmed up on first
            if event.address == PREROLL:
                _prerolled(engine, event)
        events = [event for event in events if event.address != PREROLL]
        self.events = sorted(events, key=lambda e: e.time)
        self.start = engine.time  #: score times count from here
        self.times = [self.start + engine.samples(event.time) for event in self.events]
        self.next = 0
        changes = 0
        for event in self.events:
            try:
                self.controller.check(event.address, event.args)
            except BendingError as error:
                raise event.error(str(error)) from None
            changes += self.controller.is_structural(event.address)
            if changes > MAX_SCORE_CHANGES:
                raise event.error(
                    f"a score makes at most {MAX_SCORE_CHANGES} changes that rebuild what plays "
                    "(presets, ops, versions; each takes tens of milliseconds or more): fewer, or "
                    "split the render"
                )

    def until(self, sample: int) -> None:
        """Submit the events due at the block that starts at ``sample`` (a ``/preset/save``
        saves the state at its time)."""
        while self.next < len(self.events) and self.times[self.next] <= sample:
            event, at = self.events[self.next], self.times[self.next]
            self.next += 1
            try:
                self.controller.dispatch(event.address, event.args, at=at)
            except BendingError as error:
                raise event.error(str(error)) from None


#: A score's line ``0 /preroll N``: N samples of silence played before the score starts (a
#: take recorded from a server's first block: what it warmed up on, so that a render starts
#: from the same state).
PREROLL = "/preroll"


def _prerolled(engine: StreamEngine, event: ScoreEvent) -> None:
    samples = event.args[0] if len(event.args) == 1 else None
    if event.time != 0 or not isinstance(samples, float) or samples % engine.block:
        raise event.error(f"a score's preroll is '0 {PREROLL} N', N a multiple of the block")
    silence = np.zeros((engine.in_channels, engine.in_frames), dtype=np.float32)
    for _ in range(int(samples) // engine.block):
        engine.process(silence)


#: Extensions of the sound files a folder given to ``render`` is searched for.
SOUND_EXTENSIONS = (".wav", ".flac", ".ogg", ".aif", ".aiff", ".mp3")


def sound_files(paths: list[Path]) -> list[Path]:
    """``paths`` with each folder replaced by the sound files in it, by name (hidden files, such
    as an unfinished render's, left out)."""
    files: list[Path] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        found = sorted(
            p
            for p in path.iterdir()
            if p.suffix.lower() in SOUND_EXTENSIONS and not p.name.startswith(".")
        )
        if not found:
            raise BendingError(f"no sound files ({', '.join(SOUND_EXTENSIONS)}) in {path}")
        files += found
    return files


@dataclass(frozen=True)
class Rendered:
    """What a render wrote, and what the model's output needed."""

    seconds: float  #: the output's duration
    nonfinite: int  #: NaN/Inf samples the model output (the fuse wrote 0 for them, if on)
    nonfinite_blocks: str  #: the blocks (0 is the first) they were in: ``3-14, 20``
    limited: int  #: samples the fuse's limiter bent under the ceiling


def check_outputs(inputs: list[Path], outputs: list[Path]) -> None:
    """Refuse an output that is, or resolves to, another input than its own (it would be
    replaced before it is read). An output that is its own input is safe: the input is read
    whole before anything is written."""
    for index, output in enumerate(outputs):
        for other, source in enumerate(inputs):
            if other != index and same_file(output, source):
                raise BendingError(
                    f"{output} is the input {source}: rendering into it would replace it "
                    "before it is read; render into another folder"
                )


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
) -> Rendered:
    """Render ``source`` through ``engine`` into ``output`` (format from the extension).

    The file keeps its channels (one stream per channel: an engine made without ``streams``
    takes the file's; ``mono`` mixes down first), its length and its rate (soxr to the model's rate
    and back; ``sample_rate`` chooses another), and its subtype where the output format allows.
    The model's latency is trimmed (the input is followed by that much silence and the output
    starts that much later) unless ``keep_latency``: then the output starts with it and is
    that much longer. The input is read whole first and the output written beside its place
    and renamed into it when complete, so ``output`` may be ``source`` itself (with ``force``)
    and an interrupted render leaves the old file or nothing. Score times count from the
    render's start. ``progress`` is advanced by the seconds of input rendered. NaN/Inf in the
    model's output are counted by block and logged.
    """
    output = Path(output)
    _check_rates(engine, Path(source), output)
    if output.exists() and not force:
        raise BendingError(f"{output} exists: pass --force to overwrite it")
    if engine.spec.in_ratio != 1:
        return _render_from_frames(engine, Path(source), output, score, sample_rate, keep_latency)
    audio, info = read_sound(Path(source))
    rate, frames = info.samplerate, audio.shape[-1]
    if mono:
        audio = fit_channels(audio, 1)
    audio = _fitted(engine, audio, source)
    if rate != engine.sample_rate and not resample:
        raise BendingError(
            f"{source} is at {rate} Hz and the model at {engine.sample_rate} Hz: allow "
            "resampling or convert the file first"
        )
    played = resample_audio(audio, rate, engine.sample_rate)
    if engine.spec.out_ratio != 1:
        return _render_to_frames(engine, played, source, output, score)
    latency = engine.latency  # the model's output of the file's end comes that much after it
    played = np.pad(played, ((0, 0), (0, latency)))
    out_rate = check_rate(int(sample_rate or rate), "the output")
    wanted = round(frames * out_rate / rate)
    if keep_latency:
        wanted += round(latency * out_rate / engine.sample_rate)
    if wanted == 0:  # (and a FLAC of no frames would not read back)
        raise BendingError(f"{source} holds no audio at {out_rate} Hz: nothing to render")
    player = _player(engine, score or [], frames / rate, source)
    watch = OutputWatch(engine)
    subtype = output_subtype(output, info)
    try:
        with (
            writing(output) as temp,
            sf.SoundFile(str(temp), "w", out_rate, engine.out_channels, subtype=subtype) as file,
        ):
            without_peak_time(file)
            writer = OutputWriter(file, engine, out_rate, wanted, 0 if keep_latency else latency)
            remaining, step = frames / rate, engine.block / engine.sample_rate
            for block in _blocks(engine, played, player):
                watch.count(block)
                writer.write(block)
                if progress is not None:
                    progress.update(min(step, remaining))
                    remaining -= min(step, remaining)
            written = writer.finish()
    except sf.LibsndfileError as error:
        raise BendingError(f"cannot write {output}: {error}") from None
    _report(engine, watch, source)
    return Rendered(written / out_rate, watch.samples, watch.ranges(), watch.limited())


def _report(engine: StreamEngine, watch: OutputWatch, source: Path) -> None:
    """Log what went wrong in a render: the engine's failures, NaN/Inf in its output."""
    for line in engine.failures():
        log.error("%s (the render went on; counted in errors)", line)
    if watch.samples:
        log.warning(
            "%s: the model output %d NaN/Inf samples in %d block(s) of %d (blocks %s): %s",
            source,
            watch.samples,
            len(watch.blocks),
            watch.total,
            watch.ranges(),
            "written as they are (no fuse)" if engine.fuse is None else "the fuse wrote 0 for them",
        )


def _check_rates(engine: StreamEngine, source: Path, output: Path) -> None:
    """A method at a control rate reads or writes frames files (:mod:`.frames`), an audio one
    sound files: anything else is refused, saying which."""
    spec, method = engine.spec, engine.method
    if spec.in_ratio != 1 and not is_frames_file(source):
        raise BendingError(
            f"'{method}' takes frames (one per {spec.in_ratio} samples, {spec.in_channels} "
            f"channels): give a frames file ({' or '.join(FRAMES)}), such as an encode renders"
        )
    if spec.in_ratio == 1 and is_frames_file(source):
        raise BendingError(f"'{method}' takes audio: give a sound file, not {source.name}")
    if spec.out_ratio != 1 and not is_frames_file(output):
        raise BendingError(
            f"'{method}' gives frames (one per {spec.out_ratio} samples): write them to a frames "
            f"file ({' or '.join(FRAMES)}; a sound file's rate cannot be "
            f"{engine.sample_rate}/{spec.out_ratio} Hz)"
        )
    if spec.out_ratio == 1:
        if is_frames_file(output):
            raise BendingError(f"'{method}' gives audio: write a sound file, not {output.name}")
        output_subtype(output)


def _fitted(engine: StreamEngine, signal: np.ndarray, source: Path) -> np.ndarray:
    """``signal`` [channels, n] fitted to the engine's channels: an engine made without
    streams takes one stream per method's channels of it."""
    if engine.adapts:  # made without streams: one stream per channel of this file
        engine.set_streams(streams_for(signal.shape[0], engine.spec.in_channels))
    if signal.shape[0] > engine.in_channels:
        raise BendingError(
            f"{source} has {signal.shape[0]} channels and the engine plays {engine.in_channels}: "
            f"make it with streams={signal.shape[0] // engine.spec.in_channels} (one stream a "
            "channel), or mix down (--mono)"
        )
    return fit_channels(signal, engine.in_channels, str(source))


def _render_to_frames(
    engine: StreamEngine,
    played: np.ndarray,
    source: Path,
    output: Path,
    score: list[ScoreEvent] | None,
) -> Rendered:
    """Audio at the model's rate through a method giving frames, into a frames file."""
    seconds = played.shape[-1] / engine.sample_rate
    watch = _frames_into(engine, played, _player(engine, score or [], seconds, source), output)
    _report(engine, watch, source)
    return Rendered(seconds, watch.samples, watch.ranges(), 0)


def _frames_into(
    engine: StreamEngine, played: np.ndarray, player: ScorePlayer, output: Path
) -> OutputWatch:
    """Play ``played`` (audio, or frames at the input's rate) through a method giving frames;
    its frames into the frames file ``output``."""
    watch = OutputWatch(engine)
    blocks = []
    for block in _blocks(engine, played, player):
        watch.count(block)
        blocks.append(block)
    seconds = engine.spec.out_ratio / engine.sample_rate
    write_frames(output, np.concatenate(blocks, axis=-1), seconds)
    return watch


def _render_from_frames(
    engine: StreamEngine,
    source: Path,
    output: Path,
    score: list[ScoreEvent] | None,
    sample_rate: int | None,
    keep_latency: bool,
) -> Rendered:
    """A frames file through a method taking frames, into a sound file (``decode``) or a frames
    file; an audio output's latency is trimmed as :func:`render_file` does."""
    frames = _fitted(engine, read_frames(source), source)
    ratio, count = engine.spec.in_ratio, frames.shape[-1]
    latency = engine.latency if engine.spec.out_ratio == 1 else 0
    played = np.pad(frames, ((0, 0), (0, -(-latency // ratio))))
    seconds = count * ratio / engine.sample_rate
    player = _player(engine, score or [], seconds, source)
    if engine.spec.out_ratio != 1:
        watch = _frames_into(engine, played, player, output)
        _report(engine, watch, source)
        return Rendered(seconds, watch.samples, watch.ranges(), 0)
    watch = OutputWatch(engine)
    out_rate = int(sample_rate or engine.sample_rate)
    samples = count * ratio + (latency if keep_latency else 0)
    wanted = round(samples * out_rate / engine.sample_rate)
    try:
        with (
            writing(output) as temp,
            sf.SoundFile(
                str(temp), "w", out_rate, engine.out_channels, subtype=output_subtype(output)
            ) as file,
        ):
            without_peak_time(file)
            writer = OutputWriter(file, engine, out_rate, wanted, 0 if keep_latency else latency)
            for block in _blocks(engine, played, player):
                watch.count(block)
                writer.write(block)
            written = writer.finish()
    except sf.LibsndfileError as error:
        raise BendingError(f"cannot write {output}: {error}") from None
    _report(engine, watch, source)
    return Rendered(written / out_rate, watch.samples, watch.ranges(), watch.limited())


def _player(engine: StreamEngine, score: list[ScoreEvent], end: float, source: Path) -> ScorePlayer:
    """A player of the score's events before ``end`` (seconds), warning about the others."""
    late = [event for event in score if event.time >= end]
    if late:
        log.warning(
            "score: %d event(s) at or after the end of %s (%.2f s) are not played: %s",
            len(late),
            source,
            end,
            ", ".join(f"{e.time:g} s {e.address}" for e in late[:5]),
        )
    return ScorePlayer(engine, [event for event in score if event.time < end])


def _blocks(engine: StreamEngine, played: np.ndarray, player: ScorePlayer) -> Iterator[np.ndarray]:
    """The engine's output blocks for ``played``, the score's events handed over before each."""
    player.until(engine.time)
    for block in engine.stream(played):
        yield block
        player.until(engine.time)
