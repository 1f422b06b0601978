"""``bendserver stress``: the live server under OSC load on a real audio clock, as a table.

For each block size it starts a JACK server on the dummy driver (a real clock, no sound card),
``bendserver serve`` on it with the model and its preset, and for each load a client process
(:mod:`bendserver.osc.loadgen`) sending the preset's parameters; after each load the client
sends one final value per address, and the table says whether the server ended with those
values, beside xruns, late blocks, messages received / coalesced / dropped, compute and
callback-start jitter. Anyone can run it (Debian: ``jackd2``); its figures are the ones the docs
quote, measured, never computed.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg
from tabulate import tabulate

from .errors import BendingError
from .loader import load_model
from .osc.intake import LOSSES
from .presets import load_preset, preset_for

#: Loads: a name and (messages a second, seconds; a negative seconds value means that many
#: thousand messages, sent as fast as one client can).
LOADS = {
    "0": (0.0, 0.0),
    "1k": (1000.0, 1.0),
    "10k": (10000.0, 1.0),
    "20k": (20000.0, 1.0),
    "burst": (0.0, -20.0),
}
#: Not a load on the server: a client with no torch and no server doing the server's median
#: compute time of plain numpy work per block on the same JACK server (what the machine does
#: to any client), measured after the server's rows of its block size.
REFERENCE = "reference"
_LOADGEN = Path(__file__).parent / "osc" / "loadgen.py"
_REFERENCE = Path(__file__).parent / "audio" / "reference.py"


@dataclass
class Row:
    block: int
    load: str
    sent: int
    received: int
    coalesced: int
    dropped: str  #: how many, and their causes where there were any ("1 kernel")
    xruns: int
    late: int
    drain_ms: float  #: from the client's last message to the server having read all it sent
    final: str
    p50_ms: float
    p99_ms: float
    max_ms: float
    jitter_p99_ms: float
    jitter_max_ms: float


def run_stress(
    model: str,
    preset: str | None,
    blocks: list[int],
    loads: list[str],
    seconds: float,
    progress: Callable[[Row], None] = lambda row: None,
    search: list[str] | None = None,
) -> list[Row]:
    """Measure every (block, load), calling ``progress`` with each row; returns the rows."""
    for name in ("jackd", "jack_wait"):
        if shutil.which(name) is None:
            raise BendingError(f"{name} is missing: install Debian's jackd2")
    unknown = sorted(set(loads) - {*LOADS, REFERENCE})
    if unknown:
        raise BendingError(f"unknown loads {unknown}: choose from {sorted([*LOADS, REFERENCE])}")
    search = search or []
    ranges = _parameters(model, preset, search)
    served = [load for load in loads if load != REFERENCE]
    rows: list[Row] = []
    for block in blocks:
        with _jack(block) as name:
            with _served(model, preset, block, name, search) as osc:
                for load in served:
                    rows.append(_measure(osc, block, load, seconds, ranges))
                    progress(rows[-1])
            if REFERENCE in loads:
                work_ms = rows[-1].p50_ms if rows and rows[-1].block == block else 0.25
                rows.append(_reference(name, block, seconds, work_ms))
                progress(rows[-1])
    return rows


def format_rows(rows: list[Row]) -> str:
    headers = [
        "block", "load", "sent", "received", "coalesced", "dropped", "xruns", "late",
        "drained ms", "final values", "compute p50 ms", "p99 ms", "max ms", "jitter p99 ms",
        "jitter max ms",
    ]  # fmt: skip
    table = [list(vars(row).values()) for row in rows]
    return tabulate(table, headers=headers, floatfmt=".2f")


def _parameters(model: str, preset: str | None, search: list[str]) -> list[tuple]:
    """The addresses the client sends: each parameter of the preset's ops, in its range (capped
    to musical values), and the output gain."""
    from .bending.ops import OPS

    loaded = load_model(model, search=search)
    chosen = preset_for(loaded, preset)
    ranges = [("/engine/gain", 0.5, 1.0)]
    if chosen is not None:
        for op_id, spec in load_preset(chosen).config.get("ops", {}).items():
            for name, param in OPS[spec["op"]].params.items():
                low, high = max(param.low, 0.0), min(param.high, 1.0)
                ranges.append((f"/bend/{op_id}/{name}", low, max(low, high * 0.5)))
    return ranges


class _Osc:
    """The server's OSC port and a socket for its replies."""

    def __init__(self, port: int, replies: socket.socket) -> None:
        self.port, self.replies = port, replies

    def ask(self, address: str) -> list:
        self.replies.sendto(build_msg(address, []).dgram, ("127.0.0.1", self.port))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            self.replies.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = OscMessage(self.replies.recv(65536))
            except TimeoutError:
                break
            if message.address == address:
                return list(message.params)
        raise BendingError(f"the server did not answer {address}")

    def stats(self) -> dict:
        pairs = self.ask("/stats")
        return dict(zip(pairs[::2], pairs[1::2], strict=True))


def _measure(osc: _Osc, block: int, load: str, seconds: float, ranges: list) -> Row:
    rate, duration = LOADS[load]
    duration = duration * seconds if duration > 0 else duration
    before = osc.stats()
    if load == "0":
        time.sleep(seconds)
        sent, final, drain_ms = 0, "-", 0.0
    else:
        value = 0.37 + 0.01 * len(load)  # a value no load message carries
        client = subprocess.run(
            [sys.executable, str(_LOADGEN), str(osc.port), str(rate), str(duration), str(value)]
            + [f"{a}={lo}:{hi}" for a, lo, hi in ranges],
            capture_output=True,
            text=True,
        )
        sent = int(client.stdout.split()[1])
        # The socket is first in, first out, and so are the intake and the worker: /stats is
        # answered once the server has read and dispatched all the client sent. A client
        # faster than the intake leaves a backlog in the socket's buffer; that time is shown.
        finished = time.monotonic()
        osc.stats()
        drain_ms = 1e3 * (time.monotonic() - finished)
        time.sleep(2 * block / 48000 + 0.005)  # two blocks after the server has the last word
        wanted = {a: lo + (hi - lo) * value for a, lo, hi in ranges}
        got = {a: osc.ask(f"/get{a}")[0] for a in wanted}
        settled = osc.stats()
        ok = all(math.isclose(got[a], v, abs_tol=1e-6) for a, v in wanted.items())
        final = "all applied" if ok and settled["pending"] == 0 else f"WRONG {got}"
    after = osc.stats()
    counts = ("received", "coalesced", "dropped", "xruns", "late", *LOSSES)
    delta = {k: int(after[k] - before[k]) for k in counts}
    causes = [f"{delta[k]} {k.removeprefix('dropped_')}" for k in LOSSES if delta[k]]
    dropped = f"{delta['dropped']} ({', '.join(causes)})" if causes else str(delta["dropped"])
    return Row(
        block, load, sent, delta["received"], delta["coalesced"], dropped, delta["xruns"],
        delta["late"], drain_ms, final,
        after["p50_ms"], after["p99_ms"], after["max_ms"],
        after["jitter_p99_ms"], after["jitter_max_ms"],
    )  # fmt: skip


def _reference(jack: str, block: int, seconds: float, work_ms: float) -> Row:
    """The reference client's row (:mod:`bendserver.audio.reference`) on JACK server ``jack``."""
    env = {**os.environ, "JACK_DEFAULT_SERVER": jack, "JACK_NO_START_SERVER": "1"}
    client = subprocess.run(
        [sys.executable, str(_REFERENCE), str(block), str(seconds), str(work_ms)],
        capture_output=True,
        text=True,
        env=env,
    )
    if client.returncode != 0:
        raise BendingError(f"the reference client failed: {client.stderr.strip()[-500:]}")
    figures = dict(word.split("=") for word in client.stdout.split())
    return Row(
        block, REFERENCE, 0, 0, 0, "-", int(figures["xruns"]), int(figures["late"]), 0.0, "-",
        *(float(figures[k]) for k in ("p50_ms", "p99_ms", "max_ms", "jitter_p99_ms",
                                      "jitter_max_ms")),
    )  # fmt: skip


@contextlib.contextmanager
def _jack(block: int) -> Iterator[str]:
    """A JACK server on the dummy driver at 48 kHz and ``block`` frames."""
    name = f"bendstress{os.getpid()}x{block}"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        ["jackd", "-n", name, "-d", "dummy", "-r", "48000", "-p", str(block)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        ready = subprocess.run(
            ["jack_wait", "-s", name, "-w", "-t", "10"], capture_output=True, text=True
        )
        if "available" not in ready.stdout:
            log.seek(0)
            raise BendingError(f"jackd did not start: {log.read().decode(errors='replace')}")
        yield name
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@contextlib.contextmanager
def _served(
    model: str, preset: str | None, block: int, jack: str, search: list[str]
) -> Iterator[_Osc]:
    """``bendserver serve`` on the JACK server, in its own process, until the block ends."""
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "bendserver.cli", "serve", "-m", model, "--audio", "jack",
        "--block", str(block), "--osc-port", str(port),
        "--reply-port", str(replies.getsockname()[1]), *(["-p", preset] if preset else []),
        *(word for folder in search for word in ("--models-dir", folder)),
    ]  # fmt: skip
    env = {**os.environ, "JACK_DEFAULT_SERVER": jack, "JACK_NO_START_SERVER": "1"}
    env["PYTHONUNBUFFERED"] = "1"
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        banner = []
        for line in server.stdout:
            banner.append(line)
            if line.startswith("try"):
                break
        else:
            raise BendingError("the server did not start:\n" + "".join(banner))
        time.sleep(1.0)  # past the first blocks
        yield _Osc(port, replies)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        replies.close()
