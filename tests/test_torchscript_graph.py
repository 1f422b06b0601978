"""A .ts file's methods converted into fx graphs: they play as the direct scripted calls do
(block by block, after a reset), every activation op bends any tensor of them, the latent
between encode and decode is an activation, and attributes still act. The same checks run on
real RAVE exports where BENDSERVER_RAVE_DIR names a folder holding them."""

import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from test_export import run_without_bendserver
from test_passes import PYTHON_PASSES
from test_torchscript import nn_tilde_file
from ts_files import codec_file, rave_files

import bendserver as tb
from bendserver import compat
from bendserver.cli import main
from bendserver.control import Controller
from bendserver.export.model import export_model
from bendserver.passes import run_passes
from bendserver.presets.library import Preset
from bendserver.serve import ServeOptions, Server

#: The small Codec, then each RAVE export found; the exports after the first repeat its checks
#: on another graph of the same builder, in the slow run.
SOURCES = ["codec", *rave_files()]
slow = pytest.mark.slow


@pytest.fixture(
    scope="module",
    params=[pytest.param(p, marks=[slow] if i > 1 else []) for i, p in enumerate(SOURCES)],
    ids=lambda p: Path(p).stem,
)
def path(tmp_path_factory, request) -> Path:
    """The small Codec, then each RAVE export found."""
    if request.param == "codec":
        return codec_file(tmp_path_factory.mktemp("codec"))
    return request.param


def inputs(engine: tb.StreamEngine, count: int, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (engine.in_channels, engine.in_frames)
    return [(0.3 * rng.standard_normal(shape)).astype(np.float32) for _ in range(count)]


def engine_for(path: Path, method: str = "forward") -> tb.StreamEngine:
    model = tb.load_model(path)
    block = 256 if model.block_multiple <= 256 else 2048
    return tb.StreamEngine(model, block=block, method=method, fuse=False)


@pytest.mark.parametrize("method", ["forward", "encode", "decode"])
def test_converted_methods_equal_direct_scripted_calls_over_16_blocks_and_after_a_reset(
    path, method
):
    engine = engine_for(path, method)
    assert engine.bended.unconverted == {} and engine.bended.traced_methods == [method]
    direct = getattr(torch.jit.load(str(path)), method)
    blocks = inputs(engine, 16)
    played = []
    for index, block in enumerate(blocks):
        torch.manual_seed(index)  # a file that draws noise draws the same in both
        got = engine.process(block)
        torch.manual_seed(index)
        with torch.no_grad():
            want = direct(torch.from_numpy(block)[None])[0].numpy()
        # within 1e-5 of the block's scale where RAVE's latents reach 10: the passes may pick
        # another convolution form, whose sums of 3 072 products round otherwise (1.1e-5 on
        # one latent of a causal export's block 13 whose largest is 4.5: 2.5e-6 of it)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, atol=1e-5 * scale, rtol=0, err_msg=f"block {index}")
        played.append(got)
    engine.request_reset()
    for index, block in enumerate(blocks):
        torch.manual_seed(index)
        np.testing.assert_allclose(engine.process(block), played[index], atol=1e-5, rtol=0)


def inner_activation(engine: tb.StreamEngine) -> str:
    """A tensor inside the decoder that is not a convolution's output: the middle one of
    those a tanh or a leaky ReLU computes."""
    nodes = [
        n.name
        for n in engine.bended.graph("forward").nodes
        if any(f in str(n.target) for f in ("tanh", "leaky_relu"))
    ]
    return nodes[len(nodes) // 2]


OPS = [
    lambda: tb.Threshold(0.1, binary=False),
    lambda: tb.Oscillate(depth=0.9, freq=0.01),
    lambda: tb.Noise(0.5, dim=1, seed=2, fresh=True),
    lambda: tb.Mask(0.5, seed=1),  # per unit, not per channel
]


#: Every op on the Codec; on the first RAVE export the first op (~9 s each there), the others in
#: the slow run.
OP_NAMES = ["threshold", "lfo", "fresh-noise", "unit-mask"]
OP_CASES = [
    pytest.param(
        source, make, id=f"{Path(source).stem}-{name}", marks=[slow] if i > 1 or i and j else []
    )
    for i, source in enumerate(SOURCES)
    for j, (make, name) in enumerate(zip(OPS, OP_NAMES, strict=True))
]


@pytest.mark.parametrize(("path", "make"), OP_CASES, indirect=["path"])
def test_any_activation_op_bends_an_inner_tensor_and_removing_it_restores_the_output(path, make):
    """Over 6 blocks (a RAVE decoder's delay is about 5 blocks of 2048), then after removal
    and a reset, exactly the unbended engine's output."""
    engine, reference = engine_for(path), engine_for(path)
    target = inner_activation(engine)
    blocks = inputs(engine, 10)

    def both(block):
        torch.manual_seed(0)
        got = engine.process(block)
        torch.manual_seed(0)
        return got, reference.process(block)

    for block in blocks[:2]:
        both(block)
    Controller(engine)  # the op is live over OSC too: its addresses exist
    engine.add_op("bend", make(), target)
    bent, plain = zip(*(both(block) for block in blocks[2:8]), strict=True)
    change = np.abs(np.stack(bent) - np.stack(plain)).max()
    assert change > 0.01 * np.abs(np.stack(plain)).max(), f"the op on {target} changes the output"
    engine.remove_op("bend")
    engine.request_reset()
    reference.request_reset()
    for block in blocks[8:]:
        np.testing.assert_array_equal(*both(block))


def test_a_layer_keeps_its_name_and_ops_are_listed_over_osc(tmp_path):
    engine = engine_for(codec_file(tmp_path))
    names = engine.bended.activation_names()
    assert {"encoder_0", "encoder_2", "up", "out", "latent"} <= set(names)
    assert "encoder.0.weight" in engine.bended.weight_names
    control = Controller(engine)
    (listed,) = control.dispatch("/list", ["activations"])
    assert "latent" in listed[1] and "out" in listed[1]
    control.dispatch("/bend/add", ["th", "Threshold", "tanh", "value", 0.25])
    engine.process(inputs(engine, 1)[0])  # applied at the block boundary
    assert control.dispatch("/get/bend/th/value") == [("/get/bend/th/value", [0.25])]


def test_latent_scale_and_bias_on_one_dimension_change_only_that_dimension(path):
    """``latent`` is the tensor between encode and decode in forward: Scale(0) and Bias(0.5) on
    its dimension 1 play as decode(encode(x) with dimension 1 set to 0.5)."""
    engine = engine_for(path)
    engine.add_op("latent_scale", tb.Scale(0.0, unit=1), "latent")
    engine.add_op("latent_bias", tb.Bias(0.5, unit=1), "latent")
    direct = torch.jit.load(str(path))
    for index, block in enumerate(inputs(engine, 3)):
        torch.manual_seed(index)
        got = engine.process(block)
        torch.manual_seed(index)
        with torch.no_grad():
            z = direct.encode(torch.from_numpy(block)[None])
            z[:, 1] = 0.5
            want = direct.decode(z)[0].numpy()
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"block {index}")
    bended = tb.load_model(path).bended
    x = torch.from_numpy(inputs(engine, 1)[0])[None]
    bended.trace("forward", x=torch.zeros_like(x))
    bended.bend(tb.Scale(2.0, unit=0), "latent")
    torch.manual_seed(0)
    plain = bended.get_activations("latent", bended=False, x=x)["latent"]
    torch.manual_seed(0)
    bent = bended.get_activations("latent", x=x)["latent"]
    torch.testing.assert_close(bent[:, 0], 2 * plain[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(bent[:, 1:], plain[:, 1:], atol=0, rtol=0)


def test_an_attribute_that_changes_the_path_converts_again(tmp_path):
    path = codec_file(tmp_path)
    engine, direct = engine_for(path), torch.jit.load(str(path))
    control = Controller(engine)
    blocks = inputs(engine, 4)
    for index, block in enumerate(blocks):
        if index == 2:  # applies at the next block boundary
            control.dispatch("/attr/gate", [0])
            direct.set_gate(False)
        with torch.no_grad():
            want = direct(torch.from_numpy(block)[None])[0].numpy()
        np.testing.assert_allclose(engine.process(block), want, atol=1e-5, rtol=0)
    assert engine.bended.script_attributes == {"gate": False}


def test_info_lists_the_converted_activations_or_says_why_a_method_is_not(tmp_path, capsys):
    assert main(["info", str(codec_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "activations of decode (block 2048)" in out and "\nlatent " in out
    # in a command of its own, as a user runs it: a probe's child forked from a process whose
    # inter-op threads started (prim::fork, in an earlier test) cannot run prim::fork
    path = nn_tilde_file(tmp_path, fork=True)
    command = [sys.executable, "-m", "bendserver.cli", "info", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "forward: not converted into a graph, plays as a direct scripted call: prim::fork" in out
    assert "layer outputs (no method converted" in out


def test_bench_sets_the_converted_graph_against_the_direct_scripted_call(tmp_path, capsys):
    path = codec_file(tmp_path)
    assert main(["bench", "-m", str(path), "--block", "256", "--calls", "3", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["blocks"]["256"]["runs"]
    assert set(runs) == {
        "direct scripted call",
        "engine unbended (none)",
        "engine unbended (passes)",
    }
    assert runs["direct scripted call"]["ratio_p50"] == 1.0


def stored_bytes(file: Path) -> int:
    """The bytes of the tensors a TorchScript file stores."""
    return sum(i.file_size for i in zipfile.ZipFile(file).infolist() if "/data/" in i.filename)


def test_an_exported_bended_file_equals_the_engine_and_is_a_version(path, tmp_path):
    """export of a bended .ts: an activation op and a weight op on every weight inside, no
    warning, each weight stored once, loads and plays as the engine did block by block
    (without bendserver for the Codec), and is a version of the file it came from (its weights
    by their names)."""
    probe = engine_for(path)
    last = [n for n in probe.bended.weight_names if n.endswith("weight")][-1]
    config = tb.BendingConfig(
        (tb.Threshold(0.0, binary=False), inner_activation(probe)), (tb.Scale(0.5), r".*weight")
    )
    preset = Preset(name="bent", config=config.to_dict())
    out = tmp_path / "bended.ts"
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)
        export_model(path, out, preset=preset, block=probe.block)
    engine = tb.StreamEngine(path, block=probe.block, preset=preset, fuse=False)
    exported = torch.jit.load(str(out))
    blocks = inputs(engine, 4)
    for index, block in enumerate(blocks):
        torch.manual_seed(index)
        want = engine.process(block)
        torch.manual_seed(index)
        with torch.no_grad():
            got = exported(torch.from_numpy(block)[None])[0].numpy()
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=f"block {index}")
    if path.name == "codec.ts":
        _, alone = run_without_bendserver(out, blocks, {}, tmp_path)
        engine.request_reset()
        for got, block in zip(alone, blocks, strict=True):
            np.testing.assert_allclose(got, engine.process(block), atol=1e-5, rtol=0)
    # every weight stored once: the bended ones share their sources' storage until first use
    assert stored_bytes(out) <= 1.02 * stored_bytes(path) + 4096
    model = tb.load_model(path)
    tb.loader.add_versions(model, [out])
    bank = model.bended.weight_bank
    torch.testing.assert_close(bank.versions["bended"][last], 0.5 * bank.versions[path.stem][last])


def test_the_shipped_latent_preset_bends_wavae_between_encode_and_decode():
    """bendserver/presets/wavae_latent.json: RAVE VST's latent scale, bias and jitter as
    Scale/Bias on one dimension and fresh Noise per dimension on ``latent``."""
    engine = tb.StreamEngine("wavae", block=2048, preset="wavae_latent", fuse=False)
    assert sorted(engine.ops) == ["latent_bias", "latent_jitter", "latent_scale"]
    assert engine.bended.activation_shape("latent") == torch.Size([1, 8, 64])
    plain = tb.StreamEngine("wavae", block=2048, fuse=False)
    block = inputs(engine, 1)[0]
    assert np.abs(engine.process(block) - plain.process(block)).max() > 1e-3
    control = Controller(engine)
    control.dispatch("/bend/latent_scale/value", [1.0])
    control.dispatch("/bend/latent_bias/value", [0.0])
    control.dispatch("/bend/latent_jitter/std", [0.0])
    engine.process(block)
    engine.request_reset()
    plain.request_reset()
    np.testing.assert_allclose(engine.process(block), plain.process(block), atol=1e-6, rtol=0)


def test_the_banner_says_whether_the_method_is_converted(tmp_path):
    for path, line in (
        (codec_file(tmp_path), "torchscript forward() converted into a graph: every op bends it"),
        (
            nn_tilde_file(tmp_path, fork=True, name="fork.ts"),
            "torchscript forward() plays as a direct scripted call: prim::fork is not supported",
        ),
    ):
        options = ServeOptions(model=str(path), audio="null", osc_port=0, block=256)
        assert line in Server(options).banner()


def test_the_played_graph_calls_torchs_functions_where_the_name_picks_the_overload(tmp_path):
    """aten overloads become torch's functions and tensor methods (a Python frame less per
    call), slices indexing; an overload that a call by name could mistake
    (``aten.add.Scalar``: ``torch.add(x, 2, 1)`` is a deprecated form) stays; the graph plays
    as the direct scripted call."""
    path = codec_file(tmp_path)
    model = tb.load_model(path)
    model.bended.trace("forward", x=torch.zeros(1, 1, 256))
    gm = model.bended.build("forward", [])
    run_passes(gm, PYTHON_PASSES)  # the graph the last pass plays in TorchScript
    left = {n.target for n in gm.graph.nodes if compat.aten_name(n.target)}
    aten = torch.ops.aten
    gone = {aten.cat.default, aten.copy_.default, aten.leaky_relu.default, aten.tanh.default}
    assert not (gone | {aten.sigmoid.default, aten.slice.Tensor}) & left
    assert all(compat.aten_overload_ambiguous(target) for target in left), left
    assert compat.aten_overload_ambiguous(torch.ops.aten.add.Scalar)
    assert not compat.aten_overload_ambiguous(torch.ops.aten.add.Tensor)
    direct = torch.jit.load(str(path))
    for x in torch.randn(4, 1, 1, 256):
        with torch.inference_mode():
            torch.testing.assert_close(gm(x), direct(x), atol=1e-6, rtol=1e-6)
