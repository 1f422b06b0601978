"""Optimising passes over a bended, shape-fixed graph module (see :func:`optimize`).

The engine traces once for a fixed block shape: shapes, the streaming pattern and which tensors
no op can change are known before the first block. The passes rewrite the graph with that
knowledge; every weight stays a live attribute (read at each call), so weight changes, versions
and op parameters apply at the next block with no re-trace.
"""

from .compiled import compile_forward
from .pipeline import OPTIMIZE_MODES, PASSES, GraphPass, optimize, run_passes

__all__ = ["OPTIMIZE_MODES", "PASSES", "GraphPass", "compile_forward", "optimize", "run_passes"]
