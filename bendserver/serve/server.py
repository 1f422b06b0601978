"""The live server: :class:`Server` puts the parts together (the rack with its preset, an audio
backend, the callback with its processor, an optional recorder, the OSC service whose control
worker applies messages between blocks, MIDI, OSCQuery and the page) and tears them down;
:func:`run` serves until Ctrl-C, SIGTERM or ``--duration``."""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from ..audio import (
    AudioCallback,
    AudioClock,
    ComputeGate,
    DeviceBackend,
    DirectProcessor,
    NullBackend,
    Recorder,
    Silence,
    ThreadedProcessor,
    file_loop,
    has_default_output,
)
from ..audio.jackclient import JackXruns, server_xruns
from ..audio.priority import DISCOVERY, set_realtime
from ..audio.reporter import Reporter
from ..audio.ring import RingBackend
from ..audiofile import sound_info
from ..control import Controller
from ..engine.frames import FrameEnds, HeldFrame, frame_taps
from ..engine.rack import Rack
from ..errors import BendingError
from ..files import check_writable
from ..midi.input import MidiInput
from ..midi.mappings import Mapping
from ..modulation import modulators_of
from ..osc import OscService
from ..osc.frames import FrameStreams
from ..osc.oscquery import OscQueryService, preload_libraries
from ..play import PlayOptions
from ..switching import ModelSwitcher
from ..takes import ScoreRecorder
from ..ui import Meters
from .options import LATENCY_MODES, ServeOptions
from .report import ServerReport, title

log = logging.getLogger("bendserver.serve")

#: OSCQuery's default port: the OSC port plus this.
OSCQUERY_OFFSET = 10
#: The interpreter's thread switch interval while serving: the audio callback needs the GIL, and
#: Python's default (5 ms) is longer than a 256-frame block at 48 kHz.
SWITCH_INTERVAL = 0.0005
#: Seconds a server waits for the stream's first block before OSC starts (and answers /ping).
FIRST_BLOCK_SECONDS = 2.0


class Server(ServerReport):
    """A running (or ready to run) live server; ``engine`` (an engine or a rack) may be given
    for tests and tools."""

    def __init__(self, options: ServeOptions, engine: Rack | None = None) -> None:
        if options.latency_mode not in (None, *LATENCY_MODES):
            raise BendingError(f"--latency-mode is one of {LATENCY_MODES}")
        #: OSCQuery's libraries, imported while the model loads (joined before the audio starts).
        self._imports = preload_libraries() if options.oscquery_port != 0 else None
        self.options = options
        mappings: list[Mapping] = []  # the MIDI mappings of the preset it starts with
        if engine is None:
            engine, mappings = _engine(options)
        #: The rack that plays (a node of it swapped live by ``/model/load``, ``/<node>/load``).
        self.engine = engine
        #: Frames its methods at a control rate give or take, over OSC (None: there are none).
        self.frames: FrameStreams | None = None
        held = None
        if engine.spec.in_ratio != 1:
            if options.input != "silence":
                raise BendingError(
                    f"'{engine.method}' takes frames, which come over OSC (/in/...): give no "
                    "--input"
                )
            first = engine.nodes[engine.order[0]]
            held = HeldFrame(first.in_channels, first.in_frames)
        taps = frame_taps(engine)
        if taps or held is not None:
            self.frames = FrameStreams(
                engine, taps, held, options.reply_port, options.reply_host, options.frame_rate
            )
        #: What the audio device plays: the rack, its frames at a control rate held or silent.
        frames = engine.spec.in_ratio != 1 or engine.spec.out_ratio != 1
        self.played = FrameEnds(engine, held) if frames else engine
        played = self.played
        self.fallback = options.audio is None and not has_default_output()
        null = options.audio == "null" or self.fallback
        self.mode = options.latency_mode or ("direct" if null else "ring")
        if self.mode == "ring" and null:
            raise BendingError(
                "--latency-mode ring plays through a PortAudio device (its callback is C): "
                "the null backend has none; use direct or threaded there"
            )
        self.device_block = int(options.device_block or engine.block)
        self.clock = AudioClock(engine.sample_rate)
        ring = self.mode == "ring"
        # The ring's callback needs no GIL: the gate only keeps control work out of a compute.
        self.gate = ComputeGate(
            None if ring else self.clock, period=self.device_block / engine.sample_rate
        )
        if self.frames is not None:
            self.frames.use_gate(self.gate)
        self.processor: Any = None
        if not ring:
            processor_class = DirectProcessor if self.mode == "direct" else ThreadedProcessor
            self.processor = processor_class(played, self.device_block, self.gate)
        frames = engine.block if ring else self.device_block
        self.source, device_input = _source(options.input, played, frames)
        switcher = ModelSwitcher(
            engine,
            options.models_dir,
            options.trust_model,
            options.xfade_ms,
            code_from=options.allow_code_from,
        )
        self.controller = Controller(
            engine, counters=self.counters, switcher=switcher, frames=self.frames
        )
        self.controller.midi.replace(mappings)
        self.meters: Meters | None = None
        self.midi: MidiInput | None = None
        self._parts: list[Any] = []  # what to stop, in order
        self.recorder: Recorder | None = None
        self.jack: JackXruns | None = None  # JACK's own xrun count, where it plays on JACK
        try:
            self.osc = OscService(
                self.controller,
                self.clock,
                self.gate,
                options.osc_host,
                options.osc_port,
                options.reply_port,
                options.reply_host,
                options.allow,
            )
            self._parts.append(self.osc)
            if options.midi is not None:  # stopped before OSC: it feeds the control worker
                self.midi = MidiInput(self.controller, self.osc.worker, self.gate, options.midi)
                self._parts.insert(0, self.midi)
            self.oscquery = self._oscquery()
            if self.oscquery is not None:
                self._parts.append(self.oscquery)
            if self.frames is not None:  # stopped after OSC, which hands it frames
                self._parts.append(self.frames)
            if ring:
                self.backend = self.callback = RingBackend(
                    played,
                    self.source,
                    self.clock,
                    self.gate,
                    options.audio,
                    device_input,
                    options.output_channels,
                    options.ahead,
                    options.device_block,
                )
                self._parts.append(self.backend)
            else:
                self.callback = AudioCallback(self.processor, self.source, self.clock)
                self.backend = self._backend(device_input, null)
                self._parts += [self.backend, self.processor]
            self.jack = None if null else server_xruns(self.backend.output.hostapi)
            if self.jack is not None:
                self._parts.append(self.jack)
            self.reporter = Reporter(engine, self.mode)
            self._parts.append(self.reporter)
            if options.record:  # last: a failure above leaves no empty file behind
                self.recorder = Recorder(
                    Path(options.record),
                    engine.sample_rate,
                    played.out_channels,
                    frames,
                    force=options.force,
                )
                self.callback.recorder = self.recorder
                self._parts.append(self.recorder)
            if options.record_score:  # written once the audio has stopped
                self.controller.recorder = _score_recorder(engine, options)
                self._parts.append(self.controller.recorder)
        except BaseException:
            self._close(self._parts)
            raise
        self.running = False
        self._switch_interval = sys.getswitchinterval()

    def _oscquery(self) -> OscQueryService | None:
        """The OSCQuery service on ``--oscquery-port`` (None when 0). A port given and taken is
        refused; the default one taken (another server) gives way to one the OS chooses."""
        options, port = self.options, self.options.oscquery_port
        if port == 0:
            return None
        chosen = port is not None
        if port is None:
            port = options.osc_port + OSCQUERY_OFFSET if options.osc_port else 0
        name = f"bendserver {title(self.engine)}"
        recent = self.frames.recent if self.frames is not None else None
        errors = lambda: list(self.osc.worker.recent_errors)  # noqa: E731
        meters = self.meters = Meters(self.engine, self.counters, recent, errors)  # the page's
        make = lambda p: OscQueryService(
            self.controller, options.osc_host, p, self.osc.port, self.gate, name,
            options.zeroconf, options.allow, self.osc.submit, meters,
        )  # fmt: skip
        try:
            return make(port)
        except BendingError:
            if chosen or port == 0:
                raise
            return make(0)

    def _backend(self, device_input: str | None, null: bool) -> DeviceBackend | NullBackend:
        engine, audio = self.played, self.options.audio
        if null:
            if device_input is not None:
                raise BendingError("the null backend has no input: use --input FILE or silence")
            return NullBackend(
                self.callback, engine.sample_rate, self.device_block, engine.out_channels
            )
        return DeviceBackend(
            self.callback,
            audio,
            engine.sample_rate,
            self.device_block,
            engine.in_channels,
            engine.out_channels,
            device_input,
            self.options.output_channels,
        )

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the audio worker (threaded mode), the stream (and the ring's compute) and OSC."""
        # Everything loaded so far lives as long as the server: keep it out of the collector, so
        # that a full collection (which holds the GIL) stays short while audio runs.
        gc.collect()
        gc.freeze()
        sys.setswitchinterval(SWITCH_INTERVAL)
        if self.processor is not None:
            self.processor.start()
        if self.options.seed is not None:  # what the model draws from here: a take repeats
            torch.manual_seed(self.options.seed)
        if self._imports is not None:  # an import running beside the stream would hold it up
            self._imports.join()
        self.backend.start()
        self._first_block()
        self.osc.start()
        if self.frames is not None:
            self.frames.start()
        if self.midi is not None:
            self.midi.start()
        if self.oscquery is not None:
            self.oscquery.start()
            set_realtime(DISCOVERY, self.oscquery.thread)  # a GIL holder: see audio.priority
        self.reporter.start()
        self.running = True

    def _first_block(self) -> None:
        """Wait until the stream has computed a block, so that OSC, which starts next, answers
        ``/ping`` once the model plays; past :data:`FIRST_BLOCK_SECONDS` a log line says that
        it answers before."""
        deadline = time.monotonic() + FIRST_BLOCK_SECONDS
        while self.engine.stats.blocks == 0:
            if time.monotonic() > deadline:
                log.warning(
                    "the stream computed no block within %g s of its start: OSC answers "
                    "before the model plays",
                    FIRST_BLOCK_SECONDS,
                )
                return
            time.sleep(0.001)

    def stop(self) -> None:
        """Stop OSC, the stream, the worker; close the recording; terminate PortAudio."""
        if not self._parts:
            return
        parts, self._parts = self._parts, []
        self._close(parts)
        self.running = False
        sys.setswitchinterval(self._switch_interval)
        gc.unfreeze()

    @staticmethod
    def _close(parts: list[Any]) -> None:
        for part in parts:
            try:
                part.close() if isinstance(part, Recorder) else part.stop()
            except Exception:  # stop the rest whatever happens to one
                log.exception("stopping %s failed", type(part).__name__)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _engine(options: ServeOptions) -> tuple[Rack, list[Mapping]]:
    """The rack ``options`` describe (:class:`~bendserver.play.PlayOptions`), playing the
    input's channels (one stream each), and the MIDI mappings of its preset."""
    torch.set_num_threads(options.threads)
    torch.set_flush_denormal(True)  # denormal floats in a decaying filter cost 10-100x
    return PlayOptions.of(options).build(options.channels or _file_channels(options.input))


def _file_channels(text: str) -> int:
    """The channels of an input sound file; one for silence or a device."""
    path = Path(text)
    return sound_info(path).channels if path.is_file() else 1


def _score_recorder(engine: Rack, options: ServeOptions) -> ScoreRecorder:
    """The take's score from the first block on (``--record-score``)."""
    path = Path(options.record_score)
    if path.exists() and not options.force:
        raise BendingError(f"--record-score: {path} exists (--force replaces it)")
    check_writable(path)
    modulators_of(engine)  # their changes are recorded at the block they apply at
    return ScoreRecorder(engine, path, preroll=True)


def _source(text: str, engine: Rack, frames: int) -> tuple[Any, str | None]:
    """The input: (a source, None), or (None, an input device name) for a duplex stream."""
    if text == "silence":
        return Silence(engine.in_channels, frames), None
    path = Path(text)
    if path.is_file():
        return file_loop(path, engine.sample_rate, engine.in_channels, frames), None
    if path.suffix.lower() in (".wav", ".flac", ".ogg", ".aiff", ".mp3"):
        raise BendingError(f"--input: no sound file {path}")
    return None, text


def run(options: ServeOptions) -> int:
    """Serve until Ctrl-C, SIGTERM or ``options.duration`` seconds; print a summary."""
    try:
        server = Server(options)
    except KeyboardInterrupt:  # Ctrl-C while the model loads
        print("interrupted before the server started", file=sys.stderr)
        return 130
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        server.start()
        print(server.banner(), flush=True)
        stop.wait(options.duration)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stats = server.stats()
    print(
        "stopped: "
        + " ".join(f"{k} {round(v, 3) if isinstance(v, float) else v}" for k, v in stats.items()),
        flush=True,
    )
    return 0
