"""Start-up: from ``bendserver serve`` to the model playing (its first ``/pong``), against a
bare ``python -c "import torch"`` measured in the same run, as a ratio.

Each round runs, in turn, the bare import and then each model's server (``--audio null``, the
rest as ``serve`` starts by default: OSCQuery and its page, on a free port), sending ``/ping``
every 10 ms from the moment it starts; the time is that of the first ``/pong`` (a server
answers once its model plays). One start of each server before the rounds is not counted: the
files are then in the system's cache, and what a model's first load measures and keeps (its
convolution forms, a TorchScript file's latency and probe) is kept. ``--compare BIN`` times
another ``bendserver`` executable too (an older checkout's) in the same rounds, so that before
and after come from one run.

Usage: ``python scripts/startup.py [-m drive -m wavae -m FILE.ts] [--rounds 5]
[--compare OTHER/bin/bendserver]``; prints the median and the spread of each start, and of
its ratio to the bare import run just before it (pairs keep the ratio meaningful on a machine
whose speed drifts).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg

HERE = Path(sys.executable).parent
#: The commands' environment: bytecode written as Python does by default (an environment that
#: turns it off compiles every module of bendserver at every start).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def bare_import() -> float:
    """Seconds of ``python -c "import torch"`` with this interpreter."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env=ENV)
    return time.perf_counter() - started


def first_pong(command: list[str], timeout: float = 120.0) -> float:
    """Seconds from starting ``command`` (a ``serve`` without its ports) to its first
    ``/pong``; the server is stopped after."""
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    replies.settimeout(0.01)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        http = probe.getsockname()[1]
    reply_port = replies.getsockname()[1]
    ping = build_msg("/ping", []).dgram
    ports = ["--osc-port", str(port), "--reply-port", str(reply_port), "--oscquery-port", str(http)]
    started = time.perf_counter()
    server = subprocess.Popen(
        [*command, *ports], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV
    )
    try:
        while time.perf_counter() - started < timeout:
            replies.sendto(ping, ("127.0.0.1", port))
            try:
                data = replies.recv(65536)
            except (TimeoutError, ConnectionRefusedError):
                if server.poll() is not None:
                    raise SystemExit(f"{' '.join(command)} ended: {server.stderr.read()}") from None
                continue
            if OscMessage(data).address == "/pong":
                return time.perf_counter() - started
        raise SystemExit(f"no /pong from {' '.join(command)} within {timeout} s")
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
        replies.close()


def spread(values: list[float], unit: str = " s") -> str:
    return f"{statistics.median(values):.2f}{unit} (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", action="append", help="model name or file (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", help="another bendserver executable, timed the same way")
    args = parser.parse_args()
    models = args.model or ["drive", "wavae"]
    executables = {"this": str(HERE / "bendserver")}
    if args.compare:
        executables["compare"] = args.compare
    times: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    bare: list[float] = []
    for model in models:  # one start each first, not counted: the files read once, and what
        for executable in executables.values():  # a first load measures (kept) measured
            first_pong([executable, "serve", "-m", model, "--audio", "null"])
    for round_ in range(args.rounds):
        for model in models:
            for name, executable in executables.items():
                bare.append(bare_import())  # just before: each start paired with an import
                spent = first_pong([executable, "serve", "-m", model, "--audio", "null"])
                times.setdefault((name, model), []).append(spent)
                ratios.setdefault((name, model), []).append(spent / bare[-1])
        print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    print(f"python -c 'import torch': {spread(bare)}")
    for key, spent in times.items():
        name, model = key
        print(
            f"{name:8} serve -m {model}: first /pong {spread(spent)}; "
            f"over the import just before: {spread(ratios[key], 'x')}"
        )
    print(f"({os.cpu_count()} cores; {args.rounds} rounds, each case once a round, in turn)")


if __name__ == "__main__":
    main()
