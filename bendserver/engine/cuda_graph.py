"""CUDA graphs of an engine's bended forward: captured on the control side, replayed per block.

A captured graph replays fixed kernels on fixed addresses: its input is one static device tensor
(the engine copies each block into it), its output another. Live parameters stay live because
the engine writes them in place (0-d tensors ``fill_``, weights ``copy_``), never rebinds them.
Capture follows torch's rules: a warm-up at the exact shape on a side stream first, the capture
itself on a side stream with no CPU sync, and the ops' CUDA generators registered with the graph
so that every replay draws fresh random values, as eager calls do.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from .. import compat
from ..bending.base import forward_state
from ..passes.nodes import attribute, state_only, written_roots
from ..tracing.flow import GUARDS

log = logging.getLogger("bendserver.engine")

#: Eager calls before a capture: lazy allocations (streaming caches, library handles) happen here.
WARMUP_CALLS = 3


class CudaGraphs:
    """Turns an engine's forwards into CUDA graph replays on one static input tensor.

    :meth:`capture` runs on the control side only (at start and when the bended graph's
    structure changes). After a capture fails, it logs one line and hands back eager forwards
    from then on: the stream plays eager CUDA rather than stop or play silence.
    """

    def __init__(self, static_input: torch.Tensor) -> None:
        self.input = static_input
        #: Why the first failed capture failed (None while captures succeed).
        self.failure: str | None = None

    def capture(
        self, forward: Callable[..., Any], module: torch.nn.Module, state: Iterable[torch.Tensor]
    ) -> Callable[..., Any]:
        """``forward`` captured (a :class:`Replay`), or ``forward`` itself once a capture has
        failed. ``module`` holds what the forward reads and writes (buffers, bound ops' state);
        ``state`` adds the streaming state it writes (a warm-up must leave both untouched)."""
        if self.failure is not None:
            return forward
        try:
            return Replay(forward, self.input, module, state)
        except Exception as error:  # a model may do what a capture cannot: play it eager
            self.failure = f"{type(error).__name__}: {error}"
            log.warning("CUDA graph capture failed, playing eager CUDA: %s", self.failure)
            return forward


class Replay:
    """One forward captured as a CUDA graph: calling it replays the graph on the current stream.

    A call with the static input reads it as it is; another tensor is copied into it first. The
    output is the same static tensor at every call (valid until the next one)."""

    def __init__(
        self,
        forward: Callable[..., Any],
        static_input: torch.Tensor,
        module: torch.nn.Module,
        state: Iterable[torch.Tensor],
    ) -> None:
        if static_input.device.type != "cuda":
            raise RuntimeError(f"a CUDA graph runs on a CUDA device, not {static_input.device}")
        tensors, generators = forward_state(module, state)
        generators = [g for g in generators if g.device.type == "cuda"]
        device = static_input.device
        side = torch.cuda.Stream(device)
        graph = torch.cuda.CUDAGraph()
        for generator in generators:
            graph.register_generator_state(generator)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.inference_mode(), torch.cuda.stream(side):
            with _scratch(tensors):  # what plays meanwhile keeps its streaming state
                for _ in range(WARMUP_CALLS):
                    forward(static_input)
            with _generators_kept(generators, device):
                # capture_begin/end rather than torch.cuda.graph(), whose entry synchronizes the
                # device and empties the allocator's cache: a stall for a stream playing
                # meanwhile. thread_local: only this thread's unsafe calls break the capture.
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    output = forward(static_input)
                finally:
                    graph.capture_end()
        side.synchronize()
        self.graph, self.input, self.output = graph, static_input, output
        #: The forward (and its graph module) owns memory the graph's kernels address.
        self.forward = forward

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x is not self.input:
            self.input.copy_(x)
        self.graph.replay()
        return self.output


@contextlib.contextmanager
def _scratch(tensors: list[torch.Tensor]) -> Iterator[None]:
    """Point ``tensors`` at scratch copies meanwhile: eager calls write the copies, while a
    captured graph playing meanwhile keeps the original addresses (it never reads ``.data``)."""
    originals = [t.data for t in tensors]
    for tensor in tensors:
        tensor.data = tensor.detach().clone()
    try:
        yield
    finally:
        for tensor, original in zip(tensors, originals, strict=True):
            tensor.data = original


@contextlib.contextmanager
def _generators_kept(generators: list[torch.Generator], device: torch.device) -> Iterator[None]:
    """Put the generators a capture registers (``generators`` and the device's default one,
    which every capture registers) back as they were if it fails: a capture that breaks off
    leaves them in capture mode, and every random draw on the device after it raised "Offset
    increment outside graph capture" (a RAVE export's encoder, a Noise op), seen on an H200."""
    default = torch.cuda.default_generators[device.index or 0]
    kept = [(g, g.clone_state()) for g in dict.fromkeys([default, *generators])]
    try:
        yield
    except BaseException:
        for generator, state in kept:
            generator.graphsafe_set_state(state)
        raise


def follow_device(gm: torch.fx.GraphModule, device: torch.device) -> None:
    """Make the tensors ``gm``'s nodes create on ``device``: a converted ``.ts`` graph keeps the
    device constants it met while converting, and TorchScript makes a number's tensor on the
    CPU (``NumToTensor``, then RAVE's PQMF copies it into a mask). A tensor made on the CPU at
    each block costs a synchronous copy to the GPU, which a capture refuses ("Cannot copy
    between CPU and CUDA tensors", seen on an H200)."""
    moved = False

    def on_device(value: Any) -> Any:
        nonlocal moved
        if isinstance(value, torch.device) and value != device:
            moved = True
            return device
        return value

    for node in gm.graph.nodes:
        node.args = torch.fx.node.map_aggregate(node.args, on_device)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, on_device)
        if compat.makes_a_tensor(node.target) and node.kwargs.get("device") is None:
            node.kwargs = {**node.kwargs, "device": device}
            moved = True
    if moved:
        gm.recompile()


def check_state_guards(gm: torch.fx.GraphModule) -> int:
    """Check now, once, the control-flow guards that read only the module's state (tensors the
    graph never writes, constants) and take them out of ``gm``: reading a device value back to
    the host at each block stalls eager CUDA and breaks a capture (RAVE's ``warmed_up`` flags
    and ``decode_params``). Returns how many; raises FlowGuardError where one fails now."""
    graph = gm.graph
    written = written_roots(graph)
    values: dict[torch.fx.Node, Any] = {}
    checked = 0
    for guard in [node for node in graph.nodes if node.target in GUARDS]:
        needed = state_only(guard, written)
        if needed is None:
            continue
        for node in graph.nodes:  # in order: each input is computed before its users
            if node in needed and node not in values:
                values[node] = _evaluated(gm, node, values)
        graph.erase_node(guard)
        checked += 1
    if checked:
        graph.eliminate_dead_code()
        gm.recompile()
    return checked


def _evaluated(gm: torch.fx.GraphModule, node: torch.fx.Node, values: dict) -> Any:
    """``node``'s value from those of its inputs (``values``)."""
    args = torch.fx.node.map_arg(node.args, values.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, values.__getitem__)
    if node.op == "get_attr":
        return attribute(gm, node.target)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    with torch.inference_mode():
        return node.target(*args, **kwargs)
