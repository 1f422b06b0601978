"""Strict readers of the files users give: scores, presets, manifests.

They accept only what the docs describe: UTF-8 text of bounded size, finite numbers written as
decimals (``0.5``, ``-2``, ``1e-3``; not ``nan``, ``inf`` nor ``0_5``, which Python's ``float``
would take), JSON without duplicate keys and of bounded nesting, and values of the type each key
takes. Whatever else comes in is a BendingError that names the file and the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import BendingError
from .limits import MAX_DEPTH, MAX_FILE_BYTES
from .slices import breathe

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

#: The kinds :func:`expect` checks, with the words its errors use.
KINDS: dict[str, str] = {
    "number": "a finite number",
    "integer": "a whole number",
    "text": "a string",
    "flag": "true or false",
    "object": "an object ({...})",
    "list": "a list ([...])",
}


def decimal(word: str) -> float | None:
    """``word`` as a float if it is a finite decimal number, else None."""
    if not _DECIMAL.fullmatch(word):
        return None
    value = float(word)
    return value if math.isfinite(value) else None


def read_text(path: Path, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The text of ``path`` (a ``what``: score, preset...), UTF-8 and at most ``limit`` bytes
    (:mod:`bendserver.limits`)."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise BendingError(f"{what} {path} is {size} bytes; at most {limit} are read: split it")
        data = path.read_bytes()
    except FileNotFoundError:
        raise BendingError(f"no {what} file {path}") from None
    except OSError as error:
        raise BendingError(f"cannot read {what} {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise BendingError(
            f"{what} {path} is not UTF-8 text (line {line}, byte {error.start}): save it as UTF-8"
        ) from None


def parse_json(text: str, what: str) -> Any:
    """JSON ``text`` (from ``what``): finite numbers only, no key twice, at most
    :data:`MAX_DEPTH` levels deep."""
    try:
        data = json.loads(
            text,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as error:
        raise BendingError(f"{what} is not valid JSON: {error}") from None
    except ValueError as error:  # a number json cannot convert (thousands of digits)
        raise BendingError(f"{what}: {error}") from None
    except RecursionError:
        raise BendingError(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except BendingError as error:
        raise BendingError(f"{what}: {error}") from None
    if _depth(data) > MAX_DEPTH:
        raise BendingError(f"{what} is nested more than {MAX_DEPTH} levels deep")
    return data


def read_json(path: Path, what: str) -> Any:
    """The JSON file ``path``, read as :func:`read_text` and :func:`parse_json` do."""
    return parse_json(read_text(path, what), f"{what} {path.name}")


def read_toml(path: Path, what: str, limit: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """The TOML file ``path``, read as :func:`read_text` does (at most ``limit`` bytes); floats
    must be finite decimals, tables and arrays at most :data:`MAX_DEPTH` levels deep."""
    text = read_text(path, what, limit)
    try:
        data = tomllib.loads(text, parse_float=_finite_float)
    except tomllib.TOMLDecodeError as error:
        raise BendingError(f"{what} {path} is not valid TOML: {error}") from None
    except RecursionError:
        raise BendingError(f"{what} {path} is nested more than {MAX_DEPTH} levels deep") from None
    except BendingError as error:
        raise BendingError(f"{what} {path}: {error}") from None
    if _depth(data) > MAX_DEPTH:
        raise BendingError(f"{what} {path} is nested more than {MAX_DEPTH} levels deep")
    return data


def expect(value: Any, kind: str, key: str) -> Any:
    """``value`` if it is of ``kind`` (one of :data:`KINDS`), else a BendingError naming
    ``key``; a number comes back as a float, a whole number as an int."""
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            raise BendingError(f"{key} is {KINDS[kind]}, got {value!r}")
        if kind == "number":
            return float(value)
        if not float(value).is_integer():
            raise BendingError(f"{key} is {KINDS[kind]}, got {value!r}")
        return int(value)
    types = {"text": str, "flag": bool, "object": dict, "list": list}[kind]
    if not isinstance(value, types):
        raise BendingError(f"{key} is {KINDS[kind]}, got {value!r}")
    return value


def optional(data: Mapping[str, Any], key: str, kind: str, where: str, default: Any = None) -> Any:
    """``data[key]`` checked by :func:`expect` (named ``where + key``), or ``default`` where it
    is missing or null."""
    value = data.get(key)
    return default if value is None else expect(value, kind, f"{where}{key}")


def only(data: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Refuse keys of ``data`` (the object at ``where``, "" for the top level) that are not in
    ``keys``: a typo would otherwise be ignored without a word."""
    unknown = sorted(set(data) - set(keys))
    if unknown:
        within = f"{where}: " if where else ""
        raise BendingError(f"{within}unknown key(s) {unknown}; the keys are {list(keys)}")


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an int beyond any float
        return False


def _no_constant(word: str) -> Any:
    raise BendingError(f"{word} is not a finite number: write a decimal number")


def _finite_float(word: str) -> float:
    value = decimal(word)
    if value is None:
        raise BendingError(f"{word} is not a finite decimal number")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    breathe()  # a large file is read on the control thread: it answers queries meanwhile
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise BendingError(f"key {key!r} appears twice in one object")
        data[key] = value
    return data


def _depth(data: Any) -> int:
    """How deeply lists and objects nest in ``data`` (without recursion)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        breathe()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in value)
    return deepest
