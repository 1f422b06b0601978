"""A TorchScript file's latency: measured at load, reported by info, the banner and bench, equal
to the first output sample an impulse through the engine changes, renders aligned to it and as
long as their input, and ``--latency N`` overriding it.

Small nn~ files built here from cached_conv's streaming layers always run; real RAVE exports
run where ``BENDSERVER_RAVE_DIR`` names a folder holding ``rave_v2_streaming.ts`` and
``rave_causal_streaming.ts``.
"""

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from torch import nn

import bendserver as tb
from bendserver.cli import build_parser, main
from bendserver.passes.pipeline import PASSES, run_passes
from bendserver.tracing.latency import measure_latency

cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")

RATE = 44100


class Frames(nn.Module):
    """A RAVE-like nn~ file in miniature: a delay line (as a filter bank's), centered cached
    convolutions, down by 4 and up by 4 (a frame-based stream), random weights."""

    def __init__(self) -> None:
        super().__init__()
        cc.use_cached_conv(True)
        self.delay = cc.CachedPadding1d(100, crop=True)
        self.pre = cc.Conv1d(1, 4, 5, padding=cc.get_padding(5))
        self.down = cc.Conv1d(4, 8, 8, stride=4, padding=cc.get_padding(8, 4))
        self.up = cc.ConvTranspose1d(8, 4, 8, stride=4, padding=2)
        self.post = cc.Conv1d(4, 1, 7, padding=cc.get_padding(7, dilation=3), dilation=3)
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))
        self.sr = RATE

    @torch.jit.export
    def get_methods(self) -> list[str]:
        return ["forward"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(torch.tanh(self.up(torch.tanh(self.down(self.pre(self.delay(x)))))))


class Centered(nn.Module):
    """Two centered cached convolutions whose weights are their centre taps: the stream is the
    input delayed by cached_conv's cumulative delay (2 + 30 samples), as a trained model's
    content is."""

    def __init__(self) -> None:
        super().__init__()
        cc.use_cached_conv(True)
        self.a = cc.Conv1d(1, 4, 5, padding=cc.get_padding(5))
        delay = self.a.cumulative_delay
        self.b = cc.Conv1d(
            4, 1, 7, padding=cc.get_padding(7, dilation=10), dilation=10, cumulative_delay=delay
        )
        with torch.no_grad():
            for conv in (self.a, self.b):
                conv.weight.zero_()
                conv.weight[:, :, conv.kernel_size[0] // 2] = 1 / conv.in_channels
                conv.bias.zero_()
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))
        self.sr = RATE

    @torch.jit.export
    def get_methods(self) -> list[str]:
        return ["forward"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def script(model: nn.Module, path: Path) -> Path:
    """Make the caches (a first call, as RAVE's export does), zero them, script and save."""
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 1, 64))
        for buffer in model.buffers():
            if buffer.is_floating_point():
                buffer.zero_()
    torch.jit.script(model).save(str(path))
    return path


def impulse_onset(engine: tb.StreamEngine, at: int = 0, blocks: int = 8) -> int | None:
    """Samples from an impulse at sample ``at`` to the first output sample that differs from
    the output of silence, both from the state as loaded with the same random seed."""
    frames = engine.block * blocks
    silence = np.zeros((1, frames), np.float32)
    impulse = silence.copy()
    impulse[0, at] = 1.0
    outputs = []
    for signal in (silence, impulse):
        engine.reset_state()
        torch.manual_seed(0)
        outputs.append(np.concatenate(list(engine.stream(signal)), -1))
    changed = np.flatnonzero(outputs[0][0] != outputs[1][0])
    return int(changed[0]) - at if len(changed) else None


@pytest.fixture(scope="module")
def frames_file(tmp_path_factory):
    return script(Frames(), tmp_path_factory.mktemp("latency") / "frames.ts")


@pytest.fixture(scope="module")
def centered_file(tmp_path_factory):
    return script(Centered(), tmp_path_factory.mktemp("latency") / "centered.ts")


def played_dependence(path: Path, block: int) -> int | None:
    """The first output sample that an impulse's sample changes through the graph the engine
    plays (the file's ``forward`` converted and rewritten by the passes; the latency at load
    differentiates the scripted call instead). The passes that write results into buffers of
    their own (``out=``: no forward derivative) and the native runs (C) are left out: they
    compute what the graph they rewrite does, in place."""
    model = tb.load_model(path, latency=0)
    model.bended.trace("forward", x=torch.zeros(1, 1, block))
    graph = model.bended.build("forward", [])
    in_place = {"preallocated-cache", "fixed-rows", "native-runs", "scripted-runs"}
    run_passes(graph, [step for step in PASSES if step.name not in in_place])
    return measure_latency(graph, "forward", 1, block, model.sample_rate)


def test_a_files_latency_is_what_an_impulse_through_the_engine_measures(frames_file):
    engine = tb.StreamEngine(frames_file, block=256, fuse=False)
    assert engine.model.latency_source.startswith("measured at load")
    assert engine.latency > 0
    assert impulse_onset(engine) == engine.latency == played_dependence(frames_file, 256)


def test_a_centered_stream_is_late_by_cached_convs_cumulative_delay(centered_file):
    engine = tb.StreamEngine(centered_file, block=256, fuse=False)
    assert engine.latency == 32 == Centered().b.cumulative_delay
    signal = np.zeros((1, 1024), np.float32)
    signal[0, 100] = 1.0
    out = np.concatenate(list(engine.stream(signal)), -1)
    assert int(np.argmax(np.abs(out[0]))) == 100 + engine.latency


def test_a_files_latency_is_measured_once_and_kept_for_its_digest(tmp_path, monkeypatch):
    """Measuring a RAVE export's latency took 2 of its 4 s to start: a file loaded again is not
    measured again (nor is a copy of it); a file rewritten is."""
    import bendserver.loader as loader

    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path / "home"))
    first = script(Centered(), tmp_path / "a.ts")
    model = tb.load_model(first)
    assert (model.latency, model.latency_source) == (32, "measured at load")
    measured = []
    monkeypatch.setattr(loader, "measure_latency", lambda *args: measured.append(args) or 5)
    copy = tmp_path / "copy.ts"
    copy.write_bytes(first.read_bytes())
    for path in (first, copy):
        model = tb.load_model(path)
        assert (model.latency, model.latency_source) == (32, "measured at load, kept for this file")
    assert not measured
    script(Frames(), first)  # another model written over the file
    assert tb.load_model(first).latency == 5 and len(measured) == 1


def test_measuring_leaves_the_stream_and_the_random_state_as_loaded(frames_file):
    measured = tb.StreamEngine(frames_file, block=256, fuse=False)
    given = tb.StreamEngine(tb.load_model(frames_file, latency=0), block=256, fuse=False)
    assert given.latency == 0 and given.model.latency_source == "given"
    signal = np.random.default_rng(0).standard_normal((1, 256 * 4)).astype(np.float32)
    for a, b in zip(measured.stream(signal), given.stream(signal), strict=True):
        np.testing.assert_array_equal(a, b)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    measure_latency(given.model.module, "forward", 1, 256, RATE)
    assert torch.equal(torch.rand(3), expected)


def test_a_render_is_aligned_and_as_long_as_its_input(centered_file, tmp_path):
    source = tmp_path / "click.wav"
    signal = np.zeros(3000, np.float32)
    signal[[10, 2990]] = 0.5  # the last one comes out only if the latency was played past
    sf.write(source, signal, RATE, subtype="FLOAT")
    common = ["render", str(source), "-m", str(centered_file), "--no-fuse", "--trust-model"]
    assert main([*common, "-o", str(tmp_path / "out.wav")]) == 0
    out, rate = sf.read(tmp_path / "out.wav", dtype="float32")
    assert rate == RATE and len(out) == len(signal)
    np.testing.assert_allclose(out, signal, atol=1e-6)
    assert main([*common, "--keep-latency", "-o", str(tmp_path / "kept.wav")]) == 0
    kept, _ = sf.read(tmp_path / "kept.wav", dtype="float32")
    assert len(kept) == len(signal) + 32
    np.testing.assert_allclose(kept[32:], signal, atol=1e-6)


def test_latency_given_overrides_the_measurement_on_every_command(centered_file, tmp_path, capsys):
    assert main(["info", str(centered_file), "--trust-model"]) == 0
    assert "latency 32 samples (measured at load" in capsys.readouterr().out
    assert main(["info", str(centered_file), "--trust-model", "--latency", "7"]) == 0
    assert "latency 7 samples (given)" in capsys.readouterr().out
    source = tmp_path / "click.wav"
    signal = np.zeros(1000, np.float32)
    signal[100] = 0.5
    sf.write(source, signal, RATE, subtype="FLOAT")
    out = tmp_path / "out.wav"
    args = ["render", str(source), "-m", str(centered_file), "--no-fuse", "--trust-model"]
    assert main([*args, "--latency", "0", "-o", str(out)]) == 0
    assert int(np.argmax(sf.read(out)[0])) == 100 + 32  # not trimmed: the latency given is 0
    parser = build_parser()
    for command in (["serve"], ["render", "in.wav", "-o", "o.wav"], ["info"], ["bench"],
                    ["export", "m", "-o", "o.ts"], ["stress"]):  # fmt: skip
        assert parser.parse_args([*command, "--latency", "5"]).latency == 5
    with pytest.raises(SystemExit):
        main(["info", str(centered_file), "--latency", "-3"])
    assert "a number of at least 0 is expected, got -3" in capsys.readouterr().err
    with pytest.raises(tb.BendingError, match="a latency is a whole number of samples from 0"):
        tb.load_model(centered_file, latency=-1)


def test_the_banner_and_stats_say_the_models_latency(centered_file):
    from bendserver.serve import ServeOptions, Server

    options = ServeOptions(
        model=str(centered_file), audio="null", osc_port=0, oscquery_port=0, zeroconf=False
    )
    with Server(options) as server:
        assert server.latency == 32
        assert (
            "latency    32 samples (0.73 ms) before the device's own: the model's 32 (measured "
            "at load" in server.banner()
        )
        stats = server.stats()
        assert stats["latency"] == 32 and stats["latency_ms"] == pytest.approx(1e3 * 32 / 44100)
        assert stats["path_latency_ms"] == 0, "the direct path adds nothing to the model's"


def test_the_probe_says_why_it_could_not_measure():
    class Silent(nn.Module):  # the output does not depend on the input
        def forward(self, x):
            return torch.zeros_like(x)

    assert measure_latency(Silent(), "forward", 1, 256, 1000) is None


RAVE_DIR = os.environ.get("BENDSERVER_RAVE_DIR")
RAVE_FILES = ("rave_v2_streaming.ts", "rave_causal_streaming.ts")


@pytest.mark.skipif(not RAVE_DIR, reason="BENDSERVER_RAVE_DIR names no folder of RAVE exports")
@pytest.mark.parametrize("name", RAVE_FILES)
def test_a_rave_exports_latency_is_reported_and_nothing_comes_out_before_it(name, tmp_path):
    path = Path(RAVE_DIR) / name
    if not path.is_file():
        pytest.skip(f"no {path}")
    engine = tb.StreamEngine(path, block=2048, fuse=False)
    assert engine.model.latency_source.startswith("measured at load") and engine.latency > 2048
    onset = impulse_onset(engine)
    # the impulse changes nothing before the latency; where an untrained RAVE's response first
    # shows depends on its random weights (its first samples, ~1e-9, can stay below float
    # resolution for more than a block, and the rewritten graph rounds them otherwise)
    assert onset is not None and engine.latency <= onset
    # to the sample by the definition documented (the first sample the input can change):
    # through the graph the engine plays, converted and optimised
    assert played_dependence(path, engine.block) == engine.latency
    source = tmp_path / "in.wav"
    sf.write(source, np.zeros(RATE, np.float32), RATE, subtype="FLOAT")
    assert main(["render", str(source), "-m", str(path), "--trust-model", "-o",
                 str(tmp_path / "out.wav")]) == 0  # fmt: skip
    assert sf.info(tmp_path / "out.wav").frames == RATE
