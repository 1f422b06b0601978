"""The built-in bending ops.

Each applies to weights and activations alike unless said otherwise. Ops with per-unit state
(masks, noise fields, permutations) draw it from their seed and the target's name when bound, so
the same seed gives the same result; ``dim=`` restricts that state to one dimension (``dim=1``:
one value per channel), which makes the op independent of the other dimensions' sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..errors import BendingError
from ..readers import expect, only, optional
from .base import (
    BendingOp,
    Chain,
    Param,
    State,
    draw_seed,
    field_shape,
    seeded_generator,
)
from .noise import draw, noise_state

Dim = int | tuple[int, ...] | None


def _dims(dim: Dim) -> Any:
    return list(dim) if isinstance(dim, tuple) else dim


class _FieldOp(BendingOp):
    """An op with a fixed random field per target (over ``dim``, or the whole shape)."""

    def __init__(self, dim: Dim = None, seed: int | None = None, **values: float) -> None:
        super().__init__(**values)
        self.dim = tuple(dim) if isinstance(dim, list) else dim
        self.seed = draw_seed() if seed is None else int(seed)

    def options(self) -> dict[str, Any]:
        return {"dim": _dims(self.dim), "seed": self.seed}

    def init_state(self, target, shape, dtype, device) -> State:
        generator = seeded_generator(self.seed, target, "cpu")
        field = self.draw(field_shape(shape, self.dim), generator)
        return {"field": field.to(device=device, dtype=dtype)}

    def draw(self, shape: list[int], generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError


class Mask(_FieldOp):
    """Zero units at random: each unit is kept with probability ``prob`` (torchbend's meaning).

    The random field is fixed per target, so raising ``prob`` live only adds units back.
    """

    prob = Param(0.5, 0.0, 1.0, "proportion of units kept")

    def __init__(self, prob: float = 0.5, dim: Dim = None, seed: int | None = None) -> None:
        super().__init__(dim=dim, seed=seed, prob=prob)

    def draw(self, shape, generator):
        return torch.rand(shape, generator=generator)

    def apply(self, x, state):
        return x * (state["field"] < self._prob)  # a bool factor: one op fewer than a cast

    def affine(self, state):
        return self.kept(state), 0.0

    def kept(self, state: State) -> torch.Tensor:
        """1 on the kept units, 0 elsewhere."""
        return (state["field"] < self._prob).to(state["field"].dtype)


class OrderedMask(Mask):
    """Keep exactly ``round(prob * n)`` units, chosen in a seeded random order."""

    def draw(self, shape, generator):
        n = math.prod(shape)
        ranks = torch.empty(n)
        ranks[torch.randperm(n, generator=generator)] = torch.arange(n, dtype=torch.float32)
        return ((ranks + 0.5) / n).reshape(shape)


class Noise(_FieldOp):
    """Gaussian noise, added (``op="add"``) or multiplied in (``op="mul"``: ``x * (1 + n)``).

    The noise field is fixed per target; ``fresh=True`` gives new noise at every time step
    instead (activations only): the value at each step of the last axis, counted from the start
    of the stream, is a function of the seed, the target, the unit and the step
    (:mod:`.noise`), so a stream gets the same noise whatever its block size. Fresh noise always
    varies along the last axis; ``dim`` names the other axes it varies along.
    """

    std = Param(0.1, 0.0, 1e3, "standard deviation of the noise")

    def __init__(
        self,
        std: float = 0.1,
        op: str = "add",
        dim: Dim = None,
        seed: int | None = None,
        fresh: bool = False,
    ) -> None:
        if op not in ("add", "mul"):
            raise BendingError(f"Noise(op=...) is 'add' or 'mul', got {op!r}")
        super().__init__(dim=dim, seed=seed, std=std)
        self.op = op
        self.fresh = bool(fresh)
        self.bends_weights = not self.fresh

    def options(self) -> dict[str, Any]:
        return {**super().options(), "op": self.op, "fresh": self.fresh}

    def init_state(self, target, shape, dtype, device) -> State:
        if not self.fresh:
            return super().init_state(target, shape, dtype, device)
        fresh = field_shape(shape, self.dim)
        if fresh:
            fresh[-1] = shape[-1]
        return noise_state(self.seed, target, fresh, dtype, device)

    def draw(self, shape, generator):
        return torch.randn(shape, generator=generator)

    def apply(self, x, state):
        field = draw(state) if self.fresh else state["field"]
        noise = field * self._std
        return x + noise if self.op == "add" else x * (1.0 + noise)


class Permute(BendingOp):
    """Shuffle units along ``dim`` with a seeded permutation (channels by default)."""

    def __init__(self, dim: int = 1, seed: int | None = None) -> None:
        super().__init__()
        self.dim = int(dim)
        self.seed = draw_seed() if seed is None else int(seed)

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim, "seed": self.seed}

    def init_state(self, target, shape, dtype, device) -> State:
        if len(shape) == 0:
            raise BendingError(f"Permute cannot bend '{target}': it is a 0-d tensor")
        if not -len(shape) <= self.dim < len(shape):
            raise BendingError(
                f"Permute(dim={self.dim}) cannot bend '{target}' of shape {tuple(shape)}"
            )
        generator = seeded_generator(self.seed, target, "cpu")
        return {"index": torch.randperm(shape[self.dim], generator=generator).to(device)}

    def apply(self, x, state):
        return x.index_select(self.dim, state["index"])

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class _UnitOp(BendingOp):
    """An op on every unit, or with ``unit=k`` on unit ``k`` along ``dim`` only (one latent
    dimension: RAVE VST's per-dimension latent scale and bias)."""

    def __init__(self, unit: int | None = None, dim: int = 1, **values: float) -> None:
        super().__init__(**values)
        self.unit = None if unit is None else int(unit)
        self.dim = int(dim)

    def options(self) -> dict[str, Any]:
        return {} if self.unit is None else {"unit": self.unit, "dim": self.dim}

    def init_state(self, target, shape, dtype, device) -> State:
        if self.unit is None:
            return {}
        size = field_shape(shape, self.dim)
        if not 0 <= self.unit < size[self.dim]:
            raise BendingError(
                f"{self.name}: unit {self.unit} is out of range: '{target}' has "
                f"{size[self.dim]} units along dim {self.dim} (0 to {size[self.dim] - 1})"
            )
        one = torch.zeros(size, dtype=dtype, device=device)
        one.view(-1)[self.unit] = 1.0
        return {"unit": one}


class Scale(_UnitOp):
    """Multiply by ``value`` (``unit=k``: unit ``k`` along ``dim`` only)."""

    value = Param(1.0, -1e3, 1e3, "factor")

    def __init__(self, value: float = 1.0, unit: int | None = None, dim: int = 1) -> None:
        super().__init__(unit, dim, value=value)

    def apply(self, x, state):
        return x * self.affine(state)[0]

    def affine(self, state):
        if not state:
            return self._value, 0.0
        return 1.0 + state["unit"] * (self._value - 1.0), 0.0


class Bias(_UnitOp):
    """Add ``value`` (``unit=k``: to unit ``k`` along ``dim`` only)."""

    value = Param(0.0, -1e3, 1e3, "offset")

    def __init__(self, value: float = 0.0, unit: int | None = None, dim: int = 1) -> None:
        super().__init__(unit, dim, value=value)

    def apply(self, x, state):
        return x + self.affine(state)[1]

    def affine(self, state):
        return 1.0, self._value if not state else state["unit"] * self._value


class Affine(BendingOp):
    """``x * scale + bias``."""

    scale = Param(1.0, -1e3, 1e3, "factor")
    bias = Param(0.0, -1e3, 1e3, "offset")

    def __init__(self, scale: float = 1.0, bias: float = 0.0) -> None:
        super().__init__(scale=scale, bias=bias)

    def apply(self, x, state):
        return x * self._scale + self._bias

    def affine(self, state):
        return self._scale, self._bias


class Threshold(BendingOp):
    """Binary threshold: 1 where ``x >= value``, else 0 (``binary=False`` keeps x there)."""

    value = Param(0.0, -1e3, 1e3, "threshold")

    def __init__(self, value: float = 0.0, binary: bool = True) -> None:
        super().__init__(value=value)
        self.binary = bool(binary)

    def options(self) -> dict[str, Any]:
        return {"binary": self.binary}

    def apply(self, x, state):
        above = (x >= self._value).to(x.dtype)
        return above if self.binary else x * above


class TopK(BendingOp):
    """Channel threshold: keep the ``prob`` proportion of units along ``dim`` with the most
    energy (mean absolute value over the other dimensions), zero the others."""

    prob = Param(0.5, 0.0, 1.0, "proportion of units kept")

    def __init__(self, prob: float = 0.5, dim: int = 1) -> None:
        super().__init__(prob=prob)
        self.dim = int(dim)

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim}

    def init_state(self, target, shape, dtype, device) -> State:
        field_shape(shape, self.dim)  # validates dim
        return {}

    def apply(self, x, state):
        others = [d for d in range(x.ndim) if d != self.dim % x.ndim]
        energy = x.abs().mean(dim=others, keepdim=True) if others else x.abs()
        ranks = energy.argsort(dim=self.dim).argsort(dim=self.dim)
        n = x.shape[self.dim]
        keep = ranks.to(x.dtype) >= n - torch.round(self._prob * n)
        return x * keep.to(x.dtype)


class Clamp(BendingOp):
    """Clip to ``[low, high]``."""

    low = Param(-1.0, -1e3, 1e3, "lower bound")
    high = Param(1.0, -1e3, 1e3, "upper bound")

    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        super().__init__(low=low, high=high)

    def apply(self, x, state):
        return torch.minimum(torch.maximum(x, self._low), self._high)


class Invert(_FieldOp):
    """Flip the sign of a random ``prob`` proportion of units (all of them by default)."""

    prob = Param(1.0, 0.0, 1.0, "proportion of units inverted")

    def __init__(self, prob: float = 1.0, dim: Dim = None, seed: int | None = None) -> None:
        super().__init__(dim=dim, seed=seed, prob=prob)

    def draw(self, shape, generator):
        return torch.rand(shape, generator=generator)

    def apply(self, x, state):
        return x * self.signs(state).to(x.dtype)

    def affine(self, state):
        return self.signs(state), 0.0

    def signs(self, state: State) -> torch.Tensor:
        """-1 on the inverted units, 1 elsewhere."""
        return 1.0 - 2.0 * (state["field"] < self._prob).to(state["field"].dtype)


class Oscillate(BendingOp):
    """An LFO: ``x * (1 + depth * sin(phase))``.

    ``over="time"``: the phase runs along ``dim``, ``freq`` cycles per element, and carries on
    across calls, so a stream of blocks sees one continuous LFO. ``over="calls"``: one value per
    call, advancing ``freq`` cycles per call (activations only).
    """

    depth = Param(0.5, 0.0, 10.0, "modulation depth")
    freq = Param(0.001, 0.0, 0.5, "cycles per element (time) or per call (calls)")

    def __init__(
        self, depth: float = 0.5, freq: float = 0.001, over: str = "time", dim: int = -1
    ) -> None:
        if over not in ("time", "calls"):
            raise BendingError(f"Oscillate(over=...) is 'time' or 'calls', got {over!r}")
        super().__init__(depth=depth, freq=freq)
        self.over = over
        self.dim = int(dim)
        self.bends_weights = over == "time"

    def options(self) -> dict[str, Any]:
        return {"over": self.over, "dim": self.dim}

    def init_state(self, target, shape, dtype, device) -> State:
        state: State = {"phase": torch.zeros((), dtype=torch.float64, device=device)}
        if self.over == "time":
            # One step past the block: its angle is the next block's phase. Buffers and their
            # views made once: a view made per call costs as much as an op.
            fshape = field_shape(shape, self.dim)
            fshape[self.dim] += 1
            steps = torch.arange(fshape[self.dim], dtype=torch.float64, device=device)
            state["steps"] = steps.reshape(fshape)
            state["angles"] = torch.zeros(fshape, dtype=torch.float64, device=device)
            state["next"] = state["angles"].flatten()[-1]
            state["wave"] = torch.zeros(fshape, dtype=dtype, device=device)
            state["block"] = state["wave"].narrow(self.dim, 0, shape[self.dim])
        return state

    def apply(self, x, state):
        # An LFO runs on every block, so every call counts: fused forms (addcmul), the phase in
        # float64 (a float32 phase drifts audibly over minutes), the wave written in the
        # activation's dtype by sin itself, the float32 parameters promoted inside the ops.
        phase = state["phase"]
        if self.over == "time":
            angles = state["angles"]
            torch.addcmul(phase, state["steps"], self._freq, value=2 * math.pi, out=angles)
            torch.remainder(state["next"], 2 * math.pi, out=phase)
            torch.sin(angles, out=state["wave"]).mul_(self._depth)
            return torch.addcmul(x, x, state["block"])
        wave = torch.sin(phase).to(x.dtype) * self._depth
        phase.add_(self._freq, alpha=2 * math.pi).remainder_(2 * math.pi)
        return torch.addcmul(x, x, wave)


class Modulate(BendingOp):
    """``x * (1 + depth * w)``, ``w`` moving along ``dim`` (time): its own value plus what the
    modulators routed to ``/bend/<op>/w`` write there, an LFO step by step, the other kinds
    one value a block (docs/modulation.md). The op a live engine plays for an ``Oscillate``
    of a preset, driven by an LFO modulator. Activations only."""

    depth = Param(0.5, 0.0, 10.0, "modulation depth")
    w = Param(0.0, -1.0, 1.0, "the modulation: plus what modulators routed here write per step")
    bends_weights = False
    stepped = ("w",)

    def __init__(self, depth: float = 0.5, w: float = 0.0, dim: int = -1) -> None:
        super().__init__(depth=depth, w=w)
        self.dim = int(dim)
        #: One buffer of ``w``'s modulation per shape along ``dim`` (shared by the activations
        #: of that length: they run at the same rate), by (shape, dtype, device).
        self._waves: dict[tuple[Any, ...], torch.Tensor] = {}

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim}

    def waves(self) -> tuple[torch.Tensor, ...]:
        return tuple(self._waves.values())

    def init_state(self, target, shape, dtype, device) -> State:
        fshape = field_shape(shape, self.dim)
        key = (tuple(fshape), dtype, str(device))
        if key not in self._waves:  # made on the control side, before a graph reads it
            self._waves = {**self._waves, key: torch.zeros(fshape, dtype=dtype, device=device)}
        return {"wave": self._waves[key], "scaled": torch.zeros(fshape, dtype=dtype, device=device)}

    def apply(self, x, state):
        scaled = state["scaled"]
        torch.add(state["wave"], self._w, out=scaled)
        return torch.addcmul(x, x, scaled.mul_(self._depth))


class Lambda(BendingOp):
    """Any function of the tensor: ``Lambda(lambda x: x.flip(-1))``. Cannot be saved."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        if not callable(fn):
            raise BendingError(f"Lambda takes a function, got {fn!r}")
        self.fn = fn

    def apply(self, x, state):
        return self.fn(x)

    def spec(self) -> dict[str, Any]:
        raise BendingError(
            "a Lambda op cannot be saved: its function is code, and configs are JSON. "
            "Write the function as a BendingOp subclass registered with register_op()"
        )

    def __repr__(self) -> str:
        return f"Lambda({getattr(self.fn, '__name__', 'fn')})"


OPS: dict[str, type[BendingOp]] = {
    cls.__name__: cls
    for cls in (
        Mask,
        OrderedMask,
        Noise,
        Permute,
        Scale,
        Bias,
        Affine,
        Threshold,
        TopK,
        Clamp,
        Invert,
        Oscillate,
        Modulate,
    )
}


def register_op(cls: type[BendingOp]) -> type[BendingOp]:
    """Make a custom op class loadable from configs and presets (usable as a decorator)."""
    OPS[cls.__name__] = cls
    return cls


#: The kinds of the built-in ops' structural options (:func:`bendserver.readers.expect`);
#: ``dim`` is also a list of whole numbers. A registered op's other options go to it as they are.
OPTION_KINDS = {
    "seed": "integer",
    "unit": "integer",
    "binary": "flag",
    "fresh": "flag",
    "over": "text",
    "op": "text",
}


def op_from_spec(spec: Any, where: str = "op") -> BendingOp:
    """Rebuild an op from :meth:`BendingOp.spec`'s JSON form, checking the type of every
    value; errors name the key (``where``: the spec's own, ``ops.mask``)."""
    expect(spec, "object", where)
    only(spec, ("op", "params", "options", "ops"), where)
    name = expect(spec.get("op"), "text", f"{where}.op")
    if name == "Chain":
        parts = optional(spec, "ops", "list", f"{where}.", [])
        return Chain(*(op_from_spec(s, f"{where}.ops[{i}]") for i, s in enumerate(parts)))
    cls = OPS.get(name)
    if cls is None:
        raise BendingError(f"{where}.op: unknown op {name!r}; known ops: {sorted(OPS)}")
    params = optional(spec, "params", "object", f"{where}.", {})
    params = {k: expect(v, "number", f"{where}.params.{k}") for k, v in params.items()}
    options = optional(spec, "options", "object", f"{where}.", {})
    options = {k: _option(k, v, f"{where}.options.{k}") for k, v in options.items()}
    try:
        return cls(**params, **options)
    except (TypeError, ValueError, OverflowError) as error:
        raise BendingError(f"{where}: bad arguments for {name}: {error}") from None
    except BendingError as error:
        raise BendingError(f"{where}: {error}") from None


def _option(name: str, value: Any, key: str) -> Any:
    """A structural option checked by its kind (None stays None: the op's default)."""
    if value is None:
        return None
    if name == "dim":
        if isinstance(value, list):
            return [expect(d, "integer", f"{key}[{i}]") for i, d in enumerate(value)]
        return expect(value, "integer", key)
    return expect(value, OPTION_KINDS[name], key) if name in OPTION_KINDS else value
