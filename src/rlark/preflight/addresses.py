"""Which network addresses the server may send a request to on a user's behalf (pure): a
webhook's receiver (:mod:`rlark.services.notifications`), an ``objectStorage`` mount's S3
endpoint read back after a Run (:mod:`rlark.record.outputs`). A user must not make the server
call into its own network (cloud metadata at 169.254.169.254, localhost, internal services)
unless the server's administrator allowed that network.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_refusal(ip: IPAddress, allow_networks: tuple[str, ...] | list[str] = ()) -> str | None:
    """Why the server must not send to ``ip`` (``"loopback"``, ``"private"``, ...), or None when
    it may: a public address, or one inside ``allow_networks`` (CIDRs). An IPv4 address written
    as IPv6 (``::ffff:10.0.0.1``) is judged as the IPv4 address it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in ipaddress.ip_network(n, strict=False) for n in allow_networks):
        return None
    for kind, test in (("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback),
                       ("link-local (cloud metadata services live there)", ip.is_link_local),
                       ("multicast", ip.is_multicast), ("private", ip.is_private),
                       ("reserved", ip.is_reserved)):
        if test:
            return kind
    return None if ip.is_global else "not public"
