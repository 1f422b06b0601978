"""PortAudio through sounddevice: its lifetime, and finding a device by name.

PortAudio scans its host APIs once, when it is initialised: a JACK server started after that
is invisible. :func:`portaudio` therefore re-initialises it before a stream is opened, and
:func:`release` terminates it after the stream is closed (before a JACK server may stop).
Devices are chosen by name, never by index (indexes change with what is plugged in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BendingError


@dataclass(frozen=True)
class Device:
    """A PortAudio device: index (valid until PortAudio is re-initialised), names, channels."""

    index: int
    name: str
    hostapi: str
    inputs: int
    outputs: int

    def __str__(self) -> str:
        return f"{self.name} ({self.hostapi})"


def portaudio() -> Any:
    """The sounddevice module, with PortAudio freshly initialised (a new scan of devices)."""
    try:
        import sounddevice as sd
    except OSError as error:  # the PortAudio library is missing
        raise BendingError(
            f"PortAudio is not available ({error}): install it (Debian: apt-get install "
            "libportaudio2) or play without a sound card with --audio null"
        ) from None
    if sd._initialized:
        sd._terminate()
    sd._initialize()
    return sd


def release() -> None:
    """Terminate PortAudio (after every stream is closed)."""
    import sounddevice as sd

    while sd._initialized:
        sd._terminate()


def devices(sd: Any) -> list[Device]:
    """Every device PortAudio found."""
    apis = sd.query_hostapis()
    return [
        Device(
            index=info["index"],
            name=info["name"],
            hostapi=apis[info["hostapi"]]["name"],
            inputs=info["max_input_channels"],
            outputs=info["max_output_channels"],
        )
        for info in sd.query_devices()
    ]


def find_device(sd: Any, name: str | None, direction: str) -> Device:
    """The device for ``direction`` ("input" or "output") called ``name``.

    ``name`` may be a host API ("jack", "alsa", "coreaudio", "wasapi": its default device), a
    part of a device's name (case-insensitive), or None for PortAudio's default device.
    """
    found = devices(sd)
    usable = [d for d in found if (d.inputs if direction == "input" else d.outputs) > 0]
    if name is None:
        default = sd.default.device[0 if direction == "input" else 1]
        chosen = [d for d in usable if d.index == default]
    else:
        chosen = _by_hostapi(sd, usable, name, direction) or [
            d for d in usable if name.lower() in d.name.lower()
        ]
    if not chosen:
        listing = "; ".join(str(d) for d in usable) or "none"
        if name is not None and name.lower() == "jack":
            raise BendingError(
                "no JACK server runs (PortAudio found none to connect to): start one, e.g. "
                "jackd -d alsa for a sound card or jackd -d dummy for a clock without one "
                "(a checkout has scripts/jack_dummy.sh start), then serve again; or choose "
                f"another device ({direction} devices: {listing}), or --audio null"
            )
        what = f"no {direction} device matches {name!r}" if name else f"no default {direction}"
        apis = sorted({d.hostapi.split()[0].lower() for d in usable})
        example = f" (e.g. --audio {apis[0]})" if apis else ""
        raise BendingError(
            f"{what}. {direction.capitalize()} devices: {listing}. Give a device or host API "
            f"name{example}, or play without a sound card with --audio null"
        )
    return chosen[0]


def _by_hostapi(sd: Any, usable: list[Device], name: str, direction: str) -> list[Device]:
    for api in sd.query_hostapis():
        if name.lower() not in api["name"].lower():
            continue
        default = api[f"default_{direction}_device"]
        in_api = [d for d in usable if d.hostapi == api["name"]]
        return sorted(in_api, key=lambda d: d.index != default)
    return []
