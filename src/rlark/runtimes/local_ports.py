"""Ports and loopback addresses for local Workers (pure, except :func:`can_bind`).

Several Ray nodes share one host, so each Worker gets its own block of ports below 32768 (Linux's
ephemeral range starts there, and a Ray port inside it was seen taken by a client socket) and its
own loopback address 127.0.0.2, 127.0.0.3, ... (Ray keeps those as node IPs; it rewrites
127.0.0.1). The block layout pins every port ``ray start`` would otherwise pick itself, so two
Jobs on one host never collide (FACTS.md: the dashboard agent's default 52365 does).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Callable, Iterable

PORT_RANGE_START = 20000
PORT_RANGE_END = 32768  # exclusive
BLOCK_SIZE = 64
WORKER_PORTS_OFFSET = 16  # ports base+16 .. base+63 are Ray worker processes' ports

#: offset inside the block -> ``ray start`` flag (see bootstrap/worker.py for the flag list)
PORT_OFFSETS = {
    "gcs": 0,
    "node-manager-port": 1,
    "object-manager-port": 2,
    "dashboard-agent-listen-port": 3,
    "dashboard-agent-grpc-port": 4,
    "runtime-env-agent-port": 5,
    "metrics-export-port": 6,
    "dashboard-port": 7,
    "ray-client-server-port": 8,
}

LOOPBACK_FIRST = ipaddress.IPv4Address("127.0.0.2")
LOOPBACK_LAST = ipaddress.IPv4Address("127.255.255.254")


def port_layout(base: int) -> dict[str, int]:
    """``ray start`` flag -> port for the block starting at ``base`` (``gcs`` is ``--port``)."""
    ports = {flag: base + off for flag, off in PORT_OFFSETS.items()}
    ports["min-worker-port"] = base + WORKER_PORTS_OFFSET
    ports["max-worker-port"] = base + BLOCK_SIZE - 1
    return ports


def block_bases() -> range:
    return range(PORT_RANGE_START, PORT_RANGE_END - BLOCK_SIZE + 1, BLOCK_SIZE)


def pick_port_block(
    used_bases: Iterable[int], is_free: Callable[[int], bool], exclude: Iterable[int] = ()
) -> int:
    """The lowest block base not used by a live Worker in the store and whose ports are free.

    Raises:
        RuntimeError: every block of 20000..32767 is in use.
    """
    taken = set(used_bases) | set(exclude)
    for base in block_bases():
        if base not in taken and is_free(base):
            return base
    raise RuntimeError(
        f"no free block of {BLOCK_SIZE} ports left in {PORT_RANGE_START}-{PORT_RANGE_END - 1}; "
        "stop some Jobs"
    )


def pick_loopback(used: Iterable[str], exclude: Iterable[str] = ()) -> str:
    """The lowest loopback address from 127.0.0.2 up not used by a live Worker."""
    taken = set(used) | set(exclude)
    addr = LOOPBACK_FIRST
    while addr <= LOOPBACK_LAST:
        if str(addr) not in taken and not str(addr).endswith((".0", ".255")):
            return str(addr)
        addr += 1
    raise RuntimeError("no free loopback address left")


def can_bind(ip: str, ports: Iterable[int]) -> bool:
    """True when every port can be bound now on ``ip`` and on all addresses (Ray's GCS and
    agents listen on 0.0.0.0), i.e. no socket listens there."""
    for port in ports:
        for host in ("0.0.0.0", ip):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                # as a server would (gRPC does): TIME-WAIT leftovers do not block, listeners do
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((host, port))
                except OSError:
                    return False
    return True
