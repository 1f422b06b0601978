"""Property-based fuzzing (hypothesis) of the newer surfaces: rack files, MIDI mapping files and
the messages their mappings make, render manifests, and the messages a client sends on the
OSCQuery WebSocket. Inputs are shaped like the real thing and then damaged, so that the search
reaches past the first check. Each is handled or refused with a BendingError (a file is never
changed by reading it), and the WebSocket's server goes on serving without a traceback. The
budget is small here (``FUZZ_EXAMPLES`` raises it); each test prints how many inputs it tried
per second."""

import copy
import json
import logging
import os
import string
import time

import mido
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jack import Replies, demo_options
from pythonosc.osc_message_builder import build_msg
from streaming import Identity
from test_fuzz import damaged
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import bendserver as tb
from bendserver.control import ADDRESSES, Controller
from bendserver.midi.mappings import KINDS, read_mappings
from bendserver.presets.library import PresetLibrary
from bendserver.rackspec import RackSpec
from bendserver.render.batch import plan_jobs
from bendserver.render.manifest import MANIFEST
from bendserver.render.worker import Job, Recipe
from bendserver.serve import Server

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False),
    st.sampled_from([0, 1, -1, 0.5, 16, 600_000, 600_001, 1e300, 1e39]),
)
words = st.one_of(
    st.sampled_from(["drive", "wavae", "in", "out", "a", "b", "a.encode", "x.ts:forward", ""]),
    st.text(string.ascii_letters + string.digits + "_-./:", max_size=12),
)
values = st.one_of(numbers, words, st.booleans(), st.lists(words, max_size=3))


# -- rack files --------------------------------------------------------------------------------


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, int) else f"{value!r}".replace("e+", "e")
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


@st.composite
def rack_files(draw):
    """A rack file's text: nodes and edges with keys a rack has (and others), then damaged."""
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        keys = draw(st.sets(st.sampled_from(["name", "model", "method", "preset", "gain"])))
        lines.append("[[node]]")
        lines += [f"{key} = {_toml(draw(values))}" for key in sorted(keys)]
    for _ in range(draw(st.integers(0, 3))):
        keys = draw(st.sets(st.sampled_from(["from", "to", "gain", "name", "model"])))
        lines.append("[[edge]]")
        lines += [f"{key} = {_toml(draw(values))}" for key in sorted(keys)]
    if draw(st.booleans()):
        lines.append(
            draw(st.sampled_from(["x = 1", "[node]", "node = 3", "[[x]]", "a = [[[[]]]]"]))
        )
    return damaged("\n".join(lines) + "\n", draw)


@FUZZ
@given(data=rack_files())
def test_the_rack_file_reader_works_or_says_why(tmp_path, counters, data):
    counters("rack files")()
    path = tmp_path / "rack.toml"
    path.write_bytes(data)
    try:
        RackSpec.read(path).check()
        event("read")
    except tb.BendingError:
        event("refused")
    assert path.read_bytes() == data


# -- MIDI mapping files, and what their mappings send ------------------------------------------

PARAMETERS = sorted({a.pattern.replace("<id>", "g").replace("<param>", "value") for a in ADDRESSES})


@st.composite
def mapping_files(draw):
    """A mappings file: mappings with the keys a mapping has, values at times out of range."""
    mappings = []
    for _ in range(draw(st.integers(0, 3))):
        mapping = {
            "address": draw(st.one_of(st.sampled_from(PARAMETERS), words)),
            "kind": draw(st.one_of(st.sampled_from(KINDS), words)),
            "channel": draw(st.one_of(st.integers(0, 17), numbers)),
        }
        optional = {
            "number": st.one_of(st.integers(-1, 128), numbers),
            "low": numbers,
            "high": numbers,
            "curve": st.sampled_from(["linear", "exp", "log", ""]),
            "invert": st.one_of(st.booleans(), numbers),
            "ramp_ms": numbers,
            "toggle": st.booleans(),
            "extra": values,
        }
        for key in draw(st.sets(st.sampled_from(sorted(optional)))):
            mapping[key] = draw(optional[key])
        mappings.append(mapping)
    return damaged(json.dumps({"mappings": mappings}), draw)


midi_messages = st.one_of(
    st.builds(
        lambda c, n, v: mido.Message("control_change", channel=c, control=n, value=v),
        st.integers(0, 15),
        st.integers(0, 127),
        st.integers(0, 127),
    ),
    st.builds(
        lambda c, n, v: mido.Message("note_on", channel=c, note=n, velocity=v),
        st.integers(0, 15),
        st.integers(0, 127),
        st.integers(0, 127),
    ),
    st.builds(lambda p: mido.Message("pitchwheel", pitch=p), st.integers(-8192, 8191)),
    st.builds(lambda p: mido.Message("program_change", program=p), st.integers(0, 127)),
)


@FUZZ
@given(data=mapping_files(), moves=st.lists(midi_messages, max_size=6))
def test_mapping_files_and_what_their_mappings_send_work_or_say_why(
    tmp_path, counters, data, moves
):
    """A file read, its mappings loaded by ``/midi/load``, then MIDI moves: every message the
    mappings make goes through the address table, handled or refused."""
    counters("MIDI mapping files")()
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    engine.add_op("g", tb.Scale(value=1.0), "gain")
    controller = Controller(engine, PresetLibrary(tmp_path / "presets"))
    controller.midi_folder = tmp_path
    path = tmp_path / "desk.json"
    path.write_bytes(data)
    try:
        read_mappings(path)
        controller.dispatch("/midi/load", ["desk"])
        event("loaded")
    except tb.BendingError:
        event("refused")
    for message in moves:
        for address, args in controller.midi.translate(message):
            try:
                controller.dispatch(address, args)
            except tb.BendingError:
                event("a move refused")
    for reply, args in controller.dispatch("/midi/list"):  # replies that can be sent
        build_msg(reply, args)
    assert path.read_bytes() == data


# -- render manifests ----------------------------------------------------------------------------


@st.composite
def manifests(draw):
    """A manifest like one a render wrote, with values replaced, keys added or removed."""
    manifest = {
        "format": "bendserver.render",
        "version": 2,
        "forms": [[[[1, 1, 2051], [8, 1, 4], True, 1, 1], None]],
        "forms_sha256": "0" * 64,
        "files": {"a.wav": {"recipe": {}, "output_sha256": "0" * 64}},
    }
    manifest = copy.deepcopy(manifest)
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(manifest)))
        change = draw(st.sampled_from(["replace", "remove", "form"]))
        if change == "replace":
            manifest[key] = draw(st.one_of(values, st.dictionaries(words, values, max_size=3)))
        elif change == "remove":
            del manifest[key]
        elif isinstance(manifest.get("forms"), list):
            name = draw(st.one_of(st.sampled_from(["columns", "rows", "folded", None]), words))
            shape = draw(st.lists(st.integers(-1, 4), max_size=3))
            manifest["forms"].append([[shape, [1, 1, draw(st.integers(0, 3))], True, 1, 1], name])
    return damaged(json.dumps(manifest), draw)


@FUZZ
@given(data=manifests())
def test_the_manifest_reader_works_or_says_why(tmp_path, counters, data):
    counters("render manifests")()
    folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "in.wav").write_bytes(b"RIFF")  # its digest is all a plan reads
    (folder / MANIFEST).write_bytes(data)
    job = Job(str(folder / "in.wav"), str(folder / "a.wav"))
    try:
        plan = plan_jobs(Recipe("drive"), [job], folder, force=False)
        assert plan.jobs == [job], "nothing made: rendered"
        event("planned")
    except tb.BendingError:
        event("refused")
    assert (folder / MANIFEST).read_bytes() == data


# -- the OSCQuery WebSocket ----------------------------------------------------------------------

commands = st.one_of(
    st.builds(
        lambda name, data: json.dumps({"COMMAND": name, "DATA": data}),
        st.one_of(st.sampled_from(["LISTEN", "IGNORE", "METERS", "PATH_ADDED", ""]), words),
        st.one_of(st.sampled_from(["/engine/gain", "/bend/mask/prob", "on", "off", "/"]), values),
    ),
    st.text(max_size=40),
    st.integers(1, 3000).map(lambda depth: "[" * depth + "]" * depth),
    st.sampled_from(['{"COMMAND": "LISTEN"}', '{"DATA": 1}', "[]", "null", '{"COMMAND": []}']),
)
frames = st.one_of(
    commands,
    st.binary(max_size=300),
    st.builds(
        lambda address, args: build_msg(address, args).dgram,
        st.one_of(st.sampled_from(PARAMETERS), st.text("/abc", min_size=1, max_size=8)),
        st.lists(
            st.one_of(st.floats(-2, 2, allow_subnormal=False), st.integers(-5, 5), words),
            max_size=3,
        ),
    ),
)


@pytest.fixture(scope="module")
def page_server():
    replies = Replies()
    with Server(demo_options(replies.port)) as running:
        yield running
    replies.close()


class Client:
    """One WebSocket client of the server, connected again if the server closed it."""

    def __init__(self, url):
        self.url, self.socket, self.closed = url, None, 0

    def send(self, frame):
        if self.socket is None:
            self.socket = connect(self.url)
        try:
            self.socket.send(frame)
        except ConnectionClosed:
            self.socket, self.closed = None, self.closed + 1


@pytest.fixture(scope="module")
def page_client(page_server):
    client = Client(page_server.oscquery.url.replace("http", "ws") + "/")
    yield client
    if client.socket is not None:
        client.socket.close()


@FUZZ
@given(sent=st.lists(frames, min_size=1, max_size=8))
def test_the_websocket_takes_any_message_and_serves_on(
    page_server, page_client, counters, caplog, sent
):
    caplog.set_level(logging.DEBUG)
    count = counters("WebSocket messages")
    for frame in sent:
        page_client.send(frame)
        count()
    assert page_server.oscquery.thread.is_alive()
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


def test_after_the_websocket_fuzz_the_page_still_answers(page_server):
    with connect(page_server.oscquery.url.replace("http", "ws") + "/") as client:
        client.send(json.dumps({"COMMAND": "LISTEN", "DATA": "/engine/gain"}))
        client.send(build_msg("/engine/gain", [0.5]).dgram)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            data = client.recv(timeout=5)
            if isinstance(data, bytes) and data.startswith(b"/engine/gain"):
                break
        else:
            raise AssertionError("no value pushed")
