"""An OSC load generator, run as a script in its own process (it imports python-osc only: a
second process importing torch beside a live server costs the server xruns on a small machine).

``python loadgen.py PORT RATE SECONDS FINAL ADDRESS=LOW:HIGH ...`` sends values of the given
addresses in turn, ``RATE`` messages a second (0: as fast as one client can), for ``SECONDS``
(or, with a negative value, ``-SECONDS`` thousand messages), each value different from the last;
then one message per address with the value ``FINAL`` (scaled into the address's range), the
values the server must end with. Prints ``sent N in S s``.
"""

from __future__ import annotations

import socket
import sys
import time

from pythonosc.osc_message_builder import build_msg


def final_value(low: float, high: float, final: float) -> float:
    """Where ``final`` (0..1) falls in ``[low, high]``."""
    return low + (high - low) * final


def run(port: int, rate: float, seconds: float, final: float, ranges: list[tuple]) -> int:
    """Send the load and the final values; returns how many messages were sent."""
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = ("127.0.0.1", port)
    datagrams = [
        build_msg(address, [low + (high - low) * (step % 97) / 97]).dgram
        for step in range(97)
        for address, low, high in ranges
    ]
    count = int(-seconds * 1000) if seconds < 0 else None
    started = time.monotonic()
    sent = 0
    while True:
        if count is not None and sent >= count:
            break
        now = time.monotonic()
        if count is None and now - started >= seconds:
            break
        if rate and sent % max(1, int(rate / 200)) == 0:
            delay = started + sent / rate - now
            if delay > 0:
                time.sleep(delay)
        sender.sendto(datagrams[sent % len(datagrams)], target)
        sent += 1
    for address, low, high in ranges:
        sender.sendto(build_msg(address, [final_value(low, high, final)]).dgram, target)
        sent += 1
    print(f"sent {sent} in {time.monotonic() - started:.3f} s", flush=True)
    return sent


def _ranges(words: list[str]) -> list[tuple]:
    ranges = []
    for word in words:
        address, span = word.split("=")
        low, high = span.split(":")
        ranges.append((address, float(low), float(high)))
    return ranges


if __name__ == "__main__":
    port, rate, seconds, final = sys.argv[1:5]
    run(int(port), float(rate), float(seconds), float(final), _ranges(sys.argv[5:]))
