"""The queue view (``rlark queue``, ``GET /api/v1/queue``, the console's Queue page): every Run
not admitted yet, by queue, with its place, what it asks for and how long it has waited.

The same on every runtime: on the local runtime the queue is this machine's own admission queue
(:mod:`rlark.controller.admission`: ``spec.priority`` first, then age), and a place is worked
out here the same way; on Kubernetes with Kueue it is the Kueue LocalQueue a Run's Pods wait in,
and its place in line is Kueue's to tell: the controller keeps the place Kueue's visibility API
last gave (``runs.queue_position``; none where that API is not served).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from rlark.preflight.quantities import parse_cpu, parse_memory_bytes
from rlark.record.build import iso
from rlark.status import MACHINE_QUEUE, Phase, text_of
from rlark.store import JobRow, ProjectRow, RunRow, Store

if TYPE_CHECKING:
    from rlark.runtimes.base import RuntimeProfile


def _priority(spec: dict[str, Any]) -> int:
    value = (spec or {}).get("spec", {}).get("priority", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def requested(spec: dict[str, Any]) -> dict[str, float]:
    """What all Workers of a stored Run spec ask for, as the Job says it (the same on every
    runtime): ``cpu`` (cores), ``memory`` (bytes), ``gpu``; a role whose amounts do not parse
    adds nothing (a spec stored by another RLark version must not break the view)."""
    want: dict[str, float] = {"cpu": 0.0, "memory": 0, "gpu": 0}
    for role in (spec or {}).get("spec", {}).get("roles") or []:
        if not isinstance(role, dict):
            continue
        res = role.get("resources") or {}
        n = max(int(role.get("workers", 1)), 0)
        try:
            if res.get("cpu") is not None:
                want["cpu"] += float(parse_cpu(res["cpu"])) * n
            if res.get("memory") is not None:
                want["memory"] += parse_memory_bytes(res["memory"]) * n
            want["gpu"] += max(int(res.get("gpu") or 0), 0) * n
        except (TypeError, ValueError):
            continue
    return want


def _workers(spec: dict[str, Any]) -> int:
    roles = (spec or {}).get("spec", {}).get("roles") or []
    return sum(max(int(r.get("workers", 1)), 0) for r in roles if isinstance(r, dict))


def pending(store: Store, profile: RuntimeProfile, projects: list[str] | None = None,
            now: float | None = None) -> dict[str, Any]:
    """Every Run of ``projects`` (None: all) that is Pending and not being stopped:
    ``{"items": [{"queue", "project", "job", "run", "priority", "position", "requests",
    "workers", "waitingSeconds", "createdAt", "reason", "message"}]}``, by queue, then as the
    queue takes them (priority, then age).

    ``queue``: the queue the Run waits in (the one its Workers were launched into; else the
    one its project's setting names; on a runtime whose queue is its own, this machine's);
    None: none (a Run about to start). ``position``: 1 = next, where RLark knows it (this
    machine's queue; a cluster's queue that reports it: Kueue's visibility API, the place in
    the LocalQueue's ClusterQueue); None where the queue does not report one. ``requests``: what all its
    Workers ask for (``cpu`` cores, ``memory`` bytes, ``gpu``), from its spec."""
    now = time.time() if now is None else now
    with store.session() as s:
        stmt = (select(RunRow).join(JobRow, JobRow.id == RunRow.job_id)
                .join(ProjectRow, ProjectRow.id == JobRow.project_id)
                .where(RunRow.phase == Phase.Pending, RunRow.stop_requested.is_(False))
                .options(selectinload(RunRow.job).selectinload(JobRow.project)))
        if projects is not None:
            stmt = stmt.where(ProjectRow.name.in_(projects))
        runs = list(s.scalars(stmt.order_by(RunRow.id)))
        items: list[dict[str, Any]] = []
        for run in runs:
            project = run.job.project
            queue = run.queue or profile.queue_of(project.queue) or (
                None if profile.queues else MACHINE_QUEUE)
            created: datetime = run.created_at
            items.append({
                "queue": queue, "project": project.name, "job": run.job.name, "run": run.number,
                "priority": _priority(run.spec),
                "position": run.queue_position if run.queue is not None else None,
                "requests": requested(run.spec), "workers": _workers(run.spec),
                "waitingSeconds": round(max(0.0, now - created.timestamp()), 1),
                "createdAt": iso(created), "reason": text_of(run.reason), "message": run.message,
                "_id": run.id,
            })
    # this machine's queue: RLark's own admission order (controller/admission.py), so the place
    # is known; it is counted over every project's Runs, also those the caller cannot see
    own = sorted((i for i in items if i["queue"] == MACHINE_QUEUE),
                 key=lambda i: (-i["priority"], i["_id"]))
    if projects is not None and own:
        own = _all_machine_queue(store, profile, own)
    for place, item in enumerate(own, 1):
        item["position"] = place
    items.sort(key=lambda i: (i["queue"] or "", -i["priority"], i["_id"]))
    for item in items:
        del item["_id"]
    return {"items": items}


def _all_machine_queue(store: Store, profile: RuntimeProfile,
                       visible: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``visible`` (items of this machine's queue the caller may see), placed among every
    Pending Run of the queue: the returned list holds placeholders for the others so that
    enumerate() gives each visible item its true place."""
    with store.session() as s:
        rows = s.execute(select(RunRow.id, RunRow.spec).where(
            RunRow.phase == Phase.Pending, RunRow.stop_requested.is_(False),
            RunRow.queue.is_(None))).all()
    by_id = {i["_id"]: i for i in visible}
    order = sorted(rows, key=lambda r: (-_priority(r.spec), r.id))
    return [by_id.get(r.id, {}) for r in order]
