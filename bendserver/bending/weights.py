"""Effective weights: a mix of weight versions, then weight ops, swapped into a shadow module.

The wrapped module is never touched. The shadow is a copy of its structure whose parameters are
distinct ``nn.Parameter`` objects aliasing the original storage; bending a weight computes a new
tensor from the untouched source and swaps it into the shadow parameter (``param.data = new``):
O(1) per changed tensor, and the graph modules built on the shadow never need rebuilding.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from ..errors import BendingError
from ..slices import breathe
from .base import BendingOp, State
from .fold import bend_tensor, folds_last

DEFAULT_VERSION = "_default"


def shadow_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` sharing its buffers and aliasing its parameters' storage."""
    memo: dict[int, object] = {}
    for param in module.parameters():
        memo[id(param)] = nn.Parameter(param.detach(), requires_grad=param.requires_grad)
    for buffer in module.buffers():
        memo[id(buffer)] = buffer
    return copy.deepcopy(module, memo)


class WeightBank:
    """Versions, interpolation and weight ops of one module, applied to its shadow."""

    def __init__(self, module: nn.Module, shadow: nn.Module) -> None:
        self.slots: dict[str, nn.Parameter] = dict(shadow.named_parameters())
        self.buffer_names = {name for name, _ in module.named_buffers()}
        self.versions: dict[str, dict[str, torch.Tensor]] = {
            # aliases of the module's own weights: they keep them when a slot is swapped
            DEFAULT_VERSION: {name: p.detach() for name, p in module.named_parameters()}
        }
        self.version = DEFAULT_VERSION
        #: The name the module's own weights go by (see :meth:`alias`).
        self.default_name = DEFAULT_VERSION
        self.mix: dict[str, float] | None = None
        self.ops: dict[str, list[tuple[BendingOp, State]]] = {}
        self._revisions: dict[int, int] = {}
        #: When True (a stream engine owns the module), changes are computed but not swapped in:
        #: the engine commits them at a block boundary.
        self.deferred = False
        self.pending: dict[str, torch.Tensor] = {}

    @property
    def names(self) -> list[str]:
        return list(self.slots)

    # -- versions ----------------------------------------------------------------------------

    def add_version(self, name: str, source: nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Store another set of weights for the same parameters (names and shapes checked)."""
        if name == DEFAULT_VERSION:
            raise BendingError(
                f"'{DEFAULT_VERSION}' is the module's own weights; pick another name"
            )
        if isinstance(source, nn.Module):
            tensors = dict(source.named_parameters())
        elif isinstance(source, Mapping):
            tensors = dict(source)
        else:
            raise BendingError(
                f"create_version takes a module or a state dict, got {type(source).__name__}"
            )
        self._check_compatible(name, tensors)
        self.versions[name] = {n: tensors[n].detach().clone() for n in self.slots}

    def _check_compatible(self, name: str, tensors: Mapping[str, torch.Tensor]) -> None:
        reference = self.versions[DEFAULT_VERSION]
        missing = sorted(set(reference) - set(tensors))
        # A full state dict also holds buffers (running stats, caches): they are not weights.
        unexpected = sorted(set(tensors) - set(reference) - self.buffer_names)
        mismatched = [
            f"{n}: {tuple(tensors[n].shape)} instead of {tuple(reference[n].shape)}"
            for n in reference
            if n in tensors and tuple(tensors[n].shape) != tuple(reference[n].shape)
        ]
        problems = []
        if missing:
            problems.append(f"missing {missing}")
        if unexpected:
            problems.append(f"unexpected {unexpected}")
        if mismatched:
            problems.append(f"other shapes {mismatched}")
        if problems:
            raise BendingError(
                f"version '{name}' does not fit this module's weights: {'; '.join(problems)}. "
                "A version must have the same parameter names and shapes as the module"
            )

    def alias(self, name: str) -> None:
        """Give the module's own weights another name too (a manifest's first version)."""
        if name != DEFAULT_VERSION:
            self.versions[name] = self.versions[DEFAULT_VERSION]
            self.default_name = name

    @property
    def named_versions(self) -> list[str]:
        """The versions by the names a user gave them (the module's own weights appear once:
        under their alias if they have one)."""
        return [v for v in self.versions if v != DEFAULT_VERSION or self.default_name == v]

    def select(self, version: str | None) -> None:
        version = DEFAULT_VERSION if version is None else version
        self.check_version(version)
        self.version = version
        self.refresh()

    def set_mix(self, mix: Mapping[str, float] | None) -> None:
        """Weights of a normalised sum of versions; ``None`` goes back to the selected version."""
        self.mix = None if mix is None else self.normalised(mix)
        self.refresh()

    def normalised(self, mix: Mapping[str, float]) -> dict[str, float]:
        """``mix`` checked (known versions, finite weights, a non-zero sum) and summing to 1."""
        mix = {name: float(w) for name, w in mix.items()}
        for name in mix:
            self.check_version(name)
        total = sum(mix.values())
        if not all(map(_finite, mix.values())) or abs(total) < 1e-12:
            raise BendingError(f"interpolation weights must be finite and not sum to 0, got {mix}")
        return {name: w / total for name, w in mix.items()}

    def check_version(self, name: str) -> None:
        if name not in self.versions:
            raise BendingError(f"no version '{name}'; versions are {self.named_versions}")

    def snapshot(self) -> dict[str, torch.Tensor]:
        """The current effective weights, copied."""
        return {name: slot.detach().clone() for name, slot in self.slots.items()}

    # -- weight ops --------------------------------------------------------------------------

    def add_op(self, name: str, op: BendingOp, state: State | None = None) -> None:
        """Bend weight ``name`` with ``op``; ``state``: a fold's (see :mod:`.fold`) instead of
        the op's own state for this weight."""
        slot = self.slots[name]
        if state is None:
            if not op.bends_weights:
                raise BendingError(f"{op!r} bends activations only, not weights like '{name}'")
            state = op.init_state(name, slot.shape, slot.dtype, slot.device)
        self.ops.setdefault(name, []).append((op, state))
        self._revisions[id(op)] = op.revision
        self.refresh([name])

    def targets(self, op: BendingOp) -> list[str]:
        """The weights ``op`` bends."""
        return [name for name, ops in self.ops.items() if any(o is op for o, _ in ops)]

    def clear_ops(self) -> None:
        bended = list(self.ops)
        self.ops.clear()
        self._revisions.clear()
        self.refresh(bended)

    # -- computing ---------------------------------------------------------------------------

    def sync(self) -> None:
        """Recompute the weights whose ops changed a parameter since the last call."""
        if not self._revisions:
            return
        changed = [
            name
            for name, ops in self.ops.items()
            if any(self._revisions[id(op)] != op.revision for op, _ in ops)
        ]
        if changed:
            self.refresh(changed)

    def source(self, name: str, mix: Mapping[str, float] | None = None) -> torch.Tensor:
        """The unbended weight: the selected version, or a normalised mix of versions."""
        return self._mixed(name, self.version, self.mix if mix is None else mix)

    def _mixed(self, name: str, version: str, mix: Mapping[str, float] | None) -> torch.Tensor:
        if not mix:
            return self.versions[version][name]
        return sum(w * self.versions[v][name].detach() for v, w in mix.items())

    def compute(
        self,
        name: str,
        mix: Mapping[str, float] | None = None,
        enabled: Mapping[int, bool] | None = None,
    ) -> torch.Tensor:
        """The bended weight ``name``; ``mix`` and ``enabled`` (op id -> flag) override the
        current interpolation and ops' enabled flags, to prepare a change before it applies."""
        ops = [
            (op, state)
            for op, state in self.ops.get(name, ())
            if (enabled or {}).get(id(op), op.enabled)
        ]
        return self.bended(name, self.version, mix if mix is not None else self.mix, ops)

    def bended(
        self,
        name: str,
        version: str,
        mix: Mapping[str, float] | None,
        ops: Iterable[tuple[BendingOp, State]],
    ) -> torch.Tensor:
        """Weight ``name`` of ``version`` (or of a normalised ``mix``) through a chain of
        ``(op, per-weight state)``: the pure form, for an engine that keeps its own state. Folded
        activation ops act after the weight ops."""
        with torch.no_grad():
            weight = self._mixed(name, version, mix).detach()
            for op, state in folds_last(ops):
                breathe()
                weight = bend_tensor(op, state, weight)
            return weight.contiguous()  # what plays reads a weight laid out alike after a change

    def prepare(self, names: Iterable[str] | None = None, **overrides) -> dict[str, torch.Tensor]:
        """New tensors for ``names`` (all weights by default), computed without touching the
        module: the heavy half of a weight change, for the control side."""
        with torch.no_grad():
            return {
                n: self.compute(n, **overrides) for n in (self.slots if names is None else names)
            }

    def commit(self, prepared: Mapping[str, torch.Tensor]) -> None:
        """Swap prepared tensors in: one pointer swap per tensor, cheap enough for a block
        boundary."""
        for name, tensor in prepared.items():
            self.slots[name].data = tensor

    def refresh(self, names: Iterable[str] | None = None) -> None:
        """Recompute and swap in ``names``; in deferred mode keep them for :meth:`take_pending`."""
        prepared = self.prepare(names)
        for ops in self.ops.values():
            for op, _ in ops:
                self._revisions[id(op)] = op.revision
        if self.deferred:
            self.pending.update(prepared)
        else:
            self.commit(prepared)

    def take_pending(self) -> dict[str, torch.Tensor]:
        """The deferred changes, handed over once."""
        pending, self.pending = self.pending, {}
        return pending


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
