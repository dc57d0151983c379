"""Per-project quotas: how many Jobs a project may keep, and how many Workers its active Runs may
hold at once (Pending, Starting, Running or Stopping). Checked by JobService wherever a Job or
a Run is made (submit, apply, start, restart, the console's create and clone); a refusal is
HTTP 403 ``QuotaExceeded`` naming the quota, its limit, the use and how to raise it, and is
audited. The server's defaults come from the environment (``rlark server`` options); a site
administrator can set a project's own (``rlark project set-quota``), stored with the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rlark import settings
from rlark.status import ACTIVE
from rlark.services.errors import Invalid, QuotaExceeded
from rlark.store import JobRow, ProjectRow, RunRow, WorkerRow

#: quota names as the API, the CLI and the stored overrides spell them
MAX_JOBS = "maxJobs"
MAX_ACTIVE_WORKERS = "maxActiveWorkers"
NAMES = (MAX_JOBS, MAX_ACTIVE_WORKERS)
#: the largest value a quota may have (it is stored and compared as an integer)
MAX_VALUE = 1_000_000


@dataclass(frozen=True)
class Quotas:
    """A project's limits: ``max_jobs`` Jobs kept, ``max_active_workers`` Workers of active Runs."""

    max_jobs: int
    max_active_workers: int

    def view(self) -> dict[str, int]:
        return {MAX_JOBS: self.max_jobs, MAX_ACTIVE_WORKERS: self.max_active_workers}


def server_defaults() -> Quotas:
    """``$RLARK_MAX_JOBS_PER_PROJECT`` (default 500) and ``$RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT``
    (default 256; ``rlark server --max-jobs-per-project / --max-active-workers-per-project``).

    Raises:
        ValueError: one is not a whole number of at least 1.
    """
    return Quotas(max_jobs=settings.positive_int_env("RLARK_MAX_JOBS_PER_PROJECT", 500),
                  max_active_workers=settings.positive_int_env("RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT", 256))


def check_overrides(values: dict[str, Any]) -> dict[str, int | None]:
    """A project's own quotas as given (``{name: int, or None for the server default}``).

    Raises:
        Invalid: an unknown name or a value that is not a whole number from 1 to 1,000,000.
    """
    out: dict[str, int | None] = {}
    for name, value in values.items():
        if name not in NAMES:
            raise Invalid(f"unknown quota {name!r}; quotas are {', '.join(NAMES)}")
        if value is not None and (type(value) is not int or not 1 <= value <= MAX_VALUE):
            raise Invalid(f"quota {name} = {value!r} is not a whole number from 1 to {MAX_VALUE:,}; "
                          "use null for the server's default")
        out[name] = value
    return out


def effective(project: ProjectRow, defaults: Quotas | None = None) -> Quotas:
    """The quotas that hold for ``project``: its own where set, else the server's defaults."""
    base = defaults or server_defaults()
    own = project.quotas or {}
    return Quotas(max_jobs=own.get(MAX_JOBS) or base.max_jobs,
                  max_active_workers=own.get(MAX_ACTIVE_WORKERS) or base.max_active_workers)


def usage(s: Session, project_id: int, exclude_job: int | None = None) -> dict[str, int]:
    """What the project uses now: ``jobs`` kept and ``activeWorkers`` held by active Runs
    (those of Job ``exclude_job`` left out)."""
    jobs = s.scalar(select(func.count()).select_from(JobRow).where(JobRow.project_id == project_id))
    stmt = (select(func.count()).select_from(WorkerRow).join(RunRow, WorkerRow.run_id == RunRow.id)
            .join(JobRow, RunRow.job_id == JobRow.id)
            .where(JobRow.project_id == project_id, RunRow.phase.in_(ACTIVE)))
    if exclude_job is not None:
        stmt = stmt.where(JobRow.id != exclude_job)
    return {"jobs": int(jobs or 0), "activeWorkers": int(s.scalar(stmt) or 0)}


def _how_to_raise(project: str, flag: str, env: str) -> str:
    return (f"a site administrator can raise it: `rlark project set-quota {project} {flag} N` "
            f"(the server's default: {env})")


def check_new_job(s: Session, project: ProjectRow, defaults: Quotas | None = None) -> None:
    """Room for one more Job in ``project`` (``defaults``: the server's quotas).

    Raises:
        QuotaExceeded: it keeps ``maxJobs`` Jobs already.
    """
    limit = effective(project, defaults).max_jobs
    used = usage(s, project.id)["jobs"]
    if used + 1 > limit:
        raise QuotaExceeded(
            f"project {project.name!r} keeps {used} Jobs, its quota {MAX_JOBS} = {limit}; delete "
            f"Jobs it no longer needs (`rlark delete job NAME`), or "
            + _how_to_raise(project.name, "--max-jobs", "RLARK_MAX_JOBS_PER_PROJECT"),
            {"project": project.name, "name": MAX_JOBS, "limit": limit, "used": used, "requested": 1})


def check_new_run(s: Session, project: ProjectRow, workers: int, job_id: int | None = None,
                  defaults: Quotas | None = None) -> None:
    """Room in ``project`` for a Run of ``workers`` Workers (Job ``job_id``'s own active Run is
    not counted: it is stopped before the new one starts; ``defaults``: the server's quotas).

    Raises:
        QuotaExceeded: the project's active Runs would hold more than ``maxActiveWorkers``.
    """
    limit = effective(project, defaults).max_active_workers
    used = usage(s, project.id, exclude_job=job_id)["activeWorkers"]
    if used + workers > limit:
        raise QuotaExceeded(
            f"project {project.name!r} may hold {limit} Workers of active Runs at once (quota "
            f"{MAX_ACTIVE_WORKERS}); {used} are held and this Run needs {workers}. Stop a Job "
            f"(`rlark stop NAME`) or wait for one to end, or "
            + _how_to_raise(project.name, "--max-active-workers", "RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT"),
            {"project": project.name, "name": MAX_ACTIVE_WORKERS, "limit": limit, "used": used,
             "requested": workers})
