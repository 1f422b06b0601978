"""The code fx generates for a graph, compiled in a helper interpreter during a live load: the
long ``compile`` that held the interpreter 6 ms (wavae's forward) away from the audio."""

import builtins
import threading
import time

import numpy as np
import pytest
import torch
from streaming import CausalStack

from bendserver import codegen, compat
from bendserver.engine import StreamEngine
from bendserver.engine.node import Node
from bendserver.slices import breathe, sliced
from bendserver.switching import ModelSwitcher

BLOCK = 256


@pytest.fixture
def compiled_here(monkeypatch):
    """The length of every source ``compile`` gets on this thread (fx's generated code, a
    model's file)."""
    lengths: list[int] = []
    own, thread = builtins.compile, threading.get_ident()

    def recording(source, *args, **kwargs):
        if isinstance(source, (str, bytes)) and threading.get_ident() == thread:
            lengths.append(len(source))
        return own(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", recording)
    return lengths


def test_a_live_load_of_wavae_compiles_no_long_source_on_the_loading_thread(compiled_here):
    """``/model/load wavae`` as the control worker runs it (in slices) on a playing rack: its
    45 000-character forward and its 9 000-character model.py go to the helper; what the
    loading thread compiles itself is short (under ASIDE characters, about 0.5 ms); the new
    model plays."""
    torch.manual_seed(0)
    rack = StreamEngine(CausalStack(), block=BLOCK, sample_rate=48000)
    build = lambda source, preset, like: (Node(source, block=BLOCK, streams=1), [])  # noqa: E731
    switcher = ModelSwitcher(rack, trust=True, fade_ms=0, build=build)
    playing = threading.Event()
    playing.set()

    def play() -> None:
        silence = np.zeros((1, BLOCK), np.float32)
        while playing.is_set():
            rack.process(silence)
            time.sleep(0.002)

    player = threading.Thread(target=play)
    player.start()
    before = codegen.helper.compiled
    try:
        with sliced(lambda: None):
            loaded = switcher.load("wavae", "none")
    finally:
        playing.clear()
        player.join()
    assert rack.node is loaded.node and loaded.swapped
    assert codegen.helper.compiled > before
    assert max(compiled_here) < codegen.ASIDE


def test_code_compiled_by_the_helper_plays_as_code_compiled_here(compiled_here, monkeypatch):
    """The same model built in slices with every source sent to the helper, and built
    outside slices (compiled here), gives the same output, sample for sample."""
    codegen.compile_aside()
    monkeypatch.setattr(codegen, "ASIDE", 0)
    audio = np.random.default_rng(0).standard_normal((1, 8 * BLOCK)).astype(np.float32)
    outputs = []
    for slices in (True, False):
        torch.manual_seed(1)
        before = codegen.helper.compiled
        if slices:
            with sliced(lambda: None):
                engine = StreamEngine(CausalStack(), block=BLOCK, sample_rate=48000)
            assert codegen.helper.compiled > before
        else:
            engine = StreamEngine(CausalStack(), block=BLOCK, sample_rate=48000)
            assert codegen.helper.compiled == before
        outputs.append(np.concatenate(list(engine.stream(audio)), axis=1))
    np.testing.assert_array_equal(*outputs)


def test_a_dead_helper_or_a_bad_source_is_compiled_here():
    """A helper killed between two loads is started again; a source that does not compile
    raises the SyntaxError compile gives (compiled here, for the message)."""
    with sliced(lambda: None):
        codegen.helper.compile("x = 1", "first")  # the helper runs
        codegen.helper._process.kill()
        codegen.helper._process.wait()
        code = codegen.compile_source("y = 2\n" * codegen.ASIDE, "again")
        space: dict = {}
        exec(code, space)
        assert space["y"] == 2
        with pytest.raises(SyntaxError, match="invalid syntax"):
            codegen.compile_source("def (:\n" + " " * codegen.ASIDE, "bad")


def test_route_fx_compile_gives_fx_s_generated_code_to_the_compiler():
    """compat's hook: a graph module's recompile compiles through the routed compiler (the
    source and fx's file name for it), and the code runs as fx's own would."""
    seen: list[tuple[str, str]] = []

    def compiler(source: str, filename: str):
        seen.append((source, filename))
        return compile(source, filename, "exec", dont_inherit=True)

    previous = compat.route_fx_compile(compiler)
    try:
        module = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
    finally:
        assert compat.route_fx_compile(previous) is compiler
    assert seen and "def forward" in seen[-1][0] and seen[-1][1].startswith("<eval_with_key>")
    assert torch.equal(module(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))


def test_long_work_pauses_whenever_the_audio_computes():
    """Work in slices calls the slice's callback (which waits for the block) at the next
    ``breathe`` once the pause check is true, long before its slice is used up."""
    calls, computing = [], [False]
    with sliced(lambda: calls.append(computing[0]), every=60.0, pause=lambda: computing[0]):
        breathe()
        computing[0] = True
        breathe()
        computing[0] = False
        breathe()
    assert calls == [True]


def test_graph_work_can_pause_at_each_node_fx_adds():
    """The hook runs before each node fx adds (a trace: one per node of the graph), and stops
    when taken away; a live server's ModelSwitcher sets ``breathe`` there."""
    calls = []
    compat.call_at_each_fx_node(lambda: calls.append(1))
    try:
        graph = torch.fx.symbolic_trace(CausalStack()).graph
    finally:
        compat.call_at_each_fx_node(None)
    assert len(calls) == len(graph.nodes) > 3
    torch.fx.symbolic_trace(CausalStack())
    assert len(calls) == len(graph.nodes)
