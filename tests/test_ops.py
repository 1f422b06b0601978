"""Each op's effect, checked numerically, and its parameter handling."""

import math

import pytest
import torch

import bendserver as tb


def _apply(op, x, target="t"):
    return op.apply(x, op.init_state(target, x.shape, x.dtype, x.device))


def test_mask_keeps_about_prob_and_is_monotonic_in_prob():
    x = torch.ones(200, 100)
    mask = tb.Mask(0.3, seed=0)
    state = mask.init_state("w", x.shape, x.dtype, "cpu")
    low = mask.apply(x, state)
    assert abs(low.mean().item() - 0.3) < 0.02
    mask.prob = 0.6
    high = mask.apply(x, state)
    assert abs(high.mean().item() - 0.6) < 0.02
    assert (high >= low).all(), "raising prob only adds units back"


def test_same_seed_same_result_other_target_other_field():
    x = torch.randn(8, 16)
    assert torch.equal(_apply(tb.Mask(0.5, seed=4), x), _apply(tb.Mask(0.5, seed=4), x))
    assert not torch.equal(
        _apply(tb.Mask(0.5, seed=4), x, "a"), _apply(tb.Mask(0.5, seed=4), x, "b")
    )
    torch.manual_seed(1)
    first = tb.Noise(0.5)
    torch.manual_seed(1)
    assert first.seed == tb.Noise(0.5).seed


def test_mask_dim_masks_whole_channels():
    y = _apply(tb.Mask(0.5, dim=1, seed=2), torch.ones(2, 32, 10))
    per_channel = y.sum(dim=(0, 2))
    assert set(per_channel.tolist()) <= {0.0, 20.0} and 0 < per_channel.count_nonzero() < 32


def test_ordered_mask_keeps_exact_count():
    y = _apply(tb.OrderedMask(0.25, seed=0), torch.ones(4, 10))
    assert y.sum() == 10


def test_scale_bias_affine_clamp_invert():
    x = torch.linspace(-2, 2, 9)
    assert torch.equal(_apply(tb.Scale(3.0), x), x * 3)
    assert torch.equal(_apply(tb.Bias(-1.0), x), x - 1)
    assert torch.equal(_apply(tb.Affine(2.0, 0.5), x), x * 2 + 0.5)
    assert torch.equal(_apply(tb.Clamp(-1.0, 0.5), x), x.clamp(-1.0, 0.5))
    assert torch.equal(_apply(tb.Invert(), x), -x)


def test_noise_add_mul_and_fresh():
    x = torch.ones(1000)
    added = _apply(tb.Noise(0.5, seed=0), x) - x
    assert abs(added.std().item() - 0.5) < 0.05
    mul = _apply(tb.Noise(0.5, op="mul", seed=0), x)
    torch.testing.assert_close(mul - 1, added)
    fresh = tb.Noise(0.5, seed=0, fresh=True)
    state = fresh.init_state("t", x.shape, x.dtype, "cpu")
    assert not torch.equal(fresh.apply(x, state), fresh.apply(x, state))
    with pytest.raises(tb.BendingError, match="'add' or 'mul'"):
        tb.Noise(op="pow")


def test_fresh_noise_is_the_same_whatever_the_block_size():
    """Fresh noise is a function of the unit and the time step (the last axis): one call of
    2048 steps, 8 of 256 or 32 of 64 draw the same values, standard normal, every unit its
    own; ``dim`` keeps it per time step, the same along the other axes."""

    def steps(block, dim=None, seed=4):
        op = tb.Noise(1.0, seed=seed, fresh=True, dim=dim)
        state = op.init_state("act", torch.Size([1, 6, block]), torch.float32, "cpu")
        zeros = torch.zeros(1, 6, block)
        return torch.cat([op.apply(zeros, state) for _ in range(2048 // block)], -1)

    whole = steps(2048)
    for block in (64, 256):
        assert torch.equal(steps(block), whole), block
    assert abs(whole.mean().item()) < 0.05 and abs(whole.std().item() - 1) < 0.05
    assert torch.isfinite(whole).all() and whole.abs().max() < 6
    correlation = torch.corrcoef(whole[0]) - torch.eye(6)
    assert correlation.abs().max() < 0.1, "each unit has its own noise"
    lag = torch.corrcoef(torch.stack([whole[0, 0, :-1], whole[0, 0, 1:]]))[0, 1]
    assert abs(lag.item()) < 0.1, "no step repeats the one before"
    assert not torch.equal(steps(2048, seed=5), whole)
    per_time = steps(256, dim=0)
    assert torch.equal(per_time, per_time[:, :1].expand_as(per_time)) and per_time.std() > 0.5


def test_threshold_binary_and_passing():
    x = torch.tensor([-1.0, 0.2, 0.7])
    assert torch.equal(_apply(tb.Threshold(0.5), x), torch.tensor([0.0, 0.0, 1.0]))
    assert torch.equal(_apply(tb.Threshold(0.0, binary=False), x), torch.tensor([0.0, 0.2, 0.7]))


def test_topk_keeps_loudest_channels():
    x = torch.zeros(1, 4, 8)
    for c, level in enumerate([0.1, 3.0, 0.5, 2.0]):
        x[:, c] = level
    y = _apply(tb.TopK(0.5, dim=1), x)
    assert y[0, :, 0].tolist() == [0.0, 3.0, 0.0, 2.0]


def test_permute_shuffles_and_refuses_scalars():
    x = torch.arange(10.0).reshape(1, 10, 1)
    y = _apply(tb.Permute(dim=1, seed=0), x)
    assert sorted(y.flatten().tolist()) == x.flatten().tolist() and not torch.equal(x, y)
    with pytest.raises(tb.BendingError, match="0-d"):
        _apply(tb.Permute(), torch.tensor(1.0))


def test_oscillate_time_is_continuous_across_calls():
    op = tb.Oscillate(depth=1.0, freq=1 / 64)
    ones = torch.ones(1, 1, 32)
    state = op.init_state("t", ones.shape, ones.dtype, "cpu")
    streamed = torch.cat([op.apply(ones, state) for _ in range(4)], -1)
    expected = 1 + torch.sin(2 * math.pi * torch.arange(128) / 64)
    torch.testing.assert_close(streamed.flatten(), expected.float(), atol=1e-5, rtol=0)


def test_oscillate_calls_is_activation_only():
    op = tb.Oscillate(over="calls", freq=0.25)
    x = torch.ones(3)
    state = op.init_state("t", x.shape, x.dtype, "cpu")
    values = [op.apply(x, state)[0].item() for _ in range(4)]
    assert values == pytest.approx([1.0, 1.5, 1.0, 0.5], abs=1e-6)
    bended = tb.BendedModule(torch.nn.Linear(3, 3))
    with pytest.raises(tb.BendingError, match="activations only"):
        bended.bend(op, "weight")


def test_lambda_applies_and_cannot_be_saved():
    op = tb.Lambda(lambda x: x.flip(-1))
    assert torch.equal(_apply(op, torch.arange(3.0)), torch.tensor([2.0, 1.0, 0.0]))
    with pytest.raises(tb.BendingError, match="cannot be saved"):
        tb.BendingConfig((op, "x")).to_dict()


def test_parameters_are_validated_and_written_in_place():
    mask = tb.Mask(0.5)
    tensor = mask.value_tensor("prob")
    mask.set("prob", 0.75)
    assert mask.prob == 0.75 and mask.value_tensor("prob") is tensor
    for bad in (1.5, float("nan"), "loud"):
        with pytest.raises(tb.BendingError, match="prob"):
            mask.prob = bad
    with pytest.raises(tb.BendingError, match="no parameter 'depth'"):
        mask.set("depth", 1.0)
    with pytest.raises(tb.BendingError, match="bad arguments for Scale"):
        tb.op_from_spec({"op": "Scale", "params": {"factor": 2.0}})


def test_specs_round_trip():
    for op in [
        tb.Mask(0.2, dim=(1, 2), seed=3),
        tb.Noise(0.1, op="mul", fresh=True, seed=1),
        tb.Oscillate(0.3, 0.01, over="calls"),
        tb.Mask(0.5, seed=1) >> tb.Bias(0.1),
    ]:
        assert tb.op_from_spec(op.spec()).spec() == op.spec()
    with pytest.raises(tb.BendingError, match="unknown op 'Wobble'"):
        tb.op_from_spec({"op": "Wobble"})
