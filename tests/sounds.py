"""Sound files the tests render: seeded noise, written as 32-bit float WAV."""

from pathlib import Path

import numpy as np
import soundfile as sf


def write_noise(
    path: Path, seconds: float = 0.5, rate: int = 48000, channels: int = 1, seed: int = 3
) -> np.ndarray:
    """Write ``seconds`` of seeded noise (0.3 standard deviation) to ``path``; the audio as
    ``[channels, frames]``."""
    rng = np.random.default_rng(seed)
    audio = (0.3 * rng.standard_normal((int(seconds * rate), channels))).astype(np.float32)
    sf.write(str(path), audio, rate, subtype="FLOAT")
    return audio.T
