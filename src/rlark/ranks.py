"""Node ranks: which Worker of a Job gets which ``RLINF_NODE_RANK``.

The rule (ARCHITECTURE.md): the head role's first Worker is rank 0 (the Ray head), then the rest
of the head role, then every other role in spec order. Ranks are contiguous 0..N-1 and depend only
on the spec, so restarting the same spec gives every Worker the same rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlark.spec import Job, worker_name


@dataclass(frozen=True)
class PlannedWorker:
    name: str
    role: str
    index: int  # index of the Worker inside its role, 0-based
    node_rank: int
    is_head: bool


def plan_workers(job: Job) -> list[PlannedWorker]:
    """Every Worker of ``job`` with its name and node rank, ordered by node rank.

    Requires a Job whose ``spec.headRole`` names one of its roles (preflight checks this).

    Raises:
        ValueError: ``spec.headRole`` names no role.
    """
    head = job.role(job.spec.head_role)
    if head is None:
        raise ValueError(f"spec.headRole = {job.spec.head_role!r} is not the name of any role")
    ordered = [head] + [r for r in job.spec.roles if r.name != head.name]
    out: list[PlannedWorker] = []
    for role in ordered:
        for index in range(role.workers):
            out.append(
                PlannedWorker(
                    name=worker_name(job.name, role.name, index),
                    role=role.name,
                    index=index,
                    node_rank=len(out),
                    is_head=not out,
                )
            )
    return out


def rank_ranges(workers: list[PlannedWorker]) -> dict[str, tuple[int, int]]:
    """role -> (first rank, last rank), inclusive; e.g. {'head': (0, 0), 'pool': (1, 2)}."""
    out: dict[str, tuple[int, int]] = {}
    for w in workers:
        lo, _ = out.get(w.role, (w.node_rank, w.node_rank))
        out[w.role] = (lo, w.node_rank)
    return out
