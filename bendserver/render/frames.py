"""Frames files: what a method at a control rate (features, a RAVE ``encode``) gives or takes.

A method whose output is at a lower rate than audio gives one frame (a value per channel) per
``out_ratio`` samples. ``render`` writes its frames as

- CSV (``.csv``): a header ``time,c0,c1,...``, then one row per frame: the time the frame's
  window starts (seconds) and its values, written as the shortest decimals that read back as
  the same float32 values. Any spreadsheet, pandas, Max's ``[coll]`` read it.
- NPY (``.npy``): a float32 array ``[frames, channels]``, exact and compact (RAVE's 128-channel
  latents are 512 bytes a frame), for numpy and Python tools; frame ``i`` starts at
  ``i * ratio / sample_rate`` seconds, as the CSV says.

Not a low-rate sound file: a sound file's rate is a whole number of hertz, and a frame rate is
often not (RAVE v2's 44 100 / 2 048 = 21.533 Hz), and many tools refuse rates under 1 kHz.

A method whose input is at a control rate (``decode``) reads the same files (a CSV's ``time``
column, if any, is skipped: rows are frames in order). Nothing is unpickled.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..audiofile import sound_info
from ..errors import BendingError
from ..files import writing
from ..readers import decimal, read_text

#: The suffixes of frames files.
SUFFIXES = (".csv", ".npy")
#: The largest frames file read, in bytes.
MAX_BYTES = 512 * 2**20


def is_frames_file(path: str | Path) -> bool:
    return Path(path).suffix.lower() in SUFFIXES


def write_frames(path: Path, frames: np.ndarray, seconds_per_frame: float) -> None:
    """Write ``frames`` ``[channels, count]`` to ``path`` (CSV or NPY, by its suffix), beside
    it first and renamed into place when complete."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise BendingError(f"frames are written as {' or '.join(SUFFIXES)}, not {path}")
    rows = np.ascontiguousarray(frames.T, dtype=np.float32)
    with writing(path) as temp:
        if suffix == ".npy":
            with open(temp, "wb") as file:
                np.save(file, rows, allow_pickle=False)
            return
        with open(temp, "w", encoding="utf-8", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["time", *(f"c{k}" for k in range(rows.shape[1]))])
            for index, row in enumerate(rows):
                time = round(index * seconds_per_frame, 9)
                writer.writerow([repr(time), *(str(value) for value in row)])


def read_frames(path: Path) -> np.ndarray:
    """A frames file as float32 ``[channels, count]``: a CSV (UTF-8, a header row of names
    optional, a ``time`` first column skipped) or an NPY of a 2-D float array ``[count,
    channels]``; errors name the file and the row."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise BendingError(f"frames are read from {' or '.join(SUFFIXES)} files, not {path}")
    if not path.is_file():
        raise BendingError(f"no frames file {path}")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise BendingError(f"{path} is {size} bytes; a frames file is at most {MAX_BYTES}")
    rows = _npy(path) if suffix == ".npy" else _csv(path)
    if rows.ndim != 2 or rows.shape[0] == 0 or rows.shape[1] == 0:
        raise BendingError(f"{path} holds no frames (an array [frames, channels] is read)")
    if not np.isfinite(rows).all():
        raise BendingError(f"{path} holds values that are not finite numbers")
    return np.ascontiguousarray(rows.T, dtype=np.float32)


@dataclass(frozen=True)
class FramesInfo:
    """What a batch of renders needs of a frames file given as input, as of a sound file."""

    channels: int
    frames: int
    duration: float = 0.0  #: unknown before a model says its frame rate: none counted


def source_info(path: Path) -> Any:
    """A render's input's channels and duration: a sound file's (``sound_info``), or a frames
    file's (:class:`FramesInfo`)."""
    if not is_frames_file(path):
        return sound_info(Path(path))
    frames = read_frames(Path(path))
    return FramesInfo(frames.shape[0], frames.shape[1])


def _npy(path: Path) -> np.ndarray:
    try:
        rows = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise BendingError(f"{path} is not an NPY array of numbers: {error}") from None
    if not np.issubdtype(rows.dtype, np.floating) and not np.issubdtype(rows.dtype, np.integer):
        raise BendingError(f"{path} holds {rows.dtype} values: frames are numbers")
    return rows.astype(np.float32)


def _csv(path: Path) -> np.ndarray:
    lines = list(csv.reader(io.StringIO(read_text(path, "frames file"))))
    lines = [line for line in lines if any(cell.strip() for cell in line)]
    if not lines:
        return np.zeros((0, 0), np.float32)
    header = [cell.strip().lower() for cell in lines[0]]
    named = any(decimal(cell) is None for cell in header)
    skip = 1 if named and header[0] == "time" else 0
    width = len(lines[0]) - skip
    rows = []
    for number, line in enumerate(lines[1:] if named else lines, 2 if named else 1):
        values = [decimal(cell.strip()) for cell in line[skip:]]
        if len(values) != width or None in values:
            raise BendingError(
                f"{path}:{number}: expected {width} numbers (one per channel), got {line!r}"
            )
        rows.append(values)
    return np.array(rows, dtype=np.float32).reshape(len(rows), width)
