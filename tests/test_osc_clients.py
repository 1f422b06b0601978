"""The live server with real OSC clients: liblo's oscsend and oscdump, bundles with timetags,
random bytes and wrong types, hosts not allowed. Audio runs on the null backend (clocked in real
time), so these run on any machine; tests/test_serve_jack.py does the same against JACK."""

import random
import socket
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf
from jack import free_port, need, oscsend, send_python
from pythonosc.osc_bundle_builder import IMMEDIATELY, OscBundleBuilder
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver.serve import ServeOptions, Server

RATE, BLOCK = 48000, 256


def sine_file(folder):
    path = folder / "sine.wav"
    t = np.arange(RATE) / RATE
    sf.write(path, (0.5 * np.sin(2 * np.pi * 375 * t)).astype(np.float32), RATE)
    return path


def scaled_identity():
    """Output = input * g.value, a weight op: a change jumps at one block boundary."""
    engine = tb.StreamEngine(Identity(), block=BLOCK, fuse=False)
    engine.add_op("g", tb.Scale(value=1.0), "gain")
    return engine


@pytest.fixture
def server(tmp_path, replies):
    options = ServeOptions(
        audio="null", input=str(sine_file(tmp_path)), osc_port=0, reply_port=replies.port
    )
    with Server(options, engine=scaled_identity()) as running:
        time.sleep(0.1)
        yield running


def wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_oscsend_changes_the_server_and_get_reads_it_back(server, replies):
    oscsend(server.osc.port, "/bend/g/value", "f", 0.25)
    assert wait_until(lambda: server.engine.ops["g"].get("value") == 0.25)
    oscsend(server.osc.port, "/get/bend/g/value")
    assert replies.wait_for("/get/bend/g/value") == [0.25]
    time.sleep(0.05)
    level = server.callback.log.recent()["level"][-1]
    assert level == pytest.approx(0.25 * 0.5 * 2 / np.pi, rel=0.05), "the output follows"
    oscsend(server.osc.port, "/engine/bypass", "f", 1.0)  # Pd sends flags as floats
    time.sleep(0.05)  # /get reads what the audio applied, at the next block
    oscsend(server.osc.port, "/get/engine/bypass")
    assert replies.wait_for("/get/engine/bypass") == [1.0]


def test_oscdump_receives_the_replies(tmp_path):
    need("oscdump")
    reply_port = free_port()
    dump = subprocess.Popen(
        ["oscdump", "-L", str(reply_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    options = ServeOptions(audio="null", osc_port=0, reply_port=reply_port)
    try:
        with Server(options, engine=scaled_identity()) as server:
            time.sleep(0.5)  # oscdump is listening by now
            oscsend(server.osc.port, "/ping")
            oscsend(server.osc.port, "/stats")
            oscsend(server.osc.port, "/bend/g/value", "s", "loud")
            time.sleep(0.5)
    finally:
        dump.terminate()
        output = dump.communicate(timeout=5)[0]
    lines = output.splitlines()
    assert any(" /pong" in line for line in lines), output
    stats = next(line for line in lines if " /stats " in line)
    for key in ("blocks", "xruns", "late", "errors", "p50_ms", "p99_ms", "max_ms", "received"):
        assert f'"{key}"' in stats
    error = next(line for line in lines if " /error " in line)
    assert '"/bend/g/value"' in error and "value is a number" in error


def test_random_bytes_and_wrong_types_get_errors_and_the_server_keeps_running(server, replies):
    port = server.osc.port
    rng = random.Random(7)
    garbage = [
        bytes([rng.choice([c for c in range(256) if c not in b"/#"])]) + rng.randbytes(40)
        for _ in range(300)
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for data in garbage:
            sender.sendto(data, ("127.0.0.1", port))
    wrong = [
        ("/bend/g/value", "s", "loud"),
        ("/bend/g/value", "f", "nan"),
        ("/bend/g/value", "f", "1e9"),
        ("/engine/gain", "f", "-1"),
        ("/bend/nothing/value", "f", "1"),
        ("/nowhere", "", None),
        ("/preset/load", "s", "../../etc/passwd"),
        ("/engine/mix", "", None),
    ]
    for address, types, value in wrong:
        oscsend(port, address, types, *([] if value is None else [value]))
    received = replies.receive(timeout=3.0)
    errors = [args for address, args in received if address == "/error"]
    coalesced = server.osc.counters()["coalesced"]  # wrong values replaced by newer wrong ones
    assert len(errors) + coalesced == len(garbage) + len(wrong) and coalesced <= 2
    by_address = {args[0]: args[1] for args in errors if args[0]}
    assert "finite" in by_address["/bend/g/value"] or "number" in by_address["/bend/g/value"]
    assert "letters, digits" in by_address["/preset/load"]
    assert "usage: /engine/mix value" in by_address["/engine/mix"]
    assert server.engine.ops["g"].get("value") == 1.0 and server.engine.gain == 1.0
    blocks = server.engine.stats.blocks
    send_python(port, "/ping")
    assert replies.wait_for("/pong") == []
    send_python(port, "/stats")
    stats = replies.wait_for("/stats")
    stats = dict(zip(stats[::2], stats[1::2], strict=True))
    assert stats["malformed"] == len(garbage)
    assert stats["osc_errors"] == len(garbage) + len(wrong) - coalesced
    assert wait_until(lambda: server.engine.stats.blocks > blocks + 5), "audio keeps running"


def first_block_at_level(server, level, after_frame=0):
    log = server.callback.log.recent()
    for frame, start, value in zip(log["frame"], log["start"], log["level"], strict=True):
        if frame >= after_frame and abs(value - level) < 1e-6:
            return int(frame), float(start)
    raise AssertionError(f"no block at level {level}")


def test_bundle_with_future_timetag_applies_at_its_block(server):
    due = time.time() + 0.3
    bundle = OscBundleBuilder(due)
    bundle.add_content(build_msg("/bend/g/value", [0.0]))
    send_python_raw(server.osc.port, bundle.build().dgram)
    time.sleep(0.5)
    at = server.clock.frame_at(due)
    frame, start = first_block_at_level(server, 0.0)
    assert frame == -(-at // BLOCK) * BLOCK, "the first block that starts at or after the tag"
    print(f"timetag {due:.4f}: applied at the block started at {start:.4f} (frame {frame})")
    assert -0.001 < start - due < BLOCK / RATE + 0.005
    assert server.osc.worker.scheduled == 1

    immediate = OscBundleBuilder(IMMEDIATELY)
    immediate.add_content(build_msg("/bend/g/value", [1.0]))
    sent_at = server.callback.frames
    send_python_raw(server.osc.port, immediate.build().dgram)
    time.sleep(0.2)
    log = server.callback.log.recent()
    levels = zip(log["frame"], log["level"], strict=True)
    changed = [frame for frame, level in levels if frame >= sent_at and level > 0.1]
    assert changed and changed[0] - sent_at <= 2 * BLOCK, "an immediate bundle: the next block"


def send_python_raw(port, data):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(data, ("127.0.0.1", port))


def local_address():
    """A non-loopback IPv4 address of this machine, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("allowed", [False, True])
def test_hosts_outside_loopback_need_allow(replies, allowed):
    address = local_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to send from")
    options = ServeOptions(
        audio="null",
        osc_host="0.0.0.0",
        osc_port=0,
        reply_port=replies.port,
        reply_host="127.0.0.1",
        allow=[f"{address}/32"] if allowed else [],
        zeroconf=False,  # no mDNS announcement beyond loopback from a test
    )
    with Server(options, engine=scaled_identity()) as server:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.bind((address, 0))
            sender.sendto(build_msg("/bend/g/value", [0.5]).dgram, (address, server.osc.port))
        assert wait_until(lambda: server.osc.receiver.counters()["packets"] == 1)
        time.sleep(0.1)
        assert server.osc.receiver.counters()["denied"] == (0 if allowed else 1)
        assert server.engine.ops["g"].get("value") == (0.5 if allowed else 1.0)
