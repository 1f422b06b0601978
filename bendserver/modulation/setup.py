"""What the audio side plays for the modulators: one :class:`Setup`, built on the control side.

A setup holds the modulator objects by id, who listens to what, and for each node the
parameters its routes drive (:class:`Target`: a live op's parameter tensor, or the node's output
gain or mix). Per block, the rack asks every modulator for its value (:meth:`Setup.begin`);
each node, before applying its own changes or ramps (in a block that has some), puts its driven
parameters back to their own values (:meth:`Setup.restore`), and after them writes them
modulated (:meth:`Setup.drive`), so a ramp or a change moves the parameter's own value and the
modulation rides on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..bending.base import BendingOp
from .kinds import INPUT, Modulator


class Target:
    """One parameter driven by routes: where it lives, its range, and what was written."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high
        #: (modulator, depth x the route's span) for each route driving it.
        self.routes: list[tuple[Modulator, float]] = []
        self.base = 0.0  #: its own value, before modulation
        self.written = False  #: whether what it holds now is modulated
        self.played = 0.0  #: the value it was last driven to

    def read(self) -> float:
        raise NotImplementedError

    def write(self, value: float) -> None:
        raise NotImplementedError

    def drive(self) -> None:
        if not self.written:  # restored (a change or a ramp may have moved it): read again
            self.base = self.read()
        total = self.base
        for mod, span in self.routes:
            total += mod.level * span
        self.played = min(self.high, max(self.low, total))
        self.write(self.played)
        self.written = True

    def restore(self) -> None:
        if self.written:
            self.write(self.base)
            self.written = False


class TensorTarget(Target):
    """An op's parameter: the 0-d tensor its bended graph reads."""

    def __init__(self, tensor: torch.Tensor, low: float, high: float) -> None:
        super().__init__(low, high)
        self.tensor = tensor

    def read(self) -> float:
        return float(self.tensor)

    def write(self, value: float) -> None:
        self.tensor.fill_(value)


class StepTarget(TensorTarget):
    """An op's parameter that moves per time step (``op.stepped``): its own value stays in its
    0-d tensor; the modulation, clipped with it to the range, goes into the op's per-step
    buffers (``op.waves()``), each value a step of the block."""

    def __init__(self, op: BendingOp, name: str, low: float, high: float) -> None:
        super().__init__(op.value_tensor(name), low, high)
        #: Per buffer: the buffer (flat), what is summed (float64), a scratch, the steps 0, 1...
        self.buffers = []
        for wave in op.waves():
            summed, scratch = (torch.zeros(wave.numel(), dtype=torch.float64, device=wave.device)
                               for _ in range(2))  # fmt: skip
            steps = torch.arange(wave.numel(), dtype=torch.float64, device=wave.device)
            self.buffers.append((wave.view(-1), summed, scratch, steps))

    def write(self, value: float) -> None:
        """The modulation at each step (``value``, at the block's first, is what is shown),
        clipped where the routes could take it out of the range (each value is in -1..1)."""
        reach = sum(abs(span) for _, span in self.routes)
        clips = not self.low <= self.base - reach <= self.base + reach <= self.high
        for wave, summed, scratch, steps in self.buffers:
            summed.zero_()
            for mod, span in self.routes:
                mod.add_steps(summed, scratch, steps, span)
            if clips:
                summed.add_(self.base).clamp_(self.low, self.high).sub_(self.base)
            wave.copy_(summed)

    def restore(self) -> None:
        if self.written:
            for wave, *_ in self.buffers:
                wave.zero_()
            self.written = False


class SettingTarget(Target):
    """A node's output ``gain`` or ``mix``, or the rack output's ``gain`` (each moved
    linearly across the block by what plays it)."""

    def __init__(self, node: Any, name: str, low: float, high: float) -> None:
        super().__init__(low, high)
        self.node, self.name = node, name

    def read(self) -> float:
        return float(getattr(self.node, self.name))

    def write(self, value: float) -> None:
        setattr(self.node, self.name, value)


class Setup:
    """The modulators by id, their listeners by source, the targets of each node."""

    def __init__(
        self,
        mods: dict[str, Modulator],
        targets: dict[Any, list[Target]],
        addresses: dict[str, Target] | None = None,
    ) -> None:
        self.mods = mods
        self.targets = targets
        #: Each route's address and the target it drives (what the page shows moving).
        self.addresses = addresses or {}
        #: The modulators that start again rather than carry on from those of their id.
        self.fresh: frozenset[str] = frozenset()
        self.listeners: dict[str, list[Modulator]] = {}
        for mod in mods.values():
            if mod.listens:
                self.listeners.setdefault(mod.source, []).append(mod)

    def carry(self, old: Setup) -> None:
        """Take over what ``old``'s modulators kept (phases, levels, triggers) and put the
        parameters ``old`` drove back to their own values (audio side, at a block boundary)."""
        for mod_id, mod in self.mods.items():
            before = old.mods.get(mod_id)
            if before is not None and before.kind == mod.kind and mod_id not in self.fresh:
                mod.carry(before)
        for targets in old.targets.values():
            for target in targets:
                target.restore()

    def begin(self, time: int, block: int, rate: int, dry: np.ndarray) -> None:
        """Each modulator's value for the block that starts at ``time`` (the rack's input
        heard first)."""
        for mod in self.listeners.get(INPUT, ()):
            mod.listen(dry, time, block, rate)
        for mod in self.mods.values():
            mod.value(time, block, rate)

    def heard(self, source: str, signal: np.ndarray, time: int, block: int, rate: int) -> None:
        """A node's output, for those listening to it (it moves the next block)."""
        for mod in self.listeners.get(source, ()):
            mod.listen(signal, time, block, rate)

    def restore(self, node: Any) -> None:
        for target in self.targets.get(node, ()):
            target.restore()

    def drive(self, node: Any) -> None:
        for target in self.targets.get(node, ()):
            target.drive()

    def all_targets(self) -> Iterable[Target]:
        for targets in self.targets.values():
            yield from targets
