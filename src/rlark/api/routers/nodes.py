"""The node inventory: what the runtime can place Workers on."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from rlark.api.deps import job_service
from rlark.api.security import allow_user
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
