"""Where bendserver finds models and presets: the user's folders, then the shipped ones.

The shipped models live in the project's top-level ``models/`` folder; the build maps it into the
wheel as ``bendserver/models`` (package data), so an installed bendserver has them wherever it
runs, and a source checkout reads the folder itself. The shipped presets are package data in
``bendserver/presets``.

Model names resolve along a search path: each folder given with ``--models-dir``, the folders
of ``$BENDSERVER_MODELS`` (separated like ``PATH``), the user's ``models`` folder, then the
shipped models. The user's folder is ``$BENDSERVER_HOME``, else ``$XDG_DATA_HOME/bendserver``,
else ``~/.local/share/bendserver``. What bendserver measures once and keeps (convolution
forms, latencies) goes to the cache folder: ``$BENDSERVER_HOME/cache``, else
``$XDG_CACHE_HOME/bendserver``, else ``~/.cache/bendserver``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# Installed: mapped into the package; from a checkout (or editable install): the top-level folder.
SHIPPED_MODELS = PACKAGE / "models" if (PACKAGE / "models").is_dir() else PACKAGE.parent / "models"
SHIPPED_PRESETS = PACKAGE / "presets"
#: The shipped rack files (``racks/`` at the top level, mapped into the package like the models).
SHIPPED_RACKS = PACKAGE / "racks" if (PACKAGE / "racks").is_dir() else PACKAGE.parent / "racks"


def user_dir() -> Path:
    """The user's bendserver folder (models, presets)."""
    home = os.environ.get("BENDSERVER_HOME")
    if home:
        return Path(home)
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data) / "bendserver"


def cache_dir() -> Path:
    """The user's cache folder: what bendserver measured and keeps (:mod:`bendserver.cache`)."""
    home = os.environ.get("BENDSERVER_HOME")
    if home:
        return Path(home) / "cache"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "bendserver"


def model_search_path(extra: Iterable[str | Path] = ()) -> list[Path]:
    """The folders a model name is looked up in, in order."""
    from_env = [p for p in os.environ.get("BENDSERVER_MODELS", "").split(os.pathsep) if p]
    return [*(Path(p) for p in extra), *(Path(p) for p in from_env), user_dir() / "models",
            SHIPPED_MODELS]  # fmt: skip
