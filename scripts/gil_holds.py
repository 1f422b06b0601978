"""The interpreter holds of a live model load: how long the control thread kept the GIL from the
audio while ``/model/load`` loaded, traced, optimised and warmed up another model.

Builds an engine of ``--from`` in a rack played block by block in real time by a player thread
(silence in, as the ring's compute thread plays, one torch thread), and loads ``--to`` with the
server's :class:`~bendserver.switching.ModelSwitcher` on the main thread, in slices as the control
worker runs it (its collector handling, the compute gate). Meanwhile a sampler thread sleeps
``--every`` ms at a time and records how late it got the interpreter back: a late wake is a hold
by another thread (or the machine's load: compare with the figures before the load). The main
thread's builtin C calls (and collections, through ``gc.callbacks``) are timed with
``sys.setprofile``: each one's own CPU time (the calls inside it taken out), which the machine's
load does not change, and the sampler's wakes during it. Late wakes no call covers are listed
with the line the loading thread was at when the sampler got the interpreter back.

A call counts as a hold when the sampler got in at most twice (the profile function's own lines
at its ends); on a busy machine a sampler that found no free core looks the same, so a Python
stretch can show up too: the C calls that hold by nature (``compile``, ``torch.jit.load``) are the
ones to read. Prints the sampler's lateness before and during the load (p50, p99, max, counts
over 1 and 2 ms), the player's late blocks and compute times, the load's steps, and the
``--top`` longest holds with what held them.

Usage: ``python scripts/gil_holds.py [--from drive] [--to wavae] [--block 256] [--trust-model]``
(``--to`` may be a ``.ts`` file: its load converts it to a graph; ``--block 0``: the model's own,
e.g. ``--from rave_causal_streaming.ts --to rave_v2_streaming.ts --trust-model --block 0``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time

import numpy as np
import torch

from bendserver.audio.gate import ComputeGate
from bendserver.engine.rack import Rack
from bendserver.osc.worker import young_collections
from bendserver.serve import ServeOptions
from bendserver.serve.server import SWITCH_INTERVAL, _engine
from bendserver.slices import sliced
from bendserver.switching import ModelSwitcher

#: Shortest C call kept (seconds): shorter ones cannot make a late wake worth naming.
KEPT = 0.0003


class Sampler(threading.Thread):
    """Sleeps ``every`` seconds at a time; records (when it should have woken, when it did)."""

    def __init__(self, every: float) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.wakes: list[tuple[float, float]] = []
        self.running = True
        #: A thread whose place is noted at each wake over 1 ms late (wake index: its stack).
        self.watched: int | None = None
        self.places: dict[int, str] = {}

    def run(self) -> None:
        clock = time.perf_counter
        while self.running:
            due = clock() + self.every
            time.sleep(self.every)
            woke = clock()
            if self.watched is not None and woke - due > 0.001:
                self.places[len(self.wakes)] = _stack(sys._current_frames().get(self.watched))
            self.wakes.append((due, woke))


class Player(threading.Thread):
    """Plays the rack one block per block period (silence in), under the compute gate; records
    how late each block's compute finished against its deadline (the block period)."""

    def __init__(self, rack: Rack, gate: ComputeGate) -> None:
        super().__init__(daemon=True)
        self.rack, self.gate = rack, gate
        self.period = rack.block / rack.sample_rate
        self.late: list[tuple[float, float]] = []  # (deadline, finished)
        self.compute: list[float] = []  # each block's compute, seconds
        self.running = True

    def run(self) -> None:
        silence = np.zeros((self.rack.in_channels, self.rack.block), np.float32)
        clock = time.perf_counter
        start = clock()
        k = 0
        while self.running:
            k += 1
            began = clock()
            with self.gate:
                self.rack.process(silence)
            finished = clock()
            self.compute.append(finished - began)
            self.late.append((start + k * self.period, finished))
            wait = start + k * self.period - clock()
            if wait > 0:
                time.sleep(wait)


class CallTimer:
    """A ``sys.setprofile`` function timing the builtin C calls of one thread."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.collecting: tuple[float, float] | None = None
        self.stack: list[tuple[str, str, float, float]] = []
        #: t0, t1 (wall), cpu seconds of this thread, name, where, depth
        self.calls: list[tuple[float, float, float, str, str, int]] = []

    def __call__(self, frame, event: str, arg) -> None:
        if event == "c_call":
            name = f"{getattr(arg, '__module__', None) or ''}.{getattr(arg, '__qualname__', arg)}"
            where = f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"
            generator = getattr(frame.f_locals.get("self"), "gen", None)
            if name == "builtins.next" and generator is not None:  # a context manager's body
                where += (
                    f" of {generator.gi_code.co_qualname} ({_short(generator.gi_code.co_filename)})"
                )
            self.stack.append((name, where, time.perf_counter(), time.thread_time()))
        elif event in ("c_return", "c_exception") and self.stack:
            now, cpu = time.perf_counter(), time.thread_time()
            name, where, t0, cpu0 = self.stack.pop()
            if now - t0 >= KEPT:
                self.calls.append((t0, now, cpu - cpu0, name, where, len(self.stack)))

    def collection(self, phase: str, info: dict) -> None:
        """A ``gc.callbacks`` entry: a collection is a hold no call event shows."""
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self.collecting = (time.perf_counter(), time.thread_time())
        elif self.collecting is not None:
            (t0, cpu0), self.collecting = self.collecting, None
            name = f"gc.collect({info['generation']})"
            self.calls.append(
                (t0, time.perf_counter(), time.thread_time() - cpu0, name, "(the collector)",
                 len(self.stack))
            )  # fmt: skip


def _short(path: str) -> str:
    for marker in ("bendserver/", "site-packages/", "lib/python3"):
        if marker in path:
            return path[path.index(marker) :]
    return path


def _stack(frame, depth: int = 3) -> str:
    lines = []
    while frame is not None and len(lines) < depth:
        lines.append(f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(lines)


def lateness(wakes: list[tuple[float, float]]) -> np.ndarray:
    return np.array([1000 * (woke - due) for due, woke in wakes]) if wakes else np.zeros(1)


def summary(ms: np.ndarray) -> str:
    return (
        f"p50 {np.median(ms):.3f} p99 {np.percentile(ms, 99):.3f} max {ms.max():.3f} ms, "
        f"{int((ms > 1).sum())} over 1 ms, {int((ms > 2).sum())} over 2 ms of {len(ms)}"
    )


def blocks(seconds: list[float]) -> str:
    ms = 1000 * np.array(seconds or [0.0])
    return f"p50 {np.median(ms):.2f} max {ms.max():.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="old", default="drive")
    parser.add_argument("--to", dest="new", default="wavae")
    parser.add_argument("--block", type=int, default=256, help="0: the model's own")
    parser.add_argument("--trust-model", action="store_true", help="skip the probe")
    parser.add_argument("--every", type=float, default=0.5, help="the sampler's sleep, ms")
    parser.add_argument("--top", type=int, default=12, help="holds listed")
    parser.add_argument("--before", type=float, default=1.0, help="seconds sampled before")
    args = parser.parse_args(argv)
    block = args.block or None
    options = ServeOptions(model=args.old, preset="none", block=block, trust_model=True)
    rack, _ = _engine(options)  # the rack that plays; the load swaps its node
    gate = ComputeGate()

    switcher = ModelSwitcher(rack, trust=args.trust_model, fade_ms=options.xfade_ms)
    gc.collect()
    gc.freeze()  # as a server does before it plays
    sys.setswitchinterval(SWITCH_INTERVAL)
    player, sampler = Player(rack, gate), Sampler(args.every / 1000)
    player.start()
    sampler.start()
    time.sleep(args.before)
    quiet = len(sampler.wakes)
    blocks_before = len(player.late)

    def between() -> None:  # the control worker's between slices, as it runs in ring mode
        gate.wait_open(0.05)
        if gc.isenabled():
            gc.disable()
        young_collections()

    timer = CallTimer()
    sampler.watched = threading.get_ident()
    began = time.perf_counter()
    sys.setprofile(timer)
    gc.callbacks.append(timer.collection)
    try:
        with sliced(between, pause=lambda: gate.computing):
            loaded = switcher.load(args.new, "none")
    finally:
        sys.setprofile(None)
        gc.callbacks.remove(timer.collection)
        gc.enable()
    ended = time.perf_counter()
    sampler.running = player.running = False
    sampler.join()
    player.join()
    during = [w for w in sampler.wakes[quiet:] if w[0] < ended]
    late_blocks = [1000 * (done - due) for due, done in player.late[blocks_before:] if done > due]
    probe = "not probed" if loaded.probe_s is None else f"probe {loaded.probe_s:.2f} s"
    print(
        f"load {args.old} -> {args.new} at block {rack.block} ({os.cpu_count()} cores, one torch "
        f"thread, switch interval {SWITCH_INTERVAL * 1000:g} ms): {probe}, load "
        f"{loaded.load_s:.2f} s, warm-up {loaded.warm_s:.2f} s, in all {ended - began:.2f} s "
        f"(profiled)\n"
        f"sampler every {args.every:g} ms, lateness before the load: "
        f"{summary(lateness(sampler.wakes[:quiet]))}\n"
        f"during the load: {summary(lateness(during))}\n"
        f"player: {len(late_blocks)} of {len(player.late) - blocks_before} blocks finished past "
        f"their period during the load"
        + (f" (max {max(late_blocks):.2f} ms past)" if late_blocks else "")
        + f"; compute ms before: {blocks(player.compute[:blocks_before])}, during: "
        f"{blocks(player.compute[blocks_before:])}"
    )
    woke = np.array([w[1] for w in during])
    holds = []
    for index, (t0, t1, cpu, name, where, depth) in enumerate(timer.calls):
        # its own cpu: less that of the calls made inside it (recorded before it, one deeper)
        own = cpu - sum(
            c[2] for c in timer.calls[:index] if c[5] == depth + 1 and t0 <= c[0] and c[1] <= t1
        )
        wakes = int(((woke > t0) & (woke < t1)).sum())
        # a call that lets the interpreter go lets the sampler in; the profile function's own
        # lines around the call may let it in once at either end
        if own > 0.0005 and wakes <= 2:
            holds.append((own, wakes, t1 - t0, name, where))
    holds.sort(reverse=True)
    print(
        f"the {args.top} C calls of the loading thread that held the interpreter longest: its "
        "own cpu ms (the calls inside it taken out: the machine's load does not count), then "
        "its wall ms and the sampler's wakes inside it:"
    )
    for own, wakes, wall, name, where in holds[: args.top]:
        print(f"  {1000 * own:6.2f}  {name} at {where}: wall {1000 * wall:.2f}, {wakes} wakes")
    print(
        "the longest late wakes with no C call of the loading thread around them (the "
        "machine's load, or work no call event shows):"
    )
    bare = []
    for index, (due, late_woke) in enumerate(during):
        if late_woke - due > 0.002 and not any(
            c[0] <= due and c[1] >= late_woke for c in timer.calls
        ):
            bare.append((late_woke - due, sampler.places.get(index + quiet, "?")))
    for late, place in sorted(bare, reverse=True)[:5]:
        print(f"  {1000 * late:6.2f}  the loader at {place}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
