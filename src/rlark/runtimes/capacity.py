"""What a machine carries and what Workers ask of it (pure): the amounts a runtime with a
capacity reports (:meth:`rlark.runtimes.base.HasCapacity.capacity`) and the controller's
admission (:mod:`rlark.controller.admission`) counts in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

GiB = 1024**3


@dataclass(frozen=True)
class Amounts:
    """Resources: ``cpu`` (whole CPUs, as ``ray start --num-cpus``), ``memory`` (bytes), ``gpu``
    (count) and named ``devices`` (count per name)."""

    cpu: float = 0.0
    memory: int = 0
    gpu: int = 0
    devices: Mapping[str, float] = field(default_factory=dict)

    def __add__(self, other: "Amounts") -> "Amounts":
        names = set(self.devices) | set(other.devices)
        return Amounts(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu,
                       {n: self.devices.get(n, 0) + other.devices.get(n, 0) for n in sorted(names)})

    def __sub__(self, other: "Amounts") -> "Amounts":
        return Amounts(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu,
                       {n: v - other.devices.get(n, 0) for n, v in self.devices.items()})

    def times(self, n: int) -> "Amounts":
        return Amounts(self.cpu * n, self.memory * n, self.gpu * n,
                       {k: v * n for k, v in self.devices.items()})

    def short_of(self, limit: "Amounts") -> list[str]:
        """What of ``self`` does not fit in ``limit``, as text (``"cpu 3 > 2"``); devices only
        where ``limit`` names them (a device the machine's capacity does not list is not
        limited)."""
        out = []
        if self.cpu > limit.cpu:
            out.append(f"cpu {self.cpu:g} > {max(limit.cpu, 0):g}")
        if self.memory > limit.memory:
            out.append(f"memory {self.memory / GiB:.1f} GiB > {max(limit.memory, 0) / GiB:.1f} GiB")
        if self.gpu > limit.gpu:
            out.append(f"gpu {self.gpu} > {max(limit.gpu, 0)}")
        for name, want in sorted(self.devices.items()):
            if name in limit.devices and want > limit.devices[name]:
                out.append(f"{name} {want:g} > {max(limit.devices[name], 0):g}")
        return out


def describe(a: Amounts) -> str:
    """``"1 CPU, 1.0 GiB memory"`` (CPUs and memory always; GPUs and devices when not zero)."""
    parts = [f"{a.cpu:g} CPU{'s' if a.cpu != 1 else ''}", f"{a.memory / GiB:.1f} GiB memory"]
    if a.gpu:
        parts.append(f"{a.gpu} GPU{'s' if a.gpu != 1 else ''}")
    parts += [f"{v:g} {k}" for k, v in sorted(a.devices.items()) if v]
    return ", ".join(parts)


@dataclass(frozen=True)
class Capacity:
    """What the machine carries: ``total`` resources and at most ``max_starting_nodes`` Ray
    nodes starting at once (each ``ray start`` takes a core for seconds)."""

    total: Amounts
    max_starting_nodes: int
