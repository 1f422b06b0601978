"""The control side's reporter: what the audio thread must not do itself, done on a timer.

The audio thread never logs and never frees: it counts, keeps the first failure of each kind,
and hands replaced tensors and graph modules back. Every ``period`` seconds this thread frees
what came back, logs the failures, and warns (at most once per ``quiet`` seconds) when the model
cannot keep up (most blocks of a round late), with the figures a performer needs to choose a
larger block. An occasional late block is only counted (``late`` in ``/stats``).
"""

from __future__ import annotations

import logging

from ..engine import StreamEngine
from ..threads import LoopThread

log = logging.getLogger("bendserver.audio")


class Reporter(LoopThread):
    """Frees, logs and warns for one engine, off the audio thread."""

    def __init__(
        self, engine: StreamEngine, mode: str = "direct", period: float = 0.5, quiet: float = 10.0
    ) -> None:
        self.engine = engine
        self.mode = mode  #: the latency mode in use: the warning never suggests it
        self.period = period
        self.quiet = quiet
        self.warnings = 0  #: late-block warnings logged
        self._blocks = self._late = 0
        self._since_warning = quiet
        super().__init__("bendserver-reporter")

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.report()

    def report(self) -> None:
        """One round: free, log failures, warn about late blocks."""
        engine = self.engine
        engine.collect()
        for line in engine.failures():
            log.error("%s (the audio goes on; counted in /stats errors)", line)
        blocks, late = engine.stats.blocks, engine.stats.late
        new_blocks, new_late = blocks - self._blocks, late - self._late
        self._blocks, self._late = blocks, late
        self._since_warning += self.period
        if new_blocks and 2 * new_late > new_blocks and self._since_warning >= self.quiet:
            self._since_warning = 0.0
            self.warnings += 1
            times = engine.stats.compute_ms()
            budget = 1000 * engine.block / engine.sample_rate
            log.warning(
                "the model cannot keep up: %d of the last %d blocks were late (compute p50 %.2f "
                "ms, p99 %.2f ms, max %.2f ms for a %.2f ms block); try %s",
                new_late,
                new_blocks,
                times["p50_ms"],
                times["p99_ms"],
                times["max_ms"],
                budget,
                self.remedies(),
            )

    def remedies(self) -> str:
        """What may help, less what is already in use."""
        other = {
            "direct": "--latency-mode ring (the default on a device)",
            "threaded": "--latency-mode ring (the default on a device)",
            "ring": "a larger --ahead, more --threads",
        }[self.mode]
        return f"a larger --block, {other}, or fewer ops"
