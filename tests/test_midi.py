"""MIDI control: mappings (range, curve, inversion, ramp, 14-bit CC, notes, pitch bend), learn,
the /midi/* addresses, mappings saved with presets and in files, and the live input on real
JACK MIDI ports (an rtmidi output port of the test, jackd2's ``jack_midiseq``)."""

import json
import subprocess
import time

import mido
import pytest
from jack import Replies, free_port, jack_server, live_model, need, send_python

from bendserver.control import Controller
from bendserver.engine import StreamEngine
from bendserver.errors import BendingError
from bendserver.midi.mappings import Mapping, MidiMap, read_mappings, write_mappings
from bendserver.osc import Incoming, OscService
from bendserver.osc.worker import LOCAL
from bendserver.presets.library import PresetLibrary, read_preset
from bendserver.serve import ServeOptions, Server

RATE, BLOCK = 48000, 256


def cc(control: int, value: int, channel: int = 0) -> mido.Message:
    return mido.Message("control_change", channel=channel, control=control, value=value)


# -- mappings ---------------------------------------------------------------------------------


def test_a_mapping_follows_its_range_curve_and_inversion():
    table = MidiMap()
    table.add(Mapping("/bend/mask/prob", "cc", 1, 7, 0.2, 0.6))
    table.add(Mapping("/engine/gain", "cc", 1, 7, 0.01, 1.0, "exp", invert=True, ramp_ms=0))
    table.add(Mapping("/bend/lfo/depth", "cc", 2, 7, ramp_ms=50.0))
    assert table.translate(cc(7, 127)) == [("/bend/mask/prob", [0.6]), ("/engine/gain", [0.01])]
    low = table.translate(cc(7, 0))
    assert low[0] == ("/bend/mask/prob", [0.2]) and low[1][1][0] == pytest.approx(1.0)
    middle = table.translate(cc(7, 127 // 2 + 1))[1][1][0]
    assert middle == pytest.approx(0.01 ** (64 / 127))  # exponential: the geometric middle
    assert table.translate(cc(7, 127, channel=1)) == [("/bend/lfo/depth", [1.0, 50.0])]
    assert table.translate(cc(8, 127)) == []


def test_notes_pitch_bend_14_bit_cc_and_program_change():
    table = MidiMap()
    table.add(Mapping("/a", "note", 1, 60))
    table.add(Mapping("/b", "pitchbend", 1))
    table.add(Mapping("/c", "cc14", 1, 1, 0.0, 16383.0))
    table.add(Mapping("/d", "note", 1, 61, toggle=True))
    assert table.translate(mido.Message("note_on", note=60, velocity=127)) == [("/a", [1.0])]
    assert table.translate(mido.Message("note_on", note=60, velocity=0)) == []  # a note off
    assert table.translate(mido.Message("note_off", note=60)) == []
    assert table.translate(mido.Message("note_on", note=61, velocity=64)) == [("/d", [1.0])]
    assert table.translate(mido.Message("note_on", note=61, velocity=63)) == [("/d", [0.0])]
    assert table.translate(mido.Message("pitchwheel", pitch=8191)) == [("/b", [1.0])]
    assert table.translate(mido.Message("pitchwheel", pitch=-8192)) == [("/b", [0.0])]
    assert table.translate(cc(1, 100)) == [("/c", [100 * 128])]  # the MSB resets the LSB
    assert table.translate(cc(33, 5)) == [("/c", [100 * 128 + 5])]
    program = mido.Message("program_change", program=3)
    assert table.translate(program) == [("/midi/program", [3])]


def test_learn_takes_the_next_control_and_an_lsb_makes_it_14_bit():
    table = MidiMap()
    table.learn(Mapping("/bend/mask/prob", "cc", 1, low=0.1, high=0.9))
    assert table.learning == "/bend/mask/prob"
    assert table.translate(cc(5, 127, channel=2), now=10.0) == [("/bend/mask/prob", [0.9])]
    assert table.learning is None
    assert table.mappings() == [Mapping("/bend/mask/prob", "cc", 3, 5, 0.1, 0.9)]
    table.translate(cc(37, 1, channel=2), now=10.1)  # its LSB right after: a 14-bit CC
    assert [m.kind for m in table.mappings()] == ["cc14"]
    table.learn(Mapping("/engine/mix", "cc", 1))
    table.translate(cc(9, 0), now=20.0)
    table.translate(cc(41, 0), now=21.0)  # too late to be its LSB
    assert [m.source for m in table.mappings()] == [("cc14", 3, 5), ("cc", 1, 9)]


def test_a_mapping_refuses_what_cannot_play():
    for bad, message in [
        (dict(kind="aftertouch"), "kind is one of"),
        (dict(channel=17), "channel is 1..16"),
        (dict(kind="cc14", number=40), "0..31"),
        (dict(curve="exp", low=0.0), "exponential curve needs"),
        (dict(curve="log"), "curve is one of"),
    ]:
        with pytest.raises(BendingError, match=message):
            Mapping(**{"address": "/x", "kind": "cc", "channel": 1, **bad})


def test_a_mappings_file_round_trips_and_bad_ones_are_refused(tmp_path):
    mappings = [Mapping("/bend/mask/prob", "cc14", 2, 3, 0.1, 0.5, "exp", True, 20.0)]
    path = tmp_path / "mine.json"
    write_mappings(path, mappings)
    assert read_mappings(path) == mappings
    path.write_text(json.dumps({"mappings": [{"address": "/x", "kind": "cc", "chanel": 1}]}))
    with pytest.raises(BendingError, match=r"mappings\[0\]: unknown key\(s\) \['chanel'\]"):
        read_mappings(path)
    path.write_text(json.dumps({"mappings": [{"address": "/x", "kind": "cc", "channel": 1.5}]}))
    with pytest.raises(BendingError, match="channel is a whole number"):
        read_mappings(path)


# -- the addresses ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    return StreamEngine("drive", block=BLOCK, preset="drive")


@pytest.fixture
def controller(engine, tmp_path):
    ctl = Controller(engine, PresetLibrary(tmp_path / "presets"))
    ctl.midi_folder = tmp_path / "midi"
    return ctl


def test_map_list_unmap_and_what_is_refused(controller):
    ctl = controller
    ctl.dispatch("/midi/map", ["/bend/mask/prob", "cc", 1, 7, 0.2, 0.8, "linear", 1, 30])
    ctl.dispatch("/midi/map", ["/bend/mask/enable", "note", 10, 36])
    ctl.dispatch("/midi/map", ["/engine/gain", "pitchbend", 1, 0])
    replies = ctl.dispatch("/midi/list")
    assert replies == [
        ("/midi/mapping", ["/bend/mask/prob", "cc", 1, 7, 0.2, 0.8, "linear", 1, 30.0]),
        ("/midi/mapping", ["/bend/mask/enable", "note", 10, 36, 0.0, 1.0, "linear", 0, 0.0]),
        ("/midi/mapping", ["/engine/gain", "pitchbend", 1, 0, 0.0, 16.0, "linear", 0, 0.0]),
        ("/midi/list", [3, "", ""]),
    ]
    assert ctl.midi.mappings()[1].toggle
    for args, message in [
        (["/preset/load", "cc", 1, 7], "MIDI maps to parameters"),
        (["/bend/nope/prob", "cc", 1, 7], "no op 'nope'|nope"),
        (["/bend/mask/prob", "cc", 1, 7, 0.0, 2.0], r"takes 0..1, not 2"),
        (["/bend/mask/prob", "cc", 1, 7, 0.5], "low and high, both"),
        (["/engine/gain", "cc", 1, 7, 0, 1, "linear", 0, 20], "does not ramp"),
        (["/engine/gain", "cc", 1.5, 7], "whole numbers"),
        (["/engine/gain", "cc", 1, 200], r"number must be in \[0, 127\]"),
    ]:
        with pytest.raises(BendingError, match=message):
            ctl.dispatch("/midi/map", args)
    assert len(ctl.midi.mappings()) == 3, "a refused mapping changes nothing"
    with pytest.raises(BendingError, match="start the server with --midi"):
        ctl.dispatch("/midi/learn", ["/bend/mask/prob"])
    assert ctl.dispatch("/midi/unmap", ["/engine/gain"]) == [("/midi/unmapped", [1])]
    assert ctl.dispatch("/midi/unmap") == [("/midi/unmapped", [2])]
    assert ctl.midi.mappings() == []


def test_mappings_are_saved_in_files_and_with_presets(controller, engine):
    ctl = controller
    ctl.dispatch("/midi/map", ["/bend/mask/prob", "cc", 1, 7])
    assert ctl.dispatch("/midi/save", ["desk"]) == [("/midi/saved", ["desk"])]
    with pytest.raises(BendingError, match="/midi/save desk 1 replaces them"):
        ctl.dispatch("/midi/save", ["desk"])
    ctl.dispatch("/preset/save", ["withmidi"])
    saved = read_preset(ctl.presets.user / "withmidi.json")
    assert saved.midi == ctl.midi.mappings()
    ctl.dispatch("/midi/unmap")
    ctl.dispatch("/midi/load", ["desk"])
    assert [m.address for m in ctl.midi.mappings()] == ["/bend/mask/prob"]
    ctl.dispatch("/midi/unmap")
    ctl.dispatch("/preset/load", ["withmidi"])
    assert [m.source for m in ctl.midi.mappings()] == [("cc", 1, 7)]
    with pytest.raises(BendingError, match="no MIDI mappings 'other'"):
        ctl.dispatch("/midi/load", ["other"])
    write_mappings(ctl.midi_folder / "typo.json", [Mapping("/bend/mask/prbo/x", "cc", 1, 7)])
    with pytest.raises(BendingError, match="'/bend/mask/prbo/x' is no parameter address"):
        ctl.dispatch("/midi/load", ["typo"])
    with pytest.raises(BendingError, match="preset names are"):
        ctl.dispatch("/midi/save", ["../escape"])


def test_a_program_change_loads_a_preset_by_its_place_in_the_list(controller, engine):
    ctl = controller
    engine.set_gain(1.0)
    ctl.dispatch("/engine/gain", [0.25])
    ctl.dispatch("/preset/save", ["a-quiet"])
    ctl.dispatch("/engine/gain", [1.0])
    names = ctl.presets.names()
    ctl.dispatch("/midi/program", [names.index("a-quiet")])
    assert engine.state.gain == 0.25
    with pytest.raises(BendingError, match=f"there are {len(names)} presets"):
        ctl.dispatch("/midi/program", [len(names)])


def test_an_in_process_sender_wakes_the_worker_and_gets_no_replies(engine, caplog):
    """MIDI's way in: the worker waits on the OSC intake; an in-process message wakes it at
    once, its error is counted and logged once per address, and nothing is sent back."""
    listener = Replies()
    service = OscService(Controller(engine), port=0, reply_port=listener.port)
    service.start()
    try:
        waits = []
        for index in range(10):
            value = 0.5 + index / 100
            started = time.monotonic()
            service.worker.submit(Incoming("/engine/gain", (value,)), LOCAL)
            assert until(lambda v=value: engine.state.gain == v, 2.0)
            waits.append(time.monotonic() - started)
            time.sleep(0.02)  # the worker back to waiting on the intake
        assert sorted(waits)[5] < 0.1, waits  # not the intake's 0.2 s timeout
        for count in range(1, 4):  # one at a time: waiting together, they would coalesce
            service.worker.submit(Incoming("/bend/nope/prob", (0.5,)), LOCAL)
            assert until(lambda c=count: service.worker.errors == c)
        assert listener.receive(timeout=0.3) == []
        logged = [r.message for r in caplog.records if "/bend/nope/prob" in r.message]
        assert len(logged) == 1 and "no op" in logged[0], logged
    finally:
        service.stop()
        listener.close()


# -- live, on real JACK MIDI ports ------------------------------------------------------------


@pytest.fixture(scope="module")
def jack():
    need("jack_connect")
    with jack_server(RATE, BLOCK) as name:
        yield name


def served(replies, **options) -> Server:
    model, preset = live_model()
    return Server(
        ServeOptions(
            model=model,
            preset=options.pop("preset", preset),
            audio="jack",
            block=BLOCK,
            osc_port=free_port(),
            reply_port=replies.port,
            oscquery_port=0,
            **options,
        )
    )


def jack_connect(jack: str, source: str, destination: str) -> None:
    subprocess.run(["jack_connect", "-s", jack, source, destination], check=True, timeout=10)


def until(condition, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def prob(server: Server) -> float:
    return dict(server.engine.applied_state.op("mask").params)["prob"]


def test_learn_move_and_the_mapping_survives_a_restart_through_a_preset(jack, replies):
    if live_model()[1] == "none":
        pytest.skip("the shipped drive model (and its preset) are not in this checkout")
    backend = mido.Backend("mido.backends.rtmidi/UNIX_JACK")
    with backend.open_output("out", virtual=True, client_name="tester") as out:
        with served(replies, midi="") as server:
            assert server.midi.name.startswith("bendserver:midi_in (virtual, JACK)")
            jack_connect(jack, "tester:out", "bendserver:midi_in")
            port = server.osc.port
            send_python(port, "/midi/learn", "/bend/mask/prob")
            assert replies.wait_for("/midi/learning") == ["/bend/mask/prob"]
            out.send(cc(21, 127, channel=4))
            assert until(lambda: prob(server) == 1.0), prob(server)
            out.send(cc(21, 0, channel=4))
            assert until(lambda: prob(server) == 0.0), prob(server)
            send_python(port, "/midi/list")
            assert replies.wait_for("/midi/mapping")[:4] == ["/bend/mask/prob", "cc", 5, 21]
            send_python(port, "/preset/save", "kept-midi", 1)
            assert replies.wait_for("/preset/saved") == ["kept-midi"]
            assert server.stats()["midi"] == 2
        with served(replies, midi="", preset="kept-midi") as server:
            assert "midi       bendserver:midi_in" in server.banner()
            assert "1 mappings" in server.banner()
            jack_connect(jack, "tester:out", "bendserver:midi_in")
            out.send(cc(21, 127, channel=4))
            assert until(lambda: prob(server) == 1.0), prob(server)


def test_a_fast_knob_is_coalesced_and_its_last_value_plays(jack, replies):
    backend = mido.Backend("mido.backends.rtmidi/UNIX_JACK")
    with backend.open_output("out", virtual=True, client_name="knob") as out:
        with served(replies, midi="", preset="none") as server:
            jack_connect(jack, "knob:out", "bendserver:midi_in")
            server.controller.dispatch("/midi/map", ["/engine/gain", "cc14", 1, 2, 0.0, 2.0])
            for value in range(500):  # one value a block would be 2.7 s of them
                out.send(cc(2, value % 128))
                out.send(cc(34, value % 64))
            final = (499 % 128 * 128 + 499 % 64) / 16383 * 2.0
            assert until(lambda: server.engine.applied_state.gain == pytest.approx(final))
            assert until(lambda: server.stats()["midi"] == 1000)
            assert server.osc.worker.inbox.coalesced > 500, "most never reached the engine"
            assert server.stats()["midi_ignored"] == 0


def test_an_existing_port_by_name_plays_jack_midiseq_notes(jack, replies):
    sequencer = subprocess.Popen(
        [need("jack_midiseq"), "bendseq", "12000", "0", "60", "6000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listed = lambda: (
            "bendseq:out"
            in subprocess.run(["jack_lsp", "-s", jack], capture_output=True, text=True).stdout
        )
        assert until(listed, 5.0)
        with served(replies, midi="bendseq", preset="none") as server:
            assert server.midi.name.startswith("bendseq:out (JACK)")
            send_python(server.osc.port, "/midi/map", "/engine/gain", "note", 1, 60, 0.0, 1.27)
            # jack_midiseq plays note 60 at velocity 64 every quarter second
            assert until(lambda: server.engine.applied_state.gain == pytest.approx(0.64))
            assert server.stats()["midi"] >= 1
    finally:
        sequencer.terminate()
        sequencer.wait(timeout=5)


def test_no_port_of_that_name_is_a_clear_error(jack, replies):
    with pytest.raises(BendingError, match="no MIDI input named like 'nothing-here'"):
        served(replies, midi="nothing-here", preset="none")
