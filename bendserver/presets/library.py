"""Bending presets: JSON files (a config plus weight and engine settings) found by name.

A :class:`PresetLibrary` looks in the user's presets folder first, then in the shipped presets,
which are never written: a preset is saved in the user's folder, and replacing one (or shadowing
a shipped one) takes an explicit overwrite. Names never escape these folders; paths are for
trusted callers (the command line).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bending.config import BendingConfig
from ..errors import BendingError
from ..files import write_text
from ..loader import LoadedModel
from ..midi.mappings import Mapping, mappings_from_list
from ..paths import SHIPPED_PRESETS, user_dir
from ..readers import expect, only, optional, read_json

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
#: Names Windows gives its devices: no file may be called so there (a preset could not be copied).
_DEVICES = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])", re.IGNORECASE)


@dataclass
class Preset:
    """What a preset sets: ops and their keys (config JSON), weights, output gain and mix."""

    name: str
    config: dict[str, Any] = field(default_factory=lambda: BendingConfig().to_dict())
    version: str | None = None
    interpolation: dict[str, float] | None = None
    gain: float = 1.0
    mix: float = 1.0
    model: str | None = None  #: the model it was saved from (it fits any that has its targets)
    disabled: list[str] = field(default_factory=list)  #: ids of ops switched off
    #: what its ops bend: weight names with their shapes, layer outputs (None) (see preset_fit)
    targets: dict[str, list[int] | None] = field(default_factory=dict)
    midi: list[Mapping] = field(default_factory=list)  #: MIDI mappings saved with it
    #: An nn~ file's attributes it sets, each with its values (a sound file's path for a
    #: tensor or buffer), in the order they were set.
    attributes: dict[str, list[Any]] = field(default_factory=dict)
    #: A rack's preset: each node's own under its name (then the fields above are unused but
    #: ``gain``, the rack's output gain).
    nodes: dict[str, Preset] = field(default_factory=dict)
    #: The rack's modulators (bendserver.modulation checks them when they load; None: the
    #: preset leaves those playing).
    modulators: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        midi = {"midi": [m.to_dict() for m in self.midi]} if self.midi else {}
        if self.modulators is not None:
            midi["modulators"] = list(self.modulators)
        if self.nodes:
            nodes = {n: p.to_dict() for n, p in self.nodes.items()}
            return {"nodes": nodes, "rack": {"gain": self.gain}, **midi}
        return {
            **self.config,
            "disabled": list(self.disabled),
            "model": self.model,
            "targets": dict(self.targets),
            "weights": {"version": self.version, "interpolation": self.interpolation},
            "engine": {"gain": self.gain, "mix": self.mix},
            **({"attributes": dict(self.attributes)} if self.attributes else {}),
            **midi,
        }


def check_name(name: Any) -> str:
    """A preset name: a plain name, never a path nor a name no file may have on Windows."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BendingError(
            f"preset names are letters, digits, '-' and '_' (at most 64), got {name!r}"
        )
    if _DEVICES.fullmatch(name):
        raise BendingError(f"{name!r} names a device on Windows, where no file may: choose another")
    return name


class PresetLibrary:
    """Presets by name: the user's folder (``user``), then the shipped ones (``shipped``)."""

    def __init__(self, user: Path | None = None, shipped: Path = SHIPPED_PRESETS) -> None:
        self.user = user_dir() / "presets" if user is None else Path(user)
        self.shipped = Path(shipped)

    def names(self) -> list[str]:
        """The presets' names (hidden files, such as an unfinished save's, left out)."""
        folders = (self.user, self.shipped)
        return sorted({p.stem for f in folders for p in f.glob("[!.]*.json")})

    def path(self, name: str) -> Path:
        """The file preset ``name`` is read from (the user's copy first)."""
        check_name(name)
        for folder in (self.user, self.shipped):
            if (folder / f"{name}.json").is_file():
                return folder / f"{name}.json"
        raise BendingError(f"no preset {name!r}; presets: {self.names()}")

    def load(self, name: str) -> Preset:
        return read_preset(self.path(name))

    def save(self, preset: Preset, overwrite: bool = False) -> Path:
        """Write ``preset`` into the user's folder; replacing a preset of that name (the
        user's, or shadowing a shipped one) needs ``overwrite``."""
        target = self.user / f"{check_name(preset.name)}.json"
        if not overwrite:
            if target.exists():
                raise BendingError(
                    f"preset '{preset.name}' exists ({target}): save under another name, or "
                    f"overwrite it explicitly (/preset/save {preset.name} 1, or --force)"
                )
            if (self.shipped / target.name).exists():
                raise BendingError(
                    f"'{preset.name}' is a shipped preset (read-only): save under another name, "
                    f"or overwrite explicitly to keep your own copy in {self.user}"
                )
        write_text(target, json.dumps(preset.to_dict(), indent=2) + "\n")
        return target


def load_preset(source: str | Path, library: PresetLibrary | None = None) -> Preset:
    """Read a preset by name (from ``library``) or, given a ``Path`` or a ``.json`` path, a file."""
    if isinstance(source, Path) or str(source).endswith(".json"):
        return read_preset(Path(source))
    return (library or PresetLibrary()).load(str(source))


#: The keys a preset file may have: a config's, then the preset's own.
PRESET_KEYS = (
    "format",
    "version",
    "ops",
    "bends",
    "disabled",
    "model",
    "weights",
    "engine",
    "targets",
    "midi",
    "nodes",
    "rack",
    "attributes",
    "modulators",
)


def read_preset(path: Path) -> Preset:
    """Read and check one preset file: UTF-8 JSON (:mod:`.readers`) whose every key is known
    and every value of its type; errors name the file and the key."""
    data = read_json(path, "preset")
    try:
        return _preset(path.stem, data)
    except BendingError as error:
        raise BendingError(f"preset {path.name}: {error}") from None


def _preset(name: str, data: Any) -> Preset:
    expect(data, "object", "the file")
    only(data, PRESET_KEYS, "")
    if "nodes" in data:  # a rack's: each node's preset under its name
        only(data, ("nodes", "rack", "midi", "modulators"), "")
        nodes = expect(data["nodes"], "object", "nodes")
        rack = optional(data, "rack", "object", "", {})
        only(rack, ("gain",), "rack")
        return Preset(
            name=name,
            nodes={node: _preset(node, part) for node, part in nodes.items()},
            gain=optional(rack, "gain", "number", "rack.", 1.0),
            midi=mappings_from_list(data.get("midi", []), "midi"),
            modulators=_modulators(data),
        )
    BendingConfig.from_dict(data)  # validates ops and bends before anything is applied
    weights = optional(data, "weights", "object", "", {})
    only(weights, ("version", "interpolation"), "weights")
    engine = optional(data, "engine", "object", "", {})
    only(engine, ("gain", "mix"), "engine")
    interpolation = optional(weights, "interpolation", "object", "weights.")
    if interpolation is not None:
        interpolation = {
            version: expect(weight, "number", f"weights.interpolation.{version}")
            for version, weight in interpolation.items()
        }
    disabled = optional(data, "disabled", "list", "", [])
    return Preset(
        name=name,
        config={k: data[k] for k in ("format", "version", "ops", "bends") if k in data},
        version=optional(weights, "version", "text", "weights."),
        interpolation=interpolation,
        gain=optional(engine, "gain", "number", "engine.", 1.0),
        mix=optional(engine, "mix", "number", "engine.", 1.0),
        model=optional(data, "model", "text", ""),
        disabled=[expect(op_id, "text", f"disabled[{i}]") for i, op_id in enumerate(disabled)],
        targets=_targets(optional(data, "targets", "object", "", {})),
        midi=mappings_from_list(data.get("midi", []), "midi"),
        attributes=_attributes(optional(data, "attributes", "object", "", {})),
        modulators=_modulators(data),
    )


def _modulators(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A preset's ``modulators``: a list of objects (each checked when it loads)."""
    listed = optional(data, "modulators", "list", "")
    return listed and [expect(m, "object", f"modulators[{i}]") for i, m in enumerate(listed)]


def _attributes(data: dict[str, Any]) -> dict[str, list[Any]]:
    """A preset's ``attributes``: names, each with a list of numbers, flags and strings."""
    attributes = {}
    for name, values in data.items():
        key = f"attributes.{name}"
        listed = expect(values, "list", key)
        for index, value in enumerate(listed):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                expect(value, "number", f"{key}[{index}]")  # a finite one
            elif not isinstance(value, (bool, str)):
                raise BendingError(f"{key}[{index}] is a number, true/false or a string")
        attributes[name] = listed
    return attributes


def _targets(data: dict[str, Any]) -> dict[str, list[int] | None]:
    """A preset's ``targets``: names, each with a list of sizes (a shape) or null."""
    targets = {}
    for name, shape in data.items():
        key = f"targets.{name}"
        sizes = None if shape is None else expect(shape, "list", key)
        targets[name] = sizes and [expect(n, "integer", f"{key}[{i}]") for i, n in enumerate(sizes)]
    return targets


def preset_for(model: LoadedModel, choice: str | None) -> str | None:
    """The preset a command plays, by one rule for all of them: no choice means the model's
    own preset (if it has one), ``"none"`` means no preset."""
    if choice is None:
        return model.preset
    return None if choice == "none" else choice
