"""What the local runtime cannot honour in a Job, said at submit: more GPUs (or CPUs, memory)
than this machine has, port blocks that do not fit in its range, mounts it cannot make, paths
and interpreters missing here, node selectors that mean nothing on one machine. The checks of
every runtime are :mod:`rlark.preflight.job`'s; who a Run's Workers are and what of this machine
they may read is :meth:`rlark.runtimes.local.runtime.LocalRuntime.preflight`'s.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Iterator

from rlark.findings import Finding
from rlark.findings import error as _err
from rlark.findings import warning as _warn
from rlark.preflight.job import MAX_WORKER_PORTS, role_cpus, tight_ports
from rlark.preflight.quantities import parse_cpu, parse_memory_bytes
from rlark.runtimes.local.ports import (MAX_BLOCK_SIZE, PORT_RANGE_END, PORT_RANGE_START,
                                        block_size, default_worker_ports)
from rlark.runtimes.local.ports import MAX_WORKER_PORTS as MAX_WORKER_PORTS_LOCAL
from rlark.spec import Job, Mount, MountType, ObjectStorageMode, Role
from rlark.words import plural


def host_capacity() -> dict[str, float]:
    """This machine: ``cpu`` (cores), ``memory`` (bytes), ``gpu`` (NVIDIA devices the driver
    lists in /proc/driver/nvidia/gpus)."""
    import psutil

    try:
        gpus = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        gpus = 0
    return {"cpu": os.cpu_count() or 1, "memory": psutil.virtual_memory().total, "gpu": gpus}


def local_request(job: Job) -> dict[str, float]:
    """What all Workers of ``job`` ask of this machine on the local runtime: ``cpu`` (cores,
    each Worker's request rounded up as Ray's ``--num-cpus`` is), ``memory`` (bytes), ``gpu``
    (count). A role whose cpu or memory does not parse adds nothing (check_job reports it)."""
    want = {"cpu": 0.0, "memory": 0, "gpu": 0}
    for role in job.spec.roles:
        n = max(role.workers, 0)
        try:
            if role.resources.cpu is not None:
                want["cpu"] += math.ceil(parse_cpu(role.resources.cpu)) * n
            if role.resources.memory is not None:
                want["memory"] += parse_memory_bytes(role.resources.memory) * n
        except ValueError:
            continue
        want["gpu"] += max(role.resources.gpu, 0) * n
    return want


def _host_capacity(job: Job, host: dict[str, float] | None = None) -> Iterator[Finding]:
    """All Workers of a local Job share this machine: more GPUs than it has is an error (Ray
    would advertise GPUs that do not exist); more CPU or memory than it has is a warning (Ray's
    numbers are logical, but the Workers will compete)."""
    host = host or host_capacity()
    want = local_request(job)
    gib = 1024**3
    if want["gpu"] > host["gpu"]:
        yield _err(
            "ExceedsHostGpu", "spec.roles",
            f"spec.roles: the Workers ask for {plural(want['gpu'], 'GPU')} in all; this machine "
            f"has {host['gpu']}",
            "lower resources.gpu, or run on Kubernetes",
        )
    if want["cpu"] > host["cpu"]:
        yield _warn(
            "ExceedsHostCpu", "spec.roles",
            f"spec.roles: the Workers ask for {plural(float(want['cpu']), 'CPU')} in all (each "
            f"Worker's resources.cpu counted in whole CPUs, as its Ray node counts them); this "
            f"machine has {host['cpu']:g}",
            "lower resources.cpu or the worker counts; Ray's CPU counts are logical, so the Job "
            "still starts, but its Workers share the cores",
        )
    if want["memory"] > host["memory"]:
        yield _warn(
            "ExceedsHostMemory", "spec.roles",
            f"spec.roles: the Workers ask for {want['memory'] / gib:.1f} GiB in all; this "
            f"machine has {host['memory'] / gib:.1f} GiB",
            "lower resources.memory or the worker counts",
        )


def _local_ports(job: Job, host_cpus: int) -> Iterator[Finding]:
    """Every local Worker takes a block of ports in 20000-32767 sized to its role
    (:func:`rlark.runtimes.base.local_block_size`): a role whose block exceeds that range, or
    Workers whose blocks together do, cannot start (errors); a role without ``cpu`` whose
    ``ray.workerPorts`` is tight for this machine's CPUs (which its Ray node offers), or whose
    default range is capped, gets ``WorkerPortsTight``."""
    total = 0
    sized = True
    for i, role in enumerate(job.spec.roles):
        ports = role.ray.worker_ports
        if ports is not None and not 1 <= ports <= MAX_WORKER_PORTS:
            sized = False
            continue  # check_job reports it
        cpus = role_cpus(role)
        if role.resources.cpu is not None and cpus is None:
            sized = False
            continue
        node_cpus = cpus if cpus is not None else host_cpus
        want = ports if ports is not None else default_worker_ports(node_cpus)
        size = block_size(want)
        path = f"spec.roles[{i}].ray.workerPorts"
        if size > MAX_BLOCK_SIZE:
            sized = False
            yield _err(
                "ExceedsLocalPorts", path,
                f"{path}: {want} worker ports per Worker; the local runtime has "
                f"{MAX_WORKER_PORTS_LOCAL} for one Ray node (ports "
                f"{PORT_RANGE_START}-{PORT_RANGE_END - 1})",
                f"give at most {MAX_WORKER_PORTS_LOCAL}, or run on Kubernetes",
            )
            continue
        total += size * max(role.workers, 0)
        lead = (f"{path} = {ports}" if ports is not None
                else f"{path} is not set and its default stops at {want}")
        if cpus is None:
            tight = tight_ports(want, node_cpus, path, lead,
                                 " (no resources.cpu: the node offers Ray all of this machine's)")
        elif ports is None:
            tight = tight_ports(want, node_cpus, path, lead)
        else:
            tight = None  # check_job reports an explicit value against resources.cpu
        if tight:
            yield tight
    if sized and total > PORT_RANGE_END - PORT_RANGE_START:
        yield _err(
            "ExceedsLocalPorts", "spec.roles",
            f"spec.roles: the {plural(job.total_workers, 'Worker')} need {total} ports in all "
            f"(a block of 16 own ports plus their worker ports, in units of 64, each); one "
            f"machine has {PORT_RANGE_END - PORT_RANGE_START} (ports "
            f"{PORT_RANGE_START}-{PORT_RANGE_END - 1})",
            "use fewer Workers or fewer ray.workerPorts, or run on Kubernetes",
        )


#: the fix for a mount the Workers' identity cannot be given (``MountUnavailable``)
OWN_NAMESPACE_HINT = ("run the server as root, so each Run's Workers get a uid and a mount "
                      "namespace of their own (docs/security.md, \"Worker identity\"); or use a "
                      "hostPath whose mountPath is its source, without readOnly")


def object_storage_problem(m: Mount, fuse: str | None) -> tuple[str, str, str] | None:
    """Why the local runtime cannot give an ``objectStorage`` mount, whoever the Workers are,
    as ``(field, message tail, hint)``; None when it can (pure). It mounts an ``s3://``
    prefix with s3fs (mode ``fuse``) or copies it in before the prepare script and back out
    after the run script (mode ``copy``; ``auto``: FUSE where this machine can,
    :mod:`rlark.runtimes.local.objects`). ``fuse``: why this machine cannot mount FUSE
    (:func:`rlark.runtimes.local.objects.fuse_problem`), None when it can."""
    o = m.object_storage
    if o is not None and o.mode == ObjectStorageMode.fuse.value and fuse is not None:
        return ("objectStorage.mode",
                f"this server cannot mount FUSE file systems for Workers: {fuse}",
                "install s3fs on the server (apt-get install s3fs) where the kernel offers FUSE, "
                "or use mode: copy (the prefix is copied in before the prepare script and "
                "synced out after the run script) or auto (FUSE where the server can, else copy)")
    if not m.source.startswith("s3://"):
        return ("type", "the local runtime mounts and copies s3:// prefixes only (through the "
                "S3 API)",
                "write s3://BUCKET/PREFIX, with objectStorage.endpoint for an S3-compatible "
                "server")
    return None


def unprovided_mounts(role: Role, i: int, *, own_namespace: bool | None,
                      object_storage: bool = True, fuse: str | None = None) -> list[Finding]:
    """``MountUnavailable`` errors for the mounts of role ``i`` the local runtime cannot give
    its Workers (pure): an ``objectStorage`` mount that asks for FUSE or is not ``s3://``
    (:func:`object_storage_problem`; ``fuse``: why this machine cannot mount FUSE, None when
    it can); where the Workers have no mount namespace of their own
    (``own_namespace`` False: they run as the server's own user) also a ``pvc`` or
    ``objectStorage`` mount and a ``hostPath`` mount whose ``mountPath`` is not its ``source``
    or that is ``readOnly`` (nothing could be bound or made read-only). ``None``: the identity
    is not known here, only what does not depend on it is judged; ``object_storage`` False:
    :func:`object_storage_problem` is left out (said elsewhere). A Job never runs with a mount
    silently missing: submit refuses these and so does every launch."""
    out: list[Finding] = []
    for j, m in enumerate(role.mounts):
        mp = f"spec.roles[{i}].mounts[{j}]"
        problem = object_storage_problem(m, fuse) \
            if object_storage and m.type == MountType.object_storage else None
        if problem:
            field, tail, hint = problem
            lead = f"{mp}.{field} = 'fuse'" if field == "objectStorage.mode" \
                else f"{mp}.type = 'objectStorage'"
            out.append(_err("MountUnavailable", f"{mp}.{field}",
                            f"{lead} (source {m.source[:200]!r}): {tail}", hint))
        elif own_namespace is False and m.type in (MountType.pvc, MountType.object_storage):
            what = "a volume" if m.type == MountType.pvc else "an object-storage copy"
            out.append(_err(
                "MountUnavailable", f"{mp}.type",
                f"{mp}.type = {m.type!r} (source {m.source[:200]!r}): {what} is bound in a "
                "Worker's own mount namespace, and Workers that run as this server's own user "
                "have none",
                OWN_NAMESPACE_HINT))
        elif own_namespace is False and m.type == MountType.host_path and (
                m.read_only or os.path.normpath(m.source) != os.path.normpath(m.mount_path)):
            what = ("readOnly = true cannot be enforced" if m.read_only
                    else f"nothing can be bound at mountPath {m.mount_path[:200]!r}")
            out.append(_err(
                "MountUnavailable", f"{mp}.mountPath",
                f"{mp}.mountPath = {m.mount_path[:200]!r} (source {m.source[:200]!r}): Workers "
                f"that run as this server's own user have no mount namespace of their own: {what}",
                OWN_NAMESPACE_HINT))
    return out


def check_for_local_runtime(job: Job, host: dict[str, float] | None = None,
                            reachable: Callable[[str], bool] | None = None,
                            fuse: str | None = "not probed") -> list[Finding]:
    """What the local runtime cannot honour: an objectStorage mount it cannot copy is refused
    (``MountUnavailable``, :func:`unprovided_mounts`), a hostPath source must exist, and node
    selectors mean nothing (warnings); a role's ``local.python`` must exist here (error).
    Whether hostPath and pvc mounts can be bound at their ``mountPath`` depends on the Workers'
    identity: ``LocalRuntime.preflight`` says.
    ``reachable``: whether the Workers may see a path at all (``LocalRuntime.path_reachable``);
    a path they may not is not said to exist or not (``NotReadableByWorkers`` says why instead),
    so a Finding never tells what lies where others may not look. ``fuse``: why this machine
    cannot mount FUSE (:func:`rlark.runtimes.local.objects.fuse_problem`), None when it can
    (default: not known, so ``mode: fuse`` is refused). ``host`` is the machine's capacity as
    :func:`host_capacity` returns it (default: measured now)."""
    findings: list[Finding] = list(_host_capacity(job, host))
    findings.extend(_local_ports(job, int((host or {}).get("cpu") or os.cpu_count() or 1)))
    seen = reachable or (lambda path: True)
    wd = job.spec.working_dir
    if wd and os.path.isabs(wd) and seen(wd) and not os.path.isdir(wd):
        findings.append(_err(
            "WorkingDirMissing", "spec.workingDir",
            f"spec.workingDir = {wd!r} is not a directory on this machine",
            "create it, or fix the path (`rlark submit FILE` resolves a relative one against "
            "FILE's directory)",
        ))
    for i, role in enumerate(job.spec.roles):
        findings.extend(unprovided_mounts(role, i, own_namespace=None, fuse=fuse))
        for j, mount in enumerate(role.mounts):
            path = f"spec.roles[{i}].mounts[{j}]"
            if mount.type != "hostPath":
                continue
            if seen(mount.source) and not os.path.exists(mount.source):
                findings.append(_warn(
                    "MountSourceMissing", f"{path}.source",
                    f"{path}.source = {mount.source!r} does not exist on this machine",
                    "create it or fix the path",
                ))
        python = role.local.python
        if python and os.path.isabs(python) and seen(python):
            exe = os.path.join(python, "bin", "python") if os.path.isdir(python) else python
            if not os.access(exe, os.X_OK):
                findings.append(_err(
                    "PythonNotFound", f"spec.roles[{i}].local.python",
                    f"spec.roles[{i}].local.python = {python!r}: no executable {exe!r} on this "
                    "machine",
                    "give the path of a python (or virtualenv) that has ray installed",
                ))
        if role.node_selector:
            findings.append(_warn(
                "NodeSelectorIgnoredLocally", f"spec.roles[{i}].nodeSelector",
                f"spec.roles[{i}].nodeSelector is ignored by the local runtime (one machine)",
                "remove it, or run on Kubernetes",
            ))
    return findings
