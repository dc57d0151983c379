"""``objectStorage`` mounts in copy mode on Kubernetes (pure builders).

For a cluster without an S3 CSI driver. Each such mount of a role is an ``emptyDir`` at its
``mountPath`` in every Worker Pod of the role, and:

* **copy in**: an init container (:data:`INIT_CONTAINER`) of the role's own image runs the
  bootstrap archive's copier (``python -I /rlark/rlark-bootstrap.pyz objcopy-in``, boto3 from
  the image's ``python``) before the Worker's container exists: it copies each mount's
  ``s3://bucket/prefix`` into the ``emptyDir`` and leaves what it wrote (manifest, files,
  bytes, seconds) in a small state ``emptyDir`` (:data:`STATE_DIR`) that the Worker's
  container mounts read-only. A failure (wrong keys, no bucket) ends the init container with
  the S3 error code as its last log line, so the Pod fails before anything of the Job ran
  (``MountFailed``, :mod:`.status`).
* **copy out**: the Worker's keeper (PID 1 of its container, ``bootstrap/keeper.py``), once
  nothing of the workload is left, copies each writable mount's new or changed files back to
  the prefix, as on the local runtime (``bootstrap/objects.py``): the head's ``run_finished``
  waits for it and a failure fails the Run (``MountFailed``). The Pod ends after that step.

The credentials come from the mount's ``objectStorage.secret``: an RLark secret's keys through
the Run's Secret, else a Kubernetes Secret of the namespace (the server's secret policy allows
it or the Run is refused), always as ``valueFrom.secretKeyRef``, never as a value in a Pod.
The init container gets every copied mount's keys; the Worker's container only those of the
writable ones, in variables its keeper removes before the workload starts; the keeper and its
copies are non-dumpable, and the copy out is started before the workload, its code loaded
(``objcopy-ready``), so what the workload writes into the image's Python cannot run in it.
The copies are the image's Python and boto3: the image is trusted with the keys (docs/data.md).
A ``readOnly`` mount is mounted read-only in the Worker's container and is never copied out.

Kubernetes facts: init containers run to completion, in order, before the Pod's containers
start, and with ``restartPolicy: Never`` a failed one fails the Pod
(https://kubernetes.io/docs/concepts/workloads/pods/init-containers/); ``emptyDir`` lives as
long as the Pod and is shared by its containers; ``terminationMessagePolicy:
FallbackToLogsOnError`` gives a failed container the tail of its log as its
``state.terminated.message``.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Iterable

from rlark.bootstrap.objectcopy import INIT_KEYS_PREFIX, INIT_MOUNTS_VAR, INIT_STATE_VAR
from rlark.bootstrap.objects import (KEYS_PREFIX as KEEPER_KEYS_PREFIX,
                                     OBJECTS_VAR as KEEPER_MOUNTS_VAR,
                                     STATE_VAR as KEEPER_STATE_VAR, key_variables)
from rlark.spec import OBJECT_STORAGE_KEYS, Job, Mount, MountType, ObjectStorageMode, Role, s3_location

#: the init container that copies the role's copy-mode mounts in
INIT_CONTAINER = "rlark-copy-in"
#: where the copy in leaves its results (the init container writes, the keeper reads)
STATE_VOLUME, STATE_DIR = "rlark-objects", "/rlark-objects"


def copy_reason(mount: Mount) -> tuple[bool, str | None]:
    """Whether an ``objectStorage`` mount is copied in and out on Kubernetes, and why when its
    mode is ``auto`` (pure): ``copy`` always is; ``auto`` (or unset) is when the mount names
    no CSI volume (``kubernetes.storageClass``/``csiDriver``); ``fuse`` never is (the CSI
    volume, which preflight requires)."""
    if mount.type != MountType.object_storage.value:
        return False, None
    o = mount.object_storage
    mode = ObjectStorageMode(o.mode).value if o is not None and o.mode else "auto"
    if mode == ObjectStorageMode.copy.value:
        return True, None
    k8s = mount.kubernetes
    if mode == ObjectStorageMode.auto.value and not (k8s and (k8s.storage_class or k8s.csi_driver)):
        return True, ("auto: copy, because the mount names no CSI volume "
                      "(kubernetes.storageClass or kubernetes.csiDriver)")
    return False, None


def copy_entries(role: Role) -> list[dict[str, Any]]:
    """The role's copy-mode mounts as the copier and the keeper take them, in spec order, no
    credentials (pure): ``{name, source, bucket, prefix, path, read_only, endpoint, region,
    mode, requested[, why], index}`` (``index``: the mount's place in ``role.mounts``, which
    names its credentials' variables).

    Raises:
        ValueError: a source that is not ``s3://bucket/prefix`` (preflight refuses it first).
    """
    out = []
    for index, m in enumerate(role.mounts):
        copied, why = copy_reason(m)
        if not copied:
            continue
        bucket, prefix = s3_location(m.source)
        o = m.object_storage
        out.append({"name": m.name, "source": m.source, "bucket": bucket, "prefix": prefix,
                    "path": os.path.normpath(m.mount_path), "read_only": bool(m.read_only),
                    "endpoint": o.endpoint if o else None, "region": o.region if o else None,
                    "mode": ObjectStorageMode.copy.value,
                    "requested": ObjectStorageMode(o.mode).value if o is not None and o.mode
                    else ObjectStorageMode.auto.value,
                    **({"why": why} if why else {}), "index": index})
    return out


def _key_env(job: Job, role: Role, run_id: str, entries: Iterable[dict[str, Any]], prefix: str,
             managed: set[tuple[str, str]]) -> list[dict[str, Any]]:
    from rlark.runtimes.kubernetes.render import secret_data_key, secret_name

    out = []
    for e in entries:
        o = role.mounts[e["index"]].object_storage
        if o is None or not o.secret:
            continue
        for var, key in zip(key_variables(prefix, e["index"]), OBJECT_STORAGE_KEYS):
            selector = ({"name": secret_name(job, run_id), "key": secret_data_key(o.secret, key)}
                        if (o.secret, key) in managed else {"name": o.secret, "key": key})
            out.append({"name": var, "valueFrom": {"secretKeyRef": selector}})
    return out


def keeper_env(job: Job, role: Role, run_id: str,
               managed: Iterable[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """The Worker container's ``env`` entries for its keeper (pure): the mounts, the state
    directory and the credentials of the writable ones (the keeper copies those out); none
    when the role copies nothing."""
    entries = copy_entries(role)
    if not entries:
        return []
    writable = [e for e in entries if not e["read_only"]]
    return ([{"name": KEEPER_MOUNTS_VAR, "value": json.dumps(entries, separators=(",", ":"))},
             {"name": KEEPER_STATE_VAR, "value": STATE_DIR}]
            + _key_env(job, role, run_id, writable, KEEPER_KEYS_PREFIX, set(managed)))


def volume(mount: Mount, name: str) -> dict[str, Any]:
    """The volume of a copy-mode mount: an ``emptyDir`` the Pod's containers share."""
    return {"name": name, "emptyDir": {}}


def state_volume() -> dict[str, Any]:
    """The state volume the copy in leaves its results in."""
    return {"name": STATE_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}


def init_container(job: Job, role: Role, run_id: str, container: dict[str, Any],
                   volume_names: dict[int, str],
                   managed: Iterable[tuple[str, str]] = ()) -> dict[str, Any] | None:
    """The init container that copies ``role``'s copy-mode mounts in (pure), or None when it
    copies nothing. ``container``: the Worker's container (its image, security context and
    resources are the init container's too, so it schedules as the Pod does); ``volume_names``:
    mount index -> the Pod's volume name of that mount."""
    entries = copy_entries(role)
    if not entries:
        return None
    from rlark.runtimes.kubernetes.render import BOOTSTRAP_DIR, BOOTSTRAP_KEY

    init: dict[str, Any] = {
        "name": INIT_CONTAINER,
        "image": container["image"],
        "imagePullPolicy": container.get("imagePullPolicy", "IfNotPresent"),
        # -I without -S: boto3 is in the image's site-packages
        "command": ["python", "-I", f"{BOOTSTRAP_DIR}/{BOOTSTRAP_KEY}", "objcopy-in"],
        "env": [{"name": INIT_MOUNTS_VAR, "value": json.dumps(entries, separators=(",", ":"))},
                {"name": INIT_STATE_VAR, "value": STATE_DIR},
                {"name": "PYTHONUNBUFFERED", "value": "1"}]
        + _key_env(job, role, run_id, entries, INIT_KEYS_PREFIX, set(managed)),
        "volumeMounts": [{"name": "rlark-bootstrap", "mountPath": BOOTSTRAP_DIR, "readOnly": True},
                         {"name": STATE_VOLUME, "mountPath": STATE_DIR}]
        + [{"name": volume_names[e["index"]], "mountPath": e["path"]} for e in entries],
        "securityContext": copy.deepcopy(container.get("securityContext") or {}),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if container.get("resources"):
        init["resources"] = {k: dict(v) for k, v in container["resources"].items()}
    return init
