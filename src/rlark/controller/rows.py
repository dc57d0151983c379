"""What a pass of the controller reads and writes of the store: the rows of a Run it loads
(:data:`RUN_GRAPH`), how it ends the read (:func:`end_read`), which Workers count as launched or
planned, a Worker row's handle for the runtime (:func:`ref`), and the Run's conditions and times
as a pass writes them.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from sqlalchemy import or_
from sqlalchemy.orm import Session, joinedload, selectinload

from rlark.controller.phases import ConditionUpdate
from rlark.runtimes.base import WorkerRef
from rlark.status import set_condition
from rlark.store import JobRow, RunRow, WorkerRow

#: what a pass reads of a Run, loaded up front (``s.get(RunRow, id, options=RUN_GRAPH)``) so that
#: acting on it needs no SQL: its Workers and Tasks, its Job with the Job's project and every Run
#: of the Job with their Workers (a restart waits for the previous Run's Workers), and each
#: Worker's Run (filled from the identity map, no query)
RUN_GRAPH = (
    selectinload(RunRow.workers),
    selectinload(RunRow.tasks),
    joinedload(RunRow.job).joinedload(JobRow.project),
    joinedload(RunRow.job).selectinload(JobRow.runs).selectinload(RunRow.workers),
)


def end_read(s: Session) -> None:
    """End the read transaction that loading opened, keeping every loaded row: nothing is
    pending yet (autoflush is off and nothing was changed) and nothing expires
    (``expire_on_commit=False``), so the pass then acts (runtime calls, log reads) with no
    transaction open and applies what it changed in one short transaction at the end, guarded
    by the Job's and Run's version columns (:class:`StaleDataError` when a request changed them
    meanwhile: nothing of the pass is written)."""
    if s.new or s.dirty or s.deleted:
        raise RuntimeError("end_read() after a change: it would write it (a bug)")
    s.commit()

#: SQL form of WorkerRow.launched
LAUNCHED = or_(WorkerRow.pid.is_not(None), WorkerRow.handle.is_not(None))
#: SQL: launched, or planned for a launch under way (its log path is set before it starts)
PLANNED = or_(LAUNCHED, WorkerRow.log_path.is_not(None))

def iso_time(ts: float | None) -> str:
    """Seconds since the epoch -> ``2026-12-01T04:12:03Z`` (``unknown`` for None)."""
    if ts is None:
        return "unknown"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

def when(at: float | None, run: RunRow) -> datetime:
    """The time a transition happened: ``at`` (a Worker line's own time) when it lies between
    the Run's launch and now (a Worker's clock may be off; RLark's own bounds it), else now."""
    now = utcnow()
    if at is None:
        return now
    try:
        stamp = datetime.fromtimestamp(at, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return now
    start = run.started_at or run.created_at
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    return now if stamp > now or stamp < start else stamp

def ref(w: WorkerRow) -> WorkerRef:
    """The runtime's handle on a Worker row."""
    return WorkerRef(name=w.name, pid=w.pid, pid_started=w.pid_started, handle=w.handle,
                     run_uid=w.run.uid,
                     node_ip=w.node_ip, port_base=w.port_base, uid=w.run.worker_uid)

def utcnow() -> datetime:
    return datetime.now(timezone.utc)

def set_conditions(run: RunRow, updates: list[ConditionUpdate], now: float | None = None) -> None:
    """Apply ``updates`` to ``run.conditions`` (:func:`rlark.status.set_condition`: a condition's
    time changes only with its status); the column is assigned only when something changed, so
    an unchanged pass writes nothing. ``now``: seconds since the epoch (default: now)."""
    when = iso_time(time.time() if now is None else now)
    current = run.conditions
    for u in updates:
        changed = set_condition(current, u.type, u.status, u.reason, u.message, when)
        if changed is not None:
            current = changed
    if current is not run.conditions:
        run.conditions = current
