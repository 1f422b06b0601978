"""One test per torchbend failure listed in ANCHORS.md, showing bendserver does not fail so."""

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import bendserver as tb


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(1, 4, 3, padding=1)
        self.b = nn.Conv1d(8, 1, 1)

    def forward(self, x):
        a = self.a(x)
        cat = torch.cat([a, torch.add(input=a, other=x)], dim=1)
        return self.b(cat)


def _net():
    torch.manual_seed(0)
    return Net().eval()


def test_graph_module_is_cached_and_not_rebuilt_by_parameter_changes():
    bended = tb.BendedModule(_net())
    x = torch.randn(1, 1, 32)
    bended.trace(x=x)
    mask = tb.Mask(0.5, seed=1)
    bended.bend(mask, "a")
    graph = bended.bend_graph()
    first = bended(x)
    mask.prob = 0.1
    second = bended(x)
    assert bended.bend_graph() is graph, "a parameter change must not rebuild the graph"
    assert not torch.equal(first, second)
    bended.bend(tb.Scale(2.0), "b")
    assert bended.bend_graph() is not graph, "a new activation op rebuilds it, once"
    assert bended.bend_graph() is bended.bend_graph()


def test_activation_op_reaches_consumers_in_lists_and_keyword_arguments():
    module = _net()
    bended = tb.BendedModule(module)
    x = torch.randn(1, 1, 32)
    bended.trace(x=x)
    bended.bend(tb.Scale(3.0), "a")
    a = module.a(x) * 3.0
    expected = module.b(torch.cat([a, a + x], dim=1))
    torch.testing.assert_close(bended(x), expected)


def test_keys_match_in_full_not_by_prefix():
    bended = tb.BendedModule(_net())
    bended.trace(x=torch.randn(1, 1, 32))
    assert "add" in bended.activation_names()
    assert bended.resolve("a") == ["a"]
    bended.bend(tb.Scale(0.0), "a")
    assert torch.equal(bended.bended_state_dict()["a.weight"], bended.state_dict()["a.weight"])
    assert bended.resolve(r"a\..*") == ["a.weight", "a.bias"]


def test_key_matching_nothing_lists_closest_names():
    bended = tb.BendedModule(_net())
    bended.trace(x=torch.randn(1, 1, 32))
    with pytest.raises(tb.BendingError, match=r"'a\.weigth' matches no .*closest.*a\.weight"):
        bended.bend(tb.Scale(2.0), "a.weigth")


def test_two_weight_ops_on_one_parameter_chain():
    bended = tb.BendedModule(_net())
    bended.bend(tb.Scale(2.0), "a.weight")
    bended.bend(tb.Bias(1.0), "a.weight")
    original = bended.state_dict()["a.weight"]
    torch.testing.assert_close(bended.bended_state_dict()["a.weight"], original * 2 + 1)


def test_two_activation_ops_on_one_node_chain_in_order():
    module = _net()
    bended = tb.BendedModule(module)
    x = torch.randn(1, 1, 32)
    bended.trace(x=x)
    bended.bend(tb.Scale(2.0), "a")
    bended.bend(tb.Bias(1.0), "a")
    a = module.a(x) * 2 + 1
    torch.testing.assert_close(bended(x), module.b(torch.cat([a, a + x], dim=1)))


def test_parameters_are_numbers_and_defaults_construct():
    mask = tb.Mask(0.25)
    assert mask.prob * 2 == 0.5
    threshold = tb.Threshold()
    assert torch.equal(threshold.apply(torch.tensor([-1.0, 0.5]), {}), torch.tensor([0.0, 1.0]))


def test_ordered_mask_on_activations_and_chained_ops_run():
    module = _net()
    bended = tb.BendedModule(module)
    x = torch.randn(1, 1, 32)
    bended.trace(x=x)
    bended.bend(tb.OrderedMask(0.5, dim=1), "a")
    bended.bend(tb.Mask(0.5, dim=1) >> tb.Scale(2.0), "cat")
    out = bended(x)
    assert out.shape == (1, 1, 32) and torch.isfinite(out).all()
    kept = bended.get_activations("a", x=x)["a"].abs().sum(-1).squeeze(0) != 0
    assert kept.sum() == 2, "OrderedMask keeps exactly round(prob * n) channels"


def test_configs_are_json_and_compare_equal_after_reload(tmp_path):
    bended = tb.BendedModule(_net())
    bended.trace(x=torch.randn(1, 1, 32))
    bended.bend(tb.Mask(0.3, dim=1) >> tb.Scale(2.0), "a", "b.weight")
    bended.bend(tb.Noise(0.2, op="mul"), "cat")
    config = bended.bending_config()
    config.save(tmp_path / "config.json")
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["format"] == "bendserver.config"
    reloaded = tb.BendingConfig.load(tmp_path / "config.json", module=bended)
    assert reloaded == config
    other = tb.BendedModule(_net())
    other.trace(x=torch.randn(1, 1, 32))
    other.bend(reloaded)
    x = torch.randn(1, 1, 32)
    torch.testing.assert_close(other(x), bended(x))


def test_loops_over_python_int_arguments_trace():
    class Loop(nn.Module):
        def forward(self, x, n: int):
            for _ in range(n):
                x = x * 2
            return x

    bended = tb.BendedModule(Loop())
    bended.trace(x=torch.ones(2), n=3)
    assert torch.equal(bended(torch.ones(2), 3), torch.full((2,), 8.0))


def test_installing_does_not_replace_torch():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    torch_specs = [d for d in pyproject["project"]["dependencies"] if d.startswith("torch")]
    assert torch_specs and all(not re.search(r"==|<", d) for d in torch_specs)
