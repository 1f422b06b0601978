"""Memory that a client controls stays bounded: commands replaced before they apply leave the
audio side, and the OSC intake keeps no per-sender or per-size state past its bounds."""

import socket
import time
import tracemalloc
from pathlib import Path

import numpy as np
from pythonosc.osc_message_builder import build_msg
from streaming import CausalStack, twin

import bendserver as tb
from bendserver.control import coalescing_pattern
from bendserver.osc.intake import DENIED_LOGGED, AccessList, Inbox, Intake
from bendserver.osc.receiver import OscReceiver

BLOCK = 256


def test_commands_replaced_before_they_apply_do_not_pile_up_until_their_time():
    engine = tb.StreamEngine(twin(CausalStack)[0], block=BLOCK, sample_rate=48000, fuse=False)
    engine.add_op("w", tb.Scale(1.0), r"first\.conv\.weight")
    hour = engine.time + engine.samples(3600)
    scheduled = 16
    for k in range(scheduled):  # an hour ahead: each change for now re-plans all of them
        engine.set_param("w", "value", 2.0, at=hour + k)
    block = np.zeros((1, BLOCK), np.float32)
    most = 0
    for step in range(150):
        engine.set_param("w", "value", 2.0 if step % 2 else 0.5)
        engine.process(block)
        most = max(most, engine.commands.pending())
    assert most <= 2 * scheduled + 70, f"{most} commands held for {scheduled} scheduled"
    engine.collect()
    assert len(engine.timeline.entries) == scheduled
    assert engine.state.op("w").param("value") == 2.0


def _rss_mib(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line[:6] == "VmRSS:")) / 1024


def test_datagrams_too_large_for_the_ring_are_dropped_on_arrival_not_held_in_the_inbox():
    receiver = OscReceiver("127.0.0.1", 0, coalescing_pattern())
    try:
        small, count = build_msg("/bend/add", ["m"]).dgram, 1000
        large = build_msg("/preset/save", [b"x" * 60000]).dgram
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for _ in range(receiver.ring.slots):  # nobody takes: the ring is full
                sender.sendto(small, ("127.0.0.1", receiver.port))
            time.sleep(0.2)
            before = _rss_mib(receiver.process.pid)
            for index in range(count):
                sender.sendto(large, ("127.0.0.1", receiver.port))
                if index % 100 == 99:
                    time.sleep(0.01)  # within the receive buffer
        deadline = time.monotonic() + 5
        while receiver.counters()["packets"] < receiver.ring.slots + count:
            assert time.monotonic() < deadline, receiver.counters()
            time.sleep(0.05)
        time.sleep(0.1)
        assert receiver.counters()["dropped_large"] == count
        grown = _rss_mib(receiver.process.pid) - before
        assert grown < 16, f"the intake grew by {grown:.1f} MiB holding what it cannot forward"
    finally:
        receiver.stop()


def test_denied_hosts_are_named_in_the_log_up_to_a_bound(capsys):
    access = AccessList()
    intake = Intake(None, access, Inbox(lambda address: False), None, -1)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(20000):  # spoofed sources: a datagram each from another host
            intake._deny(f"2001:db8::{index:x}")
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    lines = capsys.readouterr().err.splitlines()
    assert intake.denied == 20000
    assert len(lines) == DENIED_LOGGED + 1 and "not named" in lines[-1], lines[-2:]
    assert grown < 64 * 1024, f"{grown} bytes kept for 20 000 denied hosts"
