"""Bending ops, configs, graph transforms and weight versions."""

from .base import BendingOp, BoundOp, Chain, Param
from .config import BendingConfig
from .ops import (
    OPS,
    Affine,
    Bias,
    Clamp,
    Invert,
    Lambda,
    Mask,
    Modulate,
    Noise,
    OrderedMask,
    Oscillate,
    Permute,
    Scale,
    Threshold,
    TopK,
    op_from_spec,
    register_op,
)

__all__ = [
    "OPS",
    "Affine",
    "BendingConfig",
    "BendingOp",
    "Bias",
    "BoundOp",
    "Chain",
    "Clamp",
    "Invert",
    "Lambda",
    "Mask",
    "Noise",
    "Modulate",
    "Oscillate",
    "OrderedMask",
    "Param",
    "Permute",
    "Scale",
    "Threshold",
    "TopK",
    "op_from_spec",
    "register_op",
]
