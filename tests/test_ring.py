"""The ring mode against a real JACK server (dummy driver, 48 kHz, period 256): the device's
callback is rtmixer's (C), the engine computes ahead on its own thread.

- the latency the server reports is the one an impulse through the live server measures, for a
  model block equal to the period and for a 44.1 kHz model of block 2048 (resampled, the rings
  decoupling the block from the period);
- a compute that runs the output ring dry is counted (``underruns``) and the latency stays;
- a recording is as long as the run; the ring mode is refused on the null backend; the late-block
  warning never suggests the mode in use.
"""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from jack import Replies, jack_server, need, stats
from streaming import Identity

import bendserver as tb
from bendserver.audio.jackclient import delays
from bendserver.audio.reporter import Reporter
from bendserver.audio.ring import prefill
from bendserver.errors import BendingError
from bendserver.serve import ServeOptions, Server

RATE, PERIOD = 48000, 256
LOOPBACK = Path(tb.__file__).parent / "audio" / "jackclient.py"
EVERY = RATE // 2  # the loopback client's impulse period (frames)


@pytest.fixture(scope="module")
def jack():
    need("jack_lsp")
    with jack_server(RATE, PERIOD) as name:
        yield name


@pytest.fixture
def replies():
    listener = Replies()
    yield listener
    listener.close()


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


def through_server(jack: str, seconds: float = 2.6) -> list[int]:
    """Impulse delays through the live server, less JACK's own loopback (one period: the
    client hears in the next cycle what it played)."""
    source, sink = server_ports()
    loop = impulse_delays(jack, 1.1, "out->in")
    assert loop and len(set(loop)) == 1, loop
    return [d - loop[0] for d in impulse_delays(jack, seconds, f"out->{source}", f"{sink}->in")]


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
    assert f"{server.latency} samples" in banner and "ring mode (1 block ahead)" in banner
    assert abs(result["latency_ms"] - 1e3 * reported / RATE) < 0.05
    assert f"(device block {PERIOD}" in banner, "the device's period, not the model's block"


def test_a_dry_output_ring_is_counted_and_the_latency_stays(jack, replies):
    """Every 20th block takes longer than the block and the ahead block together: the ring
    runs dry, silence plays, it is counted and re-armed with the same prefill."""
    with ring_server(replies, 256) as server:
        process, count = server.engine.process, [0]

        def slow(block):
            count[0] += 1
            if count[0] % 20 == 0:
                time.sleep(3 * 256 / RATE)
            return process(block)

        server.engine.process = slow
        time.sleep(0.5)
        result = stats(server.osc.port, replies)
        server.engine.process = process
        time.sleep(0.3)
        measured = through_server(jack)
        reported = server.backend.prefill
    assert result["underruns"] >= 2 and result["missed"] == result["underruns"]
    assert abs(np.median(measured) - reported) <= 2, (measured, reported)


def test_a_recording_is_as_long_as_the_run(jack, replies, tmp_path):
    record = tmp_path / "take.wav"
    with ring_server(replies, 2048, 44100, record=str(record)) as server:
        started = time.monotonic()
        time.sleep(3.0)
        ran = time.monotonic() - started
        ahead = server.backend.prefill / RATE
    length = sf.info(record).duration
    # Blocks are computed ahead of what plays, and until the compute thread stops.
    assert ran - 0.05 <= length <= ran + ahead + 0.5, (length, ran)


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
