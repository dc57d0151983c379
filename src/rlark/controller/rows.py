"""What a pass of the controller reads and writes of the store: the rows of a Run it loads
(:data:`RUN_GRAPH`), how it ends the read (:func:`end_read`), which Workers count as launched or
planned, a Worker row's handle for the runtime (:func:`ref`), and the Run's conditions and times
as a pass writes them.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Callable, ContextManager, Sequence

from sqlalchemy import inspect as sa_inspect
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, defer, joinedload, object_session, selectinload
from sqlalchemy.orm.attributes import set_committed_value

from rlark.controller.phases import ConditionUpdate
from rlark.runtimes.base import WorkerRef
from rlark.status import EventType, Reason, set_condition
from rlark.store import JobRow, RunRow, WorkerRow
from rlark.store.runs import add_event

#: what a pass reads of a Run, loaded up front (``s.get(RunRow, id, options=RUN_GRAPH)``) so that
#: acting on it needs no SQL: its Workers and Tasks, its Job with the Job's project and every Run
#: of the Job with their Workers (a restart waits for the previous Run's Workers), and each
#: Worker's Run (filled from the identity map, no query). What is large is left out (deferred):
#: every Worker's ``facts`` (package lists, diffs, config snapshots: megabytes at 1,000 Workers)
#: and the ``record`` of the Job's other Runs. A pass adds to facts without reading them
#: (:func:`add_facts`, merged when it commits); what needs them loads them in a read of its own
#: (:func:`load_facts`, :func:`load_column`: the record, a resume's source Run)
RUN_GRAPH = (
    selectinload(RunRow.workers).defer(WorkerRow.facts),
    selectinload(RunRow.tasks),
    joinedload(RunRow.job).joinedload(JobRow.project),
    joinedload(RunRow.job).selectinload(JobRow.runs).options(
        defer(RunRow.record), selectinload(RunRow.workers).defer(WorkerRow.facts)),
)

#: ``Session.info`` key: Worker row -> facts added by the pass and not merged yet, as a list of
#: ``(patch, bound)`` (:func:`add_facts`)
PENDING_FACTS = "rlark.pending_facts"


def load_column(read: Callable[[], ContextManager[Session]], rows: Sequence[Any], attr: str) -> None:
    """Load column ``attr`` of ``rows`` (instances of one mapped class with an ``id``) where the
    pass's load deferred it, in one short read of its own (``read()``: a new session, so the
    pass's session opens no transaction while it acts), as if it had been loaded with them:
    nothing is marked changed. Rows that have it already are left as they are."""
    todo = [r for r in rows if attr in sa_inspect(r).unloaded and sa_inspect(r).persistent]
    if not todo:
        return
    cls = type(todo[0])
    with read() as r:
        values: dict[int, Any] = dict(r.execute(
            select(cls.id, getattr(cls, attr)).where(cls.id.in_([x.id for x in todo]))).all())
    for x in todo:
        set_committed_value(x, attr, values.get(x.id))


def add_facts(w: WorkerRow, patch: dict[str, Any], bound: int | None = None) -> None:
    """Add ``patch`` to the Worker's ``facts`` (key by key, later wins), without reading them
    when the pass's load deferred them: the patch waits in the session (:data:`PENDING_FACTS`)
    and is merged into the stored facts when the session commits (:func:`apply_pending_facts`),
    or when :func:`load_facts` loads them. ``bound``: the most JSON bytes the merged facts may
    take; a patch that would pass it is dropped, once said (a Warning Event,
    ``lifecycle.facts_dropped``). Unchanged facts are never written."""
    if not patch:
        return
    s = object_session(w)
    if s is None or "facts" not in sa_inspect(w).unloaded:
        _merge_facts(s, w, patch, bound)
        return
    s.info.setdefault(PENDING_FACTS, {}).setdefault(w, []).append((patch, bound))


def _merge_facts(s: Session | None, w: WorkerRow, patch: dict[str, Any], bound: int | None) -> None:
    current = w.facts or {}
    if all(k in current and current[k] == v for k, v in patch.items()):
        return
    merged = {**current, **patch}
    if bound is not None and len(json.dumps(merged, default=str)) > bound:
        life = w.lifecycle or {}
        if not life.get("facts_dropped"):
            w.lifecycle = {**life, "facts_dropped": True}
            if s is not None:
                add_event(s, w.run.job_id, Reason.ReportsDropped,
                          f"{w.name}'s facts reached {bound} bytes; the rest are not kept",
                          run_number=w.run.number, worker=w.name, type=EventType.Warning)
        return
    w.facts = merged


def _apply_pending(s: Session, workers: Sequence[WorkerRow]) -> None:
    pending = s.info.get(PENDING_FACTS) or {}
    for w in workers:
        for patch, bound in pending.pop(w, ()):
            _merge_facts(s, w, patch, bound)


def load_facts(read: Callable[[], ContextManager[Session]], workers: Sequence[WorkerRow]) -> None:
    """Make ``workers``' facts what they are with this pass's additions (:func:`add_facts`):
    deferred ones loaded in one short read of its own (:func:`load_column`), then the pending
    additions merged. For what reads facts in the act phase (the run record)."""
    load_column(read, workers, "facts")
    by_session: dict[int, tuple[Session, list[WorkerRow]]] = {}
    for w in workers:
        s = object_session(w)
        if s is not None:
            by_session.setdefault(id(s), (s, []))[1].append(w)
    for s, ws in by_session.values():
        _apply_pending(s, ws)


def apply_pending_facts(s: Session) -> None:
    """Merge the facts a pass added (:func:`add_facts`) into each Worker's stored facts, read
    now, in the transaction that writes them (one SELECT for every such Worker). Called when
    the pass's session commits (``before_commit``: :meth:`rlark.controller.state.ControllerState._session`)."""
    pending = s.info.get(PENDING_FACTS)
    if not pending:
        return
    todo = [w for w in pending if "facts" in sa_inspect(w).unloaded and sa_inspect(w).persistent]
    if todo:
        values: dict[int, Any] = dict(s.connection().execute(
            select(WorkerRow.id, WorkerRow.facts).where(WorkerRow.id.in_([w.id for w in todo]))).all())
        for w in todo:
            set_committed_value(w, "facts", values.get(w.id) or {})
    _apply_pending(s, list(pending))
    s.info.pop(PENDING_FACTS, None)


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

#: the columns :func:`ref` reads, in the order of :class:`WorkerRef`'s fields, for a select of
#: plain rows (``WorkerRef(*row)``; joined with the Worker's RunRow) where many Workers are read
#: at once: ORM objects cost about a tenth of a second per 1,000 Workers
REF_COLUMNS = (WorkerRow.name, WorkerRow.pid, WorkerRow.pid_started, WorkerRow.handle, RunRow.uid,
               WorkerRow.node_ip, WorkerRow.port_base, RunRow.worker_uid)

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
