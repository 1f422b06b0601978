"""A live model switch measured: ``/model/load`` on a server playing through JACK's dummy driver.

Serves ``--from`` (a tone and noise looped as its input, its output recorded) at 48 kHz and
``--block`` frames, sends ``/model/load --to`` over OSC after ``--before`` seconds, and plays on
for ``--after`` seconds. Then it prints: the xruns, late blocks and errors over the run; what the
load took (probe, load, warm-up); the compute time of each block around the switch (both models
run during the crossfade); and the largest sample step of the recording at the switch (from a
block before the crossfade to a block after it) beside the same stretch of the same input through
each model alone, rendered offline, with the bound the crossfade allows. ``--from drive,drive
--node drive_2`` serves a chain (a rack) and switches one node with ``/node/drive_2/load``: the
offline renders are then the chain before and after the switch.

Usage: ``python scripts/switch_live.py [--from drive] [--to wavae] [--block 256]
[--xfade-ms 50] [--node NAME]`` (Debian: jackd2). Its figures are the ones docs/serve.md quotes.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg

from bendserver.measure.served import jack_server
from bendserver.rackspec import NodeSpec, RackSpec
from bendserver.serve import ServeOptions, Server

RATE = 48000


def material(path: Path, seconds: float = 1.0) -> np.ndarray:
    """A tone with seeded noise (looped by the server), written to ``path``."""
    t = np.arange(int(seconds * RATE)) / RATE
    rng = np.random.default_rng(0)
    audio = 0.4 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(len(t))
    audio = audio.astype(np.float32)
    sf.write(path, audio, RATE, subtype="FLOAT")
    return audio[None]


def ask(sock: socket.socket, port: int, address: str, args: list, reply: str) -> list:
    """Send ``address`` and return its reply's arguments (an /error raises)."""
    sock.sendto(build_msg(address, args).dgram, ("127.0.0.1", port))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        message = OscMessage(sock.recv(65536))
        if message.address == reply:
            return list(message.params)
        if message.address == "/error":
            raise SystemExit(f"{address}: {message.params}")
    raise SystemExit(f"no reply to {address}")


def stats(sock: socket.socket, port: int) -> dict:
    pairs = ask(sock, port, "/stats", [], "/stats")
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


def alone(spec: RackSpec, audio: np.ndarray, block: int, warm: int, frames: int) -> np.ndarray:
    """``frames`` of the rack ``spec`` (one model: its rack) on ``audio`` looped, after ``warm``
    blocks of silence, offline."""
    engine = spec.build(block=block, streams=1, preset="none")  # as served
    silence = np.zeros((1, block), np.float32)
    for _ in range(warm):
        engine.process(silence)
    looped = np.tile(audio, (1, math.ceil(frames / audio.shape[1]) + 1))[:, :frames]
    return np.concatenate(list(engine.stream(looped)), axis=1)


def step(audio: np.ndarray) -> float:
    return float(np.abs(np.diff(audio, axis=-1)).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="old", default="drive", help="a model, or models joined by commas (a chain)"
    )
    parser.add_argument("--node", help="the chain's node to load into (default: /model/load)")
    parser.add_argument("--to", dest="new", default="wavae")
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--xfade-ms", type=float, default=50.0)
    parser.add_argument("--ahead", type=int, help="serve's --ahead (default: serve's)")
    parser.add_argument("--before", type=float, default=3.0, help="seconds before the switch")
    parser.add_argument("--after", type=float, default=3.0, help="seconds after it")
    args = parser.parse_args(argv)
    block = args.block
    folder = Path(tempfile.mkdtemp(prefix="switch-live-"))
    audio = material(folder / "input.wav")
    record = folder / "out.wav"
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    torch.set_num_threads(1)
    with jack_server(block) as jack:
        os.environ.update(JACK_DEFAULT_SERVER=jack, JACK_NO_START_SERVER="1")
        chain = RackSpec.chain(args.old.split(","))
        options = ServeOptions(
            model=args.old, rack=chain if len(chain.nodes) > 1 else None, preset="none",
            audio="jack",
            block=block,
            input=str(folder / "input.wav"), record=str(record), osc_port=0,
            oscquery_port=0, reply_port=replies.getsockname()[1], xfade_ms=args.xfade_ms,
            ahead=args.ahead,
        )  # fmt: skip
        server = Server(options)
        first = server.engine.time  # the ring's warm-up blocks are not recorded
        with server:
            port = server.osc.port
            time.sleep(args.before)
            before = stats(replies, port)
            if args.node:
                load = (f"/node/{args.node}/load", [args.new, "none"], "/node/loaded")
            else:
                load = ("/model/load", [args.new, "none"], "/model/loaded")
            loaded = ask(replies, port, *load)[-3:]  # probe, load, warm-up
            time.sleep(args.after)
            after = stats(replies, port)
            rack = server.engine
            at = rack.swapped_at
            times = rack.stats.recent_ms(0)  # every block's compute time (ms), oldest first
    if at is None:
        print("the switch did not happen")
        return 1
    recorded = sf.read(record, dtype="float32", always_2d=True)[0].T
    start = at - first
    fade = math.ceil(round(args.xfade_ms * RATE / 1000) / block) * block
    window = slice(start - block, start + fade + block)
    frames = start + fade + 2 * block
    name = args.node or chain.nodes[0].name
    swapped = tuple(
        NodeSpec(node.name, args.new, preset="none") if node.name == name else node
        for node in chain.nodes
    )
    old = alone(chain, audio, block, first // block, frames)
    new = alone(RackSpec(swapped), audio, block, first // block, frames)
    same = float(np.abs(recorded[:, :start] - old[:, :start]).max())
    own = max(step(old[:, window]), step(new[:, window]))
    peaks = float(np.abs(old[:, window]).max() + np.abs(new[:, window]).max())
    bound = math.sqrt(2) * own + math.pi / 2 / max(1, round(args.xfade_ms * RATE / 1000)) * peaks
    index = at // block
    around = range(index - 4, index + fade // block + 4)
    rows = [f"{'*' if index <= i < index + fade // block else ' '}{times[i]:.2f}" for i in around]
    budget = 1000 * block / RATE
    where = f" (node {args.node})" if args.node else ""
    print(
        f"switch {args.old} -> {args.new}{where} at block {block} ({budget:.2f} ms), --xfade-ms "
        f"{args.xfade_ms:g}, ring mode {server.backend.ahead} blocks ahead, on JACK's dummy "
        f"driver at {RATE} Hz\n"
        f"run: {after['blocks']} blocks, xruns {after['xruns']} (during the load and switch: "
        f"{after['xruns'] - before['xruns']}), late {after['late'] - before['late']} of "
        f"{after['blocks'] - before['blocks']} since the load began, errors {after['errors']}, "
        f"underruns {after.get('underruns', 0)} (during the load and switch: "
        f"{after.get('underruns', 0) - before.get('underruns', 0)})\n"
        f"load: probe {loaded[0]:g} s (-1: not probed), load {loaded[1]:g} s, warm-up "
        f"{loaded[2]:g} s; crossfade from engine sample {at} ({fade // block} blocks)\n"
        f"compute ms of the blocks around it (* both models): {' '.join(rows)}; the "
        f"{before['blocks']} blocks before: p50 {np.median(times[: index - 4]):.2f} max "
        f"{times[: index - 4].max():.2f}\n"
        f"recording before the switch against {args.old} alone offline: largest difference "
        f"{same:.2g}"
        + (" (aligned)" if same < 1e-6 else " (an underrun before the switch shifted it)")
        + "\n"
        f"largest sample step from a block before the crossfade to a block after: recorded "
        f"{step(recorded[:, window]):.4f}; {args.old} alone {step(old[:, window]):.4f}, "
        f"{args.new} alone {step(new[:, window]):.4f} (the same input); the crossfade allows "
        f"{bound:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
