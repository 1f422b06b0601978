"""The page's files (``static/``), read once from the package: name -> (bytes, content type)."""

from __future__ import annotations

from importlib import resources

TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def page_files() -> dict[str, tuple[bytes, str]]:
    """Every file of the page, by name (``index.html``, ``app.js``, ``style.css``)."""
    files = {}
    for entry in (resources.files(__package__) / "static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in TYPES:
            files[entry.name] = (entry.read_bytes(), TYPES[suffix])
    return files
