"""Which hosts may control the server: loopback always, other networks only when allowed."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from ..errors import BendingError

_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class AccessList:
    """Loopback plus the networks given with ``--allow`` (CIDR notation)."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self.networks = [*_LOOPBACK, *(parse_network(text) for text in allow)]

    def allows(self, host: str) -> bool:
        """True when packets from ``host`` (an IP address string) may be handled."""
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


def parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """One ``--allow`` value: a network such as ``192.168.1.0/24`` or a single address."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise BendingError(
            f"--allow takes a network in CIDR notation such as 192.168.1.0/24 "
            f"(or one address), got {text!r}"
        ) from None
