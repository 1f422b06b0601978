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

from .bending.config import BendingConfig
from .errors import BendingError
from .loader import LoadedModel
from .paths import SHIPPED_PRESETS, user_dir

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


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

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.config,
            "disabled": list(self.disabled),
            "model": self.model,
            "targets": dict(self.targets),
            "weights": {"version": self.version, "interpolation": self.interpolation},
            "engine": {"gain": self.gain, "mix": self.mix},
        }


def check_name(name: Any) -> str:
    """A preset name: a plain name, never a path."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BendingError(
            f"preset names are letters, digits, '-' and '_' (at most 64), got {name!r}"
        )
    return name


class PresetLibrary:
    """Presets by name: the user's folder (``user``), then the shipped ones (``shipped``)."""

    def __init__(self, user: Path | None = None, shipped: Path = SHIPPED_PRESETS) -> None:
        self.user = user_dir() / "presets" if user is None else Path(user)
        self.shipped = Path(shipped)

    def names(self) -> list[str]:
        return sorted(
            {p.stem for folder in (self.user, self.shipped) for p in folder.glob("*.json")}
        )

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
        self.user.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(preset.to_dict(), indent=2) + "\n", encoding="utf-8")
        return target


def load_preset(source: str | Path, library: PresetLibrary | None = None) -> Preset:
    """Read a preset by name (from ``library``) or, given a ``Path`` or a ``.json`` path, a file."""
    if isinstance(source, Path) or str(source).endswith(".json"):
        return read_preset(Path(source))
    return (library or PresetLibrary()).load(str(source))


def read_preset(path: Path) -> Preset:
    """Read and check one preset file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BendingError(f"no preset file {path}") from None
    except json.JSONDecodeError as error:
        raise BendingError(f"preset {path.name} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise BendingError(f"preset {path.name} is not a JSON object")
    BendingConfig.from_dict(data)  # validates ops and bends before anything is applied
    weights, engine = data.get("weights") or {}, data.get("engine") or {}
    return Preset(
        name=path.stem,
        config={k: data[k] for k in ("format", "version", "ops", "bends") if k in data},
        version=weights.get("version"),
        interpolation=weights.get("interpolation"),
        gain=float(engine.get("gain", 1.0)),
        mix=float(engine.get("mix", 1.0)),
        model=data.get("model"),
        disabled=[str(op_id) for op_id in data.get("disabled", [])],
        targets=_targets(data.get("targets") or {}, path),
    )


def _targets(data: Any, path: Path) -> dict[str, list[int] | None]:
    """A preset's ``targets``: names, each with a list of sizes or null."""
    try:
        return {str(k): None if v is None else [int(n) for n in v] for k, v in data.items()}
    except (AttributeError, TypeError, ValueError):
        raise BendingError(
            f"preset {path.name}: 'targets' maps names to lists of sizes (or null), got {data!r}"
        ) from None


def preset_for(model: LoadedModel, choice: str | None) -> str | None:
    """The preset a command plays, by one rule for all of them: no choice means the model's
    own preset (if it has one), ``"none"`` means no preset."""
    if choice is None:
        return model.preset
    return None if choice == "none" else choice
