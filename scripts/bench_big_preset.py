"""Load a preset of many ops into a live server over OSC while ``/ping`` is timed.

Serves the default model on the null backend (real time), writes a preset of ``--ops`` weight
ops into a temporary user folder, sends ``/preset/load`` and pings every 10 ms until the preset
plays; prints the load time, the ``/ping`` round trips (p50, max) and the late blocks during the
load. Usage: ``python scripts/bench_big_preset.py --ops 20000``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import threading
import time

import numpy as np
from pythonosc.osc_message_builder import build_msg

os.environ.setdefault("BENDSERVER_HOME", tempfile.mkdtemp(prefix="bendserver-bench-"))

from bendserver.loader import DEFAULT_MODEL  # noqa: E402
from bendserver.paths import user_dir  # noqa: E402
from bendserver.serve import ServeOptions, Server  # noqa: E402


def write_preset(count: int, model: str) -> str:
    """A preset of ``count`` Scale ops on one weight of the default model; returns its name."""
    ops = {f"s{i}": {"op": "Scale", "params": {"value": 1.0}, "options": {}} for i in range(count)}
    bends = [{"op": f"s{i}", "keys": [r"drive_in\.weight"]} for i in range(count)]
    preset = {"format": "bendserver.config", "version": 1, "ops": ops, "bends": bends}
    folder = user_dir() / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"big{count}.json").write_text(json.dumps({**preset, "model": model}))
    return f"big{count}"


class Pinger:
    """Sends /ping every ``period`` seconds and times each /pong (they come back in order)."""

    def __init__(self, port: int, replies: socket.socket, period: float = 0.01) -> None:
        self.port, self.replies, self.period = port, replies, period
        self.sent: list[float] = []
        self.trips: list[float] = []
        self.running = True
        self.threads = [threading.Thread(target=self._send), threading.Thread(target=self._receive)]

    def __enter__(self) -> Pinger:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.5)  # the last pongs
        self.running = False
        for thread in self.threads:
            thread.join()

    def _send(self) -> None:
        ping = build_msg("/ping", []).dgram
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            while self.running:
                self.sent.append(time.monotonic())
                sock.sendto(ping, ("127.0.0.1", self.port))
                time.sleep(self.period)

    def _receive(self) -> None:
        self.replies.settimeout(0.1)
        while self.running:
            try:
                data = self.replies.recv(65536)
            except TimeoutError:
                continue
            if data.startswith(b"/pong"):
                self.trips.append(time.monotonic() - self.sent[len(self.trips)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    args = parser.parse_args()
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    options = ServeOptions(
        model=DEFAULT_MODEL, preset="none", audio="null", osc_port=0, oscquery_port=0
    )
    options.reply_port = replies.getsockname()[1]
    name = write_preset(args.ops, DEFAULT_MODEL)
    with Server(options) as server:
        time.sleep(0.5)
        late = server.engine.stats.late
        with Pinger(server.osc.port, replies) as pinger:
            time.sleep(0.2)
            started = time.monotonic()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(build_msg("/preset/load", [name]).dgram, ("127.0.0.1", server.osc.port))
            while len(server.engine.applied_state.ops) != args.ops:
                time.sleep(0.01)
            took = time.monotonic() - started
        late = server.engine.stats.late - late
        blocks = server.engine.stats.blocks
    trips = 1000 * np.array(pinger.trips)
    print(
        f"{args.ops} ops: loaded in {took:.2f} s; /ping p50 {np.median(trips):.1f} ms, "
        f"max {trips.max():.1f} ms ({len(trips)} of {len(pinger.sent)} answered); "
        f"late blocks {late} of {blocks}"
    )


if __name__ == "__main__":
    main()
