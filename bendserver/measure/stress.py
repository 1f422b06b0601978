"""``bendserver stress``: the live server under OSC load on a real audio clock, as a table.

For each block size it starts a JACK server on the dummy driver (a real clock, no sound card),
``bendserver serve`` on it with the model and its preset, and for each load a client process
(:mod:`bendserver.measure.loadgen`) sending the preset's parameters; after each load the client
sends one final value per address, and the table says whether the server ended with those
values, beside xruns, late blocks, messages received / coalesced / dropped, compute and
callback-start jitter. Anyone can run it (Debian: ``jackd2``); its figures are the ones the docs
quote, measured, never computed.

Its parts: the served server (:mod:`.served`), the loads (:mod:`.loads`), the latency rows
(:mod:`.latency`), the baseline clients (:mod:`.baselines`), the table (:mod:`.report`) and
``--fuzz`` (:mod:`.fuzz`).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable

from ..audio.jackclient import JackXruns
from ..errors import BendingError
from ..osc.intake import LOSSES
from .baselines import C_REFERENCE, REFERENCE, c_client_row, numpy_client_row
from .fuzz import FuzzReport, format_fuzz, run_fuzz
from .latency import LATENCY, Latency, latency_row
from .loads import LOADS, modulate, parameters, send_load
from .report import Row, format_rows
from .served import Osc, free_port, jack_server, need_jack, page_open, serving

#: What ``bendserver stress`` runs: under load (here) and ``--fuzz`` (:mod:`.fuzz`).
__all__ = ["FuzzReport", "Row", "format_fuzz", "format_rows", "run_fuzz", "run_stress"]

#: Seconds the final values of a load may take to play (a lost one never does).
FINAL_WAIT_S = 1.0


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
    four modulators on eight routes (:func:`modulate`); ``page``: the control page open in a
    headless Chromium on each server while its rows run (:func:`page_open`)."""
    need_jack()
    known = {*LOADS, REFERENCE, C_REFERENCE, LATENCY}
    unknown = sorted(set(loads) - known)
    if unknown:
        raise BendingError(f"unknown loads {unknown}: choose from {sorted(known)}")
    search = search or []
    ranges = parameters(model, preset, search, latency)
    served = [load for load in loads if load in LOADS]
    rows: list[Row] = []
    latencies: list[Latency] = []
    for block in blocks:
        with jack_server(period or block, jack_rate) as name, JackXruns(name) as jack:
            if C_REFERENCE in loads:
                for load in ("0", *(load for load in served if load != "0")):
                    rows.append(c_client_row(name, jack, block, seconds, load, ranges))
                    progress(rows[-1])
            for mode in modes:
                web = free_port() if page else None
                extra = ("--latency-mode", mode, *serve_args)
                extra += ("--oscquery-port", str(web)) if web else ()
                with contextlib.ExitStack() as stack:
                    osc = stack.enter_context(
                        serving(model, preset, block, name, search, latency=latency, extra=extra)
                    )
                    label = _mode_label(osc, mode)
                    if modulators:
                        label += f" + 4 modulators, {modulate(osc)} routes"
                    if web:
                        stack.enter_context(page_open(web, seconds * len(served)))
                        label += " + page"
                    for load in served:
                        rows.append(_measure(osc, jack, block, label, load, seconds, ranges))
                        progress(rows[-1])
                    if LATENCY in loads:
                        latencies.append(latency_row(osc, name, block, label, jack_rate))
                        progress(latencies[-1])
            if REFERENCE in loads:
                here = [r for r in rows if r.block == block and r.mode.split("(")[0] in modes]
                work_ms = here[-1].p50_ms if here else 0.25
                rows.append(numpy_client_row(name, jack, block, seconds, work_ms))
                progress(rows[-1])
    return [*rows, *latencies]


def _mode_label(osc: Osc, mode: str) -> str:
    """The mode as the table shows it: ``ring(N)`` for the ring N blocks ahead (its banner's
    figure, which the default chooses from the model's compute)."""
    found = re.search(r"ring mode \((\d+) blocks? ahead", "".join(osc.output))
    return f"{mode}({found[1]})" if found else mode


def _measure(
    osc: Osc, jack: JackXruns, block: int, mode: str, load: str, seconds: float, ranges: list
) -> Row:
    before, jack_before = osc.stats(), jack.count
    if load == "0":
        time.sleep(seconds)
        sent, final, drain_ms = 0, "-", 0.0
    else:
        value = 0.37 + 0.01 * len(load)  # a value no load message carries
        sent = send_load(osc.port, load, seconds, ranges, value)
        # The socket is first in, first out, and so are the intake and the worker: /stats is
        # answered once the server has read and dispatched all the client sent. A client
        # faster than the intake leaves a backlog in the socket's buffer; that time is shown.
        finished = time.monotonic()
        osc.stats()
        drain_ms = 1e3 * (time.monotonic() - finished)
        # /get answers the value playing: a change reaches the output once the blocks computed
        # ahead of it (the ring's, which a busy machine deepens) have played
        wanted = {a: lo + (hi - lo) * value for a, lo, hi in ranges}
        deadline = time.monotonic() + FINAL_WAIT_S
        while True:
            got = {a: osc.ask(f"/get{a}")[0] for a in wanted}
            settled = osc.stats()
            ok = all(math.isclose(got[a], v, abs_tol=1e-6) for a, v in wanted.items())
            if (ok and settled["pending"] == 0) or time.monotonic() > deadline:
                break
            time.sleep(block / 48000)
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
