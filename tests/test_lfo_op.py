"""The LFO op of a preset played live: an Oscillate becomes an LFO modulator driving a Modulate
op, plays sample for sample as the op did, renders offline as it played live, keeps answering
/bend/<op>/freq, and saves in the new form."""

import json
import logging

import numpy as np
import pytest
import torch
from test_modulation import play_live, render_score, signal

import bendserver as tb
from bendserver.control import Controller
from bendserver.engine import StreamEngine
from bendserver.errors import BendingError
from bendserver.modulation.oscillators import convert
from bendserver.osc.namespace import Namespace
from bendserver.play import PlayOptions
from bendserver.presets.library import PresetLibrary

RATE = 48000


def old(block: int) -> StreamEngine:
    """drive with its preset, the LFO played by the Oscillate op (Python's StreamEngine)."""
    engine = StreamEngine("drive", block=block, preset="drive")
    assert engine.op("lfo").name == "Oscillate"
    return engine


def live(block: int) -> StreamEngine:
    """drive with its preset as serve and render build it."""
    engine, _ = PlayOptions(model="drive", preset="drive", block=block).build()
    return engine


def played(engine: StreamEngine, x: np.ndarray) -> np.ndarray:
    block = engine.block
    return np.concatenate(
        [engine.process(x[:, i : i + block]) for i in range(0, x.shape[1], block)], axis=1
    )


def test_an_old_preset_plays_as_an_lfo_modulator_and_a_modulate_op():
    engine = live(256)
    ctl = Controller(engine)
    assert engine.op("lfo").name == "Modulate"
    assert engine.state.op("lfo").param("depth") == pytest.approx(0.8)
    assert ctl.dispatch("/list", ["modulators"]) == [("/list/modulators", ["lfo"])]
    listed = ctl.dispatch("/mod/list")
    assert ("/mod/route", ["lfo", "/bend/lfo/w", 0.5, -1.0, 1.0]) in listed
    rate = engine.modulation.get("lfo", "rate")
    assert rate == pytest.approx(6.25e-5 * RATE)  # cycles a sample x samples a second
    engine.process(np.zeros((1, 256), np.float32))  # the tree shows what plays
    tree = Namespace(ctl).tree()["CONTENTS"]
    assert {"rate", "phase"} <= set(tree["mod"]["CONTENTS"]["lfo"]["CONTENTS"])
    assert {"depth", "w"} <= set(tree["bend"]["CONTENTS"]["lfo"]["CONTENTS"])


@pytest.mark.parametrize("block", [256, 2048])
def test_the_converted_lfo_plays_sample_for_sample_as_the_op_did(block):
    x = signal(16)[:, : 8 * 2048]  # 0.34 s
    np.testing.assert_array_equal(played(live(block), x), played(old(block), x))


def test_the_converted_lfo_renders_offline_as_it_played_live(tmp_path):
    x = signal(120)
    messages = {
        10: [("/bend/lfo/freq", [0.0002, 30.0])],  # deprecated: the modulator's rate
        30: [("/bend/lfo/depth", [1.5, 20.0])],  # the op's own depth, ramped
        60: [("/mod/lfo/rate", [7.0])],
    }
    path = tmp_path / "take.txt"
    played_live, levels = play_live(live(256), x, messages, path)
    assert max(level["lfo"] for level in levels) > 0.99
    np.testing.assert_array_equal(render_score(live(256), x, path.read_text()), played_live)
    unchanged, _ = play_live(live(256), x, {})
    assert np.abs(played_live - unchanged).max() > 1e-2, "the messages are heard"


def test_the_old_freq_address_reaches_the_modulator_and_get_answers_it(caplog):
    engine = live(256)
    ctl = Controller(engine)
    with caplog.at_level(logging.WARNING, logger="bendserver.modulation"):
        ctl.dispatch("/bend/lfo/freq", [1e-4])
        ctl.dispatch("/bend/lfo/freq", [2e-4])
    deprecated = [r.message for r in caplog.records if "deprecated" in r.message]
    assert len(deprecated) == 1 and "/mod/lfo/rate" in deprecated[0]
    assert engine.modulation.get("lfo", "rate") == pytest.approx(2e-4 * RATE)
    assert ctl.dispatch("/get/bend/lfo/freq") == [("/get/bend/lfo/freq", [pytest.approx(2e-4)])]
    ctl.dispatch("/bend/lfo/depth", [0.3])
    engine.process(np.zeros((1, 256), np.float32))
    assert ctl.dispatch("/get/bend/lfo/depth") == [("/get/bend/lfo/depth", [0.3])]
    with pytest.raises(BendingError, match="past the LFO's 100 Hz.*/mod/lfo/rate"):
        ctl.dispatch("/bend/lfo/freq", [0.01])  # 480 Hz
    assert engine.modulation.get("lfo", "rate") == pytest.approx(2e-4 * RATE)


def test_a_preset_saved_after_an_old_one_is_in_the_new_form_and_loads(tmp_path):
    library = PresetLibrary(user=tmp_path)
    ctl = Controller(old(256), library)
    ctl.dispatch("/preset/load", ["drive"])  # the old form, loaded live
    ctl.dispatch("/preset/save", ["mine"])
    saved = json.loads((tmp_path / "mine.json").read_text())
    assert saved["ops"]["lfo"] == {
        "op": "Modulate",
        "params": {"depth": 0.8, "w": 0.0},
        "options": {"dim": -1},
    }
    (lfo,) = saved["modulators"]
    assert lfo["kind"] == "lfo" and lfo["routes"][0]["address"] == "/bend/lfo/w"
    x = signal(16)
    again = Controller(StreamEngine("drive", block=256), library)
    again.dispatch("/preset/load", ["mine"])
    assert [m.mod_id for m in again.engine.modulation.state] == ["lfo"]
    np.testing.assert_array_equal(played(again.engine, x), played(old(256), x))
    ctl.dispatch("/preset/load", ["drive"])  # the old form again: its LFO made again, not twice
    assert [m.mod_id for m in ctl.engine.modulation.state] == ["lfo"]


def test_bend_add_of_an_oscillate_gets_a_modulator_unless_it_cannot_have_one():
    ctl = Controller(StreamEngine("drive", block=256))
    ctl.dispatch("/bend/add", ["wob", "Oscillate", "drive_out", "depth", 0.5, "freq", 1e-4])
    assert ctl.engine.op("wob").name == "Modulate"
    assert ctl.engine.modulation.get("wob", "rate") == pytest.approx(1e-4 * RATE)
    ctl.dispatch("/bend/add", ["fast", "Oscillate", "drive_out", "freq", 0.01])  # 480 Hz
    ctl.dispatch("/bend/add", ["calls", "Oscillate", "drive_out", "over", "calls"])
    ctl.dispatch("/bend/add", ["weights", "Oscillate", "pre\\.conv\\.weight"])
    assert [ctl.engine.op(i).name for i in ("fast", "calls", "weights")] == ["Oscillate"] * 3
    ctl.dispatch("/bend/fast/freq", [0.02])  # an op still: its own parameter
    assert ctl.engine.state.op("fast").param("freq") == pytest.approx(0.02)


def test_the_modulate_op_adds_the_per_step_modulation_to_its_own_w():
    engine = StreamEngine("drive", block=256)
    engine.add_op("m", tb.Modulate(depth=2.0, w=0.25), "drive_out")
    ctl = Controller(engine)
    ctl.dispatch("/mod/add", ["s", "steps", "bpm", 60.0, "division", 1])
    ctl.dispatch("/mod/s/steps", [0.5])
    ctl.dispatch("/mod/s/route", ["/bend/m/w", 0.5, -1.0, 1.0])  # + 0.5 x 0.5 x 2
    x = signal(2)[:, :256]
    engine.process(x)
    (wave,) = engine.op("m").waves()
    assert torch.equal(wave, torch.full((1, 1, 256), 0.5))  # the offset, per step
    op = engine.op("m")
    activation = torch.randn(1, 8, 256)
    expected = activation * (1 + 2.0 * (0.25 + 0.5))
    torch.testing.assert_close(op.apply(activation, {"wave": wave, "scaled": wave * 0}), expected)


def test_in_a_rack_of_several_each_nodes_lfo_is_a_modulator_of_its_own():
    from bendserver.rackspec import NodeSpec, RackSpec

    rack = RackSpec((NodeSpec("a", "drive"), NodeSpec("b", "drive"))).build(block=256)
    assert convert(rack) == ["a_lfo", "b_lfo"]
    ctl = Controller(rack)
    routes = [r for m in rack.modulation.state for r in m.routes]
    assert [r.address for r in routes] == ["/a/bend/lfo/w", "/b/bend/lfo/w"]
    ctl.dispatch("/b/bend/lfo/freq", [1e-4])
    assert rack.modulation.get("b_lfo", "rate") == pytest.approx(1e-4 * RATE)
    assert rack.modulation.get("a_lfo", "rate") == pytest.approx(6.25e-5 * RATE)
    assert ctl.dispatch("/get/b/bend/lfo/freq") == [("/b/get/bend/lfo/freq", [pytest.approx(1e-4)])]


def test_a_preset_in_the_new_form_exports_its_lfo_as_the_op(tmp_path):
    """A file has no modulators: the Modulate its LFO drives is exported as the Oscillate."""
    from bendserver.export.model import export_model

    library = PresetLibrary(user=tmp_path)
    ctl = Controller(old(256), library)
    ctl.dispatch("/preset/load", ["drive"])
    ctl.dispatch("/preset/save", ["mine"])
    attributes = export_model("drive", tmp_path / "new.ts", preset=library.load("mine"), block=256)
    assert attributes == ["mask_prob", "lfo_depth", "lfo_freq", "noise_std"]
    export_model("drive", tmp_path / "old.ts", preset="drive", block=256)
    new, before = (torch.jit.load(str(tmp_path / f"{name}.ts")) for name in ("new", "old"))
    x = torch.from_numpy(signal(8))[None]
    with torch.no_grad():
        for start in range(0, x.shape[-1], 256):
            block = x[..., start : start + 256]
            torch.testing.assert_close(new(block), before(block), rtol=0, atol=0)


def test_a_model_loaded_live_plays_its_presets_lfo_as_a_modulator_from_its_first_block(
    monkeypatch,
):
    """/model/load drive drive into a rack playing drive (its LFO 'lfo' a quarter turn on):
    the new node's Oscillate is a Modulate op driven by a new 'lfo' as soon as the load is
    answered, the old one gone; from the swap's first block the rack plays what the op plays
    from its first (the first 900 samples aside: the new node's convolutions warmed up on the
    silence before, a fresh one's on none)."""
    from bendserver import switching

    monkeypatch.setattr(switching, "FADE_GRACE", 0.0)  # the test plays the blocks itself
    rack, _ = PlayOptions(model="drive", preset="drive", block=256, fuse=False).build()
    for _ in range(16):  # the old LFO at 3 Hz a quarter turn on after 16 blocks of 256
        rack.process(np.zeros((1, 256), np.float32))
    assert rack.modulation.levels["lfo"] > 0.9
    ctl = Controller(rack, switcher=switching.ModelSwitcher(rack, trust=True, fade_ms=0.0))
    assert ctl.dispatch("/model/load", ["drive", "drive"])[0][0] == "/model/loaded"
    assert ctl.dispatch("/list", ["modulators"]) == [("/list/modulators", ["lfo"])]
    assert ("/mod/route", ["lfo", "/bend/lfo/w", 0.5, -1.0, 1.0]) in ctl.dispatch("/mod/list")
    assert rack.busy and rack.modulation.get("lfo", "rate") == pytest.approx(6.25e-5 * RATE)
    x = signal(16)[:, : 32 * 256]
    out = played(rack, x)
    assert rack.swaps == 1 and rack.node.op("lfo").name == "Modulate"
    assert [m.mod_id for m in rack.modulation.state] == ["lfo"]
    op = StreamEngine("drive", block=256, preset="drive", fuse=False)
    np.testing.assert_array_equal(out[:, 1024:], played(op, x)[:, 1024:])
