"""The latency rows of ``bendserver stress``: what the server's audio path adds (an impulse through
it) and control latency (a message to the output changing), heard by a loopback JACK client.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BendingError
from .served import Osc, jack_env

#: Not a load: the latency the server adds, an impulse through it (in bypass: the model's noise
#: would blur it; the rings, resamplers, gain and fuse are on the path), and control latency:
#: from an OSC message sent to the output changing, a tone through the server, /engine/gain
#: toggled at random phases of the block. Both heard by a loopback JACK client.
LATENCY = "latency"


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


def latency_row(
    osc: Osc, jack: str, block: int, mode: str, rate: int = 48000, trials: int = 24
) -> Latency:
    """The latency row of the server behind ``osc`` (in bypass while measured) on a JACK
    server of ``rate``."""
    from ..audio.jackclient import delays

    source, sink = _server_ports(jack)
    osc.send("/engine/bypass", 1)
    try:
        loop = loopback(jack, 1.1, "impulse", "out->in")
        heard = delays(loop["recorded"], rate // 2)
        through = loopback(jack, 2.6, "impulse", f"out->{source}", f"{sink}->in")
        measured = [d - heard[0] for d in delays(through["recorded"], rate // 2)]
        control = _control_latency(osc, jack, source, sink, trials, rate)
    finally:
        osc.send("/engine/bypass", 0)
        osc.send("/engine/gain", 1.0)
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


def _server_ports(jack: str) -> tuple[str, str]:
    """The served server's JACK input and output (PortAudio's client, the only one)."""
    listing = subprocess.run(["jack_lsp"], capture_output=True, text=True, env=jack_env(jack))
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
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=jack_env(jack),
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
    osc: Osc, jack: str, source: str, sink: str, trials: int, rate: int
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
            osc.send("/engine/gain", gain)

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
