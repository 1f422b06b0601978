"""Offline render: identical to streaming, scores at block times (any number of events),
formats, refusals, NaN/Inf from the model reported."""

import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from sounds import write_noise
from streaming import CausalStack, Identity, Ratio, twin

import bendserver as tb
from bendserver.cli import main
from bendserver.render.offline import ScorePlayer, parse_score, render_file


@pytest.mark.parametrize("block", [256, 512, 2048])
def test_render_equals_concatenated_streaming_bit_exact(tmp_path, block):
    audio = write_noise(tmp_path / "in.wav")
    first, second = twin(CausalStack)
    seconds = render_file(
        tb.StreamEngine(first, block=block), tmp_path / "in.wav", tmp_path / "o.wav"
    ).seconds
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
    stereo = write_noise(tmp_path / "in.wav", seconds=6144 / rate, rate=rate, channels=2)
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
    player = ScorePlayer(engine, parse_score("# moves\n0.5 /bend/none/value 1"))
    with pytest.raises(tb.BendingError, match="score:2: at 0.5 s, /bend/none/value: .*none"):
        player.until(engine.samples(0.5))
    with pytest.raises(tb.BendingError, match="score:1: at 0 s, /engine/gain: .*16"):
        ScorePlayer(engine, parse_score("0 /engine/gain 20"))  # refused before anything plays


def test_resampling_and_downmix(tmp_path):
    sf.write(str(tmp_path / "in.wav"), np.zeros((22050, 2), np.float32), 44100)
    engine = tb.StreamEngine(Identity(), block=256)
    seconds = render_file(engine, tmp_path / "in.wav", tmp_path / "out.flac", mono=True).seconds
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
    write_noise(tmp_path / "in.wav")
    engine = tb.StreamEngine(Identity(), block=256)
    (tmp_path / "exists.wav").write_bytes(b"")
    with pytest.raises(tb.BendingError, match="--force"):
        render_file(engine, tmp_path / "in.wav", tmp_path / "exists.wav")
    with pytest.raises(tb.BendingError, match="extension"):
        render_file(engine, tmp_path / "in.wav", tmp_path / "out.mp4")
    with pytest.raises(tb.BendingError, match="no input file"):
        render_file(engine, tmp_path / "missing.wav", tmp_path / "out.wav")


def test_stream_trims_the_last_block():
    engine = tb.StreamEngine(Identity(), block=256)
    blocks = list(engine.stream(np.zeros((1, 600), np.float32)))
    assert [b.shape[-1] for b in blocks] == [256, 256, 88]


def test_a_score_of_any_length_renders(tmp_path):
    """2 000 events (more than the 1 024 changes that may wait at once): each is handed to the
    engine as the render reaches its block."""
    sf.write(str(tmp_path / "ones.wav"), np.ones(48000, np.float32), 48000, subtype="FLOAT")
    score = tmp_path / "many.txt"
    score.write_text("".join(f"{i / 4000:.5f} /engine/gain {i % 2}\n" for i in range(2000)))
    identity = f"{Path(__file__).parent / 'streaming.py'}:Identity"
    argv = ["render", str(tmp_path / "ones.wav"), "-m", identity, "--block", "256",
            "--no-fuse", "--score", str(score), "-o", str(tmp_path / "out.wav")]  # fmt: skip
    assert main(argv) == 0
    out, _ = sf.read(str(tmp_path / "out.wav"), dtype="float32")
    assert np.all(out[24064 + 256 :] == 1.0)  # the last (0.49975 s: gain 1), gliding 1 block
    assert out[12000:12256].std() > 0, "the gain moved at every block before"


def test_any_number_of_events_may_fall_in_one_block():
    """1 100 changes at one time (more than the engine once held at a block): all apply, in
    the score's order, the last one wins."""
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    events = parse_score("".join(f"0.001 /engine/gain {i / 1100:.6f}\n" for i in range(1100)))
    player = ScorePlayer(engine, events)
    ones = np.ones((1, 256), np.float32)
    for _ in range(40):  # the gain glides to its value (no click)
        player.until(engine.time)
        out = engine.process(ones)
    assert player.next == 1100
    np.testing.assert_allclose(out, 1099 / 1100, atol=1e-6)


def test_nan_from_the_model_is_reported_by_block(tmp_path, caplog, capsys):
    """A model that outputs NaN (here where its input is silent: blocks 2 and 3 of 256) is
    said to, with what the fuse did, not rendered as silence with '0 errors'."""
    audio = np.full(6 * 256, 0.5, np.float32)
    audio[2 * 256 : 4 * 256] = 0.0
    sf.write(str(tmp_path / "in.wav"), audio, 48000, subtype="FLOAT")
    with caplog.at_level(logging.WARNING, logger="bendserver.render"):
        rendered = render_file(tb.StreamEngine(Ratio(), block=256), tmp_path / "in.wav",
                               tmp_path / "fused.wav")  # fmt: skip
    assert (rendered.nonfinite, rendered.nonfinite_blocks) == (512, "2-3")
    assert "512 NaN/Inf samples in 2 block(s) of 6 (blocks 2-3): the fuse wrote 0" in caplog.text
    bare = render_file(tb.StreamEngine(Ratio(), block=256, fuse=False), tmp_path / "in.wav",
                       tmp_path / "bare.wav")  # fmt: skip
    assert (bare.nonfinite, bare.nonfinite_blocks) == (512, "2-3")
    assert np.isnan(sf.read(str(tmp_path / "bare.wav"))[0]).sum() == 512
    ratio = f"{Path(__file__).parent / 'streaming.py'}:Ratio"
    argv = ["render", str(tmp_path / "in.wav"), "-m", ratio, "--block", "256",
            "-o", str(tmp_path / "cli.wav")]  # fmt: skip
    assert main(argv) == 0
    assert "0 errors, 512 NaN/Inf" in capsys.readouterr().out
