"""Bending presets: JSON files under ``patches/presets`` (a config plus weight and engine
settings). Names never escape that folder; paths are for trusted callers (the command line)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bending.config import BendingConfig
from .errors import BendingError
from .loader import PRESETS_DIR

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
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.config,
            "model": self.model,
            "weights": {"version": self.version, "interpolation": self.interpolation},
            "engine": {"gain": self.gain, "mix": self.mix},
        }


def preset_path(name: str, folder: Path = PRESETS_DIR) -> Path:
    """The file of preset ``name``: a plain name, never a path."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BendingError(
            f"preset names are letters, digits, '-' and '_' (at most 64), got {name!r}"
        )
    return folder / f"{name}.json"


def load_preset(source: str | Path, folder: Path = PRESETS_DIR) -> Preset:
    """Read a preset by name (from ``folder``) or, given a ``Path`` or a ``.json`` path, a file."""
    if isinstance(source, Path) or str(source).endswith(".json"):
        path = Path(source)
    else:
        path = preset_path(str(source), folder)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = sorted(p.stem for p in folder.glob("*.json"))
        raise BendingError(f"no preset {str(source)!r}; presets: {known}") from None
    except json.JSONDecodeError as error:
        raise BendingError(f"preset {path.name} is not valid JSON: {error}") from None
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
    )


def save_preset(preset: Preset, folder: Path = PRESETS_DIR) -> Path:
    """Write ``preset`` under its name in ``folder``."""
    path = preset_path(preset.name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(preset.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path
