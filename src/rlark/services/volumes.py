"""A project's volumes, what ``pvc`` mounts name: what ``rlark volume`` and ``/api/v1/volumes``
share. Where the volumes are kept is the runtime's (:meth:`rlark.runtimes.base.RuntimeProfile.volumes`:
the local runtime keeps each as a directory of its own; on Kubernetes they are the namespace's
PersistentVolumeClaims, which RLark does not list). Viewers list a project's volumes, members
delete them; a volume a running Job mounts is never deleted.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlark.runtimes.base import RuntimeProfile, VolumesElsewhere
from rlark.services import audit
from rlark.services.auth import Principal, authorize
from rlark.services.errors import Conflict, Invalid, NotFound, ServiceError
from rlark.spec import DNS1123_LABEL
from rlark.status import ACTIVE
from rlark.store import JobRow, ProjectRole, ProjectRow, Store
from rlark.words import plural


class NotOnThisRuntime(ServiceError):
    """What was asked is not kept by this server's runtime (HTTP 400; the message says where
    it is instead)."""

    status = 400
    code = "NotOnThisRuntime"


def volumes_named(spec: Any) -> set[str]:
    """The names of the volumes a stored Job mapping's ``pvc`` mounts name (whatever else it
    holds: stored specs of other RLark versions are read as far as they have the shape)."""
    out: set[str] = set()
    roles = spec.get("spec", {}).get("roles") if isinstance(spec, dict) \
        and isinstance(spec.get("spec"), dict) else None
    for role in roles if isinstance(roles, list) else ():
        mounts = role.get("mounts") if isinstance(role, dict) else None
        for m in mounts if isinstance(mounts, list) else ():
            if isinstance(m, dict) and m.get("type") == "pvc" and isinstance(m.get("source"), str):
                out.add(m["source"])
    return out


class VolumeService:
    """``store``: where projects and Jobs are; ``profile``: the server's runtime's profile,
    which keeps the volumes."""

    def __init__(self, store: Store, profile: RuntimeProfile) -> None:
        self.store = store
        self.profile = profile

    def _project(self, s: Session, name: str) -> ProjectRow:
        row = s.scalar(select(ProjectRow).where(ProjectRow.name == name)) \
            if DNS1123_LABEL.match(name or "") else None
        if row is None:
            raise NotFound(f"no project named {name!r} that you can see; `rlark project list` "
                           "shows yours")
        return row

    def _jobs(self, s: Session, project: ProjectRow, *, active: bool = False) -> dict[str, set[str]]:
        """Job name -> the volumes its spec names, for every Job of ``project`` (``active``:
        only those whose current Run has not ended)."""
        stmt = select(JobRow.name, JobRow.spec).where(JobRow.project_id == project.id)
        if active:
            stmt = stmt.where(JobRow.phase.in_(ACTIVE))
        return {name: volumes_named(spec) for name, spec in s.execute(stmt.order_by(JobRow.name))}

    def list(self, principal: Principal, project: str) -> list[dict[str, Any]]:
        """The volumes of ``project`` (viewers and up): ``[{"name", "bytes", "entries",
        "modifiedAt" (ISO 8601, UTC), "usedBy": [Job names whose spec mounts it]}]``.

        Raises:
            NotFound: no such project. NotOnThisRuntime: the runtime keeps no volumes.
        """
        authorize(principal, project, ProjectRole.viewer)
        with self.store.session() as s:
            jobs = self._jobs(s, self._project(s, project))
        try:
            items = self.profile.volumes(project)
        except VolumesElsewhere as exc:
            raise NotOnThisRuntime(str(exc)) from None
        for item in items:
            item["modifiedAt"] = datetime.fromtimestamp(item["modifiedAt"], timezone.utc).isoformat()
            item["usedBy"] = [j for j, names in jobs.items() if item["name"] in names]
        return items

    def delete(self, principal: Principal, client: str | None, project: str,
               name: str) -> dict[str, Any]:
        """Delete volume ``name`` of ``project`` and everything in it (members and up); refused
        while a Job of the project that mounts it is active.

        Raises:
            NotFound: no such project or volume. Conflict: an active Job mounts it. Invalid: a
                bad name. NotOnThisRuntime: the runtime keeps no volumes.
        """
        authorize(principal, project, ProjectRole.member)
        with self.store.session() as s:
            users = [j for j, names in self._jobs(s, self._project(s, project), active=True).items()
                     if name in names]
        if users:
            raise Conflict(f"volume {name!r} is mounted by {plural(len(users), 'active Job')} "
                           f"({', '.join(users)}); stop {'it' if len(users) == 1 else 'them'} "
                           "first (`rlark stop JOB`)")
        try:
            held = self.profile.delete_volume(project, name)
        except VolumesElsewhere as exc:
            raise NotOnThisRuntime(str(exc)) from None
        except ValueError as exc:
            raise Invalid(f"volume {exc}") from None
        if held is None:
            raise NotFound(f"no volume named {name!r} in project {project!r}; `rlark volume "
                           "list` lists them")
        with self.store.session() as s:
            audit.record(s, principal.actor(client), "volume.delete", project=project,
                         target=name, detail=f"{held['bytes']} bytes")
        return {**held, "project": project, "deleted": True}
