"""What bendserver measures once and keeps between runs (the convolution forms a machine plays, a
TorchScript file's latency and the probe's verdict on it): small JSON files in the user's cache
folder (:func:`.paths.cache_dir`).

Each file is a table of entries by key under a header saying what they hold (the machine and
torch's version, for instance), named after both, so that another torch or machine sharing the
folder keeps a file of its own; one that cannot be read starts afresh (with a warning). An
entry is stored under a lock, the file read again and replaced
whole through a temporary file: processes that measure the same key at once keep the first
entry stored, so they agree on one answer. Where the folder cannot be written, the entries
last as long as the process (with a warning).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import BendingError
from .files import write_text
from .paths import cache_dir
from .readers import read_json

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, the last write wins
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("bendserver.cache")

FORMAT = "bendserver.cache"


class CacheFile:
    """The entries of the cache file of ``name`` and ``header`` (what they hold: the file is
    ``<name>-<digest of header>.json`` in the cache folder of the moment). Read once per
    process, stored one at a time."""

    def __init__(self, name: str, header: dict[str, Any]) -> None:
        self.header = json.loads(json.dumps(header))  # as the file reads it back
        digest = hashlib.sha256(json.dumps(self.header, sort_keys=True).encode()).hexdigest()
        self.name = f"{name}-{digest[:16]}.json"
        self._entries: dict[str, Any] = {}
        self._read_from: Path | None = None  # where ``_entries`` come from
        self._warned: set[str] = set()

    @property
    def path(self) -> Path:
        return cache_dir() / self.name

    def get(self, key: str) -> Any | None:
        """The entry stored under ``key``, or None."""
        if self._read_from != self.path:
            self._entries, self._read_from = self._read(), self.path
        return self._entries.get(key)

    def settle(self, key: str, value: Any, keep: Callable[[Any], bool] = lambda _: True) -> Any:
        """Store ``value`` under ``key``, unless the file holds an entry there that ``keep``
        accepts (another process stored it meanwhile); returns the entry kept."""
        path = self.path
        with self._locked(path):
            own = self._entries if self._read_from == path else {}
            entries = {**own, **self._read()}  # own: those a failed write kept here
            stored = entries.get(key)
            if stored is not None and keep(stored):
                value = stored
            else:
                entries[key] = value
                self._write(entries)
        self._entries, self._read_from = entries, path
        return value

    def _read(self) -> dict[str, Any]:
        path = self.path
        if not path.is_file():
            return {}
        try:
            data = read_json(path, "cache file")
            if data.get("format") != FORMAT or data.get("header") != self.header:
                return {}  # made for another machine or version: started afresh
            entries = data["entries"]
            if not isinstance(entries, dict):
                raise TypeError
            return entries
        except (BendingError, AttributeError, KeyError, TypeError) as error:
            reason = str(error) if isinstance(error, BendingError) else "not a cache file"
            self._warn("read", f"cannot read {path} ({reason}): measuring again")
            return {}

    def _write(self, entries: dict[str, Any]) -> None:
        data = {"format": FORMAT, "header": self.header, "entries": entries}
        try:
            write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        except BendingError as error:
            self._warn("write", f"{error}; what was measured is kept until this process ends")

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """Held while the file is read and replaced (by one process at a time)."""
        if fcntl is None:
            yield
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            yield  # the write says why it cannot
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("%s", message)


_DIGESTS = CacheFile("digests", {"digest": "sha256"})


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, computed once for each version of the file: kept by its
    path, inode, size and modification and change times (a rewrite changes the change time,
    which no one sets by hand)."""
    stat = path.stat()
    version = f"{path.resolve()} {stat.st_ino} {stat.st_size} {stat.st_mtime_ns} {stat.st_ctime_ns}"
    digest = _DIGESTS.get(version)
    if not isinstance(digest, str):
        hashed = hashlib.sha256()
        with open(path, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                hashed.update(chunk)
        digest = _DIGESTS.settle(version, hashed.hexdigest())
    return digest
