"""Sound files and signals: reading, resampling, fitting channels and length, output subtypes.

Used by offline rendering, ``engine(audio, sample_rate)`` and the live server's file input and
recorder alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr

from .errors import BendingError
from .limits import MAX_CHANNELS, MAX_SAMPLE_RATE, MAX_SOUND_SECONDS, MIN_SAMPLE_RATE

#: Output formats by extension, with the subtype written when the input's cannot be kept.
FORMATS = {".wav": "FLOAT", ".flac": "PCM_24", ".ogg": "VORBIS"}


def sound_info(path: Path) -> Any:
    """A sound file's rate, channels, frames, duration, format and subtype (``sf.info``), of a
    file within what a host plays (:mod:`bendserver.limits`): a few bytes may declare a rate,
    channels or a length whose reading and resampling would cost without bound."""
    if not path.is_file():
        raise BendingError(f"no input file {path}")
    try:
        info = sf.info(str(path))
    except sf.LibsndfileError as error:
        raise BendingError(f"cannot read {path}: {error}") from None
    check_rate(info.samplerate, str(path))
    if not 1 <= info.channels <= MAX_CHANNELS:
        raise BendingError(
            f"{path} has {info.channels} channels: a sound file played has 1 to {MAX_CHANNELS}"
        )
    if info.frames > MAX_SOUND_SECONDS * info.samplerate:
        raise BendingError(
            f"{path} lasts {info.frames / info.samplerate:.0f} s: a sound file read lasts at most "
            f"{MAX_SOUND_SECONDS} s (split it)"
        )
    return info


def check_rate(rate: int, what: str) -> int:
    """``rate`` (Hz) if a sound file may have it, else a BendingError naming ``what``."""
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise BendingError(
            f"{what} is at {rate} Hz: sound files are read and written at {MIN_SAMPLE_RATE} to "
            f"{MAX_SAMPLE_RATE} Hz"
        )
    return rate


def read_sound(path: Path) -> tuple[np.ndarray, Any]:
    """A sound file as float32 ``[channels, frames]`` at its own rate, with its info."""
    info = sound_info(path)
    try:
        audio, _ = sf.read(str(path), dtype="float32", always_2d=True)
    except sf.LibsndfileError as error:
        raise BendingError(f"cannot read {path}: {error}") from None
    return np.ascontiguousarray(audio.T), info


def read_audio(path: Path, sample_rate: int, channels: int, resample: bool = True) -> np.ndarray:
    """Read a sound file as float32 [channels, frames] at ``sample_rate`` (soxr resampling, or a
    clear refusal), its channels fitted as :func:`fit_channels` does."""
    audio, info = read_sound(path)
    if info.samplerate != sample_rate and not resample:
        raise BendingError(
            f"{path} is at {info.samplerate} Hz and the model at {sample_rate} Hz: allow "
            "resampling or convert the file first"
        )
    audio = resample_audio(audio, info.samplerate, sample_rate)
    return fit_channels(audio, channels, str(path))


def resample_audio(audio: np.ndarray, rate: int, to: int) -> np.ndarray:
    """``[channels, frames]`` float32 at ``rate`` resampled to ``to`` with soxr (the same array
    when the rates are equal)."""
    if rate == to:
        return audio
    out = soxr.resample(np.ascontiguousarray(audio.T), rate, to).astype(np.float32)
    return np.ascontiguousarray(out.T)


def fit_length(audio: np.ndarray, frames: int) -> np.ndarray:
    """``audio`` [channels, n] cut or padded with silence to ``frames``."""
    if audio.shape[-1] >= frames:
        return audio[:, :frames]
    return np.pad(audio, ((0, 0), (0, frames - audio.shape[-1])))


def fit_channels(audio: np.ndarray, channels: int, what: str = "the input") -> np.ndarray:
    """``audio`` [c, n] as ``channels`` channels: kept as it is, mixed down to one, or a mono
    signal copied to each; other counts are refused."""
    have = audio.shape[0]
    if have == channels:
        return audio
    if channels == 1:
        return np.ascontiguousarray(audio.mean(axis=0, keepdims=True))
    if have == 1:
        return np.ascontiguousarray(np.repeat(audio, channels, axis=0))
    raise BendingError(
        f"{what} has {have} channels and {channels} are played: mix it down (--mono) or play "
        f"{have} channels (one stream each)"
    )


def streams_for(channels: int, model_channels: int) -> int:
    """How many streams of a model taking ``model_channels`` play ``channels``: one per channel
    for a mono model, the channels as they are for a model that takes that many."""
    if channels % model_channels:
        return 1  # fit_channels mixes down or copies
    return max(1, channels // model_channels)


def output_subtype(path: Path, source: Any = None) -> str:
    """The subtype to write ``path`` with: the source's when it is written in the source's own
    format (a 24-bit WAV stays 24-bit), else the format's default (:data:`FORMATS`: another
    format gets float WAV or 24-bit FLAC, never fewer bits than processing needs)."""
    default = FORMATS.get(path.suffix.lower())
    if default is None:
        raise BendingError(f"output format from the extension: one of {sorted(FORMATS)}")
    kind = path.suffix.lower().lstrip(".").upper()
    if source is not None and source.format == kind and sf.check_format(kind, source.subtype):
        return source.subtype
    return default
