"""A Run's training curves read from a bucket: where RLinf's logger directory lies below an
``objectStorage`` mount of the head's role, its event files are objects of that mount's bucket
(``s3://bucket/prefix`` holds what is below the ``mountPath``), which the server reads through
the S3 API on every runtime, with the credentials of the mount's ``objectStorage.secret``, the
S3 client and address checks of :mod:`rlark.record.outputs` (an endpoint only on a public or an
allowed network, ``RLARK_OBJECT_STORAGE_ALLOW_NETWORKS``), and the bounds of
:mod:`rlark.services.curves` (names ``events.out.tfevents.*`` directly in the directory, at
most ``MAX_FILES`` files and ``MAX_FILE_BYTES`` bytes of each, the Run's time window).

When the files are there: a copy-mode mount's files reach the bucket when the Worker copies
them out (after its run script, or on stop: ``bootstrap/objects.py``); a mount a CSI driver
provides (Kubernetes) reaches it as the driver uploads, and many drivers upload a file only
once it is closed, which RLinf's writer does at the end. So during a Run the bucket may hold
no curves yet; after it, it is where they are kept.

Pure but for :func:`read_bucket` and :func:`bucket_scalars`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rlark.record.outputs import (ReadBackError, s3_client, s3_error, s3_objects, s3_prefix,
                                  storage_keys)
from rlark.rlinf_config.locations import mount_holding
from rlark.services import curves
from rlark.services.curves import EVENT_PREFIX, NotRead, read_files

#: objects listed directly under the directory at most (the workload may fill it with others)
MAX_LISTED = 10_000
#: why curves may be missing from a bucket while the Run is live (the module says why)
NOT_YET = ("files below an objectStorage mount reach its bucket when the Worker copies them "
           "out (copy mode: after the run script) or when the CSI driver uploads them (often "
           "only once a file is closed): the curves may appear only at the end of the Run")


#: seconds a bucket whose listing failed is not asked again (its error is answered from memory):
#: the console polls a live Run's curves every few seconds, and an endpoint that does not answer
#: costs the S3 client's connect timeout times its attempts (10 s x 3) per read
FAILURE_MEMORY_SECONDS = 30.0
_FAILED: dict[tuple, tuple[float, str]] = {}
_FAILED_LOCK = threading.Lock()
_FAILED_MAX = 256


@dataclass(frozen=True)
class BucketDir:
    """The bucket and key prefix (no leading or trailing ``/``) that hold an in-Worker
    directory below ``mount`` (a Job document's ``objectStorage`` mount mapping)."""

    mount: Mapping[str, Any]
    bucket: str
    prefix: str

    @property
    def at(self) -> str:
        """``s3://bucket/prefix``: where the directory's files are, as people write it."""
        return f"s3://{self.bucket}/{self.prefix}"


def bucket_dir(spec: Mapping[str, Any], path: str, role: str | None = None) -> BucketDir | None:
    """Where the in-Worker directory ``path`` (absolute) of role ``role`` (default: the head
    role) lies in a bucket, of a Run's spec snapshot ``spec`` (a Job document): the deepest
    mount of the role whose ``mountPath`` holds ``path``
    (:func:`rlark.rlinf_config.locations.mount_holding`), when it is an ``objectStorage``
    mount: its ``source`` bucket, and its prefix joined with ``path`` below the ``mountPath``.
    None when no mount holds ``path`` or the deepest one is of another type (a ``hostPath``
    or ``pvc`` mount inside a bucket's mount shadows it). Pure.

    Raises:
        ValueError: the mount's source is no ``s3://bucket[/prefix]`` URL (the message says
            why).
    """
    raw = spec.get("spec")
    body: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    name = role or body.get("headRole")
    found = next((r for r in body.get("roles") or []
                  if isinstance(r, Mapping) and r.get("name") == name), None)
    if found is None or not path.startswith("/"):
        return None
    mount = mount_holding(path, [m for m in found.get("mounts") or [] if isinstance(m, Mapping)])
    if mount is None or mount.get("type") != "objectStorage":
        return None
    bucket, prefix = s3_prefix(mount, path)
    return BucketDir(mount, bucket, prefix)


def read_bucket(client: Any, where: BucketDir, since: float | None = None,
                until: float | None = None) -> dict[str, Any]:
    """The scalars of the event files directly in ``where`` (objects named
    ``<prefix>/events.out.tfevents.*``; a deeper key or one that would leave the prefix is no
    file of it), read through ``client`` (an S3 client: :func:`rlark.record.outputs.s3_client`)
    as :func:`rlark.services.curves.read_files` gives them, each object's first
    ``MAX_FILE_BYTES`` bytes fetched (an HTTP range); at most :data:`MAX_LISTED` objects
    listed. A listing whose objects did not change (key, size, ETag, time) is answered from
    memory without fetching them again.

    Raises:
        ReadBackError: the listing failed (the S3 error code and message).
    """
    names: list[str] = []
    sizes: dict[str, int] = {}
    identity: list[tuple] = []
    listed, cut = 0, False
    try:
        for rel, obj in s3_objects(client, where.bucket, where.prefix, direct=True):
            listed += 1
            if listed > MAX_LISTED:
                cut = True
                break
            if rel is None or "/" in rel or not rel.startswith(EVENT_PREFIX):
                continue
            names.append(rel)
            sizes[rel] = int(obj.get("Size") or 0)
            modified = obj.get("LastModified")
            identity.append((rel, sizes[rel], str(obj.get("ETag")),
                             modified.timestamp() if modified is not None else None))
    except Exception as exc:  # noqa: BLE001 - botocore's ClientError, BotoCoreError, OSError
        raise ReadBackError(f"listing {where.at} failed: {s3_error(exc)}") from None
    endpoint = (where.mount.get("objectStorage") or {}).get("endpoint")

    def fetch(name: str) -> tuple[bytes, int]:
        if sizes[name] == 0:  # a range of an empty object is refused (InvalidRange)
            return b"", 0
        most = curves.MAX_FILE_BYTES
        try:
            got = client.get_object(Bucket=where.bucket, Key=f"{where.prefix}/{name}".lstrip("/"),
                                    Range=f"bytes=0-{most - 1}")
            return got["Body"].read(most), sizes[name]
        except Exception as exc:  # noqa: BLE001 - as above: a note, never a 500
            raise NotRead(f"{name}: not read ({s3_error(exc)})") from None

    found = read_files(("s3", endpoint, where.bucket, where.prefix, tuple(identity)),
                       sorted(names, key=curves.event_file_order), fetch, since, until)
    if cut:
        found["notes"].append(f"more than {MAX_LISTED} objects in {where.at}: the first "
                              f"{MAX_LISTED} looked at")
    return found


def bucket_scalars(where: BucketDir, keys: Mapping[tuple[str, str], str] | None,
                   allow_networks: list[str], since: float | None, until: float | None,
                   make_client: Callable[..., Any] = s3_client) -> dict[str, Any]:
    """:func:`read_bucket` of ``where`` with a client for its mount's ``objectStorage``
    settings (``endpoint``, ``region``) and credentials (``keys``: the Run's opened secrets,
    ``(secret, key)`` -> value; None: not at hand), the endpoint allowed only on
    ``allow_networks`` (CIDRs) beyond public addresses. A failure is remembered for
    :data:`FAILURE_MEMORY_SECONDS` per bucket and prefix: asked again within it, the same error
    comes at once, without a connection.

    Raises:
        ReadBackError: the credentials are not at hand (``KeysUnavailable``), the endpoint is
            refused, or the listing failed; the message says which.
    """
    storage = where.mount.get("objectStorage") or {}
    creds = storage_keys(where.mount, keys)
    # new credentials are asked at once: the key holds a digest of them, never them
    key = (storage.get("endpoint"), where.bucket, where.prefix,
           hashlib.sha256(repr(creds).encode()).hexdigest())
    now = time.monotonic()
    with _FAILED_LOCK:
        failed = _FAILED.get(key)
    if failed is not None and now - failed[0] < FAILURE_MEMORY_SECONDS:
        raise ReadBackError(f"{failed[1]} (asked {now - failed[0]:.0f} s ago; asked again "
                            f"{FAILURE_MEMORY_SECONDS:.0f} s after)")
    try:
        client = make_client(storage, creds, allow_networks)
        found = read_bucket(client, where, since, until)
    except ReadBackError as exc:
        with _FAILED_LOCK:
            if len(_FAILED) >= _FAILED_MAX:
                _FAILED.pop(next(iter(_FAILED)))
            _FAILED[key] = (time.monotonic(), str(exc))
        raise
    with _FAILED_LOCK:
        _FAILED.pop(key, None)
    return found
