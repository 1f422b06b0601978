"""What a measurement runs against: a JACK server on the dummy driver, ``bendserver serve`` in a
process of its own on it, and its OSC port (:class:`Osc`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator

from pythonosc.osc_message import OscMessage
from pythonosc.osc_message_builder import build_msg

from ..errors import BendingError
from ..osc.oscquery import METER_RATE


class Osc:
    """The server's OSC port, a socket for its replies, its process and its last output lines."""

    def __init__(
        self, port: int, replies: socket.socket, server: subprocess.Popen, output: deque[str]
    ) -> None:
        self.port, self.replies, self.server, self.output = port, replies, server, output

    def ask(
        self, address: str, args: tuple = (), reply: str | None = None, errors: list | None = None
    ) -> list:
        """Send ``address`` and return the arguments of its reply (at ``reply``, else at the
        same address), skipping other replies (``/error`` ones added to ``errors``)."""
        self.send(address, *args)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            self.replies.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = OscMessage(self.replies.recv(65536))
            except TimeoutError:
                break
            if message.address == (reply or address):
                return list(message.params)
            if errors is not None and message.address == "/error":
                errors.append(list(message.params))
        raise BendingError(f"the server did not answer {address}")

    def stats(self) -> dict:
        pairs = self.ask("/stats")
        return dict(zip(pairs[::2], pairs[1::2], strict=True))

    def send(self, address: str, *args: object) -> None:
        """Send ``address`` without waiting for a reply."""
        self.replies.sendto(build_msg(address, list(args)).dgram, ("127.0.0.1", self.port))


@contextlib.contextmanager
def jack_server(block: int, rate: int = 48000) -> Iterator[str]:
    """A JACK server on the dummy driver at ``rate`` Hz and ``block`` frames."""
    name = f"bendstress{os.getpid()}x{block}"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        ["jackd", "-n", name, "-d", "dummy", "-r", str(rate), "-p", str(block)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        ready = subprocess.run(
            ["jack_wait", "-s", name, "-w", "-t", "10"], capture_output=True, text=True
        )
        if "available" not in ready.stdout:
            log.seek(0)
            raise BendingError(f"jackd did not start: {log.read().decode(errors='replace')}")
        yield name
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@contextlib.contextmanager
def serving(
    model: str,
    preset: str | None,
    block: int,
    jack: str | None,
    search: list[str],
    home: str | None = None,
    latency: int | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[Osc]:
    """``bendserver serve`` on the JACK server ``jack`` (None: the null backend), in its own
    process, until the block ends; its output is read on (the last lines kept), so that it
    never waits on a full pipe. ``home``: its user folder (presets it saves), else the
    caller's."""
    replies = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replies.bind(("127.0.0.1", 0))
    port = free_port(socket.SOCK_DGRAM)
    command = [
        sys.executable, "-m", "bendserver.cli", "serve", "-m", model,
        "--audio", "jack" if jack else "null", *(["--input", "jack"] if jack else []),
        "--block", str(block), "--osc-port", str(port),
        "--reply-port", str(replies.getsockname()[1]), *(["-p", preset] if preset else []),
        *(word for folder in search for word in ("--models-dir", folder)),
        *(["--latency", str(latency)] if latency is not None else []), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if jack:
        env.update(JACK_DEFAULT_SERVER=jack, JACK_NO_START_SERVER="1")
    if home is not None:
        env["BENDSERVER_HOME"] = home
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        banner = []
        for line in server.stdout:
            banner.append(line)
            if line.startswith("try"):
                break
        else:
            raise BendingError("the server did not start:\n" + "".join(banner))
        output: deque[str] = deque(banner, maxlen=50)
        threading.Thread(target=output.extend, args=(server.stdout,), daemon=True).start()
        time.sleep(1.0)  # past the first blocks
        yield Osc(port, replies, server, output)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        replies.close()


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port free on the loopback now: TCP (the server's OSCQuery service) or UDP (its OSC)."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def page_open(port: int, seconds: float) -> Iterator[None]:
    """The control page of the server whose OSCQuery service is on ``port``, open in a headless
    Chromium (driven by playwright) until the block ends, its meters on as a performer's are;
    a page that did not follow the server (fewer meter updates than half their rate over
    ``seconds``) is an error: the figures would not be the page's."""
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        raise BendingError("stress --page needs playwright (pip) and Chromium (Debian: chromium)")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1300})
            page.goto(f"http://127.0.0.1:{port}/ui")
            page.wait_for_selector("body[data-ready]", timeout=20_000)
            page.wait_for_function("() => window.bendserver.meters >= 1", timeout=10_000)
            before = page.evaluate("window.bendserver.meters")
            yield
            meters = page.evaluate("window.bendserver.meters") - before
        finally:
            browser.close()
    if meters < METER_RATE * seconds / 2:
        raise BendingError(f"the page had {meters} meter updates in {seconds:g} s: not following")


def jack_env(jack: str) -> dict[str, str]:
    return {**os.environ, "JACK_DEFAULT_SERVER": jack, "JACK_NO_START_SERVER": "1"}


def has_jack() -> bool:
    return all(shutil.which(name) for name in ("jackd", "jack_wait"))


def need_jack() -> None:
    if not has_jack():
        raise BendingError("jackd and jack_wait are missing: install Debian's jackd2")
