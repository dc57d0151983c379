"""/api/v1/volumes: a project's volumes, what ``pvc`` mounts name (:mod:`rlark.services.volumes`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from rlark.api.security import ProjectAccess, allow_project
from rlark.services.volumes import VolumeService
from rlark.store import ProjectRole

router = APIRouter(prefix="/api/v1/volumes", tags=["volumes"])
Reader = Annotated[ProjectAccess, allow_project(ProjectRole.viewer)]
Writer = Annotated[ProjectAccess, allow_project(ProjectRole.member)]


def volumes(request: Request) -> VolumeService:
    """The volume service on the Job service's store and runtime profile (made per request: it
    holds nothing of its own)."""
    jobs = request.app.state.jobs
    return VolumeService(jobs.store, jobs.profile)


Service = Annotated[VolumeService, Depends(volumes)]
Name = Annotated[str, Path(max_length=253, description="the volume's name (a pvc mount's source)")]


@router.get("", summary="The project's volumes: names, sizes, the Jobs that mount them")
def list_volumes(svc: Service, access: Reader) -> list[dict]:
    """Every volume of the project (``?project=``, default ``default``): ``[{"name", "bytes",
    "entries", "modifiedAt", "usedBy"}]``. A runtime that keeps none (Kubernetes: the
    namespace's PersistentVolumeClaims) answers 400 saying where they are."""
    return svc.list(access.principal, access.project)


@router.delete("/{name}", summary="Delete a volume and everything in it")
def delete_volume(name: Name, svc: Service, access: Writer) -> dict:
    """``{"name", "bytes", "entries", "project", "deleted"}``; 409 while an active Job of the
    project mounts it, 404 when there is none."""
    return svc.delete(access.principal, access.client, access.project, name)
