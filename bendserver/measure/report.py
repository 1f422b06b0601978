"""The table ``bendserver stress`` prints: a row per (block, mode, load), the latency rows apart."""

from __future__ import annotations

from dataclasses import dataclass

from tabulate import tabulate

from .latency import Latency


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
