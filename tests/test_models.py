"""The shipped models: trained, small, streaming, bendable, and playable with their presets."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

import bendserver as tb
from bendserver.cli import main
from bendserver.paths import SHIPPED_MODELS as MODELS_DIR
from bendserver.paths import SHIPPED_PRESETS as PRESETS_DIR

MODES = ("none", "passes")
SHIPPED = sorted(p.parent.name for p in MODELS_DIR.glob("*/manifest.toml"))


def test_both_models_are_shipped():
    assert {"drive", "wavae"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_model_is_small_trained_and_documented(name):
    model = tb.load_model(name)
    folder = MODELS_DIR / name
    assert sum(f.stat().st_size for f in folder.iterdir()) < 5_000_000
    assert model.demo.is_file() and model.demo.stat().st_size < 1_000_000
    assert (PRESETS_DIR / f"{model.preset}.json").is_file()
    training = model.manifest["training"]
    assert (Path(__file__).parents[1] / training["script"]).is_file()
    assert training["seconds"] <= 15 * 60
    esr = {k: v for k, v in training.items() if "esr" in k}
    assert esr, "the manifest reports the trained model's error"


def test_drive_is_visibly_trained():
    training = tb.load_model("drive").manifest["training"]
    assert training["test_esr"] < 0.1 < training["baseline_esr"]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("block", [256, 2048])
def test_engine_streams_like_one_eager_call(name, block):
    model = tb.load_model(name)
    reference = tb.load_model(name).module
    engine = tb.StreamEngine(model, block=block, fuse=False)
    audio, _ = sf.read(str(model.demo), dtype="float32", frames=block * 8)
    streamed = np.concatenate([engine.process(b[None]) for b in np.split(audio, 8)], -1)
    with torch.inference_mode():
        whole = reference(torch.from_numpy(audio)[None, None])[0].numpy()
    np.testing.assert_allclose(streamed, whole, atol=1e-5)


def test_wavae_methods_and_versions_morph():
    model = tb.load_model("wavae")
    assert model.bended.versions == ["_default", "strings", "percussion"]
    ratio = model.methods["encode"].out_ratio
    assert model.methods["decode"].in_ratio == ratio > 1
    encoder = tb.StreamEngine(model, method="encode", block=2048, fuse=False)
    latent = encoder.process(np.zeros((1, 2048), np.float32))
    assert latent.shape == (model.methods["encode"].out_channels, 2048 // ratio)
    audio, _ = sf.read(str(model.demo), dtype="float32", frames=2048 * 8)
    outputs = {}
    for w in (0.0, 0.5, 1.0):
        engine = tb.StreamEngine(tb.load_model("wavae"), block=2048, fuse=False)
        engine.set_interpolation({"strings": 1 - w, "percussion": w})
        outputs[w] = np.concatenate([engine.process(b[None]) for b in np.split(audio, 8)], -1)
    assert not np.allclose(outputs[0.0], outputs[1.0], atol=1e-3), "versions sound different"
    assert not np.allclose(outputs[0.5], outputs[0.0], atol=1e-4)
    assert not np.allclose(outputs[0.5], outputs[1.0], atol=1e-4)
    assert all(np.isfinite(o).all() for o in outputs.values())


@pytest.mark.parametrize("name", SHIPPED)
def test_preset_bends_the_sound(name):
    model = tb.load_model(name)
    audio, _ = sf.read(str(model.demo), dtype="float32", frames=2048 * 4)
    plain = tb.StreamEngine(tb.load_model(name), block=2048)
    bended = tb.StreamEngine(model, block=2048, preset=model.preset)
    a = np.concatenate([plain.process(b[None]) for b in np.split(audio, 4)], -1)
    b = np.concatenate([bended.process(b[None]) for b in np.split(audio, 4)], -1)
    assert np.isfinite(b).all() and np.abs(b).max() > 1e-3
    assert not np.allclose(a, b, atol=1e-3)
    assert bended.stats_dict()["errors"] == 0


def test_cli_render_info_and_bench(tmp_path, capsys):
    demo = tb.load_model("drive").demo
    out = tmp_path / "demo.wav"
    assert main(["render", str(demo), "-m", "drive", "-p", "drive", "-o", str(out)]) == 0
    assert sf.info(str(out)).duration == pytest.approx(sf.info(str(demo)).duration, abs=1e-3)
    said = capsys.readouterr().out  # what make render prints: the preset's level fits
    assert "wrote" in said and "0 NaN/Inf samples, 0 samples limited" in said
    assert main(["render", str(demo), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["info", "drive"]) == 0
    out = capsys.readouterr().out
    assert "activations of forward" in out
    assert "versions ['default']," in out, "the internal name of the file's own weights"
    assert "the ring mode adds 2048 samples (42.67 ms: 1 block ahead)" in out
    assert main(["bench", "--block", "256", "--calls", "5", "--apply-sizes", "10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    runs = report["blocks"]["256"]["runs"]
    assert set(runs) == {
        "raw eager",
        *(f"engine {run} ({mode})" for run in ("unbended", "+ preset drive") for mode in MODES),
        "engine + preset, 4 modulators, 8 routes (passes)",
    }
    (apply,) = report["weight_apply"]
    assert apply["parameters"] >= 10_000_000 and apply["apply_p50_us"] > 0


def test_render_command_renders_the_demo(tmp_path):
    root = Path(__file__).parents[1]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bendserver.cli",
            "render",
            "models/drive/demo.flac",
            "-m",
            "drive",
            "-p",
            "drive",
            "-o",
            str(tmp_path / "run.wav"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run.wav").is_file()
