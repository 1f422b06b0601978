"""Writing files so that nothing is lost: each file is written to a temporary file beside its
destination and renamed into place once complete, so an interrupted write (Ctrl-C, a full disk,
a crash) leaves the old file or nothing, never a partial one.

The temporary file keeps the destination's extension (writers that take the format from it,
soundfile's, still write the right one) and is hidden (``.name.<random>.partial.ext``), so that
a folder of sound files does not list it. A destination that is a symbolic link is refused: a
link planted at an output's place would have the write land wherever it points (and one
planted after the check is replaced by the rename, its target left alone).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from .errors import BendingError


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` are one file (through links, ``..`` and hard links alike); False
    when either does not exist."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def temporary_beside(path: str | os.PathLike) -> Path:
    """Create an empty, hidden temporary file beside ``path`` (making its folder) and return
    its path; a folder that cannot be written is a BendingError, raised before any work."""
    target = _target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        while True:
            temp = target.with_name(f".{target.stem}.{secrets.token_hex(4)}.partial{target.suffix}")
            with contextlib.suppress(FileExistsError):
                os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                return temp
    except OSError as error:
        raise _cannot_write(path, error) from None


def check_writable(path: str | os.PathLike) -> None:
    """Refuse, with a BendingError, a destination whose folder cannot take a new file: checked
    before long work (a render, a recording) rather than found at its end."""
    discard(temporary_beside(path))


def commit(temp: Path, path: str | os.PathLike) -> None:
    """Put the complete ``temp`` in place of ``path``: flushed to the disk, with the mode of
    the file it replaces, renamed in one step. On failure ``temp`` is removed."""
    target = _target(path)
    try:
        fd = os.open(temp, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if target.exists():
            shutil.copymode(target, temp, follow_symlinks=False)
        os.replace(temp, target)  # a link at the target is replaced, never followed
    except OSError as error:
        discard(temp)
        raise _cannot_write(path, error) from None
    with contextlib.suppress(OSError):  # the rename itself on the disk (not on every system)
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def discard(temp: Path) -> None:
    """Remove an unfinished temporary file."""
    with contextlib.suppress(OSError):
        os.unlink(temp)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[Path]:
    """``with writing(path) as temp:`` write ``temp``; it replaces ``path`` when the block
    ends, and is removed if the block raises (a failed write is a BendingError)."""
    temp = temporary_beside(path)
    try:
        yield temp
        commit(temp, path)  # a stop while it flushes leaves no temporary file either
    except OSError as error:
        discard(temp)
        raise _cannot_write(path, error) from None
    except BaseException:
        discard(temp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file."""
    with writing(path) as temp:
        temp.write_text(text, encoding="utf-8")


def _target(path: str | os.PathLike) -> Path:
    """The file a write to ``path`` replaces (absolute); a symbolic link there is refused."""
    target = Path(os.path.abspath(path))
    if target.is_symlink():
        raise BendingError(
            f"{os.fspath(path)} is a symbolic link (to {os.readlink(target)}): bendserver does not "
            "write through links; remove it, or give the path of the file it points to"
        )
    return target


def _cannot_write(path: str | os.PathLike, error: OSError) -> BendingError:
    return BendingError(
        f"cannot write {os.fspath(path)}: {error.strerror or error}: choose a place you can "
        "write to (and room on its disk)"
    )
