"""Property-based tests of the OSC edge (hypothesis): random datagrams through the decoder, random
addresses and arguments through the address table. Every input is either handled or refused
with a BendingError (an ``/error`` reply), never another exception, and a refused message
changes nothing. A small budget here (``FUZZ_EXAMPLES`` raises it); each test prints how many
inputs it tried per second."""

import inspect
import math
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pythonosc.osc_message_builder import OscMessageBuilder
from streaming import Identity

import bendserver as tb
from bendserver.bending.ops import OPS
from bendserver.control import ADDRESSES, Controller
from bendserver.osc import ControlWorker, Incoming, MalformedPacket, ReplySender, parse_datagram

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
BLOCK = 256
ONES = np.ones((1, BLOCK), np.float32)


# -- the decoder -------------------------------------------------------------------------------

#: No subnormal floats: a server in the same process flushes them to zero
#: (``torch.set_flush_denormal``), which hypothesis refuses to generate under.
numbers = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.floats(width=32, allow_subnormal=False),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False),
)
#: Strings as OSC carries them (no NUL: it ends an OSC string).
texts = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
arguments = st.lists(st.one_of(numbers, texts, st.booleans()), max_size=6)
words = st.text(alphabet="abcdeg_/<>#*?[]{}0123456789", min_size=0, max_size=10)


def message_bytes(address, args):
    builder = OscMessageBuilder("/" + address)
    for value in args:
        kind = {bool: "T" if value else "F", int: "i", str: "s"}.get(type(value), "d")
        builder.add_arg(value, kind)
    return builder.build().dgram


def bundle_bytes(timetag, elements):
    """A bundle of already encoded elements (messages or bundles)."""
    data = b"#bundle\x00" + struct.pack(">Q", timetag)
    return data + b"".join(struct.pack(">i", len(e)) + e for e in elements)


@st.composite
def datagrams(draw):
    """Valid messages and bundles (nested, with any timetag), then cut, spliced or flipped."""
    data = message_bytes(draw(words), draw(arguments))
    for _ in range(draw(st.integers(0, 3))):
        more = [message_bytes(draw(words), draw(arguments)) for _ in range(draw(st.integers(0, 2)))]
        data = bundle_bytes(draw(st.integers(0, 2**64 - 1)), [data, *more])
    mutation = draw(st.sampled_from(["none", "cut", "flip", "append"]))
    if mutation == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif mutation == "flip" and data:
        index = draw(st.integers(0, len(data) - 1))
        data = data[:index] + bytes([draw(st.integers(0, 255))]) + data[index + 1 :]
    elif mutation == "append":
        data += draw(st.binary(max_size=16))
    return data


@FUZZ
@given(data=st.one_of(datagrams(), st.binary(max_size=64)))
def test_the_decoder_parses_or_refuses_any_datagram(counters, data):
    counters("decoder")()
    try:
        messages = parse_datagram(data)
    except MalformedPacket:
        return
    for message in messages:
        assert isinstance(message, Incoming) and message.address.startswith("/")
        assert all(isinstance(v, (int, float, str, bool)) for v in message.args)
        assert message.timetag is None or math.isfinite(message.timetag)


# -- the address table -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    engine = tb.StreamEngine(Identity(), block=BLOCK, fuse=False)
    engine.add_op("g", tb.Scale(value=1.0), "gain")
    engine.process(ONES)
    return engine


def addresses():
    """Addresses of the table with their placeholders filled, valid or not."""
    filling = st.sampled_from(["g", "value", "enable", "gain", "nope", "x1", "_x", "", "bend"])

    @st.composite
    def filled(draw):
        entry = draw(st.sampled_from(ADDRESSES))
        parts = [draw(filling) if p.startswith("<") else p for p in entry.parts]
        if draw(st.integers(0, 9)) == 0:
            parts.append(draw(filling))
        return "/" + "/".join(parts)

    return st.one_of(filled(), words.map(lambda w: "/" + w))


@st.composite
def bend_adds(draw):
    """``/bend/add`` with a real op and its own parameter and option names, any values."""
    name = draw(st.sampled_from(sorted(OPS)))
    op = OPS[name]
    names = [*op.params, *inspect.signature(op.__init__).parameters, "nope"]
    options = []
    for _ in range(draw(st.integers(0, 3))):
        options += [draw(st.sampled_from(names)), draw(st.one_of(numbers, texts))]
    op_id = draw(st.sampled_from(["a", "b", "g", "_x"]))
    return "/bend/add", [op_id, name, draw(st.sampled_from(["gain", ".*", "nope"])), *options]


messages = st.one_of(st.tuples(addresses(), arguments), bend_adds())


@FUZZ
@given(message=messages, timetag=st.sampled_from([None, 1e12]))
def test_the_address_table_handles_or_refuses_any_message(counters, engine, message, timetag):
    counters("address table")()
    address, args = message
    controller = Controller(engine)
    before = engine.state
    at = None if timetag is None else engine.time + 10**9
    try:
        replies = controller.dispatch(address, args, at=at, client="fuzz" if at else None)
    except tb.BendingError as error:
        assert str(error), "an error says what is wrong"
        assert engine.state is before, "a refused message changes nothing"
        return
    for reply, values in replies:
        assert reply.startswith("/")
        assert all(isinstance(v, (int, float, str, bool)) for v in values)
        assert all(math.isfinite(v) for v in values if isinstance(v, float))
    engine.process(ONES)  # whatever was accepted plays
    for op in engine.applied_state.ops:
        assert all(math.isfinite(value) for _, value in op.params)
    state = engine.applied_state
    assert math.isfinite(state.gain) and math.isfinite(state.mix)


class Replies(ReplySender):
    def __init__(self):
        super().__init__(0)
        self.log = []

    def send(self, host, address, args=()):
        self.log.append((address, list(args)))


@FUZZ
@given(data=st.one_of(datagrams(), st.binary(max_size=64)))
def test_the_worker_answers_every_datagram_and_never_fails_inside(counters, engine, data):
    counters("worker")()
    replies = Replies()
    worker = ControlWorker(Controller(engine), replies)
    worker.receive(data, "127.0.0.1")
    letter = worker.inbox.take()
    for message in worker._messages(letter):
        worker._handle(message, letter.host)
    internal = [
        args for address, args in replies.log if address == "/error" and "internal" in args[1]
    ]
    assert not internal, internal
