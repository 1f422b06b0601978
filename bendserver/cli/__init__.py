"""The ``bendserver`` command: serve, render, sweep, info, bench, export, stress."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

from .. import __version__
from ..errors import describe, is_bug
from . import bench, export, info, render, serve, stress
from .options import parents, take_models

#: The commands, each a module with its parser (``add_parser``) beside its handler.
COMMANDS = (serve, render, info, bench, export, stress)


def build_parser() -> argparse.ArgumentParser:
    """The command line: the program's options, then each command's parser."""
    parser = argparse.ArgumentParser(prog="bendserver", description=__doc__)
    parser.add_argument("--version", action="version", version=f"bendserver {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    shared = parents()
    for command in COMMANDS:
        command.add_parser(commands, shared)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; ``--debug`` also logs bendserver's debug lines (the tracebacks of errors
    a server survives) while it runs."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("bendserver")
    level = logger.level
    if args.debug:
        logger.setLevel(logging.DEBUG)
    with _terminate_as_interrupt():
        try:
            return _run(args)
        finally:
            logger.setLevel(level)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM ends a command as Ctrl-C does (KeyboardInterrupt), so that what it was writing
    is discarded and a server stops cleanly, whenever it comes: loading, rendering, serving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    """The one error path of the command line: every error ends here as one line
    (:func:`errors.describe`), exit 2 for what the user can fix, 1 for a bug (with the hint to
    rerun with ``--debug``, which raises it instead: its traceback), 130 for Ctrl-C or SIGTERM."""
    try:
        take_models(args)
        return args.run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("bendserver: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (``| head``): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:
        if args.debug:
            raise
        bug = is_bug(error)
        hint = "; rerun with --debug for the traceback" if bug else ""
        print(f"bendserver: {describe(error)}{hint}", file=sys.stderr)
        return 1 if bug else 2
