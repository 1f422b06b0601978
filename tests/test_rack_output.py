"""The rack's own output (/rack/gain, /rack/mute, /rack/bypass): moved across one block as a
node's gain is, against numpy; played offline from a recorded take exactly as it played live;
read back by /get, listed by OSCQuery, saved in a rack's preset, mapped to MIDI, refused where
it does not belong."""

import json

import mido
import numpy as np
import pytest
from streaming import Identity
from test_modulation import BLOCK, play_live, render_score, signal

import bendserver as tb
from bendserver.control import Controller
from bendserver.engine.node import Node
from bendserver.engine.rack import Rack
from bendserver.errors import BendingError
from bendserver.osc.namespace import Namespace
from bendserver.presets.library import PresetLibrary


def scaled(value: float, block: int = 64) -> Node:
    node = Node(Identity(), block=block)
    node.add_op("g", tb.Scale(value=value), "gain")
    return node


def rack(block: int = 64) -> Rack:
    """``x`` through two nodes: times 2, then as it is (no fuse: the values stay exact)."""
    return Rack({"a": scaled(2.0, block), "b": scaled(1.0, block)}, fuse=False)


def test_gain_mute_and_bypass_move_across_one_block():
    played = rack()
    ctl = Controller(played)
    x = np.full((1, 64), 0.25, np.float32)
    line = np.linspace(0, 1, 64, dtype=np.float32)
    np.testing.assert_array_equal(played.process(x), 2 * x)
    ctl.dispatch("/rack/gain", [0.5])
    np.testing.assert_allclose(played.process(x)[0], 0.5 * (1 + (0.5 - 1) * line), rtol=1e-6)
    np.testing.assert_array_equal(played.process(x), x)  # 2x, at half
    ctl.dispatch("/rack/mute", [1])
    np.testing.assert_allclose(played.process(x)[0], 0.25 * (1 - line), rtol=1e-6, atol=1e-9)
    assert not played.process(x).any()
    ctl.dispatch("/rack/gain", [1.0])
    assert not played.process(x).any(), "muted after the gain: silent"
    ctl.dispatch("/rack/mute", [0])
    ctl.dispatch("/rack/bypass", [1])  # faded in, from 2x towards the input (0.25)
    mixed = 0.5 + (0.25 - 0.5) * line
    np.testing.assert_allclose(played.process(x)[0], mixed * line, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(played.process(x), x)
    assert ctl.dispatch("/get/rack/bypass") == [("/get/rack/bypass", [1.0])]
    assert ctl.dispatch("/get/rack/gain") == [("/get/rack/gain", [1.0])]
    assert ctl.dispatch("/get/rack/mute") == [("/get/rack/mute", [0.0])]


def test_a_rack_whose_output_is_not_its_input_is_silent_bypassed():
    enc = Rack({"enc": Node("wavae", method="encode", block=2048)})
    ctl = Controller(enc)
    x = np.random.default_rng(0).standard_normal((1, 2048)).astype(np.float32) * 0.1
    assert enc.process(x).any()
    ctl.dispatch("/rack/bypass", [1])
    enc.process(x)
    assert not enc.process(x).any()


def test_a_take_with_the_racks_output_renders_offline_as_it_played_live(tmp_path):
    def two_drives() -> Rack:
        return Rack(
            {n: Node("drive", block=BLOCK, preset="drive") for n in ("one", "two")}, fuse=True
        )

    x = signal(60)
    messages = {
        4: [("/rack/gain", [0.5])],
        12: [("/two/engine/gain", [0.8]), ("/rack/mute", [1])],
        20: [("/rack/mute", [0])],
        30: [("/rack/bypass", [1])],
        40: [("/rack/bypass", [0]), ("/rack/gain", [3.0])],
    }
    path = tmp_path / "take.txt"
    live, _ = play_live(two_drives(), x, messages, path)
    plain, _ = play_live(two_drives(), x, {12: [("/two/engine/gain", [0.8])]})
    assert np.abs(live - plain)[:, 4 * BLOCK :].min(axis=0).max() > 1e-3, "the gain is heard"
    assert not live[:, 14 * BLOCK : 20 * BLOCK].any(), "muted"
    bypassed, dry = live[:, 32 * BLOCK : 40 * BLOCK], x[:, 32 * BLOCK : 40 * BLOCK] / 2
    assert np.abs(bypassed - dry).max() < 0.02, "the input at the gain (through the DC blocker)"
    assert np.abs(plain[:, 32 * BLOCK : 40 * BLOCK] / 2 - dry).max() > 0.1, "not the drives'"
    text = path.read_text()
    assert "/rack/gain 0.5" in text and "/rack/mute 1" in text and "/rack/bypass 0" in text
    np.testing.assert_array_equal(render_score(two_drives(), x, text), live)


def test_oscquery_lists_the_racks_output_with_its_values():
    played = rack()
    ctl = Controller(played)
    ctl.dispatch("/rack/gain", [0.25])
    played.process(np.zeros((1, 64), np.float32))
    space = Namespace(ctl)
    tree = space.tree()
    gain = tree["CONTENTS"]["rack"]["CONTENTS"]["gain"]
    assert gain["VALUE"] == [0.25] and gain["RANGE"] == [{"MIN": 0.0, "MAX": 16.0}]
    mute = tree["CONTENTS"]["rack"]["CONTENTS"]["mute"]
    assert mute["TYPE"] == "i" and mute["VALUE"] == [0]
    assert "rack" not in tree["CONTENTS"]["a"]["CONTENTS"], "a node has none"
    before = space.states()
    ctl.dispatch("/rack/mute", [1])
    assert space.states() != before, "a change of the rack's output changes the tree's states"
    one = Controller(Rack({"drive": Node("drive", block=256)}))
    assert "/rack/gain" in Namespace(one).methods(), "a one-model server has it too"


def test_where_the_racks_output_is_refused():
    ctl = Controller(rack())
    for address, args in (
        ("/a/rack/gain", [0.5]),  # a node's address
        ("/rack/gain", [17.0]),
        ("/rack/gain", [float("nan")]),
        ("/rack/mute", [0.5]),
        ("/rack/level", [1.0]),
    ):
        with pytest.raises(BendingError):
            ctl.dispatch(address, args)
    with pytest.raises(BendingError, match="without a node's name"):
        ctl.dispatch("/a/rack/gain", [0.5])
    with pytest.raises(BendingError, match="nothing to get"):
        ctl.dispatch("/get/a/rack/gain")
    assert ctl.rack.output.pending.gain == 1.0, "nothing refused changed it"


def test_a_racks_preset_saves_and_loads_its_output_gain(tmp_path):
    library = PresetLibrary(user=tmp_path)
    played = rack()
    ctl = Controller(played, presets=library)
    ctl.dispatch("/rack/gain", [0.5])
    ctl.dispatch("/rack/mute", [1])
    ctl.dispatch("/preset/save", ["whole"])
    saved = json.loads((tmp_path / "whole.json").read_text())
    assert saved["rack"] == {"gain": 0.5}, "the gain, not the mute (as a node's bypass)"
    ctl.dispatch("/rack/gain", [2.0])
    ctl.dispatch("/preset/load", ["whole"])
    played.process(np.zeros((1, 64), np.float32))
    assert played.output.applied.gain == 0.5 and played.output.applied.mute
    del saved["rack"]  # a rack's preset from before: the gain of 1
    (tmp_path / "older.json").write_text(json.dumps(saved))
    ctl.dispatch("/preset/load", ["older"])
    played.process(np.zeros((1, 64), np.float32))
    assert played.output.applied.gain == 1.0
    saved["rack"] = {"gain": 20.0, "mute": 1}
    (tmp_path / "bad.json").write_text(json.dumps(saved))
    with pytest.raises(BendingError, match="rack: unknown"):
        ctl.dispatch("/preset/load", ["bad"])
    saved["rack"] = {"gain": 20.0}
    (tmp_path / "bad.json").write_text(json.dumps(saved))
    with pytest.raises(BendingError, match="rack gain"):
        ctl.dispatch("/preset/load", ["bad"])
    assert played.nodes["a"].state.op("g").param("value") == 2.0


def test_midi_maps_the_racks_gain_and_mute():
    ctl = Controller(rack())
    ctl.dispatch("/midi/map", ["/rack/gain", "cc", 1, 7, 0.0, 2.0])
    ctl.dispatch("/midi/map", ["/rack/mute", "note", 1, 60])
    moved = ctl.midi.translate(mido.Message("control_change", control=7, value=127))
    assert moved == [("/rack/gain", [2.0])]
    pressed = ctl.midi.translate(mido.Message("note_on", note=60, velocity=100))
    assert pressed == [("/rack/mute", [1.0])]
    for address, args in (*moved, *pressed):
        ctl.dispatch(address, args)
    assert ctl.rack.output.pending == type(ctl.rack.output.pending)(gain=2.0, mute=True)


def lfo_to(address: str) -> list:
    return [("/mod/add", ["m", "lfo", "rate", 7.0]), ("/mod/m/route", [address, 0.2, 0.0, 4.0])]


def test_a_modulator_drives_the_rack_gain_as_it_drives_a_nodes_gain():
    """An LFO routed to /rack/gain plays what the same LFO routed to the last node's
    /engine/gain plays (one ramp across each block, the same code), under a /rack/gain
    message; the played gain moves, its own value stays the message's."""
    x = signal(40)
    by_rack, levels = play_live(
        rack(BLOCK), x, {0: lfo_to("/rack/gain"), 20: [("/rack/gain", [0.5])]}
    )
    by_node, _ = play_live(
        rack(BLOCK), x, {0: lfo_to("/b/engine/gain"), 20: [("/b/engine/gain", [0.5])]}
    )
    np.testing.assert_array_equal(by_rack, by_node)
    unmodulated, _ = play_live(rack(BLOCK), x, {20: [("/rack/gain", [0.5])]})
    assert np.abs(by_rack - unmodulated).max() > 0.05 and max(lv["m"] for lv in levels) > 0.9
    last = rack(BLOCK)
    ctl = Controller(last)
    for address, args in lfo_to("/rack/gain"):
        ctl.dispatch(address, args)
    for b in range(3):
        last.process(x[:, b * BLOCK : (b + 1) * BLOCK])
    level = last.modulation.levels["m"]
    assert last.output.gain == pytest.approx(1.0 + 0.2 * level * 4.0) and level > 0.1
    assert ctl.dispatch("/get/rack/gain") == [("/get/rack/gain", [1.0])]
    assert last.modulation.shown()["driven"]["/rack/gain"] == pytest.approx(last.output.gain)


def test_a_modulator_on_the_rack_gain_renders_offline_as_it_played_live(tmp_path):
    x = signal(120)
    messages = {3: lfo_to("/rack/gain"), 40: [("/rack/gain", [0.5])], 70: [("/mod/m/rate", [2.0])]}
    path = tmp_path / "take.txt"
    live, _ = play_live(drive_rack(), x, messages, path)
    text = path.read_text()
    assert "/mod/m/route /rack/gain" in text
    np.testing.assert_array_equal(render_score(drive_rack(), x, text), live)
    unmodulated, _ = play_live(drive_rack(), x, {40: messages[40]})
    assert np.abs(live - unmodulated).max() > 1e-2, "the modulation is heard"


def test_a_route_to_the_rack_gain_is_saved_in_a_preset_and_loads_with_it(tmp_path):
    library = PresetLibrary(user=tmp_path)
    ctl = Controller(drive_rack(), library)
    for address, args in lfo_to("/rack/gain"):
        ctl.dispatch(address, args)
    ctl.dispatch("/preset/save", ["swell"])
    saved = json.loads((tmp_path / "swell.json").read_text())
    (route,) = saved["modulators"][0]["routes"]
    assert route == {"address": "/rack/gain", "depth": 0.2, "low": 0.0, "high": 4.0}
    x = signal(30)
    again = Controller(drive_rack(), library)
    again.dispatch("/preset/load", ["swell"])
    np.testing.assert_array_equal(again.engine(x, 48000), ctl.engine(x, 48000))


def drive_rack() -> Rack:
    """Two drives in a chain, with their preset (their LFOs played as ops: not converted)."""
    return Rack({name: Node("drive", block=BLOCK, preset="drive") for name in ("a", "b")})
