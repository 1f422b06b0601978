"""``bendserver export``: nn~ files that load with torch alone (no bendserver in the process),
stream like the engine with the same preset, block by block, and whose attributes move the
bending inside the file."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from test_torchscript import nn_tilde_file

import bendserver as tb
from bendserver.cli import main
from bendserver.export.model import export_model
from bendserver.presets.library import Preset

CHANGES = {3: [("noise", "std", 0.5), ("mask", "prob", 0.2), ("lfo", "depth", 0.1)]}


def signal(channels, frames, count, seed=0):
    rng = np.random.default_rng(seed)
    return [(0.3 * rng.standard_normal((channels, frames))).astype(np.float32)
            for _ in range(count)]  # fmt: skip


def engine_outputs(engine, blocks, changes):
    outputs = []
    for index, block in enumerate(blocks):
        for op_id, name, value in changes.get(index, []):
            engine.set_param(op_id, name, value)
        outputs.append(engine.process(block))
    return outputs


def file_outputs(module, method, blocks, changes):
    outputs = []
    for index, block in enumerate(blocks):
        for op_id, name, value in changes.get(index, []):
            getattr(module, f"set_{op_id}_{name}")(value)
        with torch.no_grad():
            outputs.append(getattr(module, method)(torch.from_numpy(block)[None])[0].numpy())
    return outputs


CHILD = """
import json, sys
sys.path.append(SITE)
import numpy as np
import torch
try:
    import bendserver
except ImportError:
    pass
else:
    raise SystemExit("bendserver is importable here")
module = torch.jit.load(FILE)
blocks = np.load(BLOCKS)
report = {"methods": module.get_methods(), "attributes": module.get_attributes(),
          "params": module.forward_params.tolist(), "sr": module.sr, "got": []}
outputs = []
for index, block in enumerate(blocks):
    for op_id, name, value in CHANGES.get(str(index), []):
        getattr(module, "set_" + op_id + "_" + name)(value)
        report["got"].append(getattr(module, "get_" + op_id + "_" + name)())
    with torch.no_grad():
        outputs.append(module(torch.from_numpy(block)[None])[0].numpy())
np.save(OUT, np.stack(outputs))
print(json.dumps(report))
"""


def run_without_bendserver(path, blocks, changes, tmp_path):
    """Load and play the file in a fresh interpreter that has torch and numpy but cannot
    import bendserver (isolated: no site processing, no current folder, no PYTHONPATH)."""
    np.save(tmp_path / "blocks.npy", np.stack(blocks))
    site = os.path.dirname(os.path.dirname(torch.__file__))
    values = {
        "SITE": repr(site),
        "FILE": repr(str(path)),
        "BLOCKS": repr(str(tmp_path / "blocks.npy")),
        "OUT": repr(str(tmp_path / "out.npy")),
        "CHANGES": repr({str(k): v for k, v in changes.items()}),
    }
    code = CHILD
    for name, value in values.items():
        code = code.replace(name, value)
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), list(np.load(tmp_path / "out.npy"))


def test_a_shipped_model_exported_plays_like_the_engine_in_a_process_without_bendserver(tmp_path):
    path = tmp_path / "drive.ts"
    attributes = export_model("drive", path, preset="drive", block=256)
    assert attributes == ["mask_prob", "lfo_depth", "lfo_freq", "noise_std"]
    blocks = signal(1, 256, 8)
    report, got = run_without_bendserver(path, blocks, CHANGES, tmp_path)
    assert report["methods"] == ["forward"] and report["params"] == [1, 1, 1, 1]
    assert report["attributes"] == attributes and report["sr"] == 48000
    assert report["got"] == pytest.approx([0.5, 0.2, 0.1])
    engine = tb.StreamEngine("drive", block=256, preset="drive", fuse=False)
    engine.set_gain(1.0)  # the export holds the preset's bending, not the host's gain
    want = engine_outputs(engine, blocks, CHANGES)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"block {index}")
    unchanged = engine_outputs(tb.StreamEngine("drive", block=256, preset="drive", fuse=False),
                               blocks, {})  # fmt: skip
    for index in range(3, 8):  # the attributes changed the bending: weights and activations
        assert np.abs(got[index] - unchanged[index]).max() > 1e-3


def test_each_method_of_a_python_model_streams_like_the_engine(tmp_path):
    """wavae with its preset (fresh latent noise, a mask, an interpolation of two versions):
    forward; encode and decode unbended (the preset's keys are forward's)."""
    bended, plain = tmp_path / "wavae.ts", tmp_path / "plain.ts"
    export_model("wavae", bended, preset="wavae")
    export_model("wavae", plain, preset="none")
    runs = [("forward", bended, "wavae", {2: [("latent", "std", 0.05)]}),
            ("encode", plain, None, {}), ("decode", plain, None, {})]  # fmt: skip
    for method, path, preset, changes in runs:
        module = torch.jit.load(str(path))
        engine = tb.StreamEngine("wavae", method=method, preset=preset, fuse=False)
        blocks = signal(engine.in_channels, engine.in_frames, 4)
        got = file_outputs(module, method, blocks, changes)
        want = engine_outputs(engine, blocks, changes)
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"{method} {index}")
    module = torch.jit.load(str(bended))
    assert module.get_methods() == ["forward", "encode", "decode"]
    assert module.encode_params.tolist() == [1, 1, 8, 32]
    assert module.decode_params.tolist() == [8, 32, 1, 1]
    with pytest.raises(torch.jit.Error, match="exported for blocks of 2048 samples"):
        module(torch.zeros(1, 1, 1024))


def test_a_torchscript_file_exported_with_folds_and_weight_ops(tmp_path):
    """A .ts in, bended by a folded mask and a weight op, out: the attributes recompute the
    file's weights (the fold included), as the engine does."""
    source = nn_tilde_file(tmp_path)
    config = tb.BendingConfig((tb.Mask(0.5, dim=1, seed=3), "a"),
                              (tb.Noise(0.2, seed=1), r"b\.weight"))  # fmt: skip
    preset = Preset(name="folds", config=config.to_dict())
    path = tmp_path / "bended.ts"
    assert export_model(source, path, preset=preset, block=512) == ["mask_prob", "noise_std"]
    changes = {2: [("mask", "prob", 0.9), ("noise", "std", 0.0)]}
    blocks = signal(1, 512, 5)
    module = torch.jit.load(str(path))
    got = file_outputs(module, "forward", blocks, changes)
    engine = tb.StreamEngine(source, block=512, preset=preset, fuse=False)
    want = engine_outputs(engine, blocks, changes)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"block {index}")
    reloaded = tb.StreamEngine(path, block=512, fuse=False)  # bendserver plays it too
    assert list(reloaded.model.attributes) == ["mask_prob", "noise_std"]
    assert reloaded.model.sample_rate == 44100


def test_the_export_command(tmp_path, capsys):
    out = tmp_path / "drive.ts"
    assert main(["export", "drive", "-p", "none", "--block", "512", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert torch.jit.load(str(out)).get_attributes() == []
    assert main(["export", "drive", "-o", str(out)]) == 2
    assert "exists: give --force" in capsys.readouterr().err
    assert main(["export", "drive", "--force", "-o", str(out)]) == 0


def test_a_block_the_model_cannot_stream_is_refused():
    with pytest.raises(tb.BendingError, match="cannot stream blocks of 100: give --block a mul"):
        export_model("wavae", "never.ts", block=100)
