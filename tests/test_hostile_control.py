"""A live server against careless or hostile clients, with real OSC datagrams: a flood of changes
timetagged an hour ahead, ``/get`` against what is scheduled, a preset of 20 000 ops loaded
while ``/ping`` is timed, and the op limit. Audio runs on the null backend (real time)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from jack import free_port, send_python
from pythonosc.osc_bundle_builder import OscBundleBuilder
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver.engine import state as state_module
from bendserver.engine.state import MAX_OPS
from bendserver.loader import DEFAULT_MODEL
from bendserver.presets.library import Preset
from bendserver.serve import ServeOptions, Server

BLOCK = 256


def scaled_identity():
    engine = tb.StreamEngine(Identity(), block=BLOCK, fuse=False)
    engine.add_op("g", tb.Scale(value=1.0), "gain")
    return engine


@pytest.fixture
def server(replies):
    options = ServeOptions(audio="null", osc_port=0, reply_port=replies.port)
    options.reply_host = "127.0.0.1"  # replies to every loopback sender reach the listener
    with Server(options, engine=scaled_identity()) as running:
        yield running


def sender(host="127.0.0.1"):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    return sock


def ahead(seconds, address, *args):
    bundle = OscBundleBuilder(time.time() + seconds)
    bundle.add_content(build_msg(address, list(args)))
    return bundle.build().dgram


def exchange(port, replies, *messages, host="127.0.0.1"):
    """Send ``(address, args)`` messages, then /ping; every reply up to the /pong."""
    with sender(host) as sock:
        for address, args in messages:
            sock.sendto(build_msg(address, list(args)).dgram, ("127.0.0.1", port))
        sock.sendto(build_msg("/ping", []).dgram, ("127.0.0.1", port))
    received = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        batch = replies.receive(timeout=2.0)
        received += batch
        if any(address == "/pong" for address, _ in batch):
            return received[: next(i for i, (a, _) in enumerate(received) if a == "/pong")]
    raise AssertionError(f"no /pong; replies: {received[:5]}")


def test_changes_scheduled_an_hour_ahead_never_lock_out_changes_for_now(server, replies):
    port = server.osc.port
    with sender() as sock:
        for index in range(1100):
            sock.sendto(ahead(3600 + index, "/bend/g/value", 0.9), ("127.0.0.1", port))
            if index % 10 == 9:
                time.sleep(0.005)  # a socket buffer the kernel caps small must not overflow
    flood = exchange(port, replies)
    counters = server.osc.counters()
    assert counters["dropped"] == 0, counters
    refused = [args for address, args in flood if address == "/error"]
    assert len(refused) == 1100 - 1024, "the newest scheduled changes beyond the bound"
    assert all("scheduled ahead already" in args[1] for args in refused), refused[:1]

    # another sender's schedule is its own
    assert exchange(port, replies, host="127.0.0.2") == []
    with sender("127.0.0.2") as sock:
        sock.sendto(ahead(3600, "/engine/gain", 0.5), ("127.0.0.1", port))
    assert exchange(port, replies, host="127.0.0.2") == []

    answers = exchange(
        port,
        replies,
        ("/bend/g/value", [0.5]),
        ("/preset/save", ["hostile"]),
        ("/preset/load", ["hostile"]),
        ("/engine/reset", []),
        ("/bend/add", ["h", "Scale", "gain", "value", 1.0]),
        ("/bend/remove", ["h"]),
    )
    assert [a for a, _ in answers] == ["/preset/saved"], answers
    time.sleep(0.05)
    answers = exchange(
        port,
        replies,
        ("/get/bend/g/value", []),
        ("/scheduled/bend/g/value", []),
        ("/scheduled/engine/gain", []),
        ("/scheduled/engine/mix", []),
        ("/bend/clear", []),
    )
    values = dict(answers)
    assert values["/get/bend/g/value"] == [0.5], "/get reads what plays, not what is scheduled"
    seconds, value = values["/scheduled/bend/g/value"]
    assert value == pytest.approx(0.9) and 3600 + 1023 - 5 < seconds < 3600 + 1023 + 5
    assert values["/scheduled/engine/gain"][1] == 0.5 and values["/scheduled/engine/mix"] == []
    time.sleep(0.05)
    assert server.engine.applied_state.ops == (), "/bend/clear went through"


def test_a_change_due_soon_is_prepared_and_applied_at_its_time(server, replies):
    port = server.osc.port
    with sender() as sock:
        sock.sendto(ahead(0.4, "/engine/gain", 0.25), ("127.0.0.1", port))
    assert exchange(port, replies, ("/scheduled/engine/gain", []))[0][1][1] == 0.25
    assert exchange(port, replies, ("/get/engine/gain", [])) == [("/get/engine/gain", [1.0])]
    time.sleep(0.6)
    assert exchange(port, replies, ("/get/engine/gain", [])) == [("/get/engine/gain", [0.25])]
    assert exchange(port, replies, ("/scheduled/engine/gain", [])) == [
        ("/scheduled/engine/gain", [])
    ]


def big_preset(count, model="drive"):
    """A preset of ``count`` Scale ops on one weight of the shipped default model."""
    ops = {f"s{i}": {"op": "Scale", "params": {"value": 1.0}, "options": {}} for i in range(count)}
    bends = [{"op": f"s{i}", "keys": [r"drive_in\.weight"]} for i in range(count)]
    config = {"format": "bendserver.config", "version": 1, "ops": ops, "bends": bends}
    return Preset(name=f"big{count}", config=config, model=model)


def save_big_preset(count, home):
    """The preset in the presets folder of the user's folder ``home``; returns its name."""
    preset = big_preset(count)
    folder = home / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{preset.name}.json").write_text(json.dumps(preset.to_dict()), encoding="utf-8")
    return preset.name


def test_a_large_preset_loads_in_time_linear_in_its_ops():
    engine = tb.StreamEngine(DEFAULT_MODEL, preset=None)
    took = {}
    for count in (500, 4000):
        started = time.perf_counter()
        engine.load_preset(big_preset(count))
        took[count] = time.perf_counter() - started
        engine.clear_ops()
        engine.process(np.zeros((1, engine.block), np.float32))
        engine.collect()
    print(f"500 ops {took[500]:.3f} s, 4000 ops {took[4000]:.3f} s")
    assert took[4000] < 16 * took[500], "8 times the ops: 8 times the time, not 64"


def test_ops_past_the_limit_are_refused_and_change_nothing(monkeypatch):
    engine = tb.StreamEngine(DEFAULT_MODEL, preset=None)
    with pytest.raises(tb.BendingError, match=f"past the limit of {MAX_OPS} ops per model"):
        engine.load_preset(big_preset(MAX_OPS + 1))
    monkeypatch.setattr(state_module, "MAX_OPS", 2)
    engine.load_preset(big_preset(2))
    with pytest.raises(tb.BendingError, match="past the limit of 2 ops per model"):
        engine.add_op("one_more", tb.Scale(1.0), r"drive_in\.weight")
    assert engine.state.op_ids == ["s0", "s1"] and len(engine.node._bends.live) == 2


def test_ping_answers_while_a_large_preset_loads_and_later_changes_follow_it(replies):
    home = Path(os.environ["BENDSERVER_HOME"])
    name = save_big_preset(4000, home)
    options = ServeOptions(
        model=DEFAULT_MODEL, preset="none", audio="null", osc_port=0, oscquery_port=0
    )
    options.reply_port = replies.port
    with Server(options) as server, sender() as sock:
        port = ("127.0.0.1", server.osc.port)
        late = server.engine.stats.late
        sock.sendto(build_msg("/preset/load", [name]).dgram, port)
        sock.sendto(build_msg("/engine/gain", [0.5]).dgram, port)  # after the preset
        trips = []
        while len(server.engine.applied_state.ops) != 4000:
            sent = time.monotonic()
            sock.sendto(build_msg("/ping", []).dgram, port)
            replies.wait_for("/pong")
            trips.append(time.monotonic() - sent)
            time.sleep(0.01)
        time.sleep(0.2)
        print(f"/ping during the load: {len(trips)}, max {1000 * max(trips):.1f} ms")
        assert max(trips) < 0.3, "queries are answered between the slices of the load"
        assert server.engine.stats.late == late, "no late block"
        assert server.engine.applied_state.gain == 0.5, "a change sent after the preset follows it"


# the server sets one stop event on either signal: SIGINT takes SIGTERM's path
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_a_signal_during_a_large_preset_load_stops_the_server_cleanly(tmp_path, replies, sig):
    home = tmp_path / "home"
    name = save_big_preset(20000, home)
    port, record = free_port(), tmp_path / "take.wav"
    process = subprocess.Popen(
        [sys.executable, "-m", "bendserver.cli", "serve", "-m", DEFAULT_MODEL, "-p", "none",
         "--audio", "null", "--osc-port", str(port), "--reply-port", str(replies.port),
         "--oscquery-port", "0", "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "BENDSERVER_HOME": str(home), "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        for line in process.stdout:
            if line.startswith("try"):
                break
        send_python(port, "/preset/load", name)
        time.sleep(1.5)  # well into the load
        process.send_signal(sig)
        output = process.communicate(timeout=30)[0]
    finally:
        process.kill()
    assert process.returncode == 0, output
    assert "terminate called" not in output and "stopped: blocks" in output
    assert "did not stop" not in output, "every thread joined"
    info = sf.info(str(record))
    assert info.duration > 0.5 and info.channels == 1


def test_a_killed_server_leaves_no_process_on_its_port_and_no_file():
    """A server killed outright (SIGKILL: a crash, the OOM killer) cannot stop its OSC intake
    process: the intake sees it gone and exits, freeing the port for the next server, and the
    ring they shared left no file behind from the start."""
    port = free_port()
    rings = set(Path("/dev/shm").glob("bendserver-osc-*")) if Path("/dev/shm").is_dir() else set()
    server = subprocess.Popen(
        [sys.executable, "-m", "bendserver.cli", "serve", "--audio", "null", "-m", "drive",
         "--osc-port", str(port), "--oscquery-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        for line in server.stdout:
            if line.startswith("try"):
                break
        assert server.poll() is None, "the server did not start"
        intakes = children(server.pid, "intake.py")
        assert len(intakes) == 1
        left = set(Path("/dev/shm").glob("bendserver-osc-*")) - rings
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    deadline = time.monotonic() + 5
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while True:
            try:
                sock.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, "the killed server's port is still taken"
                time.sleep(0.05)
    assert intakes[0] not in children(1, "intake.py"), "the intake lives on"
    assert left == set(), "the ring's file outlived the start"


def children(parent: int, word: str) -> list[int]:
    """The processes whose parent is ``parent`` and whose command line holds ``word``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == parent and word in command:
            found.append(int(stat.parent.name))
    return found
