"""Validation, schema and health."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from rlark import __version__
from rlark.api.deps import job_service
from rlark.api.routers.jobs import JOB_BODY, read_document
from rlark.api.security import ProjectAccess, allow_admin, allow_project, allow_public, allow_user
from rlark.store import ProjectRole
from rlark.findings import has_errors
from rlark.services.errors import StoreUnavailable
from rlark.services.jobs import JobService
from rlark.services.metrics import CONTENT_TYPE
from rlark.store.health import RETRY_AFTER_SECONDS
from rlark.spec import json_schema

router = APIRouter(tags=["meta"])
#: ``GET /metrics`` alone: the API serves it, and so does the listener of ``rlark server
#: --metrics-address`` (:func:`rlark.api.app.create_metrics_api`)
metrics_router = APIRouter(tags=["meta"])


@router.post("/api/v1/validate", openapi_extra=JOB_BODY, summary="Findings for a Job, nothing stored",
             dependencies=[allow_user()])
async def validate(request: Request, jobs: JobService = Depends(job_service)) -> dict:
    """The spec's own Findings only (structure and values; no runtime, no RLinf config).
    ``/api/v1/check`` gives every Finding a submission gets, as ``rlark validate``, ``rlark
    check`` and the console's review step show them."""
    _, findings = jobs.validate(await read_document(request))
    return {"valid": not has_errors(findings),
            "findings": [f.model_dump(mode="json") for f in findings]}


@router.post("/api/v1/check", openapi_extra=JOB_BODY,
             summary="Every Finding a submission would get, nothing stored")
def check(access: Annotated[ProjectAccess, allow_project(ProjectRole.member)],  # it composes configs
          # from the server's filesystem: for those who may submit
          jobs: JobService = Depends(job_service),
          document: bytes = Depends(read_document),
          rlinf: Annotated[bool, Query(description=(
              "also check the RLinf config spec.rlinf names (false: the caller checks another "
              "config itself, as `rlark check --rlinf-config` does)"))] = True) -> dict:
    """The spec's Findings, this server's runtime's, and those of the RLinf config the Job names
    in ``spec.rlinf`` (composed from this server's filesystem, only under the Job's
    ``spec.workingDir`` on the local runtime or a ``--config-root``; ``configDir`` is relative to
    ``spec.workingDir``), and whether the secrets its ``env[].valueFrom`` names exist in the
    project. 429 with ``Retry-After`` while the server composes as many configs as it may. ``{"valid": bool, "findings": [...]}``; ``valid`` is what submitting
    would decide: the very Findings ``POST /api/v1/jobs`` gets (and ``rlark validate``, ``rlark
    check`` and the console's review step show). A relative ``workingDir`` or hostPath source
    is an error here: a document sent without its file has nothing to resolve it against
    (the CLI resolves them against the Job file's directory before sending)."""
    _, findings = jobs.preflight(document, rlinf=rlinf, project=access.project)
    return {"valid": not has_errors(findings),
            "findings": [f.model_dump(mode="json") for f in findings]}


@router.get("/api/v1/schema", summary="JSON Schema of the Job document", dependencies=[allow_user()])
def schema() -> dict:
    return json_schema()


@metrics_router.get("/metrics", summary="RLark's own metrics (Prometheus text format)",
            dependencies=[allow_admin()], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {}},
                             "description": "the Prometheus text exposition format"}})
def metrics(request: Request) -> Response:
    """Runs by phase, the Pending queue by reason, submit -> Running, the controller's pass,
    lane and lag times, and each route's request latencies
    (:mod:`rlark.services.metrics` lists them), for a site administrator's token, as a
    Prometheus scraper sends it (``authorization: {credentials: <token>}`` in its scrape
    config). Store metrics are read at the scrape, so every replica answers the same."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE)


@router.get("/healthz", summary="Readiness: the server answers and its database too",
            dependencies=[allow_public()],
            responses={503: {"description": "the server's database is unreachable"}})
def healthz(request: Request) -> Response:
    """``{"ok": true}`` from every replica that serves requests (each serves the API and the
    console) and reaches its database; 503 with ``Retry-After`` and ``{"ok": false, "detail":
    {"code": "StoreUnreachable", ...}}`` while the database does not answer (every API call
    answers so then). The database check is one probe shared by all callers and reused for a
    couple of seconds (:mod:`rlark.store.health`), so a storm of probes costs the database
    nothing. Nothing about the server (its name, leader, version, where its database is) for
    callers without credentials. Like every route it answers only the ``Host`` names the server
    allows (a Kubernetes probe names one in ``httpHeaders``). A site administrator reads the
    server's state at ``GET /api/v1/server``; ``/livez`` says only that the process serves."""
    if request.app.state.jobs.store.health.check().reachable:
        return JSONResponse({"ok": True})
    down = StoreUnavailable(RETRY_AFTER_SECONDS)
    return JSONResponse({"ok": False, "detail": down.to_dict()}, status_code=503,
                        headers={"Retry-After": str(down.retry_after)})


@router.get("/livez", summary="Liveness: the server process serves", dependencies=[allow_public()])
def livez() -> dict:
    """``{"ok": true}`` while the process serves requests, whatever its database does: for a
    liveness probe (restarting a server does not bring its database back; ``/healthz`` is the
    readiness probe)."""
    return {"ok": True}


@router.get("/api/v1/server", summary="This server: version, runtime, leader election, Worker "
            "isolation, followed logs (site administrators)", dependencies=[allow_admin()])
def server_status(request: Request) -> dict:
    """``controller`` says whether this server reconciles: ``leaderElection`` (replicas on
    Kubernetes), ``leading`` (this server holds the Lease, or is the only server), ``leader``
    (the Lease's holder, when known), ``identity`` (this server's name in the Lease),
    ``lease``, ``error`` (the last failed Lease call), ``reconciling`` (its controller's loop
    runs). ``workerIsolation``: local runtime, what keeps each Worker's processes together
    (``pid-namespace``, ``cgroup``, ``user-namespace`` or the weak ``process-group``; ``rlark
    nodes`` says why). ``logFollows``: followed logs being streamed now (``open``) and the
    server's limit (``max``). ``store``: the database's ``dialect`` and the last probe of it
    (``reachable``, ``error``, ``checkedAt``, ``latencyMs``). Site administrators only: a
    replica's name and the leader's are the host names and process ids of the server's
    machines, and the database's error names where it is."""
    controller = request.app.state.controller
    status = getattr(controller, "status", None)
    isolation = getattr(request.app.state.jobs, "isolation", None)
    return {"version": __version__, "runtime": request.app.state.jobs.runtime,
            "controller": status() if status is not None else None,
            "store": {"dialect": request.app.state.jobs.store.engine.dialect.name,
                      **request.app.state.jobs.store.health.check().view()},
            "workerIsolation": isolation["mode"] if isolation else None,
            "logFollows": {"open": request.app.state.follow_limits.open,
                           "max": request.app.state.follow_limits.total}}
