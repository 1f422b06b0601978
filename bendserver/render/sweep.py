"""Parameter sweeps: one input rendered at every point of a grid of settings, and measured.

``--vary mask.prob=0:1:5`` varies op ``mask``'s parameter ``prob`` over 5 values from 0 to 1
(``0,0.1,0.3`` lists them); ``--vary /engine/gain=0.5,1`` varies any address that takes one
number. Each cell is the input rendered with its settings applied at 0 s (before any score's
events), through the batch path (:mod:`.batch`), then measured against the dry input.
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.signal import stft

from ..audiofile import read_sound, resample_audio
from ..control import route
from ..errors import BendingError
from ..readers import decimal
from .offline import ScoreEvent


@dataclass(frozen=True)
class Axis:
    """One varied setting: its name as given, its address, its values."""

    name: str
    address: str
    values: tuple[float, ...]

    def event(self, value: float) -> ScoreEvent:
        return ScoreEvent(0.0, self.address, (value,), f"--vary {self.name}")


def parse_vary(text: str) -> Axis:
    """``op.param=START:STOP:COUNT``, ``op.param=A,B,C`` or ``/address=A,B,C``."""
    name, equals, values = text.partition("=")
    name = name.strip()
    op, dot, param = name.partition(".")
    address = name if name.startswith("/") else f"/bend/{op}/{param}"
    if not equals or not (name.startswith("/") or (dot and op and param)):
        raise BendingError(
            f"--vary {text!r}: write op.param=START:STOP:COUNT or op.param=A,B,C "
            "(e.g. mask.prob=0:1:5)"
        )
    try:
        route(address).entry.schema.parse(address, (0.0,))
    except BendingError as error:
        raise BendingError(f"--vary {name}: {error}") from None
    if ":" in values:
        parts = [decimal(v) for v in values.split(":")]
        count = parts[2] if len(parts) == 3 else None
        if None in parts or count is None or count != int(count) or not 1 <= count <= 1000:
            raise BendingError(
                f"--vary {name}: {values!r} is not START:STOP:COUNT (a count of 1 to 1000)"
            )
        numbers = [float(v) for v in np.linspace(parts[0], parts[1], int(count))]
    else:
        numbers = [decimal(v) for v in values.split(",")]
        if not numbers or None in numbers:
            raise BendingError(f"--vary {name}: {values!r} is not numbers separated by commas")
    return Axis(name, address, tuple(numbers))


def cells(axes: list[Axis]) -> list[tuple[tuple[str, float], ...]]:
    """Every combination of the axes' values, the first axis slowest, as (name, value) pairs."""
    if len({axis.name for axis in axes}) != len(axes):
        raise BendingError("--vary names a setting twice: give each once, with all its values")
    return [
        tuple(zip([a.name for a in axes], values, strict=True))
        for values in itertools.product(*(a.values for a in axes))
    ]


def cell_events(axes: list[Axis], cell: tuple[tuple[str, float], ...]) -> list[ScoreEvent]:
    """The events that set a cell, at 0 s."""
    return [axis.event(value) for axis, (_, value) in zip(axes, cell, strict=True)]


def cell_stem(stem: str, cell: tuple[tuple[str, float], ...]) -> str:
    """The file name of a cell: ``in_mask.prob_0.25_noise.std_0.1``."""
    return "_".join([stem, *(f"{name.strip('/').replace('/', '.')}_{v:g}" for name, v in cell)])


#: Features measured for each cell (the CSV's columns after the settings).
FEATURES = ("rms", "peak", "centroid_hz", "distance_db")


def spectrogram_db(audio: np.ndarray, rate: int) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude in dB ``[frequencies, frames]`` of a mono signal (2048-point Hann STFT, hop
    512), and the frequencies."""
    frequencies, _, spectrum = stft(audio, rate, nperseg=2048, noverlap=1536, boundary=None)
    return 20 * np.log10(np.abs(spectrum) + 1e-9), frequencies


def features(path: Path, dry: Path) -> dict[str, float]:
    """RMS and peak of a cell's file, its spectral centroid (Hz, the mean frequency weighted
    by magnitude over the whole file), and its distance to the dry input: the RMS difference
    of their log spectrograms in dB (at the output's rate, channels mixed down)."""
    wet, info = read_sound(path)
    source, source_info = read_sound(dry)
    mono = wet.mean(0)
    plain = resample_audio(source, source_info.samplerate, info.samplerate).mean(0)
    frames = min(len(mono), len(plain))
    wet_db, frequencies = spectrogram_db(mono[:frames], info.samplerate)
    dry_db, _ = spectrogram_db(plain[:frames], info.samplerate)
    magnitude = 10 ** (wet_db / 20)
    total = magnitude.sum()
    return {
        "rms": float(np.sqrt(np.mean(np.square(wet, dtype=np.float64)))),
        "peak": float(np.abs(wet).max()),
        "centroid_hz": float((frequencies[:, None] * magnitude).sum() / total) if total else 0.0,
        "distance_db": float(np.sqrt(np.mean(np.square(wet_db - dry_db)))),
    }


def table(axes: list[Axis], rows: list[tuple[str, tuple, dict[str, float]]]) -> str:
    """The CSV: file, each varied setting, each feature."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["file", *(a.name for a in axes), *FEATURES])
    for name, cell, measured in rows:
        settings = [f"{value:g}" for _, value in cell]
        writer.writerow([name, *settings, *(f"{measured[f]:.6g}" for f in FEATURES)])
    return out.getvalue()
