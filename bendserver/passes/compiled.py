"""``optimize="compile"``: a bended graph through ``torch.compile`` (inductor), played only where
it measures faster than the passes alone.

A graph is compiled when it is built before the first block (the model's, its preset's), on the
control side: whole (``fullgraph``; a graph dynamo cannot take whole, e.g. an op drawing from
its own random generator, is not compiled) and for the block's exact shape. It is warmed up and
timed against the passes' forward with the state both write put back after, so nothing compiles
on the audio thread. Live parameters stay live: they are 0-d tensors written in place and
weights swap in with their shapes, which a compiled graph's guards do not fix. An op switched
off or on plays the passes' forward until it is switched back, and should any other guard fail,
the call runs the passes' forward rather than recompile (``fail_on_recompile``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx

from ..bending.base import BoundOp
from .convolution import conv1d_forms
from .grouped import grouped_convolutions
from .state import put_back

#: Calls of each forward timed, in turn, to choose one; a compiled one must be this much faster.
TIMED_CALLS = 64
MARGIN = 0.95


class GuardedForward:
    """A compiled forward that never compiles where it is called: with an op switched from how
    it was compiled, or a guard failing, the passes' forward runs instead."""

    def __init__(
        self, compiled: Callable[..., Any], passes: Callable[..., Any], gm: torch.nn.Module
    ) -> None:
        self.compiled, self.passes = compiled, passes
        self.switches = [(m.op, m.op.enabled) for m in gm.modules() if isinstance(m, BoundOp)]
        self.failed = False  #: a guard failed once: the passes' forward plays from then on

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.failed or any(op.enabled is not on for op, on in self.switches):
            return self.passes(x)
        with torch.compiler.set_stance("fail_on_recompile"):
            try:
                return self.compiled(x)
            except RuntimeError as error:  # raised by the guards, before the graph runs
                if "fail_on_recompile" not in str(error):
                    raise
        self.failed = True
        return self.passes(x)


def compile_forward(
    gm: torch.fx.GraphModule, example: torch.Tensor, state: list[torch.Tensor], build: bool
) -> tuple[Callable[..., Any], str]:
    """The forward to play for ``gm`` (optimised for ``compile``: the passes but the
    convolution forms, which are hand-written for eager) and one line saying what was chosen
    and why. ``state``: the streaming state a forward writes; ``build``: whether compiling is
    allowed now (nothing plays yet)."""
    passes = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # shares gm's tensors
    if any([conv1d_forms(passes), grouped_convolutions(passes)]):
        passes.recompile()
    if not build:
        return passes.forward, "built while playing: the passes (compiled only before the start)"
    compiled = torch.compile(gm, fullgraph=True, dynamic=False)
    try:
        with put_back(gm, state):
            compiled_ms, passes_ms = _timed(compiled, passes.forward, example)
    except Exception as error:  # what dynamo or inductor cannot take plays the passes
        reason = (str(error).strip().splitlines() or [""])[0][:160]
        return passes.forward, f"not compiled ({type(error).__name__}: {reason}): the passes"
    figures = f"compiled {compiled_ms:.3f} ms vs passes {passes_ms:.3f} ms per block"
    if compiled_ms < MARGIN * passes_ms:
        return GuardedForward(compiled, passes.forward, gm), f"{figures}: compiled"
    return passes.forward, f"{figures}: the passes"


def _timed(
    compiled: Callable[..., Any], passes: Callable[..., Any], example: torch.Tensor
) -> tuple[float, float]:
    """Median ms per call of each, called in turn (the first compiled calls compile)."""
    times: dict[Callable[..., Any], list[float]] = {compiled: [], passes: []}
    with torch.inference_mode():
        for _ in range(3):
            compiled(example)
        for _ in range(TIMED_CALLS):
            for forward, spent in times.items():
                started = time.perf_counter()
                forward(example)
                spent.append(time.perf_counter() - started)
    return tuple(1e3 * float(np.median(spent)) for spent in times.values())
