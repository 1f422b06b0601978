"""Helpers for the tests with real parts: a dummy JACK server, real OSC tools, a reply listener,
a load generator, and the model the live tests play.

Run as a script, it is the OSC load generator (a separate process, so that sending does not
compete with the server for the GIL): ``python tests/jack.py send PORT COUNT RATE PRESET``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "jackd": "jackd2",
    "jack_wait": "jackd2",
    "jack_lsp": "jackd2",
    "oscsend": "liblo-tools",
    "oscdump": "liblo-tools",
    "pd": "puredata-core",
}
_names = itertools.count()


def need(binary: str) -> str:
    """The path of ``binary``, or skip the test saying which package provides it."""
    import pytest

    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed (Debian package {PACKAGES.get(binary, binary)})")
    return path


def need_portaudio() -> None:
    import pytest

    try:
        import sounddevice  # noqa: F401
    except OSError as error:
        pytest.skip(f"PortAudio is missing (Debian package libportaudio2): {error}")


@contextlib.contextmanager
def jack_server(rate: int = 48000, period: int = 256) -> Iterator[str]:
    """A dummy-driver JACK server with a name of its own, set as this process's default
    (``JACK_DEFAULT_SERVER``, inherited by subprocesses) while the block runs."""
    need("jackd")
    need("jack_wait")
    need_portaudio()
    name = f"bendtest{os.getpid()}x{next(_names)}"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        ["jackd", "-n", name, "-d", "dummy", "-r", str(rate), "-p", str(period)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    saved = {key: os.environ.get(key) for key in ("JACK_DEFAULT_SERVER", "JACK_NO_START_SERVER")}
    try:
        ready = subprocess.run(
            ["jack_wait", "-s", name, "-w", "-t", "10"], capture_output=True, text=True
        )
        if process.poll() is not None or "available" not in ready.stdout:
            log.seek(0)
            raise RuntimeError(f"jackd did not start: {log.read().decode(errors='replace')}")
        os.environ["JACK_DEFAULT_SERVER"] = name
        os.environ["JACK_NO_START_SERVER"] = "1"
        yield name
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def free_port() -> int:
    """A UDP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def oscsend(port: int, address: str, types: str = "", *values: object) -> None:
    """Send one message with liblo's ``oscsend`` (the real client)."""
    command = [need("oscsend"), "localhost", str(port), address]
    if types:
        command += [types, *(str(v) for v in values)]
    subprocess.run(command, check=True, timeout=10)


class Replies:
    """Listens on the reply port and parses what arrives (python-osc)."""

    def __init__(self, port: int | None = None) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.socket.bind(("127.0.0.1", port or 0))
        self.port = self.socket.getsockname()[1]

    def receive(self, timeout: float = 2.0) -> list[tuple[str, list]]:
        """Every reply that arrives within ``timeout`` of the previous one."""
        from pythonosc.osc_message import OscMessage

        replies = []
        self.socket.settimeout(timeout)
        try:
            while True:
                data = self.socket.recv(65536)
                message = OscMessage(data)
                replies.append((message.address, list(message.params)))
                self.socket.settimeout(0.2)
        except TimeoutError:
            return replies

    def wait_for(self, address: str, timeout: float = 5.0) -> list:
        """The arguments of the next reply to ``address`` (others are skipped)."""
        from pythonosc.osc_message import OscMessage

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.socket.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = OscMessage(self.socket.recv(65536))
            except TimeoutError:
                break
            if message.address == address:
                return list(message.params)
        raise AssertionError(f"no {address} reply within {timeout} s")

    def close(self) -> None:
        self.socket.close()


def stats(port: int, replies: Replies) -> dict:
    """Ask for /stats and return it as a dict."""
    send_python(port, "/stats")
    pairs = replies.wait_for("/stats")
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


def allowed_xruns(quiet_xruns: int, quiet_seconds: float, seconds: float) -> int:
    """Xruns a stretch of ``seconds`` may have: what the same server had in a quiet stretch just
    before, at the same rate (a machine shared with other work makes its own), plus 5 and 10 a
    minute: a 2-core VM gives 1 to 9 xruns a minute with or without load, which a few seconds
    of baseline cannot always catch, and one stall of it gives several at once (4 in 3 s on a
    quiet machine, the C client's too). The figures are `bendserver stress`'s job; this catches
    a regression (a server that lets control work into the audio's way: dozens a second)."""
    return math.ceil(quiet_xruns * seconds / quiet_seconds) + 5 + int(10 * seconds / 60)


QUIET_SECONDS = 2.0


def quiet_baseline(port: int, replies: Replies) -> tuple[dict, int]:
    """The server's /stats after ``QUIET_SECONDS`` of nothing but playing, and its xruns in
    that stretch: the baseline ``allowed_xruns`` scales."""
    start = stats(port, replies)
    time.sleep(QUIET_SECONDS)
    after = stats(port, replies)
    return after, after["xruns"] - start["xruns"]


def send_python(port: int, address: str, *args: object) -> None:
    from pythonosc.osc_message_builder import build_msg

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(build_msg(address, list(args)).dgram, ("127.0.0.1", port))


def live_model() -> tuple[str, str]:
    """(model, preset) for the live tests: the default model with its preset when it is shipped,
    else a small test model without a preset."""
    from bendserver.loader import DEFAULT_MODEL
    from bendserver.paths import SHIPPED_MODELS as MODELS_DIR

    if (MODELS_DIR / DEFAULT_MODEL / "manifest.toml").is_file():
        return DEFAULT_MODEL, DEFAULT_MODEL
    return f"{Path(__file__).parent / 'streaming.py'}:CausalStack", "none"


def demo_options(reply_port: int):
    """Serve options of the page's tests: drive with its preset on the null backend, playing
    its demo (the meters move), OSC on a port the OS chooses."""
    from bendserver.serve import ServeOptions

    return ServeOptions(
        model="drive",
        preset="drive",
        audio="null",
        input=str(ROOT / "models" / "drive" / "demo.flac"),
        osc_port=0,
        reply_port=reply_port,
    )


def load_messages(preset: str) -> list[tuple[str, float]]:
    """The messages the load generator cycles through: parameters of ``preset`` (the live
    model's), each message a different value (so each is a real change)."""
    if preset == "none":
        return [("/engine/gain", 0.5 + i / 100) for i in range(50)] + [
            ("/engine/mix", 0.5 + i / 100) for i in range(50)
        ]
    messages = []
    for i in range(25):
        messages += [
            ("/bend/mask/prob", 0.3 + i / 100),
            ("/bend/lfo/depth", 0.5 + i / 100),
            ("/bend/noise/std", 0.05 + i / 500),
            ("/engine/gain", 0.8 + i / 200),
        ]
    return messages


def send_load(port: int, count: int, rate: float, preset: str) -> float:
    """Send ``count`` messages at ``rate`` per second (0: as fast as possible), in 10 ms batches;
    returns the seconds it took."""
    from pythonosc.osc_message_builder import build_msg

    datagrams = [build_msg(a, [v]).dgram for a, v in load_messages(preset)]
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    started = time.monotonic()
    for index in range(count):
        if rate and index % max(1, int(rate / 100)) == 0:
            due = started + index / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        sender.sendto(datagrams[index % len(datagrams)], ("127.0.0.1", port))
    return time.monotonic() - started


def spawn_load(port: int, count: int, rate: float) -> subprocess.Popen:
    """The load generator in its own process, sending the live model's preset parameters. It
    imports python-osc only: a process importing torch beside the server costs it xruns on a
    small machine (measured), which would be the test's doing, not the server's."""
    preset = live_model()[1]
    return subprocess.Popen(
        [sys.executable, __file__, "send", str(port), str(count), str(rate), preset],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "send":
        took = send_load(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        print(f"sent {sys.argv[3]} in {took:.3f} s")
    else:
        sys.exit("usage: python tests/jack.py send PORT COUNT RATE PRESET")
