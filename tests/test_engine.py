"""StreamEngine: block processing against eager PyTorch, commands at block boundaries, ramps,
weight changes, the output fuse, failing models, the block-size adapter."""

import math

import numpy as np
import pytest
import torch
from streaming import CausalStack, Identity, twin

import bendserver as tb

BLOCK = 256


def _engine(module, **kwargs):
    kwargs.setdefault("fuse", False)
    return tb.StreamEngine(module, block=BLOCK, sample_rate=48000, **kwargs)


def _eager(module, block):
    with torch.no_grad():
        return module(torch.from_numpy(block).unsqueeze(0))[0].numpy()


def test_blocks_match_eager_streaming_and_reset_clears_state():
    module, reference = twin(CausalStack)
    engine = _engine(module)
    signal = np.random.default_rng(0).standard_normal((1, BLOCK * 6)).astype(np.float32)
    blocks = np.split(signal, 6, axis=-1)
    out = [engine.process(b) for b in blocks]
    expected = [_eager(reference, b) for b in blocks]
    # within float rounding: the passes play each convolution in the form measured fastest on
    # this machine now, and the forms sum in different orders (exact only when torch's wins)
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    engine.reset_state()
    fresh, _ = twin(CausalStack)
    np.testing.assert_allclose(
        engine.process(blocks[0]), _eager(fresh, blocks[0]), rtol=0, atol=1e-6
    )


def test_commands_apply_at_the_next_block_or_at_a_time():
    engine = _engine(Identity())
    engine.add_op("gain", tb.Scale(1.0), "gain")
    ones = np.ones((1, BLOCK), dtype=np.float32)
    engine.process(ones)
    engine.set_param("gain", "value", 0.5)
    assert engine.process(ones)[0, 0] == 0.5
    engine.set_param("gain", "value", 0.25, at=engine.time + 2 * BLOCK + 1)
    levels = [engine.process(ones)[0, 0] for _ in range(4)]
    assert levels == [0.5, 0.5, 0.5, 0.25], "applied at the first block starting at or after"


def test_ramps_move_smoothly_per_block():
    engine = _engine(Identity())
    engine.add_op("gain", tb.Scale(0.0), "gain")
    ones = np.ones((1, BLOCK), dtype=np.float32)
    engine.process(ones)
    ramp_ms = 100.0
    engine.set_param("gain", "value", 1.0, ramp_ms=ramp_ms)
    levels = [float(engine.process(ones)[0, 0]) for _ in range(30)]
    blocks = math.ceil(ramp_ms * 48000 / 1000 / BLOCK)
    steps = np.diff([0.0, *levels])
    assert levels[-1] == 1.0 and levels[blocks - 2] < 1.0
    assert steps.max() <= 1.0 / blocks + 1e-6, "no step larger than the ramp allows"


def test_weight_changes_match_eager_bended_module():
    module, reference = twin(CausalStack)
    engine = _engine(module)
    other = CausalStack()
    engine.bended.create_version("other", other)
    engine.set_interpolation({"_default": 1.0, "other": 1.0})
    signal = np.random.default_rng(1).standard_normal((1, BLOCK)).astype(np.float32)
    mixed = {
        k: (v + other.state_dict()[k]) / 2
        for k, v in reference.state_dict().items()
        if not k.endswith("cache")
    }
    reference.load_state_dict(mixed, strict=False)
    np.testing.assert_allclose(engine.process(signal), _eager(reference, signal), atol=1e-6)


def test_weight_commit_is_a_pointer_swap():
    module, _ = twin(CausalStack)
    engine = _engine(module)
    engine.add_op("noise", tb.Noise(0.1, seed=0), r".*\.weight")
    engine.set_param("noise", "std", 0.2)
    slot = dict(engine.bended._shadow.named_parameters())["first.conv.weight"]
    before = slot.data_ptr()
    engine.process(np.zeros((1, BLOCK), dtype=np.float32))
    assert slot.data_ptr() != before, "the prepared tensor is swapped in, not copied"
    untouched = twin(CausalStack)[0].first.conv.weight
    assert torch.equal(engine.bended.module.first.conv.weight, untouched)


def test_adding_and_removing_activation_ops_keeps_streaming_state():
    module, reference = twin(CausalStack)
    engine = _engine(module)
    rng = np.random.default_rng(2)
    blocks = [rng.standard_normal((1, BLOCK)).astype(np.float32) for _ in range(4)]
    engine.process(blocks[0])
    _eager(reference, blocks[0])
    engine.add_op("half", tb.Scale(0.5), "act")
    got = engine.process(blocks[1])
    with torch.no_grad():
        x = torch.from_numpy(blocks[1]).unsqueeze(0)
        want = reference.second(reference.act(reference.first(x)) * 0.5)[0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    engine.remove_op("half")
    np.testing.assert_allclose(engine.process(blocks[2]), _eager(reference, blocks[2]), atol=1e-6)


def test_failing_model_outputs_dry_counts_and_recovers(caplog):
    failing = {"now": False}

    def fragile(x):
        if failing["now"]:
            raise RuntimeError("bent too far")
        return x * 2

    engine = _engine(Identity())
    engine.add_op("fragile", tb.Lambda(fragile), "gain")
    ones = np.ones((1, BLOCK), dtype=np.float32)
    assert np.array_equal(engine.process(ones), ones * 2)
    failing["now"] = True
    assert np.array_equal(engine.process(ones), ones), "dry on error"
    assert np.array_equal(engine.process(ones), ones)
    assert engine.stats.errors == 2
    assert "bent too far" not in caplog.text, "the audio side never logs"
    reported = engine.failures()
    assert len(reported) == 1 and "bent too far" in reported[0], "reported once per kind"
    assert engine.failures() == []
    failing["now"] = False
    assert np.array_equal(engine.process(ones), ones * 2), "the next block runs"


def test_block_adapter_latency_is_exact():
    engine = _engine(Identity())
    for device_block in (100, 64, 512, 256):
        adapter = tb.BlockAdapter(engine.process, BLOCK, device_block, 1, 1)
        impulse = np.zeros((1, device_block * 40), dtype=np.float32)
        impulse[0, 37] = 1.0
        out = np.concatenate([adapter.process(c) for c in np.split(impulse, 40, axis=-1)], axis=-1)
        assert int(np.argmax(out[0])) == 37 + adapter.latency
        divides = device_block % BLOCK == 0
        assert adapter.latency == (0 if divides else BLOCK - math.gcd(BLOCK, device_block))


def test_bad_commands_raise_clear_errors():
    engine = _engine(Identity())
    engine.add_op("gain", tb.Scale(1.0), "gain")
    with pytest.raises(tb.BendingError, match="no op 'nope'"):
        engine.set_param("nope", "value", 1.0)
    with pytest.raises(tb.BendingError, match="finite"):
        engine.set_param("gain", "value", float("nan"))
    with pytest.raises(tb.BendingError, match="gain must be"):
        engine.set_gain(-1)
    with pytest.raises(tb.BendingError, match="takes \\[1, 256\\]"):
        engine.process(np.zeros((2, BLOCK), dtype=np.float32))


def test_stats_report_percentiles():
    engine = _engine(CausalStack())
    for _ in range(10):
        engine.process(np.zeros((1, BLOCK), dtype=np.float32))
    stats = engine.stats_dict()
    assert stats["blocks"] == 10 and stats["errors"] == 0
    assert 0 < stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_engine_matches_cpu():
    cpu = tb.StreamEngine("drive", block=BLOCK, fuse=False)
    gpu = tb.StreamEngine("drive", block=BLOCK, fuse=False, device="cuda")
    rng = np.random.default_rng(5)
    for _ in range(4):
        block = (0.3 * rng.standard_normal((1, BLOCK))).astype(np.float32)
        np.testing.assert_allclose(gpu.process(block), cpu.process(block), atol=1e-4)
