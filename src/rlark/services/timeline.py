"""A Run's timeline: for each Worker, the spans of its life (Pending, Preparing, RayStarting,
Joined, Running, Exited), the join barrier's moment and any failure, so that one look says which
Worker held the Run up. The API (``GET /api/v1/jobs/{name}/runs/{number}/timeline``), ``rlark
describe JOB --timeline`` and the Job page's chart all show what :func:`build_timeline` builds.

The moments come from the Workers' own lifecycle lines (their ``ts``, on the clock of the
machine that ran each Worker), which the controller keeps per Worker as ``lifecycle["times"]``
(:func:`rlark.controller.lifecycle.note_moment`; names: :func:`rlark.bootstrap.lifecycle.moment_of`);
the Run's creation and end are the server's. Workers on other machines may disagree with the
server's clock by their skew: spans are kept in order (a moment earlier than the one before it
is moved up to it), never reordered.

Every time here is Unix epoch seconds (UTC), a float rounded to milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from rlark.bootstrap.lifecycle import ALL_JOINED
from rlark.status import Phase, WorkerPhase, text_of

#: the spans of a Worker's life, in order: Pending (from the Run's creation: admission,
#: scheduling, a Pod's image pull), Preparing (the Worker's own start-up before Ray: facts and
#: the role's prepare script), RayStarting (``ray start``, a Worker's wait for the head),
#: Joined (its Ray node is up; waiting at the join barrier), Running (the run script runs on the
#: head), Exited (from the end of its part, a failure or a stop, until its processes are gone)
#: the one span that is no Worker phase: from its wait for the head through ``ray start``
RAY_STARTING = "RayStarting"
PHASES = (WorkerPhase.Pending, WorkerPhase.Preparing, RAY_STARTING, WorkerPhase.Joined,
          WorkerPhase.Running, WorkerPhase.Exited)
#: the most characters of a failure's message a timeline carries (its first line)
FAILURE_TEXT = 300


@dataclass(frozen=True)
class WorkerLife:
    """What a timeline needs of one Worker: ``times`` (moment name -> Unix seconds, as the
    controller keeps them), ``finished`` (Unix seconds its processes were seen gone, the
    server's clock; None: not yet or never started), ``failure`` (``reason``, ``message``,
    ``at``: Unix seconds or None)."""

    name: str
    role: str
    rank: int
    is_head: bool = False
    times: Mapping[str, float] = field(default_factory=dict)
    finished: float | None = None
    failure: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RunLife:
    """What a timeline needs of the Run: its number, phase, creation and end (Unix seconds,
    the server's clock; ``finished`` None while it is active)."""

    number: int
    created: float
    finished: float | None = None
    phase: str = Phase.Pending


def _ms(t: float | None) -> float | None:
    return None if t is None else round(float(t), 3)


def _first(*moments: float | None) -> float | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


def _failure(w: WorkerLife) -> dict[str, Any] | None:
    if not w.failure:
        return None
    message = str(w.failure.get("message") or "").split("\n", 1)[0][:FAILURE_TEXT]
    at = w.failure.get("at")
    return {"reason": str(w.failure.get("reason") or ""), "message": message,
            "at": _ms(at if isinstance(at, (int, float)) else w.times.get("failed"))}


def worker_spans(w: WorkerLife, run: RunLife, run_start: float | None) -> list[dict[str, Any]]:
    """The spans of one Worker: ``[{"phase", "start", "end"}]`` in :data:`PHASES` order, each
    ending where the next begins, the last at the Worker's exit (its ``exit`` line, else when it
    was seen gone, else the Run's end; None while it lives). A phase the Worker never reached,
    or that left no moment, has no span. ``run_start``: when the head's run script started
    (the Running span of every Worker that joined before its part ended). Pure."""
    t = w.times
    failed_at = (w.failure or {}).get("at")
    done = _first(t.get("failed"), failed_at if isinstance(failed_at, (int, float)) else None,
                  t.get("stopped"), t.get("run_finished"), t.get("exit"))
    joined = t.get(WorkerPhase.RayStarted)
    running = (run_start if joined is not None and run_start is not None
               and (done is None or run_start < done) else None)
    marks = [(WorkerPhase.Pending, run.created),
             (WorkerPhase.Preparing, _first(t.get("keeper"), t.get(WorkerPhase.Preparing))),
             (RAY_STARTING, _first(t.get(WorkerPhase.WaitingForHead), t.get(WorkerPhase.StartingRay))),
             (WorkerPhase.Joined, joined), (WorkerPhase.Running, running), (WorkerPhase.Exited, done)]
    kept: list[tuple[str, float]] = []
    for phase, at in marks:
        if at is not None:
            kept.append((phase, max(at, kept[-1][1]) if kept else at))
    end = _first(t.get("exit")) or w.finished or run.finished
    if end is not None:
        end = max(end, kept[-1][1])
    return [{"phase": phase, "start": _ms(at),
             "end": _ms(kept[i + 1][1] if i + 1 < len(kept) else end)}
            for i, (phase, at) in enumerate(kept)]


def build_timeline(run: RunLife, workers: Sequence[WorkerLife], now: float) -> dict[str, Any]:
    """The timeline of ``run``: ``{"run", "phase", "start", "end", "now", "barrier",
    "runStarted", "phases", "workers": [{"name", "role", "rank", "isHead", "spans": [{"phase",
    "start", "end"}], "joinedAt", "failure": {"reason", "message", "at"} | None}], "slowest":
    {"name", "role", "rank", "joinedAt", "after"} | None, "notJoined": [names]}``.

    Times are Unix seconds (UTC, milliseconds); ``end`` and a span's ``end`` are None while
    they are open (``now``: when this was built, to draw open spans up to). Workers are grouped
    by role (roles in the order of their first node rank), by rank within a role. ``barrier``:
    when the head saw every rank joined; ``runStarted``: when its run script started.
    ``slowest``: the Worker whose Ray node came up last (``after``: seconds after the first),
    when two or more came up; ``notJoined``: Workers whose Ray node never came up. Pure."""
    head = next((w for w in workers if w.is_head), None)
    head_times = head.times if head is not None else {}
    run_start = head_times.get("running")
    first_rank: dict[str, int] = {}
    for w in workers:
        first_rank[w.role] = min(first_rank.get(w.role, w.rank), w.rank)
    ordered = sorted(workers, key=lambda w: (first_rank[w.role], w.role, w.rank))
    rows: list[dict[str, Any]] = [{"name": w.name, "role": w.role, "rank": w.rank,
                                   "isHead": w.is_head, "spans": worker_spans(w, run, run_start),
                                   "joinedAt": _ms(w.times.get(WorkerPhase.RayStarted)),
                                   "failure": _failure(w)} for w in ordered]
    joined = [r for r in rows if r["joinedAt"] is not None]
    slowest = None
    if len(joined) > 1:
        last = max(joined, key=lambda r: (r["joinedAt"], r["rank"]))
        first = min(r["joinedAt"] for r in joined)
        slowest = {"name": last["name"], "role": last["role"], "rank": last["rank"],
                   "joinedAt": last["joinedAt"], "after": round(last["joinedAt"] - first, 3)}
    return {"run": run.number, "phase": run.phase, "start": _ms(run.created),
            "end": _ms(run.finished), "now": _ms(now), "barrier": _ms(head_times.get(ALL_JOINED)),
            "runStarted": _ms(run_start), "phases": list(PHASES), "workers": rows,
            "slowest": slowest, "notJoined": [r["name"] for r in rows if r["joinedAt"] is None]}


def _epoch(t: datetime | None) -> float | None:
    return t.timestamp() if t is not None else None


def lives_of(run: Any) -> tuple[RunLife, list[WorkerLife]]:
    """A stored Run (a :class:`rlark.store.RunRow` with its Workers) as :func:`build_timeline`
    takes it. A Worker's failure is its ``failed`` lifecycle line (or the runtime's), else the
    reason of a Worker row that failed without one."""
    lives = []
    for w in run.workers:
        life = w.lifecycle or {}
        times = {k: float(v) for k, v in (life.get("times") or {}).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        failed = life.get("failed") if isinstance(life.get("failed"), dict) else None
        failure = None
        if failed:
            failure = {"reason": text_of(failed.get("reason")), "message": failed.get("message"),
                       "at": failed.get("ts")}
        elif w.phase == WorkerPhase.Failed:
            failure = {"reason": text_of(w.reason), "message": w.message, "at": None}
        lives.append(WorkerLife(name=w.name, role=w.role, rank=w.node_rank, is_head=w.is_head,
                                times=times, finished=_epoch(w.finished_at), failure=failure))
    created = _epoch(run.created_at)
    return RunLife(number=run.number, created=created if created is not None else 0.0,
                   finished=_epoch(run.finished_at), phase=text_of(run.phase)), lives
