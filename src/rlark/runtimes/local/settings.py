"""The local runtime's settings, from the server's environment (``rlark server`` sets the variables
from its options): how each Worker's processes are kept together, and who Workers run as.
"""

from __future__ import annotations

import os

from rlark.runtimes.local.identity import DEFAULT_RANGE, MODES, UidRange
from rlark.runtimes.local.isolation import REQUESTS


def worker_isolation() -> str:
    """Local runtime: how each Worker's processes are kept together (``rlark server
    --worker-isolation``; :mod:`rlark.runtimes.local.isolation`): ``$RLARK_WORKER_ISOLATION``,
    one of ``auto`` (the default: the strongest kind this server can make, probed at start),
    ``pid-namespace``, ``cgroup``, ``user-namespace``, or ``process-group`` (weak: a process
    that calls setsid() can outlive its Worker).

    Raises:
        ValueError: another value.
    """
    raw = os.environ.get("RLARK_WORKER_ISOLATION", "").strip() or "auto"
    if raw not in REQUESTS:
        raise ValueError(f"RLARK_WORKER_ISOLATION={raw!r} is not one of {', '.join(REQUESTS)}")
    return raw


def worker_identity() -> str:
    """Local runtime: who Workers run as (``rlark server --worker-identity``;
    :mod:`rlark.runtimes.local.identity`): ``$RLARK_WORKER_IDENTITY``, one of ``auto`` (the
    default: a uid of each Run's own where this server can give one), ``uid``, ``server-user``.

    Raises:
        ValueError: another value.
    """
    raw = os.environ.get("RLARK_WORKER_IDENTITY", "").strip() or "auto"
    if raw not in MODES:
        raise ValueError(f"RLARK_WORKER_IDENTITY={raw!r} is not one of {', '.join(MODES)}")
    return raw


def worker_uid_range() -> UidRange:
    """Local runtime: the uids Workers run as, ``$RLARK_WORKER_UIDS`` (``FIRST-LAST``, default
    :data:`rlark.runtimes.local.identity.DEFAULT_RANGE`).

    Raises:
        ValueError: not such a range.
    """
    raw = os.environ.get("RLARK_WORKER_UIDS", "").strip()
    return UidRange.parse(raw) if raw else UidRange(*DEFAULT_RANGE)


def s3fs_path() -> str:
    """Local runtime: the s3fs that mounts ``objectStorage`` mounts in FUSE mode
    (:mod:`rlark.runtimes.local.objects`): ``$RLARK_S3FS``, else ``s3fs`` on the server's
    ``PATH``, else ``/usr/bin/s3fs`` (Debian's package). A path that is no executable makes
    ``mode: fuse`` a preflight error and ``auto`` copy mode."""
    import shutil

    raw = os.environ.get("RLARK_S3FS", "").strip()
    return raw or shutil.which("s3fs") or "/usr/bin/s3fs"
