"""A Run's outputs, proven: after the Run, what it wrote to each output is listed (files, sizes,
modification times, sha256 under a size cap) by reading it back through the mount that holds
it: a ``hostPath`` mount's directory or a ``pvc`` volume where the server sees it (the local
runtime), an ``objectStorage`` mount's bucket through the S3 API (every runtime). The record's
``outputs`` holds what was found, the ``outputs-readable`` check judges it, and ``rlark restart
--resume`` finds the last checkpoint in it (:func:`resume_point`).

Long because: the read-back of three mount kinds (a directory, a volume, a bucket) and the
resume point, which is chosen from that same listing; the bounds (files, bytes, time) are shared.

What is an output: each ``spec.outputs`` entry (named by the user), and each output or
checkpoint location of the RLinf config (:mod:`rlark.rlinf_config.locations`) that no named
output holds.

Everything read here was written by the workload: untrusted. A local directory is walked by
descriptor without following a symbolic link (``os.fwalk``) and each file opened below its
directory's descriptor with ``O_NOFOLLOW``; a file with a second name (a hard link, which may
be one of a file outside the output) is listed but not read. An S3 endpoint is read from only
when its host resolves to public addresses or to a network the administrator allowed
(``RLARK_OBJECT_STORAGE_ALLOW_NETWORKS``, :func:`rlark.settings.object_storage_allow_networks`),
with no configuration or credentials file of the server's own.

Pure but for :func:`read_dir`, :func:`read_s3`, :func:`s3_objects`, :func:`open_below`,
:func:`s3_client` and :func:`list_outputs`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import posixpath
import re
import socket
import stat as stat_module
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from rlark.rlinf_config.locations import WRITTEN_KINDS, mount_holding

#: files of one output kept in the record (the rest are counted)
MAX_FILES = 1000
#: entries looked at in one output at most (a larger one is said to be cut)
MAX_WALK = 100_000
#: a file is hashed (read whole) up to this size; a larger one is read by its first bytes
HASH_FILE_BYTES = 64 * 1024 * 1024
#: bytes all outputs of one Run may have read for hashing
HASH_RUN_BYTES = 1024 * 1024 * 1024
#: seconds reading all outputs of one Run back may take
READ_SECONDS = 300.0
#: the S3 object metadata key the copier keeps each file's modification time in (seconds since
#: the epoch, as text): ``x-amz-meta-mtime``, the name rclone uses for the same purpose
MTIME_METADATA = "mtime"

#: RLinf's checkpoint directories: ``<log_path>/<experiment_name>/checkpoints/global_step_<N>``
#: (rlinf/runners/embodied_runner.py ``_save_checkpoint``; ``<output_dir>/<experiment_name>/...``
#: in rlinf/runners/reasoning_runner.py), RLinf at commit a3816b5
STEP_DIR = re.compile(r"(?:^|/)checkpoints/global_step_(\d+)(?=/)")
#: what a checkpoint RLinf resumes from must hold: ``<resume_dir>/actor`` (embodied_runner.py
#: ``init_workers`` asserts it exists; reasoning_runner.py loads the actor from it)
ACTOR_DIR = "actor"
#: characters a checkpoint path may have to be passed as a Hydra override through a shell
#: variable (``$RLARK_RLINF_OVERRIDES`` is split on white space, Hydra splits on ``=``)
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/@+-]*$")


# --- what the outputs are (pure) ----------------------------------------------------------------


def _under(path: str, root: str) -> bool:
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def output_targets(spec: Mapping[str, Any], locations: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The outputs of a Run (its spec snapshot, a Job document; the record's ``locations``):
    ``[{name, path, role, origin, named, mount}]``, each ``spec.outputs`` entry (``origin``
    ``spec.outputs[i]``, ``named`` True), then each output or checkpoint location of the config
    with an absolute path that no earlier output holds (``origin`` its key, written by the head
    role's Workers); ``mount``: the role's mount that holds the path (a Job document's mount
    mapping), or None. Pure."""
    raw = spec.get("spec")
    body: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    head = body.get("headRole")
    roles = {r.get("name"): r for r in body.get("roles") or [] if isinstance(r, Mapping)}
    out: list[dict] = []
    for i, o in enumerate(body.get("outputs") or []):
        if not isinstance(o, Mapping) or not isinstance(o.get("path"), str) \
                or not o["path"].startswith("/"):
            continue
        out.append({"name": str(o.get("name")), "path": posixpath.normpath(o["path"]),
                    "role": o.get("role") or head, "origin": f"spec.outputs[{i}]", "named": True})
    for loc in locations:
        path = loc.get("path")
        if loc.get("kind") not in WRITTEN_KINDS or not isinstance(path, str) \
                or not path.startswith("/") or any(_under(path, t["path"]) for t in out):
            continue
        out.append({"name": str(loc.get("key")), "path": posixpath.normpath(path), "role": head,
                    "origin": str(loc.get("key")), "named": False})
    for t in out:
        role = roles.get(t["role"]) or {}
        t["mount"] = mount_holding(t["path"], [m for m in role.get("mounts") or []
                                               if isinstance(m, Mapping)])
    return out


def checkpoint_dirs(files: Sequence[tuple[str, int, float | None]]
                    ) -> tuple[list[dict], float | None]:
    """RLinf's checkpoint directories among an output's files (``(relative path, bytes,
    modification time or None)``): ``([{dir, step, files, bytes, actor, newest}], newest
    outside)``, by ``dir``; ``actor``: it holds a file below ``actor/``; ``newest``: its newest
    file's time (None when one is unknown); ``newest outside``: the newest time of a file in no
    checkpoint directory (None: none, or unknown). Pure."""
    dirs: dict[str, dict] = {}
    outside: float | None = None
    unknown_outside = False
    for rel, size, mtime in files:
        m = None
        for m in STEP_DIR.finditer(rel):
            pass  # the deepest checkpoints/global_step_N of the path
        if m is None:
            if mtime is None:
                unknown_outside = True
            elif outside is None or mtime > outside:
                outside = mtime
            continue
        d = rel[:m.end()].lstrip("/")
        entry = dirs.setdefault(d, {"dir": d, "step": int(m.group(1)), "files": 0, "bytes": 0,
                                    "actor": False, "newest": None, "unknown": False})
        entry["files"] += 1
        entry["bytes"] += size
        if rel[m.end():].lstrip("/").startswith(ACTOR_DIR + "/"):
            entry["actor"] = True
        if mtime is None:
            entry["unknown"] = True
        elif entry["newest"] is None or mtime > entry["newest"]:
            entry["newest"] = mtime
    out = []
    for d in sorted(dirs):
        e = dirs[d]
        if e.pop("unknown"):
            e["newest"] = None
        out.append(e)
    return out, (None if unknown_outside and outside is None else outside)


def _parent(d: str) -> str:
    return d.rsplit("/global_step_", 1)[0]


def resume_point(outputs: Sequence[Mapping[str, Any]], succeeded: bool
                 ) -> tuple[dict | None, list[str]]:
    """The checkpoint a new Run resumes from, of a finished Run's outputs (its record's
    ``outputs``): ``({checkpoint, step, output, origin}, notes)``, or ``(None, notes)`` saying
    why there is none. Pure.

    A checkpoint is RLinf's ``.../checkpoints/global_step_<N>`` directory (:data:`STEP_DIR`)
    holding ``actor/`` (:data:`ACTOR_DIR`), read back from its output. It counts only when it
    was written whole: the Run succeeded (``succeeded``), or the Run went on after it (a later
    step's directory beside it, or a file of the output outside every checkpoint directory
    written after its newest file). A Run stopped or failed while it wrote a checkpoint leaves
    one that is neither: it is skipped (named in the notes) and the one before it is taken.
    Of those that count, the highest step; on a tie, the earlier output.
    """
    notes: list[str] = []
    best: tuple[int, int, dict] | None = None
    for order, out in enumerate(outputs):
        back = out.get("readBack") or {}
        if not back.get("ok"):
            continue
        cps = [c for c in out.get("checkpoints") or [] if isinstance(c, Mapping)]
        newest_outside = out.get("newestOutside")
        for c in cps:
            where = f"{out.get('path')}/{c.get('dir')}"
            if not c.get("actor"):
                notes.append(f"{where}: no {ACTOR_DIR}/ in it (RLinf resumes from "
                             f"<resume_dir>/{ACTOR_DIR})")
                continue
            later = any(_parent(o["dir"]) == _parent(c["dir"]) and o["step"] > c["step"]
                        for o in cps)
            after = isinstance(newest_outside, (int, float)) and isinstance(
                c.get("newest"), (int, float)) and newest_outside > c["newest"]
            if not (succeeded or later or after):
                notes.append(f"{where}: skipped, the Run did not succeed and wrote nothing after "
                             "it (it may have been cut off while being written)")
                continue
            key = (int(c["step"]), -order)
            if best is None or key > best[:2]:
                best = (key[0], key[1], {"checkpoint": where, "step": int(c["step"]),
                                         "output": out.get("name"), "origin": out.get("origin")})
    if best is None:
        if not any((o.get("readBack") or {}).get("ok") for o in outputs):
            notes.append("no output of the Run was read back after it")
        elif not notes:
            notes.append("no checkpoints/global_step_<N> directory in the Run's outputs")
        return None, notes
    return best[2], notes


def resume_override(checkpoint: str) -> str:
    """The Hydra override that makes RLinf resume from ``checkpoint`` (an in-Worker path):
    ``runner.resume_dir=<it>`` (rlinf/runners/*_runner.py read ``cfg.runner.resume_dir``).

    Raises:
        ValueError: a path with characters a shell variable or Hydra would split it at.
    """
    if not SAFE_PATH.match(checkpoint):
        raise ValueError(f"checkpoint path {checkpoint[:200]!r} has characters other than "
                         "letters, digits and ._/@+-, which $RLARK_RLINF_OVERRIDES cannot carry")
    return f"runner.resume_dir={checkpoint}"


# --- reading back (I/O) -------------------------------------------------------------------------


@dataclass
class Budget:
    """What reading one Run's outputs back may still spend: bytes read for hashing, and a
    deadline (monotonic seconds)."""

    hash_bytes: int = HASH_RUN_BYTES
    deadline: float = field(default_factory=lambda: time.monotonic() + READ_SECONDS)

    def expired(self) -> bool:
        return time.monotonic() > self.deadline


class ReadBackError(Exception):
    """An output could not be read back; the message says why (never a credential)."""


class KeysUnavailable(ReadBackError):
    """The credentials of an ``objectStorage`` mount are not at hand for the server (a secret
    RLark does not manage, such as a Kubernetes Secret, or one it cannot open now)."""


def _listing(files: list[tuple[str, int, float | None]], skipped: int, cut: bool,
             read: Callable[[str, int], dict]) -> dict:
    """The part of an output's record entry its files give: counts, the first
    :data:`MAX_FILES` files read through ``read(rel, size)`` (``{"sha256"?, "mtime"?,
    "why"?}``), the checkpoint directories."""
    files.sort()
    kept = []
    for rel, size, mtime in files[:MAX_FILES]:
        entry: dict[str, Any] = {"path": rel, "bytes": size, "mtime": mtime}
        entry.update(read(rel, size))
        kept.append(entry)
    mtimes = {e["path"]: e.get("mtime") for e in kept}
    walked = [(rel, size, mtimes.get(rel, mtime)) for rel, size, mtime in files]
    cps, outside = checkpoint_dirs(walked)
    return {"fileCount": len(files), "bytes": sum(s for _, s, _ in files), "skipped": skipped,
            "filesCut": cut or len(files) > MAX_FILES, "files": kept, "checkpoints": cps,
            "newestOutside": outside}


def open_below(root: str, rel: str) -> int:
    """A descriptor of the regular file ``rel`` below the directory ``root``, opened one
    component at a time below the one before with ``O_NOFOLLOW`` (no symbolic link is ever
    followed, whatever the workload made the path into meanwhile); the caller closes it.

    Raises:
        ReadBackError: an empty, ``.`` or ``..`` part, a link, not a regular file, or a file
            with a second name (a hard link may be one of a file outside the output).
        OSError: it cannot be opened.
    """
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        raise ReadBackError(f"{rel[:200]!r} is not a path below the output")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        f = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (40, 20):  # ELOOP: a link; ENOTDIR: a part that is no directory
            raise ReadBackError(f"{rel}: a symbolic link or not a directory on the way") from None
        raise
    finally:
        os.close(fd)
    st = os.fstat(f)
    if not stat_module.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(f)
        raise ReadBackError(f"{rel}: not a regular file with a single name")
    return f


def _hash_fd(fd: int, size: int, budget: Budget) -> dict:
    """``{"sha256"}`` of an open file under the caps, else ``{"why"}`` after reading its
    first bytes (proof that it reads)."""
    with os.fdopen(fd, "rb") as f:
        if size > HASH_FILE_BYTES or size > budget.hash_bytes or budget.expired():
            f.read(4096)
            return {"why": "over the size cap: read, not hashed"}
        digest = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
        budget.hash_bytes -= size
        return {"sha256": digest.hexdigest()}


def read_dir(root: str, budget: Budget) -> dict:
    """Read back the directory ``root`` of this machine (a real path, links resolved by the
    caller): every regular file below it by :func:`os.fwalk` (links and other entries skipped,
    counted), each of the first :data:`MAX_FILES` opened through :func:`open_below` and hashed
    under the caps.

    Raises:
        ReadBackError: it is not a directory.
    """
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        raise ReadBackError(f"{root} does not exist") from None
    if not stat_module.S_ISDIR(st.st_mode):
        raise ReadBackError(f"{root} is not a directory")
    files: list[tuple[str, int, float | None]] = []
    skipped = 0
    cut = False
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        links = [d for d in dirnames if stat_module.S_ISLNK(
            os.stat(d, dir_fd=dir_fd, follow_symlinks=False).st_mode)]
        skipped += len(links)  # a link to a directory: neither followed nor listed
        dirnames[:] = sorted(d for d in dirnames if d not in links)
        for name in sorted(filenames):
            if len(files) + skipped >= MAX_WALK:
                cut = True
                break
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat_module.S_ISREG(st.st_mode):
                skipped += 1
                continue
            files.append((os.path.relpath(os.path.join(dirpath, name), root), st.st_size,
                          st.st_mtime))
        if cut:
            break

    def read(rel: str, size: int) -> dict:
        try:
            return _hash_fd(open_below(root, rel), size, budget)
        except ReadBackError as exc:  # what the server does not read on principle
            return {"why": f"listed, not read: {exc}"}
        except OSError as exc:
            return {"why": f"not read: {exc.strerror or exc}"}

    return _listing(files, skipped, cut, read)


def endpoint_refusal(endpoint: str, allow_networks: Sequence[str],
                     resolve: Callable[[str, int], list[str]] | None = None) -> tuple[str | None, str]:
    """``(why the server may not read from it, or None; the endpoint to connect to)``: every
    address the endpoint's host resolves to must pass
    :func:`rlark.preflight.addresses.address_refusal`; an ``http`` endpoint is then pinned to the first
    one (its address in place of its name), so a name that answers differently a moment later
    cannot lead the server elsewhere (``https`` keeps the name its certificate is checked for).
    ``resolve``: ``(host, port) -> addresses`` (default: the system's resolver)."""
    from rlark.preflight.addresses import address_refusal

    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = resolve(host, port) if resolve else [
            str(i[4][0]).split("%", 1)[0]
            for i in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError as exc:
        return f"{host} does not resolve ({exc.strerror or exc})", endpoint
    if not addresses:
        return f"{host} does not resolve", endpoint
    for a in addresses:
        why = address_refusal(ipaddress.ip_address(a), list(allow_networks))
        if why is not None:
            return (f"{host} resolves to {a}, a {why} address, which the server does not read "
                    "from (its administrator can allow the network: "
                    "RLARK_OBJECT_STORAGE_ALLOW_NETWORKS)"), endpoint
    if parts.scheme != "http":
        return None, endpoint
    literal = f"[{addresses[0]}]" if ":" in addresses[0] else addresses[0]
    return None, urlunsplit((parts.scheme, f"{literal}:{port}", parts.path, "", ""))


def s3_client(storage: Mapping[str, Any], keys: tuple[str, str] | None,
              allow_networks: Sequence[str]) -> Any:
    """A boto3 S3 client for an ``objectStorage`` mount's settings (its spec's
    ``objectStorage``: ``endpoint``, ``region``), with ``keys`` (access key id, secret) or
    anonymous; it reads no configuration or credentials file and no configured endpoint of the
    server's own. Path-style addressing where an endpoint is given (as the copier,
    ``bootstrap/objectcopy.py``).

    Raises:
        ReadBackError: the endpoint is refused (:func:`endpoint_refusal`), or boto3 is missing.
    """
    try:
        import boto3
        import botocore.session
        from botocore import UNSIGNED
        from botocore.config import Config
    except ImportError as exc:
        raise ReadBackError(f"the server has no S3 client (boto3): {exc}") from None
    endpoint = storage.get("endpoint") or None
    if endpoint:
        why, endpoint = endpoint_refusal(str(endpoint), allow_networks)
        if why:
            raise ReadBackError(why)
    core = botocore.session.Session()
    for var, value in (("config_file", "/dev/null"), ("credentials_file", "/dev/null"),
                       ("ignore_configured_endpoint_urls", True)):
        core.set_config_variable(var, value)
    options: dict[str, Any] = {"retries": {"max_attempts": 3, "mode": "standard"},
                               "connect_timeout": 10, "read_timeout": 60}
    if endpoint:
        options["s3"] = {"addressing_style": "path"}
    creds: dict[str, str] = {}
    if keys:
        creds = {"aws_access_key_id": keys[0], "aws_secret_access_key": keys[1]}
    else:
        options["signature_version"] = UNSIGNED
    return boto3.session.Session(botocore_session=core).client(
        "s3", endpoint_url=endpoint, region_name=storage.get("region") or "us-east-1",
        config=Config(**options), **creds)


def s3_prefix(mount: Mapping[str, Any], path: str) -> tuple[str, str]:
    """``(bucket, key prefix)`` of the in-Worker ``path`` below an ``objectStorage`` mount (its
    ``source`` ``s3://bucket/prefix`` holds what is below its ``mountPath``). Pure.

    Raises:
        ValueError: the source is no ``s3://`` URL.
    """
    from rlark.spec import s3_location

    bucket, prefix = s3_location(str(mount.get("source")))
    rel = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(str(mount.get("mountPath"))))
    rel = "" if rel == "." else rel
    return bucket, "/".join(p for p in (prefix, rel) if p)


def s3_error(exc: Exception) -> str:
    """What an S3 call's failure says, for a message: ``Code: message`` of the S3 error
    (``AccessDenied``, ``NoSuchBucket``...; a HEAD's bare HTTP status named), else the
    exception's class and text; at most some 300 characters of the server's words."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        code = str(err.get("Code") or "ClientError")
        if code.isdigit():  # a HEAD answer has no body: only its HTTP status
            code = {"403": "AccessDenied", "404": "NoSuchKey"}.get(code, f"HTTP{code}")
        return f"{code}: {str(err.get('Message') or '')[:300]}".rstrip(": ")
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _object_mtime(head: Mapping[str, Any], fallback: float | None) -> float | None:
    raw = (head.get("Metadata") or {}).get(MTIME_METADATA)
    try:
        return float(raw) if raw is not None else fallback
    except ValueError:
        return fallback


def s3_objects(client: Any, bucket: str, prefix: str, direct: bool = False
               ) -> Iterator[tuple[str | None, dict]]:
    """Each object S3 lists under ``prefix`` (no leading or trailing ``/``; "" for the whole
    bucket) of ``bucket``, in key order: ``(its path below the prefix, or None for a directory
    marker or a key that would leave the prefix; the listing's entry: Key, Size, LastModified,
    ETag)``. ``direct``: only the objects directly under it (S3's ``Delimiter=/``; deeper ones
    are not listed at all). Lazy: a page is asked for when the one before is used up.

    Raises:
        Exception: what the client raises (botocore's ClientError, BotoCoreError, OSError).
    """
    from rlark.bootstrap.objectcopy import key_path

    options = {"Bucket": bucket, "Prefix": prefix + "/" if prefix else ""}
    if direct:
        options["Delimiter"] = "/"
    for page in client.get_paginator("list_objects_v2").paginate(**options):
        for obj in page.get("Contents", []):
            yield key_path(prefix, obj["Key"]), obj


def read_s3(client: Any, bucket: str, prefix: str, budget: Budget) -> dict:
    """Read back what lies under ``prefix`` of ``bucket`` (an output below an
    ``objectStorage`` mount): every object listed (keys that would leave the prefix skipped,
    counted), each of the first :data:`MAX_FILES` fetched whole and hashed under the caps, or
    its first bytes; a file's time is the one the copier kept (:data:`MTIME_METADATA`), else
    the object's upload time.

    Raises:
        ReadBackError: the listing failed (the S3 error code and message).
    """
    files: list[tuple[str, int, float | None]] = []
    skipped, cut = 0, False
    try:
        for rel, obj in s3_objects(client, bucket, prefix):
            if rel is None:
                skipped += int(not obj["Key"].endswith("/"))
                continue
            modified = obj.get("LastModified")
            files.append((rel, int(obj.get("Size") or 0),
                          modified.timestamp() if modified is not None else None))
            if len(files) >= MAX_WALK or budget.expired():
                cut = True
                break
    except Exception as exc:  # noqa: BLE001 - botocore's ClientError, BotoCoreError, OSError
        raise ReadBackError(f"listing s3://{bucket}/{prefix} failed: {s3_error(exc)}") from None

    def read(rel: str, size: int) -> dict:
        key = f"{prefix}/{rel}" if prefix else rel
        try:
            if size <= HASH_FILE_BYTES and size <= budget.hash_bytes and not budget.expired():
                got = client.get_object(Bucket=bucket, Key=key)
                digest = hashlib.sha256()
                for chunk in got["Body"].iter_chunks(1 << 20):
                    digest.update(chunk)
                budget.hash_bytes -= size
                out: dict[str, Any] = {"sha256": digest.hexdigest()}
            else:
                got = client.get_object(Bucket=bucket, Key=key, Range="bytes=0-4095")
                got["Body"].read()
                out = {"why": "over the size cap: read, not hashed"}
        except Exception as exc:  # noqa: BLE001
            return {"why": f"not read: {s3_error(exc)}"}
        kept = _object_mtime(got, None)
        if kept is not None:  # else the listing's: the object's upload time
            out["mtime"] = kept
        return out

    return _listing(files, skipped, cut, read)


@dataclass
class ReadBackContext:
    """What :func:`list_outputs` needs beyond the record: ``worker_dir`` (the runtime
    profile's :meth:`~rlark.runtimes.base.RuntimeProfile.worker_dir`: where a Worker's view of
    a path lies here, or ``(None, why)``), ``persistent_filesystem`` (the runtime keeps a path
    under no mount: the local runtime), ``keys`` (``(secret, key)`` -> value, the Run's opened
    secrets; None: not available), ``allow_networks`` (CIDRs an S3 endpoint may lie in),
    ``sandboxed`` (the Run's Workers had a view of their own), ``make_client`` (an S3 client
    for a mount's ``objectStorage`` settings and keys: :func:`s3_client` by default)."""

    worker_dir: Callable[[dict, str, int, bool], tuple[str | None, str]]
    persistent_filesystem: bool
    keys: Mapping[tuple[str, str], str] | None
    allow_networks: Sequence[str] = ()
    sandboxed: bool = False
    make_client: Callable[..., Any] = s3_client


def _rank_of(rec: Mapping[str, Any], role: str) -> int | None:
    """The node rank of the first Worker of ``role`` that ran (reported its facts)."""
    for w in sorted((rec.get("workers") or {}).get("items") or [],
                    key=lambda w: int(w.get("nodeRank") or 0)):
        if w.get("role") == role and w.get("facts"):
            return int(w.get("nodeRank") or 0)
    return None


def _mount_view(mount: Mapping[str, Any] | None) -> dict | None:
    if mount is None:
        return None
    view = {k: mount.get(k) for k in ("name", "type", "source", "mountPath")}
    view["readOnly"] = bool(mount.get("readOnly"))
    return view


def storage_keys(mount: Mapping[str, Any], keys: Mapping[tuple[str, str], str] | None
                  ) -> tuple[str, str] | None:
    """The mount's credentials from the opened secrets (None: anonymous).

    Raises:
        ReadBackError: the mount names a secret whose values are not at hand."""
    storage = mount.get("objectStorage") or {}
    name = storage.get("secret")
    if not name:
        return None
    pair = (keys or {}).get((name, "accessKeyId")), (keys or {}).get((name, "secretAccessKey"))
    if pair[0] is None or pair[1] is None:
        raise KeysUnavailable(f"the credentials of secret {name!r} are not available to the server "
                            "now (deleted, or the server's key cannot open them)")
    return pair[0], pair[1]


def read_output(rec: Mapping[str, Any], target: Mapping[str, Any], ctx: ReadBackContext,
                budget: Budget) -> dict:
    """One output's record entry (see :func:`list_outputs`)."""
    mount = target.get("mount")
    entry: dict[str, Any] = {k: target[k] for k in ("name", "path", "role", "origin", "named")}
    entry["mount"] = _mount_view(mount)
    entry["persistent"] = (mount is not None and not mount.get("readOnly")) or (
        mount is None and not target["named"] and ctx.persistent_filesystem)
    kind = mount.get("type") if mount is not None else "filesystem"
    back: dict[str, Any] = {"via": kind, "at": None, "ok": False, "why": None}
    entry["readBack"] = back
    try:
        if mount is None and target["named"]:
            raise ReadBackError(f"{target['path']} lies on no mount of role {target['role']}: "
                                "nothing written there outlives the Workers")
        if kind == "objectStorage" and mount is not None:
            bucket, prefix = s3_prefix(mount, target["path"])
            back["at"] = f"s3://{bucket}/{prefix}"
            client = ctx.make_client(mount.get("objectStorage") or {},
                                     storage_keys(mount, ctx.keys), ctx.allow_networks)
            entry.update(read_s3(client, bucket, prefix, budget))
        else:
            rank = _rank_of(rec, target["role"])
            if rank is None:  # nothing ran that could have written it: nothing to judge
                back["unseen"] = True
                raise ReadBackError(f"no Worker of role {target['role']} ran")
            real, what = ctx.worker_dir(dict(rec), target["path"], rank, ctx.sandboxed)
            if real is None:
                back["unseen"] = True  # the server cannot look here: not a failure of the Run
                raise ReadBackError(what)
            back["at"] = real
            entry.update(read_dir(real, budget))
        back["ok"] = True
    except KeysUnavailable as exc:
        back["why"], back["unseen"] = str(exc), True
    except ReadBackError as exc:
        back["why"] = str(exc)
    except ValueError as exc:
        back["why"] = str(exc)
    return entry


def list_outputs(rec: Mapping[str, Any], ctx: ReadBackContext) -> list[dict]:
    """Every output of the Run of record ``rec`` (:func:`output_targets`), read back:
    ``[{name, path, role, origin, named, mount, persistent, readBack: {via, at, ok, why,
    unseen?}, fileCount, bytes, skipped, filesCut, files: [{path, bytes, mtime, sha256?,
    why?}], checkpoints, newestOutside}]`` (the counts and files only where it was read).
    ``via``: the mount's type, or ``filesystem`` for a location under no mount; ``unseen``:
    the server cannot see that place (a node's directory, a claim on Kubernetes). Nothing is
    read for a Run none of whose Workers ran. Never raises for what it reads."""
    targets = output_targets(rec.get("spec") or {}, rec.get("locations") or [])
    budget = Budget()
    return [read_output(rec, t, ctx, budget) for t in targets]


def iter_file(rec: Mapping[str, Any], output: Mapping[str, Any], rel: str,
              ctx: ReadBackContext, chunk: int = 1 << 20) -> tuple[int, Iterator[bytes]]:
    """``(size, chunks)`` of the file ``rel`` of ``output`` (an entry of the record's
    ``outputs``), read now through the same source as the listing: below the mount's directory
    here (:func:`open_below`) or from the bucket. ``rel`` must be a path below the output
    (no empty, ``.`` or ``..`` part, no leading ``/``).

    Raises:
        ReadBackError: a bad path, or the file cannot be read (the message says why).
    """
    from rlark.bootstrap.objectcopy import key_path

    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or "\x00" in rel:
        raise ReadBackError(f"{rel[:200]!r} is not a path below output {output.get('name')}")
    target = {k: output.get(k) for k in ("name", "path", "role", "origin", "named")}
    mount = output.get("mount")
    roles = {r.get("name"): r for r in ((rec.get("spec") or {}).get("spec") or {}).get("roles") or []}
    full = (roles.get(target["role"]) or {}).get("mounts") or []
    mount = next((m for m in full if m.get("name") == (mount or {}).get("name")), None)
    if mount is None:
        raise ReadBackError(f"output {output.get('name')} lies on no mount to read it from")
    if mount.get("type") == "objectStorage":
        bucket, prefix = s3_prefix(mount, str(target["path"]))
        key = f"{prefix}/{rel}" if prefix else rel
        if key_path(prefix, key) != rel:
            raise ReadBackError(f"{rel[:200]!r} is not a path below output {output.get('name')}")
        client = ctx.make_client(mount.get("objectStorage") or {}, storage_keys(mount, ctx.keys),
                                 ctx.allow_networks)
        try:
            got = client.get_object(Bucket=bucket, Key=key)
        except Exception as exc:  # noqa: BLE001
            raise ReadBackError(f"s3://{bucket}/{key}: {s3_error(exc)}") from None
        return int(got.get("ContentLength") or 0), got["Body"].iter_chunks(chunk)
    rank = _rank_of(rec, str(target["role"]))
    if rank is None:
        raise ReadBackError(f"no Worker of role {target['role']} ran")
    real, what = ctx.worker_dir(dict(rec), str(target["path"]), rank, ctx.sandboxed)
    if real is None:
        raise ReadBackError(what)
    try:
        fd = open_below(real, rel)
    except FileNotFoundError:
        raise ReadBackError(f"output {output.get('name')} has no file {rel}") from None
    except OSError as exc:
        raise ReadBackError(f"{rel}: {exc.strerror or exc}") from None
    size = os.fstat(fd).st_size

    def chunks() -> Iterator[bytes]:
        with os.fdopen(fd, "rb") as f:
            while block := f.read(chunk):
                yield block

    return size, chunks()
