"""A reference JACK client, run as a script in its own process (numpy and sounddevice only).

It does a fixed amount of plain numpy work per block, sized to the server's median compute time,
with no torch, no OSC and no bendserver, so that the xruns and late blocks it sees are what the
machine and the JACK server do to any client; ``bendserver stress`` prints it as a row beside the
server's. ``python reference.py BLOCK SECONDS WORK_MS`` prints one line of ``name=value`` figures:
xruns, late (blocks whose work took longer than the block lasts), work p50/p99/max and
callback-start jitter p99/max in milliseconds.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import sounddevice as sd

RATE = 48000
#: The callback status flags counted as xruns, as the server's callback counts them.
XRUN_FLAGS = ("input_underflow", "input_overflow", "output_underflow", "output_overflow")


def work_unit() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Operands of one unit of work: a small matrix product into a preallocated output."""
    rng = np.random.default_rng(0)
    left, right = (rng.random((48, 48), dtype=np.float32) for _ in range(2))
    return left, right, np.empty_like(left)


def units_for(milliseconds: float, operands: tuple) -> int:
    """How many units take ``milliseconds`` here (the median of many timed units)."""
    times = []
    for _ in range(2000):
        started = time.perf_counter()
        np.dot(*operands[:2], out=operands[2])
        times.append(time.perf_counter() - started)
    return max(1, round(milliseconds / (1e3 * float(np.median(times)))))


def jack_device() -> int:
    """The index of the first device of PortAudio's JACK host API."""
    for device in sd.query_devices():
        if "JACK" in sd.query_hostapis(device["hostapi"])["name"]:
            return device["index"]
    raise SystemExit("no JACK device: is a JACK server running?")


def run(block: int, seconds: float, work_ms: float) -> dict[str, float]:
    """Play ``seconds`` through JACK doing ``work_ms`` of work per block; the figures."""
    operands = work_unit()
    units = units_for(work_ms, operands)
    count = int(seconds * RATE / block) + 64
    starts, works = np.zeros(count), np.zeros(count)
    state = {"calls": 0, "xruns": 0}

    def callback(indata, outdata, frames, info, status) -> None:
        started = time.perf_counter()
        if any(getattr(status, flag) for flag in XRUN_FLAGS):
            state["xruns"] += 1
        for _ in range(units):
            np.dot(*operands[:2], out=operands[2])
        outdata[:] = indata
        call = state["calls"]
        if call < count:
            starts[call], works[call] = started, time.perf_counter() - started
        state["calls"] = call + 1

    stream = sd.Stream(RATE, block, jack_device(), 2, "float32", callback=callback)
    with stream:
        time.sleep(seconds)
    calls = min(state["calls"], count)
    work = 1e3 * works[:calls]
    jitter = np.abs(1e3 * np.diff(starts[:calls]) - 1e3 * block / RATE)
    return {
        "xruns": state["xruns"],
        "late": int((work > 1e3 * block / RATE).sum()),
        "p50_ms": float(np.median(work)),
        "p99_ms": float(np.percentile(work, 99)),
        "max_ms": float(work.max()),
        "jitter_p99_ms": float(np.percentile(jitter, 99)),
        "jitter_max_ms": float(jitter.max()),
    }


if __name__ == "__main__":
    figures = run(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
    print(" ".join(f"{name}={value}" for name, value in figures.items()), flush=True)
