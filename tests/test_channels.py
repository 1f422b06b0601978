"""Channels and rates as musicians expect them: a stereo 44.1 kHz file stays stereo 44.1 kHz
(one stream of the mono model per channel, each equal to that channel rendered alone), the
latency is trimmed, the subtype kept, folders render, ``engine(audio, sr)`` plays a whole
signal, and a live server plays stereo through the audio processors."""

import textwrap
import time

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import save_file
from streaming import CausalStack, twin
from test_torchscript import nn_tilde_file

import bendserver as tb
from bendserver.cli import main
from bendserver.render.offline import render_file
from bendserver.serve import ServeOptions, Server

RATE = 44100


def _stereo(path, seconds=0.5, rate=RATE, subtype="FLOAT"):
    """Two different channels (noise, and a louder sine) written to ``path``; [2, frames]."""
    frames = int(seconds * rate)
    rng = np.random.default_rng(4)
    left = 0.3 * rng.standard_normal(frames)
    right = 0.6 * np.sin(2 * np.pi * 220 * np.arange(frames) / rate)
    audio = np.stack([left, right]).astype(np.float32)
    sf.write(str(path), audio.T, rate, subtype=subtype)
    return audio


def _read(path):
    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    return audio.T, rate


@pytest.mark.parametrize("model", ["drive", "wavae"])
def test_each_channel_equals_that_channel_rendered_alone(tmp_path, model):
    audio = _stereo(tmp_path / "song.wav")
    render = ["render", "-m", model, "-o"]  # the model's preset: a mask, an LFO, noise
    assert main([*render, str(tmp_path / "o.wav"), str(tmp_path / "song.wav")]) == 0
    out, rate = _read(tmp_path / "o.wav")
    assert out.shape == audio.shape and rate == RATE
    assert np.abs(out[0] - out[1]).max() > 0.1, "the channels are not mixed together"
    for channel in range(2):
        alone = tmp_path / f"alone{channel}.wav"
        sf.write(str(alone), audio[channel], RATE, subtype="FLOAT")
        assert main([*render, str(tmp_path / f"a{channel}.wav"), str(alone)]) == 0
        # a batch of two convolved by oneDNN rounds apart from one: 1e-6 of each sample
        want = _read(tmp_path / f"a{channel}.wav")[0][0]
        np.testing.assert_allclose(out[channel], want, atol=1e-6, rtol=1e-6)


def test_subtype_kept_in_its_own_format_else_the_formats_default(tmp_path):
    _stereo(tmp_path / "in24.wav", subtype="PCM_24")
    assert main(["render", str(tmp_path / "in24.wav"), "-o", str(tmp_path / "out.wav")]) == 0
    assert main(["render", str(tmp_path / "in24.wav"), "-o", str(tmp_path / "out.flac")]) == 0
    info = sf.info(str(tmp_path / "out.wav"))
    assert (info.subtype, info.channels, info.samplerate, info.frames) == (
        "PCM_24",
        2,
        RATE,
        RATE // 2,
    )
    assert sf.info(str(tmp_path / "out.flac")).subtype == "PCM_24"
    sf.write(str(tmp_path / "in16.flac"), np.zeros((1000, 1), np.float32), RATE, subtype="PCM_16")
    assert main(["render", str(tmp_path / "in16.flac"), "-o", str(tmp_path / "o16.flac")]) == 0
    assert main(["render", str(tmp_path / "in16.flac"), "-o", str(tmp_path / "o16.wav")]) == 0
    assert sf.info(str(tmp_path / "o16.flac")).subtype == "PCM_16"
    assert sf.info(str(tmp_path / "o16.wav")).subtype == "FLOAT"


def test_mono_mixes_down_and_sr_chooses_the_rate(tmp_path):
    audio = _stereo(tmp_path / "song.wav")
    sf.write(str(tmp_path / "mix.wav"), audio.mean(axis=0), RATE, subtype="FLOAT")
    assert (
        main(["render", str(tmp_path / "song.wav"), "--mono", "-o", str(tmp_path / "m.wav")]) == 0
    )
    assert main(["render", str(tmp_path / "mix.wav"), "-o", str(tmp_path / "mix_out.wav")]) == 0
    mono, rate = _read(tmp_path / "m.wav")
    assert mono.shape == (1, audio.shape[-1]) and rate == RATE
    np.testing.assert_allclose(mono, _read(tmp_path / "mix_out.wav")[0], atol=1e-6)
    assert (
        main(
            ["render", str(tmp_path / "song.wav"), "--sr", "48000", "-o", str(tmp_path / "48.wav")]
        )
        == 0
    )
    at48, rate = _read(tmp_path / "48.wav")
    assert rate == 48000 and at48.shape == (2, 24000)


class Delay(torch.nn.Module):
    """Delays its input by ``LATENCY`` samples (a cache with one row per stream), times a gain."""

    def __init__(self, latency=100):
        super().__init__()
        self.gain = torch.nn.Conv1d(1, 1, 1, bias=False)
        torch.nn.init.ones_(self.gain.weight)
        self.register_buffer("cache", torch.zeros(1, 1, latency), persistent=False)

    def forward(self, x):
        if self.cache.shape[0] != x.shape[0]:
            self.cache = self.cache.new_zeros(x.shape[0], *self.cache.shape[1:])
        padded = torch.cat([self.cache, x], -1)
        self.cache.copy_(padded[..., -self.cache.shape[-1] :])
        return self.gain(padded[..., : x.shape[-1]])


def _delay_model(folder):
    folder.mkdir()
    (folder / "model.py").write_text(
        "import torch\n\n" + textwrap.dedent(__import__("inspect").getsource(Delay))
    )
    save_file(dict(Delay().state_dict()), str(folder / "default.safetensors"))
    (folder / "manifest.toml").write_text(
        'name = "delay"\nsample_rate = 48000\nblock = 256\nlatency = 100\n'
        'class = "model.py:Delay"\n[versions]\ndefault = "default.safetensors"\n'
    )
    return folder


def test_latency_is_trimmed_unless_kept(tmp_path):
    model = _delay_model(tmp_path / "delay")
    audio = _stereo(tmp_path / "in.wav", rate=48000)
    common = ["render", str(tmp_path / "in.wav"), "-m", str(model), "--no-fuse", "-p", "none"]
    assert main([*common, "-o", str(tmp_path / "trimmed.wav")]) == 0
    assert main([*common, "--keep-latency", "-o", str(tmp_path / "kept.wav")]) == 0
    trimmed, kept = _read(tmp_path / "trimmed.wav")[0], _read(tmp_path / "kept.wav")[0]
    np.testing.assert_array_equal(trimmed, audio)  # aligned with the input, as long
    assert kept.shape == (2, audio.shape[-1] + 100)
    np.testing.assert_array_equal(kept[:, :100], 0.0)
    np.testing.assert_array_equal(kept[:, 100:], audio)


def test_a_folder_renders_into_a_folder(tmp_path, capsys):
    (tmp_path / "songs").mkdir()
    _stereo(tmp_path / "songs" / "a.wav")
    sf.write(str(tmp_path / "songs" / "b.flac"), np.zeros(4800, np.float32), 48000)
    (tmp_path / "songs" / "notes.txt").write_text("not a sound")
    assert main(["render", str(tmp_path / "songs"), "-o", str(tmp_path / "out")]) == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == [".bendserver-render.json", "a.wav", "b.wav"]  # the manifest, the files
    a, b = sf.info(str(tmp_path / "out" / "a.wav")), sf.info(str(tmp_path / "out" / "b.wav"))
    assert (a.channels, a.samplerate, b.channels, b.samplerate) == (2, RATE, 1, 48000)
    assert "out/a.wav (0.50 s, 2 ch" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["render", str(tmp_path / "empty"), "-o", str(tmp_path / "x")]) == 2
    assert "no sound files" in capsys.readouterr().err


def test_the_obvious_call_takes_numpy_or_tensors_of_any_length():
    engine = tb.StreamEngine("drive", block=256, streams=2)
    reference = tb.StreamEngine("drive", block=256, streams=2)
    rng = np.random.default_rng(5)
    stereo = (0.3 * rng.standard_normal((2, 1000))).astype(np.float32)
    out = engine(stereo, 48000)
    assert isinstance(out, np.ndarray) and out.shape == (2, 1000) and out.dtype == np.float32
    streamed = np.concatenate(list(reference.stream(stereo)), axis=-1)
    np.testing.assert_array_equal(out, streamed)
    again = engine(torch.from_numpy(stereo).double(), 48000)  # reset: the same again
    assert isinstance(again, torch.Tensor) and again.dtype == torch.float64
    np.testing.assert_allclose(again.numpy(), out, atol=1e-6)
    at44 = engine(stereo, 44100)
    assert at44.shape == (2, 1000) and np.abs(at44 - out).max() > 1e-3
    mono = tb.StreamEngine("drive", block=256)
    signal = mono(stereo[0], 48000)
    assert signal.shape == (1000,)
    np.testing.assert_allclose(signal, out[0], atol=1e-6)
    with pytest.raises(tb.BendingError, match="make it without streams"):
        tb.StreamEngine("drive", block=256, streams=1)(stereo, 48000)


def test_an_engine_made_without_streams_plays_the_channels_it_is_given(tmp_path):
    """pedalboard's ``board(audio, sr)``: each channel its own stream, equal to that channel
    played alone; the batch is built again when the count changes (reset=True only)."""
    engine = tb.StreamEngine("drive")
    stereo = _stereo(tmp_path / "song.wav")
    out = engine(stereo, RATE)
    assert out.shape == stereo.shape and out.dtype == np.float32
    for channel in range(2):
        alone = tb.StreamEngine("drive")(stereo[channel], RATE)
        np.testing.assert_allclose(out[channel], alone, atol=1e-6, rtol=0)
    assert engine.streams == 2 and engine.in_channels == 2
    three = engine(np.concatenate([stereo, stereo[:1]]), RATE)
    np.testing.assert_allclose(three[2], out[0], atol=1e-6, rtol=0)
    with pytest.raises(tb.BendingError, match="reset=True starts a stream"):
        engine(stereo, RATE, reset=False)
    np.testing.assert_allclose(engine(stereo[1], RATE), out[1], atol=1e-6, rtol=0)
    rendered = tb.StreamEngine("drive", preset="drive")
    render_file(rendered, tmp_path / "song.wav", tmp_path / "out.wav")
    fixed = tb.StreamEngine("drive", preset="drive", streams=2)
    render_file(fixed, tmp_path / "song.wav", tmp_path / "fixed.wav")
    got, want = _read(tmp_path / "out.wav")[0], _read(tmp_path / "fixed.wav")[0]
    assert got.shape == (2, stereo.shape[1])
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_reset_false_continues_the_stream():
    engine = tb.StreamEngine("drive", block=256)
    signal = (0.3 * np.random.default_rng(6).standard_normal(2048)).astype(np.float32)
    whole = engine(signal, 48000)
    first, second = engine(signal[:1024], 48000), engine(signal[1024:], 48000, reset=False)
    np.testing.assert_allclose(np.concatenate([first, second]), whole, atol=1e-6)
    fresh = engine(signal[1024:], 48000)
    assert np.abs(fresh - second).max() > 1e-4, "reset=True starts a new stream"


def test_a_model_whose_state_has_one_row_is_refused_with_several_streams():
    with pytest.raises(tb.BendingError, match="cannot play 2 streams at once.*--mono"):
        tb.StreamEngine(twin(CausalStack)[0], block=256, streams=2)
    with pytest.raises(tb.BendingError, match="streams"):
        tb.StreamEngine("drive", streams=0)
    module, reference = twin(CausalStack)
    engine = tb.StreamEngine(module, block=256)
    signal = np.random.default_rng(2).standard_normal((2, 512)).astype(np.float32)
    with pytest.raises(tb.BendingError, match="cannot play 2 streams at once"):
        engine(signal, 48000)
    assert engine.streams == 1, "it keeps playing one stream"
    want = tb.StreamEngine(reference, block=256)(signal[0], 48000)
    np.testing.assert_allclose(engine(signal[0], 48000), want, atol=1e-6)


def test_streams_have_their_own_state_and_reset_restores_it():
    engine = tb.StreamEngine("wavae", block=256, streams=2, fuse=False)
    alone = tb.StreamEngine("wavae", block=256, fuse=False)
    rng = np.random.default_rng(7)
    blocks = [(0.3 * rng.standard_normal((2, 256))).astype(np.float32) for _ in range(4)]
    outputs = [engine.process(b) for b in blocks]
    for channel in range(2):
        alone.reset_state()
        for block, out in zip(blocks, outputs, strict=True):
            np.testing.assert_allclose(
                out[channel], alone.process(block[channel : channel + 1])[0], atol=1e-6
            )
    engine.reset_state()
    np.testing.assert_array_equal(engine.process(blocks[0]), outputs[0])


def test_cached_conv_models_stream_several_channels():
    cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")
    cc.use_cached_conv(True)

    class Voice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = cc.Conv1d(1, 8, 5, padding=cc.get_padding(5, mode="causal"))
            self.b = cc.Conv1d(8, 1, 3, padding=cc.get_padding(3, mode="causal"))

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    torch.manual_seed(1)
    first, second = Voice().eval(), Voice().eval()
    second.load_state_dict(first.state_dict())
    stereo = tb.StreamEngine(first, block=256, streams=2, fuse=False)
    mono = tb.StreamEngine(second, block=256, fuse=False)
    signal = np.random.default_rng(8).standard_normal((2, 256 * 4)).astype(np.float32)
    out = stereo(signal, 48000)
    for channel in range(2):
        np.testing.assert_allclose(out[channel], mono(signal[channel], 48000), atol=1e-6)


class OneRow(torch.nn.Module):
    """An nn~ file whose cache has one row: it cannot take a batch of streams."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 1, 5)
        self.register_buffer("cache", torch.zeros(1, 1, 4))
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))
        self.sr = 48000

    @torch.jit.export
    def get_methods(self) -> list[str]:
        return ["forward"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = torch.cat([self.cache, x], -1)
        self.cache.copy_(padded[..., -4:])
        return self.conv(padded)


def test_torchscript_files_take_several_streams_or_are_refused(tmp_path):
    path = nn_tilde_file(tmp_path)  # cached_conv's caches have a row per batch item
    stereo = tb.StreamEngine(path, block=256, streams=2, fuse=False)
    signal = np.random.default_rng(9).standard_normal((2, 1024)).astype(np.float32)
    out = stereo(signal, 44100)
    for channel in range(2):
        alone = tb.StreamEngine(
            nn_tilde_file(tmp_path, name=f"{channel}.ts"), block=256, fuse=False
        )
        np.testing.assert_allclose(out[channel], alone(signal[channel], 44100), atol=1e-6)
    torch.jit.script(OneRow()).save(str(tmp_path / "one_row.ts"))
    assert tb.StreamEngine(tmp_path / "one_row.ts", block=256).streams == 1
    with pytest.raises(tb.BendingError, match="cannot play 2 streams at once"):
        tb.StreamEngine(tmp_path / "one_row.ts", block=256, streams=2)


def test_a_live_server_plays_a_stereo_file_in_stereo(tmp_path):
    audio = _stereo(tmp_path / "in.wav", seconds=1.0, rate=48000)
    options = ServeOptions(
        model="drive", preset="none", audio="null", osc_port=0, block=256,
        input=str(tmp_path / "in.wav"), record=str(tmp_path / "take.wav"),
    )  # fmt: skip
    server = Server(options)
    assert server.engine.streams == 2 and server.processor.process(audio[:, :256]).shape == (2, 256)
    assert "(forward, 48000 Hz, 1 -> 1 ch x 2 streams)" in server.banner()
    server.engine.reset_state()
    with server:
        time.sleep(0.5)
    take, rate = _read(tmp_path / "take.wav")
    assert take.shape[0] == 2 and rate == 48000 and take.shape[1] >= 4 * 256
    frames = min(take.shape[1], audio.shape[1])
    for channel in range(2):
        want = tb.StreamEngine("drive", block=256)(audio[channel, :frames], 48000)
        np.testing.assert_allclose(take[channel, :frames], want, atol=1e-6)
