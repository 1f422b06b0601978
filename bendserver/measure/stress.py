"""``bendserver stress``: the live server under OSC load on a real audio clock, as a table.

For each block size it starts a JACK server on the dummy driver (a real clock, no sound card),
``bendserver serve`` on it with the model and its preset, and for each load a client process
(:mod:`bendserver.measure.loadgen`) sending the preset's parameters; after each load the client
sends one final value per address, and the table says whether the server ended with those
values, beside xruns, late blocks, messages received / coalesced / dropped, compute and
callback-start jitter. Anyone can run it (Debian: ``jackd2``); its figures are the ones the docs
quote, measured, never computed.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg
from tabulate import tabulate

from ..audio.jackclient import JackXruns
from ..errors import BendingError
from ..loader import load_model
from ..osc.intake import LOSSES
from ..osc.oscquery import METER_RATE
from ..presets.library import load_preset, preset_for

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
#: Not a load: the latency the server adds, an impulse through it (in bypass: the model's noise
#: would blur it; the rings, resamplers, gain and fuse are on the path), and control latency:
#: from an OSC message sent to the output changing, a tone through the server, /engine/gain
#: toggled at random phases of the block. Both heard by a loopback JACK client.
LATENCY = "latency"
#: Not a load either: JACK's example client in C (``jack_simple_client``, a sine from a table),
#: the machine's floor for any client, measured the same way (JACK's own xrun count), once with
#: no OSC and once under each OSC load of the run (the load client sending at the same rate to
#: a port that nobody reads: the machine as busy with the sender as in the server's row).
C_REFERENCE = "c"
_LOADGEN = Path(__file__).parent / "loadgen.py"
_REFERENCE = Path(__file__).parent / "reference.py"


@dataclass
class Row:
    block: int
    mode: str  #: the server's latency mode, or what the reference row is
    load: str
    sent: int
    received: int
    coalesced: int
    dropped: str  #: how many, and their causes where there were any ("1 kernel")
    jack_xruns: int  #: JACK's own count (an xrun callback in a client of its own) in the row
    xruns: int  #: the server's count (JACK's xrun callback in the server, on a JACK server)
    callback_xruns: int  #: the server's callback's status flags (one for several xruns)
    underruns: int  #: ring mode: the output ring ran dry
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
    latency: int | None = None,
    modes: tuple[str, ...] = ("ring",),
    serve_args: tuple[str, ...] = (),
    period: int | None = None,
    jack_rate: int = 48000,
    modulators: bool = False,
    page: bool = False,
) -> list[Row]:
    """Measure every (block, mode, load), calling ``progress`` with each row; returns the
    rows. ``latency``: the model's, given to the servers; ``period``: the JACK server's
    (default: the block), ``jack_rate`` its sample rate; ``serve_args``: more options of
    ``bendserver serve`` (``--ahead 2``, ``--threads 2``); ``modulators``: each server plays
    four modulators on eight routes (:func:`_modulated`); ``page``: the control page open in a
    headless Chromium on each server while its rows run (:func:`_page_open`)."""
    _need_jack()
    known = {*LOADS, REFERENCE, C_REFERENCE, LATENCY}
    unknown = sorted(set(loads) - known)
    if unknown:
        raise BendingError(f"unknown loads {unknown}: choose from {sorted(known)}")
    search = search or []
    ranges = _parameters(model, preset, search, latency)
    served = [load for load in loads if load in LOADS]
    rows: list[Row] = []
    latencies: list[Latency] = []
    for block in blocks:
        with _jack(period or block, jack_rate) as name, JackXruns(name) as jack:
            if C_REFERENCE in loads:
                for load in ("0", *(load for load in served if load != "0")):
                    rows.append(_c_reference(name, jack, block, seconds, load, ranges))
                    progress(rows[-1])
            for mode in modes:
                web = _free_port() if page else None
                extra = ("--latency-mode", mode, *serve_args)
                extra += ("--oscquery-port", str(web)) if web else ()
                with contextlib.ExitStack() as stack:
                    osc = stack.enter_context(
                        _served(model, preset, block, name, search, latency=latency, extra=extra)
                    )
                    label = _mode_label(osc, mode)
                    if modulators:
                        label += f" + 4 modulators, {_modulated(osc)} routes"
                    if web:
                        stack.enter_context(_page_open(web, seconds * len(served)))
                        label += " + page"
                    for load in served:
                        rows.append(_measure(osc, jack, block, label, load, seconds, ranges))
                        progress(rows[-1])
                    if LATENCY in loads:
                        latencies.append(_latency(osc, name, block, label, jack_rate))
                        progress(latencies[-1])
            if REFERENCE in loads:
                here = [r for r in rows if r.block == block and r.mode.split("(")[0] in modes]
                work_ms = here[-1].p50_ms if here else 0.25
                rows.append(_reference(name, jack, block, seconds, work_ms))
                progress(rows[-1])
    return [*rows, *latencies]


def _mode_label(osc: _Osc, mode: str) -> str:
    """The mode as the table shows it: ``ring(N)`` for the ring N blocks ahead (its banner's
    figure, which the default chooses from the model's compute)."""
    found = re.search(r"ring mode \((\d+) blocks? ahead", "".join(osc.output))
    return f"{mode}({found[1]})" if found else mode


def format_rows(rows: list[Row | Latency]) -> str:
    """The rows as a table, the latency rows as a second one."""
    latencies = [row for row in rows if isinstance(row, Latency)]
    rows = [row for row in rows if isinstance(row, Row)]
    text = _table(rows)
    if latencies:
        headers = [
            "block", "mode", "path ms", "path frames", "impulse frames", "impulse ms",
            "control p50 ms", "control max ms", "control trials", "model ms",
            "reported in-out ms", "measured in-out ms",
        ]  # fmt: skip
        table = [list(vars(row).values()) for row in latencies]
        text += "\n\n" + tabulate(table, headers=headers, floatfmt=".2f")
    return text


def _table(rows: list[Row]) -> str:
    headers = [
        "block", "mode", "load", "sent", "received", "coalesced", "dropped", "JACK xruns",
        "xruns", "callback xruns", "underruns", "late",
        "drained ms", "final values", "compute p50 ms", "p99 ms", "max ms", "jitter p99 ms",
        "jitter max ms",
    ]  # fmt: skip
    table = [list(vars(row).values()) for row in rows]
    return tabulate(table, headers=headers, floatfmt=".2f")


def _parameters(
    model: str, preset: str | None, search: list[str], latency: int | None = None
) -> list[tuple]:
    """The addresses the client sends: each parameter of the preset's ops, in its range (capped
    to musical values), and the output gain."""
    from ..bending.ops import OPS

    loaded = load_model(model, search=search, latency=latency)
    chosen = preset_for(loaded, preset)
    ranges = [("/engine/gain", 0.5, 1.0)]
    if chosen is not None:
        for op_id, spec in load_preset(chosen).config.get("ops", {}).items():
            for name, param in OPS[spec["op"]].params.items():
                low, high = max(param.low, 0.0), min(param.high, 1.0)
                ranges.append((f"/bend/{op_id}/{name}", low, max(low, high * 0.5)))
    return ranges


class _Osc:
    """The server's OSC port, a socket for its replies, its process and its last output lines."""

    def __init__(
        self, port: int, replies: socket.socket, server: subprocess.Popen, output: deque[str]
    ) -> None:
        self.port, self.replies, self.server, self.output = port, replies, server, output

    def ask(
        self, address: str, args: tuple = (), reply: str | None = None, errors: list | None = None
    ) -> list:
        """Send ``address`` and return the arguments of its reply (at ``reply``, else at the
        same address), skipping other replies (``/error`` ones added to ``errors``)."""
        self.replies.sendto(build_msg(address, list(args)).dgram, ("127.0.0.1", self.port))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            self.replies.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = OscMessage(self.replies.recv(65536))
            except TimeoutError:
                break
            if message.address == (reply or address):
                return list(message.params)
            if errors is not None and message.address == "/error":
                errors.append(list(message.params))
        raise BendingError(f"the server did not answer {address}")

    def stats(self) -> dict:
        pairs = self.ask("/stats")
        return dict(zip(pairs[::2], pairs[1::2], strict=True))


def _measure(
    osc: _Osc, jack: JackXruns, block: int, mode: str, load: str, seconds: float, ranges: list
) -> Row:
    before, jack_before = osc.stats(), jack.count
    if load == "0":
        time.sleep(seconds)
        sent, final, drain_ms = 0, "-", 0.0
    else:
        value = 0.37 + 0.01 * len(load)  # a value no load message carries
        sent = _send_load(osc.port, load, seconds, ranges, value)
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
    counts = ("received", "coalesced", "dropped", "xruns", "callback_xruns", "underruns", "late")
    counts = (*counts, *LOSSES)
    delta = {k: int(after.get(k, 0) - before.get(k, 0)) for k in counts}
    causes = [f"{delta[k]} {k.removeprefix('dropped_')}" for k in LOSSES if delta[k]]
    dropped = f"{delta['dropped']} ({', '.join(causes)})" if causes else str(delta["dropped"])
    return Row(
        block, mode, load, sent, delta["received"], delta["coalesced"], dropped,
        jack.count - jack_before, delta["xruns"], delta["callback_xruns"], delta["underruns"],
        delta["late"], drain_ms,
        final,
        after["p50_ms"], after["p99_ms"], after["max_ms"],
        after["jitter_p99_ms"], after["jitter_max_ms"],
    )  # fmt: skip


@dataclass
class Latency:
    """What the server's audio path adds (reported, and an impulse's delay through it in bypass,
    in frames of the JACK server's rate, JACK's own loopback period taken off; the model's own
    latency is not in a bypassed path), and control latency: from sending a message to the
    first output period it changed, p50 and max."""

    block: int
    mode: str
    reported_ms: float
    reported_frames: int
    impulse_frames: str  #: each impulse's delay (all alike where nothing ran dry)
    impulse_ms: float
    control_p50_ms: float
    control_max_ms: float
    trials: int
    model_ms: float = 0.0  #: the model's own latency (measured at load, or its manifest's)
    total_reported_ms: float = 0.0  #: what the banner and /stats say: model + path
    total_measured_ms: float = 0.0  #: the impulse through the path, plus the model's own


_LOOPBACK = Path(__file__).parent.parent / "audio" / "jackclient.py"


def _latency(
    osc: _Osc, jack: str, block: int, mode: str, rate: int = 48000, trials: int = 24
) -> Latency:
    """The latency row of the server behind ``osc`` (in bypass while measured) on a JACK
    server of ``rate``."""
    from ..audio.jackclient import delays

    source, sink = _server_ports(jack)
    _send(osc, "/engine/bypass", 1)
    try:
        loop = loopback(jack, 1.1, "impulse", "out->in")
        heard = delays(loop["recorded"], rate // 2)
        through = loopback(jack, 2.6, "impulse", f"out->{source}", f"{sink}->in")
        measured = [d - heard[0] for d in delays(through["recorded"], rate // 2)]
        control = _control_latency(osc, jack, source, sink, trials, rate)
    finally:
        _send(osc, "/engine/bypass", 0)
        _send(osc, "/engine/gain", 1.0)
    stats = osc.stats()
    reported = float(stats["path_latency_ms"])
    model_ms = float(stats["latency_ms"]) - reported  # the model's own (measured at its load)
    median = float(np.median(measured)) if measured else float("nan")
    return Latency(
        block, mode, reported, round(reported * rate / 1e3),
        " ".join(str(d) for d in sorted(set(measured))), 1e3 * median / rate,
        float(np.median(control)), float(np.max(control)), len(control),
        model_ms, float(stats["latency_ms"]), 1e3 * median / rate + model_ms,
    )  # fmt: skip


def _send(osc: _Osc, address: str, *args: object) -> None:
    osc.replies.sendto(build_msg(address, list(args)).dgram, ("127.0.0.1", osc.port))


def _modulated(osc: _Osc, routes: int = 8) -> int:
    """Four modulators (an LFO, a drift, a step sequence, a follower of the input) driving
    ``routes`` routes round the parameters a modulator can drive there (the LFO tries each
    of the output gain, mix and every op parameter; the others share what it could drive).
    Returns the routes made."""
    kinds = {"lfo": ("rate", 2.0), "drift": ("rate", 1.0), "steps": ("bpm", 120.0),
             "follower": ("gain", 2.0)}  # fmt: skip
    for kind, (name, value) in kinds.items():
        _send(osc, "/mod/add", f"stress_{kind}", kind, name, value)
    usable = []
    for address in ["/engine/gain", "/engine/mix", *osc.ask("/list", ("bends",), "/list/bends")]:
        errors: list = []
        _send(osc, "/mod/stress_lfo/route", address, 0.01)
        osc.ask("/ping", reply="/pong", errors=errors)  # a route refused (a weight's op) errs
        if not errors:
            usable.append(address)
        if len(usable) == routes:
            break
    others = [f"stress_{kind}" for kind in kinds if kind != "lfo"]
    for index in range(routes - len(usable)):
        address = usable[index % len(usable)]
        _send(osc, f"/mod/{others[index % len(others)]}/route", address, 0.01)
    if osc.ask("/mod/list") != [len(kinds)]:
        raise BendingError("the server did not take the stress's modulators")
    return routes


def _free_port() -> int:
    """A TCP port free on the loopback now (for the server's OSCQuery service)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _page_open(port: int, seconds: float) -> Iterator[None]:
    """The control page of the server whose OSCQuery service is on ``port``, open in a headless
    Chromium (driven by playwright) until the block ends, its meters on as a performer's are;
    a page that did not follow the server (fewer meter updates than half their rate over
    ``seconds``) is an error: the figures would not be the page's."""
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        raise BendingError("stress --page needs playwright (pip) and Chromium (Debian: chromium)")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1300})
            page.goto(f"http://127.0.0.1:{port}/ui")
            page.wait_for_selector("body[data-ready]", timeout=20_000)
            page.wait_for_function("() => window.bendserver.meters >= 1", timeout=10_000)
            before = page.evaluate("window.bendserver.meters")
            yield
            meters = page.evaluate("window.bendserver.meters") - before
        finally:
            browser.close()
    if meters < METER_RATE * seconds / 2:
        raise BendingError(f"the page had {meters} meter updates in {seconds:g} s: not following")


def _server_ports(jack: str) -> tuple[str, str]:
    """The served server's JACK input and output (PortAudio's client, the only one)."""
    listing = subprocess.run(["jack_lsp"], capture_output=True, text=True, env=_jack_env(jack))
    ports = listing.stdout.split()
    inputs = [p for p in ports if p.startswith("PortAudio") and ":in_" in p]
    outputs = [p for p in ports if p.startswith("PortAudio") and ":out_" in p]
    if not inputs or not outputs:
        raise BendingError(f"the server's JACK ports are not there: {ports}")
    return inputs[0], outputs[0]


def loopback(jack: str, seconds: float, kind: str, *links: str, during=None) -> dict:
    """Run the loopback client (:mod:`bendserver.audio.jackclient`) for ``seconds``, calling
    ``during()`` once it is connected; what it recorded."""
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "loop.npz"
        client = subprocess.Popen(
            [sys.executable, str(_LOOPBACK), jack, str(seconds), kind, str(target), *links],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_jack_env(jack),
        )  # fmt: skip
        ready = client.stdout.readline()
        if ready.strip() != "ready":
            client.kill()
            raise BendingError(f"the loopback client failed: {client.stderr.read()[-500:]}")
        if during is not None:
            during()
        if client.wait(timeout=seconds + 30) != 0:
            raise BendingError(f"the loopback client failed: {client.stderr.read()[-500:]}")
        with np.load(target) as data:
            return {key: data[key] for key in data.files}


def _control_latency(
    osc: _Osc, jack: str, source: str, sink: str, trials: int, rate: int
) -> list[float]:
    """Milliseconds from sending /engine/gain 0 (then 1, ...) to the first period of the
    output that changed, with a tone through the server."""
    import random

    from ..audio.jackclient import jack_now

    sent: list[tuple[float, float]] = []

    def toggle() -> None:
        time.sleep(0.5)  # the tone through
        for trial in range(trials):
            time.sleep(0.1 + random.random() * 0.05)
            gain = float(trial % 2)  # from 1: 0, 1, 0, ...
            sent.append((jack_now(), gain))
            _send(osc, "/engine/gain", gain)

    seconds = 0.5 + trials * 0.15 + 0.5
    loop = loopback(jack, seconds, "tone", f"out->{source}", f"{sink}->in", during=toggle)
    recorded, cycles = loop["recorded"], loop["cycles"]
    period = int(cycles[1, 0] - cycles[0, 0])
    cycles = cycles[cycles[:, 0] + period <= len(recorded)]  # those it had room to record
    levels = np.array([np.abs(recorded[int(f) : int(f) + period]).max() for f, _ in cycles])
    loud = np.percentile(levels, 90)
    found = []
    for at, gain in sent:
        # Heard one cycle late (JACK's loopback): a cycle's output left the server a period
        # before the loopback client read it.
        times = cycles[:, 1] - period / rate
        later = np.nonzero(times >= at - period / rate)[0]
        changed = [
            i for i in later if (levels[i] < 0.9 * loud if gain == 0.0 else levels[i] > 0.1 * loud)
        ]
        if changed:
            found.append(1e3 * max(0.0, times[changed[0]] - at))
    return found


def _jack_env(jack: str) -> dict[str, str]:
    return {**os.environ, "JACK_DEFAULT_SERVER": jack, "JACK_NO_START_SERVER": "1"}


def _send_load(port: int, load: str, seconds: float, ranges: list, value: float) -> int:
    """Run the load client (:mod:`bendserver.measure.loadgen`) of ``load`` against ``port`` (with
    ``value`` as the final values); how many messages it sent."""
    rate, duration = LOADS[load]
    duration = duration * seconds if duration > 0 else duration
    client = subprocess.run(
        [sys.executable, str(_LOADGEN), str(port), str(rate), str(duration), str(value)]
        + [f"{a}={lo}:{hi}" for a, lo, hi in ranges],
        capture_output=True,
        text=True,
    )
    return int(client.stdout.split()[1])


def _c_reference(
    jack: str, watch: JackXruns, block: int, seconds: float, load: str, ranges: list
) -> Row:
    """``jack_simple_client`` for ``seconds`` on JACK server ``jack``, with the load client of
    ``load`` sending meanwhile to a port nobody reads (the kernel drops what its buffer cannot
    hold): JACK's xruns meanwhile."""
    if shutil.which("jack_simple_client") is None:
        raise BendingError("the C reference row needs jack_simple_client (Debian: jackd2)")
    before = watch.count
    client = subprocess.Popen(
        ["jack_simple_client", "bendstress-c", jack],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_jack_env(jack),
    )
    sent = 0
    try:
        if load == "0":
            time.sleep(seconds)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as nobody:
                nobody.bind(("127.0.0.1", 0))
                sent = _send_load(nobody.getsockname()[1], load, seconds, ranges, 0.5)
    finally:
        client.terminate()
        client.wait(timeout=10)
    label = C_REFERENCE if load == "0" else f"{C_REFERENCE}+{load}"
    return Row(
        block, "C client", label, sent, 0, 0, "-", watch.count - before, -1, -1, 0, 0, 0.0, "-",
        0.0, 0.0, 0.0, 0.0, 0.0,
    )  # fmt: skip


def _reference(jack: str, watch: JackXruns, block: int, seconds: float, work_ms: float) -> Row:
    """The reference client's row (:mod:`bendserver.measure.reference`) on JACK server ``jack``."""
    env = _jack_env(jack)
    before = watch.count
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
        block, "numpy client", REFERENCE, 0, 0, 0, "-", watch.count - before,
        int(figures["xruns"]), int(figures["xruns"]), 0, int(figures["late"]), 0.0, "-",
        *(float(figures[k]) for k in ("p50_ms", "p99_ms", "max_ms", "jitter_p99_ms",
                                      "jitter_max_ms")),
    )  # fmt: skip


@contextlib.contextmanager
def _jack(block: int, rate: int = 48000) -> Iterator[str]:
    """A JACK server on the dummy driver at ``rate`` Hz and ``block`` frames."""
    name = f"bendstress{os.getpid()}x{block}"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        ["jackd", "-n", name, "-d", "dummy", "-r", str(rate), "-p", str(block)],
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
    model: str,
    preset: str | None,
    block: int,
    jack: str | None,
    search: list[str],
    home: str | None = None,
    latency: int | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[_Osc]:
    """``bendserver serve`` on the JACK server ``jack`` (None: the null backend), in its own
    process, until the block ends; its output is read on (the last lines kept), so that it
    never waits on a full pipe. ``home``: its user folder (presets it saves), else the
    caller's."""
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "bendserver.cli", "serve", "-m", model,
        "--audio", "jack" if jack else "null", *(["--input", "jack"] if jack else []),
        "--block", str(block), "--osc-port", str(port),
        "--reply-port", str(replies.getsockname()[1]), *(["-p", preset] if preset else []),
        *(word for folder in search for word in ("--models-dir", folder)),
        *(["--latency", str(latency)] if latency is not None else []), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if jack:
        env.update(JACK_DEFAULT_SERVER=jack, JACK_NO_START_SERVER="1")
    if home is not None:
        env["BENDSERVER_HOME"] = home
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
        output: deque[str] = deque(banner, maxlen=50)
        threading.Thread(target=output.extend, args=(server.stdout,), daemon=True).start()
        time.sleep(1.0)  # past the first blocks
        yield _Osc(port, replies, server, output)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        replies.close()


# -- the fuzz: random datagrams against the live server -----------------------------------------

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
    report = FuzzReport(block, seconds, rate, seed, "JACK dummy" if _has_jack() else "null")
    with contextlib.ExitStack() as stack:
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="bendserver-fuzz-"))
        jack = stack.enter_context(_jack(block)) if _has_jack() else None
        osc = stack.enter_context(_served(model, preset, block, jack, search or [], home, latency))
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


def _has_jack() -> bool:
    return all(shutil.which(name) for name in ("jackd", "jack_wait"))


def _need_jack() -> None:
    if not _has_jack():
        raise BendingError("jackd and jack_wait are missing: install Debian's jackd2")


def _fuzz(osc: _Osc, report: FuzzReport) -> FuzzReport:
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
    osc.replies.sendto(build_msg(FINAL_ADDRESS, [value]).dgram, ("127.0.0.1", osc.port))
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


def _fuzz_addresses(osc: _Osc) -> list[str]:
    """The server's addresses with their ``<names>`` filled in (each op, each bend, an
    attribute), less those the checks use."""
    patterns = osc.ask("/list", ("addresses",), "/list/addresses")
    ops = osc.ask("/list", ("ops",), "/list/ops") or ["none"]
    bends = osc.ask("/list", ("bends",), "/list/bends")
    filled = {*bends, *(f"/bend/{op}/enable" for op in ops), "/attr/gain"}
    filled |= {f"/get{a}" for a in (*bends, "/engine/mix", "/version", "/interp")}
    filled |= {p for p in patterns if "<" not in p}
    return sorted(filled - set(_CHECKS))


def _ping_while(osc: _Osc, fuzzer: subprocess.Popen) -> tuple[list[float], int]:
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


def _settle(osc: _Osc, seconds: float = 60.0) -> None:
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


def _ended(osc: _Osc) -> str:
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
