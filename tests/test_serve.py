"""``bendserver serve`` on the null backend: the command line, its banner, clean shutdown on
SIGTERM and Ctrl-C with a valid recording, the processors' latency, and clear refusals."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from jack import Replies, free_port, need_portaudio, oscsend, stats
from streaming import CausalStack, Identity

import bendserver as tb
from bendserver.audio import DirectProcessor, Recorder, ThreadedProcessor
from bendserver.cli import main
from bendserver.serve import ServeOptions, Server

ROOT = Path(__file__).resolve().parent.parent
MODEL = f"{Path(__file__).parent / 'streaming.py'}:CausalStack"
BLOCK = 256


def serve_command(*extra):
    return [sys.executable, "-m", "bendserver.cli", "serve", "-m", MODEL, "--block", "256", *extra]


def start_cli(*extra):
    """Start the command, wait for its banner (up to the 'try' line); returns (process, banner)."""
    process = subprocess.Popen(
        serve_command(*extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    banner = []
    for line in process.stdout:
        banner.append(line.rstrip("\n"))
        if line.startswith("try"):
            break
    else:
        raise AssertionError("the server did not start:\n" + "\n".join(banner))
    return process, banner


# the server sets one stop event on either signal: SIGINT takes SIGTERM's path
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_cli_serves_and_stops_cleanly_with_a_valid_recording(tmp_path, sig):
    port, replies = free_port(), Replies()
    record = tmp_path / "take.wav"
    process, banner = start_cli(
        "--audio", "null", "--osc-port", str(port), "--reply-port", str(replies.port),
        "--record", str(record), "-p", "none",
    )  # fmt: skip
    try:
        text = "\n".join(banner)
        assert "CausalStack" in text and "null (no sound card" in text
        assert "block      256" in text and "latency    0 samples (0.00 ms)" in text
        assert "runs on    cpu" in text
        assert f"127.0.0.1:{port}" in text and f":{replies.port}" in text
        assert f"try        oscsend localhost {port} /engine/gain f 0.5" in text
        assert stats(port, replies)["blocks"] >= 1, "it answers once the model plays"
        assert "stop       Ctrl-C" in text  # it said neither how to stop nor how to see
        query = f"replies    oscdump {replies.port} prints them; oscsend localhost {port} "
        assert f"{query}/get/engine/gain answers the value playing" in text
        oscsend(port, "/engine/gain", "f", 0.5)
        time.sleep(0.6)
        assert stats(port, replies)["commands"] >= 1
        oscsend(port, "/get/engine/gain")  # what the banner says to send: the change is seen
        assert replies.wait_for("/get/engine/gain") == [0.5]
        process.send_signal(sig)
        tail = process.communicate(timeout=20)[0]
    finally:
        process.kill()
        replies.close()
    assert process.returncode == 0, tail
    assert "stopped: blocks" in tail and "xruns" in tail
    info = sf.info(str(record))
    assert info.samplerate == 48000 and info.channels == 1 and info.duration > 0.4
    audio, _ = sf.read(str(record), dtype="float32")
    assert np.isfinite(audio).all()


def test_cli_stops_after_duration_and_prints_a_summary():
    result = subprocess.run(
        serve_command("--audio", "null", "--osc-port", "0", "--duration", "0.5", "-p", "none"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    summary = result.stdout.splitlines()[-1]
    fields = summary.split()
    values = dict(zip(fields[1::2], fields[2::2], strict=True))
    assert int(values["blocks"]) > 50 and values["xruns"] == "0"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--audio", "no-such-card"], "no output device matches 'no-such-card'"),
        (["--audio", "null", "--input", "missing.wav"], "no sound file missing.wav"),
        (["--audio", "null", "--input", "microphone"], "the null backend has no input"),
        (["--audio", "null", "--allow", "10.0.0.0/99"], "CIDR notation"),
        (["--audio", "null", "--record", "take.mp4"], "the format follows the extension"),
        pytest.param(
            ["--audio", "null", "--device", "cuda"],
            "this machine has no CUDA device; use --device cpu",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
        ),
    ],
)
def test_cli_refusals_say_what_to_do(extra, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["serve", "-m", MODEL, "--osc-port", "0", "-p", "none", *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_jack_without_a_jack_server_says_how_to_start_one(monkeypatch, capsys):
    """It suggested --audio jack, the flag just given."""
    need_portaudio()
    monkeypatch.setenv("JACK_DEFAULT_SERVER", f"none{os.getpid()}")  # a server that is not up
    monkeypatch.setenv("JACK_NO_START_SERVER", "1")
    argv = ["serve", "-m", MODEL, "--osc-port", "0", "-p", "none", "--audio", "jack"]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "no JACK server runs" in said and "jackd -d dummy" in said
    assert "scripts/jack_dummy.sh" in said and "e.g. --audio jack" not in said


def test_busy_osc_port_is_refused():
    first = Server(ServeOptions(audio="null", osc_port=0), engine=tb.StreamEngine(Identity()))
    try:
        with pytest.raises(tb.BendingError, match="pick another with --osc-port"):
            Server(
                ServeOptions(audio="null", osc_port=first.osc.port),
                engine=tb.StreamEngine(Identity()),
            )
    finally:
        first.stop()


# -- processors, latency, recording ------------------------------------------------------------


def ramp_blocks(count, frames):
    signal_ = np.arange(count * frames, dtype=np.float32)[None] / (count * frames)
    return [signal_[:, i * frames : (i + 1) * frames] for i in range(count)]


@pytest.mark.parametrize("device_block", [256, 128, 96, 512])
def test_direct_processor_latency_is_what_it_reports(device_block):
    engine = tb.StreamEngine(Identity(), block=BLOCK, fuse=False)
    processor = DirectProcessor(engine, device_block)
    blocks = ramp_blocks(24, device_block)
    out = np.concatenate([processor.process(b) for b in blocks], axis=1)
    source = np.concatenate(blocks, axis=1)
    delay = processor.latency
    assert delay == (0 if device_block % BLOCK == 0 else BLOCK - np.gcd(BLOCK, device_block))
    np.testing.assert_allclose(out[:, delay:], source[:, : source.shape[1] - delay], atol=1e-6)


def test_threaded_processor_adds_one_device_block():
    engine = tb.StreamEngine(Identity(), block=BLOCK, fuse=False)
    processor = ThreadedProcessor(engine, BLOCK)
    processor.start()
    try:
        blocks = ramp_blocks(16, BLOCK)
        outs = []
        for block in blocks:
            outs.append(processor.process(block).copy())
            time.sleep(0.01)  # a device period: the worker has time
    finally:
        processor.stop()
    assert processor.latency == BLOCK and processor.missed == 0
    out, source = np.concatenate(outs, axis=1), np.concatenate(blocks, axis=1)
    np.testing.assert_allclose(out[:, BLOCK:], source[:, :-BLOCK], atol=1e-6)


def test_threaded_processor_counts_outputs_not_ready():
    engine = tb.StreamEngine(CausalStack(), block=BLOCK)
    processor = ThreadedProcessor(engine, BLOCK)  # not started: nothing is ever ready
    for block in ramp_blocks(4, BLOCK):
        assert not processor.process(block).any()
    assert processor.missed == 3


def test_recorder_drops_and_counts_when_its_ring_is_full(tmp_path):
    recorder = Recorder(tmp_path / "r.wav", 48000, 1, BLOCK, seconds=0.01)
    recorder._stop.set()  # a stalled disk: the writer does not drain
    recorder._thread.join()
    block = np.ones((1, BLOCK), dtype=np.float32)
    for _ in range(12):
        recorder.push(block)
    assert recorder.dropped == 4
    recorder.close()
    assert sf.info(str(tmp_path / "r.wav")).frames == 8 * BLOCK
    with pytest.raises(tb.BendingError, match="exists"):
        Recorder(tmp_path / "r.wav", 48000, 1, BLOCK)


def test_server_in_threaded_mode_reports_its_latency_and_plays(tmp_path):
    options = ServeOptions(
        audio="null", osc_port=0, latency_mode="threaded", record=str(tmp_path / "t.wav")
    )
    with Server(options, engine=tb.StreamEngine(CausalStack(), block=BLOCK)) as server:
        assert server.latency == BLOCK
        assert "latency    256 samples (5.33 ms)" in server.banner()
        assert "threaded mode" in server.banner()
        time.sleep(0.5)
    stats_ = server.stats()
    assert stats_["blocks"] > 50 and "overruns" in stats_ and "record_dropped" in stats_
    assert sf.info(str(tmp_path / "t.wav")).duration > 0.4


@pytest.mark.parametrize("wait", [2.0, 0.05])
def test_osc_answers_once_the_model_plays_or_the_log_says_it_does_not_yet(
    wait, monkeypatch, caplog
):
    """The finding: the first /pong could come before the model played. A stream whose first
    block comes 0.5 s late: OSC starts once it is computed; one later than the server waits
    for is named in the log."""
    from bendserver.audio.backends import NullBackend
    from bendserver.serve import server as serve

    run = NullBackend._run

    def late(self):
        time.sleep(0.5)
        run(self)

    monkeypatch.setattr(NullBackend, "_run", late)
    monkeypatch.setattr(serve, "FIRST_BLOCK_SECONDS", wait)
    options = ServeOptions(audio="null", osc_port=0, oscquery_port=0)
    with Server(options, engine=tb.StreamEngine(CausalStack(), block=BLOCK)) as server:
        played = server.engine.stats.blocks
    said = [r.getMessage() for r in caplog.records if "computed no block" in r.getMessage()]
    if wait > 0.5:
        assert played >= 1 and not said
    else:
        assert played == 0 and said == [
            "the stream computed no block within 0.05 s of its start: OSC answers before the "
            "model plays"
        ]


def test_a_server_that_cannot_start_leaves_no_recording(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["serve", "-m", MODEL, "--osc-port", "0", "--audio", "no-such-card"]
    assert main([*argv, "--record", "take.wav"]) == 2
    assert not (tmp_path / "take.wav").exists()
