"""Small JACK clients for measuring a live server, through libjack in cffi's ABI mode.

:class:`JackXruns` counts the JACK server's own xruns (its xrun callback, on JACK's notification
thread, never the process thread): the server keeps one while it plays on JACK
(:func:`server_xruns`), so that its ``/stats`` says what JACK counted (a callback's status flags
say one xrun where several happened between two callbacks), and ``bendserver stress`` keeps one
of its own as the witness. :class:`Loopback` plays a test signal into the server's input and
records what comes back from its output, with JACK's time of each cycle: an impulse gives the
latency the server adds, a tone the moment a control change became audible. Its process
callback is Python: run it in a process of its own (``python jackclient.py``, see :func:`main`),
never beside the server. cffi comes with sounddevice; libjack with JACK (Debian:
libjack-jackd2-0).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

import numpy as np

log = logging.getLogger("bendserver.audio")

_DECLARATIONS = """
typedef struct _jack_client jack_client_t;
typedef struct _jack_port jack_port_t;
typedef uint32_t jack_nframes_t;
typedef uint64_t jack_time_t;
typedef int (*JackXRunCallback)(void *arg);
typedef int (*JackProcessCallback)(jack_nframes_t nframes, void *arg);
jack_client_t *jack_client_open(const char *client_name, int options, int *status, ...);
int jack_set_xrun_callback(jack_client_t *client, JackXRunCallback cb, void *arg);
int jack_set_process_callback(jack_client_t *client, JackProcessCallback cb, void *arg);
jack_port_t *jack_port_register(jack_client_t *client, const char *name, const char *type,
                                unsigned long flags, unsigned long buffer_size);
void *jack_port_get_buffer(jack_port_t *port, jack_nframes_t frames);
int jack_connect(jack_client_t *client, const char *source, const char *destination);
jack_nframes_t jack_get_sample_rate(jack_client_t *client);
jack_nframes_t jack_last_frame_time(const jack_client_t *client);
jack_time_t jack_get_time(void);
int jack_activate(jack_client_t *client);
int jack_deactivate(jack_client_t *client);
int jack_client_close(jack_client_t *client);
"""
JACK_NO_START_SERVER = 0x01
JACK_SERVER_NAME = 0x04
JACK_PORT_IS_INPUT, JACK_PORT_IS_OUTPUT = 0x1, 0x2
AUDIO = b"32 bit float mono audio"


class _Client:
    """A libjack client of the JACK server ``server`` (raises RuntimeError where there is none)."""

    def __init__(self, server: str, name: str) -> None:
        import cffi

        self.ffi = ffi = cffi.FFI()
        ffi.cdef(_DECLARATIONS)
        self.lib = lib = ffi.dlopen("libjack.so.0")
        status = ffi.new("int *")
        options = JACK_NO_START_SERVER | JACK_SERVER_NAME
        self.client = lib.jack_client_open(
            name.encode(), options, status, ffi.new("char[]", server.encode())
        )
        if self.client == ffi.NULL:
            raise RuntimeError(f"cannot open a client of JACK server {server} ({status[0]:#x})")
        self.name = name

    def close(self) -> None:
        if self.client is not None:
            self.lib.jack_deactivate(self.client)
            self.lib.jack_client_close(self.client)
            self.client = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JackXruns(_Client):
    """Counts the xruns of the JACK server ``server`` while open (``count``)."""

    def __init__(self, server: str, name: str = "bendserver-xruns") -> None:
        super().__init__(server, name)
        self.count = 0
        self._lock = threading.Lock()
        self._callback = self.ffi.callback("int(void *)", self._xrun)
        self.lib.jack_set_xrun_callback(self.client, self._callback, self.ffi.NULL)
        self.lib.jack_activate(self.client)

    def _xrun(self, _arg: Any) -> int:
        with self._lock:
            self.count += 1
        return 0

    def stop(self) -> None:
        """Close the client (a server part stops)."""
        self.close()


def server_xruns(hostapi: str) -> JackXruns | None:
    """A counter of JACK's xruns where the device's host API is JACK (its server:
    ``JACK_DEFAULT_SERVER``, else ``default``, as PortAudio's); None elsewhere, or where no
    client can be opened (then the callback's own count stays the one reported)."""
    if "JACK" not in hostapi:
        return None
    server = os.environ.get("JACK_DEFAULT_SERVER", "default")
    try:
        return JackXruns(server, "bendserver-xrun-count")
    except (OSError, RuntimeError) as error:
        log.warning("JACK's xruns are not counted (%s): /stats counts the callback's", error)
        return None


class Loopback(_Client):
    """Plays ``signal`` (looped) on port ``out`` and records port ``in`` for ``seconds``; keeps
    the JACK time of each cycle (CLOCK_MONOTONIC_RAW, not ``time.monotonic``'s CLOCK_MONOTONIC:
    NTP slews one and not the other; they were 0.25 s apart after 2 hours here): compare it
    with :func:`jack_now`)."""

    def __init__(self, server: str, signal: np.ndarray, seconds: float, name: str) -> None:
        super().__init__(server, name)
        ffi, lib = self.ffi, self.lib
        self.rate = int(lib.jack_get_sample_rate(self.client))
        self.signal = np.ascontiguousarray(signal, dtype=np.float32)
        self.recorded = np.zeros(int(seconds * self.rate), dtype=np.float32)
        self.cycles: list[tuple[int, float]] = []  #: (first recorded frame, JACK time in s)
        self.frames = 0
        self._out = lib.jack_port_register(self.client, b"out", AUDIO, JACK_PORT_IS_OUTPUT, 0)
        self._in = lib.jack_port_register(self.client, b"in", AUDIO, JACK_PORT_IS_INPUT, 0)
        self._callback = ffi.callback("int(uint32_t, void *)", self._process)
        lib.jack_set_process_callback(self.client, self._callback, ffi.NULL)
        lib.jack_activate(self.client)

    def connect(self, source: str, destination: str) -> None:
        if self.lib.jack_connect(self.client, source.encode(), destination.encode()) not in (0, 17):
            raise RuntimeError(f"cannot connect {source} to {destination}")

    def _process(self, frames: int, _arg: Any) -> int:
        ffi, lib = self.ffi, self.lib
        start, now = self.frames, lib.jack_get_time() / 1e6
        out = np.frombuffer(ffi.buffer(lib.jack_port_get_buffer(self._out, frames), 4 * frames),
                            dtype=np.float32)  # fmt: skip
        data = np.frombuffer(ffi.buffer(lib.jack_port_get_buffer(self._in, frames), 4 * frames),
                             dtype=np.float32)  # fmt: skip
        length = len(self.signal)
        index = (start + np.arange(frames)) % length
        out[:] = self.signal[index]
        end = min(start + frames, len(self.recorded))
        if end > start:
            self.recorded[start:end] = data[: end - start]
        self.cycles.append((start, now))
        self.frames = start + frames
        return 0


def jack_now() -> float:
    """Now, on JACK's clock (seconds)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC_RAW)


def impulses(rate: int, every: float = 0.5) -> np.ndarray:
    """One impulse every ``every`` seconds, at the first frame."""
    signal = np.zeros(int(rate * every), dtype=np.float32)
    signal[0] = 0.5
    return signal


def delays(recorded: np.ndarray, every: int) -> list[int]:
    """For each period of ``every`` frames after the first, where its loudest sample lies:
    the impulse's delay (a loopback of more than ``every`` frames is not measured)."""
    found = []
    for start in range(every, len(recorded) - every + 1, every):
        window = np.abs(recorded[start : start + every])
        if window.max() > 0.05:
            found.append(int(np.argmax(window)))
    return found


def main(argv: list[str]) -> int:
    """``jackclient.py SERVER SECONDS KIND OUT_NPZ [SOURCE->DESTINATION ...]``: a
    :class:`Loopback` named ``bendserver-loopback`` playing impulses (KIND ``impulse``), a
    375 Hz tone (``tone``) or a constant 0.5 (``dc``), its ports connected as given
    (``out``/``in`` stand for its own); prints ``ready`` once connected, then saves what it
    recorded and the cycles' times."""
    server, seconds, kind, target, *links = argv
    name = "bendserver-loopback"
    rate_guess = 48000
    with _Client(server, name + "-probe") as probe:
        rate_guess = int(probe.lib.jack_get_sample_rate(probe.client))
    if kind == "impulse":
        signal = impulses(rate_guess)
    elif kind == "dc":  # a constant: a gain change shows at its sample
        signal = np.full(rate_guess, 0.5, dtype=np.float32)
    else:
        t = np.arange(rate_guess // 375 * 8) / rate_guess
        signal = (0.5 * np.sin(2 * np.pi * 375 * t)).astype(np.float32)
    with Loopback(server, signal, float(seconds), name) as loop:
        for link in links:
            source, destination = (
                f"{name}:{port}" if port in ("out", "in") else port for port in link.split("->")
            )
            loop.connect(source, destination)
        print("ready", flush=True)
        time.sleep(float(seconds))
        frames = min(loop.frames, len(loop.recorded))
        cycles = np.array(loop.cycles, dtype=np.float64).reshape(-1, 2)
    np.savez(target, recorded=loop.recorded[:frames], cycles=cycles, rate=loop.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
