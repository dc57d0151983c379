"""Findings for the Kubernetes runtime: what it cannot render, and the capacity preflight."""

from __future__ import annotations

import re
from typing import Iterator

from rlark.findings import Finding, Severity
from rlark.runtimes.kubernetes.capacity import NodeInfo, check_capacity
from rlark.spec import Job, Mount

#: a StorageClass name is a DNS-1123 subdomain (Kubernetes object names)
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: a CSI driver name: at most 63 characters, alphanumeric at both ends, '-' and '.' inside
#: (Kubernetes API, CSIDriver.metadata.name / csi volume driver validation)
CSI_DRIVER = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")


def _check_mount_driver(mount: Mount, path: str) -> Iterator[Finding]:
    """Names and size of an objectStorage mount's ``kubernetes`` settings, checked before the API
    server refuses the PVC or Pod of a Run that has already started."""
    from rlark.preflight import parse_memory_bytes

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


def check_spec_for_kubernetes(job: Job) -> list[Finding]:
    """Spec rules of the Kubernetes runtime (pure).

    Errors: an ``objectStorage`` mount without ``kubernetes.storageClass`` or
    ``kubernetes.csiDriver``, or with both; a storageClass or csiDriver that is not such a name;
    a PVC size that is not a positive quantity. Warnings: ``kubernetes`` settings on a hostPath/pvc
    mount, and ``local.python`` (both ignored on Kubernetes: the image's ``python`` runs the
    bootstrap). Info: a ``workingDir`` under no mount must exist in the image.
    """
    out: list[Finding] = []
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
                if len(chosen) != 1:
                    out.append(Finding(
                        code="ObjectStorageNeedsDriver", path=f"{path}.kubernetes",
                        message=f"{path}: objectStorage {mount.source!r} needs exactly one of "
                                f"kubernetes.storageClass or kubernetes.csiDriver on Kubernetes "
                                f"({'both are' if chosen else 'neither is'} set)",
                        hint="name the StorageClass of your object-storage CSI driver (a PVC is "
                             "created per Run), or the CSI driver for an inline volume",
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
                         inventory_error: str | None = None) -> list[Finding]:
    """Every Kubernetes-runtime Finding: :func:`check_spec_for_kubernetes`, then the capacity
    preflight over ``nodes`` (:func:`~rlark.runtimes.kubernetes.capacity.check_capacity`). When
    the inventory could not be read (``inventory_error``), one warning instead of the capacity
    check: the Job is not refused for what RLark could not see."""
    findings = check_spec_for_kubernetes(job)
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
