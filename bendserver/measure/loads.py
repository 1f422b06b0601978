"""The loads ``bendserver stress`` puts on a served server: OSC messages at a rate from the load
client (:mod:`bendserver.measure.loadgen`) over the preset's parameters, and modulators.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..errors import BendingError
from ..loader import load_model
from ..presets.library import load_preset, preset_for
from .served import Osc

#: Loads: a name and (messages a second, seconds; a negative seconds value means that many
#: thousand messages, sent as fast as one client can).
LOADS = {
    "0": (0.0, 0.0),
    "1k": (1000.0, 1.0),
    "10k": (10000.0, 1.0),
    "20k": (20000.0, 1.0),
    "burst": (0.0, -20.0),
}


_LOADGEN = Path(__file__).parent / "loadgen.py"


def parameters(
    model: str, preset: str | None, search: list[str], latency: int | None = None
) -> list[tuple]:
    """The addresses the client sends: each parameter of the preset's ops, in its range (capped
    to musical values), and the output gain."""
    from ..bending.ops import OPS, Modulate, Oscillate

    loaded = load_model(model, search=search, latency=latency)
    chosen = preset_for(loaded, preset)
    ranges = [("/engine/gain", 0.5, 1.0)]
    if chosen is not None:
        for op_id, spec in load_preset(chosen).config.get("ops", {}).items():
            op = OPS[spec["op"]]
            if op is Oscillate and spec.get("options", {}).get("over", "time") == "time":
                op = Modulate  # live, an LFO modulator drives it (docs/modulation.md)
            for name, param in op.params.items():
                low, high = max(param.low, 0.0), min(param.high, 1.0)
                ranges.append((f"/bend/{op_id}/{name}", low, max(low, high * 0.5)))
    return ranges


def send_load(port: int, load: str, seconds: float, ranges: list, value: float) -> int:
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


def modulate(osc: Osc, routes: int = 8) -> int:
    """Four modulators (an LFO, a drift, a step sequence, a follower of the input) driving
    ``routes`` routes round the parameters a modulator can drive there (the LFO tries each
    of the output gain, mix and every op parameter; the others share what it could drive).
    Returns the routes made."""
    kinds = {"lfo": ("rate", 2.0), "drift": ("rate", 1.0), "steps": ("bpm", 120.0),
             "follower": ("gain", 2.0)}  # fmt: skip
    (before,) = osc.ask("/mod/list")  # the preset's own (its LFO op's, for one)
    for kind, (name, value) in kinds.items():
        osc.send("/mod/add", f"stress_{kind}", kind, name, value)
    usable = []
    for address in ["/engine/gain", "/engine/mix", *osc.ask("/list", ("bends",), "/list/bends")]:
        errors: list = []
        osc.send("/mod/stress_lfo/route", address, 0.01)
        osc.ask("/ping", reply="/pong", errors=errors)  # a route refused (a weight's op) errs
        if not errors:
            usable.append(address)
        if len(usable) == routes:
            break
    others = [f"stress_{kind}" for kind in kinds if kind != "lfo"]
    for index in range(routes - len(usable)):
        address = usable[index % len(usable)]
        osc.send(f"/mod/{others[index % len(others)]}/route", address, 0.01)
    if osc.ask("/mod/list") != [before + len(kinds)]:
        raise BendingError("the server did not take the stress's modulators")
    return routes
