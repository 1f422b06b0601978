"""Whether a preset fits a model: by what it bends, never by the model's name.

A preset fits any model that has the weights and layer outputs its keys match, the versions it
names, and, where the preset recorded them, the same weight shapes: a renamed copy of a file,
or another file of the same architecture. What does not fit is named, all of it at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from ..bending.config import BendingConfig
from ..bending.module import BendedModule
from ..bending.weights import DEFAULT_VERSION
from ..errors import BendingError
from ..slices import breathe
from .library import Preset, PresetLibrary, read_preset


def bent_targets(bended: BendedModule, keys: Iterable[str]) -> dict[str, list[int] | None]:
    """What ``keys`` bend in ``bended``: each weight with its shape, each layer output (its
    shape follows the block and the streams: None)."""
    slots = bended.weight_bank.slots
    return {
        name: list(slots[name].shape) if name in slots else None
        for key in keys
        for name in bended.resolve(key)
    }


def check_fit(preset: Preset, config: BendingConfig, bended: BendedModule, model: str) -> None:
    """Refuse ``preset`` (its ops built as ``config``) on ``bended`` (model ``model``) unless
    it has all the preset bends, saying what is missing or of another shape. Each key is
    resolved once, however many ops share it."""
    keys = dict.fromkeys(key for _, keys in config.entries for key in keys)
    unmatched = [key for key in keys if not _matches(bended, key)]
    slots = bended.weight_bank.slots
    known = {*slots, *bended.fold_layers}
    for method in bended.traced_methods:
        prefix = "" if method == "forward" else f"{method}:"
        known.update(prefix + name for name in bended.activation_names(method))
    missing = [name for name in preset.targets if name not in known]
    shapes = [
        f"{name} {tuple(slots[name].shape)} here, {tuple(shape)} in the preset"
        for name, shape in preset.targets.items()
        if name in slots and shape is not None and list(slots[name].shape) != list(shape)
    ]
    named = [preset.version] if preset.version else []
    versions = [v for v in [*named, *(preset.interpolation or {})] if v not in _versions(bended)]
    problems = [
        *([f"no weight or layer output matches {unmatched}"] if unmatched else []),
        *([f"it bends {missing}, which this model does not have"] if missing else []),
        *([f"other shapes: {'; '.join(shapes)}"] if shapes else []),
        *(
            [f"no version {versions} (versions: {bended.weight_bank.named_versions})"]
            if versions
            else []
        ),
    ]
    if problems:
        raise BendingError(
            f"preset '{preset.name}' does not fit model '{model}': {'; '.join(problems)}. A "
            "preset fits any model with the weights and layers it bends (names and shapes), "
            "whatever the model or its file is called"
        )


def fitting(library: PresetLibrary, nodes: Mapping[str, Any]) -> list[str]:
    """The names of ``library``'s presets that ``nodes`` (what a preset loads into, by name,
    each with ``check_preset`` and its ``bended`` module) would take: one model's on a lone
    node, a rack's whose every part fits the node it names. The others would be refused, so a
    menu leaves them out. Each file is read, and checked against each model, once until it is
    written again (:data:`_SEEN`): a page rebuilt at every change costs no reading."""
    with _SEEN.lock:
        names = [name for name in library.names() if _SEEN.fits(library, name, nodes)]
        _SEEN.forget(library)
        return names


#: A preset file's stamp: its modification time and size (a file written again has others).
Stamp = tuple[int, int]


class _Seen:
    """What :func:`fitting` has read: each preset file by path (with its stamp; None: not a
    preset), and each model's verdict on each, held by the model's bended module (forgotten
    with it) and kept while the file's stamp and the model's versions stay the same."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  #: the OSCQuery service and the control worker both ask
        self._read: dict[Path, tuple[Stamp, Preset | None]] = {}
        self._verdicts: WeakKeyDictionary[BendedModule, dict[tuple[Path, str], Any]] = (
            WeakKeyDictionary()
        )

    def fits(self, library: PresetLibrary, name: str, nodes: Mapping[str, Any]) -> bool:
        try:
            path = library.path(name)
            stamp, preset = self._preset(path)
        except (BendingError, OSError):
            return False
        if preset is None:
            return False
        if preset.nodes:  # a rack's: each part into the node it names
            if not set(preset.nodes) <= set(nodes):
                return False
            parts = [(nodes[node], node, part) for node, part in preset.nodes.items()]
        elif len(nodes) == 1:
            parts = [(next(iter(nodes.values())), "", preset)]
        else:
            return False
        return all(self._verdict(node, path, name, stamp, part) for node, name, part in parts)

    def forget(self, library: PresetLibrary) -> None:
        """Drop what was read from ``library``'s folders of files no longer there."""
        folders = (library.user, library.shipped)
        gone = [p for p in self._read if p.parent in folders and not p.is_file()]
        for path in gone:
            del self._read[path]
        for verdicts in self._verdicts.values():
            for key in [key for key in verdicts if key[0] in gone]:
                del verdicts[key]

    def _preset(self, path: Path) -> tuple[Stamp, Preset | None]:
        status = path.stat()
        stamp = (status.st_mtime_ns, status.st_size)
        seen = self._read.get(path)
        if seen is None or seen[0] != stamp:
            try:
                preset: Preset | None = read_preset(path)
            except BendingError:
                preset = None
            seen = self._read[path] = (stamp, preset)
        return seen

    def _verdict(self, node: Any, path: Path, part_name: str, stamp: Stamp, part: Preset) -> bool:
        """Whether ``node`` takes ``part`` (the preset at ``path``, or its part for the node
        ``part_name`` of a rack's), checked once for the file's ``stamp`` and the model's
        versions."""
        bank = node.bended.weight_bank
        mark = (stamp, tuple(bank.versions), bank.default_name)
        verdicts = self._verdicts.setdefault(node.bended, {})
        seen = verdicts.get((path, part_name))
        if seen is None or seen[0] != mark:
            try:
                node.check_preset(part)
                fits = True
            except BendingError:
                fits = False
            seen = verdicts[(path, part_name)] = (mark, fits)
        return seen[1]


_SEEN = _Seen()


def _matches(bended: BendedModule, key: str) -> bool:
    breathe()
    try:
        return bool(bended.resolve(key))
    except BendingError:
        return False


def _versions(bended: BendedModule) -> set[str]:
    return {DEFAULT_VERSION, *bended.weight_bank.versions}
