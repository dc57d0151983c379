"""/api/v1/jobs: create, list, get, stop, start, restart, delete; Runs, Workers, Events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from rlark.api.deps import job_service
from rlark.controller.phases import Phase
from rlark.services.errors import Invalid
from rlark.services.jobs import JobService

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
Service = Annotated[JobService, Depends(job_service)]

JOB_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"},
                                 "example": "apiVersion: rlark.io/v1\nkind: Job\n..."},
            "application/json": {"schema": {"$ref": "#/components/schemas/Job"}},
        },
    }
}


async def read_document(request: Request) -> bytes:
    body = await request.body()
    if not body.strip():
        raise Invalid("the request body is empty: send the Job as YAML or JSON")
    return body


@router.post("", status_code=201, openapi_extra=JOB_BODY, summary="Create a Job (YAML or JSON)")
async def create_job(request: Request, jobs: Service) -> dict:
    """Validate the Job; on error Findings answer 422 with them. Starts the first Run."""
    return jobs.create(await read_document(request))


@router.get("", summary="List Jobs")
def list_jobs(
    jobs: Service,
    phase: Annotated[Phase | None, Query(description="only Jobs in this phase")] = None,
    q: Annotated[str | None, Query(max_length=63, description="name contains")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict:
    return jobs.list(phase=phase.value if phase else None, q=q, limit=limit, offset=offset)


@router.get("/{name}", summary="A Job with its current Run, Workers and Runs history")
def get_job(name: str, jobs: Service) -> dict:
    return jobs.get(name)


@router.put("/{name}", openapi_extra=JOB_BODY,
            summary="Replace a Job's spec and start a new Run with it")
async def replace_job(name: str, request: Request, jobs: Service) -> dict:
    """The current Run (if active) is stopped first; earlier Runs keep their own snapshots."""
    return jobs.replace(name, await read_document(request))


@router.post("/{name}/stop", summary="Stop the current Run")
def stop_job(name: str, jobs: Service) -> dict:
    return jobs.stop(name)


@router.post("/{name}/start", summary="Start a new Run of a stopped or finished Job")
def start_job(name: str, jobs: Service) -> dict:
    return jobs.start(name)


@router.post("/{name}/restart", summary="Stop the current Run (if any) and start a new one")
def restart_job(name: str, jobs: Service) -> dict:
    return jobs.restart(name)


@router.delete("/{name}", summary="Delete a Job, its Runs, records and logs")
def delete_job(name: str, jobs: Service) -> dict:
    return jobs.delete(name)


@router.get("/{name}/runs", summary="Runs of a Job")
def list_runs(name: str, jobs: Service) -> list[dict]:
    return jobs.runs(name)


@router.get("/{name}/workers", summary="Workers of a Run (default: the current Run)")
def list_workers(name: str, jobs: Service,
                 run: Annotated[int | None, Query(ge=1)] = None) -> list[dict]:
    return jobs.workers(name, run)


@router.get("/{name}/events", summary="Events of a Job (optionally of one Run)")
def list_events(name: str, jobs: Service,
                run: Annotated[int | None, Query(ge=1)] = None) -> list[dict]:
    return jobs.events(name, run)
