"""The cells of the torchbend notebook "Bended modules" (seed 001), run with bendserver."""

from functools import partial

import pytest
import torch
from torch import nn

import bendserver as tb


class Stanley(nn.Module):
    def __init__(self, n_channels=4):
        super().__init__()
        self.conv_modules = nn.Sequential(nn.Conv1d(1, n_channels, 3), nn.Conv1d(n_channels, 8, 3))
        self.batch_norm = nn.BatchNorm1d(8)
        self.nnlin = nn.Sigmoid()
        self.n_channels = n_channels

    def forward(self, x):
        out = self.conv_modules(x)
        out = self.batch_norm(out)
        out = self.nnlin(out)
        return out

    def forward_nobatch(self, x):
        out = self.conv_modules(x)
        out = self.nnlin(out)
        return out


@pytest.fixture
def bended():
    torch.manual_seed(0)
    return tb.BendedModule(Stanley())


def test_weights_are_listed_with_shapes_and_stats(bended, capsys, tmp_path):
    names = bended.weight_names
    assert names == [
        "conv_modules.0.weight",
        "conv_modules.0.bias",
        "conv_modules.1.weight",
        "conv_modules.1.bias",
        "batch_norm.weight",
        "batch_norm.bias",
    ]
    assert list(map(bended.weight_shape, names))[2] == torch.Size([8, 4, 3])
    table = bended.print_weights(out=tmp_path / "weights.txt")
    header = table.splitlines()[0].split()
    assert header == ["name", "shape", "dtype", "min", "max", "mean", "stddev"]
    assert "batch_norm.weight" in capsys.readouterr().out
    assert (tmp_path / "weights.txt").read_text().strip() == table.strip()


def test_activations_of_two_methods(bended):
    x = torch.zeros(4, 1, 128)
    bended.trace(x=x)
    assert bended.activation_names() == [
        "x",
        "conv_modules_0",
        "conv_modules_1",
        "batch_norm",
        "nnlin",
    ]
    shapes = list(map(bended.activation_shape, bended.activation_names()))
    assert shapes[1:] == [
        torch.Size([4, 4, 126]),
        torch.Size([4, 8, 124]),
        torch.Size([4, 8, 124]),
        torch.Size([4, 8, 124]),
    ]
    fn = "forward_nobatch"
    bended.trace(fn, x=x)
    assert bended.activation_names(fn) == ["x", "conv_modules_0", "conv_modules_1", "nnlin"]
    shapes = list(map(partial(bended.activation_shape, fn=fn), bended.activation_names(fn)))
    assert shapes[-1] == torch.Size([4, 8, 124])
    table = bended.print_activations(fn)
    assert "conv_modules_1  call_module  torch.Size([4, 8, 124])" in table
    bended.bend(tb.Scale(0.0), f"{fn}:conv_modules_1")
    assert torch.equal(bended.forward_nobatch(x), torch.full((4, 8, 124), 0.5))
    assert not torch.equal(bended(x), torch.full((4, 8, 124), 0.5)), "forward is not bent"


def test_graph_and_graph_module(bended):
    x = torch.randn(4, 1, 128)
    bended.trace(x=x)
    ops = [(n.op, str(n.target)) for n in bended.graph().nodes]
    assert ops == [
        ("placeholder", "x"),
        ("call_module", "conv_modules.0"),
        ("call_module", "conv_modules.1"),
        ("call_module", "batch_norm"),
        ("call_module", "nnlin"),
        ("output", "output"),
    ]
    gm = bended.graph_module()
    assert isinstance(gm, torch.fx.GraphModule)
    torch.testing.assert_close(gm(x), bended.module(x), rtol=0, atol=0)


def test_get_activations(bended):
    x = torch.zeros(4, 1, 128)
    bended.trace(x=x)
    outs = bended.get_activations("conv_modules_0", "nnlin", x=x, fn="forward")
    assert {k: v.shape for k, v in outs.items()} == {
        "conv_modules_0": torch.Size([4, 4, 126]),
        "nnlin": torch.Size([4, 8, 124]),
    }
    torch.testing.assert_close(outs["conv_modules_0"], bended.module.conv_modules[0](x))


def test_bend_leaves_module_untouched_and_reset_reverts(bended):
    x = torch.randn(4, 1, 128)
    bended.trace(x=x)
    original_weight = bended.module.conv_modules[0].weight.detach().clone()
    out = bended.forward(x)
    bended.bend(tb.Mask(prob=0.4), "conv_modules.0.weight", "nnlin")
    out_bended = bended.forward(x)
    assert not torch.equal(out, out_bended)
    assert torch.equal(bended.module.conv_modules[0].weight, original_weight)
    bended.reset()
    assert torch.equal(out, bended.forward(x))


def test_bended_state_dict_and_activations(bended):
    x = torch.randn(4, 1, 128)
    bended.trace(x=x)
    bended.bend(tb.Mask(prob=0.4, seed=3), "conv_modules.0.weight", "nnlin")
    original = bended.state_dict()["conv_modules.0.weight"]
    masked = bended.bended_state_dict()["conv_modules.0.weight"]
    kept = masked != 0
    assert 0 < kept.sum() < kept.numel()
    assert torch.equal(masked[kept], original[kept])
    bended_graph = bended.bend_graph()
    assert len(list(bended_graph.nodes)) == len(list(bended.graph().nodes)) + 1
    plain = bended.get_activations("nnlin", x=x, bended=False)["nnlin"]
    bent = bended.get_activations("nnlin", x=x)["nnlin"]
    assert plain.shape == bent.shape == torch.Size([4, 8, 124])
    zeroed = bent == 0
    assert zeroed.any() and torch.equal(bent[~zeroed], _eager_with_weight(bended, x)[~zeroed])


def _eager_with_weight(bended, x):
    module = Stanley()
    module.load_state_dict(bended.bended_state_dict())
    return module(x)


def test_shape_bound_mask_then_channeled_mask(bended):
    bended.trace(x=torch.randn(4, 1, 128))
    bended.bend(tb.Mask(prob=0.4), "nnlin")
    with pytest.raises(tb.ShapeError, match=r"nnlin.*\(4, 8, 124\).*\(1, 8, 60\)"):
        bended.forward(torch.randn(1, 1, 64))
    bended.reset()
    bended.bend(tb.Mask(prob=0.3, dim=-2), "nnlin")
    assert bended.forward(torch.randn(1, 1, 64)).shape == torch.Size([1, 8, 60])


def test_bending_config_from_module(bended, tmp_path):
    bended.trace(x=torch.randn(1, 1, 1024))
    bended.bend(tb.Mask(prob=0.4), "conv_modules.0.weight", "nnlin")
    bended.bend(tb.Mask(prob=0.6), "conv_modules.0.weight", "conv_modules.1.weight")
    config = bended.bending_config()
    text = repr(config)
    assert "Mask(prob=0.400): ['conv_modules.0.weight', 'nnlin']" in text
    assert "Mask(prob=0.600): ['conv_modules.0.weight', 'conv_modules.1.weight']" in text
    ops = config.op_from_key("conv_modules.0.weight")
    assert [op.prob for op in ops] == pytest.approx([0.4, 0.6])
    config.save(tmp_path / "test.json")
    loaded = tb.BendingConfig.load(tmp_path / "test.json", module=bended)
    assert loaded == config
    assert repr(loaded) == repr(config)


def test_bending_configs_compare_and_add(bended):
    bended.trace(x=torch.randn(1, 1, 1024))
    cb1 = tb.Mask(0.8)
    config1 = tb.BendingConfig((cb1, r"conv_modules.\d.weight"), (cb1, "nnlin"))
    config2 = tb.BendingConfig((cb1, r"conv_modules.\d.weight")) + tb.BendingConfig((cb1, "nnlin"))
    assert config1 == config2
    config1.bind(bended)
    config2.bind(bended)
    assert "['conv_modules.0.weight', 'conv_modules.1.weight', 'nnlin']" in repr(config1)
    assert config1 == config2
    bended.reset()
    bended.bend(config1)
    assert config1 == bended.bending_config()


def test_versions_write_and_interpolate(bended):
    x = torch.randn(1, 1, 128)
    assert bended.version == "_default"
    bended.bend(tb.Mask(prob=0.3), "conv_modules.0.weight")
    bended.write("bended")
    assert bended.version == "bended"
    bended.version = None
    assert bended.version == "_default"
    with bended.set_version():
        out_original = bended(x)
    with bended.set_version("bended"):
        out_bended = bended(x)
    with bended.interpolate(1.0, bended=1.0):
        out_interpolated = bended(x)
    assert not torch.equal(out_original, out_bended)
    assert not torch.equal(out_original, out_interpolated)
    assert not torch.equal(out_bended, out_interpolated)
    torch.testing.assert_close(out_original, bended.module(x))
    # the interpolation is the normalised weighted sum of the two weight sets
    name = "conv_modules.0.weight"
    w_default = bended.state_dict()[name]
    with bended.set_version("bended"):
        w_bended = bended.bended_state_dict()[name].clone()
    with bended.interpolate(1.0, bended=3.0):
        mixed = bended.bended_state_dict()[name]
    torch.testing.assert_close(mixed, 0.25 * w_default + 0.75 * w_bended)


def test_create_version_from_another_module(bended):
    module2 = Stanley()
    bended.create_version("imported", module2)
    x = torch.randn(1, 1, 128)
    with bended.set_version():
        out_original = bended(x)
    with bended.set_version("imported"):
        out_imported = bended(x)
    with bended.interpolate(1.0, imported=1.0):
        out_interpolated = bended(x)
    torch.testing.assert_close(out_imported, module2(x))
    assert not torch.equal(out_original, out_imported)
    assert not torch.equal(out_original, out_interpolated)
    assert not torch.equal(out_imported, out_interpolated)


def test_create_version_refuses_another_architecture(bended):
    class Doppleganger(nn.Module):
        pass

    with pytest.raises(tb.BendingError, match="missing"):
        bended.create_version("imported", Doppleganger())
    with pytest.raises(tb.BendingError, match="other shapes"):
        bended.create_version("wide", Stanley(n_channels=6))
