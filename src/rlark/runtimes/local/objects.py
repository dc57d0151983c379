"""Object-storage mounts on the local runtime, in copy mode (pure builders).

Each ``objectStorage`` mount of a Worker is a directory of the Worker's own
(``<worker root>/objects/<index>``, the Run's uid's, hidden with ``$RLARK_HOME``) bound at its
``mountPath``. The Worker's keeper copies the ``s3://bucket/prefix`` in before the workload
starts and what the Worker wrote there back out after it ends (``bootstrap/objects.py``), under
the Worker's uid, with the credentials of the mount's ``objectStorage.secret`` handed to it
through the pipe that carries the Worker's environment: they are in no file, no argument, no
environment variable of the Worker's scripts, and in no process of the Job's code.
"""

from __future__ import annotations

import os
from typing import Mapping

from rlark.runtimes.base import SecretMissing
from rlark.spec import MountType, Role, s3_location


def object_dir(worker_root: str, index: int) -> str:
    """The host directory of the role's mount ``index`` for one Worker (pure)."""
    return os.path.join(worker_root, "objects", str(index))


def copy_mounts(role: Role, secrets: Mapping[tuple[str, str], str]) -> list[dict]:
    """The keeper's ``RLARK_KEEPER_OBJECT_STORAGE`` entries for ``role``'s ``objectStorage``
    mounts, in spec order (pure): ``{name, source, bucket, prefix, path, read_only, endpoint,
    region, access_key_id, secret_access_key}`` (the two keys absent for anonymous access).
    ``secrets``: ``(secret name, key)`` -> value, as the controller opened them.

    Raises:
        SecretMissing: the mount's secret lacks a key (deleted since the submit).
        ValueError: a source that is not ``s3://bucket/prefix`` (preflight refuses it first).
    """
    out: list[dict] = []
    for m in role.mounts:
        if m.type != MountType.object_storage.value:
            continue
        bucket, prefix = s3_location(m.source)
        o = m.object_storage
        entry: dict = {"name": m.name, "source": m.source, "bucket": bucket, "prefix": prefix,
                       "path": os.path.normpath(m.mount_path), "read_only": bool(m.read_only),
                       "endpoint": o.endpoint if o else None, "region": o.region if o else None}
        refs = m.secret_refs()
        for (name, key), field in zip(refs, ("access_key_id", "secret_access_key")):
            if (name, key) not in secrets:
                raise SecretMissing(
                    f"role {role.name!r}: mount {m.name!r} takes its credentials from key "
                    f"{key!r} of secret {name!r}, which the project does not have "
                    "(`rlark secret list`)")
            entry[field] = secrets[(name, key)]
        out.append(entry)
    return out
