"""Findings for the Kubernetes runtime: what it cannot render, what the server's Pod policy
refuses (:mod:`.podpolicy`), object names another Job already has, and the capacity preflight."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from rlark.findings import Finding, Severity
from rlark.runtimes.kubernetes import copymounts
from rlark.runtimes.kubernetes.capacity import NodeInfo, check_capacity
from rlark.names import DNS1123_SUBDOMAIN
from rlark.runtimes.kubernetes.podpolicy import CSI_DRIVER, PodPolicy, check_pod_policy
from rlark.spec import Job, Mount, head_service_name, s3_location, worker_name


def _check_mount_driver(mount: Mount, path: str) -> Iterator[Finding]:
    """Names and size of an objectStorage mount's ``kubernetes`` settings, checked before the API
    server refuses the PVC or Pod of a Run that has already started."""
    from rlark.preflight.quantities import parse_memory_bytes

    k8s = mount.kubernetes
    if k8s is None:
        return
    sc = k8s.storage_class
    if sc is not None and (len(sc) > 253 or not DNS1123_SUBDOMAIN.match(sc)):
        yield Finding(
            code="InvalidStorageClass", path=f"{path}.kubernetes.storageClass",
            message=f"{path}.kubernetes.storageClass = {sc!r} is not a StorageClass name",
            hint="use the name `kubectl get storageclass` lists: lower-case letters, digits, "
                 "'-' and '.', at most 253 characters",
        )
    csi = k8s.csi_driver
    if csi is not None and (len(csi) > 63 or not CSI_DRIVER.match(csi)):
        yield Finding(
            code="InvalidCsiDriver", path=f"{path}.kubernetes.csiDriver",
            message=f"{path}.kubernetes.csiDriver = {csi[:80]!r} is not a CSI driver name",
            hint="use the name `kubectl get csidrivers` lists, e.g. gcsfuse.csi.storage.gke.io "
                 "(at most 63 letters, digits, '-' and '.')",
        )
    if sc is not None:
        try:
            parse_memory_bytes(k8s.size)
        except ValueError as exc:
            yield Finding(
                code="InvalidSize", path=f"{path}.kubernetes.size",
                message=f"{path}.kubernetes.size = {k8s.size!r} {exc}",
                hint="write the PVC's requested size as a quantity such as '100Gi'",
            )


def check_spec_for_kubernetes(job: Job, policy: PodPolicy | None = None) -> list[Finding]:
    """Spec rules of the Kubernetes runtime (pure but for reading ``policy`` from the
    environment when it is None: :func:`rlark.runtimes.kubernetes.settings.pod_policy`).

    First what the server's Pod policy refuses (:func:`.podpolicy.check_pod_policy`: root,
    hostPath, ServiceAccount).

    Errors: an ``objectStorage`` mount with both ``kubernetes.storageClass`` and
    ``kubernetes.csiDriver``, in mode ``fuse`` with neither, or in mode ``copy`` with either
    (mode ``auto`` without them is copied: :mod:`.copymounts`); a storageClass or csiDriver that is not such a name;
    a PVC size that is not a positive quantity. Warnings: ``kubernetes`` settings on a hostPath/pvc
    mount, and ``local.python`` (both ignored on Kubernetes: the image's ``python`` runs the
    bootstrap). Info: a ``workingDir`` under no mount must exist in the image.
    """
    if policy is None:
        from rlark.runtimes.kubernetes.settings import pod_policy

        policy = pod_policy()
    out: list[Finding] = check_pod_policy(job, policy)
    wd = job.spec.working_dir
    if wd and not any(wd == m.mount_path or wd.startswith(m.mount_path.rstrip("/") + "/")
                      for r in job.spec.roles for m in r.mounts):
        out.append(Finding(
            code="WorkingDirInImage", severity=Severity.info, path="spec.workingDir",
            message=f"spec.workingDir = {wd!r} must exist inside every Worker's image: it is "
                    "under no mount, and nothing is copied from the submitting machine",
            hint="use a directory of the image, or put the code on a mount (hostPath, pvc, "
                 "objectStorage) and point workingDir into it",
        ))
    for i, role in enumerate(job.spec.roles):
        for j, mount in enumerate(role.mounts):
            path = f"spec.roles[{i}].mounts[{j}]"
            k8s = mount.kubernetes
            if mount.type == "objectStorage":
                chosen = [x for x in (k8s and k8s.storage_class, k8s and k8s.csi_driver) if x]
                mode = mount.object_storage.mode if mount.object_storage is not None else None
                if mode == "copy" and k8s is not None:
                    out.append(Finding(
                        code="ObjectStorageModeConflict", path=f"{path}.kubernetes",
                        message=f"{path}: objectStorage.mode = 'copy' copies {mount.source!r} in "
                                "and out without a CSI volume, but kubernetes names one",
                        hint="remove kubernetes (copy mode), or set objectStorage.mode to auto "
                             "to mount the CSI volume",
                    ))
                elif len(chosen) > 1 or (mode == "fuse" and not chosen):
                    out.append(Finding(
                        code="ObjectStorageNeedsDriver", path=f"{path}.kubernetes",
                        message=f"{path}: objectStorage {mount.source!r} in mode "
                                f"{mode or 'auto'} needs exactly one of kubernetes.storageClass "
                                f"or kubernetes.csiDriver on Kubernetes "
                                f"({'both are' if chosen else 'neither is'} set)",
                        hint="name the StorageClass of your object-storage CSI driver (a PVC is "
                             "created per Run), or the CSI driver for an inline volume; or set "
                             "objectStorage.mode to copy (copied in by an init container and "
                             "out when the Worker ends, no driver needed)",
                    ))
                if copymounts.copy_reason(mount)[0] and "://" in mount.source:
                    try:
                        s3_location(mount.source)
                    except ValueError as exc:
                        out.append(Finding(
                            code="InvalidMountSource", path=f"{path}.source",
                            message=f"{path}.source = {mount.source[:200]!r} {exc}: copy mode "
                                    "(no CSI volume named) speaks the S3 API",
                            hint="write s3://BUCKET/PREFIX, or name the CSI volume that mounts "
                                 "this source (kubernetes.csiDriver or kubernetes.storageClass)",
                        ))
                out.extend(_check_mount_driver(mount, path))
            elif k8s is not None:
                out.append(Finding(
                    code="MountSettingIgnored", severity=Severity.warning, path=f"{path}.kubernetes",
                    message=f"{path}.kubernetes applies to objectStorage mounts only; this is a "
                            f"{mount.type} mount",
                    hint="remove it",
                ))
        if role.local.python:
            out.append(Finding(
                code="LocalSettingIgnored", severity=Severity.warning,
                path=f"spec.roles[{i}].local.python",
                message=f"spec.roles[{i}].local.python is ignored on Kubernetes: the image's "
                        "`python` runs the bootstrap",
                hint="make sure `python` in the image has ray installed",
            ))
    return out


def check_for_kubernetes(job: Job, nodes: list[NodeInfo] | None, *, free_basis: str = "cluster",
                         pending_timeout: float | None = None,
                         inventory_error: str | None = None,
                         policy: PodPolicy | None = None,
                         neighbours: Iterable["Neighbour"] = ()) -> list[Finding]:
    """Every Kubernetes-runtime Finding: :func:`check_spec_for_kubernetes` (with ``policy``),
    the names ``neighbours`` (the other Jobs of the namespace) already have
    (:func:`check_name_collisions`), then the capacity preflight over ``nodes``
    (:func:`~rlark.runtimes.kubernetes.capacity.check_capacity`). When the inventory could not
    be read (``inventory_error``), one warning instead of the capacity check: the Job is not
    refused for what RLark could not see."""
    findings = check_spec_for_kubernetes(job, policy) + check_name_collisions(job, neighbours)
    if inventory_error is not None:
        findings.append(Finding(
            code="CapacityUnknown", severity=Severity.warning, path="spec.roles",
            message=f"spec.roles: the node inventory could not be read ({inventory_error}); "
                    "capacity was not checked",
            hint="check the server's access to the Kubernetes API (RBAC: list nodes, "
                 "deploy/kubernetes/rbac.yaml)",
        ))
    elif nodes is not None:
        findings.extend(check_capacity(job, nodes, free_basis=free_basis,
                                       pending_timeout=pending_timeout))
    return findings


#: another Job of the same namespace, as stored: ``(project, name, spec document)``
Neighbour = tuple[str, str, dict[str, Any]]

#: names shown per colliding Job, at most
MAX_COLLISIONS_SHOWN = 3


def fixed_object_names(name: str, roles: Iterable[tuple[str, int]]
                       ) -> dict[tuple[str, str], tuple[str | None, int | None]]:
    """``(kind, object name)`` -> ``(role, Worker index)`` (None, None for the head Service) of
    the objects every Run of Job ``name`` with ``roles`` (``(role name, workers)``) creates
    under a name without the run id: the head Service ``<job>-head`` and one Pod
    ``<job>-<role>-<index>`` per Worker. (The ConfigMap, Secret, NetworkPolicy and PVCs carry
    the run id in their names.)"""
    out: dict[tuple[str, str], tuple[str | None, int | None]] = {
        ("Service", head_service_name(name)): (None, None)}
    for role, workers in roles:
        for index in range(max(int(workers), 0)):
            out[("Pod", worker_name(name, role, index))] = (role, index)
    return out


def _describe(owner: tuple[str | None, int | None]) -> str:
    role, index = owner
    return "the head Service" if role is None else f"role {role!r}, Worker {index}"


def _could_collide(a: str, b: str) -> bool:
    """Whether names derived from Job names ``a`` and ``b`` can be equal at all: every name of
    Job ``x`` is ``x-<something>``, so one Job's name must be the other's or begin with it and
    a '-'."""
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")


def _stored_roles(doc: dict[str, Any]) -> list[tuple[str, int]]:
    """``(role name, workers)`` of a stored Job document (``workers`` defaults to 1)."""
    out = []
    for r in ((doc.get("spec") or {}).get("roles")) or []:
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            workers = r.get("workers", 1)
            out.append((r["name"], workers if isinstance(workers, int) else 1))
    return out


def check_name_collisions(job: Job, neighbours: Iterable[Neighbour]) -> list[Finding]:
    """``NameCollision`` errors, one per other Job: objects of ``job``'s Runs that would have the
    name of an object of another Job in the same namespace (``neighbours``: ``(project, name,
    spec document)`` of each other Job whose Runs go to that namespace; not ``job`` itself).
    Job ``a-b`` with role ``c`` and Job ``a`` with role ``b-c`` both want Pod ``a-b-c-0``:
    Kubernetes has one object per name, so one Job's Run could not start (the runtime never
    deletes or takes over the other's). Each Finding names both Jobs and the objects (pure;
    only Jobs whose names can collide at all are expanded)."""
    mine: dict[tuple[str, str], tuple[str | None, int | None]] | None = None
    index = {r.name: i for i, r in enumerate(job.spec.roles)}
    out: list[Finding] = []
    for project, other, doc in neighbours:
        if not _could_collide(job.name, other):
            continue
        if mine is None:
            mine = fixed_object_names(job.name, [(r.name, r.workers) for r in job.spec.roles])
        theirs = fixed_object_names(other, _stored_roles(doc))
        both = sorted(k for k in mine if k in theirs)
        if not both:
            continue
        kind, name = both[0]
        role = mine[(kind, name)][0]
        path = f"spec.roles[{index[role]}].name" if role is not None else "metadata.name"
        shown = ", ".join(f"{k} {n}" for k, n in both[:MAX_COLLISIONS_SHOWN])
        more = f" and {len(both) - MAX_COLLISIONS_SHOWN} more" if len(both) > MAX_COLLISIONS_SHOWN else ""
        out.append(Finding(
            code="NameCollision", path=path,
            message=f"{path}: Job {job.name!r} would create {shown}{more}, which Job {other!r} "
                    f"(project {project!r}) also creates in the same namespace ({kind} {name}: "
                    f"{_describe(mine[(kind, name)])} here, {_describe(theirs[(kind, name)])} "
                    "there); Kubernetes has one object per name, so the two Jobs cannot both run",
            hint="rename this Job or the role (object names are <job>-<role>-<index>) so that "
                 f"no name of it begins like Job {other!r}'s"))
    return out
