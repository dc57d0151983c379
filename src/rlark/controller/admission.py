"""Admission of Pending Runs by free capacity (local runtime; pure: no I/O, no clock).

Every local Worker runs on this one machine, so starting Runs faster than it can carry them only
overloads it: ten 1-CPU Jobs on two cores started ten Ray heads at once and three timed out inside
``ray start``. :func:`admit` takes the Pending Runs in order (oldest first) and says which may
launch now and which wait, and where each waiting one stands in the queue:

* a Run starts when its Workers' requests (CPU, memory, GPUs, named devices: what ``ray start``
  is told, see :func:`rlark.runtimes.base.ray_resources`) fit in what the Workers of other Runs
  leave free, and its Ray nodes fit under the bound on nodes starting at once;
* a Run that asks more than the whole machine (the quickstart's 3 CPUs on 2 cores; preflight
  warned at submit) starts when nothing else holds capacity or is starting;
* strictly in order, higher ``spec.priority`` first, then oldest first: a Run that has to wait
  holds back every Run behind it, so a large Run is not passed over forever by small ones.

A waiting Run is ``Queued``, in the words every runtime's queue uses
(:func:`rlark.status.queued_message`): this machine's queue, its place, what it waits for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Hashable, TypeVar

from rlark.runtimes.capacity import Amounts, Capacity, describe
from rlark.status import MACHINE_QUEUE, Reason, queued_message


@dataclass(frozen=True)
class Usage:
    """What Workers of admitted Runs hold now: the sum of their requests, how many of their Ray
    nodes are still starting, and whether any Worker holds capacity at all."""

    held: Amounts = field(default_factory=Amounts)
    starting_nodes: int = 0
    busy: bool = False


K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Candidate(Generic[K]):
    """A Pending Run: its ``key`` (the caller's id), what all its Workers ask for, how many
    Ray nodes (Workers) it starts, and its ``spec.priority``."""

    key: K
    demand: Amounts
    nodes: int
    priority: int = 0


@dataclass(frozen=True)
class Decision:
    """``admit``: launch now. Otherwise ``position`` (1 = next) and ``message`` say why it waits.
    ``oversized``: what of the Run exceeds the whole machine (it is admitted alone)."""

    admit: bool
    position: int | None = None
    message: str = ""
    oversized: tuple[str, ...] = ()


REASON = Reason.Queued
#: the queue's name in a queued Run's message
QUEUE = MACHINE_QUEUE


def admit(queue: list[Candidate[K]], usage: Usage, capacity: Capacity) -> dict[K, Decision]:
    """Decide every Pending Run in ``queue`` (oldest first) at once: which launch now (their
    requests counted as held for those behind them) and which wait, with their place. The
    queue is taken by ``priority`` first (higher first; a stable sort keeps the age order
    among equals)."""
    out: dict[K, Decision] = {}
    held, starting, busy = usage.held, usage.starting_nodes, usage.busy
    position = 0
    for c in sorted(queue, key=lambda c: -c.priority):
        if position:  # someone ahead waits: so does everyone behind it
            position += 1
            out[c.key] = Decision(False, position, queued_message(
                QUEUE, position, "Runs start in order as the Workers of earlier Runs end"))
            continue
        oversized = tuple(c.demand.short_of(capacity.total))
        free = capacity.total - held
        if oversized:
            fits = not busy and starting == 0
            why = (f"it asks for more than this machine has ({'; '.join(oversized)}), so it "
                   "starts alone, once no other Run's Workers are left")
        else:
            short = c.demand.short_of(free)
            nodes_ok = starting == 0 or starting + c.nodes <= capacity.max_starting_nodes
            fits = not short and nodes_ok
            if short:
                why = (f"needs {describe(c.demand)}; free now: {describe(_floor(free))} of "
                       f"{describe(capacity.total)}")
            else:
                why = (f"{starting} Ray node{'s' if starting != 1 else ''} starting; at most "
                       f"{capacity.max_starting_nodes} start at once (RLARK_MAX_STARTING_NODES)")
        if fits:
            out[c.key] = Decision(True, oversized=oversized)
            held, starting, busy = held + c.demand, starting + c.nodes, True
            continue
        position = 1
        out[c.key] = Decision(False, position, queued_message(QUEUE, position, why))
    return out


def _floor(a: Amounts) -> Amounts:
    return Amounts(max(a.cpu, 0), max(a.memory, 0), max(a.gpu, 0),
                   {k: max(v, 0) for k, v in a.devices.items()})
