"""Object-storage mounts on the local runtime, in FUSE or copy mode (pure builders, and the
probe of what this machine can do).

Each ``objectStorage`` mount of a Worker is a directory of the Worker's own
(``<worker root>/objects/<index>``, the Run's uid's, hidden with ``$RLARK_HOME``) bound at its
``mountPath``. Its mode (``objectStorage.mode``, :func:`mount_mode`):

* **fuse**: the Worker's keeper mounts the ``s3://bucket/prefix`` there with s3fs (Debian's
  ``s3fs`` package, s3fs-fuse) before the workload starts and unmounts it after it ends
  (``bootstrap/fuse.py``): the Worker reads and writes the bucket itself, no copy of a large
  dataset first, and what it closes is in the bucket at once. s3fs rather than rclone: a
  package of Debian's own (bookworm: 1.90), one process per mount that takes a passwd file and
  the ``uid``/``gid``/``umask`` a mount for another uid needs, and nothing to configure.
* **copy**: the keeper copies the prefix in before the workload starts and what the Worker
  wrote there back out after it ends (``bootstrap/objects.py``), under the Worker's uid: where
  this machine has no FUSE (no ``/dev/fuse``, no ``fuse`` file system, no s3fs), or the Job
  asks for it (a checkpoint directory written often and read back rarely costs fewer requests
  copied once).

Either way the credentials of the mount's ``objectStorage.secret`` reach the keeper through the
pipe that carries the Worker's environment: they are in no argument, no environment variable of
the Worker's scripts, and in no process of the Job's code (in FUSE mode, in a file only root
reads, removed once s3fs has read it).
"""

from __future__ import annotations

import os
from typing import Mapping

from rlark.runtimes.base import SecretMissing
from rlark.spec import MountType, ObjectStorageMode, Role, s3_location

#: the mount entry's modes
FUSE, COPY = ObjectStorageMode.fuse.value, ObjectStorageMode.copy.value


def fuse_problem(s3fs: str, dev: str = "/dev/fuse",
                 filesystems: str = "/proc/filesystems") -> str | None:
    """Why this machine cannot give a Worker a FUSE mount of a bucket; None when it can: the
    FUSE device ``dev`` must be a character device this process may open, the kernel must list
    ``fuse`` in ``filesystems`` (proc(5)), and ``s3fs`` must be an executable file (the
    ``rlark server`` setting ``RLARK_S3FS``; Debian: ``apt-get install s3fs``)."""
    import stat as stat_module

    try:
        st = os.stat(dev)
    except OSError as exc:
        return f"{dev} is missing ({exc.strerror}): the kernel offers no FUSE device here"
    if not stat_module.S_ISCHR(st.st_mode) or not os.access(dev, os.R_OK | os.W_OK):
        return f"{dev} is not a FUSE device this server may open"
    try:
        with open(filesystems) as f:
            kinds = {line.split()[-1] for line in f if line.split()}
    except OSError as exc:
        return f"cannot read {filesystems}: {exc.strerror}"
    if "fuse" not in kinds:
        return f"the kernel lists no fuse file system in {filesystems} (modprobe fuse)"
    if not os.path.isabs(s3fs) or not os.path.isfile(s3fs) or not os.access(s3fs, os.X_OK):
        return (f"s3fs is not installed here: no executable {s3fs!r} (apt-get install s3fs, or "
                "set RLARK_S3FS to its path)")
    return None


def mount_mode(requested: str | None, problem: str | None) -> tuple[str, str | None]:
    """``(mode, why)`` an ``objectStorage`` mount gets on this machine (pure): ``copy`` when
    asked; ``fuse`` when asked (the caller refuses it where ``problem`` says FUSE is not
    available here); ``auto`` (or unset): ``fuse`` where ``problem`` is None, else ``copy`` with
    ``why`` saying why not FUSE."""
    if requested == COPY:
        return COPY, None
    if requested == FUSE:
        return FUSE, None
    if problem is None:
        return FUSE, None
    return COPY, f"auto: copy, because FUSE is not available here: {problem}"


def object_dir(worker_root: str, index: int) -> str:
    """The host directory of the role's mount ``index`` for one Worker (pure)."""
    return os.path.join(worker_root, "objects", str(index))


def copy_mounts(role: Role, secrets: Mapping[tuple[str, str], str],
                fuse: str | None) -> list[dict]:
    """The keeper's ``RLARK_KEEPER_OBJECT_STORAGE`` entries for ``role``'s ``objectStorage``
    mounts, in spec order (pure): ``{name, source, bucket, prefix, path, read_only, endpoint,
    region, mode, requested, access_key_id, secret_access_key}`` (the two keys absent for
    anonymous access; ``requested``: the spec's mode, ``auto`` when unset; ``why``: why
    ``auto`` became copy). ``secrets``: ``(secret name, key)`` -> value, as the controller
    opened them; ``fuse``: why this machine cannot mount FUSE (:func:`fuse_problem`), None when
    it can.

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
        requested = ObjectStorageMode(o.mode).value if o is not None and o.mode \
            else ObjectStorageMode.auto.value
        mode, why = mount_mode(requested, fuse)
        entry.update({"mode": mode, "requested": requested, **({"why": why} if why else {})})
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
