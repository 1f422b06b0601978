"""Modulators: each kind driving a parameter plays offline exactly as it played live (the
take recorded as a score, rendered again), the follower against a numpy reference, the
envelope's timing to the block, sidechains, presets, and the refusals."""

import json

import numpy as np
import pytest

from bendserver.control import Controller
from bendserver.engine import StreamEngine
from bendserver.engine.rack import Rack
from bendserver.errors import BendingError
from bendserver.modulation import modulators_of
from bendserver.presets.library import PresetLibrary
from bendserver.rackspec import EdgeSpec, NodeSpec, RackSpec
from bendserver.render.offline import ScorePlayer, parse_score
from bendserver.takes import ScoreRecorder

BLOCK = 256
RATE = 48000


def signal(blocks: int, seed: int = 0) -> np.ndarray:
    """Noise bursts: loud and quiet stretches, so followers and onsets move."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, blocks * BLOCK)).astype(np.float32)
    envelope = np.repeat(rng.uniform(0.0, 0.6, blocks // 8 + 1), 8 * BLOCK)[: blocks * BLOCK]
    return x * envelope.astype(np.float32)


def drive() -> StreamEngine:
    return StreamEngine("drive", block=BLOCK, preset="drive")


def play_live(engine, x: np.ndarray, messages: dict[int, list], path=None):
    """Play ``x`` block by block as a server does: the messages of block ``b`` dispatched
    (without a time: "now") before it, recorded as a score; returns output and levels."""
    ctl = Controller(engine)
    if path is not None:
        ctl.recorder = ScoreRecorder(engine, path)
        modulators_of(engine)
    out, levels = [], []
    for b in range(x.shape[1] // BLOCK):
        for address, args in messages.get(b, []):
            ctl.dispatch(address, args, client="127.0.0.1")
        out.append(engine.process(x[:, b * BLOCK : (b + 1) * BLOCK]))
        mods = engine.modulation
        levels.append(dict(mods.levels) if mods is not None else {})
    if path is not None:
        ctl.recorder.stop()
    return np.concatenate(out, axis=1), levels


def render_score(engine, x: np.ndarray, text: str) -> np.ndarray:
    player = ScorePlayer(engine, parse_score(text))
    out = []
    for b in range(x.shape[1] // BLOCK):
        player.until(engine.time)
        out.append(engine.process(x[:, b * BLOCK : (b + 1) * BLOCK]))
    return np.concatenate(out, axis=1)


KINDS = {
    "lfo": [("/mod/add", ["m", "lfo", "rate", 7.0]), ("/mod/m/route", ["/bend/lfo/depth", 0.2])],
    "drift": [
        ("/mod/add", ["m", "drift", "rate", 20.0, "seed", 3]),
        ("/mod/m/route", ["/engine/gain", 0.05]),
    ],
    "steps": [
        ("/mod/add", ["m", "steps", "bpm", 300.0, "division", 4]),
        ("/mod/m/steps", [0.0, 1.0, 0.25, 0.5]),
        ("/mod/m/route", ["/engine/mix", -1.0]),
    ],
    "follower": [
        ("/mod/add", ["m", "follower", "attack_ms", 5.0, "release_ms", 80.0, "gain", 2.0]),
        ("/mod/m/route", ["/bend/lfo/depth", 0.3]),
    ],
    "envelope": [
        ("/mod/add", ["m", "envelope", "attack_ms", 10.0, "hold_ms", 20.0, "onset", 0.3]),
        ("/mod/m/route", ["/engine/gain", 0.1, 0.0, 4.0]),
    ],
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_modulator_renders_offline_as_it_played_live(kind, tmp_path):
    x = signal(120)
    messages = {
        3: KINDS[kind],
        40: [("/bend/lfo/depth", [0.3, 20.0])],  # a ramp under the modulation
        50: [("/mod/m/trigger", [1])] if kind == "envelope" else [],
        70: [("/engine/gain", [0.9])],
    }
    path = tmp_path / "take.txt"
    live, levels = play_live(drive(), x, messages, path)
    moved = [level["m"] for level in levels if "m" in level]
    assert max(moved) - min(moved) > 0.05, f"the {kind} moved"
    unmodulated, _ = play_live(drive(), x, {b: messages[b] for b in (40, 70)})
    assert np.abs(live - unmodulated).max() > 1e-3, "the modulation is heard"
    text = path.read_text()
    assert "/mod/m/route" in text and "/engine/gain 0.9" in text
    offline = render_score(drive(), x, text)
    np.testing.assert_array_equal(offline, live)


def test_the_follower_follows_a_numpy_reference():
    x = signal(200, seed=1)
    attack, release, gain = 3.0, 60.0, 1.5
    messages = {0: [("/mod/add", ["f", "follower", "attack_ms", attack,
                                  "release_ms", release, "gain", gain])]}  # fmt: skip
    _, levels = play_live(drive(), x, messages)
    blocks = x.reshape(1, -1, BLOCK)[0]
    rms = np.sqrt(np.mean(blocks.astype(np.float64) ** 2, axis=1))
    rise, fall = (np.exp(-BLOCK / (ms * RATE / 1000.0)) for ms in (attack, release))
    env, expected = 0.0, []
    for level in rms:  # the block's level is heard before the block plays
        env = level + (rise if level > env else fall) * (env - level)
        expected.append(min(1.0, env * gain))
    got = [level.get("f", 0.0) for level in levels]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)  # a float32 dot product


def test_a_triggered_envelope_starts_at_the_block_of_its_time():
    engine = drive()
    ctl = Controller(engine)
    ctl.dispatch("/mod/add", ["e", "envelope", "attack_ms", 0.0, "hold_ms", 50.0,
                              "release_ms", 0.0])  # fmt: skip
    at = 10 * BLOCK + 100  # inside block 10: the envelope starts at block 11
    ctl.dispatch("/mod/e/trigger", [1], at=at)
    x = np.zeros((1, BLOCK), np.float32)
    levels = []
    for _ in range(30):
        engine.process(x)
        levels.append(engine.modulation.levels["e"])
    held = round(0.050 * RATE / BLOCK + 0.5)  # blocks whose start is within 50 ms of block 11
    on = [b for b, level in enumerate(levels) if level == 1.0]
    assert on[0] == 11 and on == list(range(11, 11 + len(on)))
    assert abs(len(on) - held) <= 1 and levels[on[-1] + 1] == 0.0


def test_a_follower_of_a_nodes_output_drives_another_node():
    rack = RackSpec(
        (NodeSpec("a", "drive"), NodeSpec("b", "drive")),
        (EdgeSpec("in", "a"), EdgeSpec("a", "b"), EdgeSpec("b", "out")),
    ).build(block=BLOCK)
    ctl = Controller(rack)
    ctl.dispatch("/mod/add", ["side", "follower", "gain", 3.0])
    ctl.dispatch("/mod/side/source", ["a"])
    ctl.dispatch("/mod/side/route", ["/b/bend/lfo/depth", 0.5])
    with pytest.raises(BendingError, match="several nodes"):
        ctl.dispatch("/mod/side/route", ["/bend/lfo/depth", 0.5])
    x = signal(40, seed=2)
    depths = []
    for b in range(40):
        rack.process(x[:, b * BLOCK : (b + 1) * BLOCK])
        depths.append(rack.nodes["b"].op("lfo").get("depth"))
    assert max(depths) > 0.8 + 1.0 and rack.nodes["a"].op("lfo").get("depth") == pytest.approx(0.8)
    assert isinstance(rack, Rack) and rack.modulation.levels["side"] > 0


def test_modulators_are_saved_in_presets_and_load_with_them(tmp_path):
    engine = drive()
    ctl = Controller(engine, PresetLibrary(user=tmp_path))
    for address, args in KINDS["steps"] + KINDS["lfo"][1:]:
        ctl.dispatch(address, args)
    ctl.dispatch("/preset/save", ["stepped"])
    saved = json.loads((tmp_path / "stepped.json").read_text())
    assert [m["kind"] for m in saved["modulators"]] == ["steps"]
    assert saved["modulators"][0]["steps"] == [0.0, 1.0, 0.25, 0.5]
    x = signal(30)
    first = engine(x, RATE)
    again = drive()
    Controller(again, PresetLibrary(user=tmp_path)).dispatch("/preset/load", ["stepped"])
    np.testing.assert_array_equal(again(x, RATE), first)


def test_the_lfo_op_of_an_old_preset_still_plays_and_can_be_driven():
    engine = drive()
    assert engine.op("lfo").name == "Oscillate"
    ctl = Controller(engine)
    ctl.dispatch("/mod/add", ["slow", "lfo", "rate", 0.5])
    ctl.dispatch("/mod/slow/route", ["/bend/lfo/freq", 0.001])
    engine(signal(10), RATE)
    assert engine.op("lfo").get("freq") != pytest.approx(0.0000625)
    assert engine.applied_state.op("lfo").param("freq") == pytest.approx(0.0000625)


@pytest.mark.parametrize(
    ("address", "args", "message"),
    [
        ("/mod/add", ["x", "saw"], "no modulator kind 'saw'; kinds: lfo, drift"),
        ("/mod/add", ["x", "lfo", "speed", 1.0], "has no parameter 'speed'"),
        ("/mod/add", ["x", "lfo", "rate", 1000.0], "rate must be in"),
        ("/mod/nope/route", ["/engine/gain", 0.1], "no modulator 'nope'"),
        ("/mod/w/route", ["/bend/noise/std", 0.1], "bends weights"),
        ("/mod/w/route", ["/bend/mask/prob", 0.1], "--optimize none"),
        ("/mod/w/route", ["/engine/bypass", 0.1], "drives /bend/<op>/<param>"),
        ("/mod/w/route", ["/engine/gain", 0.1, 3.0, 20.0], "takes 0..16"),
        ("/mod/w/steps", [0.5], "not a step sequence"),
        ("/mod/w/trigger", [1], "only envelopes trigger"),
        ("/mod/w/source", ["in"], "listens to nothing"),
    ],
)
def test_bad_modulator_messages_say_what_to_do_and_change_nothing(address, args, message):
    engine = drive()
    ctl = Controller(engine)
    ctl.dispatch("/mod/add", ["w", "lfo"])
    before = engine.modulation.to_list()
    with pytest.raises(BendingError, match=message):
        ctl.dispatch(address, args)
    assert engine.modulation.to_list() == before


def test_a_route_follows_the_op_a_preset_loads_in_its_place():
    engine = drive()
    ctl = Controller(engine)
    ctl.dispatch("/mod/add", ["w", "steps"])
    ctl.dispatch("/mod/w/steps", [1.0])
    ctl.dispatch("/mod/w/route", ["/bend/lfo/depth", 0.1])
    ctl.dispatch("/preset/load", ["drive"])  # new ops, same ids
    engine(signal(4), RATE)
    assert engine.op("lfo").get("depth") == pytest.approx(0.8 + 0.1 * 10.0)


def test_a_modulator_parameter_and_an_envelope_trigger_map_to_midi():
    import mido

    engine = drive()
    ctl = Controller(engine)
    ctl.dispatch("/mod/add", ["w", "lfo"])
    ctl.dispatch("/mod/add", ["e", "envelope"])
    ctl.dispatch("/midi/map", ["/mod/w/rate", "cc", 1, 7])  # the parameter's whole range
    ctl.dispatch("/midi/map", ["/mod/e/trigger", "note", 1, 60])
    knob = mido.Message("control_change", control=7, value=127)
    assert ctl.midi.translate(knob) == [("/mod/w/rate", [100.0])]
    note = mido.Message("note_on", note=60, velocity=90)
    assert ctl.midi.translate(note) == [("/mod/e/trigger", [1.0])]
    for address, args in ctl.midi.translate(knob) + ctl.midi.translate(note):
        ctl.dispatch(address, args)
    engine(np.zeros((1, 2 * BLOCK)), RATE)  # the second block starts past the 5 ms attack
    assert engine.modulation.get("w", "rate") == 100.0 and engine.modulation.levels["e"] == 1.0
