"""What the API, the CLI and the console show of Jobs, Runs, Workers and Events: plain
JSON-ready dicts, built here once so that every front end shows the same fields.
"""

from __future__ import annotations

from typing import Any

from rlark import runtimes
from rlark.record.build import iso as _iso
from rlark.spec import Job
from rlark.status import conditions_of, is_ready, text_of
from rlark.store import EventRow, JobRow, RunRow, WorkerRow


def worker_view(w: WorkerRow) -> dict[str, Any]:
    return {
        "name": w.name,
        "role": w.role,
        "index": w.index,
        "nodeRank": w.node_rank,
        "isHead": w.is_head,
        "phase": text_of(w.phase),
        "reason": text_of(w.reason),
        "message": w.message,
        "exitCode": w.exit_code,
        "host": w.host,
        "ip": w.ip or w.node_ip,
        "rayNodeId": w.ray_node_id,
        "pid": w.pid,
        "portBase": w.port_base,
        "log": w.log_path,
        "startedAt": _iso(w.started_at),
        "finishedAt": _iso(w.finished_at),
        # copy-mode object-storage mounts: what the keeper copied in and out (its mount lines)
        **({"mounts": [{"name": name, **stats} for name, stats in sorted(mounts.items())]}
           if (mounts := (w.lifecycle or {}).get("mounts")) else {}),
    }


def run_view(r: RunRow, with_workers: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "number": r.number,
        "uid": r.uid,
        "cause": text_of(r.cause),
        "runtime": r.runtime,
        # the queue of the cluster its Workers waited in for admission (None: none)
        "queue": r.queue,
        "phase": text_of(r.phase),
        "reason": text_of(r.reason),
        "message": r.message,
        # beside the phase: AllJoined, HeadReady, ReconcileError (rlark.status.Condition)
        "conditions": [c.to_dict() for c in conditions_of(r.conditions)],
        "exitCode": r.exit_code,
        "createdAt": _iso(r.created_at),
        "startedAt": _iso(r.started_at),
        "runningAt": _iso(r.running_at),
        "finishedAt": _iso(r.finished_at),
        # active Run: Ray nodes joined; ended Run: Workers that did their part (phases.is_ready)
        "workersReady": sum(1 for w in r.workers if is_ready(r.phase, w.phase, w.lifecycle)),
        "workersTotal": len(r.workers),
        "tasks": [
            {"role": t.role, "phase": text_of(t.phase), "ready": t.ready, "total": t.total,
             "nodeRanks": [t.first_rank, t.last_rank]}
            for t in r.tasks
        ],
    }
    if isinstance(r.resume, dict):
        # where it resumes from (rlark restart --resume, failurePolicy.resume): asked, and once
        # launched the checkpoint found (None: none; it started afresh)
        out["resume"] = {k: r.resume.get(k) for k in ("fromRun", "automatic", "checkpoint", "step")
                         if k in r.resume}
    if with_workers:
        out["workers"] = [worker_view(w) for w in r.workers]
        # what each role's Ray nodes were started with (objectStore, worker ports...): only in
        # the detail view, where parsing the Run's spec once is cheap
        nodes = ray_nodes_of(r.spec, r.runtime)
        for task in out["tasks"]:
            task["rayNode"] = nodes.get(task["role"])
    return out


def ray_nodes_of(spec: dict, runtime: str | None) -> dict[str, dict[str, Any]]:
    """Role -> :func:`rlark.runtimes.base.ray_node_view` for a stored Run spec; ``{}`` when it
    no longer parses (a spec stored by another RLark version)."""
    from rlark.runtimes.base import ray_node_summary, ray_node_view

    try:
        job = Job.model_validate(spec)
        views = {role.name: ray_node_view(role, runtime or runtimes.DEFAULT) for role in job.spec.roles}
        return {name: {**v, "summary": ray_node_summary(v)} for name, v in views.items()}
    except ValueError:  # pydantic's ValidationError, or a value that no longer parses
        return {}


def event_view(e: EventRow) -> dict[str, Any]:
    return {
        "time": _iso(e.time),
        "type": text_of(e.type),
        "reason": e.reason,
        "message": e.message,
        "run": e.run_number,
        "worker": e.worker,
        "from": text_of(e.from_phase) or None,
        "to": text_of(e.to_phase) or None,
        "actor": e.actor,
    }


def _ready(run: RunRow) -> int:
    """The Run's ready Workers (``workersReady``) from its Tasks' counts, which each controller
    pass keeps with the Workers' phases (``_sync_tasks``), so a list of Jobs loads no Worker
    rows (a 1,000-Worker Run's are 1,000 lifecycle blobs: issue 23); from the Workers only for
    a Run without Tasks."""
    if run.tasks:
        return sum(t.ready for t in run.tasks)
    return sum(1 for w in run.workers if is_ready(run.phase, w.phase, w.lifecycle))


def job_summary(job: JobRow, run: RunRow | None) -> dict[str, Any]:
    spec = job.spec.get("spec", {})
    roles = spec.get("roles", [])
    return {
        "name": job.name,
        "project": job.project.name,
        "phase": text_of(job.phase),
        "reason": text_of(job.reason),
        "message": job.message,
        "desired": text_of(job.desired),
        "labels": job.labels,
        "headRole": spec.get("headRole"),
        "roles": [{"name": r.get("name"), "workers": r.get("workers", 1)} for r in roles],
        "workersTotal": sum(int(r.get("workers", 1)) for r in roles),
        "workersReady": _ready(run) if run else 0,
        "run": run.number if run else None,
        "runtime": run.runtime if run else None,
        "createdAt": _iso(job.created_at),
        "startedAt": _iso(run.started_at) if run else None,
        "finishedAt": _iso(run.finished_at) if run else None,
        "deleting": job.delete_requested,
    }
