"""What a render writes and what it saw in its output: the writer (the model's latency cut, the
rate converted, the length completed with silence; no PEAK chunk, so that the same render gives
the same bytes) and the watch of NaN/Inf samples and of those the fuse's limiter bent.
"""

from __future__ import annotations

import numpy as np
import soundfile as sf
import soxr

from ..engine import StreamEngine

#: libsndfile's command that turns the PEAK chunk of float WAV and AIFF files on or off.
_SFC_SET_ADD_PEAK_CHUNK = 0x1050


def without_peak_time(file: sf.SoundFile) -> None:
    """Leave out the PEAK chunk, which holds the second it was written: the same render then
    gives the same bytes (a batch render compares and resumes by them). soundfile has no call
    for the command: it goes through its libsndfile handle."""
    sf._snd.sf_command(file._file, _SFC_SET_ADD_PEAK_CHUNK, sf._ffi.NULL, 0)


class OutputWatch:
    """What a render's output needed: NaN/Inf samples in the model's output, block by block
    (those the engine's fuse replaced with 0 or, without a fuse, those in the output itself),
    and the samples the fuse's limiter bent."""

    def __init__(self, engine: StreamEngine) -> None:
        self.fuse = engine.fuse
        self._seen = self.fuse.nonfinite_samples if self.fuse is not None else 0
        self._limited = self.fuse.limited_samples if self.fuse is not None else 0
        self.samples = 0
        self.total = 0  #: blocks counted
        self.blocks: list[int] = []  #: those with NaN/Inf (0 is the first)

    def count(self, block: np.ndarray) -> None:
        if self.fuse is not None:
            found, self._seen = (
                self.fuse.nonfinite_samples - self._seen,
                self.fuse.nonfinite_samples,
            )
        else:
            found = block.size - int(np.count_nonzero(np.isfinite(block)))
        if found:
            self.samples += found
            self.blocks.append(self.total)
        self.total += 1

    def limited(self) -> int:
        """Samples the limiter bent since the watch began."""
        return self.fuse.limited_samples - self._limited if self.fuse is not None else 0

    def ranges(self) -> str:
        """The blocks as runs: ``3-14, 20``."""
        runs: list[list[int]] = []
        for index in self.blocks:
            if runs and runs[-1][1] == index - 1:
                runs[-1][1] = index
            else:
                runs.append([index, index])
        return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


class OutputWriter:
    """Writes output blocks to ``file`` at ``rate``: the first ``skip`` frames dropped,
    ``wanted`` frames in all (cut, or completed with silence)."""

    def __init__(
        self, file: sf.SoundFile, engine: StreamEngine, rate: int, wanted: int, skip: int
    ) -> None:
        self.file, self.wanted, self.skip = file, wanted, skip
        self.channels = engine.out_channels
        self.written = 0
        self.resampler = None
        self.fuse = None  #: holds the ceiling after the resampler, which may overshoot it
        if rate != engine.sample_rate:
            self.resampler = soxr.ResampleStream(
                engine.sample_rate, rate, self.channels, dtype="float32"
            )
            self.fuse = engine.fuse

    def write(self, block: np.ndarray) -> None:
        """One output block ``[channels, frames]`` at the engine's rate."""
        cut = min(self.skip, block.shape[-1])
        self.skip -= cut
        frames = np.ascontiguousarray(block[:, cut:].T)
        self._put(self.resampler.resample_chunk(frames) if self.resampler else frames)

    def finish(self) -> int:
        """Flush the resampler, complete with silence; the frames written."""
        if self.resampler is not None:
            self._put(self.resampler.resample_chunk(np.zeros((0, self.channels), np.float32), True))
        self._put(np.zeros((max(0, self.wanted - self.written), self.channels), np.float32))
        return self.written

    def _put(self, frames: np.ndarray) -> None:  # [frames, channels]
        frames = frames[: self.wanted - self.written]
        if self.fuse is not None:
            self.fuse.hold(frames)
        self.file.write(frames)
        self.written += len(frames)
