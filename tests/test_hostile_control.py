"""A live server against careless or hostile clients, with real OSC datagrams: a flood of changes
timetagged an hour ahead, ``/get`` against what is scheduled, a preset of 20 000 ops loaded
while ``/ping`` is timed, and the op limit. Audio runs on the null backend (real time)."""

import json
import socket
import time

import pytest
from jack import Replies
from pythonosc.osc_bundle_builder import OscBundleBuilder
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver.serve import ServeOptions, Server

BLOCK = 256


@pytest.fixture
def replies():
    listener = Replies()
    yield listener
    listener.close()


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
    flood = exchange(port, replies)
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


def write_big_preset(count):
    """A preset of ``count`` weight ops of the shipped default model, in the user's folder."""
    folder = tb.paths.user_dir() / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    ops = {f"s{i}": {"op": "Scale", "params": {"value": 1.0}, "options": {}} for i in range(count)}
    bends = [{"op": f"s{i}", "keys": [r"drive_in\.weight"]} for i in range(count)]
    preset = {"format": "bendserver.config", "version": 1, "ops": ops, "bends": bends}
    path = folder / f"big{count}.json"
    path.write_text(json.dumps({**preset, "model": "drive"}), encoding="utf-8")
    return path.stem
