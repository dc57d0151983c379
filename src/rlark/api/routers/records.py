"""/api/v1/record: comparing two runs, and the JSON Schema of the run record."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from rlark.api.deps import job_service
from rlark.api.routers.jobs import Reader
from rlark.api.security import allow_user
from rlark.record.schema import record_schema
from rlark.services.jobs import JobService
from rlark.services.records import diff_runs

router = APIRouter(prefix="/api/v1/record", tags=["logs and records"])
Service = Annotated[JobService, Depends(job_service)]
RunRef = Query(min_length=1, max_length=80, description="JOB (its current Run) or JOB:RUN",
               examples=["quickstart:2"])


@router.get("/diff", summary="What changed between two runs of the project")
def diff(jobs: Service, access: Reader, a: Annotated[str, RunRef],
         b: Annotated[str, RunRef]) -> dict:
    """What the spec changed (section ``spec``), then what RLark observed (code, versions,
    image digests, config keys, Workers, resources, result) between two runs (``rlark record
    diff A B``; addresses, node ids, pids, uids, times and log paths are not compared):
    ``{"a": {"job", "run", "recordVersion", "provisional"}, "b": {...}, "changes": [{"section",
    "key", "a", "b", "display": {"a", "b"}}], "same"}`` (docs/record.md). 422 for a reference
    that is not ``JOB`` or ``JOB:RUN``; 404 for a Job or Run the project does not have."""
    return diff_runs(jobs, a, b, access.project)


@router.get("/schema", summary="JSON Schema of the run record", dependencies=[allow_user()])
def schema() -> dict:
    return record_schema()
