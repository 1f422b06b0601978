"""The optimising passes: each named and documented, each rewriting what it claims, and the
optimised graph equal to the unoptimised one (<= 1e-6) on the module-kind table, the shipped
models with their presets and a cached-conv model, block by block, with live changes."""

import copy
import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from streaming import CausalStack, twin
from test_module_kinds import KINDS, _pair
from torch import nn

import bendserver as tb
from bendserver.compat import has_forward_hooks
from bendserver.passes import (
    PASSES,
    compiled,
    convolution,
    native,
    optimize,
    pipeline,
    run_passes,
    scripted,
)
from bendserver.passes.convolution import (
    folded_conv_transpose1d,
    row_conv1d,
    strided_conv1d,
    tap_sum_conv1d,
)
from bendserver.tracing import is_guard


def _graph(module, shape, ops=None):
    """A bended graph module of ``module`` traced for ``shape``, and a second, optimised."""
    return _graphs(module, shape, ops)[1:]


def _graphs(module, shape, ops=None):
    bended = tb.BendedModule(module)
    bended.trace(x=torch.randn(shape))
    bends = [(ops, [".*"])] if ops is not None else []
    return bended, bended.build("forward", bends), optimize(bended.build("forward", bends))


def test_every_pass_is_named_and_documented():
    names = [graph_pass.name for graph_pass in PASSES]
    assert len(set(names)) == len(names)
    assert all(graph_pass.doc for graph_pass in PASSES)


def test_an_unknown_mode_is_refused():
    with pytest.raises(tb.BendingError, match="none, passes"):
        tb.StreamEngine("drive", block=256, optimize="fast")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ops", [None, "scale"])
def test_module_kinds_optimised_equal_unoptimised(kind, ops):
    module, _, shape = _pair(kind)
    op = tb.Scale(1.5) if ops else None
    plain, optimised = _graph(module, shape, op)
    with torch.inference_mode():
        for _ in range(3):  # both read and write the module's caches: each starts from the same
            x = torch.randn(shape)
            state = [b.clone() for b in module.buffers()]
            expected = plain(x)
            for buffer, saved in zip(module.buffers(), state, strict=True):
                buffer.copy_(saved)
            torch.testing.assert_close(optimised(x), expected, rtol=0, atol=1e-6)


def _engines(model, block, preset, **options):
    return [
        tb.StreamEngine(model, block=block, preset=preset, optimize=mode, **options)
        for mode in ("none", "passes")
    ]


def _stream(engines, blocks, rng):
    plain, optimised = engines
    for _ in range(blocks):
        audio = (0.5 * rng.standard_normal((plain.in_channels, plain.in_frames))).astype(np.float32)
        np.testing.assert_allclose(optimised.process(audio), plain.process(audio), atol=1e-6)


@pytest.mark.parametrize("model", ["drive", "wavae"])
def test_shipped_models_with_presets_block_by_block_and_live_changes(model):
    engines = _engines(model, 256, model)
    rng = np.random.default_rng(0)
    _stream(engines, 8, rng)
    op_id = next(iter(engines[0].ops))
    param = next(iter(engines[0].op(op_id).params))
    for engine in engines:  # a parameter, a new op, the weights: all live, no re-trace
        engine.set_param(op_id, param, 0.3)
        engine.add_op("extra", tb.Scale(0.7), ".*conv.*weight")
        engine.set_interpolation(None)
    _stream(engines, 4, rng)
    for engine in engines:
        engine.request_reset()
    _stream(engines, 4, rng)


def test_a_channel_mask_folds_into_the_layer_reading_it_and_stays_live():
    """drive's preset masks the channels of clip_in, which only drive_out (a 1x1 convolution)
    reads: with the passes the mask is in drive_out's weight and costs nothing per block.
    Its changes stay live and exact; an op that does not commute with it on the same
    activation unfolds it (the order of the two is kept), and removing that op folds it
    again."""
    engines = _engines("drive", 256, "drive")
    plain, optimised = engines
    rng = np.random.default_rng(3)
    assert optimised.folded_ops == ["mask"] and plain.folded_ops == []
    assert optimised.node._forward.__self__.code.count(
        "bend_"
    ) < plain.node._forward.__self__.code.count("bend_")
    _stream(engines, 4, rng)
    for engine in engines:
        engine.set_param("mask", "prob", 0.3)
    _stream(engines, 4, rng)
    for engine in engines:
        engine.add_op("lift", tb.Bias(0.1), "clip_in")  # (m * h) + b is not m * (h + b)
    _stream(engines, 4, rng)
    assert optimised.folded_ops == []
    for engine in engines:
        engine.remove_op("lift")
        engine.enable_op("mask", False)
    _stream(engines, 4, rng)
    assert optimised.folded_ops == ["mask"]
    for engine in engines:
        engine.enable_op("mask", True)
        engine.add_op("more", tb.Mask(0.5, dim=1, seed=2), "clip_in")  # scales commute: both fold
    _stream(engines, 4, rng)
    assert optimised.folded_ops == ["mask", "more"]


def test_an_op_whose_readers_do_not_mix_channels_linearly_does_not_fold():
    """clip_out is read by the tone and sag filters (16 and 8 taps: a mask changed between
    blocks would reach back into their caches): the op stays in the graph."""
    engines = [tb.StreamEngine("drive", block=256, optimize=mode) for mode in ("none", "passes")]
    for engine in engines:
        engine.add_op("mask", tb.Mask(0.5, dim=1, seed=1), "clip_out")
        engine.add_op("units", tb.Mask(0.5, seed=1), "clip_in")  # per unit, not per channel
    assert engines[1].folded_ops == []
    _stream(engines, 4, np.random.default_rng(4))


def _cached_convs() -> nn.Module:
    """Three cached convolutions (acids' cached_conv), one dilated, with an activation."""
    cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")
    cc.use_cached_conv(True)
    torch.manual_seed(0)
    return nn.Sequential(
        cc.Conv1d(1, 8, 3, padding=cc.get_padding(3)),
        nn.LeakyReLU(0.2),
        cc.Conv1d(8, 8, 3, dilation=4, padding=cc.get_padding(3, dilation=4)),
        cc.Conv1d(8, 1, 1),
    ).eval()


def test_a_cached_conv_model_block_by_block():
    layers = _cached_convs()
    engines = [tb.StreamEngine(layers, block=128, optimize=m) for m in ("none", "passes")]
    _stream(engines, 8, np.random.default_rng(1))


#: The passes but the last, which plays runs of the graph's nodes in TorchScript (the graph
#: then holds calls of those runs, not the nodes the other passes wrote).
PYTHON_PASSES = tuple(p for p in PASSES if p.name != "scripted-runs")


@pytest.fixture
def own_forms(tmp_path, monkeypatch):
    """A cache folder of the test's own, and no form chosen in this process yet."""
    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path))
    monkeypatch.setattr(convolution, "_CHOSEN", {})
    monkeypatch.setattr(convolution, "_RETUNED_SINCE", None)
    convolution._store.cache_clear()
    yield tmp_path / "cache"
    convolution._store.cache_clear()


def test_drive_is_rewritten_as_the_passes_say(own_forms, monkeypatch):
    """The dilated sag filter takes the form its timing chose (a third of a convolution's time
    on a quiet machine; chosen here, as a busy machine may find no form faster)."""
    monkeypatch.setattr(pipeline, "PASSES", PYTHON_PASSES)
    dilated = lambda x, weight, bias, dilation, *rest: tap_sum_conv1d if dilation > 1 else None
    monkeypatch.setattr(convolution, "_measured", dilated)
    engine = tb.StreamEngine("drive", block=256, preset="drive")
    nodes = list(engine.node._forward.__self__.graph.nodes)
    assert not [n for n in nodes if n.op == "call_module"], "every module called directly"
    assert not [n for n in nodes if n.op == "get_attr" and "." in n.target]
    rewritten = [n for n in nodes if n.target in (strided_conv1d, tap_sum_conv1d, row_conv1d)]
    assert rewritten, "the dilated sag filter"
    assert not [n for n in nodes if n.target is torch.cat], "concatenations into storage..."
    parts = [n for n in nodes if n.target is torch.Tensor.copy_ and n.args[0].op == "get_attr"]
    assert len(parts) == 6, "...as copies of the cache and the block into views of it"
    assert not [n for n in nodes if n.target == "detach"]
    assert not [n for n in nodes if is_guard(n)], "the cache-batch checks are settled once"
    assert not [n for n in nodes if n.target is getattr], "no shape read per block"


def test_the_concatenation_keeps_allocating_when_its_value_leaves_the_block():
    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 1, 2))

        def forward(self, x):
            padded = torch.cat([self.cache, x], -1)
            self.cache.copy_(padded[..., -2:])
            return padded  # the caller keeps it: a reused buffer would change under it

    plain, optimised = _graph(Leaky(), (1, 1, 8))
    cat = next(n for n in optimised.graph.nodes if n.target is torch.cat)
    assert "out" not in cat.kwargs
    with torch.inference_mode():
        first = optimised(torch.ones(1, 1, 8))
        optimised(torch.zeros(1, 1, 8))
        assert first.sum() == 8


class Constants(nn.Module):
    """A window computed from a buffer nothing writes (foldable), a cache written in place (not
    foldable) and a value nobody reads (dead)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.linspace(0, 1, 16))
        self.register_buffer("cache", torch.zeros(16))
        self.gain = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        shaped = torch.sqrt(self.window) * 2  # constant
        unused = x * 3  # dead  # noqa: F841
        out = x * shaped * self.gain + self.cache
        self.cache.copy_(x[0])
        return out


def test_constants_fold_live_values_stay_and_dead_code_goes():
    module = Constants()
    bended, plain, optimised = _graphs(module, (1, 16))
    targets = [n.target for n in optimised.graph.nodes]
    assert torch.sqrt not in targets, "the window is computed once"
    assert sum(t is not None and "mul" in str(t) for t in targets) == 2, "x * 3 is gone"
    with torch.inference_mode():
        x = torch.randn(1, 16)
        expected = plain(x)
        module.cache.zero_()
        torch.testing.assert_close(optimised(x), expected)
        bended.weight_bank.slots["gain"].data = torch.tensor(5.0)  # as the engine swaps it
        module.cache.zero_()
        expected = x * torch.sqrt(module.window) * 2 * 5.0
        torch.testing.assert_close(optimised(x), expected)
        torch.testing.assert_close(module.cache, x[0])


def test_a_module_with_hooks_keeps_them():
    calls = []
    stack = CausalStack()
    stack.act.register_forward_hook(lambda *args: calls.append(1))
    assert has_forward_hooks(stack.act) and not has_forward_hooks(stack.first)
    _, optimised = _graph(stack, (1, 1, 32))
    with torch.inference_mode():
        optimised(torch.randn(1, 1, 32))
    assert calls, "the hook ran"


@pytest.mark.parametrize("form", [strided_conv1d, tap_sum_conv1d, row_conv1d])
@pytest.mark.parametrize(
    "batch,channels,out,taps,dilation", [(1, 8, 1, 8, 128), (2, 3, 5, 3, 2), (1, 8, 1, 16, 1)]
)
def test_each_form_equals_the_convolution(form, batch, channels, out, taps, dilation):
    x = torch.randn(batch, channels, 300 + dilation * (taps - 1))
    weight, bias = torch.randn(out, channels, taps), torch.randn(out)
    expected = F.conv1d(x, weight, bias, dilation=dilation)
    torch.testing.assert_close(form(x, weight, bias, dilation), expected)
    torch.testing.assert_close(  # an input that does not start its storage (a cache's tail)
        form(x[..., 1:], weight, None, dilation),
        F.conv1d(x[..., 1:], weight, None, dilation=dilation),
    )
    transposed = weight.transpose(0, 1).contiguous().transpose(0, 1)  # a weight's other layout
    torch.testing.assert_close(form(x, transposed, bias, dilation), expected)


@pytest.mark.parametrize("stride,dilation,taps", [(4, 1, 8), (2, 3, 3), (1, 1, 1), (16, 1, 5)])
def test_rows_take_any_stride_and_one_tap(stride, dilation, taps):
    x = torch.randn(2, 6, 41 + dilation * (taps - 1))
    weight, bias = torch.randn(5, 6, taps), torch.randn(5)
    expected = F.conv1d(x, weight, bias, stride, dilation=dilation)
    torch.testing.assert_close(row_conv1d(x, weight, bias, dilation, stride), expected)
    torch.testing.assert_close(  # an input that does not start its storage (a cache's tail)
        row_conv1d(x[..., 1:], weight, None, dilation, stride),
        F.conv1d(x[..., 1:], weight, None, stride, dilation=dilation),
    )


@pytest.mark.parametrize("stride,taps,frames", [(4, 8, 2), (2, 4, 1), (3, 2, 7), (1, 3, 5)])
def test_the_folded_transposed_convolution_equals_torchs(stride, taps, frames):
    x = torch.randn(2, 6, frames)
    weight, bias = torch.randn(6, 5, taps), torch.randn(5)
    expected = F.conv_transpose1d(x, weight, bias, stride)
    torch.testing.assert_close(folded_conv_transpose1d(x, weight, bias, stride), expected)
    torch.testing.assert_close(
        folded_conv_transpose1d(x, weight, None, stride),
        F.conv_transpose1d(x, weight, None, stride),
    )


class _WideFewFrames(nn.Module):
    """A RAVE encoder's last layers and its decoder's first upsampling: 768 channels, a few
    frames, a strided convolution and a transposed one."""

    def __init__(self):
        super().__init__()
        self.down = nn.Parameter(torch.randn(768, 384, 8) / 60)
        self.up = nn.Parameter(torch.randn(768, 384, 8) / 60)
        self.bias = nn.Parameter(torch.randn(384))

    def forward(self, x):
        y = F.conv1d(x, self.down, None, 4)
        return F.conv_transpose1d(y, self.up, self.bias, 4)


def test_wide_layers_on_few_frames_are_rewritten_and_stay_live(monkeypatch):
    """torch's convolution repacks a wide weight at every call (2.7 ms here for the strided
    one, 8.4 ms for the transposed one); the rows and the overlap-add read it once."""
    monkeypatch.setattr(convolution, "_CHOSEN", {})
    module = _WideFewFrames()
    bended, plain, optimised = _graphs(module, (1, 384, 15))
    forms = {n.target for n in optimised.graph.nodes if n.op == "call_function"}
    assert {row_conv1d, folded_conv_transpose1d} <= forms
    x = torch.randn(1, 384, 15)
    with torch.inference_mode():
        torch.testing.assert_close(optimised(x), plain(x), rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            module.up.mul_(-1)  # a weight bended in place plays at the next call
        torch.testing.assert_close(optimised(x), module(x), rtol=1e-5, atol=1e-5)


def test_a_form_is_chosen_once_per_machine_whatever_later_timings_say(own_forms, monkeypatch):
    """The forms round differently: timed anew in each process, a busy machine's render wrote
    other bytes. The first choice stored plays in every later process until a retuning, whose
    first choice then plays in the run's other processes too."""
    shape = ((1, 8, 300), (1, 8, 4), True, 1)
    monkeypatch.setattr(convolution, "_measured", lambda *shapes: tap_sum_conv1d)
    assert convolution.fastest_form(*shape) is tap_sum_conv1d
    monkeypatch.setattr(convolution, "_CHOSEN", {})  # another process, timing otherwise
    monkeypatch.setattr(convolution, "_measured", lambda *shapes: strided_conv1d)
    assert convolution.fastest_form(*shape) is tap_sum_conv1d, "the stored choice"
    [stored] = own_forms.glob("convolution-forms-*.json")
    header = json.loads(stored.read_text())["header"]
    assert header["torch"] == torch.__version__ and "tap sums" in header["forms"]
    convolution.retune(time.time())
    assert convolution.fastest_form(*shape) is strided_conv1d, "timed again"
    monkeypatch.setattr(convolution, "_CHOSEN", {})  # another process of the retuning run
    monkeypatch.setattr(convolution, "_measured", lambda *shapes: None)
    assert convolution.fastest_form(*shape) is strided_conv1d, "chosen since the retuning"
    convolution.retune(None)
    monkeypatch.setattr(convolution, "_CHOSEN", {})
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        assert convolution.fastest_form(*shape) is None, "other threads: a choice of its own"
    finally:
        torch.set_num_threads(threads)


def test_a_form_is_chosen_only_where_it_measures_faster(own_forms, monkeypatch):
    def slow(x, weight, bias, dilation):
        time.sleep(0.02)  # slower than torch's on a busy machine's two threads too
        return F.conv1d(x, weight, bias, dilation=dilation)

    forms = convolution.FORMS
    monkeypatch.setattr(convolution, "FORMS", {"slow": slow})
    assert convolution.fastest_form((1, 8, 300), (1, 8, 4), True, 1) is None, "keeps torch's"
    monkeypatch.setattr(convolution, "FORMS", {"same": F.conv1d})
    assert convolution.fastest_form((1, 8, 300), (1, 8, 4), True, 1) is None, "remembered"
    monkeypatch.setattr(convolution, "_CHOSEN", {})
    monkeypatch.setattr(convolution, "FORMS", forms)
    fast = convolution.fastest_form((1, 8, 1200 + 128 * 7), (1, 8, 8), True, 128)
    assert fast in (strided_conv1d, tap_sum_conv1d), "torch's dilated path is several x slower"


def test_run_passes_reports_what_changed():
    stack = CausalStack()
    bended = tb.BendedModule(stack)
    bended.trace(x=torch.randn(1, 1, 32))
    changed = run_passes(bended.build("forward", []))
    assert {"direct-calls", "preallocated-cache", "direct-attributes"} <= set(changed)


def test_a_guard_that_shapes_settle_goes_and_one_they_do_not_stays():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.shape[-1] > 4:  # settled by the fixed shape
                x = x * 2
            if x.sum() > 0:  # depends on the values: stays a guard
                x = x + 1
            return x

    bended = tb.BendedModule(Branchy())
    bended.trace(x=torch.ones(1, 8))
    plain, optimised = bended.build("forward", []), optimize(bended.build("forward", []))
    guards = [n for n in optimised.graph.nodes if is_guard(n)]
    assert len(guards) == 1 and len([n for n in plain.graph.nodes if is_guard(n)]) == 2
    with torch.inference_mode():
        x = torch.ones(1, 8)
        torch.testing.assert_close(optimised(x), plain(x))
        with pytest.raises(tb.BendingError):
            optimised(-x)  # the traced branch is not this input's


needs_compiler = pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="torch.compile (inductor) builds C++ on the CPU: no compiler here",
)


def _compile_engines(**ops):
    """A passes engine and a compile engine of twin tiny streaming models, ``ops`` added
    before the first block (when the compile engine compiles)."""
    engines = [
        tb.StreamEngine(model, block=128, optimize=mode)
        for model, mode in zip(twin(CausalStack), ("passes", "compile"), strict=True)
    ]
    for engine in engines:
        for op_id, (op, key) in ops.items():
            engine.add_op(op_id, op(), key)
    return engines


@needs_compiler
def test_compile_plays_as_the_passes_and_everything_stays_live(monkeypatch):
    """The compiled forward, chosen here whatever it measures: block by block equal to the
    passes through a parameter change, a weight op's change, an op switched off and on and a
    reset, and no guard failed (nothing would have compiled on the audio thread)."""
    monkeypatch.setattr(compiled, "MARGIN", float("inf"))
    engines = _compile_engines(
        lift=(lambda: tb.Bias(0.1), "act"), soft=(lambda: tb.Scale(0.5), "first.conv.weight")
    )
    rng = np.random.default_rng(5)
    _stream(engines, 4, rng)
    forward = engines[1].node._forward
    assert isinstance(forward, compiled.GuardedForward), engines[1].compile_report
    assert engines[1].compile_report[-1].endswith(": compiled")
    for engine in engines:
        engine.set_param("lift", "value", -0.2)
        engine.set_param("soft", "value", 1.5)
    _stream(engines, 3, rng)
    for engine in engines:
        engine.enable_op("lift", False)
    _stream(engines, 3, rng)
    for engine in engines:
        engine.enable_op("lift", True)
        engine.request_reset()
    _stream(engines, 3, rng)
    assert engines[1].node._forward is forward and not forward.failed


class _Hiss(tb.BendingOp):
    """A custom op drawing from its own generator at every call (the built-in fresh noise is
    counter-based: no generator)."""

    def init_state(self, target, shape, dtype, device):
        return {"generator": torch.Generator().manual_seed(3)}

    def apply(self, x, state):
        return x + 0.1 * torch.randn(x.shape, generator=state["generator"])


@needs_compiler
def test_compile_keeps_the_passes_where_they_are_faster_or_dynamo_cannot_take_the_graph():
    """Chosen by measurement, said with figures; an op drawing from its own generator is not
    something dynamo takes whole: the passes play, the noise drawn as with the passes."""
    engines = _compile_engines(noise=(_Hiss, "act"))
    _stream(engines, 4, np.random.default_rng(6))
    bare, bended = engines[1].compile_report
    assert re.fullmatch(r"compiled \S+ ms vs passes \S+ ms per block: (compiled|the passes)", bare)
    assert bended.startswith("not compiled (") and bended.endswith("): the passes")
    assert not isinstance(engines[1].node._forward, compiled.GuardedForward)


def test_the_torchscript_ir_accessors_of_compat():
    """What the .ts converter reads through compat: a method's IR, a called function's body,
    constants, names, enums passed as ints, and which operators write or return views."""
    from bendserver import compat

    @torch.jit.script
    def doubled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class Calls(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Conv1d(1, 1, 1)

        def forward(self, x):
            return doubled(self.inner(x))

    scripted = torch.jit.script(Calls())
    assert {"forward"} <= set(compat.script_methods(scripted))
    graph = compat.script_method_graph(scripted, "forward")
    kinds = [node.kind() for node in graph.nodes()]
    assert "prim::CallMethod" in kinds and "prim::CallFunction" in kinds
    call = next(n for n in graph.nodes() if n.kind() == "prim::CallMethod")
    assert compat.ir_name(call) == "forward"
    body = compat.script_function_graph(next(n for n in graph.nodes() if "Function" in n.kind()))
    assert [n.kind() for n in body.nodes() if n.kind().startswith("aten")] == ["aten::mul"]
    constant = next(n for n in body.nodes() if n.kind() == "prim::Constant" and n.hasAttributes()
                    and n.output().type().kind() == "IntType")  # fmt: skip
    assert compat.ir_constant(constant) == 2
    mul = next(n for n in body.nodes() if n.kind() == "aten::mul")
    assert compat.ir_schema(mul).name == "aten::mul"
    assert compat.ir_enum("Optional[ScalarType]", 6) is torch.float32
    assert compat.ir_enum("int", 6) == 6 and compat.dtype_number(torch.float32) == 6
    assert compat.writes_first_argument(torch.ops.aten.copy_.default)
    assert not compat.writes_first_argument(torch.ops.aten.slice.Tensor)
    assert compat.returns_view(torch.ops.aten.slice.Tensor)
    assert not compat.returns_view(torch.ops.aten.conv1d.default)
    fx_graph = torch.fx.Graph()
    node = fx_graph.placeholder("x")
    compat.rename_fx_node(node, "latent")
    assert node.name == "latent"


#: The passes that fuse a graph's nodes or move them (what :func:`_fused_and_unfused` leaves
#: out of the plain engine).
FUSING = (
    "fixed-views",
    "fixed-rows",
    "early-guards",
    "early-draws",
    "native-runs",
    "scripted-runs",
)


def _fused_and_unfused(model, block, monkeypatch):
    """An engine of the passes and one of the passes but the fused parts (fixed views and rows,
    guards and draws moved first, native runs, runs played by TorchScript): what the fused
    parts must play exactly."""
    unfused = tuple(p for p in PASSES if p.name not in FUSING)
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "PASSES", unfused)
        plain = tb.StreamEngine(model(), block=block)
    return plain, tb.StreamEngine(model(), block=block)


def _changes_mid_stream(engines, key, rng, blocks=64, atol=1e-5):
    """64 blocks, fused against unfused, with an op added, a parameter moved, a weight op and a
    reset at block boundaries: each change plays from the same block in both."""
    plain, fused = engines
    for index in range(blocks):
        if index == 8:
            for engine in engines:
                engine.add_op("bend", tb.Scale(1.5), key)
        if index == 16:
            for engine in engines:
                engine.set_param("bend", "value", 0.5)
        if index == 24:
            for engine in engines:
                engine.add_op("weights", tb.Scale(0.9), ".*weight")
        if index == 40:
            for engine in engines:
                engine.remove_op("bend")
                engine.request_reset()
        audio = (0.3 * rng.standard_normal((plain.in_channels, plain.in_frames))).astype(np.float32)
        torch.manual_seed(index)  # the same draws for both (a RAVE encoder samples its latent)
        played = fused.process(audio)
        torch.manual_seed(index)
        np.testing.assert_allclose(played, plain.process(audio), atol=atol, rtol=atol)
    assert "bend" not in fused.ops and "weights" in fused.ops


def test_fused_runs_play_as_the_unfused_graph_through_live_changes(monkeypatch):
    layers = _cached_convs()
    engines = _fused_and_unfused(lambda: copy.deepcopy(layers), 64, monkeypatch)
    fused = engines[1].node._forward.__self__
    assert any(n.target is scripted.play for n in fused.graph.nodes), "played in TorchScript"
    _changes_mid_stream(engines, "_1", np.random.default_rng(3))


def test_a_graphs_scripted_runs_are_freed_with_it():
    """The finding: 60 live loads drive <-> wavae grew the server by 132 MiB again (2.2 MiB a
    load): each graph's runs were compiled as a class of their own in TorchScript's global
    unit, which keeps every class and method for good. Now they live in a unit of their own,
    freed with the graph: building the same model again compiles nothing there."""
    from bendserver import compat

    layers = _cached_convs()
    built = tb.StreamEngine(copy.deepcopy(layers), block=64)
    fused = built.node._forward.__self__
    assert any(n.target is scripted.play for n in fused.graph.nodes), "played in TorchScript"
    del built, fused
    kept = compat.script_functions_kept()
    for _ in range(3):
        tb.StreamEngine(copy.deepcopy(layers), block=64)
    assert compat.script_functions_kept() == kept


BRAVE = Path(os.environ.get("BENDSERVER_RAVE_DIR", "/nonexistent")) / "brave_c128_streaming.ts"


@pytest.mark.skipif(not BRAVE.is_file(), reason="BENDSERVER_RAVE_DIR holds no BRAVE export")
def test_a_brave_export_fused_plays_as_unfused_through_live_changes(monkeypatch):
    """A BRAVE export (RAVE for low latency: 128 samples a latent frame) at block 128: its
    whole block but the output's reshapes one native run (with its guards checked and its
    latent's noise drawn first); with an op in the decoder it plays in runs around the op,
    equal to the unfused graph within 1e-5 over 64 blocks."""
    engines = _fused_and_unfused(lambda: tb.load_model(str(BRAVE), latency=146), 128, monkeypatch)
    nodes = engines[1].node._forward.__self__.graph.nodes
    assert len([n for n in nodes if n.target is native.play_native]) == 1
    assert len([n for n in nodes if n.target is scripted.play]) <= 2
    _changes_mid_stream(engines, "decoder_net_5_net_1", np.random.default_rng(4))
