"""JACK's own xrun count: a client that does nothing but count the server's xrun callbacks.

``bendserver stress`` keeps one on its JACK server, so that each row says how many xruns JACK
saw (whichever client caused them) beside what the server counted. libjack is called through
cffi's ABI mode (cffi comes with sounddevice); the callback runs on JACK's notification thread,
never in a process cycle.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import BendingError

_DECLARATIONS = """
typedef struct _jack_client jack_client_t;
typedef int (*JackXRunCallback)(void *arg);
jack_client_t *jack_client_open(const char *client_name, int options, int *status, ...);
int jack_set_xrun_callback(jack_client_t *client, JackXRunCallback cb, void *arg);
int jack_activate(jack_client_t *client);
int jack_client_close(jack_client_t *client);
"""
JACK_NO_START_SERVER = 0x01
JACK_SERVER_NAME = 0x04


class JackXruns:
    """Counts the xruns of the JACK server ``server`` while open (``count``)."""

    def __init__(self, server: str, name: str = "bendserver-xruns") -> None:
        import cffi

        self.count = 0
        self._lock = threading.Lock()
        self._ffi = ffi = cffi.FFI()
        ffi.cdef(_DECLARATIONS)
        try:
            self._lib = lib = ffi.dlopen("libjack.so.0")
        except OSError as error:
            raise BendingError(f"libjack is missing (Debian package jackd2): {error}") from None
        status = ffi.new("int *")
        options = JACK_NO_START_SERVER | JACK_SERVER_NAME
        self._client = lib.jack_client_open(
            name.encode(), options, status, ffi.new("char[]", server.encode())
        )
        if self._client == ffi.NULL:
            raise BendingError(f"cannot watch JACK server {server} (status {status[0]:#x})")
        self._callback: Any = ffi.callback("int(void *)", self._xrun)
        lib.jack_set_xrun_callback(self._client, self._callback, ffi.NULL)
        lib.jack_activate(self._client)

    def _xrun(self, _arg: Any) -> int:
        with self._lock:
            self.count += 1
        return 0

    def close(self) -> None:
        if self._client is not None:
            self._lib.jack_client_close(self._client)
            self._client = None

    def __enter__(self) -> JackXruns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
