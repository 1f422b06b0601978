"""Per-channel activation ops folded into the weights of the layer that makes the activation.

A TorchScript file cannot be traced, so an op on one of its activations has no graph node to
sit in. But an op that is ``y * scale + offset`` with one scale and offset per output channel
(Mask, Scale, Bias, Affine, Invert, and chains of them) on the output of a convolution or a
linear layer is the same as that layer with its weight scaled and its bias scaled and offset,
per channel. Such a fold is a weight change like any other: computed from the untouched
weights off the audio thread, swapped in at a block boundary.

Naming rule: a layer's output is named after the layer's module path with dots as underscores
(``decoder.net.3`` gives ``decoder_net_3``), which is also the name of that layer's call in a
traced Python model.

The same ops on the *input* of layers that mix channels linearly and nothing else (1x1
convolutions, linear layers) fold into those layers' weights along their input channels
(:func:`reader_folds`): the engine's optimising passes use it in traced Python graphs, where
it leaves a per-channel mask no work per block.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch import nn

from ..errors import BendingError
from .base import BendingOp, State
from .ops import OPS

#: The key that marks a per-weight state as a fold (see :func:`bend_tensor`).
FOLD = "fold"
#: Spatial dimensions of the layers whose output channels fold into their weights (by class
#: name; cached_conv's streaming ``CachedConv1d`` and ``CachedConvTranspose1d`` are these too).
_LAYERS = {
    "Conv1d": 1,
    "Conv2d": 2,
    "Conv3d": 3,
    "ConvTranspose1d": 1,
    "ConvTranspose2d": 2,
    "ConvTranspose3d": 3,
    "Linear": 0,
}


def folding_ops() -> list[str]:
    """The names of the ops that fold into a layer's weights (they define ``affine``)."""
    return sorted(name for name, cls in OPS.items() if cls.affine is not BendingOp.affine)


@dataclass(frozen=True)
class FoldLayer:
    """A convolution or linear layer whose output channels can take a per-channel op."""

    name: str  #: the activation name (module path, dots as underscores)
    kind: str  #: the layer class: Conv1d, ConvTranspose1d, Linear, CachedConv1d, ...
    weight: str  #: its weight's parameter name
    bias: str | None  #: its bias's parameter name, None without one
    channels: int
    groups: int
    #: "output": the op acts on the layer's output; "input": on its input (see reader_folds)
    side: str = "output"

    @property
    def probe(self) -> tuple[int, ...]:
        """The shape an op on this layer's output is set up for: one batch row, the channels,
        2 along each other dimension (so that a state that is not per channel shows)."""
        spatial = _LAYERS[_base(self.kind)]
        return (2, self.channels) if spatial == 0 else (1, self.channels, *[2] * spatial)

    @property
    def channel_dim(self) -> int:
        """The channels' dimension in the probe (and in the output, counted as an op's dim)."""
        return 1

    @property
    def dim_hint(self) -> str:
        """The ``dim=`` that makes a field op act per channel on this layer's output."""
        return "dim=-1" if _base(self.kind) == "Linear" else "dim=1"

    def per_channel(self, value: Any, like: torch.Tensor) -> torch.Tensor:
        """``value`` (a number or a tensor broadcasting to the probe) as one value per channel."""
        tensor = torch.as_tensor(value, dtype=like.dtype, device=like.device)
        full = tensor.broadcast_to(self.probe).movedim(self.channel_dim, 0)
        return full.reshape(self.channels, -1)[:, 0]

    def weight_factor(self, scale: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Per-channel ``scale`` shaped to multiply this layer's weight."""
        rest = [1] * (weight.dim() - 2)
        if self.side == "input":  # [out, in, 1...]: groups 1 (see reader_folds)
            return scale.reshape(1, self.channels, *rest)
        if not _base(self.kind).startswith("ConvTranspose"):
            return scale.reshape(self.channels, 1, *rest)
        # [in, out / groups, ...]: output channel g * out_per_group + j is column j of group g
        per_group = self.channels // self.groups
        grouped = scale.reshape(self.groups, 1, per_group)
        full = grouped.expand(self.groups, weight.shape[0] // self.groups, per_group)
        return full.reshape(weight.shape[0], per_group, *rest)


def fold_layers(module: nn.Module) -> dict[str, FoldLayer]:
    """The layers of ``module`` (a TorchScript module or a Python one) whose output an op can
    fold into, by activation name."""
    layers = {}
    for path, sub in module.named_modules():
        kind = getattr(sub, "original_name", type(sub).__name__)
        params = dict(sub.named_parameters(recurse=False))
        if not path or _base(kind) not in _LAYERS or "weight" not in params:
            continue
        weight = params["weight"]
        transposed = _base(kind).startswith("ConvTranspose")
        groups = int(getattr(sub, "groups", 1))
        channels = weight.shape[1] * groups if transposed else weight.shape[0]
        name = path.replace(".", "_")
        bias = f"{path}.bias" if "bias" in params else None
        layers[name] = FoldLayer(name, kind, f"{path}.weight", bias, channels, groups)
    return layers


def _base(kind: str) -> str:
    return kind.removeprefix("Cached")


def fold_states(op: BendingOp, layer: FoldLayer, weight: torch.Tensor) -> dict[str, State]:
    """The per-tensor states that fold ``op`` into ``layer`` (its weight and bias), or a
    BendingError saying which ops fold and that the Python model takes every op."""
    state = op.init_state(layer.name, torch.Size(layer.probe), weight.dtype, weight.device)
    problem = _fold_problem(op, layer, state)
    if problem == "affine":
        raise BendingError(
            f"{op!r} cannot bend '{layer.name}' of a TorchScript file: only ops that scale and "
            f"offset each channel fold into the layer's weights there ({', '.join(folding_ops())}"
            f", with {layer.dim_hint} for a field). Load the Python model to bend activations "
            "with any op"
        )
    if problem == "channels":
        raise BendingError(
            f"{op!r} on '{layer.name}' of a TorchScript file must act per channel: give it "
            f"{layer.dim_hint} (one value per channel) to fold it into the layer's weights, or "
            "load the Python model to bend each unit"
        )
    if problem == "offset":
        raise BendingError(
            f"{op!r} adds an offset to '{layer.name}', a layer without a bias: in a TorchScript "
            "file only Mask, Scale and Invert fold into it; load the Python model for an offset"
        )
    states = {layer.weight: {FOLD: (layer, "weight"), "state": state}}
    if layer.bias is not None:
        states[layer.bias] = {FOLD: (layer, "bias"), "state": state}
    return states


def _fold_problem(op: BendingOp, layer: FoldLayer, state: State) -> str | None:
    """Why ``op`` (with ``state``) cannot fold into ``layer``: "affine" (it is not a scale
    and offset), "channels" (not one value per channel), "offset" (an offset with nowhere to
    go: no bias, or the layer's input side), or None when it folds."""
    affine = op.affine(state)
    if affine is None:
        return "affine"
    if any(_varies_within_channels(t, layer) for t in _tensors(state)):
        return "channels"
    no_offset = isinstance(affine[1], float) and affine[1] == 0.0
    if not no_offset and (layer.bias is None or layer.side == "input"):
        return "offset"
    return None


def reader_folds(
    op: BendingOp, graph: torch.fx.Graph, root: nn.Module, name: str
) -> dict[str, State] | None:
    """The states that fold ``op`` on activation ``name`` of ``graph`` into the layers that
    read it, or None when that is not exact: every reader must be a 1x1 convolution (stride
    1, no padding, one group) or a linear layer taking the activation as its only input
    (it mixes channels linearly, so ``W @ (s * x) == (W * s) @ x``), the activation nothing
    else, and ``op`` one scale per channel with no offset."""
    node = next((n for n in graph.nodes if n.name == name), None)
    if node is None or not node.users:
        return None
    layers = [_reading_layer(user, node, root) for user in node.users]
    if any(layer is None for layer in layers):
        return None
    shape = node.meta.get("shape")
    states: dict[str, State] = {}
    for layer in layers:
        if shape is None or len(shape) != len(layer.probe) or shape[1] != layer.channels:
            return None
        weight = root.get_parameter(layer.weight)
        state = op.init_state(name, torch.Size(shape), weight.dtype, weight.device)
        if _fold_problem(op, layer, state) is not None:
            return None
        states[layer.weight] = {FOLD: (layer, "weight"), "state": state}
    return states


def _reading_layer(user: torch.fx.Node, node: torch.fx.Node, root: nn.Module) -> FoldLayer | None:
    """``user`` as a layer whose input channels take a per-channel scale, or None."""
    if user.op != "call_module" or user.args != (node,) or user.kwargs:
        return None
    layer = root.get_submodule(user.target)
    kind = type(layer).__name__
    if kind == "Linear":
        pointwise = True
    elif kind in ("Conv1d", "Conv2d", "Conv3d"):
        pointwise = (
            all(k == 1 for k in layer.kernel_size)
            and all(s == 1 for s in layer.stride)
            and layer.padding in ("valid", (0,) * len(layer.kernel_size))
            and layer.groups == 1
        )
    else:
        return None
    if not pointwise:
        return None
    bias = f"{user.target}.bias" if layer.bias is not None else None
    channels = layer.weight.shape[1]
    return FoldLayer(user.target, kind, f"{user.target}.weight", bias, channels, 1, "input")


def _tensors(state: Any) -> Iterable[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from _tensors(value)


def _varies_within_channels(tensor: torch.Tensor, layer: FoldLayer) -> bool:
    """True when a state tensor has more than one value along a dimension other than the
    channels (it bends units, not channels)."""
    if tensor.dim() != len(layer.probe):
        return tensor.numel() > 1
    return any(size > 1 for d, size in enumerate(tensor.shape) if d != layer.channel_dim)


def is_fold(state: State) -> bool:
    return FOLD in state


def bend_tensor(op: BendingOp, state: State, tensor: torch.Tensor) -> torch.Tensor:
    """``op`` applied to a weight: directly (a weight op) or as a fold of an op on the output
    of the weight's layer."""
    if not is_fold(state):
        return op.apply(tensor, state)
    layer, role = state[FOLD]
    scale, offset = op.affine(state["state"])
    scale = layer.per_channel(scale, tensor)
    if role == "weight":
        return tensor * layer.weight_factor(scale, tensor)
    return tensor * scale + layer.per_channel(offset, tensor)


def folds_last(chain: Iterable[tuple[BendingOp, State]]) -> list[tuple[BendingOp, State]]:
    """A weight's chain with the weight ops first, then the folds, each in order: an op on a
    layer's output acts after the ops on its weights, as in the Python model."""
    chain = list(chain)
    return [e for e in chain if not is_fold(e[1])] + [e for e in chain if is_fold(e[1])]
