"""bendserver: a real-time host for bended neural audio models.

``import bendserver as tb`` gives the torchbend API: wrap a module in :class:`BendedModule`,
``trace`` its methods, ``bend`` weights and activations with ops such as :class:`Mask`, save
bends as a :class:`BendingConfig`, and interpolate between weight versions.
"""

from .bending import (
    OPS,
    Affine,
    BendingConfig,
    BendingOp,
    Bias,
    Chain,
    Clamp,
    Invert,
    Lambda,
    Mask,
    Modulate,
    Noise,
    OrderedMask,
    Oscillate,
    Param,
    Permute,
    Scale,
    Threshold,
    TopK,
    op_from_spec,
    register_op,
)
from .bending.module import BendedModule
from .engine import BlockAdapter, OutputFuse, StreamEngine
from .errors import BendingError, FlowGuardError, ShapeError
from .loader import LoadedModel, load_model
from .presets.library import Preset, load_preset
from .tracing import LogicalFlowStep, LoopFlowStep, ValueFlowStep

__version__ = "0.1.0"

__all__ = [
    "OPS",
    "Affine",
    "BendedModule",
    "BendingConfig",
    "BendingError",
    "BendingOp",
    "BlockAdapter",
    "LoadedModel",
    "OutputFuse",
    "Preset",
    "StreamEngine",
    "load_model",
    "load_preset",
    "Bias",
    "Chain",
    "Clamp",
    "FlowGuardError",
    "Invert",
    "Lambda",
    "LogicalFlowStep",
    "LoopFlowStep",
    "Mask",
    "Noise",
    "Modulate",
    "Oscillate",
    "OrderedMask",
    "Param",
    "Permute",
    "Scale",
    "ShapeError",
    "Threshold",
    "TopK",
    "ValueFlowStep",
    "op_from_spec",
    "register_op",
]
