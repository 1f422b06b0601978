"""The pass pipeline and the ``--optimize`` switch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch.fx

from ..errors import BendingError
from ..slices import breathe
from .attributes import direct_attributes
from .calls import direct_calls
from .cleanup import dead_code, drop_detach, fold_constants
from .convolution import conv1d_forms
from .draws import early_draws
from .grouped import grouped_convolutions
from .guards import early_guards
from .native import native_runs
from .public import public_calls
from .rows import fixed_rows
from .scripted import scripted_runs
from .shapes import fold_shapes
from .streaming import preallocated_cache
from .views import fixed_views

#: ``none``: the bended graph as traced; ``passes``: the pass pipeline (the default);
#: ``compile``: the passes, then ``torch.compile`` where it measures faster (:mod:`.compiled`).
OPTIMIZE_MODES = ("none", "passes", "compile")


@dataclass(frozen=True)
class GraphPass:
    """A named rewrite of a graph module in place; ``run`` returns whether it changed it."""

    name: str
    run: Callable[[torch.fx.GraphModule], bool]

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip().split("\n\n")[0]


#: In order: later passes match what earlier ones produce (functional convolutions, no detach).
PASSES = (
    GraphPass("fold-shapes", fold_shapes),
    GraphPass("direct-calls", direct_calls),
    GraphPass("conv1d-forms", conv1d_forms),
    GraphPass("grouped-convolutions", grouped_convolutions),
    GraphPass("drop-detach", drop_detach),
    GraphPass("preallocated-cache", preallocated_cache),
    GraphPass("fold-constants", fold_constants),
    GraphPass("dead-code", dead_code),
    GraphPass("fixed-views", fixed_views),
    GraphPass("fixed-rows", fixed_rows),
    GraphPass("direct-attributes", direct_attributes),
    GraphPass("public-calls", public_calls),
    GraphPass("early-guards", early_guards),
    GraphPass("early-draws", early_draws),
    GraphPass("native-runs", native_runs),
    GraphPass("scripted-runs", scripted_runs),
)


def run_passes(gm: torch.fx.GraphModule, passes: Sequence[GraphPass] = PASSES) -> list[str]:
    """Run ``passes`` on ``gm`` in place and recompile it; the names of those that changed it."""
    changed = []
    for graph_pass in passes:
        breathe()  # between passes, a live server's audio gets its turns
        if graph_pass.run(gm):
            changed.append(graph_pass.name)
    gm.graph.lint()
    gm.recompile()
    return changed


#: For ``compile``: inductor writes its own convolution kernels, and dynamo cannot take the
#: hand-written forms whole (they read storage offsets); :mod:`.compiled` adds them to the
#: forward it compares against. Nor does it take TorchScript calls, or buffers that are views
#: of others.
_NOT_COMPILED = (
    "conv1d-forms",
    "grouped-convolutions",
    "fixed-views",
    "fixed-rows",
    "native-runs",
    "scripted-runs",
)
COMPILE_PASSES = tuple(p for p in PASSES if p.name not in _NOT_COMPILED)


def optimize(gm: torch.fx.GraphModule, mode: str = "passes") -> torch.fx.GraphModule:
    """``gm`` optimised in place for ``mode`` (one of :data:`OPTIMIZE_MODES`; ``compile``: the
    graph :func:`.compiled.compile_forward` takes). Run off the audio thread, after each
    (re)build. The result runs under ``torch.inference_mode`` only (as the engine runs it):
    preallocated outputs and dropped detaches assume no autograd."""
    if mode not in OPTIMIZE_MODES:
        raise BendingError(f"optimize is one of {', '.join(OPTIMIZE_MODES)}, not {mode!r}")
    if mode != "none":
        run_passes(gm, COMPILE_PASSES if mode == "compile" else PASSES)
    return gm
