"""The ring mode against a real JACK server (dummy driver, 48 kHz, period 256): the device's
callback is rtmixer's (C), the engine computes ahead on its own thread.

- the latency the server reports is the one an impulse through the live server measures, for a
  model block equal to the period and for a 44.1 kHz model of block 2048 (resampled, the rings
  decoupling the block from the period);
- a compute that runs the output ring dry is counted (``underruns``) and the latency stays;
- a recording is as long as the run; the ring mode is refused on the null backend; the late-block
  warning never suggests the mode in use.
"""

import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from jack import jack_server, need, send_python, stats
from pythonosc.osc_bundle_builder import OscBundleBuilder
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver.audio.jackclient import JackXruns, delays, jack_now
from bendserver.audio.reporter import Reporter
from bendserver.audio.ring import Resampler, prefill, prefill_frames, slack_frames
from bendserver.errors import BendingError
from bendserver.measure.latency import loopback
from bendserver.serve import ServeOptions, Server

RATE, PERIOD = 48000, 256
LOOPBACK = Path(tb.__file__).parent / "audio" / "jackclient.py"
EVERY = RATE // 2  # the loopback client's impulse period (frames)


@pytest.fixture(scope="module")
def jack():
    need("jack_lsp")
    with jack_server(RATE, PERIOD) as name:
        yield name


def ring_server(replies, block=256, sample_rate=RATE, **options) -> Server:
    """The identity model (output fuse off: an impulse passes as it is) in ring mode, its input
    JACK's: what the loopback client plays into it."""
    engine = tb.StreamEngine(Identity(), block=block, sample_rate=sample_rate, fuse=False)
    chosen = {"audio": "jack", "input": "jack", "osc_port": 0, "reply_port": replies.port}
    return Server(ServeOptions(**{**chosen, **options}), engine=engine)


def impulse_delays(jack: str, seconds: float, *links: str) -> list[int]:
    """Delays of the impulses the loopback client played and heard back through ``links``."""
    with __import__("tempfile").TemporaryDirectory() as folder:
        target = Path(folder) / "loop.npz"
        subprocess.run(
            [sys.executable, str(LOOPBACK), jack, str(seconds), "impulse", str(target), *links],
            check=True,
            capture_output=True,
            timeout=seconds + 30,
        )
        return delays(np.load(target)["recorded"], EVERY)


def server_ports() -> tuple[str, str]:
    """The server's PortAudio input and output ports (the only PortAudio client)."""
    ports = subprocess.run(["jack_lsp"], capture_output=True, text=True).stdout.split()
    inputs = [p for p in ports if p.startswith("PortAudio") and ":in_" in p]
    outputs = [p for p in ports if p.startswith("PortAudio") and ":out_" in p]
    return inputs[0], outputs[0]


@functools.cache
def jack_loopback(jack: str) -> int:
    """JACK server ``jack``'s own loopback (one period: the client hears in the next cycle
    what it played), measured once per server (each has a name of its own)."""
    loop = impulse_delays(jack, 1.1, "out->in")
    assert loop and len(set(loop)) == 1, loop
    return loop[0]


def through_server(jack: str, seconds: float = 2.6) -> list[int]:
    """Impulse delays through the live server, less JACK's own loopback."""
    source, sink = server_ports()
    loop = jack_loopback(jack)
    return [d - loop for d in impulse_delays(jack, seconds, f"out->{source}", f"{sink}->in")]


@pytest.mark.parametrize(
    ("block", "sample_rate"), [(256, RATE), (2048, 44100)], ids=["block=period", "44.1k-2048"]
)
def test_the_latency_reported_is_the_one_measured(jack, replies, block, sample_rate):
    with ring_server(replies, block, sample_rate) as server:
        time.sleep(0.3)
        measured = through_server(jack)
        result = stats(server.osc.port, replies)
        ring = server.backend
        reported = ring.prefill
        banner = server.banner()
    print(
        f"\nring mode, block {block} at {sample_rate} Hz on a {PERIOD}-frame period at {RATE} "
        f"Hz: reported {reported} frames ({1e3 * reported / RATE:.2f} ms, "
        f"{reported / ring.block_frames:.2f} model blocks), measured with an impulse {measured} "
        f"frames; xruns {result['xruns']}, underruns {result['underruns']}"
    )
    assert len(measured) >= 3
    assert result["underruns"] > 0 or all(abs(d - reported) <= 2 for d in measured), measured
    assert abs(np.median(measured) - reported) <= 2, (measured, reported)
    assert f"{server.latency} samples" in banner and "ring mode (" in banner
    assert abs(result["latency_ms"] - 1e3 * reported / RATE) < 0.05
    assert f"(device block {PERIOD}" in banner, "the device's period, not the model's block"


def test_the_direct_modes_latency_reported_is_the_one_measured(jack, replies):
    """In direct mode PortAudio's JACK stream holds one block of a duplex stream in its buffer
    processor (it reported 0 where an impulse took 128 at block 128): what the server reports
    is what an impulse through it takes."""
    with ring_server(replies, latency_mode="direct") as server:
        time.sleep(0.3)
        measured = through_server(jack)
        result = stats(server.osc.port, replies)
        reported, banner = server.added_latency, server.banner()
    print(f"\ndirect mode at block {PERIOD}: reported {reported} frames, measured {measured}")
    assert len(measured) >= 3 and reported > 0
    assert abs(np.median(measured) - reported) <= 2, (measured, reported)
    assert abs(result["path_latency_ms"] - 1e3 * reported / RATE) < 0.05
    assert f"PortAudio's stream's {reported}" in banner and f"{server.latency} samples" in banner


def test_the_servers_xrun_count_is_jacks(jack, replies):
    """A model that takes three periods every 8th block, in the JACK callback (direct mode):
    JACK counts the xruns, and /stats counts as many (JACK's xrun callback in the server), where
    the callback's status flags tell one for several between two callbacks."""
    with ring_server(replies, latency_mode="direct") as server, JackXruns(jack) as witness:
        process, count = server.engine.process, [0]

        def slow(audio):
            count[0] += 1
            if count[0] % 8 == 0:
                time.sleep(3 * PERIOD / RATE)
            return process(audio)

        time.sleep(0.3)
        before, seen = stats(server.osc.port, replies), witness.count
        server.engine.process = slow
        time.sleep(1.5)
        server.engine.process = process
        time.sleep(0.5)
        after, seen = stats(server.osc.port, replies), witness.count - seen
    counted = after["xruns"] - before["xruns"]
    flags = after.get("callback_xruns", 0) - before.get("callback_xruns", 0)
    print(f"\nforced xruns: JACK {seen}, /stats {counted}, the callback's flags {flags}")
    assert seen >= 5, "the slow blocks made JACK xrun"
    assert counted == seen, (counted, seen)
    assert 0 < flags <= counted, "the callback's own count is kept beside JACK's"


@pytest.mark.parametrize(
    ("block", "sample_rate"), [(256, RATE), (2048, 44100)], ids=["block=period", "44.1k-2048"]
)
def test_a_dry_output_ring_is_counted_and_the_latency_stays(jack, replies, block, sample_rate):
    """Every 20th block takes longer than the block and the ahead block together: the ring
    runs dry, silence plays, it is counted and re-armed with the same prefill (the resamplers
    started again: what they held is in the prefill)."""
    with ring_server(replies, block, sample_rate) as server:
        process, count = server.engine.process, [0]

        def slow(audio):
            count[0] += 1
            if count[0] % 20 == 0:
                time.sleep(3 * block / sample_rate)
            return process(audio)

        server.engine.process = slow
        time.sleep(0.5 if block == 256 else 2.5)
        result = stats(server.osc.port, replies)
        server.engine.process = process
        time.sleep(0.3)
        measured = through_server(jack)
        reported = server.backend.prefill
    assert result["underruns"] >= 2 and result["missed"] == result["underruns"]
    assert abs(np.median(measured) - reported) <= 2, (measured, reported)


def test_a_recording_is_as_long_as_the_run(jack, replies, tmp_path):
    """What the device played while the server ran, no less and no more than the blocks
    computed ahead: the rings keep time even when the model's block is 8 device periods."""
    record = tmp_path / "take.wav"
    before = time.monotonic()
    with ring_server(replies, 2048, 44100, record=str(record)) as server:
        started = time.monotonic()
        time.sleep(3.0)
        ran = time.monotonic() - started
        ahead = (server.backend.prefill + server.backend.block_frames) / RATE
    whole = time.monotonic() - before  # with the start and the stop of OSC, OSCQuery, ...
    length = sf.info(record).duration
    assert ran - 0.05 <= length <= whole + ahead, (length, ran, whole)


def test_the_ring_mode_needs_a_portaudio_device(replies):
    with pytest.raises(BendingError, match="null backend has none"):
        ring_server(replies, audio="null", input="silence", latency_mode="ring")


def test_the_default_mode_is_ring_on_a_device_and_direct_on_the_null_backend(jack, replies):
    with ring_server(replies) as server:
        assert server.mode == "ring" and "ring mode" in server.banner()
    null = ring_server(replies, audio="null", input="silence")
    try:
        assert null.mode == "direct"
    finally:
        null.stop()


@pytest.mark.parametrize("mode", ["ring", "direct", "threaded"])
def test_the_late_block_warning_never_suggests_the_mode_in_use(mode):
    remedies = Reporter(tb.StreamEngine(Identity()), mode).remedies()
    assert f"--latency-mode {mode}" not in remedies
    assert ("--ahead" in remedies) == (mode == "ring")


@pytest.mark.parametrize(
    ("ahead", "block", "period"),
    [(1, 256, 256), (2, 128, 128), (1, 2048, 256), (1, 2229, 256), (4, 64, 256), (2, 300, 128)],
)
def test_the_prefill_leaves_every_block_ahead_blocks_of_time(ahead, block, period):
    """Played callback by callback: block k's input is there after the callback that records
    its last frame, its output is due at the callback that plays frame prefill + k * block."""

    def least_time(frames):
        times = []
        for k in range(4 * period):
            ready = ((k + 1) * block - 1) // period  # the callback that records its last frame
            due = (frames + k * block) // period  # the callback that plays its first frame
            times.append((due - ready) * period)
        return min(times)

    frames = prefill(ahead, block, period)
    assert least_time(frames) >= ahead * block
    assert least_time(frames - 1) < ahead * block, "the smallest such prefill"
    if block % period == 0:
        assert frames == (ahead + 1) * block - period


@pytest.mark.parametrize(("rates", "chunk"), [((44100, 48000), 2048), ((48000, 44100), 256)])
def test_the_prefill_covers_the_most_a_resampler_holds(rates, chunk):
    """soxr hands frames out in its own chunks: what it holds swings (44.1 -> 48 kHz, blocks
    of 2048: from 116 to 1006 frames); the figure the prefill adds is the most, not the 341
    that one first chunk shows, or the ring runs dry where a block comes out short."""
    resample = Resampler(*rates, 1)
    taken = given = most = 0
    for _ in range(400):
        given += resample(np.zeros((1, chunk), dtype=np.float32)).shape[1]
        taken += chunk
        most = max(most, taken * rates[1] / rates[0] - given)
    assert most <= resample.delay < most + 2, (most, resample.delay)


def test_the_time_a_block_gets_is_sized_from_its_measured_compute_and_wake_ups():
    """Twice the p99 compute, the p99 wake-up lateness and a poll, rounded up to the period:
    BRAVE at 128 on a 128 period at 44.1 kHz, 1.6 ms p99 and 0.3 ms late, gets two periods
    (the path adds 256 frames); a RAVE export at 2048 (24.7 ms) on a 256 period, 2 304 frames."""
    assert slack_frames(0.0016, 0.0003, 44100, 128) == 256
    assert slack_frames(0.0247, 0.0003, 44100, 256) == 2304
    assert slack_frames(0.0, 0.0, 48000, 256) == 256
    assert prefill_frames(slack_frames(0.0016, 0.0003, 44100, 128), 128, 128) == 256


def test_a_timetag_lands_on_its_sample_behind_the_ring(jack, replies):
    """Three blocks ahead (768 frames, 16 ms), a bundle due 0.3 s ahead sets the gain to 0 on a
    constant through the server: the output falls at the first block boundary at or after the
    timetag as heard at the device, not 16 ms later (the clock is marked with the frame that
    plays). Heard by the loopback client, its JACK times less its own loopback period."""
    with ring_server(replies, 256, ahead=3) as server:
        source, sink = server_ports()
        port, sent = server.osc.port, []

        def schedule():
            time.sleep(0.5)
            wall, mono = time.time(), jack_now()
            bundle = OscBundleBuilder(wall + 0.3)
            bundle.add_content(build_msg("/engine/gain", [0.0]))
            with __import__("socket").socket(type=__import__("socket").SOCK_DGRAM) as sock:
                sock.sendto(bundle.build().dgram, ("127.0.0.1", port))
            sent.append(mono + 0.3)

        heard = loopback(jack, 1.5, "dc", f"out->{source}", f"{sink}->in", during=schedule)
        assert server.backend.prefill == 3 * 256
    recorded, cycles = heard["recorded"], heard["cycles"]
    arrived = np.argmax(recorded > 0.49)  # past the silence the rings start with
    falls = np.nonzero(recorded[arrived:] < 0.49)[0]
    assert arrived and len(falls), "the gain never changed"
    first = arrived + falls[0]
    cycle = np.searchsorted(cycles[:, 0], first, side="right") - 1
    landed = cycles[cycle, 1] + (first - cycles[cycle, 0]) / RATE - PERIOD / RATE
    late_ms = 1e3 * (landed - sent[0])
    print(f"\na timetag through a ring of 768 frames: heard {late_ms:.2f} ms after it was due")
    assert -1.0 <= late_ms <= 1e3 * 256 / RATE + 1.5, late_ms


RAVE_DIR = os.environ.get("BENDSERVER_RAVE_DIR")


@pytest.mark.skipif(not RAVE_DIR, reason="BENDSERVER_RAVE_DIR names no folder of RAVE exports")
def test_a_rave_export_plays_on_a_48k_jack_server_at_the_latency_it_reports(jack, replies):
    """A RAVE v2 export (44.1 kHz, block 2048; ``rave_v2_streaming.ts`` in the folder
    BENDSERVER_RAVE_DIR names) on the 48 kHz JACK server of period 256, two torch threads: it
    starts, plays, and an impulse through it (in bypass: the model's own sound would blur it)
    comes back after the latency the server reports."""
    import torch

    path = Path(RAVE_DIR) / "rave_v2_streaming.ts"
    threads = torch.get_num_threads()
    options = ServeOptions(
        model=str(path), preset="none", audio="jack", input="jack", osc_port=0,
        reply_port=replies.port, threads=2,
    )  # fmt: skip
    try:
        with Server(options) as server:
            time.sleep(3.0)
            played = stats(server.osc.port, replies)
            send_python(server.osc.port, "/engine/bypass", 1)
            time.sleep(0.3)
            measured = through_server(jack)
            reported = server.backend.prefill
            banner = server.banner()
    finally:
        torch.set_num_threads(threads)
    print(
        f"\nRAVE v2 on JACK 48 kHz / 256, 2 threads: blocks {played['blocks']}, compute p50 "
        f"{played['p50_ms']:.1f} ms, xruns {played['xruns']}, underruns {played['underruns']}; "
        f"latency reported {reported} frames, measured {measured}"
    )
    assert "at 48000 Hz, resampled" in banner and played["blocks"] >= 50
    assert abs(np.median(measured) - reported) <= 2, (measured, reported)
