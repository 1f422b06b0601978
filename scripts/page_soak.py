"""The control page under a finger: load time, WebSocket update rate and latency, xruns.

Starts a JACK server on the dummy driver (48 kHz, ``--block`` frames), ``bendserver serve`` on
it playing the model's demo, and counts xruns for ``--seconds`` without a page (what the machine
does anyway). Then Chromium (Debian's, driven by playwright) opens the page: its load time
(navigation to controls built from the namespace), then a slider dragged back and forth for
``--seconds`` like a finger (a move every 16 ms at most) while another thread sends
``/engine/gain`` over OSC ten times a second; each value's arrival on the page against its send
time is the update latency (OSC in, applied at a block boundary, pushed on the WebSocket,
shown), and each dragged value the server pushes back, against when the page sent it, the round
trip (page to server, applied, back). Xruns are JACK's own (its log's ``XRun`` lines) and the
server's (``/stats``).

    python scripts/page_soak.py --block 256 --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
SLIDER = 'input[type=range][data-path="/bend/mask/prob"]'
PROBE = "/engine/gain"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--model", default="drive")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with jackd(args.block) as (name, log), served(args.model, args.block, name) as (osc, url):
        time.sleep(1.0)
        quiet, quiet_lines = osc.stats(), count_xruns(log)
        time.sleep(args.seconds)  # the same stretch without the page: what the machine does
        quiet_xruns = (count_xruns(log) - quiet_lines, int(osc.stats()["xruns"] - quiet["xruns"]))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            started = time.perf_counter()
            page.goto(f"{url}/ui")
            page.wait_for_selector("body[data-ready]", timeout=20_000)
            load_ms = 1e3 * (time.perf_counter() - started)
            ready_ms = float(page.evaluate("document.body.dataset.ready"))
            page.wait_for_function("() => window.bendserver.meters >= 2", timeout=10_000)
            time.sleep(1.0)
            before, xrun_lines = osc.stats(), count_xruns(log)
            meters_before = page.evaluate("window.bendserver.meters")
            sent: dict[float, float] = {}
            stop = threading.Event()
            prober = threading.Thread(target=probe, args=(osc, sent, stop), daemon=True)
            prober.start()
            moves = drag(page, args.seconds)
            stop.set()
            prober.join()
            time.sleep(0.5)
            after, jack_xruns = osc.stats(), count_xruns(log) - xrun_lines
            meters = page.evaluate("window.bendserver.meters") - meters_before
            arrivals = page.evaluate("window.bendserver.log")
            sends = page.evaluate("window.bendserver.sent")
            final = osc.ask("/get/bend/mask/prob")[0]
            shown = float(page.locator(SLIDER).input_value())
            browser.close()

    latency = [
        arrived - 1e3 * sent[round(value, 5)]
        for path, value, arrived in arrivals
        if path == PROBE and round(value, 5) in sent
    ]
    echoes = [a for a in arrivals if a[0] == "/bend/mask/prob"]
    round_trips = round_trip_ms(sends, echoes)
    span = (echoes[-1][2] - echoes[0][2]) / 1e3 if len(echoes) > 1 else 0.0
    print(f"block {args.block}, {args.seconds:g} s of dragging ({moves} moves)")
    print(f"page load: {load_ms:.0f} ms to controls built ({ready_ms:.0f} ms after navigation)")
    print(f"meters: {meters / args.seconds:.1f} snapshots/s on the WebSocket")
    if span:
        print(f"dragged value pushed back: {len(echoes) / span:.1f} updates/s")
    if latency:
        p50, top = np.percentile(latency, 50), max(latency)
        print(
            f"OSC -> page latency ({len(latency)} of {len(sent)} values): "
            f"p50 {p50:.1f} ms, max {top:.1f} ms"
        )
    if round_trips:
        print(
            f"page -> server -> page (a dragged value back as applied, {len(round_trips)} of "
            f"{len(sends)} sent): p50 {np.percentile(round_trips, 50):.1f} ms, "
            f"max {max(round_trips):.1f} ms"
        )
    print(
        f"xruns without the page, {args.seconds:g} s before: JACK {quiet_xruns[0]}, "
        f"server {quiet_xruns[1]}"
    )
    print(
        f"xruns with the page: JACK {jack_xruns}, server {int(after['xruns'] - before['xruns'])}; "
        f"late blocks {int(after['late'] - before['late'])}; "
        f"compute p50 {after['p50_ms']:.2f} ms, max {after['max_ms']:.2f} ms"
    )
    print(f"slider ended at {shown:.4f}, server has {final:.4f}")
    return 0


def round_trip_ms(sends: list, echoes: list) -> list[float]:
    """For each value of the slider pushed back to the page, the time since the page sent it
    (values compared as the float32 they travel as; a value sent again counts from its last
    send before the echo; coalesced values never come back)."""
    last: dict[float, float] = {}
    times, index = [], 0
    ordered = sorted((s for s in sends if s[0] == "/bend/mask/prob"), key=lambda s: s[2])
    for _, value, arrived in echoes:
        while index < len(ordered) and ordered[index][2] <= arrived:
            last[float(np.float32(ordered[index][1]))] = ordered[index][2]
            index += 1
        sent = last.pop(float(np.float32(value)), None)
        if sent is not None:
            times.append(arrived - sent)
    return times


def drag(page, seconds: float) -> int:
    """Hold the slider and sweep it back and forth for ``seconds``; returns the moves made."""
    box = page.locator(SLIDER).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + 2, y)
    page.mouse.down()
    moves, start = 0, time.monotonic()
    while (now := time.monotonic()) < start + seconds:
        phase = ((now - start) % 4) / 2  # two seconds across, two back
        fraction = phase if phase <= 1 else 2 - phase
        page.mouse.move(box["x"] + 2 + (box["width"] - 4) * fraction, y)
        moves += 1
        time.sleep(max(0.0, start + moves * 0.016 - time.monotonic()))
    page.mouse.up()
    return moves


def probe(osc: Osc, sent: dict[float, float], stop: threading.Event) -> None:
    """Send a new ``/engine/gain`` ten times a second, noting when each value left."""
    count = 0
    while not stop.wait(0.1):
        count += 1
        value = round(0.5 + 1e-4 * count, 5)  # each value once
        sent[value] = time.time()
        osc.send(PROBE, value)


def count_xruns(log: Path) -> int:
    """JACK's own xrun reports in its log."""
    return len(re.findall("XRun", log.read_text(errors="replace")))


class Osc:
    """The server's OSC port and a socket for its replies."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.lock = threading.Lock()

    def send(self, address: str, *args: object) -> None:
        with self.lock:
            self.socket.sendto(build_msg(address, list(args)).dgram, ("127.0.0.1", self.port))

    def ask(self, address: str) -> list:
        self.send(address)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.socket.settimeout(1.0)
            message = OscMessage(self.socket.recv(65536))
            if message.address == address:
                return list(message.params)
        raise RuntimeError(f"no reply to {address}")

    def stats(self) -> dict:
        pairs = self.ask("/stats")
        return dict(zip(pairs[::2], pairs[1::2], strict=True))


@contextlib.contextmanager
def jackd(block: int) -> Iterator[tuple[str, Path]]:
    """A JACK server on the dummy driver, its output in a log file."""
    name = f"bendpage{os.getpid()}"
    folder = Path(tempfile.mkdtemp(prefix="bendserver-page-"))
    log = folder / "jackd.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["jackd", "-n", name, "-d", "dummy", "-r", "48000", "-p", str(block)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        subprocess.run(["jack_wait", "-s", name, "-w", "-t", "10"], check=True, capture_output=True)
        yield name, log
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def served(model: str, block: int, jack: str) -> Iterator[tuple[Osc, str]]:
    """``bendserver serve`` on JACK server ``jack``, playing the model's demo: its OSC port
    and the OSCQuery URL its banner prints."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    osc = Osc(port)
    demo = ROOT / "models" / model / "demo.flac"
    command = [
        sys.executable, "-m", "bendserver.cli", "serve", "-m", model, "--audio", "jack",
        "--block", str(block), "--osc-port", str(port), "--reply-port",
        str(osc.socket.getsockname()[1]), "--no-zeroconf", "--input",
        str(demo) if demo.is_file() else "silence",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "JACK_DEFAULT_SERVER": jack}
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        url = None
        for line in server.stdout:
            if line.startswith("oscquery"):
                url = line.split()[1]
            if line.startswith("try"):
                break
        if url is None:
            raise RuntimeError("the server did not start")
        threading.Thread(target=server.stdout.read, daemon=True).start()
        yield osc, url
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=15)
        osc.socket.close()


if __name__ == "__main__":
    sys.exit(main())
