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
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
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


def jack_env(jack: str) -> dict[str, str]:
    return {**os.environ, "JACK_DEFAULT_SERVER": jack, "JACK_NO_START_SERVER": "1"}


def has_jack() -> bool:
    return all(shutil.which(name) for name in ("jackd", "jack_wait"))


def need_jack() -> None:
    if not has_jack():
        raise BendingError("jackd and jack_wait are missing: install Debian's jackd2")
