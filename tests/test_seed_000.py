"""The cells of the torchbend notebook "Extended tracing" (seed 000), run with bendserver,
including the cells marked "does not work" there."""

import math

import pytest
import torch
from torch import nn

import bendserver as tb


class Doug(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_module = nn.Conv1d(1, 16, 3)
        self.batch_norm = nn.BatchNorm1d(16)

    def forward(self, x: torch.Tensor):
        if x.shape[1] > 1:
            return torch.cat([self.forward(x[:, [i]]) for i in range(x.shape[1])], -1)
        else:
            outs = []
            for i in range(x.shape[0]):
                out_tmp = self.conv_module(x[[i]])
                out_tmp = self.batch_norm(out_tmp)
                outs.append(out_tmp)
            return sum(outs)


class LoopFoo(nn.Module):
    def forward(self, x, n: int):
        for _ in range(n):
            x = x * x
        return x


class LogicalFoo(nn.Module):
    def forward(self, x):
        if x.all():
            return 1
        else:
            return 0


class ShapeFoo(nn.Module):
    def forward(self, x):
        return x * x.shape[0]


class Greg(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_module = nn.Conv1d(1, 4, 3)

    def forward(self, x):
        return self.conv_module(x)


def test_fx_rejects_doug_and_we_trace_it():
    module = Doug().eval()
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(module)
    bended = tb.BendedModule(module)
    graph = bended.trace(x=torch.randn(1, 1, 16))
    targets = [str(n.target) for n in graph.nodes if n.op == "call_module"]
    assert targets == ["conv_module", "batch_norm"]
    x = torch.randn(1, 1, 16)
    torch.testing.assert_close(bended(x), module(x), rtol=0, atol=1e-6)


def test_hardcoded_control_flow_is_guarded():
    module = Doug().eval()
    bended = tb.BendedModule(module)
    bended.trace(x=torch.randn(1, 1, 16))
    bended(torch.randn(1, 1, 16))
    with pytest.raises(tb.FlowGuardError, match=r"branch 'gt' at .*test_seed_000.py:\d+ .*False"):
        bended(torch.randn(1, 2, 16))

    bended.trace(x=torch.randn(1, 2, 16))
    x = torch.randn(1, 2, 16)
    torch.testing.assert_close(bended(x), module(x), rtol=0, atol=1e-6)
    with pytest.raises(tb.FlowGuardError, match="trace"):
        bended(torch.randn(1, 1, 16))


def test_flow_steps_list_each_decision():
    bended = tb.BendedModule(Doug().eval())
    graph = bended.trace(x=torch.randn(1, 2, 16))
    steps = graph.flow_steps
    logical = [s for s in steps if isinstance(s, tb.LogicalFlowStep)]
    assert [s.value for s in logical] == [True, False, False]
    assert all("test_seed_000.py:" in s.file for s in steps)
    assert repr(logical[0]).startswith("LogicalFlowStep(name=gt, value=True, file=")
    loops = [s for s in steps if isinstance(s, tb.LoopFlowStep)]
    assert [s.value for s in loops] == [2, 1, 1]


def test_loop_over_int_argument():
    foo = LoopFoo()
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        torch.fx.symbolic_trace(foo)
    bended = tb.BendedModule(foo)
    graph, out = bended.trace(x=torch.tensor(2.0), n=4, _return_out=True)
    assert out == (torch.tensor(65536.0),)
    assert [(type(s), s.name, s.value) for s in graph.flow_steps] == [(tb.ValueFlowStep, "n", 4)]
    assert bended(torch.tensor(3.0), 4) == torch.tensor(3.0) ** 16
    with pytest.raises(tb.FlowGuardError, match="'n'.* 4 .*now 3"):
        bended(torch.tensor(3.0), 3)


def test_logical_flow_on_tensor_value():
    foo = LogicalFoo()
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(foo)
    bended = tb.BendedModule(foo)
    graph, out = bended.trace(x=torch.tensor(0), _return_out=True)
    assert out == (0,)
    assert [(type(s), s.value) for s in graph.flow_steps] == [(tb.LogicalFlowStep, False)]
    assert bended(torch.tensor(0)) == 0
    with pytest.raises(tb.FlowGuardError):
        bended(torch.tensor(1))


def test_shape_access_generalises_to_other_shapes():
    bended = tb.BendedModule(ShapeFoo())
    graph, out = bended.trace(x=torch.ones(4), _return_out=True)
    assert torch.equal(out[0], torch.full((4,), 4.0))
    assert graph.flow_steps == []
    # the "critical case": another shape that takes the same path runs normally
    assert torch.equal(bended(torch.ones(6)), torch.full((6,), 6.0))


def test_len_sqrt_constructors_and_shape_iteration():
    class Mixed(nn.Module):
        def forward(self, x):
            scale = math.sqrt(len(x))
            size = [s for s in x.shape]
            return x * scale + torch.zeros(x.shape[0], *size[1:]) + torch.ones(x.size(1))

    module = Mixed()
    bended = tb.BendedModule(module)
    graph = bended.trace(x=torch.randn(4, 3))
    assert {type(s) for s in graph.flow_steps} == {tb.LoopFlowStep}
    x = torch.randn(4, 3)
    torch.testing.assert_close(bended(x), module(x))
    with pytest.raises(tb.FlowGuardError, match="loop count"):
        bended(torch.randn(9, 3))


def test_greg_bias_generalises_mask_is_shape_bound_channeled_mask_generalises():
    torch.manual_seed(0)
    bended = tb.BendedModule(Greg())
    x = torch.randn(1, 1, 16)
    graph, out = bended.trace(x=x, _return_out=True)
    assert "conv_module  call_module  torch.Size([1, 4, 14])" in bended.print_activations()

    bended.bend(tb.Bias(1.0), "conv_module$")
    torch.testing.assert_close(bended(x), out[0] + 1)
    assert bended(torch.randn(4, 1, 32)).shape == (4, 4, 30)

    bended.reset()
    bended.bend(tb.Mask(0.3), "conv_module$")
    masked = bended(x)
    assert ((masked == 0) | (masked == out[0])).all() and (masked == 0).any()
    with pytest.raises(tb.ShapeError, match=r"Mask.*conv_module.*\(1, 4, 14\).*\(4, 4, 30\)"):
        bended(torch.randn(4, 1, 32))

    bended.reset()
    bended.bend(tb.Mask(prob=0.3, dim=-2), "conv_module$")
    y = bended(torch.randn(4, 1, 32))
    channel_zero = (y == 0).all(dim=-1).all(dim=0)
    assert y.shape == (4, 4, 30)
    assert ((y == 0).all(dim=-1) == channel_zero).all()
