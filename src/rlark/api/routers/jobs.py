"""/api/v1/jobs: create, list, get, stop, start, restart, delete; Runs, Workers, Events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from rlark.api.deps import job_service
from rlark.api.security import Access, ProjectAccess, allow_project, allow_user
from rlark.status import Phase
from rlark.services.auth import authorize
from rlark.services.errors import Invalid, TooLarge
from rlark.services.jobs import JobService
from rlark.store import ProjectRole

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
Service = Annotated[JobService, Depends(job_service)]
#: who may call: read (viewer), change (member) in the Job's project (``?project=``, default
#: ``default``)
Reader = Annotated[ProjectAccess, allow_project(ProjectRole.viewer)]
Writer = Annotated[ProjectAccess, allow_project(ProjectRole.member)]

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


MAX_BODY_BYTES = 1024 * 1024
INT32_MAX = 2**31 - 1  # run numbers and offsets are 32-bit columns on PostgreSQL


async def read_document(request: Request) -> bytes:
    """The request body, at most 1 MiB.

    Raises:
        Invalid: empty body. TooLarge: more than 1 MiB.
    """
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise TooLarge(f"the request body is larger than {MAX_BODY_BYTES // 1024} KiB; "
                           "a Job document is a few KiB")
    if not body.strip():
        raise Invalid("the request body is empty: send the Job as YAML or JSON")
    return body


@router.post("", status_code=201, openapi_extra=JOB_BODY, summary="Create a Job (YAML or JSON)")
async def create_job(request: Request, jobs: Service, access: Writer) -> dict:
    """Validate the Job; on error Findings answer 422 with them. Starts the first Run."""
    body = await read_document(request)
    return await run_in_threadpool(jobs.create, body, project=access.project,
                                   actor=access.actor)  # preflight may compose an RLinf config


@router.get("", summary="List Jobs (of one project, or of every project you can read)")
def list_jobs(
    jobs: Service,
    access: Annotated[Access, allow_user()],
    project: Annotated[str | None, Query(max_length=63, description=(
        "only this project's Jobs (default: every project you have a role in)"))] = None,
    phase: Annotated[Phase | None, Query(description="only Jobs in this phase")] = None,
    q: Annotated[str | None, Query(max_length=63, pattern=r"^[^\x00]*$",
                                   description="name contains")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> dict:
    if project is not None:
        authorize(access.principal, project, ProjectRole.viewer)
        projects: list[str] | None = [project]
    else:
        projects = access.principal.readable_projects()
    return jobs.list(phase=phase, q=q, limit=limit, offset=offset,
                     projects=projects)


@router.get("/{name}", summary="A Job with its current Run, Workers and Runs history")
def get_job(name: str, jobs: Service, access: Reader) -> dict:
    return jobs.get(name, access.project)


@router.put("/{name}", openapi_extra=JOB_BODY,
            summary="Replace a Job's spec and start a new Run with it")
async def replace_job(name: str, request: Request, jobs: Service, access: Writer) -> dict:
    """The current Run (if active) is stopped first; earlier Runs keep their own snapshots."""
    body = await read_document(request)
    return await run_in_threadpool(jobs.replace, name, body, access.project, access.actor)


@router.post("/{name}/stop", summary="Stop the current Run")
def stop_job(name: str, jobs: Service, access: Writer) -> dict:
    return jobs.stop(name, access.project, access.actor)


@router.post("/{name}/start", summary="Start a new Run of a stopped or finished Job")
def start_job(name: str, jobs: Service, access: Writer) -> dict:
    return jobs.start(name, access.project, access.actor)


@router.post("/{name}/restart", summary="Stop the current Run (if any) and start a new one")
def restart_job(name: str, jobs: Service, access: Writer,
                resume: Annotated[bool, Query(description=(
                    "resume from the last checkpoint the current Run wrote in its outputs: the "
                    "new Run's run script gets runner.resume_dir=<it> in "
                    "$RLARK_RLINF_OVERRIDES (docs/data.md, \"Resume\"); 422 when that cannot "
                    "be done"))] = False) -> dict:
    return jobs.restart(name, access.project, access.actor, resume=resume)


@router.get("/{name}/outputs", summary="What a Run wrote to its outputs, read back after it")
def list_outputs(name: str, jobs: Service, access: Reader,
                 run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
                 files: Annotated[bool, Query(description="with each output's files")] = True
                 ) -> dict:
    """Each output (``spec.outputs``, and each written location of the RLinf config) of the Run
    (default: the current one) as its record read it back through the mount that holds it:
    files, sizes, times, sha256 under a size cap, RLinf's checkpoint directories, and the
    checkpoint ``rlark restart --resume`` would take (``resume``). ``final`` is false while the
    Run's Workers have not all ended (nothing is read back before)."""
    from rlark.services.outputs import list_outputs as listing

    return listing(jobs, name, run, access.project, files=files)


@router.get("/{name}/outputs/{output}/file", summary="Download one file of a Run's output",
            response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
def output_file(name: str, output: str, jobs: Service, access: Reader,
                path: Annotated[str, Query(min_length=1, max_length=4096, description=(
                    "the file below the output, as the listing gives it"))],
                run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None
                ) -> StreamingResponse:
    """The file's bytes, read now through the source the Run's record read the output back
    from (the mount's directory on the server's machine, or its bucket): never a path outside
    the output, never through a symbolic link. 404 for an unknown output or file, 409 while
    the Run has not ended, 422 for a path that is not below the output."""
    from rlark.services.outputs import output_file as read

    filename, size, chunks = read(jobs, name, run, access.project, output, path)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in filename)[:200] or "output"
    return StreamingResponse(chunks, media_type="application/octet-stream", headers={
        "Content-Length": str(size), "Content-Disposition": f'attachment; filename="{safe}"',
        "X-Content-Type-Options": "nosniff"})


@router.delete("/{name}", summary="Delete a Job, its Runs, records and logs")
def delete_job(name: str, jobs: Service, access: Writer) -> dict:
    return jobs.delete(name, access.project, access.actor)


@router.get("/{name}/runs", summary="Runs of a Job")
def list_runs(name: str, jobs: Service, access: Reader) -> list[dict]:
    return jobs.runs(name, access.project)


@router.get("/{name}/workers", summary="Workers of a Run (default: the current Run)")
def list_workers(name: str, jobs: Service, access: Reader,
                 run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None) -> list[dict]:
    return jobs.workers(name, run, access.project)


@router.get("/{name}/events", summary="Events of a Job (optionally of one Run)")
def list_events(name: str, jobs: Service, access: Reader,
                run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None) -> list[dict]:
    return jobs.events(name, run, access.project)


TIMELINE_DOC = (
    "Per Worker (grouped by role, rank order) the spans of its life: Pending, Preparing, "
    "RayStarting, Joined, Running, Exited, from the Workers' own lifecycle lines; the join "
    "barrier's moment, failures, and the Worker whose Ray node came up last (``slowest``). "
    "Times are Unix seconds (UTC); an open span's ``end`` is null (``now``: when this was built). "
    "404 for a Job or Run the project does not have.")


@router.get("/{name}/timeline", summary="The current Run's timeline", description=TIMELINE_DOC)
def current_timeline(name: str, jobs: Service, access: Reader) -> dict:
    return jobs.timeline(name, None, access.project)


@router.get("/{name}/runs/{number}/timeline", summary="A Run's timeline",
            description=TIMELINE_DOC)
def run_timeline(name: str, number: Annotated[int, Path(ge=1, le=INT32_MAX)], jobs: Service,
                 access: Reader) -> dict:
    return jobs.timeline(name, number, access.project)


USAGE_DOC = (
    "Per Worker (rank order) its resource use as its keeper sampled it every few seconds: "
    "``points`` are ``[ts, cpu, mem, gpus]`` (Unix seconds; cores used; bytes resident, the sum "
    "of its processes' RSS, an upper bound; ``[[util %, memUsed MiB, memTotal MiB], ...]`` or "
    "null when the Worker saw no GPU), at most 240, evenly thinned over a long Run; ``latest`` "
    "and ``peak`` (over every sample); ``gpus``: how many GPUs it saw (0: none, absent). "
    "``idleGpus`` names Workers whose GPUs sat idle while another Worker's worked. "
    "404 for a Job or Run the project does not have.")


@router.get("/{name}/usage", summary="The current Run's resource use", description=USAGE_DOC)
def current_usage(name: str, jobs: Service, access: Reader) -> dict:
    return jobs.usage(name, None, access.project)


@router.get("/{name}/runs/{number}/usage", summary="A Run's resource use", description=USAGE_DOC)
def run_usage(name: str, number: Annotated[int, Path(ge=1, le=INT32_MAX)], jobs: Service,
              access: Reader) -> dict:
    return jobs.usage(name, number, access.project)


SCALARS_DOC = (
    "The Run's training curves: the scalars RLinf's MetricLogger wrote as TensorBoard event "
    "files under ``<runner.logger.log_path>/tensorboard`` of the Run's resolved config, read "
    "where the Run's runtime lets the server look (the head Worker's view of that path): "
    "``scalars``: tag -> ``[[step, value], ...]`` by step (value null: NaN or infinite; at most "
    "5000 points a tag, evenly thinned), ``tags``: every tag found, ``path``: the directory "
    "looked at, ``at``: where the server read it, ``files``, ``notes`` (what was cut or did not "
    "parse), ``why``: null, or why there are no points (no config, another logger, a path the "
    "server cannot read, no event files yet). ``tag`` (repeatable): only these tags. "
    "404 for a Job or Run the project does not have.")
Tags = Annotated[list[str] | None, Query(max_length=200, description="only these tags")]


def _scalars(jobs: JobService, name: str, number: int | None, project: str,
             tag: list[str] | None) -> dict:
    from rlark.services.curves import run_scalars

    if tag is not None and len(tag) > 100:
        raise Invalid(f"tag: {len(tag)} given; ask for at most 100 tags at once")
    return run_scalars(jobs, name, number, project, tag)


@router.get("/{name}/scalars", summary="The current Run's training curves",
            description=SCALARS_DOC)
def current_scalars(name: str, jobs: Service, access: Reader, tag: Tags = None) -> dict:
    return _scalars(jobs, name, None, access.project, tag)


@router.get("/{name}/runs/{number}/scalars", summary="A Run's training curves",
            description=SCALARS_DOC)
def run_scalars(name: str, number: Annotated[int, Path(ge=1, le=INT32_MAX)], jobs: Service,
                access: Reader, tag: Tags = None) -> dict:
    return _scalars(jobs, name, number, access.project, tag)
