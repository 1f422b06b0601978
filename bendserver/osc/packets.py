"""Parsing OSC datagrams into messages that carry their bundle's timetag.

python-osc's ``OscPacket`` turns a past timetag into "now" and its server sleeps until a future
one; the server here needs the timetag itself (to convert it to a sample time against the audio
clock), so bundles are split here (python-osc's ``osc_types`` reads the timetag and the element
sizes) and each message is parsed by python-osc's ``OscMessage``. Every parse failure, whatever
python-osc raises, becomes one :class:`MalformedPacket`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pythonosc.osc_bundle import OscBundle
from pythonosc.osc_message import OscMessage
from pythonosc.parsing import osc_types

#: Type tags the address space uses: numbers, strings, booleans (Pd and Max send f, i, s).
SUPPORTED_TAGS = frozenset("ifdhsTF")
_BUNDLE_TAG = b"#bundle\x00"
#: Nested bundles deeper than this are refused (a small datagram could nest thousands).
MAX_DEPTH = 8


class MalformedPacket(ValueError):
    """A datagram that is not valid OSC, or uses types the address space has no use for."""


@dataclass(frozen=True)
class Incoming:
    """One OSC message as received: address, arguments, and when it should apply.

    ``timetag`` is the bundle's time in seconds since the epoch (``time.time()``'s clock), or
    ``None`` for a bare message and for a bundle tagged "immediately".
    """

    address: str
    args: tuple[Any, ...]
    timetag: float | None = None


def parse_datagram(data: bytes) -> list[Incoming]:
    """The messages of one datagram (a message or a bundle, nested bundles flattened)."""
    try:
        return _parse(data, None, 0)
    except MalformedPacket:
        raise
    except Exception as error:  # python-osc raises ParseError, IndexError, UnicodeDecodeError...
        raise MalformedPacket(f"not an OSC packet ({type(error).__name__}: {error})") from None


def _parse(data: bytes, timetag: float | None, depth: int) -> list[Incoming]:
    if OscBundle.dgram_is_bundle(data):
        if depth >= MAX_DEPTH:
            raise MalformedPacket(f"bundles nested deeper than {MAX_DEPTH}")
        return _parse_bundle(data, depth)
    if OscMessage.dgram_is_message(data):
        _check_tags(data)
        message = OscMessage(data)
        return [Incoming(message.address, tuple(message.params), timetag)]
    raise MalformedPacket("an OSC packet starts with '/' (message) or '#bundle'")


def _parse_bundle(data: bytes, depth: int) -> list[Incoming]:
    """Split a bundle into its elements (size-prefixed), strictly: python-osc's ``OscBundle``
    skips an element it cannot identify with a log line, where a bad element is refused here."""
    stamp, index = osc_types.get_date(data, len(_BUNDLE_TAG))
    timetag = None if stamp == osc_types.IMMEDIATELY else float(stamp)
    messages: list[Incoming] = []
    while index < len(data):
        size, index = osc_types.get_int(data, index)
        if size <= 0 or size % 4 or index + size > len(data):
            raise MalformedPacket(f"bundle element of {size} bytes does not fit the datagram")
        messages += _parse(data[index : index + size], timetag, depth + 1)
        index += size
    if not messages:
        raise MalformedPacket("empty bundle")
    return messages


def _check_tags(data: bytes) -> None:
    """Refuse type tags outside :data:`SUPPORTED_TAGS` before python-osc logs a warning per
    unknown tag (a flood of odd packets must not flood the log)."""
    _, index = osc_types.get_string(data, 0)
    if index >= len(data):
        return
    tags, _ = osc_types.get_string(data, index)
    if not tags.startswith(","):
        raise MalformedPacket("the type tag string does not start with ','")
    unknown = set(tags[1:]) - SUPPORTED_TAGS
    if unknown:
        raise MalformedPacket(
            f"unsupported OSC type tags {''.join(sorted(unknown))}: send numbers (f, i, d) "
            "or strings (s)"
        )
