"""Live loads under load: ``/model/load`` alternating between two models on a server playing
through JACK's dummy driver, the server's memory and xruns measured, beside JACK's C client.

Serves ``--a`` (a tone looped as its input) at 48 kHz and ``--block`` frames, then sends
``--loads`` loads alternating ``--b``, ``--a``, ``--b``... over OSC, each once the previous one
answered and the server's ``LOAD_INTERVAL`` waited after it. Prints the server's
resident memory (RSS) before the first load and after every tenth, what the loads took, the
server's xruns and late blocks over them, and then JACK's xruns while its example client in C
(``jack_simple_client``, the machine's floor for any client) plays alone for as long as the
loads took, on the same JACK server.

Usage: ``python scripts/load_soak.py [--a drive] [--b wavae] [--loads 60] [--block 256]``
(Debian: jackd2). Its figures are the ones docs/serve.md quotes.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from switch_live import ask, stats  # this folder's: a load asked for over OSC, its reply

from bendserver.audio.jackclient import JackXruns
from bendserver.limits import LOAD_INTERVAL
from bendserver.measure.served import jack_server
from bendserver.serve import ServeOptions, Server

RATE = 48000


def rss_mib() -> float:
    """This process's resident memory (the server runs in it), in MiB."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line[:6] == "VmRSS:")) / 1024


def c_floor(jack: str, seconds: float) -> int:
    """JACK's xruns while ``jack_simple_client`` plays alone for ``seconds``."""
    watch = JackXruns(jack, "load-soak-xruns")
    try:
        client = subprocess.Popen(
            ["jack_simple_client", "load-soak-c", jack],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(seconds)
        client.terminate()
        client.wait(timeout=10)
        return watch.count
    finally:
        watch.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default="drive", help="the model served first")
    parser.add_argument("--b", default="wavae", help="the model it alternates with")
    parser.add_argument("--loads", type=int, default=60)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--xfade-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="load-soak-"))
    t = np.arange(RATE) / RATE
    sf.write(folder / "input.wav", (0.4 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), RATE)
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    torch.set_num_threads(1)
    with jack_server(args.block) as jack:
        os.environ.update(JACK_DEFAULT_SERVER=jack, JACK_NO_START_SERVER="1")
        options = ServeOptions(
            model=args.a, preset="none", audio="jack", block=args.block,
            input=str(folder / "input.wav"), osc_port=0, oscquery_port=0,
            reply_port=replies.getsockname()[1], xfade_ms=args.xfade_ms,
        )  # fmt: skip
        with Server(options) as server:
            port = server.osc.port
            time.sleep(2.0)
            before, rss = stats(replies, port), [rss_mib()]
            began, steps = time.monotonic(), []
            for index in range(args.loads):
                model = args.b if index % 2 == 0 else args.a
                started = time.monotonic()
                ask(replies, port, "/model/load", [model, "none"], "/model/loaded")
                steps.append(time.monotonic() - started)
                if index % 10 == 9:
                    rss.append(rss_mib())
                time.sleep(LOAD_INTERVAL)  # the server lets loads begin one a second
            seconds = time.monotonic() - began
            after = stats(replies, port)
            gc.collect()
            collected = rss_mib()
        floor = c_floor(jack, seconds)
    marks = " ".join(f"{value:.0f}" for value in rss)
    print(
        f"{args.loads} loads {args.b} <-> {args.a} at block {args.block} on JACK's dummy driver "
        f"at {RATE} Hz, --xfade-ms {args.xfade_ms:g}, {seconds:.0f} s\n"
        f"server rss MiB before the first load, then after every tenth: {marks} (growth "
        f"{rss[-1] - rss[0]:+.1f} MiB; after a full collection {collected:.0f})\n"
        f"each load answered in p50 {statistics.median(steps):.2f} s, max {max(steps):.2f} s\n"
        f"server over the loads: xruns {after['xruns'] - before['xruns']}, late "
        f"{after['late'] - before['late']} of {after['blocks'] - before['blocks']} blocks, "
        f"errors {after['errors'] - before['errors']}\n"
        f"jack_simple_client alone for {seconds:.0f} s on the same JACK server: xruns {floor}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
