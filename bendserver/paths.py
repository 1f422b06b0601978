"""Where bendserver finds models and presets: the user's folders, then those shipped inside the
package (package data, so an installed bendserver has them wherever it runs).

Model names resolve along a search path: each folder given with ``--models-dir``, the folders
of ``$BENDSERVER_MODELS`` (separated like ``PATH``), the user's ``models`` folder, then the
shipped models. The user's folder is ``$BENDSERVER_HOME``, else ``$XDG_DATA_HOME/bendserver``,
else ``~/.local/share/bendserver``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SHIPPED_MODELS = PACKAGE / "models"
SHIPPED_PRESETS = PACKAGE / "presets"


def user_dir() -> Path:
    """The user's bendserver folder (models, presets)."""
    home = os.environ.get("BENDSERVER_HOME")
    if home:
        return Path(home)
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data) / "bendserver"


def model_search_path(extra: Iterable[str | Path] = ()) -> list[Path]:
    """The folders a model name is looked up in, in order."""
    from_env = [p for p in os.environ.get("BENDSERVER_MODELS", "").split(os.pathsep) if p]
    return [*(Path(p) for p in extra), *(Path(p) for p in from_env), user_dir() / "models",
            SHIPPED_MODELS]  # fmt: skip
