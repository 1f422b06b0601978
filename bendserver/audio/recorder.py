"""Recording the output to a sound file, with no file I/O in the audio callback.

The callback copies each output block into a preallocated ring (``push``); a writer thread
empties the ring into a temporary file beside the recording every few milliseconds. ``close``,
the one way to finish a recording, drains the ring, closes the file and renames it into place:
the recording appears at its path only then, complete and valid (after Ctrl-C or SIGTERM too,
where the server calls ``close``). Blocks that find the ring full (the disk stalled for seconds)
are dropped and counted.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import soundfile as sf

from ..audiofile import FORMATS
from ..errors import BendingError
from ..files import commit, discard, temporary_beside

log = logging.getLogger("bendserver.audio")


class Recorder:
    """Writes pushed ``[channels, frames]`` blocks to ``path`` on its own thread."""

    def __init__(
        self,
        path: Path,
        sample_rate: int,
        channels: int,
        max_frames: int,
        seconds: float = 4.0,
        force: bool = False,
    ) -> None:
        path = Path(path)
        subtype = FORMATS.get(path.suffix.lower())
        if subtype is None:
            raise BendingError(
                f"--record: the format follows the extension, one of {sorted(FORMATS)}"
            )
        if path.exists() and not force:
            raise BendingError(f"{path} exists: record to another file, or pass --force")
        self.path = path
        self._temp = temporary_beside(path)
        slots = max(8, int(seconds * sample_rate / max_frames))
        self._ring = np.zeros((slots, max_frames, channels), dtype=np.float32)
        self._sizes = np.zeros(slots, dtype=np.int64)
        self._pushed = 0  # written by the audio callback only
        self._written = 0  # written by the writer thread only
        self.dropped = 0  #: blocks lost because the ring was full
        self.frames = 0  #: frames written to the file
        try:
            self._file = sf.SoundFile(str(self._temp), "w", sample_rate, channels, subtype=subtype)
        except sf.LibsndfileError as error:
            discard(self._temp)
            raise BendingError(f"--record: cannot write {path}: {error}") from None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._thread.start()

    def push(self, block: np.ndarray) -> None:
        """Copy one block into the ring (audio callback; no I/O, no allocation)."""
        slots, max_frames = self._ring.shape[:2]
        frames = block.shape[-1]
        if self._pushed - self._written >= slots or frames > max_frames:
            self.dropped += 1
            return
        slot = self._pushed % slots
        self._ring[slot, :frames] = block.T
        self._sizes[slot] = frames
        self._pushed += 1

    def _drain(self) -> None:
        slots = self._ring.shape[0]
        while self._written < self._pushed:
            slot = self._written % slots
            frames = int(self._sizes[slot])
            self._file.write(self._ring[slot, :frames])
            self.frames += frames
            self._written += 1

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self._drain()
            except Exception as error:  # a full disk must not take the stream down
                log.error("recording to %s failed: %s", self.path, error)
                return

    def close(self) -> None:
        """Write what is left, close the file and put it in place (call after the stream
        stopped)."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        try:
            self._drain()
        finally:
            self._file.close()
            commit(self._temp, self.path)
