"""Native runs (bendserver/passes/native.py): a small block's operators played as C compiled for
their fixed layouts equal eager PyTorch, keep weights and bends live, never hand out storage
they write again, and fall back to torch without a compiler."""

import copy
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bendserver as tb
from bendserver.passes import cbuild, native, optimize


def _native_calls(engine: tb.StreamEngine) -> int:
    return sum(n.target is native.play_native for n in engine.node._forward.__self__.graph.nodes)


class Ops(nn.Module):
    """One of each operator the native runs write, on a few frames: convolutions (grouped,
    dilated, strided, transposed), a matrix product, batch norm, element-wise ops with
    broadcasting, stack, cat, sum, flip, chunk and a copying reshape, and a cache."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 4))
        self.grouped = nn.Conv1d(8, 8, 3, groups=2, dilation=2)
        self.strided = nn.Conv1d(8, 6, 2, stride=2)
        self.up = nn.ConvTranspose1d(6, 4, 4, stride=2)
        self.norm = nn.BatchNorm1d(4).eval()
        self.norm.running_mean.uniform_(-0.5, 0.5)
        self.norm.running_var.uniform_(0.5, 2.0)
        self.linear = nn.Parameter(torch.randn(5, 4))
        self.scale = nn.Parameter(torch.randn(4, 1))

    def forward(self, x):  # x: [1, 8, 4]
        joined = torch.cat([self.cache, x], -1)
        self.cache.copy_(joined[..., -4:])
        y = F.leaky_relu(self.grouped(joined), 0.2)  # [1, 8, 4]
        y = torch.tanh(self.strided(y))  # [1, 6, 2]
        y = F.conv_transpose1d(y, self.up.weight, self.up.bias, 2)
        y = torch.batch_norm(y, self.norm.weight, self.norm.bias, self.norm.running_mean,
                             self.norm.running_var, False, 0.1, 1e-5, False)  # fmt: skip
        y = y * self.scale  # [1, 4, 6]
        a, b = torch.chunk(y, 2, dim=1)
        y = torch.cat([torch.sigmoid(a) - b, F.softplus(b)], 1)
        y = torch.stack([y, y.flip(-1)]).sum(0) / 2
        rows = torch.mm(y[0].t(), self.linear.t())  # [6, 5]
        return rows.t().reshape(1, 5, 6)[:, :4] + torch.pow(y, 2)


def test_each_operator_plays_natively_as_eager_pytorch():
    torch.manual_seed(0)
    model = Ops().eval()
    reference = copy.deepcopy(model)
    bended = tb.BendedModule(model)
    bended.trace(x=torch.zeros(1, 8, 4))
    graph = optimize(bended.build("forward", []))
    assert sum(n.target is native.play_native for n in graph.graph.nodes) == 1
    blocks = [torch.randn(1, 8, 4) for _ in range(16)]
    with torch.inference_mode():
        played = [graph(b).clone() for b in blocks]
        eager = [reference(b) for b in blocks]
    for index, (got, want) in enumerate(zip(played, eager, strict=True)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"block {index}")


def _decoder() -> nn.Module:
    """Cached convolutions (acids' cached_conv) around a transposed one, at a small block."""
    cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")
    cc.use_cached_conv(True)
    torch.manual_seed(3)
    return nn.Sequential(
        cc.Conv1d(1, 16, 5, padding=cc.get_padding(5)),
        nn.LeakyReLU(0.2),
        cc.Conv1d(16, 16, 3, dilation=3, padding=cc.get_padding(3, dilation=3)),
        nn.Tanh(),
        cc.Conv1d(16, 1, 3, padding=cc.get_padding(3)),
    ).eval()


def _with_and_without(model, block, monkeypatch):
    from bendserver.passes import pipeline

    without = tuple(p for p in pipeline.PASSES if p.name != "native-runs")
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "PASSES", without)
        plain = tb.StreamEngine(model(), block=block)
    return plain, tb.StreamEngine(model(), block=block)


def test_a_weight_change_and_a_bend_apply_at_a_block_boundary_as_without(monkeypatch):
    """A weight op swaps the weights' storage (the runs read their pointers again at each call),
    an activation op splits the run (a structure change builds new runs), a parameter moved
    live is read where it lies: each plays from the same block as without native runs."""
    layers = _decoder()
    plain, played = _with_and_without(lambda: copy.deepcopy(layers), 16, monkeypatch)
    assert _native_calls(played) == 1 and _native_calls(plain) == 0
    rng = np.random.default_rng(5)
    for index in range(48):
        if index == 8:
            for engine in (plain, played):
                engine.add_op("weights", tb.Scale(0.5), ".*weight")
        if index == 16:
            for engine in (plain, played):
                engine.add_op("bend", tb.Scale(2.0), "_1")
            assert _native_calls(played) >= 1  # the runs around the op, built again
        if index == 24:
            for engine in (plain, played):
                engine.set_param("bend", "value", 0.25)
        audio = (0.3 * rng.standard_normal((1, 16))).astype(np.float32)
        np.testing.assert_allclose(played.process(audio), plain.process(audio), atol=1e-5)


def test_what_a_run_returns_is_never_written_by_a_later_block():
    """The output of one block, kept, stays what it was when later blocks play (a native run's
    own storage is not what the graph returns)."""
    engine = tb.StreamEngine(_decoder(), block=16, fuse=False)
    forward = engine.node._forward
    with torch.inference_mode():
        first = forward(torch.ones(1, 1, 16))
        kept = first.clone()
        forward(-torch.ones(1, 1, 16))
    torch.testing.assert_close(first, kept, atol=0, rtol=0)


def test_without_a_compiler_the_runs_play_torch(monkeypatch, caplog):
    monkeypatch.setenv("CC", "no-such-compiler")
    cbuild.compiler.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="bendserver.passes"):
            engine = tb.StreamEngine(_decoder(), block=16, fuse=False)
    finally:
        cbuild.compiler.cache_clear()
    assert _native_calls(engine) == 0
    assert "no C compiler (no-such-compiler)" in caplog.text
    with torch.inference_mode():
        out = engine.node._forward(torch.ones(1, 1, 16))
    assert out.shape == (1, 1, 16) and torch.isfinite(out).all()


def test_a_graph_built_again_loads_its_compiled_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path))
    layers = _decoder()
    tb.StreamEngine(copy.deepcopy(layers), block=16)
    assert len(list((tmp_path / "cache" / "native").glob("*.so"))) == 1

    def refused(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(cbuild, "_compile", refused)
    assert _native_calls(tb.StreamEngine(copy.deepcopy(layers), block=16)) == 1


def test_large_blocks_stay_with_torch():
    """At blocks where torch's kernels win (matrix products of more than 16 rows, operands of
    more than 4 096 elements) nothing plays natively."""
    engine = tb.StreamEngine(_decoder(), block=1024, fuse=False)
    assert _native_calls(engine) == 0


def test_recording_a_graphs_layouts_writes_and_draws_nothing_that_plays():
    """A graph built while a server plays shares its caches with the graph playing: the call
    that records its layouts plays a copy (no version of a cache moves, even for a moment), and
    its draws take nothing from torch's generator."""
    from bendserver.passes.state import recorded

    class Drawing(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = _decoder()

        def forward(self, x):
            return self.inner(x) + 0.01 * torch.randn_like(x)

    bended = tb.BendedModule(Drawing().eval())
    bended.trace(x=torch.zeros(1, 1, 16))
    graph = bended.build("forward", [])
    state = [*graph.buffers()]
    versions = [t._version for t in state]
    stream = torch.random.get_rng_state()
    values = recorded(graph)
    assert [t._version for t in state] == versions
    assert torch.equal(torch.random.get_rng_state(), stream)
    output = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    assert values[output].shape == (1, 1, 16)
