"""``bendserver stress --fuzz``: random datagrams (:mod:`bendserver.measure.fuzzgen`) against a live
server, pinged meanwhile; how it ended, the final value read back, its memory.
"""

from __future__ import annotations

import contextlib
import math
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pythonosc.osc_message_builder import build_msg

from ..errors import BendingError
from ..osc.intake import LOSSES
from .served import Osc, has_jack, jack_server, serving

#: The address whose final value the fuzz checks (the fuzzer never sends it in a bundle due
#: later than a second after it was sent).
FINAL_ADDRESS = "/engine/gain"
#: Addresses the fuzzer leaves to the checks: their replies must be the checks' own.
_CHECKS = ("/ping", "/stats", f"/get{FINAL_ADDRESS}")
_FUZZGEN = Path(__file__).parent / "fuzzgen.py"
#: Seconds between pings while the fuzz runs, and how long a ping may wait for its /pong.
PING_EVERY, PING_TIMEOUT = 0.05, 2.0


@dataclass
class FuzzReport:
    """What a fuzz run found: the fuzzer's count, how the server ended, the final value, the
    pings' round trips, the /stats counters' change, each process's RSS before and after."""

    block: int
    seconds: float
    rate: float
    seed: int
    audio: str  #: the clock: the JACK dummy driver where installed, else the null backend
    sent: str = ""
    crashed: str = ""  #: how the server ended, when it did
    final: str = ""
    pings_ms: list[float] = field(default_factory=list)
    lost_pings: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    rss_kib: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The server survived and the final value was read back."""
        return not self.crashed and self.final.startswith("read back")


def run_fuzz(
    model: str,
    preset: str | None,
    block: int,
    seconds: float,
    rate: float = 10000.0,
    seed: int = 0,
    search: list[str] | None = None,
    latency: int | None = None,
) -> FuzzReport:
    """Fuzz a live server (JACK dummy clock, a fresh user folder) for ``seconds`` at ``rate``
    datagrams a second, from 127.0.0.1 only (:mod:`bendserver.measure.fuzzgen`)."""
    if not (0 < seconds <= 3600 and 0 < rate <= 100_000):
        raise BendingError("--fuzz takes 0 to 3600 seconds, --rate 0 to 100000 a second")
    report = FuzzReport(block, seconds, rate, seed, "JACK dummy" if has_jack() else "null")
    with contextlib.ExitStack() as stack:
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="bendserver-fuzz-"))
        jack = stack.enter_context(jack_server(block)) if has_jack() else None
        osc = stack.enter_context(serving(model, preset, block, jack, search or [], home, latency))
        return _fuzz(osc, report)


def format_fuzz(report: FuzzReport) -> str:
    pings = sorted(report.pings_ms)
    p50 = f"{pings[len(pings) // 2]:.2f}" if pings else "-"
    peak = f"{pings[-1]:.2f}" if pings else "-"
    counts = " ".join(f"{k} {v}" for k, v in report.counts.items()) or "-"
    rss = "; ".join(
        f"{name} {before / 1024:.1f} -> {after / 1024:.1f} MiB"
        for name, (before, after) in report.rss_kib.items()
    )
    lines = [
        f"fuzz       {report.seconds:g} s at {report.rate:g} datagrams/s, block {report.block} "
        f"({report.audio}), seed {report.seed}: {report.sent or 'nothing sent'}",
        f"server     {report.crashed or 'alive'}",
        f"final      {report.final or '-'}",
        f"/ping      {len(pings)} answered, {report.lost_pings} lost; round trip p50 {p50} ms, "
        f"max {peak} ms",
        f"/stats     {counts}",
        f"rss        {rss}",
    ]
    return "\n".join(lines)


def _fuzz(osc: Osc, report: FuzzReport) -> FuzzReport:
    osc.replies.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
    addresses = _fuzz_addresses(osc)
    before, rss = osc.stats(), _rss(osc.server.pid)
    fuzzer = subprocess.Popen(
        [sys.executable, str(_FUZZGEN), str(osc.port), str(report.rate), str(report.seconds),
         str(report.seed), FINAL_ADDRESS, *addresses],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        report.pings_ms, report.lost_pings = _ping_while(osc, fuzzer)
    finally:
        if fuzzer.poll() is None:
            fuzzer.kill()
        report.sent = fuzzer.communicate()[0].strip()
    time.sleep(1.0)  # bundles due up to half a second ahead have applied
    report.crashed = _ended(osc)
    if report.crashed:
        return report
    _settle(osc)
    value = round(0.2 + 0.6 * ((report.seed * 7919) % 1000) / 1000, 4)  # not a fuzzed value
    osc.send(FINAL_ADDRESS, value)
    errors: list = []
    osc.ask("/stats", errors=errors)  # first in, first out: the final value is applied by then
    time.sleep(2 * report.block / 48000 + 0.005)
    got = osc.ask(f"/get{FINAL_ADDRESS}")[0]
    ok = math.isclose(got, value, abs_tol=1e-6)
    refused = [text for address, text in errors if address == FINAL_ADDRESS]
    report.final = f"{'read back' if ok else 'LOST: read'} {FINAL_ADDRESS} {got:g}, sent {value:g}"
    report.final += f" (refused: {refused[-1][:200]})" if refused else ""
    after, rss_after = osc.stats(), _rss(osc.server.pid)
    keys = ("received", "dropped", *LOSSES, "malformed", "osc_errors", "xruns", "late", "errors")
    report.counts = {k: int(after[k] - before[k]) for k in keys if k in after and k in before}
    report.rss_kib = {name: (kib, rss_after.get(name, 0)) for name, kib in rss.items()}
    return report


def _fuzz_addresses(osc: Osc) -> list[str]:
    """The server's addresses with their ``<names>`` filled in (each op, each bend, an
    attribute), less those the checks use."""
    patterns = osc.ask("/list", ("addresses",), "/list/addresses")
    ops = osc.ask("/list", ("ops",), "/list/ops") or ["none"]
    bends = osc.ask("/list", ("bends",), "/list/bends")
    filled = {*bends, *(f"/bend/{op}/enable" for op in ops), "/attr/gain"}
    filled |= {f"/get{a}" for a in (*bends, "/engine/mix", "/version", "/interp")}
    filled |= {p for p in patterns if "<" not in p}
    return sorted(filled - set(_CHECKS))


def _ping_while(osc: Osc, fuzzer: subprocess.Popen) -> tuple[list[float], int]:
    """Ping every :data:`PING_EVERY` seconds while the fuzzer and the server run, reading every
    reply in between (the fuzz's replies come to the same port); round trips in ms, and how
    many pings had no /pong within :data:`PING_TIMEOUT`."""
    ping, target = build_msg("/ping", []).dgram, ("127.0.0.1", osc.port)
    osc.replies.settimeout(0.005)
    trips: list[float] = []
    lost, sent_at, next_ping = 0, None, time.monotonic()
    while fuzzer.poll() is None and osc.server.poll() is None:
        now = time.monotonic()
        if sent_at is None and now >= next_ping:
            osc.replies.sendto(ping, target)
            sent_at, next_ping = now, now + PING_EVERY
        elif sent_at is not None and now - sent_at > PING_TIMEOUT:
            lost, sent_at = lost + 1, None
        try:
            data = osc.replies.recv(65536)
        except TimeoutError:
            continue
        if sent_at is not None and data.startswith(b"/pong\x00"):
            trips.append(1e3 * (time.monotonic() - sent_at))
            sent_at = None
    return trips, lost


def _settle(osc: Osc, seconds: float = 60.0) -> None:
    """Wait until the server has read everything sent so far (a /ping answered: first in,
    first out; it may be lost while the intake is still full), then drop the replies left."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(BendingError):
            osc.ask("/ping", reply="/pong")
            break
    osc.replies.settimeout(0.2)
    with contextlib.suppress(TimeoutError):
        while True:
            osc.replies.recv(65536)


def _ended(osc: Osc) -> str:
    """How the server ended (with its last output lines), or nothing while it runs."""
    code = osc.server.poll()
    if code is None:
        return ""
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    last = " | ".join(line.strip() for line in list(osc.output)[-5:])
    return f"CRASHED: {how} ({last})"


def _rss(pid: int) -> dict[str, int]:
    """Resident memory in KiB of process ``pid`` and of its descendants (the OSC intake), by
    name: ``serve``, or the script a child runs (``intake``)."""
    found: dict[str, int] = {}
    stack = [(pid, "serve")]
    while stack:
        current, name = stack.pop()
        proc = Path("/proc") / str(current)
        try:
            status = (proc / "status").read_text()
            children = [
                int(child)
                for task in (proc / "task").iterdir()
                for child in (task / "children").read_text().split()
            ]
        except OSError:  # ended meanwhile
            continue
        rss = next((line.split()[1] for line in status.splitlines() if line[:6] == "VmRSS:"), "0")
        found[f"{name} {current}"] = int(rss)
        for child in children:
            try:
                words = (Path("/proc") / str(child) / "cmdline").read_bytes().split(b"\x00")
            except OSError:
                continue
            script = next((Path(w.decode()).stem for w in words[1:] if w.endswith(b".py")), None)
            stack.append((child, script or Path(words[0].decode()).name))
    return found
