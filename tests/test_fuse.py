"""The output fuse: per sample, so the stream's cut into blocks never changes what is heard."""

import numpy as np
import pytest
import soundfile as sf
from streaming import CausalStack, twin

import bendserver as tb
from bendserver.render.offline import render_file


def _fused_stream(fuse, signal, block):
    return np.concatenate(
        [fuse.process(signal[:, i : i + block]) for i in range(0, signal.shape[-1], block)], -1
    )


def test_the_fuse_is_block_size_invariant():
    rng = np.random.default_rng(0)
    signal = (0.4 * rng.standard_normal((2, 8192)) + 0.3).astype(np.float32)  # DC and peaks
    signal[0, 100] = np.nan
    outputs = [_fused_stream(tb.OutputFuse(2, 48000), signal, b) for b in (256, 512, 2048, 100)]
    for other in outputs[1:]:
        np.testing.assert_allclose(other, outputs[0], atol=1e-6)


@pytest.mark.parametrize("model", ["drive", "test"])
def test_renders_at_any_block_agree_with_the_fuse_on(tmp_path, model):
    source = tb.load_model("drive").demo
    rendered = []
    for block in (256, 512, 2048):
        engine = (
            tb.StreamEngine("drive", block=block)
            if model == "drive"
            else tb.StreamEngine(twin(CausalStack)[0], block=block)
        )
        render_file(engine, source, tmp_path / f"{block}.wav")
        rendered.append(sf.read(str(tmp_path / f"{block}.wav"), dtype="float32")[0])
    for other in rendered[1:]:
        np.testing.assert_allclose(other, rendered[0], atol=1e-6)


def test_below_the_knee_a_sample_passes_as_it_is():
    fuse = tb.OutputFuse(1, 48000, dc_cutoff_hz=0)
    quiet = (0.7 * np.sin(np.arange(4096) / 7.0)).astype(np.float32)[None]
    np.testing.assert_array_equal(fuse.process(quiet), quiet)
    assert fuse.limited_samples == 0


def test_nonfinite_samples_become_silence_and_are_counted():
    fuse = tb.OutputFuse(1, 48000)
    block = np.zeros((1, 256), np.float32)
    block[0, [3, 5, 7]] = [np.nan, np.inf, -np.inf]
    out = fuse.process(block)
    assert fuse.nonfinite_samples == 3 and np.isfinite(out).all() and np.abs(out).max() == 0


def test_the_limiter_never_exceeds_the_ceiling_and_counts_samples():
    fuse = tb.OutputFuse(1, 48000, ceiling=0.9, dc_cutoff_hz=0)
    loud = np.where(np.arange(256) % 2, 50.0, -50.0).astype(np.float32)[None]
    loud[0, :10] = 0.1
    out = fuse.process(loud)
    assert np.abs(out).max() <= 0.9 and fuse.limited_samples == 246
    np.testing.assert_array_equal(out[0, :10], loud[0, :10])


def test_a_constant_offset_is_removed_over_time():
    fuse = tb.OutputFuse(1, 48000)
    out = _fused_stream(fuse, np.full((1, 48000), 0.5, np.float32), 256)
    assert abs(out[0, -256:].mean()) < 0.01 and out[0, 0] == pytest.approx(0.5, abs=1e-3)


def test_reset_starts_the_filter_afresh():
    rng = np.random.default_rng(1)
    signal = (0.3 * rng.standard_normal((1, 2048)) + 0.2).astype(np.float32)
    fuse = tb.OutputFuse(1, 48000)
    first = _fused_stream(fuse, signal, 256)
    fuse.reset()
    np.testing.assert_array_equal(_fused_stream(fuse, signal, 256), first)


def test_a_huge_spike_is_forgotten_quickly_and_empty_blocks_keep_the_state():
    fuse = tb.OutputFuse(1, 48000)
    spike = np.zeros((1, 256), np.float32)
    spike[0, 0] = 1e30
    fuse.process(spike)
    assert fuse.process(np.zeros((1, 256), np.float32)).shape == (1, 256)
    after = _fused_stream(fuse, np.zeros((1, 48000), np.float32), 256)
    assert np.abs(after[0, 24000:]).max() < 1e-3, "silence again within half a second"
    other = tb.OutputFuse(1, 48000)
    signal = (0.3 + 0.1 * np.sin(np.arange(1024) / 5.0)).astype(np.float32)[None]
    first = other.process(signal[:, :512])
    other.process(signal[:, :0])
    np.testing.assert_allclose(
        np.concatenate([first, other.process(signal[:, 512:])], -1),
        tb.OutputFuse(1, 48000).process(signal),
        atol=1e-6,
    )


def test_the_ceiling_holds_in_a_file_at_another_rate(tmp_path):
    """The limiter runs at the model's rate, and resampling back to 8 kHz overshoots what it
    left: the ceiling is held after the resampler too, in a render and in engine(audio, sr)."""
    loud = np.clip(np.random.default_rng(1).standard_normal(4000), -1, 1).astype(np.float32)
    sf.write(str(tmp_path / "in.wav"), loud, 8000, subtype="PCM_16")
    engine = tb.StreamEngine("drive", preset="drive")
    engine.set_gain(2.0)  # over full scale: the limiter has work
    render_file(engine, tmp_path / "in.wav", tmp_path / "out.wav")
    written, rate = sf.read(str(tmp_path / "out.wav"), dtype="int16")
    assert rate == 8000 and sf.info(str(tmp_path / "out.wav")).subtype == "PCM_16"
    assert np.abs(written.astype(np.int32)).max() <= 0.99 * 32768 + 1  # never full scale
    assert engine.stats_dict()["limited"] > 0, "the limiter had work to do"
    played = tb.StreamEngine("drive", preset="drive")
    played.set_gain(2.0)
    played = played(loud, 8000)
    assert np.abs(played).max() <= 0.99
