"""nn~ TorchScript files: loaded with torch.jit.load, streamed by the engine exactly as a direct
scripted call, weights bended live, and clear refusals for what needs the Python model."""

import copy

import numpy as np
import pytest
import soundfile as sf
import torch
from torch import nn

import bendserver as tb
from bendserver.cli import main
from bendserver.control import Controller
from bendserver.presets.library import PresetLibrary

cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")


class Voice(nn.Module):
    """A small streaming audio model in nn~'s format: cached convolutions (their caches made by a
    first call, as RAVE's export does), ``forward_params``, ``get_methods``, ``sr`` and
    ``set_sample_rate``."""

    def __init__(self, fork: bool = False) -> None:
        super().__init__()
        cc.use_cached_conv(True)
        self.fork = fork  # runs its first layer as a forked task: a method that does not convert
        self.a = cc.Conv1d(1, 8, 5, padding=cc.get_padding(5, mode="causal"))
        self.b = cc.Conv1d(8, 1, 3, padding=cc.get_padding(3, mode="causal"))
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))
        self.sr = 44100
        self.level = 1.0

    @torch.jit.export
    def get_methods(self) -> list[str]:
        return ["forward"]

    @torch.jit.export
    def get_attributes(self) -> list[str]:
        return ["level"]

    @torch.jit.export
    def get_level(self) -> float:
        return self.level

    @torch.jit.export
    def set_level(self, level: float) -> int:
        self.level = level
        return 0

    @torch.jit.export
    def set_sample_rate(self, sr: int) -> int:
        self.sr = sr
        return 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.jit.wait(torch.jit.fork(self.a, x)) if self.fork else self.a(x)
        return self.b(torch.tanh(y)) * self.level


def voice(seed=0, fork=False):
    """A Voice with its caches made (as buffers, zeroed): what nn_tilde_file scripts."""
    torch.manual_seed(seed)
    model = Voice(fork).eval()
    with torch.no_grad():
        model(torch.zeros(1, 1, 64))  # the caches exist as buffers before scripting
        for buffer in model.buffers():
            if buffer.is_floating_point():
                buffer.zero_()
    return model


def nn_tilde_file(folder, seed=0, name="voice.ts", fork=False):
    """Script and save a Voice (``fork``: one whose forward does not convert into a graph);
    returns the path."""
    path = folder / name
    torch.jit.script(voice(seed, fork)).save(str(path))
    return path


def blocks(count=6, frames=256):
    signal = np.random.default_rng(3).standard_normal((1, frames * count)).astype(np.float32)
    return np.split(signal, count, axis=-1)


def test_a_file_streams_like_a_direct_scripted_call_and_resets_exactly(tmp_path):
    path = nn_tilde_file(tmp_path)
    engine = tb.StreamEngine(path, block=256, fuse=False)
    direct = torch.jit.load(str(path))
    assert engine.model.sample_rate == 44100 and engine.spec == tb.loader.MethodSpec(1, 1, 1, 1)
    first = [engine.process(b) for b in blocks()]
    with torch.no_grad():
        want = [direct(torch.from_numpy(b)[None])[0].numpy() for b in blocks()]
    for got, expected in zip(first, want, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)
    engine.request_reset()
    again = [engine.process(b) for b in blocks()]
    for got, expected in zip(again, first, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_weight_ops_bend_the_file_live(tmp_path):
    path = nn_tilde_file(tmp_path)
    engine = tb.StreamEngine(path, block=256, fuse=False)
    engine.add_op("w", tb.Scale(0.0), r"b\.weight")
    silent = engine.process(blocks()[0])
    bias = float(dict(torch.jit.load(str(path)).named_parameters())["b.bias"])
    np.testing.assert_allclose(silent, bias, atol=1e-6)  # the last layer's weights at 0
    engine.op("w").value = 1.0
    engine.process(blocks()[1])
    reference = tb.StreamEngine(path, block=256, fuse=False)
    reference.process(blocks()[0])
    reference.process(blocks()[1])
    np.testing.assert_allclose(
        engine.process(blocks()[2]), reference.process(blocks()[2]), atol=1e-6
    )


def test_versions_from_another_file_of_the_same_architecture_interpolate(tmp_path):
    path, other = nn_tilde_file(tmp_path), nn_tilde_file(tmp_path, seed=1, name="other.ts")
    engine = tb.StreamEngine(path, block=256, fuse=False)
    engine.bended.create_version("other", dict(torch.jit.load(str(other)).named_parameters()))
    engine.set_version("other")
    reference = tb.StreamEngine(other, block=256, fuse=False)
    for block in blocks(3):
        np.testing.assert_allclose(engine.process(block), reference.process(block), atol=1e-6)


def test_a_file_that_does_not_convert_plays_directly_and_says_why(tmp_path):
    path = nn_tilde_file(tmp_path, fork=True)
    engine = tb.StreamEngine(path, block=256, fuse=False)
    assert "prim::fork is not supported" in engine.bended.unconverted["forward"]
    with torch.no_grad():
        want = torch.jit.load(str(path))(torch.from_numpy(blocks()[0])[None])[0].numpy()
    np.testing.assert_allclose(engine.process(blocks()[0]), want, atol=1e-6)
    with pytest.raises(tb.BendingError, match="activation ops need the Python model"):
        engine.add_op("m", tb.Mask(0.5), "tanh")
    with pytest.raises(tb.BendingError, match="prim::fork is not supported"):
        engine.bended.trace(x=torch.zeros(1, 1, 256))
    (tmp_path / "bad.ts").write_bytes(b"not a zip")
    with pytest.raises(tb.BendingError, match="not a TorchScript file"):
        tb.load_model(tmp_path / "bad.ts")
    plain = torch.jit.script(copy.deepcopy(nn.Identity()))
    plain.save(str(tmp_path / "plain.ts"))
    with pytest.raises(tb.BendingError, match="no nn~ methods"):
        tb.load_model(tmp_path / "plain.ts")


def test_attributes_are_set_over_osc_at_a_block_boundary(tmp_path):
    engine = tb.StreamEngine(nn_tilde_file(tmp_path), block=256, fuse=False)
    control = Controller(engine)
    assert control.dispatch("/list", ["attributes"]) == [("/list/attributes", ["level"])]
    before = engine.process(blocks()[0])
    control.dispatch("/attr/level", [0.5])
    assert control.dispatch("/get/attr/level") == [("/get/attr/level", [0.5])]
    assert engine.model.module.get_level() == 1.0, "not before the block boundary"
    reference = tb.StreamEngine(nn_tilde_file(tmp_path, name="ref.ts"), block=256, fuse=False)
    reference.process(blocks()[0])
    np.testing.assert_allclose(engine.process(blocks()[1]), reference.process(blocks()[1]) * 0.5,
                               atol=1e-6)  # fmt: skip
    assert before.shape == (1, 256)
    with pytest.raises(tb.BendingError, match="no attribute 'volume'"):
        control.dispatch("/attr/volume", [1.0])
    with pytest.raises(tb.BendingError, match="takes a number"):
        control.dispatch("/attr/level", ["loud"])


def test_a_render_morphs_to_another_file_given_with_version(tmp_path, capsys):
    path, other = nn_tilde_file(tmp_path), nn_tilde_file(tmp_path, seed=1, name="other.ts")
    demo = str(tb.load_model("drive").demo)
    score = tmp_path / "score.txt"
    score.write_text("0 /version other\n")
    common = ["render", demo, "--no-fuse", "-p", "none"]
    assert main([*common, "-m", str(path), "--add-version", str(other), "--score", str(score),
                 "-o", str(tmp_path / "morphed.wav")]) == 0  # fmt: skip
    assert main([*common, "-m", str(other), "-o", str(tmp_path / "other.wav")]) == 0
    morphed = sf.read(str(tmp_path / "morphed.wav"), dtype="float32")[0]
    np.testing.assert_allclose(morphed, sf.read(str(tmp_path / "other.wav"), dtype="float32")[0],
                               atol=1e-6)  # fmt: skip
    capsys.readouterr()
    # the old spelling, --version FILE, still works for one release and says it is deprecated
    missing = [*common, "-m", str(path), "--version", "missing.ts", "-o", str(tmp_path / "x.wav")]
    assert main(missing) == 2
    err = capsys.readouterr().err
    assert "--version FILE is deprecated" in err and "use --add-version FILE" in err
    assert "--add-version: no file missing.ts" in err


def test_files_are_versions_by_their_names_and_presets_fit_any_file_of_the_architecture(tmp_path):
    """docs/torchscript.md's morph: ``-m strings.ts --add-version percussion.ts``, then ``/interp
    strings 0.5 percussion 0.5``. A preset saved for one file loads on a renamed copy and on
    another file of the same architecture, and plays there as it did; on a model without what
    it bends it is refused, naming what is missing."""
    strings = nn_tilde_file(tmp_path, name="strings.ts")
    percussion = nn_tilde_file(tmp_path, seed=1, name="percussion.ts")
    model = tb.load_model(strings)
    tb.loader.add_versions(model, [percussion])
    engine = tb.StreamEngine(model, block=256, fuse=False)
    assert engine.versions == ["strings", "percussion"]
    with pytest.raises(tb.BendingError, match="has a version 'strings' already"):
        tb.loader.add_versions(model, [tmp_path / "strings.ts"])
    control = Controller(engine)
    control.dispatch("/bend/add", ["quiet", "Scale", r"b\.weight", "value", 0.5])
    control.dispatch("/bend/add", ["mask", "Mask", "a", "prob", 0.5, "dim", 1, "seed", 3])
    library = PresetLibrary(tmp_path / "presets")
    library.save(engine.preset("ravelive"))
    control.dispatch("/interp", ["strings", 0.5, "percussion", 0.5])
    assert dict(engine.state.interpolation) == {"strings": 0.5, "percussion": 0.5}
    played = [engine.process(block) for block in blocks(2)][-1]
    renamed = tmp_path / "renamed_rave.ts"
    renamed.write_bytes(strings.read_bytes())
    for other in (renamed, percussion):
        loaded = tb.StreamEngine(other, block=256, fuse=False, preset=library.load("ravelive"))
        assert sorted(loaded.ops) == ["mask", "quiet"]
    again = tb.StreamEngine(renamed, block=256, fuse=False, preset=library.load("ravelive"))
    again.bended.create_version(
        "percussion", dict(torch.jit.load(str(percussion)).named_parameters())
    )
    again.set_interpolation({"renamed_rave": 0.5, "percussion": 0.5})
    np.testing.assert_allclose([again.process(b) for b in blocks(2)][-1], played, atol=1e-6)
    with pytest.raises(tb.BendingError) as refused:
        tb.StreamEngine("drive", block=256, preset=library.load("ravelive"))
    message = str(refused.value)
    assert "preset 'ravelive' does not fit model 'drive'" in message
    assert "'a'" in message and "b.weight" in message and "is called" in message


FOLDING = [
    ("a", lambda: tb.Mask(0.5, dim=1, seed=4), {"prob": 0.8}),
    ("a", lambda: tb.Scale(-0.7), {"value": 1.5}),
    ("a", lambda: tb.Bias(0.3), {"value": -0.2}),
    ("b", lambda: tb.Affine(2.0, -0.1), {"scale": 0.5}),
    ("a", lambda: tb.Invert(0.5, dim=1, seed=2), {"prob": 1.0}),
    ("a", lambda: tb.Mask(0.5, dim=1, seed=1) >> tb.Affine(1.5, 0.2), {}),
]


@pytest.mark.parametrize(("layer", "make", "change"), FOLDING)
def test_per_channel_activation_ops_fold_into_the_layer_weights_live(tmp_path, layer, make, change):
    """An op on a layer's output of a .ts streams like eager PyTorch with the op on that output
    (the Python model, a forward hook), before and after a live parameter change."""
    engine = tb.StreamEngine(nn_tilde_file(tmp_path, fork=True), block=256, fuse=False)
    op, reference_op = make(), make()
    engine.add_op("fold", op, layer)
    model = voice()
    state = reference_op.init_state(layer, torch.Size([1, 8 if layer == "a" else 1, 256]),
                                    torch.float32, "cpu")  # fmt: skip
    getattr(model, layer).register_forward_hook(lambda m, i, out: reference_op.apply(out, state))
    for index, block in enumerate(blocks()):
        if index == 3:
            for name, value in change.items():
                engine.set_param("fold", name, value)
                reference_op.set(name, value)
        with torch.no_grad():
            want = model(torch.from_numpy(block)[None])[0].numpy()
        np.testing.assert_allclose(engine.process(block), want, atol=1e-5, err_msg=f"block {index}")
    assert engine.bended.weight_bank.pending == {}, "applied through the engine's swaps"


def test_folds_act_after_weight_ops_and_go_when_removed(tmp_path):
    path = nn_tilde_file(tmp_path, fork=True)
    engine = tb.StreamEngine(path, block=256, fuse=False)
    engine.add_op("fold", tb.Bias(0.5), "b")
    engine.add_op("w", tb.Scale(0.0), r"b\.(weight|bias)")  # given after, acts before the fold
    np.testing.assert_allclose(engine.process(blocks()[0]), 0.5, atol=1e-6)
    engine.remove_op("fold")
    engine.remove_op("w")
    reference = tb.StreamEngine(path, block=256, fuse=False)
    reference.process(blocks()[0])
    np.testing.assert_allclose(engine.process(blocks()[1]), reference.process(blocks()[1]),
                               atol=1e-6)  # fmt: skip


def test_grouped_transposed_and_linear_layers_fold_exactly():
    """BendedModule on a scripted module (no engine): folds into ConvTranspose1d with groups
    (weight [in, out / groups, k]) and Linear (channels last) equal eager hooks."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose1d(4, 6, 4, stride=2, groups=2)
            self.lin = nn.Linear(6, 3)

        def forward(self, x):
            return self.lin(torch.tanh(self.up(x)).transpose(1, 2))

    torch.manual_seed(0)
    model = Net().eval()
    bended = tb.BendedModule(torch.jit.script(copy.deepcopy(model)))
    assert {n: (f.kind, f.channels) for n, f in bended.fold_layers.items()} == {
        "up": ("ConvTranspose1d", 6),
        "lin": ("Linear", 3),
    }
    x = torch.randn(1, 4, 10)
    with torch.no_grad():
        plain = model(x)
    for layer, op in [("up", tb.Mask(0.5, dim=1, seed=3)), ("lin", tb.Invert(0.5, dim=-1))]:
        bended.reset()
        bended.bend(op, layer)
        hook = getattr(model, layer).register_forward_hook(
            lambda m, i, out, op=op, layer=layer: op.apply(
                out, op.init_state(layer, out.shape, out.dtype, out.device)
            )
        )
        with torch.no_grad():
            torch.testing.assert_close(bended(x), model(x), atol=1e-6, rtol=0)
            assert not torch.allclose(bended(x), plain), "the op changes the output"
        hook.remove()


def test_an_op_that_does_not_fold_is_refused_naming_those_that_do(tmp_path):
    engine = tb.StreamEngine(nn_tilde_file(tmp_path, fork=True), block=256)
    with pytest.raises(
        tb.BendingError,
        match=r"cannot bend 'a' of a TorchScript file.*Affine, "
        r"Bias, Invert, Mask.*Python model to bend activations with any op",
    ):
        engine.add_op("lfo", tb.Oscillate(), "a")  # fmt: skip
    assert engine.state.ops == ()


def test_a_field_op_without_a_channel_dim_is_refused(tmp_path):
    engine = tb.StreamEngine(nn_tilde_file(tmp_path, fork=True), block=256)
    with pytest.raises(tb.BendingError, match="must act per channel: give it dim=1"):
        engine.add_op("mask", tb.Mask(0.5), "a")


def test_an_offset_on_a_layer_without_bias_is_refused():
    class NoBias(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 2, 1, bias=False)
            self.register_buffer("forward_params", torch.tensor([1, 1, 2, 1]))

        def forward(self, x):
            return self.conv(x)

    bended = tb.BendedModule(torch.jit.script(NoBias()))
    with pytest.raises(tb.BendingError, match="adds an offset to 'conv', a layer without a bias"):
        bended.bend(tb.Bias(0.1), "conv")
    bended.bend(tb.Scale(0.0), "conv")  # no offset: folds
    assert torch.count_nonzero(bended(torch.ones(1, 1, 4))) == 0


def test_a_key_that_is_no_layer_output_is_refused_naming_the_folding_ops(tmp_path):
    engine = tb.StreamEngine(nn_tilde_file(tmp_path, fork=True), block=256)
    with pytest.raises(
        tb.BendingError,
        match=r"layers' outputs with Affine, Bias, Invert, Mask.*"
        "other activation ops need the Python model",
    ):
        engine.add_op("m", tb.Mask(0.5, dim=1), "tanh")  # fmt: skip


class Remade(nn.Module):
    """A file whose method remakes its buffer (as nn~'s audio features example does) and runs a
    forked task: a direct scripted call, whose buffer a played block makes."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("past", torch.zeros(1, 1, 4))
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.past.shape[0] != x.shape[0]:
            self.past = torch.zeros(x.shape[0], x.shape[1], 4)
        y = torch.jit.wait(torch.jit.fork(torch.cat, [self.past, x], -1))[..., :-4]
        self.past = x[..., -4:]
        return y


def test_a_method_remaking_its_buffers_in_a_block_traces_again_for_more_streams(tmp_path):
    path = tmp_path / "remade.ts"
    torch.jit.script(Remade()).save(str(path))
    engine = tb.StreamEngine(path, block=256, fuse=False)
    x = blocks(2)
    engine.process(x[0])  # its buffer is now one the block made (an inference tensor)
    engine.set_streams(2)
    out = engine.process(np.concatenate([x[1], x[1]]))
    direct = torch.jit.load(str(path))
    with torch.no_grad():
        want = direct(torch.from_numpy(np.stack([x[1], x[1]])))[:, 0].numpy()
    np.testing.assert_array_equal(out, want)
