"""MIDI control of the live server on a real audio clock (JACK's dummy driver, 48 kHz), measured.

1. learn, map, move: ``/midi/learn /bend/mask/prob`` over OSC, then a sender process moves CC 7
   on a JACK MIDI port, one distinct value every 50 ms; for each message, the time from its
   arrival (when the server's MIDI input read it) and from its sending to the start of the
   first block that plays it (p50/max, and how many block starts that was);
2. a flood of CC messages (default 1 000 a second for 60 s): the server's xruns (what JACK
   reported to the audio callback) and the lines of JACK's own log that name an xrun, with a
   quiet stretch of the same server before it as a baseline, messages read / coalesced, the
   final value, compute times;
3. a restart: the mapping saved with a preset, the server started again with that preset, the
   control moved: does the parameter follow?

Usage: ``python scripts/bench_midi.py [--block 256] [--rate 1000] [--seconds 60] [--quiet 15]``
(Debian: jackd2). The sender is a process of its own importing mido only, so that sending does
not compete with the server for the interpreter lock.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

RATE = 48000
SENDER = "bendbench"
CONTROL = 7


# -- the sender process ------------------------------------------------------------------------


def send(rate: float, count: int, first: int) -> None:
    """Open ``bendbench:out``, say ``ready``, wait for ``go`` on stdin, then send ``count`` CC
    7 values (``first``, then each one different from the one before) at ``rate`` a second;
    print each send time (``time.monotonic``) on one line at the end."""
    import mido

    backend = mido.Backend("mido.backends.rtmidi/UNIX_JACK")
    with backend.open_output("out", virtual=True, client_name=SENDER) as out:
        print("ready", flush=True)
        sys.stdin.readline()
        sent = []
        started = time.monotonic()
        for index in range(count):
            delay = started + index / rate - time.monotonic()
            if delay > 0.0005:
                time.sleep(delay)
            sent.append(time.monotonic())
            out.send(mido.Message("control_change", control=CONTROL, value=_value(first, index)))
        time.sleep(0.5)  # JACK delivers the last ones at its next cycles
        print(" ".join(f"{t:.6f}" for t in sent), flush=True)


def _value(first: int, index: int) -> int:
    """The ``index``-th value sent: ``first``, then steps of 37 (mod 128): never twice in a row."""
    return (first + 37 * index) % 128


@contextlib.contextmanager
def sender(jack: str, rate: float, count: int, first: int = 0) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(
        [sys.executable, __file__, "send", str(rate), str(count), str(first)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("the MIDI sender did not start")
        subprocess.run(
            ["jack_connect", "-s", jack, f"{SENDER}:out", "bendserver:midi_in"], check=True
        )
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def sent_times(process: subprocess.Popen) -> list[float]:
    process.stdin.write("go\n")
    process.stdin.flush()
    return [float(word) for word in process.stdout.readline().split()]


# -- the server --------------------------------------------------------------------------------


@contextlib.contextmanager
def jack_server(block: int) -> Iterator[tuple[str, Path]]:
    """A JACK server on the dummy driver; its name and its log file."""
    name = f"bendmidi{os.getpid()}"
    log = Path(tempfile.mkstemp(prefix="bendmidi-jack-", suffix=".log")[1])
    with log.open("w") as output:
        process = subprocess.Popen(
            ["jackd", "-n", name, "-d", "dummy", "-r", str(RATE), "-p", str(block)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        subprocess.run(["jack_wait", "-s", name, "-w", "-t", "10"], check=True, capture_output=True)
        os.environ.update(JACK_DEFAULT_SERVER=name, JACK_NO_START_SERVER="1")
        yield name, log
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.unlink()


def jack_xruns(log: Path) -> int:
    """Lines of JACK's log that name an xrun (one xrun may write more than one)."""
    return len(xrun_lines(log))


def xrun_lines(log: Path) -> list[str]:
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if re.search("xrun", line, re.IGNORECASE)]


class Probe:
    """Wraps the engine's ``process`` (the audio thread's one call a block) to note when each
    block started and the mask's probability it played: instrumentation of this script only."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.blocks: collections.deque[tuple[float, float]] = collections.deque(maxlen=1 << 20)
        process = engine.process

        def timed(block):
            start = time.monotonic()
            out = process(block)
            self.blocks.append((start, self.prob()))
            return out

        engine.process = timed

    def prob(self) -> float:
        return dict(self.engine.applied_state.op("mask").params)["prob"]

    def remove(self) -> None:
        """The engine's own ``process`` back (the flood is measured without the probe)."""
        del self.engine.process


def serve(block: int, preset: str, home: str):
    from bendserver.serve import ServeOptions, Server

    os.environ["BENDSERVER_HOME"] = home
    options = ServeOptions(
        model="drive",
        preset=preset,
        audio="jack",
        block=block,
        osc_port=0,
        oscquery_port=0,
        zeroconf=False,
        midi="",
    )
    return Server(options)


def osc(server, address: str, *args) -> None:
    from pythonosc.udp_client import SimpleUDPClient

    SimpleUDPClient("127.0.0.1", server.osc.port).send_message(address, list(args))


def until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- the measurements --------------------------------------------------------------------------


def latency(server, jack: str, probe: Probe, block: int, count: int) -> None:
    """Learn CC 7 for the mask's probability, then ``count`` moves 50 ms apart."""
    osc(server, "/midi/learn", "/bend/mask/prob")
    until(lambda: server.controller.midi.learning is not None)
    with sender(jack, 20.0, count + 1) as process:
        sent = sent_times(process)
    assert until(lambda: len(server.controller.midi.mappings()) == 1), "learn took nothing"
    arrivals = list(server.midi.arrivals)[-len(sent) :]
    blocks = list(probe.blocks)
    starts = np.array([b[0] for b in blocks])
    period = block / RATE
    from_arrival, from_send, crossed = [], [], []
    for index in range(1, len(sent)):  # the first one was learned
        value = _value(0, index) / 127
        arrival = arrivals[index]
        first = np.searchsorted(starts, arrival)
        played = next(i for i in range(first, len(blocks)) if blocks[i][1] == value)
        from_arrival.append(starts[played] - arrival)
        from_send.append(starts[played] - sent[index])
        crossed.append(played - first + 1)
    ms = lambda x: 1000 * np.asarray(x)
    a, s = ms(from_arrival), ms(from_send)
    print(f"learn, map, move at block {block} ({1000 * period:.2f} ms), {len(a)} moves:")
    print(f"  arrival -> block that plays it: p50 {np.median(a):.2f} ms, max {a.max():.2f} ms")
    print(f"  sent    -> block that plays it: p50 {np.median(s):.2f} ms, max {s.max():.2f} ms")
    within = sum(c == 1 for c in crossed)
    print(
        f"  played by the first block starting after its arrival: {within}/{len(crossed)} "
        f"(block starts crossed: max {max(crossed)})"
    )


def flood(server, jack: str, log: Path, probe: Probe, rate: float, seconds: float, quiet: float):
    before = server.stats()
    jack_before = jack_xruns(log)
    time.sleep(quiet)
    quiet_stats = server.stats()
    quiet_jack = jack_xruns(log)
    count = int(rate * seconds)
    with sender(jack, rate, count, first=5) as process:
        sent = sent_times(process)
    took = sent[-1] - sent[0]
    final = _value(5, count - 1) / 127
    ok = until(lambda: probe.prob() == final)
    after = server.stats()
    coalesced = server.osc.worker.inbox.coalesced
    print(f"quiet {quiet:g} s before: xruns {quiet_stats['xruns'] - before['xruns']}, "
          f"JACK log xruns {quiet_jack - jack_before}")  # fmt: skip
    print(
        f"flood: {len(sent)} CC in {took:.1f} s ({len(sent) / took:.0f}/s) at block "
        f"{server.engine.block}: xruns {after['xruns'] - quiet_stats['xruns']}, JACK log xruns "
        f"{jack_xruns(log) - quiet_jack}, MIDI read {after['midi'] - quiet_stats['midi']}, "
        f"coalesced {coalesced}, late {after['late'] - quiet_stats['late']}, final value "
        f"{'played' if ok else 'NOT played'}, compute p50 {after['p50_ms']:.2f} ms max "
        f"{after['max_ms']:.2f} ms"
    )


def restart(block: int, jack: str, home: str) -> None:
    with serve(block, "midi-bench", home) as server:
        probe = Probe(server.engine)
        mappings = server.controller.midi.mappings()
        with sender(jack, 20.0, 2, first=127) as process:
            sent_times(process)
        moved = until(lambda: probe.prob() == _value(127, 1) / 127)
        print(
            f"restart with the preset: mappings {[m.describe()[:4] for m in mappings]}, the "
            f"control moved the parameter: {'yes' if moved else 'NO'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--rate", type=float, default=1000.0, help="CC messages a second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the flood lasts")
    parser.add_argument("--quiet", type=float, default=15.0, help="seconds of baseline first")
    parser.add_argument("--moves", type=int, default=200, help="moves timed one by one")
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bendmidi-home-")
    with jack_server(args.block) as (jack, log):
        with serve(args.block, "drive", home) as server:
            probe = Probe(server.engine)
            time.sleep(1.0)  # past the first blocks
            latency(server, jack, probe, args.block, args.moves)
            probe.remove()
            flood(server, jack, log, probe, args.rate, args.seconds, args.quiet)
            osc(server, "/preset/save", "midi-bench", 1)
            until(lambda: (Path(home) / "presets" / "midi-bench.json").is_file())
        restart(args.block, jack, home)
        for line in xrun_lines(log)[:6]:
            print(f"  JACK log: {line}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["send"]:
        send(float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
