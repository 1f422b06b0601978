"""Bending ops: small modules with named, typed, ranged parameters held in tensors.

An op is created once (``Mask(prob=0.3, dim=1)``) and may bend several targets, weights and
activations alike. Per-target state that depends on the target's shape (a random field, a
permutation, an LFO phase) is made by :meth:`BendingOp.init_state` when the op is bound to a
target. Parameter values live in 0-d tensors, so ``op.set("prob", 0.5)`` (or ``op.prob = 0.5``) is
an in-place write that the next call sees, with no retrace and no graph rebuild.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ..errors import BendingError, ShapeError

State = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """Declares a live parameter of an op: default value, allowed range and a one-line doc.

    Used as a class attribute; reading it on an op gives a float, assigning it calls ``set``.
    """

    default: float
    low: float = -math.inf
    high: float = math.inf
    doc: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __get__(self, op: BendingOp | None, owner: type) -> Any:
        if op is None:
            return self
        return op.get(self.name)

    def __set__(self, op: BendingOp, value: float) -> None:
        op.set(self.name, value)

    def validate(self, op_name: str, value: Any) -> float:
        """The value as a float, or a BendingError saying what is allowed."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise BendingError(f"{op_name}.{self.name} takes a number, got {value!r}") from None
        if not math.isfinite(number) or not self.low <= number <= self.high:
            raise BendingError(
                f"{op_name}.{self.name} must be a finite number in [{self.low}, {self.high}], "
                f"got {value!r}"
            )
        return number


class BendingOp(nn.Module):
    """Base class of bending ops.

    Subclasses declare their live parameters as :class:`Param` class attributes, take their
    structural options (``dim``, ``seed``, ...) as keyword arguments, and implement
    :meth:`apply`. ``options()`` returns those structural options, so that an op can be saved as
    JSON and rebuilt identically (``seed=None`` draws a seed at creation, from torch's RNG).
    """

    params: ClassVar[dict[str, Param]] = {}
    #: False for ops that only make sense on activations (e.g. a per-call LFO).
    bends_weights: ClassVar[bool] = True
    #: False for ops whose output shape differs from their input (none of the built-ins).
    bends_activations: ClassVar[bool] = True
    #: Parameters a modulator drives per time step, into the buffers of :meth:`waves`.
    stepped: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.params = {
            name: value
            for klass in reversed(cls.__mro__)
            for name, value in vars(klass).items()
            if isinstance(value, Param)
        }

    def __init__(self, **values: float) -> None:
        super().__init__()
        self.revision = 0
        #: A disabled op passes its input through (switched at block boundaries by the engine).
        self.enabled = True
        #: Set by an engine playing this op: ``set`` submits the change there instead.
        self.on_set: Callable[[str, float], None] | None = None
        unknown = set(values) - set(self.params)
        if unknown:
            raise BendingError(
                f"{type(self).__name__} has no parameter {sorted(unknown)}; "
                f"its parameters are {sorted(self.params)}"
            )
        for name, param in self.params.items():
            value = values.get(name)
            number = param.default if value is None else param.validate(self.name, value)
            self.register_buffer(f"_{name}", torch.tensor(number, dtype=torch.float32))

    @property
    def name(self) -> str:
        return type(self).__name__

    # -- live parameters ---------------------------------------------------------------------

    def set(self, name: str, value: float) -> None:
        """Write a parameter in place; the next call sees it. An op that an engine plays
        submits the change to the engine instead, applied at its next block."""
        if self.on_set is not None:
            self.on_set(name, value)
            return
        param = self.param(name)
        number = param.validate(self.name, value)
        self.value_tensor(name).fill_(number)
        self.revision += 1

    def get(self, name: str) -> float:
        self.param(name)
        return float(self.value_tensor(name))

    def value_tensor(self, name: str) -> torch.Tensor:
        """The 0-d tensor holding a parameter (what ``apply`` reads)."""
        return self._buffers[f"_{name}"]

    def values(self) -> dict[str, float]:
        return {name: self.get(name) for name in self.params}

    def param(self, name: str) -> Param:
        """The declaration of parameter ``name`` (default, range), or a BendingError."""
        try:
            return self.params[name]
        except KeyError:
            raise BendingError(
                f"{self.name} has no parameter '{name}'; its parameters are {sorted(self.params)}"
            ) from None

    # -- what subclasses implement -----------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """Structural constructor arguments (JSON-serialisable), beside the live parameters."""
        return {}

    def init_state(self, target: str, shape: torch.Size, dtype: torch.dtype, device) -> State:
        """Per-target state (random fields, permutations, phases) for a target of this shape."""
        return {}

    def apply(self, x: torch.Tensor, state: State) -> torch.Tensor:
        raise NotImplementedError

    def waves(self) -> tuple[torch.Tensor, ...]:
        """The buffers a modulator writes a ``stepped`` parameter's modulation into, one value
        per time step of a block (an op whose parameters are all scalars has none)."""
        return ()

    def affine(self, state: State) -> tuple[Any, Any] | None:
        """This op as ``x * scale + offset`` (tensors broadcasting to the target, or numbers),
        or None when it is not one. Such an op on a layer's output can be folded into the
        layer's weight and bias (TorchScript files)."""
        return None

    # -- composition and description ---------------------------------------------------------

    def __rshift__(self, other: BendingOp) -> Chain:
        return Chain(self, other)

    def spec(self) -> dict[str, Any]:
        """A JSON-serialisable description from which :func:`op_from_spec` rebuilds the op
        (each value the shortest decimal its tensor holds: 0.3, not 0.30000001192092896)."""
        params = {name: _shortest(self.value_tensor(name)) for name in self.params}
        return {"op": self.name, "params": params, "options": self.options()}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v:.3f}" for k, v in self.values().items())

    def __repr__(self) -> str:
        return f"{self.name}({self.extra_repr()})"


class Chain(BendingOp):
    """Ops applied one after the other: ``Mask(0.5) >> Scale(2.0)``."""

    def __init__(self, *ops: BendingOp) -> None:
        super().__init__()
        flat = []
        for op in ops:
            flat.extend(op.ops if isinstance(op, Chain) else [op])
        self.ops = nn.ModuleList(flat)
        self.bends_weights = all(op.bends_weights for op in flat)

    @property
    def revision(self) -> int:
        return sum(op.revision for op in self.ops)

    @revision.setter
    def revision(self, value: int) -> None:
        pass  # a chain changes when its parts do

    def init_state(self, target, shape, dtype, device) -> State:
        return {
            str(i): op.init_state(target, shape, dtype, device) for i, op in enumerate(self.ops)
        }

    def apply(self, x: torch.Tensor, state: State) -> torch.Tensor:
        for i, op in enumerate(self.ops):
            x = op.apply(x, state[str(i)])
        return x

    def affine(self, state: State) -> tuple[Any, Any] | None:
        scale, offset = 1.0, 0.0
        for i, op in enumerate(self.ops):
            step = op.affine(state[str(i)])
            if step is None:
                return None
            no_offset = isinstance(offset, float) and offset == 0.0
            scale, offset = scale * step[0], step[1] if no_offset else offset * step[0] + step[1]
        return scale, offset

    def spec(self) -> dict[str, Any]:
        return {"op": "Chain", "ops": [op.spec() for op in self.ops]}

    def __repr__(self) -> str:
        return " >> ".join(repr(op) for op in self.ops)


class BoundOp(nn.Module):
    """An op bound to one activation: the module the bended graph calls in place of nothing."""

    def __init__(self, op: BendingOp, target: str, shape: torch.Size, state: State) -> None:
        super().__init__()
        self.op = op
        self.target = target
        self.shape = shape
        self.state = state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.op.enabled:
            return x
        try:
            return self.op.apply(x, self.state)
        except RuntimeError as error:
            if x.shape != self.shape:
                raise ShapeError(
                    f"{self.op!r} on '{self.target}' was set up for shape {tuple(self.shape)} "
                    f"but got {tuple(x.shape)}: give the op a dim= (e.g. dim=1 for channels) to "
                    "make it independent of the other dimensions, or trace again with this shape"
                ) from error
            raise


def forward_state(
    module: nn.Module, state: Iterable[torch.Tensor] = ()
) -> tuple[list[torch.Tensor], list[torch.Generator]]:
    """What a forward of ``module`` may write (its buffers, ``state``, its bound ops' state
    tensors) and the generators its ops draw from."""
    tensors = {id(t): t for t in (*module.buffers(), *state)}
    generators = []
    for sub in module.modules():
        if isinstance(sub, BoundOp):
            for value in sub.state.values():
                if isinstance(value, torch.Tensor):
                    tensors[id(value)] = value
                elif isinstance(value, torch.Generator):
                    generators.append(value)
    return list(tensors.values()), generators


def seeded_generator(seed: int, target: str, device) -> torch.Generator:
    """A generator for one (op, target) pair: same seed and target, same draws."""
    generator = torch.Generator(device=device)
    generator.manual_seed((seed ^ zlib.crc32(target.encode())) & 0x7FFFFFFF)
    return generator


def draw_seed() -> int:
    """A seed from torch's global RNG, so ``torch.manual_seed`` makes ``seed=None`` repeatable."""
    return int(torch.randint(0, 2**31 - 1, ()).item())


def _shortest(value: torch.Tensor) -> float:
    """The decimal of fewest digits that is the value a 0-d tensor holds in its dtype."""
    exact = float(value)
    for digits in range(1, 18):
        decimal = float(f"{exact:.{digits}g}")
        if torch.tensor(decimal, dtype=value.dtype) == value:
            return decimal
    return exact


def field_shape(shape: torch.Size, dim: int | tuple[int, ...] | None) -> list[int]:
    """The shape of per-unit state: the full shape, or only ``dim``'s sizes (1 elsewhere)."""
    if dim is None:
        return list(shape)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(shape) == 0:
        raise BendingError("a 0-d tensor has no dimension to bend along: use dim=None")
    out = [1] * len(shape)
    for d in dims:
        if not -len(shape) <= d < len(shape):
            raise BendingError(f"dim={d} is out of range for a tensor of shape {tuple(shape)}")
        out[d] = shape[d]
    return out
