"""The ring mode: the device callback runs no Python; the engine computes ahead on its own thread.

A C callback (rtmixer's) copies the device input into an input ring and an output ring into the
device output, and counts the device's under- and overflows in C. A compute thread reads model
blocks from the input ring (or the source), resamples device rate -> model rate where they
differ (soxr, streaming), runs the engine, resamples back and writes the output ring, kept
``ahead`` model blocks ahead of what the device plays: Python's jitter up to that depth is
absorbed, and a model block larger than the device period (2048 on 256) works.

The output ring is prefilled with ``(ahead + 1) * block - period`` frames of silence: block k's
input is complete once the device has played frame ``(k + 1) * block``, and its output is due at
frame ``prefill + k * block``, which leaves ``ahead`` blocks of time to compute it. An output
ring that runs dry is counted (``underruns``); rtmixer then ends the ring's playback (silence),
so the thread re-arms both rings with the same prefill: the latency stays what was reported.
Silence rather than the dry input: the model's output and its input may differ in channels,
rate and loudness, and a burst of dry signal in a bended sound is a glitch of its own.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import StreamEngine
from ..errors import BendingError
from .callback import BlockLog
from .clock import AudioClock
from .devices import Device, find_device, portaudio, release
from .gate import ComputeGate
from .priority import AUDIO_WORKER, set_realtime
from .sources import Source

log = logging.getLogger("bendserver.audio")

#: Seconds between two looks at the rings while there is nothing to compute.
POLL = 0.0005
#: How much longer than its warm-up p99 a served block may take: a RAVE v2 export at two torch
#: threads warmed up at 24.7 ms a block and served at p50 30.9, p99 44.7, max 48.7 ms (the
#: compute thread beside the device's and the control's on two cores); wavae at 256, p99
#: 3.83 ms against p50 2.11.
TAIL = 2.0


def slack_frames(compute: float, late: float, rate: int, period: int) -> int:
    """Device frames of time a block needs between its input and its output's turn, for a
    p99 ``compute`` and a p99 wake-up ``late`` (seconds): :data:`TAIL` times the compute, the
    lateness and a poll, rounded up to the period (at least one period)."""
    seconds = TAIL * compute + late + POLL
    return max(1, math.ceil(seconds * rate / period - 1e-9)) * period


#: The live resampler: libsamplerate's medium sinc converter, which holds a constant 46 to 52
#: frames each way between 44.1 and 48 kHz (soxr's streaming converters hand frames out in
#: chunks of their own: its high quality one holds 116 to 1006 frames, its low quality one 31 to
#: 444 from 48 to 44.1 kHz). Flat within 0.05 dB to 19 kHz at 44.1 kHz, -3.3 dB at 20 kHz
#: (docs/serve.md); files keep soxr's high quality (``bendserver.audiofile``).
LIVE_CONVERTER = "sinc_medium"


def resampler_delay(from_rate: int, to_rate: int, channels: int = 1, seconds: float = 4.0) -> int:
    """The most frames (at ``to_rate``) that the live resampler holds back: it aligns its
    output on its input (output frame j stands for input time j / to_rate) but hands frames out
    as its filter allows, so what it holds may swing: the rings' prefill must cover the most,
    not what one first chunk shows. Found by streaming ``seconds`` of silence in 2.9 ms chunks
    (a block of 128 at 44.1 kHz)."""
    if from_rate == to_rate:
        return 0
    stream = Resampler(from_rate, to_rate, channels, measure=False)
    chunk = np.zeros((channels, max(1, round(from_rate * 0.0029))), dtype=np.float32)
    taken = given = held = 0
    for _ in range(round(seconds / 0.0029)):
        given += stream(chunk).shape[1]
        taken += chunk.shape[1]
        held = max(held, math.ceil(taken * to_rate / from_rate - given))
    return held


class Resampler:
    """A streaming resampler of ``[channels, frames]`` blocks (:data:`LIVE_CONVERTER`), or a
    pass-through at one rate."""

    def __init__(self, from_rate: int, to_rate: int, channels: int, measure: bool = True) -> None:
        self.rates, self.channels = (from_rate, to_rate), channels
        self.same = from_rate == to_rate
        #: Frames at ``to_rate`` it holds back at most.
        self.delay = resampler_delay(from_rate, to_rate) if measure and not self.same else 0
        self.reset()

    def reset(self) -> None:
        """Start again with nothing held back (what it held is dropped)."""
        if not self.same:
            import samplerate

            self._stream = samplerate.Resampler(LIVE_CONVERTER, channels=self.channels)

    def __call__(self, block: np.ndarray) -> np.ndarray:
        """``[channels, n]`` in, ``[channels, about n * to / from]`` out (frames-major copy)."""
        if self.same:
            return block
        ratio = self.rates[1] / self.rates[0]
        frames = np.ascontiguousarray(block.T, dtype=np.float32)
        return (
            np.asarray(self._stream.process(frames, ratio), dtype=np.float32)
            .reshape(-1, self.channels)
            .T
        )


class RingBackend:
    """A PortAudio stream whose callback is rtmixer's (C), and the compute thread feeding it."""

    mode = "ring"

    def __init__(
        self,
        engine: StreamEngine,
        source: Source | None,
        clock: AudioClock,
        gate: ComputeGate,
        output_name: str | None,
        input_name: str | None = None,
        output_channels: int | None = None,
        ahead: int | None = None,
        period: int | None = None,
    ) -> None:
        from .backends import playback_channels

        #: Seconds a block of silence takes to compute, past the first calls (slower: allocations,
        #: caches, which would run the first ring dry): what the default ``ahead`` makes room for.
        #: The warm-up's figures: what the default time ahead is sized from.
        self.warm_up = _warm_up(engine)
        self.compute = self.warm_up.median
        if ahead is not None and ahead < 1:
            raise BendingError("--ahead takes 1 or more model blocks")
        sd = portaudio()
        try:
            import rtmixer

            self.output: Device = find_device(sd, output_name, "output")
            self.input = None if input_name is None else find_device(sd, input_name, "input")
            self.channels = playback_channels(
                engine.out_channels, self.output.outputs, output_channels
            )
            self.rate = _device_rate(sd, self.output, engine.sample_rate)
            kind = rtmixer.Mixer if self.input is None else rtmixer.MixerAndRecorder
            device = self.output.index if self.input is None else (
                self.input.index, self.output.index
            )  # fmt: skip
            channels = self.channels if self.input is None else (engine.in_channels, self.channels)
            self.stream = kind(
                device=device,
                channels=channels,
                samplerate=self.rate,
                blocksize=period or 0,
                latency="low",
            )
        except BendingError:
            release()
            raise
        except (sd.PortAudioError, ValueError) as error:
            release()
            raise BendingError(
                f"cannot open {self.output} for the ring mode: {error}. Try --latency-mode "
                "direct, or --audio null"
            ) from None
        self.engine, self.source, self.clock, self.gate = engine, source, clock, gate
        #: Model blocks computed ahead (given; else from the warm-up, once the period is known).
        self.ahead = ahead or 1
        self._asked_ahead = ahead
        #: Device frames of time each block gets between its input and its output's turn.
        self.slack = 0
        self._late = np.zeros(4096)  # the compute thread's wake-ups, seconds late (a ring)
        self._wakes = 0
        self.name = str(self.output) if self.input is None else f"{self.input} -> {self.output}"
        self.to_model = Resampler(self.rate, engine.sample_rate, engine.in_channels)
        self.to_device = Resampler(engine.sample_rate, self.rate, engine.out_channels)
        #: One model block in device frames (rounded up).
        self.block_frames = math.ceil(engine.block * self.rate / engine.sample_rate)
        self.period = period or 0  #: the device's frames per callback, known once it runs
        self.prefill = 0  #: frames of silence ahead of the first output (device frames)
        most = ahead or math.ceil(self.warm_up.slack(self.rate, 1) / self.block_frames)
        size = 1 << math.ceil(math.log2(8 * (most + 2) * self.block_frames))
        self._out = rtmixer.RingBuffer(4 * self.channels, size)
        self._in = None if self.input is None else rtmixer.RingBuffer(4 * engine.in_channels, size)
        self._out_block = np.zeros((size, self.channels), dtype=np.float32)
        self._in_block = np.zeros((size, engine.in_channels), dtype=np.float32)
        self._pending = np.zeros((engine.in_channels, 0), dtype=np.float32)
        self.recorder: Any = None
        self.log = BlockLog()
        self.xruns = 0  #: device under-/overflows, counted by the C callback
        self.underruns = 0  #: times the output ring ran dry (silence played, rings re-armed)
        self.overflows = 0  #: times the input ring was full (input lost, rings re-armed)
        self.errors = 0  #: blocks that failed (played as silence)
        self._actions: list[Any] = []
        self._stats: Any = None  # rtmixer's statistics asked for, not yet answered
        self._stats_due = 0.0
        self._written = 0  # device frames written to the output ring since it was armed
        self._armed_at = 0  # the engine's time (model frames) when the rings were last armed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audio-compute", daemon=True)

    @property
    def block(self) -> int:
        """The device's frames per callback (what the banner calls the device block)."""
        return self.period

    @property
    def latency(self) -> int:
        """:attr:`prefill` (which holds the resamplers' delays) in model-rate frames."""
        return round(self.prefill * self.engine.sample_rate / self.rate)

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the stream, learn its period, arm the rings, start the compute thread."""
        self.stream.start()
        if not self.period:
            self.period = self._first_period()
        if self._asked_ahead:
            self.slack = self._asked_ahead * self.block_frames
        else:
            self.slack = self.warm_up.slack(self.rate, self.period)
            self.ahead = math.ceil(self.slack / self.block_frames)
        self.prefill = prefill_frames(self.slack, self.block_frames, self.period, self.delays())
        self._arm()
        self._thread.start()

    def delays(self) -> int:
        """Device frames the resamplers hold back (the input one only with a device input)."""
        held = self.to_device.delay
        if self._in is not None:
            held += math.ceil(self.to_model.delay * self.rate / self.engine.sample_rate)
        return held

    def stop(self) -> None:
        """Stop the compute thread and the stream; terminate PortAudio."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        try:
            self.stream.wait(sleeptime=1)
            self._take_stats(self._stats or self.stream.fetch_and_reset_stats())
            self.stream.stop()
            self.stream.close()
        finally:
            release()

    def _first_period(self) -> int:
        """The frames of the device's callbacks (rtmixer's statistics), once one has run."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            action = self.stream.fetch_and_reset_stats()
            self.stream.wait(action, sleeptime=2)
            if action.stats.blocks:
                self.xruns += _xruns(action.stats)
                return int(action.stats.max_blocksize)
        raise BendingError(f"{self.name} did not call back within 2 s: is its server running?")

    def _arm(self) -> None:
        """(Re)start both rings: cancel what plays, empty them, prefill the output with silence,
        then record and play from the same callback on (the input aligned on the output)."""
        stream = self.stream
        for action in self._actions:
            stream.wait(stream.cancel(action), sleeptime=1)
        stream.wait(sleeptime=1)
        if self._stats is not None:
            self._take_stats(self._stats)
        self._out.flush()
        self._out.write(np.zeros((self.prefill, self.channels), dtype=np.float32))
        self._written, self._armed_at = self.prefill, self.engine.time
        self._pending = self._pending[:, :0]
        self.to_model.reset()  # the frames they held are in the prefill again
        self.to_device.reset()
        self._actions = [stream.play_ringbuffer(self._out)]
        if self._in is not None:
            self._in.flush()
            self._actions.append(stream.record_ringbuffer(self._in))
            _wait_active(stream, self._actions)
            self._align()

    def _align(self) -> None:
        """Drop input the record ring took before the play ring started (a callback between
        the two actions), so that input frame n is played out at ``prefill + n``."""
        for _ in range(8):
            recorded = self._in.read_available
            played = self._written - self._out.read_available
            if recorded == self._in.read_available:
                excess = recorded - played
                if excess > 0:
                    self._in.advance_read_index(excess)
                return

    def _run(self) -> None:
        set_realtime(AUDIO_WORKER)
        while not self._stop.is_set():
            self._mark_clock()
            if not self._alive():
                self._arm()
                self._record_silence()
            elif self._due():
                self._compute()
            else:
                self._sleep()

    def _sleep(self) -> None:
        """Sleep a poll, and keep how late the thread woke (in a ring: no allocation)."""
        asleep = time.perf_counter()
        time.sleep(POLL)
        self._late[self._wakes % len(self._late)] = time.perf_counter() - asleep - POLL
        self._wakes += 1

    def _alive(self) -> bool:
        """Whether rtmixer still plays (and records) the rings: it ends an action whose ring ran
        dry (output: an underrun) or full (input: an overflow), each counted here."""
        active = self.stream.actions
        self._poll_stats(active)
        ended = [action not in active for action in self._actions]
        self.underruns += ended[0]
        self.overflows += any(ended[1:])
        return not any(ended)

    def _due(self) -> bool:
        """Whether the next block is due: its input is there (the input ring holds a block, or
        the device has played as far as a device's input would have reached), which leaves
        ``ahead`` blocks of time to compute it."""
        if self._in is None:
            return self._out.read_available <= self.prefill - self.block_frames
        needed = self.engine.block - self._pending.shape[1]
        return self._in.read_available * self.engine.sample_rate >= needed * self.rate

    def _compute(self) -> None:
        engine = self.engine
        block = self._input()
        started, frame = time.time(), engine.time
        try:
            with self.gate:
                out = engine.process(block)
        except Exception as error:  # the audio goes on
            out = np.zeros((engine.out_channels, engine.block), dtype=np.float32)
            self.errors += 1
            if self.errors == 1:
                log.error("audio compute failed (%s: %s); playing silence", type(error), error)
        if self.recorder is not None:
            self.recorder.push(out)
        device = self.to_device(out)
        frames = device.shape[1]
        chunk = self._out_block[:frames]
        chunk[:] = device.T  # a mono model plays on every output
        self._out.write(chunk)
        self._written += frames
        due = self.clock.wall_at(frame) or started  # when it plays
        level = float(np.abs(out).mean())
        self.log.record(due, due + engine.block / engine.sample_rate, frame, level)

    def _record_silence(self) -> None:
        """Record the prefill's silence that plays again after a re-arm, so that the recording
        keeps time with what was heard (about: the moment the ring ran dry is not seen)."""
        if self.recorder is None:
            return
        engine = self.engine
        silence = np.zeros((engine.out_channels, engine.block), dtype=np.float32)
        for _ in range(round(self.prefill * engine.sample_rate / self.rate / engine.block)):
            self.recorder.push(silence)

    def _input(self) -> np.ndarray:
        """The next model block: from the source, or from the input ring (resampled)."""
        engine = self.engine
        if self._in is None:
            return self.source.read(engine.block)
        while self._pending.shape[1] < engine.block:
            raw = self._in_block[: self._in.read_available]
            self._in.readinto(raw)
            chunk = self.to_model(raw.T)
            self._pending = np.concatenate([self._pending, chunk], axis=1)
            if self._pending.shape[1] < engine.block:
                time.sleep(POLL)
        block, self._pending = self._pending[:, : engine.block], self._pending[:, engine.block :]
        return np.ascontiguousarray(block)

    def _mark_clock(self) -> None:
        """Tell the clock which model frame the last callback started to play: what the device
        took from the output ring, less that callback's period and the prefill (ring position
        ``prefill + j`` holds output frame j), so that a timetag lands on its sample."""
        taken = self._written - self._out.read_available
        played = taken - self.period - self.prefill
        frame = self._armed_at + played * self.engine.sample_rate / self.rate
        self.clock.mark(math.floor(frame), time.time(), 0)

    def _poll_stats(self, active: Any, every: float = 0.05) -> None:
        """Ask rtmixer's callback for its counts every ``every`` seconds and add them up once
        answered (this thread only: rtmixer's action queue has one writer)."""
        if self._stats is not None:
            if self._stats not in active:
                self._take_stats(self._stats)
        elif time.monotonic() >= self._stats_due:
            self._stats = self.stream.fetch_and_reset_stats()
            self._stats_due = time.monotonic() + every

    def _take_stats(self, action: Any) -> None:
        """Add the counts of an answered statistics action."""
        self.stream.wait(action, sleeptime=1)
        self.xruns += _xruns(action.stats)
        self._stats = None

    # -- reporting ---------------------------------------------------------------------------

    def counters(self) -> dict[str, float]:
        """Device xruns (counted in C, added up every 50 ms), dry output rings, full input rings,
        failed blocks, and the headroom: how full the output ring is now (ms)."""
        return {
            "xruns": self.xruns,
            "underruns": self.underruns,
            "ring_overflows": self.overflows,
            "missed": self.underruns,
            "callback_errors": self.errors,
            "ring_ms": 1e3 * self._out.read_available / self.rate,
            **self._jitter(),
        }

    def _jitter(self) -> dict[str, float]:
        """How late the compute thread woke from its polls (the last 4 096), in ms."""
        late = self._late[: min(self._wakes, len(self._late))]
        if not len(late):
            return {"jitter_p50_ms": 0.0, "jitter_p99_ms": 0.0, "jitter_max_ms": 0.0}
        p50, p99 = np.percentile(late, [50, 99])
        return {
            "jitter_p50_ms": 1e3 * float(p50),
            "jitter_p99_ms": 1e3 * float(p99),
            "jitter_max_ms": 1e3 * float(late.max()),
        }


def prefill(ahead: int, block: int, period: int, held: int = 0) -> int:
    """:func:`prefill_frames` for ``ahead`` whole blocks of time."""
    return prefill_frames(ahead * block, block, period, held)


def prefill_frames(need: int, block: int, period: int, held: int = 0) -> int:
    """Frames of silence the output ring starts with, so that every block has ``need`` frames
    of time to compute. Block k's input is there after the callback that records frame
    ``(k + 1) * block - 1``; its output is needed by the callback that plays frame
    ``prefill + k * block``. Where the period divides the block and ``need``, that is
    ``need + block - period``; otherwise the smallest prefill that leaves every block of a
    cycle of ``period / gcd`` blocks that much. ``held``: frames the resamplers hold back."""
    cycle = period // math.gcd(block, period)
    frames = max(0, need + block - period)
    while slack(frames, block, period, cycle) < need:
        frames += 1
    return frames + held


def slack(frames: int, block: int, period: int, blocks: int) -> int:
    """The least time (frames) between a block's input and its output being due, over the first
    ``blocks`` blocks, with ``frames`` of prefill."""
    return min(
        ((frames + k * block) // period - (-(-(k + 1) * block // period) - 1)) * period
        for k in range(blocks)
    )


@dataclass(frozen=True)
class WarmUp:
    """Blocks of silence computed before the stream starts, on a thread of the compute
    thread's priority, each after a poll's sleep: seconds per block (the first few calls,
    slower, left out) and how late each sleep woke."""

    compute: np.ndarray
    late: np.ndarray

    @property
    def median(self) -> float:
        return float(np.median(self.compute))

    def slack(self, rate: int, period: int) -> int:
        """:func:`slack_frames` for this warm-up's p99 compute and wake-up lateness."""
        compute, late = np.percentile(self.compute, 99), np.percentile(self.late, 99)
        return slack_frames(float(compute), float(late), rate, period)


def _warm_up(engine: StreamEngine, blocks: int = 48, first: int = 8) -> WarmUp:
    """Compute ``blocks`` blocks of silence on a thread of the compute thread's priority (on a
    busy machine a normal thread took 0.4 to 1 s for RAVE blocks it serves in 31 ms), each
    after a poll's sleep, as the compute thread waits for its blocks; those after the
    ``first`` (slower: allocations, caches, first calls) measure."""
    silence = np.zeros((engine.in_channels, engine.block), dtype=np.float32)
    took: list[float] = []
    late: list[float] = []
    failed: list[BaseException] = []

    def run() -> None:
        set_realtime(AUDIO_WORKER)
        try:
            for _ in range(blocks):
                asleep = time.perf_counter()
                time.sleep(POLL)
                started = time.perf_counter()
                engine.process(silence)
                took.append(time.perf_counter() - started)
                late.append(max(0.0, started - asleep - POLL))
        except BaseException as error:  # raised again in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=run, name="audio-warm-up")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return WarmUp(np.asarray(took[first:]), np.asarray(late[first:]))


def _xruns(stats: Any) -> int:
    """Xruns, from rtmixer's counts of the callbacks' status flags: a duplex stream has both
    an input and an output flag raised for one xrun (PortAudio's JACK stream raises both), so
    the larger side counts, not their sum."""
    inputs = stats.input_underflows + stats.input_overflows
    return int(max(inputs, stats.output_underflows + stats.output_overflows))


def _wait_active(stream: Any, actions: list[Any]) -> None:
    """Wait until the callback has taken ``actions`` (both rings run from one callback on)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if all(a.done_frames > 0 for a in actions):
            return
        time.sleep(POLL)


def _device_rate(sd: Any, device: Device, model_rate: int) -> int:
    """The model's rate where the device takes it, else the device's own (a JACK server's is
    fixed): the compute thread resamples between them."""
    try:
        sd.check_output_settings(device=device.index, samplerate=model_rate, dtype="float32")
        return model_rate
    except sd.PortAudioError:
        return int(sd.query_devices(device.index)["default_samplerate"])
