"""Inputs for output-only streams: silence, or a sound file looped from memory.

The audio callback asks a source for ``frames`` frames; a source never reads a file or allocates
in that call (the file is read before the stream starts, with
:func:`bendserver.audiofile.read_audio`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ..audiofile import read_audio
from ..errors import BendingError


class Source(Protocol):
    """Fills the callback's input: ``read(frames)`` returns ``[channels, frames]`` float32."""

    name: str

    def read(self, frames: int) -> np.ndarray: ...


class Silence:
    """Zeros: the model runs on silence (an effect then outputs its own noise or nothing)."""

    name = "silence"

    def __init__(self, channels: int, max_frames: int) -> None:
        self._zeros = np.zeros((channels, max_frames), dtype=np.float32)

    def read(self, frames: int) -> np.ndarray:
        return self._zeros[:, :frames]


class Loop:
    """A sound already in memory, ``[channels, frames]``, played in a loop."""

    def __init__(self, audio: np.ndarray, max_frames: int, name: str = "loop") -> None:
        if audio.ndim != 2 or audio.shape[1] == 0:
            raise BendingError(f"{name}: a loop needs [channels, frames] audio, got {audio.shape}")
        self.name = name
        self.audio = np.ascontiguousarray(audio, dtype=np.float32)
        self.position = 0
        self._out = np.zeros((audio.shape[0], max_frames), dtype=np.float32)

    def read(self, frames: int) -> np.ndarray:
        out = self._out[:, :frames]
        filled = 0
        length = self.audio.shape[1]
        while filled < frames:
            take = min(frames - filled, length - self.position)
            out[:, filled : filled + take] = self.audio[:, self.position : self.position + take]
            filled += take
            self.position = (self.position + take) % length
        return out


def file_loop(path: Path, sample_rate: int, channels: int, max_frames: int) -> Loop:
    """Read ``path`` now (resampled and mixed down as rendering does) and loop it."""
    audio = read_audio(Path(path), sample_rate, channels)
    return Loop(audio, max_frames, name=f"{Path(path).name} (looped)")
