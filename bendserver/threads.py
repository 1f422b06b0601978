"""The background threads of the server share one shape: a named daemon thread that runs its
``_run`` loop until ``stop()`` sets ``_stop``."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("bendserver")


class LoopThread:
    """Base of objects owning one daemon thread: ``start()``, ``stop()``, and a ``_run`` loop
    that checks ``self._stop`` often enough to end promptly."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the loop to end and wait for it (at most ``timeout`` seconds: a thread left
        running while the interpreter exits may be inside native code, which can abort it)."""
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=timeout)
        if self.thread.is_alive():
            log.warning("thread %s did not stop within %g s", self.thread.name, timeout)

    def _run(self) -> None:
        raise NotImplementedError
