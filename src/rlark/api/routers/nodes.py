"""The node inventory: what the runtime can place Workers on; and the queue of Runs waiting for
them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from rlark.api.deps import job_service
from rlark.api.security import Access, allow_user
from rlark.services.jobs import JobService

router = APIRouter(tags=["nodes"])


@router.get("/api/v1/nodes", summary="Nodes Workers can run on, with capacity",
            dependencies=[allow_user()])
def nodes(jobs: JobService = Depends(job_service)) -> dict:
    """Kubernetes: every node with allocatable, requested and free cpu (cores), memory (bytes),
    ``nvidia.com/gpu`` and devices, labels, taints, readiness and cordon; ``freeBasis`` says
    whether requests were counted from every namespace (``cluster``) or only RLark's
    (``namespace``); ``error`` is set when the API server could not be read. Local runtime:
    this machine."""
    return jobs.nodes()


@router.get("/api/v1/queue", summary="Runs waiting to be admitted, by queue")
def queue(access: Annotated[Access, allow_user()], jobs: JobService = Depends(job_service)) -> dict:
    """Every Pending Run of the projects you can read (site administrators: all), by queue:
    ``queue`` (this machine's admission queue on the local runtime, a Kueue LocalQueue on
    Kubernetes), ``position`` (1 = next; null where the queue reports none), ``priority``,
    ``requests`` (cpu cores, memory bytes, gpu of all its Workers), ``workers``,
    ``waitingSeconds``, ``reason`` and ``message`` (what the queue says)."""
    from rlark.services.queue import pending

    return pending(jobs.store, jobs.profile, access.principal.readable_projects())
