"""How far a reader follows ``serve -m drive`` (start, then stop) and one ``/model/load wavae``
through the code: the files in which a bendserver function ran, and the climbs back.

A climb back is a call from one bendserver file into another that is already on the stack below
the caller (``a.py -> b.py -> a.py``): the reader goes back up to a file left half read. Counted
once per (caller file, callee file) pair, over every thread the command starts
(``sys.setprofile``, ``threading.setprofile``). The server plays on the null backend; the load
is dispatched to the running server's controller on this thread (the control worker's path).

Usage: ``python scripts/follow.py [--list]``; ``--list`` also names the files and the climbs.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import bendserver

PACKAGE = Path(bendserver.__file__).resolve().parent


class Follower:
    """A profile function recording the bendserver files entered and the climbs back."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.climbs: set[tuple[str, str]] = set()
        self._names: dict[str, str | None] = {}

    def _name(self, filename: str) -> str | None:
        """``filename`` relative to the package, None outside it."""
        if filename not in self._names:
            path = Path(filename).resolve()
            inside = path.is_relative_to(PACKAGE)
            self._names[filename] = path.relative_to(PACKAGE).as_posix() if inside else None
        return self._names[filename]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = self._name(frame.f_code.co_filename)
        if callee is None:
            return
        self.files.add(callee)
        caller_frame = frame.f_back
        if caller_frame is None:
            return
        caller = self._name(caller_frame.f_code.co_filename)
        if caller is None or caller == callee or (caller, callee) in self.climbs:
            return
        below = caller_frame.f_back
        while below is not None:
            if self._name(below.f_code.co_filename) == callee:
                self.climbs.add((caller, callee))
                return
            below = below.f_back

    def follow(self, work: Callable[[], Any]) -> None:
        """Run ``work`` with this profile function on this thread and the threads it starts."""
        threading.setprofile(self)
        sys.setprofile(self)
        try:
            work()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def report(self, what: str, listed: bool) -> None:
        print(f"{what}: {len(self.files)} files, {len(self.climbs)} climbs back")
        if listed:
            print("  files: " + ", ".join(sorted(self.files)))
            for caller, callee in sorted(self.climbs):
                print(f"  climb: {caller} -> {callee}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="name the files and the climbs")
    args = parser.parse_args()
    from bendserver.cli import main as command
    from bendserver.serve import ServeOptions, Server

    serve = Follower()
    argv = ["serve", "-m", "drive", "--audio", "null", "--osc-port", "0", "--duration", "0"]
    serve.follow(lambda: command(argv))
    serve.report("serve -m drive", args.list)

    load = Follower()
    with Server(ServeOptions(model="drive", audio="null", osc_port=0)) as server:
        load.follow(lambda: server.controller.dispatch("/model/load", ["wavae"]))
    load.report("/model/load wavae", args.list)


if __name__ == "__main__":
    main()
