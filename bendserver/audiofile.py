"""Sound files: reading them at a model's rate and channels, and the formats written.

Used by offline rendering and by the live server's file input and recorder alike.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from .errors import BendingError

#: Output formats by extension, with the subtype written.
FORMATS = {".wav": "FLOAT", ".flac": "PCM_24", ".ogg": "VORBIS"}


def read_audio(path: Path, sample_rate: int, channels: int, resample: bool = True) -> np.ndarray:
    """Read a sound file as float32 [channels, frames] at ``sample_rate`` (soxr resampling, or a
    clear refusal); more channels than the model takes are mixed down."""
    if not path.is_file():
        raise BendingError(f"no input file {path}")
    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except sf.LibsndfileError as error:
        raise BendingError(f"cannot read {path}: {error}") from None
    if rate != sample_rate:
        if not resample:
            raise BendingError(
                f"{path} is at {rate} Hz and the model at {sample_rate} Hz: allow resampling "
                "or convert the file first"
            )
        audio = soxr.resample(audio, rate, sample_rate).astype(np.float32)
    audio = audio.T
    if audio.shape[0] != channels:
        if channels != 1:
            raise BendingError(f"{path} has {audio.shape[0]} channels, the model takes {channels}")
        audio = audio.mean(axis=0, keepdims=True)
    return np.ascontiguousarray(audio)
