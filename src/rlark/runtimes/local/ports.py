"""Ports and loopback addresses for local Workers (pure, except :func:`can_bind`).

Several Ray nodes share one host, so each Worker gets its own block of ports below 32768 (Linux's
ephemeral range starts there, and a Ray port inside it was seen taken by a client socket) and its
own loopback address 127.0.0.2, 127.0.0.3, ... (Ray keeps those as node IPs; it rewrites
127.0.0.1). The block layout pins every port ``ray start`` would otherwise pick itself, so two
Jobs on one host never collide (FACTS.md: the dashboard agent's default 52365 does).

A block is a whole number of 64-port *units*: its first 16 ports are the node's own (GCS,
raylet, agents: :data:`PORT_OFFSETS`), the rest is the node's worker-port range
(``--min-worker-port``/``--max-worker-port``). Ray gives every worker process of the node one
port from that range (each task worker, each actor, each driver), and a worker that finds none
never starts: the raylet's "No available ports" (seen: 56 ``num_cpus=0`` actors on one node with
48 ports, 9 of them hung forever). So the range is sized to the role
(:func:`default_worker_ports`, which fills its block, or exactly the role's ``ray.workerPorts``
in a block rounded up to whole units). Units are what the host-wide
reservations lock (:mod:`rlark.runtimes.local.reservations`), so blocks of different sizes never
overlap, in one server or across servers.
"""

from __future__ import annotations

import ipaddress
import math
import socket
from typing import Callable, Iterable

from rlark.spec import WORKER_PORTS_MAX_DEFAULT, WORKER_PORTS_PER_CPU

PORT_RANGE_START = 20000
PORT_RANGE_END = 32768  # exclusive
#: blocks are allocated and reserved in units of this many ports
UNIT = 64
#: ports base+16 .. base+size-1 are Ray worker processes' ports
WORKER_PORTS_OFFSET = 16
#: the default worker-port range: :data:`~rlark.spec.WORKER_PORTS_PER_CPU` ports per CPU the node
#: offers Ray, at least 48 (what one unit leaves), at most
#: :data:`~rlark.spec.WORKER_PORTS_MAX_DEFAULT`; rounded up to fill whole units (:func:`block_size`)
WORKER_PORTS_MIN_DEFAULT = UNIT - WORKER_PORTS_OFFSET
#: the largest block one host's range holds (whole units)
MAX_BLOCK_SIZE = (PORT_RANGE_END - PORT_RANGE_START) // UNIT * UNIT
MAX_WORKER_PORTS = MAX_BLOCK_SIZE - WORKER_PORTS_OFFSET

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


def default_worker_ports(cpus: int) -> int:
    """Worker ports a node with ``cpus`` CPUs gets when its role does not say:
    ``16 * cpus``, between 48 and 4096 (before :func:`block_size` rounds the block up)."""
    return max(WORKER_PORTS_MIN_DEFAULT, min(WORKER_PORTS_MAX_DEFAULT, WORKER_PORTS_PER_CPU * cpus))


def block_size(worker_ports: int) -> int:
    """Ports in the block of a node that needs ``worker_ports`` worker ports: its 16 own ports
    plus the worker ports, rounded up to whole units (the extra ports go to the worker range).
    ``48`` -> 64, ``128`` -> 192."""
    return max(1, math.ceil((WORKER_PORTS_OFFSET + max(0, worker_ports)) / UNIT)) * UNIT


def worker_ports_of(size: int) -> int:
    """How many worker ports a block of ``size`` ports gives Ray."""
    return size - WORKER_PORTS_OFFSET


def port_layout(base: int, size: int = UNIT, worker_ports: int | None = None) -> dict[str, int]:
    """``ray start`` flag -> port for the block of ``size`` ports starting at ``base`` (``gcs``
    is ``--port``). The worker range starts at ``base+16`` and has ``worker_ports`` ports, or
    fills the block (``base+16 .. base+size-1``) when None.

    Raises:
        ValueError: ``worker_ports`` does not fit the block.
    """
    if worker_ports is None:
        worker_ports = worker_ports_of(size)
    if not 1 <= worker_ports <= worker_ports_of(size):
        raise ValueError(f"{worker_ports} worker ports do not fit a block of {size} ports")
    ports = {flag: base + off for flag, off in PORT_OFFSETS.items()}
    ports["min-worker-port"] = base + WORKER_PORTS_OFFSET
    ports["max-worker-port"] = base + WORKER_PORTS_OFFSET + worker_ports - 1
    return ports


def unit_bases() -> range:
    """The first port of every unit in the host's range."""
    return range(PORT_RANGE_START, PORT_RANGE_END - UNIT + 1, UNIT)


def block_units(base: int, size: int) -> range:
    """The units a block covers (what is reserved host-wide for it)."""
    return range(base, base + size, UNIT)


def pick_port_block(
    taken: Iterable[tuple[int, int]],
    size: int,
    is_free: Callable[[int], bool],
    exclude: Iterable[tuple[int, int]] = (),
) -> int:
    """The lowest unit-aligned base of a block of ``size`` ports that overlaps no ``taken`` or
    ``exclude`` range (``(start, end)``, end exclusive: live Workers in the store, blocks placed
    earlier in this Run) and for which ``is_free(base)`` says yes (the caller reserves and
    probes the block there).

    Raises:
        RuntimeError: no such block is left in 20000..32767 (or ``size`` exceeds the range).
    """
    busy = sorted(set(taken) | set(exclude))
    for base in range(PORT_RANGE_START, PORT_RANGE_END - size + 1, UNIT):
        end = base + size
        if any(s < end and base < e for s, e in busy):
            continue
        if is_free(base):
            return base
    raise RuntimeError(
        f"no free block of {size} ports ({worker_ports_of(size)} Ray worker ports) left in "
        f"{PORT_RANGE_START}-{PORT_RANGE_END - 1}; stop some Jobs, or lower the roles' "
        "ray.workerPorts"
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
