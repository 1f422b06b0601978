"""The OSC side without audio: parsing, access, replies, the control worker, the receiver
socket, /stats with the server's counters, and the generated reference page."""

import importlib.util
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from pythonosc.osc_bundle_builder import IMMEDIATELY, OscBundleBuilder
from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver.audio import AudioClock, ComputeGate
from bendserver.control import LEAD, Controller, coalescing_pattern
from bendserver.osc import (
    DEFAULT_RCVBUF,
    AccessList,
    ControlWorker,
    Incoming,
    MalformedPacket,
    OscReceiver,
    ReplySender,
    encode,
    parse_datagram,
)
from bendserver.osc.access import checked_networks
from bendserver.osc.intake import LOSSES, read_too_large
from bendserver.osc.packets import MAX_DEPTH

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
ONES = np.ones((1, 256), dtype=np.float32)


def bundle(timetag, *contents):
    builder = OscBundleBuilder(timetag)
    for content in contents:
        builder.add_content(content)
    return builder.build()


# -- parsing -----------------------------------------------------------------------------------


def test_parse_message_and_nested_bundles():
    assert parse_datagram(build_msg("/bend/g/value", [0.5, 10]).dgram) == [
        Incoming("/bend/g/value", (0.5, 10), None)
    ]
    due = time.time() + 3.0
    inner = bundle(IMMEDIATELY, build_msg("/ping", []))
    messages = parse_datagram(bundle(due, build_msg("/engine/gain", [0.5]), inner).dgram)
    assert [m.address for m in messages] == ["/engine/gain", "/ping"]
    assert messages[0].timetag == pytest.approx(due, abs=1e-6)
    assert messages[1].timetag is None, "an immediate inner bundle applies at the next block"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello",
        b"/\xff\xfe\x00",  # not UTF-8
        b"#bundle\x00",  # no timetag
        b"#bundle\x00" + bytes(8) + b"\x00\x00\x00\x40/a\x00\x00",  # element larger than the packet
        b"/a\x00\x00,r\x00\x00\x00\x00\x00\x01",  # RGBA: a type the address space has no use for
        b"/a\x00\x00,b\x00\x00\x00\x00\x00\x01x\x00\x00\x00",  # blob
        b"/a\x00\x00f\x00\x00\x00",  # type tags without the comma
    ],
)
def test_malformed_packets_are_refused(data):
    with pytest.raises(MalformedPacket):
        parse_datagram(data)


def test_deep_bundles_are_refused():
    packet = build_msg("/ping", [])
    for _ in range(MAX_DEPTH + 1):
        packet = bundle(IMMEDIATELY, packet)
    with pytest.raises(MalformedPacket, match="nested"):
        parse_datagram(packet.dgram)


def test_random_bytes_only_ever_raise_malformed():
    rng = random.Random(3)
    prefixes = [b"", b"/", b"/bend/x\x00,f\x00\x00", b"#bundle\x00"]
    for _ in range(3000):
        data = rng.choice(prefixes) + rng.randbytes(rng.randrange(0, 64))
        try:
            parse_datagram(data)
        except MalformedPacket:
            pass


# -- access and replies ------------------------------------------------------------------------


def test_access_list():
    default = AccessList()
    assert default.allows("127.0.0.1") and default.allows("127.4.5.6") and default.allows("::1")
    assert not default.allows("192.168.1.20") and not default.allows("not an address")
    allowed = AccessList(["192.168.1.0/24", "10.0.0.7"])
    assert allowed.allows("192.168.1.20") and allowed.allows("10.0.0.7")
    assert not allowed.allows("192.168.2.1") and not allowed.allows("10.0.0.8")
    assert allowed.allows("::ffff:192.168.1.20"), "IPv4-mapped IPv6 senders"
    with pytest.raises(tb.BendingError, match="CIDR notation such as 192.168.1.0/24"):
        checked_networks(["192.168.1.0/33"])


def test_encode_replies_for_pd_and_max():
    message = OscMessage(encode("/stats", ["blocks", 12, "p50_ms", 1.5, "ok", True, "big", 2**40]))
    assert message.address == "/stats"
    assert message.params[:6] == ["blocks", 12, "p50_ms", 1.5, "ok", 1]
    assert message.params[7] == pytest.approx(2.0**40), "beyond int32: a float, that Pd reads"


# -- the control worker ------------------------------------------------------------------------


class FakeClock:
    """Frame = (wall - origin) * rate."""

    def __init__(self, origin, rate=48000):
        self.origin, self.rate = origin, rate

    def frame_at(self, wall):
        return int(np.ceil((wall - self.origin) * self.rate))


class Recording(ReplySender):
    def __init__(self):
        super().__init__(0)
        self.log = []

    def send(self, host, address, args=()):
        self.log.append((address, list(args)))


@pytest.fixture
def engine():
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    engine.add_op("g", tb.Scale(value=1.0), "gain")
    engine.process(ONES)
    return engine


def run_worker(worker, messages, host="127.0.0.1"):
    worker.start()
    try:
        for message in messages:
            worker.submit(message, host)
        deadline = time.monotonic() + 5
        while worker.pending() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
    finally:
        worker.stop()


def test_worker_converts_future_timetags_to_sample_times(engine):
    clock = FakeClock(origin=time.time())
    controller = Controller(engine)
    worker = ControlWorker(controller, Recording(), clock)
    due = time.time() + 1.0
    worker.start()
    try:
        worker.submit(Incoming("/bend/g/value", (0.5,), due), "127.0.0.1")
        worker.submit(Incoming("/engine/gain", (0.25,), time.time() - 5), "127.0.0.1")  # the past
        assert wait_until(lambda: worker.handled == 2) and worker.scheduled == 1
        assert len(controller.schedule) == 1, "held, not prepared, until it is almost due"
        at = clock.frame_at(due)
        level = float(engine.process(ONES)[0, -1])
        assert level == 0.25, "the past timetag applied at the next block, the future one not yet"
        while engine.time < at:
            if engine.time + engine.samples(LEAD) >= at:  # the worker prepares it now
                assert wait_until(lambda: not controller.schedule and worker.handled == 3)
            engine.process(ONES)
    finally:
        worker.stop()
    assert engine.time - at < engine.block, "applied at the first block starting at or after it"
    assert float(engine.process(ONES)[0, -1]) == pytest.approx(0.125)


def wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)
    return condition()


def test_worker_replies_and_refuses(engine):
    replies = Recording()
    worker = ControlWorker(Controller(engine), replies)
    worker.receive(b"not OSC", "127.0.0.1")
    run_worker(
        worker,
        [
            Incoming("/ping", ()),
            Incoming("/bend/g/value", (float("nan"),)),
            Incoming("/engine/mix", ("loud",)),  # another address: not coalesced with it
            Incoming("/bend/nope/value", (1.0,)),
            Incoming("/engine/gain", ([1.0, 2.0],)),
        ],
    )
    addresses = [address for address, _ in replies.log]
    assert addresses == ["/error", "/pong", "/error", "/error", "/error", "/error"]
    assert replies.log[0][1][0] == "" and "malformed packet" in replies.log[0][1][1]
    errors = [args for address, args in replies.log[2:]]
    assert errors[0][0] == "/bend/g/value" and "finite" in errors[0][1]
    assert "no op 'nope'" in errors[2][1]
    assert "numbers and strings" in errors[3][1]
    assert worker.errors == 5 and worker.handled == 1 and worker.malformed == 1


def test_worker_paces_a_burst_across_blocks(engine):
    gate = ComputeGate()  # no clock: blocks are counted as the test computes them
    worker = ControlWorker(Controller(engine), Recording(), gate=gate, per_block=8)
    worker.start()
    try:
        for _ in range(40):
            worker.submit(Incoming("/ping", ()), "127.0.0.1")  # queries never coalesce
        time.sleep(0.05)
        assert worker.handled == 8, "no more than per_block messages into one block"
        for _ in range(4):
            with gate:
                pass
            time.sleep(0.02)
        assert worker.handled == 40
        worker.submit(Incoming("/ping", ()), "127.0.0.1")
        time.sleep(0.3)  # no block for 0.1 s: the audio stopped, do not wait for it
        assert worker.handled == 41
    finally:
        worker.stop()


def test_the_last_word_always_lands_and_structure_is_never_coalesced(engine):
    worker = ControlWorker(Controller(engine), Recording())
    worker.submit(Incoming("/bend/add", ("h", "Scale", "gain", "value", 1.0)), "127.0.0.1")
    for index in range(1000):
        worker.receive(build_msg("/bend/h/value", [index / 1000]).dgram, "127.0.0.1")
        worker.receive(build_msg("/engine/gain", [1 + index / 1000]).dgram, "127.0.0.1")
    worker.submit(Incoming("/bend/remove", ("h",)), "127.0.0.1")
    worker.receive(build_msg("/engine/gain", [0.5]).dgram, "127.0.0.1")  # after a structural one
    worker.receive(build_msg("/engine/gain", [0.25]).dgram, "127.0.0.1")
    assert worker.pending() == 5, "add, value, gain, remove, gain"
    assert worker.inbox.coalesced == 2 * 999 + 1 and worker.inbox.dropped == 0
    run_worker(worker, [])
    assert worker.errors == 0 and worker.handled == 5
    history = [engine.process(ONES)[0, -1] for _ in range(2)]
    assert "h" not in engine.ops and history[-1] == pytest.approx(0.25), "the final values"


def test_worker_counts_what_a_full_queue_drops(engine):
    worker = ControlWorker(Controller(engine), Recording(), capacity=10)
    for _ in range(25):
        worker.submit(Incoming("/ping", ()), "127.0.0.1")
    assert worker.inbox.dropped == 15 and worker.pending() == 10


def test_stats_carry_the_server_counters(engine):
    controller = Controller(engine, counters=lambda: {"xruns": 2, "received": 7})
    address, flat = controller.dispatch("/stats")[0]
    keys = flat[::2]
    assert address == "/stats"
    assert keys[:3] == ["blocks", "xruns", "received"] and "p99_ms" in keys
    assert dict(zip(keys, flat[1::2], strict=True))["xruns"] == 2


# -- the receiver socket -----------------------------------------------------------------------


def send(port, *datagrams):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for data in datagrams:
            sender.sendto(data, ("127.0.0.1", port))


def intake(allow=()):
    """The real intake process on a free port."""
    return OscReceiver("127.0.0.1", 0, coalescing_pattern(), allow)


def taken(receiver, count, timeout=3.0):
    letters, deadline = [], time.monotonic() + timeout
    while len(letters) < count and time.monotonic() < deadline:
        letter = receiver.take(0.1)
        if letter is not None:
            letters.append(letter)
    return letters


def test_the_intake_process_forwards_datagrams_and_stamps_arrival():
    receiver = intake()
    try:
        before = time.time()
        datagrams = [build_msg("/ping", []).dgram, b"garbage", build_msg("/a", [1]).dgram]
        send(receiver.port, *datagrams)
        letters = taken(receiver, 3)
        assert [letter.content for letter in letters] == datagrams, "unparsed: the worker parses"
        assert letters[0].host == "127.0.0.1"
        assert before - 0.1 < letters[0].arrival < time.time() + 0.1
        assert receiver.counters()["accepted"] == 3 and receiver.counters()["packets"] == 3
        assert receiver.rcvbuf >= 65536, "a large receive buffer"
        print(f"SO_RCVBUF asked {DEFAULT_RCVBUF} bytes, granted {receiver.rcvbuf}")
    finally:
        receiver.stop()


def test_the_intake_coalesces_a_fader_dump_and_keeps_the_last_value():
    receiver = intake()
    try:
        values = [build_msg("/bend/mask/prob", [i / 20000]).dgram for i in range(20000)]
        send(receiver.port, build_msg("/bend/add", ["m"]).dgram)
        for start in range(0, 20000, 100):  # about 40 000 a second: a fast client's pace
            send(receiver.port, *values[start : start + 100])
            time.sleep(0.0025)
        send(receiver.port, build_msg("/bend/mask/prob", [0.75]).dgram)
        letters = taken(receiver, 10**6, timeout=1.0)
        parsed = [OscMessage(letter.content) for letter in letters]
        assert parsed[0].address == "/bend/add", "structural messages are never coalesced"
        assert parsed[-1].address == "/bend/mask/prob" and parsed[-1].params == [0.75]
        counters = receiver.counters()
        assert counters["accepted"] == 20002, counters
        assert sum(counters[name] for name in LOSSES) == 0
        assert len(letters) + counters["coalesced"] == 20002
        print(f"20 002 datagrams in, {len(letters)} forwarded, {counters['coalesced']} coalesced")
    finally:
        receiver.stop()


def test_a_loss_is_counted_under_its_cause():
    """A datagram larger than a ring slot is lost as ``dropped_large``, not under another
    cause (what comes in its place says its size and address, for the /error its sender
    gets), and what follows it still arrives."""
    receiver = intake()
    try:
        blob = build_msg("/preset/load", [b"x" * receiver.ring.capacity]).dgram
        send(receiver.port, blob, build_msg("/ping", []).dgram)
        large, ping = taken(receiver, 2)
        assert read_too_large(large.content) == (len(blob), receiver.ring.capacity, "/preset/load")
        assert OscMessage(ping.content).address == "/ping"
        counters = receiver.counters()
        assert {name: counters[name] for name in LOSSES} == {
            "dropped_full": 0, "dropped_large": 1, "dropped_kernel": 0
        }  # fmt: skip
        assert counters["accepted"] == 2
    finally:
        receiver.stop()


def test_a_raw_burst_loses_nothing_and_its_last_values_land():
    """20 000 datagrams from a tight socket loop (several hundred thousand a second here, far
    faster than a reader in Python): what the reader has not taken waits in the kernel's
    buffer, so nothing may be dropped and each address ends with its last value."""
    receiver = intake()
    try:
        if receiver.rcvbuf < 2 * DEFAULT_RCVBUF:
            pytest.skip(
                f"receive buffer {receiver.rcvbuf} bytes: a burst needs net.core.rmem_max >= "
                f"{DEFAULT_RCVBUF} or CAP_NET_ADMIN"
            )
        addresses = ["/bend/mask/prob", "/bend/lfo/depth", "/engine/gain"]
        burst = [build_msg(addresses[i % 3], [i / 20000]).dgram for i in range(20000)]
        finals = [build_msg(address, [0.25]).dgram for address in addresses]
        send(receiver.port, *burst, *finals)
        letters = taken(receiver, 10**6, timeout=2.0)
        counters = receiver.counters()
        assert sum(counters[name] for name in LOSSES) == 0, counters
        assert counters["accepted"] == 20003
        assert len(letters) + counters["coalesced"] == 20003
        last = {}
        for letter in letters:
            message = OscMessage(letter.content)
            last[message.address] = message.params
        assert last == {address: [0.25] for address in addresses}
    finally:
        receiver.stop()


def test_the_intake_script_runs_without_torch_or_bendserver():
    script = (
        "import runpy, sys; runpy.run_path(sys.argv[1], run_name='intake');"
        "print(sorted(m for m in sys.modules if m.startswith(('torch', 'bendserver'))))"
    )
    intake_file = Path(tb.__file__).parent / "osc" / "intake.py"
    process = subprocess.run(
        [sys.executable, "-c", script, str(intake_file)], capture_output=True, text=True
    )
    assert process.stdout.strip() == "[]", process.stderr


def test_busy_port_says_what_to_do():
    receiver = intake()
    try:
        with pytest.raises(tb.BendingError, match="--osc-port"):
            OscReceiver("127.0.0.1", receiver.port, coalescing_pattern())
    finally:
        receiver.stop()


# -- the reference page ------------------------------------------------------------------------


def test_docs_osc_md_is_generated_from_the_address_table():
    spec = importlib.util.spec_from_file_location("osc_doc", ROOT / "scripts" / "osc_doc.py")
    osc_doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(osc_doc)
    committed = (ROOT / "docs" / "osc.md").read_text(encoding="utf-8")
    assert committed == osc_doc.render(), "docs/osc.md is stale: run python scripts/osc_doc.py"
    from bendserver.control import ADDRESSES

    for address in ADDRESSES:
        assert f"`{address.pattern}`" in committed


# -- the gate ----------------------------------------------------------------------------------


def test_gate_holds_control_threads_off_the_audio():
    clock = AudioClock(48000)
    gate = ComputeGate(clock, guard=0.001)
    admission = gate.admission(free_per_block=2)
    with gate:
        assert not admission.wait(0.01), "no message while a block is computed"
    assert admission.wait(0), "the first messages of a block pass when it is computed"
    clock.mark(0, time.time() - 0.0048, 256)  # the next callback is due in 0.5 ms
    started = time.monotonic()
    assert not gate.wait_open(0.003), "nor just before a callback"
    assert time.monotonic() - started >= 0.003
    clock.mark(256, time.time(), 4800)  # it started (late); the next is 100 ms away
    assert gate.wait_open(0.001)


def test_the_gate_opens_between_small_blocks():
    """At 64 frames (1.3 ms a block) the guard is a quarter of the period: with 1 ms, a block
    computed in 0.4 ms left no gap, and every message waited its admission's whole timeout."""
    clock = AudioClock(48000)
    gate = ComputeGate(clock, guard=0.001, period=64 / 48000)
    assert gate.guard == pytest.approx(64 / 48000 / 4)
    clock.mark(0, time.time() - 0.0006, 64)  # computed in 0.6 ms; the next is 0.73 ms away
    assert gate.wait_open(0), "a gap before the next small block"


def test_the_ring_never_looks_full_while_its_reader_advances():
    """The reader process stores its count while the writer reads it: a count seen half
    written (struct's pack_into zero-fills before it writes) made the writer find a ring full
    that held a few datagrams, and drop one now and then at 10 000 messages a second."""
    from bendserver.osc.intake import Ring

    ring = Ring(slots=64)
    reader = (
        "import sys, time; from bendserver.osc.intake import Ring; ring = Ring(sys.argv[1]);"
        "deadline = time.monotonic() + 20; seen = 0\n"
        "while seen < int(sys.argv[2]) and time.monotonic() < deadline:\n"
        "    seen += ring.pop() is not None\n"
        "print(seen)"
    )
    count = 200_000
    process = subprocess.Popen(
        [sys.executable, "-c", reader, ring.path, str(count)], stdout=subprocess.PIPE, text=True
    )
    refused = 0
    try:
        for _ in range(count):
            while ring.waiting() >= 8:  # never near full: a refusal is a misread count
                assert process.poll() is None, "the reader stopped (its deadline) before the end"
            if not ring.push(b"/engine/gain\x00\x00\x00\x00,f\x00\x00\x00\x00\x00\x00", "h", 0.0):
                refused += 1
                assert ring.push(b"/x\x00\x00,\x00\x00\x00", "h", 0.0)
    finally:
        seen = int(process.communicate(timeout=30)[0])
        ring.close()
    assert refused == 0 and seen == count
