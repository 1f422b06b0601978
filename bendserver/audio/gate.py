"""Keeping the GIL free while the engine computes a block.

The engine's torch calls release the GIL and take it back around every operation: while another
Python thread is busy (the control worker applying a burst of messages, the OSC receiver
parsing), each of those takes can wait up to the interpreter's switch interval, and a 2 ms block
became 20 ms in a measured burst. The thread that computes marks the block with the gate; the
control threads wait for the gate to be open before each message, so that they run in the gaps
between blocks and the audio thread rarely has to wait for the GIL.
"""

from __future__ import annotations

import threading


class ComputeGate:
    """Closed while a block is computed (``with gate:``), open between blocks."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self.blocks = 0  #: blocks computed so far

    def __enter__(self) -> ComputeGate:
        self._open.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self.blocks += 1
        self._open.set()

    def wait_open(self, timeout: float) -> bool:
        """Wait until no block is being computed (at most ``timeout`` seconds)."""
        return self._open.wait(timeout)
