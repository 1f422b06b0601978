"""No silent no-op bends: a tensor an op cannot change the output through (the destination of a
streaming cache's in-place copy, the unused result of that copy) is not listed as an activation
and is refused by name, with the tensor to bend instead; every tensor listed changes the output.

Before, cached_conv's cache slices were listed, bent without an error, and nothing happened.
The rule reads the graph alone, so it holds on any fx graph (an aten-level one here, as a
converted TorchScript method's may be)."""

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import bendserver as tb
from bendserver.bending.graph import insert_ops, writes_into
from bendserver.bending.inert import inert_nodes

cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")

FRAMES = 32


class Voice(nn.Module):
    """cached_conv's streaming layers: each writes its cache with ``pad[:batch].copy_(...)``;
    a transposed convolution adds its overlap in place."""

    def __init__(self) -> None:
        super().__init__()
        cc.use_cached_conv(True)
        self.a = cc.Conv1d(1, 4, 5, padding=cc.get_padding(5, mode="causal"))
        self.up = cc.ConvTranspose1d(4, 4, 4, stride=2, padding=1)
        self.b = cc.Conv1d(4, 1, 3, padding=cc.get_padding(3), stride=2)

    def forward(self, x):
        return self.b(torch.tanh(self.up(self.a(x))))


def traced():
    torch.manual_seed(0)
    model = Voice().eval()
    reference = copy.deepcopy(model)
    bended = tb.BendedModule(model)
    bended.trace(x=torch.zeros(1, 1, FRAMES))
    return bended, reference


def cache_writes(graph):
    """Each in-place copy in the graph: (destination, value) names."""
    return [
        (node.args[0].name, node.args[1].name)
        for node in graph.nodes
        if node.op == "call_method" and node.target == "copy_"
    ]


def play(module, blocks=4):
    """Output of a few blocks of noise (the caches then hold something)."""
    signal = torch.from_numpy(np.random.default_rng(1).standard_normal((blocks, 1, 1, FRAMES)))
    with torch.no_grad():
        return torch.cat([module(x.float()) for x in signal], -1)


def test_cache_destinations_are_not_listed_and_every_listed_tensor_changes_the_output(capsys):
    bended, reference = traced()
    writes = cache_writes(bended.graph())
    assert len(writes) == 4  # a, up, b's cache and b's downsampling delay
    listed = bended.activation_names()
    for destination, value in writes:
        assert destination not in listed and value in listed
    assert "x" in listed and not any(name.startswith("copy_") for name in listed)
    bended.print_activations()
    table = capsys.readouterr().out
    assert all(f"\n{d} " not in table and f"\n{v} " in table for d, v in writes)
    expected = play(reference)
    for name in listed:
        bended, _ = traced()
        bended.bend(tb.Bias(0.5), name)
        assert not torch.equal(play(bended), expected), f"bending {name} changed nothing"


def test_a_cache_destination_is_refused_naming_what_to_bend_instead():
    bended, reference = traced()
    destination, value = cache_writes(bended.graph())[-1]
    with pytest.raises(tb.BendingError) as refused:
        bended.bend(tb.Scale(0.0), destination)
    message = str(refused.value)
    assert f"bending '{destination}' would change nothing" in message
    assert f"{destination}.copy_({value})" in message and f"bend '{value}'" in message
    result = next(
        n.name
        for n in bended.graph().nodes
        if n.op == "call_method" and n.args[0].name == destination
    )
    with pytest.raises(tb.BendingError, match=f"bend '{value}' \\(what is written\\)"):
        bended.bend(tb.Scale(0.0), result)
    bended.bend(tb.Scale(0.0), value)  # what it names instead does change the output
    assert not torch.equal(play(bended), play(reference))


def test_the_engine_refuses_it_and_plays_on():
    torch.manual_seed(0)
    engine = tb.StreamEngine(Voice().eval(), block=FRAMES, fuse=False)
    destination, value = cache_writes(engine.bended.graph())[0]
    with pytest.raises(tb.BendingError, match=f"bend '{value}'"):
        engine.add_op("quiet", tb.Scale(0.0), destination)
    assert engine.ops == {} and destination not in engine.bended.activation_names()
    engine.process(np.zeros((1, FRAMES), np.float32))


def test_the_rule_reads_any_fx_graph_aten_copies_included():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 1, 4))
            self.conv = nn.Conv1d(1, 1, 5)

        def forward(self, x):
            x = torch.cat([self.cache, x], -1)
            self.cache[:, :, :].copy_(x[..., -4:])
            return self.conv(x)

    graph = make_fx(Cache())(torch.zeros(1, 1, 16)).graph
    copy_node = next(n for n in graph.nodes if n.target is torch.ops.aten.copy_.default)
    destination, value = copy_node.args
    assert writes_into(copy_node, destination)
    inert = inert_nodes(graph)
    assert set(inert) == {destination.name, copy_node.name}
    assert f"bend '{value.name}'" in inert[destination.name]
    # an op on the destination keeps the aten write into the real cache (not into its output)
    bent, _ = insert_ops(graph, [(destination.name, "op")])
    copied = next(n for n in bent.nodes if n.target is torch.ops.aten.copy_.default)
    assert copied.args[0].name == destination.name


def test_a_tensor_changed_in_place_names_the_result_to_bend():
    class Rectify(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 2, 3)

        def forward(self, x):
            return self.conv(x).relu_() * 2

    bended = tb.BendedModule(Rectify())
    bended.trace(x=torch.zeros(1, 1, FRAMES))
    assert bended.activation_names() == ["x", "relu_", "mul"]
    with pytest.raises(tb.BendingError, match=r"in place \(conv\.relu_\(\)\); bend 'relu_'"):
        bended.bend(tb.Scale(0.0), "conv")
