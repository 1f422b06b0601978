"""nn~ attributes of a TorchScript file as nn~ defines them, described once for every surface.

An nn~ file lists its attributes in ``get_attributes()``; each is a tuple of values set by
``set_<name>(v1, v2, ...)`` and read by ``get_<name>()``, and ``<name>_params`` holds nn~'s type
id of each value (0 bool, 1 int, 2 float, 3 str, 4 tensor, 5 buffer). The types are read from
the setter's own schema (nn-tilde 1.5 stored the ids as floats, and a setter written by hand says
what it takes), the buffer id where the setter takes a buffer's name; the strings a setter
accepts from the values it compares its argument with (its choices); the current value from the
getter where there is one. An attribute without a setter or a getter (nn-tilde 1.5 lists
``none`` in every file) is described as such. OSC, scores, presets, OSCQuery, the page and
``info`` all read this one description.

A tensor or buffer value comes from a sound file (:class:`Sound`), read on the control side: a
tensor gets its first channel (as nn~ takes a ``buffer~``'s), a buffer its channels and rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import compat
from .audiofile import read_sound, sound_info
from .errors import BendingError

#: nn~'s type ids (``<name>_params``) by kind.
TYPE_IDS = {"bool": 0, "int": 1, "float": 2, "str": 3, "tensor": 4, "buffer": 5}
#: The kind of a setter argument by its TorchScript type.
_SCHEMA_KINDS = {"bool": "bool", "int": "int", "float": "float", "str": "str", "Tensor": "tensor"}
#: Kinds whose value is a sound file's path.
SOUND_KINDS = ("tensor", "buffer")
#: The largest sound file a tensor or buffer attribute takes (bytes on disk, frames read).
MAX_SOUND_BYTES = 256 * 2**20
MAX_SOUND_FRAMES = 2**24


@dataclass(frozen=True, eq=False)
class Sound:
    """A sound file read for a tensor or buffer attribute: its path, samples ``[channels,
    frames]`` at its own rate. Compared by identity (a file read again is another value)."""

    path: str
    samples: torch.Tensor
    sample_rate: int

    @classmethod
    def read(cls, path: str, what: str) -> Sound:
        """Read ``path`` (a sound file, at most :data:`MAX_SOUND_BYTES` and
        :data:`MAX_SOUND_FRAMES`); ``what`` names the attribute in errors."""
        file = Path(path).expanduser()
        if not file.is_file():
            raise BendingError(f"{what} takes a sound file: no file {path}")
        size = file.stat().st_size
        if size > MAX_SOUND_BYTES:
            raise BendingError(
                f"{what}: {path} is {size / 2**20:.0f} MiB, more than the "
                f"{MAX_SOUND_BYTES // 2**20} MiB a sound file for an attribute may be"
            )
        if sound_info(file).frames > MAX_SOUND_FRAMES:
            raise BendingError(f"{what}: {path} holds more than {MAX_SOUND_FRAMES} frames")
        audio, info = read_sound(file)
        return cls(str(file.resolve()), torch.from_numpy(audio), int(info.samplerate))

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True)
class Attribute:
    """One nn~ attribute: the kind of each value its setter takes (``()``: no setter), their
    names, whether it has a getter, the strings it accepts (``choices``, where its setter
    compares its argument with fixed strings), and why it cannot be set (``problem``)."""

    name: str
    kinds: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    readable: bool = False
    choices: tuple[str, ...] = ()
    problem: str = ""

    @property
    def settable(self) -> bool:
        return not self.problem

    def describe(self) -> str:
        """One line for ``info``: the kinds it takes, its choices, what it lacks."""
        parts = [", ".join(self.kinds) or "no setter"]
        if self.choices:
            parts.append("one of " + "|".join(self.choices))
        if not self.readable:
            parts.append("no getter")
        if self.problem and self.kinds:
            parts.append(self.problem)
        return f"{self.name} ({'; '.join(parts)})"

    def parse(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Values from OSC, a score or a preset as the setter takes them (a whole float for an
        int, 0/1 for a bool, Pd sends only floats), sound files read; refused with what it
        takes otherwise."""
        if self.problem:
            raise BendingError(f"attribute '{self.name}' cannot be set: {self.problem}")
        if len(values) != len(self.kinds):
            raise BendingError(
                f"attribute '{self.name}' takes {len(self.kinds)} value"
                f"{'s' * (len(self.kinds) != 1)} ({', '.join(self.kinds)}), got {len(values)}"
            )
        pairs = enumerate(zip(self.kinds, values, strict=True))
        return tuple(self._value(kind, value, index) for index, (kind, value) in pairs)

    def _value(self, kind: str, value: Any, index: int) -> Any:
        what = f"attribute '{self.name}'" + (f" value {index + 1}" if len(self.kinds) > 1 else "")
        if isinstance(value, Sound) and kind in SOUND_KINDS:
            return value
        if kind in SOUND_KINDS:
            if not isinstance(value, str):
                raise BendingError(f"{what} takes a sound file's path, got {value!r}")
            return Sound.read(value, what)
        if kind == "str":
            if not isinstance(value, str):
                raise BendingError(f"{what} takes a string, got {value!r}")
            if self.choices and value not in self.choices:
                raise BendingError(f"{what} is one of {', '.join(self.choices)}, got {value!r}")
            return value
        if kind == "bool" and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if isinstance(value, str) or not isinstance(value, (bool, int, float)):
            raise BendingError(f"{what} takes {_a(kind)}, got {value!r}")
        if not math.isfinite(value):
            raise BendingError(f"{what} takes a finite number, got {value!r}")
        if kind == "bool":
            if value not in (0, 1):
                raise BendingError(f"{what} is 0 or 1 (a bool), got {value!r}")
            return bool(value)
        if kind == "int":
            if float(value) != int(value):
                raise BendingError(f"{what} takes a whole number, got {value!r}")
            return int(value)
        return float(value)

    def arguments(self, values: tuple[Any, ...]) -> list[Any]:
        """What the setter is called with: a tensor's first channel (as nn~ passes a
        ``buffer~``), a buffer's name ``<name>#<i>`` (filled first, see :meth:`apply`)."""
        called = []
        for index, (kind, value) in enumerate(zip(self.kinds, values, strict=True)):
            if kind == "tensor":
                value = value.samples[0]
            elif kind == "buffer":
                value = f"{self.name}#{index}"
            called.append(value)
        return called

    def apply(self, module: torch.jit.ScriptModule, values: tuple[Any, ...]) -> int:
        """Call the setter with ``values`` (each buffer filled first with
        ``set_buffer_attribute``, as nn~ does); the setter's code (0: taken, -1: refused)."""
        for index, (kind, value) in enumerate(zip(self.kinds, values, strict=True)):
            if kind == "buffer":
                name = f"{self.name}#{index}"
                code = module.set_buffer_attribute(name, value.samples, value.sample_rate)
                if isinstance(code, int) and code < 0:  # out of the buffer's bounds
                    return code
        code = getattr(module, f"set_{self.name}")(*self.arguments(values))
        return code if isinstance(code, int) else 0

    def read(self, module: torch.jit.ScriptModule) -> tuple[Any, ...]:
        """The getter's value as a tuple (one value or several); refused without a getter."""
        if not self.readable:
            raise BendingError(
                f"attribute '{self.name}' has no getter (get_{self.name}) in this file: its value "
                "cannot be read" + ("" if self.kinds else " (nor set: it has no setter either)")
            )
        try:
            value = getattr(module, f"get_{self.name}")()
        except Exception as error:  # the file's own code
            raise BendingError(f"get_{self.name} failed: {type(error).__name__}: {error}") from None
        return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def shown(value: Any) -> Any:
    """An attribute value as OSC and JSON carry it: numbers and strings as they are, a sound
    file as its path, a tensor as ``tensor [sizes]``."""
    if isinstance(value, torch.Tensor):
        return f"tensor {list(value.shape)}"
    if isinstance(value, Sound):
        return value.path
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def file_attributes(module: torch.jit.ScriptModule) -> dict[str, Attribute]:
    """The nn~ attributes of a TorchScript file, by name, in ``get_attributes()``'s order."""
    methods = set(compat.script_methods(module))
    if "get_attributes" not in methods:
        return {}
    names = [str(name) for name in module.get_attributes()]
    return {name: _attribute(module, name, methods) for name in dict.fromkeys(names)}


def _attribute(module: torch.jit.ScriptModule, name: str, methods: set[str]) -> Attribute:
    readable = f"get_{name}" in methods
    if f"set_{name}" not in methods:
        return Attribute(name, readable=readable, problem=f"the file has no setter set_{name}")
    arguments = getattr(module, f"set_{name}").schema.arguments[1:]
    ids = _type_ids(module, name)
    kinds, problems = [], []
    for index, argument in enumerate(arguments):
        typed = str(argument.type)
        kind = _SCHEMA_KINDS.get(typed)
        if kind == "str" and index < len(ids) and ids[index] == TYPE_IDS["buffer"]:
            kind = "buffer"
        if kind is None:
            problems.append(f"set_{name} takes {argument.name}: {typed}, which nn~ cannot pass")
        kinds.append(kind or typed)
    if "buffer" in kinds and "set_buffer_attribute" not in methods:
        problems.append("the file has no set_buffer_attribute to fill its buffer")
    if not arguments:
        problems.append(f"set_{name} takes no value")
    choices = _choices(module, f"set_{name}") if kinds == ["str"] else ()
    return Attribute(
        name,
        tuple(kinds),
        tuple(a.name for a in arguments),
        readable,
        choices,
        "; ".join(problems),
    )


def _type_ids(module: torch.jit.ScriptModule, name: str) -> list[int]:
    """nn~'s type ids of an attribute's values (``<name>_params``), or none."""
    params = dict(module.named_buffers()).get(f"{name}_params")
    return [] if params is None else [int(v) for v in params.flatten().tolist()]


def _choices(module: torch.jit.ScriptModule, setter: str) -> tuple[str, ...]:
    """The strings a one-string setter compares its argument with (``x == 'tanh'``, ``x in
    self._valid_``): what it accepts, in the order the setter names them."""
    graph = compat.script_method_graph(module, setter)
    owner, argument = (value.unique() for value in list(graph.inputs())[:2])
    found: list[str] = []
    for node in _nodes(graph):
        inputs = list(node.inputs())
        if node.kind() in ("aten::eq", "aten::ne") and len(inputs) == 2:
            if argument in (inputs[0].unique(), inputs[1].unique()):
                other = inputs[1] if inputs[0].unique() == argument else inputs[0]
                found += [v for v in [_constant(module, owner, other)] if isinstance(v, str)]
        elif node.kind() == "aten::__contains__" and len(inputs) == 2:
            if inputs[1].unique() == argument:
                listed = _constant(module, owner, inputs[0])
                if isinstance(listed, (list, tuple)):
                    found += [v for v in listed if isinstance(v, str)]
    return tuple(dict.fromkeys(found))


def _nodes(block: Any) -> Iterator[Any]:
    """Every node of an IR graph or block, those of nested blocks included."""
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _nodes(inner)


def _constant(module: torch.jit.ScriptModule, owner: int, value: Any) -> Any:
    """The fixed value an IR value holds: a constant, a list of constants, or an attribute of
    the module itself (``owner``: the setter's ``self``; a list the setter checks membership
    in); None otherwise."""
    node = value.node()
    kind = node.kind()
    if kind == "prim::Constant":
        return compat.ir_constant(node)
    if kind == "prim::ListConstruct":
        items = [_constant(module, owner, v) for v in node.inputs()]
        return items if all(isinstance(i, str) for i in items) else None
    if kind == "prim::GetAttr" and node.inputsAt(0).unique() == owner:
        try:
            held = getattr(module, compat.ir_name(node))
        except (AttributeError, RuntimeError):
            return None
        return list(held) if isinstance(held, (list, tuple)) else None
    return None


def _a(kind: str) -> str:
    return {"int": "a whole number", "float": "a number", "bool": "0 or 1 (a bool)"}.get(kind, kind)
