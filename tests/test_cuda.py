"""CUDA: the device is checked before anything loads, a failed capture falls back to eager with
one log line, and (on a machine with CUDA) the captured graph plays like eager CUDA and the CPU,
seeing parameter, weight, switch and structure changes, fresh noise, and keeping its state."""

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from streaming import CausalStack, twin
from ts_files import BRAVE_FILE, RAVE_FILES, codec_file, rave_files

import bendserver as tb
from bendserver import compat
from bendserver.cli import build_parser, main
from bendserver.engine.bends import Bends
from bendserver.engine.cuda_graph import (
    CudaGraphs,
    Replay,
    _scratch,
    check_state_guards,
    follow_device,
)
from bendserver.engine.node import Node
from bendserver.errors import FlowGuardError
from bendserver.loader import resolve_device
from bendserver.rackspec import RackSpec
from bendserver.tracing.flow import GUARDS

BLOCK = 256
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
without_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def _blocks(count, channels=1, seed=0):
    rng = np.random.default_rng(seed)
    return [(0.3 * rng.standard_normal((channels, BLOCK))).astype(np.float32) for _ in range(count)]


# -- everywhere ---------------------------------------------------------------------------------


def test_device_names_are_checked():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cpu:0") == torch.device("cpu")
    assert tb.StreamEngine(CausalStack(), block=BLOCK).runs_on == "cpu"
    for wrong in ("gpu", "cuda:x", ""):
        with pytest.raises(tb.BendingError, match="a device is cpu, cuda or cuda:N"):
            resolve_device(wrong)


@without_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_cuda_device_says_what_to_do(device):
    with pytest.raises(tb.BendingError, match="this machine has no CUDA device; use --device cpu"):
        tb.StreamEngine("drive", device=device)


def test_a_warm_up_writes_scratch_copies_of_the_state():
    module = CausalStack()
    module(torch.randn(1, 1, BLOCK))
    scripted = torch.jit.script(module)
    for target in (module, scripted):
        state = list(target.buffers())
        before = [b.clone() for b in state]
        with torch.inference_mode(), _scratch(state):
            target(torch.randn(1, 1, BLOCK))
            assert not all(torch.equal(b, v) for b, v in zip(state, before, strict=True))
        for buffer, value in zip(state, before, strict=True):
            assert torch.equal(buffer, value), "what plays meanwhile keeps its caches"
        target(torch.randn(1, 1, BLOCK))
        assert not torch.equal(state[0], before[0]), "and later calls write them again"


def test_device_option_of_serve_render_and_bench():
    parser = build_parser()
    serve = parser.parse_args(["serve", "--device", "cuda:1", "--device-block", "64"])
    assert (serve.device, serve.device_block) == ("cuda:1", 64)
    render = parser.parse_args(["render", "in.wav", "-o", "out.wav"])
    assert render.device == "cpu"
    assert parser.parse_args(["bench", "--device", "cuda"]).device == "cuda"


@without_cuda
def test_render_and_bench_on_cuda_refuse_before_writing(tmp_path, capsys):
    sf.write(tmp_path / "in.wav", np.zeros((4800, 1), dtype=np.float32), 48000)
    out = tmp_path / "out.wav"
    assert main(["render", str(tmp_path / "in.wav"), "-o", str(out), "--device", "cuda"]) == 2
    assert not out.exists()
    assert main(["bench", "--device", "cuda", "--calls", "1", "--apply-sizes", "0"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == ["bendserver: this machine has no CUDA device; use --device cpu"] * 2


def test_a_failed_capture_falls_back_to_eager_with_one_log_line(caplog):
    module = CausalStack()
    graphs = CudaGraphs(torch.zeros(1, 1, BLOCK))  # a CPU tensor: no capture can run on it
    with caplog.at_level(logging.WARNING, logger="bendserver.engine"):
        first = graphs.capture(module.forward, module, [])
        second = graphs.capture(module.__call__, module, [])
    assert first == module.forward and second == module.__call__, "the eager forwards"
    assert graphs.failure is not None and "CUDA device" in graphs.failure
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("CUDA graph capture failed, playing eager CUDA")


def test_while_capturing_a_switch_builds_another_graph_with_the_ops_switched_so():
    engine = tb.StreamEngine(CausalStack(), block=BLOCK, fuse=False)
    engine.add_op("drive", tb.Scale(2.0), "act")
    engine.add_op("quiet", tb.Scale(0.5), "act")
    engine.enable_op("quiet", False)
    engine.apply_due()
    seen = []

    def build(gm):  # what the engine's capture would see of the live ops' switches
        seen.append([op.enabled for op in (engine.op("drive"), engine.op("quiet"))])
        return gm.forward

    bends = Bends(
        engine.bended, "forward", engine.node._set_live, build, CudaGraphs(torch.zeros(1))
    )
    bends.live = engine.node._bends.live  # the engine's ops, built into graphs as a capture would
    state = engine.state
    off = bends.structure(state)
    assert [on for _, _, on in off] == [True, False]
    on = bends.structure(state.with_op(replace(state.op("quiet"), enabled=True)))
    assert bends.forward(off) is not bends.forward(on)
    assert bends.forward(off) is bends.forward(bends.structure(state)), "built once"
    assert seen == [[True, False], [True, True]]
    assert [engine.op("drive").enabled, engine.op("quiet").enabled] == [True, False], "restored"
    assert all(on is None for _, _, on in engine.node._bends.structure(state)), "a CPU engine: no"


def test_a_graphs_device_constants_follow_the_engines_device():
    """A converted graph's ``device=`` constants and the tensors it makes from numbers (on the
    CPU by default: TorchScript's NumToTensor) are made on the engine's device."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    made = graph.call_function(torch.full, ((1,), -1.0), {"device": torch.device("meta")})
    number = graph.call_function(torch.ops.aten.scalar_tensor.default, (1.0,))  # on the CPU
    added = graph.call_function(torch.add, (x, made))
    graph.output(graph.call_function(torch.add, (added, number)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(RuntimeError):
        gm(torch.ones(2))
    follow_device(gm, torch.device("cpu"))
    assert torch.equal(gm(torch.ones(2)), torch.ones(2))
    follow_device(gm, torch.device("meta"))
    assert number.kwargs["device"] == made.kwargs["device"] == torch.device("meta")
    assert compat.makes_a_tensor(torch.ops.aten.zeros.default)
    assert not compat.makes_a_tensor(torch.ops.aten.ones_like.default)


class _Flagged(torch.nn.Module):
    """Branches on a flag of its state, on a count it writes, and on its input."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 1, 3, padding=1)
        self.register_buffer("warmed_up", torch.tensor(True))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        y = self.conv(x) if self.warmed_up else x
        y = y * 2 if self.calls > 0 else y
        return y if x.abs().sum() >= 0 else -y


def test_guards_on_the_models_state_are_checked_once_and_taken_out():
    """A CUDA graph cannot read a value back at each block: the guards that read only state
    the graph never writes are checked when the graph is built and taken out; those on the
    input or on what the graph writes stay."""
    engine = tb.StreamEngine(_Flagged(), block=BLOCK, fuse=False, optimize="none")
    gm = engine.bended.build("forward", [])
    guards = [n for n in gm.graph.nodes if n.target in GUARDS]
    audio = torch.randn(1, 1, BLOCK)
    want = gm(audio)
    assert len(guards) == 3 and check_state_guards(gm) == 1
    assert len([n for n in gm.graph.nodes if n.target in GUARDS]) == 2
    torch.testing.assert_close(gm(audio), want)
    engine.model.module.warmed_up.fill_(False)
    other = engine.bended.build("forward", [])
    with pytest.raises(FlowGuardError, match="another path"):
        check_state_guards(other)


# -- on a CUDA device ---------------------------------------------------------------------------


def _three(module_class=CausalStack, **kwargs):
    """The same model as a CUDA graph, eager CUDA and on the CPU."""
    modules = [module_class(**kwargs).eval() for _ in range(3)]
    for module in modules[1:]:
        module.load_state_dict(modules[0].state_dict())
    engines = [
        tb.StreamEngine(modules[0].cuda(), block=BLOCK, fuse=False, device="cuda"),
        tb.StreamEngine(
            modules[1].cuda(), block=BLOCK, fuse=False, device="cuda", cuda_graph=False
        ),
        tb.StreamEngine(modules[2], block=BLOCK, fuse=False),
    ]
    assert engines[0].cuda_graphs.failure is None and isinstance(engines[0].node._forward, Replay)
    assert engines[1].cuda_graphs is None
    return engines


def _play_alike(engines, blocks, atol=1e-5):
    outputs = []
    for block in blocks:
        graph, eager, cpu = (engine.process(block) for engine in engines)
        np.testing.assert_allclose(graph, eager, atol=atol)
        np.testing.assert_allclose(graph, cpu, atol=atol)
        outputs.append(graph)
    return outputs


@needs_cuda
def test_graph_eager_cuda_and_cpu_play_alike_and_reset_alike():
    engines = _three()
    _play_alike(engines, _blocks(5))
    for engine in engines:
        engine.reset_state()
    _play_alike(engines, _blocks(3, seed=1))


@needs_cuda
def test_shipped_model_as_a_graph_matches_the_cpu():
    graph = tb.StreamEngine("drive", block=BLOCK, fuse=False, device="cuda")
    cpu = tb.StreamEngine("drive", block=BLOCK, fuse=False)
    assert isinstance(graph.node._forward, Replay)
    for block in _blocks(4, seed=5):
        np.testing.assert_allclose(graph.process(block), cpu.process(block), atol=1e-4)


@needs_cuda
def test_parameters_ramps_and_weights_are_seen_by_replays():
    engines = _three()
    for engine in engines:
        engine.add_op("drive", tb.Scale(1.0), "act")
        engine.add_op("holes", tb.Mask(0.5, seed=3), "first.conv.weight")
    _play_alike(engines, _blocks(2))
    for engine in engines:
        engine.set_param("drive", "value", 3.0, ramp_ms=20.0)
        engine.set_param("holes", "prob", 0.9)
    outputs = _play_alike(engines, _blocks(6, seed=2))
    assert not np.allclose(outputs[0], outputs[-1], atol=1e-3)
    other = CausalStack().state_dict()
    for engine in engines:
        engine.bended.create_version("other", {k: v.to(engine.device) for k, v in other.items()})
        engine.set_interpolation({"_default": 0.5, "other": 0.5})
    _play_alike(engines, _blocks(3, seed=3))


@needs_cuda
def test_structure_and_switches_recapture_keeping_the_streaming_state():
    engines = _three()
    _play_alike(engines, _blocks(3))
    for engine in engines:
        engine.add_op("clip", tb.Clamp(-0.1, 0.1), "act")
    _play_alike(engines, _blocks(2, seed=1))
    assert isinstance(engines[0].node._forward, Replay), "a new capture"
    for engine in engines:
        engine.enable_op("clip", False)
    _play_alike(engines, _blocks(2, seed=2))
    for engine in engines:
        engine.remove_op("clip")
    _play_alike(engines, _blocks(2, seed=3))


@needs_cuda
def test_fresh_noise_draws_new_values_at_every_replay():
    engine = tb.StreamEngine(twin(CausalStack)[0].cuda(), block=BLOCK, fuse=False, device="cuda")
    engine.add_op("hiss", tb.Noise(0.5, fresh=True, seed=1), "act")
    silence = np.zeros((1, BLOCK), dtype=np.float32)
    engine.process(silence)
    assert isinstance(engine.node._forward, Replay)
    first, second = engine.process(silence), engine.process(silence)
    assert np.std(first) > 1e-3 and not np.allclose(first, second)


class _Syncing(torch.nn.Module):
    """Reads a value back to the CPU at every call: a capture cannot hold that."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 1, 1)

    def forward(self, x):
        return self.conv(x) * float(x.abs().max() >= 0)


@needs_cuda
def test_a_model_a_capture_cannot_hold_plays_eager_cuda(caplog):
    module = _Syncing()
    cpu = tb.StreamEngine(_Syncing().eval(), block=BLOCK, fuse=False)
    cpu.model.module.load_state_dict(module.state_dict())
    with caplog.at_level(logging.WARNING, logger="bendserver.engine"):
        gpu = tb.StreamEngine(module.cuda(), block=BLOCK, fuse=False, device="cuda")
    assert gpu.cuda_graphs.failure is not None and not isinstance(gpu.node._forward, Replay)
    assert sum("CUDA graph capture failed" in r.getMessage() for r in caplog.records) == 1
    for block in _blocks(3):
        np.testing.assert_allclose(gpu.process(block), cpu.process(block), atol=1e-5)
    assert gpu.stats.errors == 0
    assert torch.randn(4, device="cuda").isfinite().all(), "the device draws after the failure"


@pytest.fixture(
    params=["codec", *rave_files((*RAVE_FILES, BRAVE_FILE))], ids=lambda p: Path(p).stem
)
def torchscript_file(tmp_path, request) -> Path:
    """A small scripted codec, then each RAVE export found (BENDSERVER_RAVE_DIR)."""
    return codec_file(tmp_path) if request.param == "codec" else request.param


@needs_cuda
def test_a_converted_torchscript_file_plays_on_cuda_as_its_direct_call(torchscript_file):
    """The .ts converted into a graph and captured, against the file's direct scripted call on
    the same GPU (what nn~ runs), each block drawing the same noise (RAVE's encoder samples),
    the state carried across blocks; an nn~ attribute set live is captured again (the codec's
    gate changes its decoder's path)."""
    model = tb.load_model(torchscript_file)
    block = 256 if model.block_multiple <= 256 else 2048
    engine = tb.StreamEngine(str(torchscript_file), block=block, fuse=False, device="cuda")
    assert engine.bended.unconverted == {} and engine.cuda_graphs.failure is None
    module = torch.jit.load(str(torchscript_file), map_location="cuda")
    rng = np.random.default_rng(4)
    for index in range(9):
        if index == 6 and "gate" in model.attributes:
            engine.set_attribute("gate", False)
            module.set_gate(False)
        audio = (0.3 * rng.standard_normal((engine.in_channels, block))).astype(np.float32)
        torch.manual_seed(index)
        got = engine.process(audio)
        assert isinstance(engine.node._forward, Replay)
        torch.manual_seed(index)
        with torch.inference_mode():
            want = module.forward(torch.from_numpy(audio)[None].cuda())[0].cpu().numpy()
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, atol=1e-5 * scale, rtol=0, err_msg=f"block {index}")


@needs_cuda
def test_a_rack_of_two_models_plays_on_cuda_as_on_the_cpu():
    spec = RackSpec.chain(["drive", "wavae"])
    gpu, cpu = (spec.build(block=BLOCK, fuse=False, device=d) for d in ("cuda", "cpu"))
    for block in _blocks(5, seed=6):
        np.testing.assert_allclose(gpu.process(block), cpu.process(block), atol=1e-4)
    assert all(node.runs_on.startswith("cuda") for node in gpu.nodes.values())


@needs_cuda
def test_a_live_switch_on_cuda_crossfades_as_on_the_cpu():
    def rack(seed, device):
        torch.manual_seed(seed)
        return tb.StreamEngine(CausalStack().to(device), block=BLOCK, fuse=False, device=device)

    def node(seed, device):
        torch.manual_seed(seed)
        return Node(CausalStack().to(device), block=BLOCK, device=device)

    racks = [rack(1, device) for device in ("cuda", "cpu")]
    blocks = _blocks(8, seed=7)
    for index, block in enumerate(blocks):
        if index == 3:
            for each, device in zip(racks, ("cuda", "cpu"), strict=True):
                each.swap(each.order[0], node(2, device), 10.0)
        gpu, cpu = (each.process(block) for each in racks)
        np.testing.assert_allclose(gpu, cpu, atol=1e-5)
    assert racks[0].swaps == 1 and isinstance(racks[0].node._forward, Replay)


@needs_cuda
def test_a_change_of_channels_recaptures_on_cuda():
    gpu, cpu = tb.StreamEngine("drive", device="cuda"), tb.StreamEngine("drive")
    rng = np.random.default_rng(8)
    for channels in (2, 3, 1):
        audio = (0.3 * rng.standard_normal((channels, 4096))).astype(np.float32)
        np.testing.assert_allclose(gpu(audio, 48000), cpu(audio, 48000), atol=1e-4)
        assert gpu.streams == channels and isinstance(gpu.node._forward, Replay)
