"""BendingConfig: a list of (op, *keys) that can bend a module, be compared, saved and loaded.

Keys are regular expressions matched in full against weight and activation names. A config is
*bound* to a :class:`~bendserver.BendedModule` to resolve its keys into concrete names. Configs
are saved as versioned JSON (op class, live parameters, structural options, seed, keys): nothing
is ever unpickled.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..errors import BendingError
from ..files import write_text
from ..readers import expect, only, optional, read_json
from ..slices import breathe
from .base import BendingOp
from .ops import op_from_spec


class BendedModule(Protocol):
    """What a config is bound to (a :class:`~bendserver.BendedModule`): it resolves keys."""

    def resolve(self, key: str) -> list[str]: ...

    def describe(self) -> str: ...


FORMAT = "bendserver.config"
FORMAT_VERSION = 1

Entry = tuple[BendingOp, tuple[str, ...]]


class BendingConfig:
    """Bending operations as data: ``BendingConfig((Mask(0.5), "conv.*weight"), (Scale(2), "x"))``.

    Entries are ``(op, *keys)``; the same op object may appear in several entries.
    """

    def __init__(
        self,
        *entries: tuple[Any, ...],
        module: BendedModule | None = None,
        names: Mapping[str, BendingOp] | None = None,
    ) -> None:
        self.entries: list[Entry] = [self._entry(entry) for entry in entries]
        self.module: BendedModule | None = None
        #: Explicit op ids (from a preset, or an engine's names); other ops get generated ones.
        self.names: dict[str, BendingOp] = dict(names or {})
        if module is not None:
            self.bind(module)

    @staticmethod
    def _entry(entry: tuple[Any, ...]) -> Entry:
        breathe()
        if not isinstance(entry, (tuple, list)) or len(entry) < 2:
            raise BendingError(f"a config entry is (op, key, ...), got {entry!r}")
        op, *keys = entry
        if not isinstance(op, BendingOp):
            raise BendingError(f"a config entry starts with a bending op, got {op!r}")
        for key in keys:
            if not isinstance(key, str):
                raise BendingError(f"keys are strings (regular expressions), got {key!r}")
            try:
                re.compile(key)
            except re.error as error:
                raise BendingError(
                    f"key {key!r} is not a valid regular expression: {error}"
                ) from None
        return op, tuple(keys)

    # -- binding and lookup ------------------------------------------------------------------

    def bind(self, module: BendedModule) -> BendingConfig:
        """Resolve every key against ``module`` (raises if a key matches nothing)."""
        for _, keys in self.entries:
            for key in keys:
                module.resolve(key)
        self.module = module
        return self

    def targets(self, keys: Iterable[str]) -> list[str]:
        """The names ``keys`` resolve to when bound, else the keys themselves."""
        if self.module is None:
            return list(keys)
        names: list[str] = []
        for key in keys:
            names.extend(n for n in self.module.resolve(key) if n not in names)
        return names

    @property
    def ops(self) -> dict[str, BendingOp]:
        """The distinct ops by id (``mask``, ``mask_1``, ``scale``...): how presets and OSC
        name them."""
        present = {id(op) for op, _ in self.entries}
        ids: dict[str, BendingOp] = {
            name: op for name, op in self.names.items() if id(op) in present
        }
        named = {id(op) for op in ids.values()}
        tried: dict[str, int] = {}  # per base name, the last suffix taken (linear, not n^2)
        for op, _ in self.entries:
            if id(op) in named:
                continue
            named.add(id(op))
            base = op.name.lower()
            name, n = base, tried.get(base, 0)
            if n:
                name = f"{base}_{n}"
            while name in ids:
                n += 1
                name = f"{base}_{n}"
            tried[base] = n
            ids[name] = op
        return ids

    def op_from_key(self, key: str) -> list[BendingOp]:
        """Ops that bend ``key`` (a concrete name when bound, else one of the entry keys)."""
        found: list[BendingOp] = []
        for op, keys in self.entries:
            if key in self.targets(keys) and not any(op is f for f in found):
                found.append(op)
        return found

    def _grouped(self) -> list[tuple[BendingOp, list[str]]]:
        groups: list[tuple[BendingOp, list[str]]] = []
        for op, keys in self.entries:
            for seen, names in groups:
                if seen is op:
                    names.extend(n for n in self.targets(keys) if n not in names)
                    break
            else:
                groups.append((op, self.targets(keys)))
        return groups

    # -- algebra -----------------------------------------------------------------------------

    def __add__(self, other: BendingConfig) -> BendingConfig:
        if not isinstance(other, BendingConfig):
            return NotImplemented
        config = BendingConfig(
            *((op, *keys) for op, keys in self.entries + other.entries),
            names={**self.names, **other.names},
        )
        module = self.module or other.module
        return config.bind(module) if module is not None else config

    def _canonical(self) -> list[tuple[str, tuple[str, ...]]]:
        canon: dict[str, set[str]] = {}
        for op, names in self._grouped():
            canon.setdefault(json.dumps(op.spec(), sort_keys=True), set()).update(names)
        return sorted((spec, tuple(sorted(names))) for spec, names in canon.items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BendingConfig):
            return NotImplemented
        return self._canonical() == other._canonical()

    __hash__ = None  # mutable, compared by value

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        if self.module is None:
            lines = [f"\t({op!r}, {', '.join(repr(k) for k in keys)})" for op, keys in self.entries]
        else:
            lines = [f"module = {self.module.describe()}"]
            lines += [f"\t{op!r}: {names}" for op, names in self._grouped()]
        return "BendingConfig(\n" + "\n".join(lines) + "\n)"

    # -- JSON --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        ids = {id(op): name for name, op in self.ops.items()}
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "ops": {name: op.spec() for name, op in self.ops.items()},
            "bends": [{"op": ids[id(op)], "keys": list(keys)} for op, keys in self.entries],
        }

    @classmethod
    def from_dict(cls, data: Any, module: BendedModule | None = None) -> BendingConfig:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BendingError(f"not a bendserver config (expected format '{FORMAT}')")
        if data.get("version") != FORMAT_VERSION:
            raise BendingError(
                f"config format version {data.get('version')!r} is not supported "
                f"(this bendserver reads version {FORMAT_VERSION})"
            )
        ops = {}
        for name, spec in optional(data, "ops", "object", "", {}).items():
            breathe()
            ops[name] = op_from_spec(spec, f"ops.{name}")
        entries = []
        for index, bend in enumerate(optional(data, "bends", "list", "", [])):
            where = f"bends[{index}]"
            expect(bend, "object", where)
            only(bend, ("op", "keys"), where)
            name = expect(bend.get("op"), "text", f"{where}.op")
            if name not in ops:
                raise BendingError(f"{where}.op: {name!r} names no op of {sorted(ops)}")
            keys = optional(bend, "keys", "list", f"{where}.", [])
            entries.append((ops[name], *(expect(k, "text", f"{where}.keys") for k in keys)))
        return cls(*entries, module=module, names=ops)

    def save(self, path: str | os.PathLike) -> None:
        """Write the config as JSON (through a temporary file: see :mod:`bendserver.files`)."""
        write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike, module: BendedModule | None = None) -> BendingConfig:
        """Read a config saved by :meth:`save`, bound to ``module`` if given."""
        data = read_json(Path(path), "config")
        try:
            return cls.from_dict(data, module=module)
        except BendingError as error:
            raise BendingError(f"config {os.fspath(path)}: {error}") from None
