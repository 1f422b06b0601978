"""An OSC fuzzer, run as a script in its own process (standard library only, like the load
generator: no torch beside a live server).

``python fuzzgen.py PORT RATE SECONDS SEED KEEP ADDRESS ...`` sends random datagrams to
127.0.0.1:PORT, ``RATE`` a second, for ``SECONDS`` (and at most ``RATE * SECONDS``): raw bytes,
messages to the given addresses and to made-up ones with arguments of every OSC type (NaN,
infinities, huge integers, long and non-UTF-8 strings, blobs), messages with bytes flipped or
cut, and bundles (nested, with wrong element sizes) timetagged immediately, in the past, now,
a fraction of a second ahead and an hour ahead. ``KEEP`` is an address never sent in a bundle
due more than a second ahead (the one whose final value the caller checks). Prints
``sent N in S s`` and the count of each kind.
"""

from __future__ import annotations

import math
import random
import socket
import struct
import sys
import time

#: Seconds between 1900 (OSC's epoch) and 1970 (``time.time()``'s).
_NTP_OFFSET = 2208988800
_KINDS = ("raw", "message", "corrupt", "bundle")
_WEIGHTS = (10, 45, 15, 30)


def _padded(data: bytes) -> bytes:
    """``data`` with a NUL and padded to a multiple of 4 bytes (an OSC string)."""
    return data + b"\x00" * (4 - len(data) % 4)


class Fuzzer:
    """Random datagrams from a seeded generator, for the addresses ``addresses``."""

    def __init__(self, seed: int, addresses: list[str], keep: str) -> None:
        self.random = random.Random(seed)
        self.addresses = addresses
        self.keep = keep

    def datagram(self) -> tuple[str, bytes]:
        """One datagram and its kind."""
        kind = self.random.choices(_KINDS, _WEIGHTS)[0]
        return kind, getattr(self, f"_{kind}")()

    def _raw(self) -> bytes:
        r = self.random
        head = r.choice([b"", b"/", b"#bundle\x00", b"/bend/"])
        return head + r.randbytes(r.randrange(0, 256))

    def _address(self) -> str:
        r = self.random
        if r.random() < 0.7:
            return r.choice(self.addresses)
        parts = ["bend", "engine", "get", "list", "x" * r.randrange(1, 300), "", "..", "*", "é",
                 "preset", "attr"]  # fmt: skip
        words = [r.choice(parts) for _ in range(r.randrange(1, 6))]
        return "/" + "/".join(words)

    def _argument(self) -> tuple[str, bytes]:
        r = self.random
        tag = r.choice("ffffiiissdhTFNIbcmr[]")
        if tag == "f":
            value = r.choice([r.uniform(-2, 2), math.nan, math.inf, -math.inf, 0.0, 1e38, -1e-45])
            return tag, struct.pack(">f", value)
        if tag in "irc":
            return tag, struct.pack(
                ">i", r.choice([0, 1, -1, 2**31 - 1, -(2**31), r.randrange(-9, 99)])
            )
        if tag in "dh":
            value = r.choice([r.uniform(-2, 2), math.nan, 1e300])
            return tag, struct.pack(">d", value) if tag == "d" else struct.pack(">q", 2**62)
        if tag == "s":
            text = r.choice([b"", b"drive", b"mask", b"x" * r.randrange(0, 2000), r.randbytes(9),
                             b"../../etc/passwd", b"Scale", b"default"])  # fmt: skip
            return tag, _padded(text.replace(b"\x00", b"."))
        if tag == "b":
            blob = r.randbytes(r.randrange(0, 64))
            return tag, struct.pack(">i", len(blob)) + blob + b"\x00" * (-len(blob) % 4)
        if tag == "m":
            return tag, r.randbytes(4)
        return tag, b""  # T F N I [ ]: no data

    def _message(self, address: str | None = None) -> bytes:
        address = address or self._address()
        arguments = [self._argument() for _ in range(self.random.choice([0, 1, 1, 1, 2, 3, 6]))]
        tags = "," + "".join(tag for tag, _ in arguments)
        body = b"".join(data for _, data in arguments)
        return _padded(address.encode()) + _padded(tags.encode()) + body

    def _corrupt(self) -> bytes:
        r = self.random
        data = bytearray(self._message())
        for _ in range(r.randrange(1, 4)):
            data[r.randrange(len(data))] = r.randrange(256)
        return bytes(data[: r.randrange(1, len(data) + 1)] if r.random() < 0.5 else data)

    def _bundle(self, depth: int = 0) -> bytes:
        r = self.random
        now = time.time()
        when = r.choice(["immediately", "zero", "past", "now", "soon", "hour", "max"])
        seconds = {"past": now - 3600, "now": now, "soon": now + r.uniform(0, 0.5),
                   "hour": now + 3600}.get(when)  # fmt: skip
        if seconds is not None:
            stamp = int((seconds + _NTP_OFFSET) * 2**32)
        else:
            stamp = {"immediately": 1, "zero": 0, "max": 2**64 - 1}[when]
        far = when in ("hour", "max")
        elements = []
        for _ in range(r.randrange(0, 5)):
            if depth < 10 and r.random() < 0.2:
                element = self._bundle(depth + 1)
            else:
                element = self._message()
                while far and element.startswith(_padded(self.keep.encode())):
                    element = self._message()
            size = len(element) if r.random() < 0.9 else r.randrange(-8, 4 * len(element))
            elements.append(struct.pack(">i", size) + element)
        return b"#bundle\x00" + struct.pack(">Q", stamp) + b"".join(elements)


def run(port: int, rate: float, seconds: float, seed: int, keep: str, addresses: list[str]) -> int:
    """Send the fuzz; returns how many datagrams were sent."""
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = ("127.0.0.1", port)  # never anywhere else
    fuzzer = Fuzzer(seed, addresses, keep)
    limit = int(rate * seconds)
    kinds = dict.fromkeys(_KINDS, 0)
    started = time.monotonic()
    sent = 0
    while sent < limit and time.monotonic() - started < seconds:
        if sent % max(1, int(rate / 200)) == 0:
            delay = started + sent / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        kind, data = fuzzer.datagram()
        try:
            sender.sendto(data, target)
        except OSError:  # too large for a datagram: counted as sent nowhere
            continue
        kinds[kind] += 1
        sent += 1
    counts = " ".join(f"{kind}={count}" for kind, count in kinds.items())
    print(f"sent {sent} in {time.monotonic() - started:.3f} s {counts}", flush=True)
    return sent


if __name__ == "__main__":
    port, rate, seconds, seed, keep, *names = sys.argv[1:]
    run(int(port), float(rate), float(seconds), int(seed), keep, names)
