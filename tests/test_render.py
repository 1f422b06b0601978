"""Offline render: identical to streaming, scores at block times, formats, refusals."""

import numpy as np
import pytest
import soundfile as sf
from streaming import CausalStack, Identity, twin

import bendserver as tb
from bendserver.cli import main
from bendserver.render import parse_score, render_file, schedule


def _wav(path, seconds=0.5, rate=48000, channels=1):
    rng = np.random.default_rng(3)
    audio = (0.3 * rng.standard_normal((int(seconds * rate), channels))).astype(np.float32)
    sf.write(str(path), audio, rate, subtype="FLOAT")
    return audio.T


@pytest.mark.parametrize("block", [256, 512, 2048])
def test_render_equals_concatenated_streaming_bit_exact(tmp_path, block):
    audio = _wav(tmp_path / "in.wav")
    first, second = twin(CausalStack)
    seconds = render_file(
        tb.StreamEngine(first, block=block), tmp_path / "in.wav", tmp_path / "o.wav"
    )
    rendered, rate = sf.read(str(tmp_path / "o.wav"), dtype="float32", always_2d=True)
    engine = tb.StreamEngine(second, block=block)
    padded = np.pad(audio, ((0, 0), (0, -audio.shape[-1] % block)))
    streamed = np.concatenate(
        [engine.process(b) for b in np.split(padded, padded.shape[-1] // block, -1)], -1
    )
    assert rate == 48000 and seconds == pytest.approx(0.5)
    np.testing.assert_array_equal(rendered.T, streamed[:, : audio.shape[-1]])


@pytest.mark.parametrize("model", ["wavae", "drive"])
def test_a_preset_sounds_the_same_at_any_block_size(tmp_path, model):
    """wavae's preset draws fresh latent noise, drive's has a mask, fixed noise and an LFO:
    rendered at 256 and 2048 and streamed at 64, in stereo and mono, the same within 1e-6."""
    rate = tb.load_model(model).sample_rate
    stereo = _wav(tmp_path / "in.wav", seconds=6144 / rate, rate=rate, channels=2)
    renders = []
    for block in (256, 2048):
        output = tmp_path / f"{block}.wav"
        command = ["render", str(tmp_path / "in.wav"), "-m", model, "--block", str(block)]
        assert main([*command, "-o", str(output)]) == 0  # with the model's own preset
        renders.append(sf.read(str(output), dtype="float32", always_2d=True)[0].T)
    streamed = tb.StreamEngine(model, preset=model, block=64)(stereo, rate)
    mono = tb.StreamEngine(model, preset=model, block=64)(stereo[1], rate)
    for other in (renders[1], streamed):
        np.testing.assert_allclose(other, renders[0], atol=1e-6, rtol=0)
    np.testing.assert_allclose(mono, renders[0][1], atol=1e-6, rtol=0)
    unbended = tb.StreamEngine(model, block=64)(stereo, rate)
    assert np.abs(unbended - streamed).max() > 0.01, "the preset bends the sound"


def test_score_applies_at_block_times(tmp_path):
    sf.write(str(tmp_path / "ones.wav"), np.ones(48000, np.float32), 48000, subtype="FLOAT")
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    engine.add_op("g", tb.Scale(1.0), "gain")
    score = parse_score(
        "# gain changes\n0.1 /bend/g/value 0.5\n0.2 /engine/gain 0.5  # output gain\n"
        "0.3 /bend/g/enable 0\n"
    )
    render_file(engine, tmp_path / "ones.wav", tmp_path / "out.wav", score)
    out, _ = sf.read(str(tmp_path / "out.wav"), dtype="float32")
    first = lambda t: int(np.ceil(t * 48000 / 256) * 256)  # first block starting at/after t
    assert out[first(0.1) - 1] == 1.0 and out[first(0.1)] == 0.5
    assert out[first(0.2) + 256] == 0.25
    assert out[first(0.3) + 1] == 0.5


def test_score_errors_name_the_line():
    with pytest.raises(tb.BendingError, match="score:2"):
        parse_score("0 /ping\nsoon /ping\n")
    engine = tb.StreamEngine(Identity(), block=256)
    with pytest.raises(tb.BendingError, match="score at 0.5 s, /bend/none/value"):
        schedule(engine, parse_score("0.5 /bend/none/value 1"))


def test_resampling_and_downmix(tmp_path):
    sf.write(str(tmp_path / "in.wav"), np.zeros((22050, 2), np.float32), 44100)
    engine = tb.StreamEngine(Identity(), block=256)
    seconds = render_file(engine, tmp_path / "in.wav", tmp_path / "out.flac", mono=True)
    info = sf.info(str(tmp_path / "out.flac"))
    assert (info.samplerate, info.channels, seconds) == (44100, 1, pytest.approx(0.5))
    render_file(engine, tmp_path / "in.wav", tmp_path / "at48.flac", mono=True, sample_rate=48000)
    assert (
        sf.info(str(tmp_path / "at48.flac")).samplerate,
        sf.info(str(tmp_path / "at48.flac")).frames,
    ) == (48000, 24000)
    with pytest.raises(tb.BendingError, match="44100 Hz"):
        render_file(engine, tmp_path / "in.wav", tmp_path / "x.wav", resample=False, mono=True)
    fixed = tb.StreamEngine(Identity(), block=256, streams=1)
    with pytest.raises(tb.BendingError, match="streams=2"):
        render_file(fixed, tmp_path / "in.wav", tmp_path / "x.wav")
    render_file(engine, tmp_path / "in.wav", tmp_path / "stereo.flac")  # one stream a channel
    assert sf.info(str(tmp_path / "stereo.flac")).channels == 2


def test_refusals(tmp_path):
    _wav(tmp_path / "in.wav")
    engine = tb.StreamEngine(Identity(), block=256)
    (tmp_path / "exists.wav").write_bytes(b"")
    with pytest.raises(tb.BendingError, match="--force"):
        render_file(engine, tmp_path / "in.wav", tmp_path / "exists.wav")
    with pytest.raises(tb.BendingError, match="extension"):
        render_file(engine, tmp_path / "in.wav", tmp_path / "out.mp4")
    with pytest.raises(tb.BendingError, match="no input file"):
        render_file(engine, tmp_path / "missing.wav", tmp_path / "out.wav")


def test_interrupted_render_leaves_a_valid_file(tmp_path):
    audio = _wav(tmp_path / "in.wav", seconds=1.0)
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    original = engine.process
    calls = {"n": 0}

    def interrupting(block):
        calls["n"] += 1
        if calls["n"] == 50:
            raise KeyboardInterrupt
        return original(block)

    engine.process = interrupting
    with pytest.raises(KeyboardInterrupt):
        render_file(engine, tmp_path / "in.wav", tmp_path / "out.wav")
    partial, _ = sf.read(str(tmp_path / "out.wav"), dtype="float32")
    assert len(partial) == 49 * 256
    np.testing.assert_array_equal(partial, audio[0, : 49 * 256])


def test_stream_trims_the_last_block():
    engine = tb.StreamEngine(Identity(), block=256)
    blocks = list(engine.stream(np.zeros((1, 600), np.float32)))
    assert [b.shape[-1] for b in blocks] == [256, 256, 88]
