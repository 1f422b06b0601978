"""Whether a preset fits a model: by what it bends, never by the model's name.

A preset fits any model that has the weights and layer outputs its keys match, the versions it
names, and, where the preset recorded them, the same weight shapes: a renamed copy of a file,
or another file of the same architecture. What does not fit is named, all of it at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..bending.config import BendingConfig
from ..bending.module import BendedModule
from ..bending.weights import DEFAULT_VERSION
from ..errors import BendingError
from ..slices import breathe
from .library import Preset, PresetLibrary


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
    each with ``check_preset``) would take: one model's on a lone node, a rack's whose every
    part fits the node it names. The others would be refused, so a menu leaves them out."""
    names = []
    for name in library.names():
        try:
            preset = library.load(name)
            if preset.nodes:
                if not set(preset.nodes) <= set(nodes):
                    continue
                for node, part in preset.nodes.items():
                    nodes[node].check_preset(part)
            elif len(nodes) == 1:
                next(iter(nodes.values())).check_preset(preset)
            else:
                continue
        except BendingError:
            continue
        names.append(name)
    return names


def _matches(bended: BendedModule, key: str) -> bool:
    breathe()
    try:
        return bool(bended.resolve(key))
    except BendingError:
        return False


def _versions(bended: BendedModule) -> set[str]:
    return {DEFAULT_VERSION, *bended.weight_bank.versions}
