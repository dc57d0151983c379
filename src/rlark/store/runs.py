"""Store operations that services and the controller share: making a Run, writing an Event.

Here, not in the controller, so that services (and the API and console above them) never import
the controller: layers point one way (spec -> store -> controller -> runtimes).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.orm import Session

from rlark.ranks import plan_workers, rank_ranges
from rlark.spec import Job
from rlark.status import Cause, EventType, Phase, Reason
from rlark.store.models import EventRow, JobRow, RunRow, TaskRow, WorkerRow


def new_run(job: JobRow, cause: Cause, runtime: str = "local") -> RunRow:
    """A Pending Run of ``job`` with the Job's current spec snapshot, a fresh uid, its Tasks and
    its Workers (names and node ranks fixed by the spec). The caller adds it to a session.

    A retry (``Cause.Retry``) runs where the Run it retries ran: it takes the Job's latest Run's
    namespace (Kubernetes), so a project's retries never land in the server's namespace (None
    there). Other causes are given their namespace by the caller (the project's, now).

    Raises:
        pydantic.ValidationError: the Job's stored spec does not parse.
    """
    latest = max(job.runs, key=lambda r: r.number, default=None)
    number = latest.number + 1 if latest is not None else 1
    run = RunRow(
        job=job,
        number=number,
        uid=uuid.uuid4().hex[:12],
        # lifecycle lines come from each Worker's keeper, out of the workload's reach: no token
        # (bootstrap/keeper.py)
        channel="keeper",
        cause=cause,
        runtime=runtime,
        spec=job.spec,
        phase=Phase.Pending,
        conditions=[],
    )
    if cause == Cause.Retry and latest is not None and latest.runtime == runtime:
        run.namespace = latest.namespace
    spec = Job.model_validate(job.spec)
    planned = plan_workers(spec)
    for role, (lo, hi) in rank_ranges(planned).items():
        run.tasks.append(TaskRow(role=role, total=hi - lo + 1, first_rank=lo, last_rank=hi))
    for w in planned:
        run.workers.append(
            WorkerRow(
                name=w.name, role=w.role, index=w.index, node_rank=w.node_rank, is_head=w.is_head
            )
        )
    return run


def add_event(
    s: Session,
    job_id: int,
    reason: Reason | str,
    message: str,
    *,
    run_number: int | None = None,
    worker: str | None = None,
    type: EventType = EventType.Normal,
    from_phase: Phase | None = None,
    to_phase: Phase | None = None,
    actor: str | None = None,
    at: datetime | None = None,
) -> None:
    """Add an Event to ``s``. ``reason``: a :class:`Reason`, or a Finding's code for the warnings
    a submission's Findings are recorded as; ``actor``: the user whose request caused it (None:
    RLark itself); ``at``: when it happened, where that is known better than now (a Worker's
    lifecycle line read after a server restart)."""
    s.add(
        EventRow(
            **({"time": at} if at is not None else {}),
            actor=actor,
            job_id=job_id,
            run_number=run_number,
            worker=worker,
            type=type,
            reason=str(reason),
            message=message,
            from_phase=from_phase,
            to_phase=to_phase,
        )
    )
