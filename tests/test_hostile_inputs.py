"""Hostile inputs to the newer surfaces: values past what their consumer holds, a control worker
that must outlive any bug, code loaded only from where the person at the machine allows, and
every reader's bounds (one line naming the limit). Live servers run on the null backend."""

import dataclasses
import json
import logging
import time

import pytest
from jack import Replies
from streaming import Identity

import bendserver as tb
from bendserver import control
from bendserver.control import Controller
from bendserver.errors import BendingError
from bendserver.midimap import read_mappings
from bendserver.osc import Incoming
from bendserver.osc.replies import ReplySender
from bendserver.osc.worker import ControlWorker
from bendserver.presets import PresetLibrary, read_preset

BLOCK = 256


def engine() -> tb.StreamEngine:
    return tb.StreamEngine(Identity(), block=BLOCK, fuse=False)


# -- 2: the control thread cannot die ------------------------------------------------------------

HUGE_RAMP = {"address": "/engine/gain", "kind": "cc", "channel": 1, "number": 7, "ramp_ms": 1e300}


def test_a_ramp_no_reply_can_carry_is_refused_where_it_is_read(tmp_path):
    preset = tmp_path / "huge.json"
    preset.write_text(
        json.dumps({"format": "bendserver.config", "version": 1, "midi": [HUGE_RAMP]})
    )
    with pytest.raises(BendingError, match=r"huge.json: midi\[0\]: ramp_ms is 0..600000, got 1e"):
        read_preset(preset)
    mappings = tmp_path / "desk.json"
    mappings.write_text(json.dumps({"mappings": [{**HUGE_RAMP, "ramp_ms": 600_001}]}))
    with pytest.raises(BendingError, match=r"mappings\[0\]: ramp_ms is 0..600000, got 600001"):
        read_mappings(mappings)
    mappings.write_text(json.dumps({"mappings": [{**HUGE_RAMP, "ramp_ms": 0, "high": 1e39}]}))
    with pytest.raises(BendingError, match="within ±3.40282e"):
        read_mappings(mappings)


@pytest.fixture
def worker(tmp_path):
    """A control worker replying over UDP (the real sender) to a listener; its presets in a
    folder of the test."""
    listener = Replies()
    replies = ReplySender(listener.port, "127.0.0.1")
    running = ControlWorker(Controller(engine(), PresetLibrary(tmp_path / "presets")), replies)
    running.start()
    yield running, listener
    running.stop()
    replies.close()
    listener.close()


def ask(worker, listener, address, *args):
    worker.submit(Incoming(address, args), "127.0.0.1")
    return listener.receive(timeout=2.0)


def test_a_bug_in_a_handler_or_its_replies_is_answered_logged_once_and_the_worker_goes_on(
    worker, monkeypatch, caplog
):
    """The finding: a preset's mapping with ramp_ms 1e300, then /midi/list: the reply could not
    be encoded (OverflowError) and the worker's thread ended: nothing was answered again. Now a
    reply that cannot be sent, and an error between two messages, are each answered or logged
    (the traceback once), and the worker answers on."""
    running, listener = worker
    ping = control.route("/ping")
    broken = control.Match(
        dataclasses.replace(ping.entry, handler=lambda *a: [("/pong", [1e300])]), {}
    )
    monkeypatch.setattr(control, "route", lambda address: broken if address == "/ping" else ping)
    first = ask(running, listener, "/ping")
    second = ask(running, listener, "/ping")
    monkeypatch.undo()
    assert first == second == [
        ("/error", ["/ping", "internal error, a bug in bendserver: OverflowError: float too "
                    "large to pack with f format"])
    ]  # fmt: skip
    calls = []

    def due():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a schedule out of order")
        return []

    monkeypatch.setattr(running.controller, "due", due)
    time.sleep(0.5)
    assert ask(running, listener, "/ping") == [("/pong", [])]
    assert running.thread.is_alive() and len(calls) > 1
    bugs = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in bugs] == [
        "/ping: " + first[0][1][1],
        "/ping: " + first[0][1][1],
        "the control worker: internal error, a bug in bendserver: RuntimeError: a schedule out "
        "of order",
    ]
    assert [r.exc_info is not None for r in bugs] == [True, False, True], "a traceback once"
