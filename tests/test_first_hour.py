"""What a newcomer does in the first hour must not silence, blast or lose their setup: refused
presets change nothing, impossible blocks are refused before anything starts, suggested values
are safe, mono plays on every output, shipped presets stay as shipped."""

import json
import logging
import time

import numpy as np
import pytest
import soundfile as sf
import torch
from streaming import Identity

import bendserver as tb
from bendserver.audio.backends import playback_channels
from bendserver.audio.reporter import Reporter
from bendserver.cli import build_parser, main
from bendserver.control import Controller
from bendserver.paths import SHIPPED_PRESETS as PRESETS_DIR
from bendserver.presets.library import PresetLibrary
from bendserver.render.offline import parse_score, render_file
from bendserver.serve import ServeOptions, Server
from bendserver.serve.report import _example_value


@pytest.fixture
def drive():
    return Controller(tb.StreamEngine("drive", block=256, preset="drive"))


def test_a_preset_for_another_model_is_refused_and_changes_nothing(drive):
    before = drive.engine.state
    with pytest.raises(tb.BendingError, match="preset 'wavae' does not fit model 'drive'.*"
                       r"\['encoder_out_conv', 'decoder_blocks_1_units_0_act1'\].*"
                       r"no version \['strings', 'percussion'\]"):  # fmt: skip
        drive.dispatch("/preset/load", ["wavae"])
    assert drive.engine.state == before
    assert drive.dispatch("/list", ["ops"]) == [("/list/ops", ["mask", "lfo", "noise"])]


class _Wide(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.inner = torch.nn.Conv1d(1, width, 1)
        self.act = torch.nn.Tanh()
        self.outer = torch.nn.Conv1d(width, 1, 1)

    def forward(self, x):
        return self.outer(self.act(self.inner(x)))


def test_a_preset_fits_by_the_shapes_of_what_it_bends(tmp_path):
    """Saved with the names and shapes of the weights and layers it bends: a model with the
    same names and other shapes is refused, saying which."""
    wide = tb.StreamEngine(_Wide(4), block=256)
    wide.add_op("soft", tb.Scale(0.5), r"inner\.weight")
    wide.add_op("lift", tb.Bias(0.1), "act")
    saved = PresetLibrary(tmp_path).save(wide.preset("wide"))
    targets = json.loads(saved.read_text())["targets"]
    assert targets == {"inner.weight": [4, 1, 1], "act": None}
    assert sorted(tb.StreamEngine(_Wide(4), block=512, preset=saved).ops) == ["lift", "soft"]
    with pytest.raises(tb.BendingError, match=r"other shapes: inner.weight \(2, 1, 1\) "
                       r"here, \(4, 1, 1\) in the preset"):  # fmt: skip
        tb.StreamEngine(_Wide(2), block=256, preset=saved)


def test_a_preset_with_a_bad_key_is_refused_whole(drive, tmp_path):
    preset = json.loads((PRESETS_DIR / "drive.json").read_text())
    preset["bends"].append({"op": "mask", "keys": ["no_such_layer"]})
    (tmp_path / "broken.json").write_text(json.dumps(preset))
    before = drive.engine.state
    with pytest.raises(tb.BendingError, match="no_such_layer"):
        drive.engine.load_preset(tmp_path / "broken.json")
    assert drive.engine.state == before
    block = np.zeros((1, 256), np.float32)
    drive.engine.process(block)
    assert drive.engine.applied_state == before


def test_shipped_presets_are_read_only_and_overwriting_is_explicit(drive, tmp_path):
    shipped = (PRESETS_DIR / "drive.json").read_bytes()
    drive.presets = PresetLibrary(tmp_path / "user", PRESETS_DIR)
    with pytest.raises(tb.BendingError, match="shipped preset"):
        drive.dispatch("/preset/save", ["drive"])
    assert drive.dispatch("/preset/save", ["mine"]) == [("/preset/saved", ["mine"])]
    with pytest.raises(tb.BendingError, match="exists"):
        drive.dispatch("/preset/save", ["mine"])
    drive.dispatch("/bend/mask/prob", [0.25])
    drive.dispatch("/preset/save", ["mine", 1])
    assert json.loads((tmp_path / "user" / "mine.json").read_text())["ops"]["mask"]["params"] == {
        "prob": 0.25
    }
    drive.dispatch("/preset/save", ["drive", 1.0])  # the user's own copy, shadowing the shipped
    assert (PRESETS_DIR / "drive.json").read_bytes() == shipped
    assert "mine" in drive.dispatch("/list", ["presets"])[0][1]


@pytest.mark.parametrize("block", [100, 48, -5, 0])
def test_blocks_a_model_cannot_take_are_refused_naming_good_ones(block):
    with pytest.raises(tb.BendingError, match=r"multiples of 32 \(e.g. 64, 128"):
        tb.StreamEngine("wavae", block=block)


@pytest.mark.parametrize("block", ["-5", "0", "x"])
def test_the_command_line_refuses_bad_blocks(block, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["render", "in.wav", "-o", "out.wav", "--block", block])
    assert exit_.value.code == 2 and "--block" in capsys.readouterr().err


def test_render_is_as_long_as_its_input_and_says_what_it_drops(tmp_path, caplog):
    source = tb.load_model("wavae").demo
    score = parse_score("1.0 /preset/save at_one\n0.5 /bend/mask/prob 0.5\n99 /engine/gain 0.5")
    engine = tb.StreamEngine("wavae", block=1024, preset="wavae")
    with caplog.at_level(logging.WARNING):
        seconds = render_file(engine, source, tmp_path / "o.wav", score).seconds
    assert seconds == pytest.approx(sf.info(str(source)).duration, abs=1e-4)
    assert "1 event(s) at or after the end" in caplog.text and "99 s /engine/gain" in caplog.text


def test_a_score_saves_the_state_at_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path))
    source = tb.load_model("drive").demo
    score = parse_score("0.5 /bend/mask/prob 0.25\n1.0 /preset/save at_one\n2.0 /bend/mask/prob 1")
    render_file(tb.StreamEngine("drive", preset="drive"), source, tmp_path / "o.wav", score)
    saved = json.loads((tmp_path / "presets" / "at_one.json").read_text())
    assert saved["ops"]["mask"]["params"]["prob"] == 0.25


def test_render_and_serve_take_the_models_preset_by_one_rule(tmp_path, capsys):
    demo = tb.load_model("drive").demo
    rendered = {}
    for choice in ([], ["-p", "drive"], ["-p", "none"]):
        out = tmp_path / f"{'-'.join(choice) or 'default'}.wav"
        assert main(["render", str(demo), "-o", str(out), *choice]) == 0
        rendered[tuple(choice)] = sf.read(str(out), dtype="float32")[0]
    np.testing.assert_array_equal(rendered[()], rendered[("-p", "drive")])
    assert not np.allclose(rendered[()], rendered[("-p", "none")], atol=1e-3)
    score = tmp_path / "score.txt"
    score.write_text("0.1 /bend/mask/prob 0.5\n")
    assert main(["render", str(demo), "-o", str(tmp_path / "s.wav"), "--score", str(score)]) == 0
    assert main(["render", str(demo), "-o", str(tmp_path / "n.wav"), "-p", "none", "--score",
                 str(score)]) == 2  # fmt: skip
    assert "no op 'mask'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "low, high, current, safe",
    [(0.0, 1e3, 0.3, 0.15), (0.0, 1.0, 0.6, 0.3), (0.0, 10.0, 0.0, 0.1), (-1e3, 1e3, -2.0, -1.0)],
)
def test_suggested_values_are_near_the_current_one_and_in_range(low, high, current, safe):
    assert _example_value(low, high, current) == pytest.approx(safe)


def test_the_banner_suggests_a_safe_value_for_wavae():
    server = Server(ServeOptions(model="wavae", audio="null", osc_port=0, reply_port=0))
    try:
        assert "/bend/latent/std f 0.15" in server.banner()
    finally:
        server.stop()


def test_the_banner_says_which_networks_may_control(monkeypatch):
    options = ServeOptions(audio="null", osc_host="0.0.0.0", osc_port=0, reply_port=0)
    server = Server(options, engine=tb.StreamEngine(Identity(), block=256))
    try:
        assert "allowed    OSC from 127.0.0.0/8, ::1/128 only (add networks with --allow" in (
            server.banner()
        )
    finally:
        server.stop()


def test_a_mono_model_plays_on_every_output():
    assert playback_channels(1, 2) == 2
    assert playback_channels(1, 8) == 8
    assert playback_channels(2, 8) == 2
    assert playback_channels(1, 8, asked=1) == 1
    with pytest.raises(tb.BendingError):
        playback_channels(2, 8, asked=4)


def test_a_model_that_cannot_keep_up_says_so_while_it_runs(caplog):
    def slow(x):
        time.sleep(0.004)
        return x

    engine = tb.StreamEngine(Identity(), block=128, sample_rate=48000)
    engine.add_op("slow", tb.Lambda(slow), "gain")
    reporter = Reporter(engine, quiet=0.0)
    block = np.zeros((1, 128), np.float32)
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            engine.process(block)
        reporter.report()
        reporter.report()  # nothing new: no second line
    assert caplog.text.count("cannot keep up: 4 of the last 4 blocks were late") == 1


def test_version_and_help_for_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith(f"bendserver {tb.__version__}")
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in commands.choices.items():
        for action in parser._actions:
            assert action.help, f"bendserver {name} {action.option_strings} has no help text"


def test_versions_are_listed_by_their_names(drive):
    assert drive.dispatch("/list", ["versions"]) == [("/list/versions", ["default"])]
    wavae = Controller(tb.StreamEngine("wavae"))
    assert wavae.dispatch("/list", ["versions"])[0][1] == ["strings", "percussion"]


def test_render_into_a_new_folder_and_clashing_names(tmp_path, capsys):
    demo = tb.load_model("drive").demo
    assert main(["render", str(demo), "-o", f"{tmp_path / 'out'}/", "--format", ".flac"]) == 0
    assert (tmp_path / "out" / "demo.flac").is_file()
    wavae = tb.load_model("wavae").demo
    assert main(["render", str(demo), str(wavae), "-o", str(tmp_path / "two")]) == 2
    assert "several inputs would be written to ['demo.wav']" in capsys.readouterr().err
    assert not (tmp_path / "two").exists(), "refused before anything is rendered"


def test_latent_outputs_are_not_fused():
    engine = tb.StreamEngine("wavae", method="encode", block=2048)
    assert engine.fuse is None and tb.StreamEngine("wavae", block=2048).fuse is not None


def test_a_saved_preset_holds_the_values_as_sent(tmp_path):
    """It stored 0.30000001192092896 for 0.3 (the float32 a parameter is held in, as a double);
    the shortest decimal of that float32 loads back to the same value."""
    control = Controller(
        tb.StreamEngine("drive", block=256, preset="drive"),
        presets=PresetLibrary(tmp_path / "user", PRESETS_DIR),
    )
    control.dispatch("/bend/mask/prob", [0.3])
    control.dispatch("/bend/lfo/freq", [1 / 3000])
    control.dispatch("/preset/save", ["mine"])
    ops = json.loads((tmp_path / "user" / "mine.json").read_text())["ops"]
    assert ops["mask"]["params"] == {"prob": 0.3} and ops["noise"]["params"] == {"std": 0.15}
    assert ops["lfo"]["params"]["freq"] == 0.00033333333
    control.dispatch("/preset/load", ["mine"])  # its Oscillate plays as an LFO modulator
    control.engine.process(np.zeros((1, 256), np.float32))
    (_, (freq,)), *_ = control.dispatch("/get/bend/lfo/freq")
    assert torch.tensor(freq, dtype=torch.float32) == torch.tensor(1 / 3000, dtype=torch.float32)
