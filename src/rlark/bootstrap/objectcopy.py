"""The object-storage copier: ``python -I rlark-bootstrap.pyz objcopy``, one copy of one mount.

A Worker's keeper (``objects.py``) starts it under the Worker's own uid, in the Worker's view of
the file system, before the workload exists (copy in) and after all of it is gone (copy out), so
the bucket's credentials are never in a process the workload can reach: they come on standard
input (never in an argument or the environment), and the copier makes itself non-dumpable
(``prctl(PR_SET_DUMPABLE, 0)``) before reading them.

Request (standard input, one JSON object): ``direction`` (``in`` | ``out``), ``bucket``,
``prefix`` (no leading or trailing ``/``; "" for the whole bucket), ``path`` (the mountPath),
``endpoint``, ``region``, ``access_key_id``/``secret_access_key`` (absent: anonymous requests),
and for ``out`` the ``manifest`` copy in returned. Result (standard output, one JSON object):
``{"ok": true, "files", "bytes", "skipped"}`` (copy out keeps each file's modification time in
the object's metadata ``mtime``; copy in adds ``manifest``: relative path ->
``[size, mtime_ns]`` of each file it wrote, so copy out sends only what changed) or
``{"ok": false, "code", "message"}`` with the S3 error code (``InvalidAccessKeyId``,
``NoSuchBucket``, ``AccessDenied``...) or the client's error class.

A Pod's init container runs :func:`main_init` instead (``objcopy-in``): every copy-mode mount
of its role copied in, the requests from its environment (``rlark.runtimes.kubernetes.copymounts``).

The S3 client is boto3 (the AWS SDK; imported here only, from the interpreter that runs the
copier: the server's, which has it), path-style addressing where an endpoint is given. Nothing
of the Worker's home steers it: ``AWS_CONFIG_FILE`` and ``AWS_SHARED_CREDENTIALS_FILE`` are
``/dev/null`` and configured endpoints are ignored.
"""

from __future__ import annotations

import json
import os
import stat as stat_module
import sys
from typing import Any

from rlark.bootstrap.sandbox import make_undumpable


def key_path(prefix: str, key: str) -> str | None:
    """The path below the mount of object ``key`` under ``prefix`` (pure): None for the prefix's
    own "directory" markers and for a key that would leave the mount (an empty, ``.`` or
    ``..`` part, or a key outside the prefix)."""
    head = prefix + "/" if prefix else ""
    if not key.startswith(head):
        return None
    rel = key[len(head):]
    if not rel or rel.endswith("/"):
        return None
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    return rel


def object_key(prefix: str, rel: str) -> str:
    """The key of the file at ``rel`` below the mount (pure)."""
    return f"{prefix}/{rel}" if prefix else rel


def changed_files(root: str, manifest: dict[str, list[int]]) -> tuple[list[tuple[str, int]], int]:
    """``([(relative path, size)], skipped)``: the regular files below ``root`` that are not in
    ``manifest`` as copy in left them (size and mtime), in path order; links and other
    non-regular files are skipped (counted), never followed."""
    out: list[tuple[str, int]] = []
    skipped = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                skipped += 1
                continue
            if not stat_module.S_ISREG(st.st_mode):
                skipped += 1
                continue
            rel = os.path.relpath(full, root)
            if manifest.get(rel) == [st.st_size, st.st_mtime_ns]:
                continue
            out.append((rel, st.st_size))
    return sorted(out), skipped


#: what ``objcopy-ready`` writes on its standard error once :func:`warm` is done
READY_LINE = "ready\n"
#: the session :func:`warm` made (its loader holds the S3 models already read), else None
_SESSION: Any = None

#: what a copy imports on its way (boto3 imports some of it only when a call needs it):
#: :func:`warm` imports all of it before the Worker's code runs
_COPY_MODULES = (
    "boto3.s3.transfer", "boto3.s3.inject", "botocore.auth", "botocore.awsrequest",
    "botocore.httpsession", "botocore.parsers", "botocore.endpoint", "botocore.regions",
    "botocore.retries.standard", "botocore.retries.special", "botocore.retries.adaptive",
    "botocore.httpchecksum", "botocore.compress", "botocore.paginate", "botocore.signers",
    "botocore.handlers", "botocore.utils", "s3transfer.manager", "s3transfer.upload",
    "s3transfer.download", "s3transfer.tasks", "s3transfer.futures", "s3transfer.utils",
    "s3transfer.subscribers", "s3transfer.bandwidth", "s3transfer.copies", "s3transfer.delete",
    "urllib3", "xml.etree.ElementTree", "concurrent.futures.thread", "email.utils", "hmac",
    "http.client", "ssl",
)


def warm() -> None:
    """Import everything a copy uses and read the S3 models into a session of this process,
    before the Worker's code runs: the copy out that follows (:func:`main_ready`) then runs
    code already in memory, whatever the Worker wrote into the image's site-packages meanwhile
    (a ``.pth`` file, a patched module) for the next Python to load."""
    import importlib

    import boto3
    from botocore.config import Config

    global _SESSION
    for name in _COPY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part this botocore does not have
            pass
    session = boto3.session.Session()
    client = session.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                            aws_access_key_id="warm", aws_secret_access_key="warm",
                            config=Config(s3={"addressing_style": "path"}))
    client.get_paginator("list_objects_v2")
    _SESSION = session


def _client(req: dict) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    options: dict[str, Any] = {
        "retries": {"max_attempts": 3, "mode": "standard"},
        "connect_timeout": 10, "read_timeout": 60,
    }
    if req.get("endpoint"):
        options["s3"] = {"addressing_style": "path"}
    keys = {}
    if req.get("access_key_id"):
        keys = {"aws_access_key_id": req["access_key_id"],
                "aws_secret_access_key": req.get("secret_access_key") or ""}
    else:
        options["signature_version"] = UNSIGNED
    return (_SESSION or boto3.session.Session()).client(
        "s3", endpoint_url=req.get("endpoint") or None,
        region_name=req.get("region") or "us-east-1", config=Config(**options), **keys)


def copy_in(client: Any, req: dict) -> dict:
    """Every object under the prefix into ``path`` (made as needed); returns the result."""
    bucket, prefix, root = req["bucket"], req["prefix"], req["path"]
    head = prefix + "/" if prefix else ""
    files = size = skipped = 0
    manifest: dict[str, list[int]] = {}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=head)
    for page in pages:
        for obj in page.get("Contents", []):
            rel = key_path(prefix, obj["Key"])
            if rel is None:
                skipped += int(not obj["Key"].endswith("/"))
                continue
            dest = os.path.join(root, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            client.download_file(bucket, obj["Key"], dest)
            st = os.lstat(dest)
            manifest[rel] = [st.st_size, st.st_mtime_ns]
            files += 1
            size += st.st_size
    return {"ok": True, "files": files, "bytes": size, "skipped": skipped, "manifest": manifest}


def copy_out(client: Any, req: dict) -> dict:
    """Every file below ``path`` that copy in did not leave as it is, to the prefix."""
    bucket, prefix, root = req["bucket"], req["prefix"], req["path"]
    todo, skipped = changed_files(root, req.get("manifest") or {})
    # a missing bucket or wrong keys are said before anything is sent
    client.head_bucket(Bucket=bucket)
    size = 0
    for rel, n in todo:
        full = os.path.join(root, rel)
        # the file's own time travels with it (x-amz-meta-mtime, as rclone keeps it): the
        # server tells from it which checkpoint a Run finished writing (record/outputs.py)
        meta = {"mtime": f"{os.lstat(full).st_mtime:.6f}"}
        client.upload_file(full, bucket, object_key(prefix, rel), ExtraArgs={"Metadata": meta})
        size += n
    return {"ok": True, "files": len(todo), "bytes": size, "skipped": skipped}


def run(req: dict) -> dict:
    """One copy (see the module's docstring); never raises."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        return {"ok": False, "code": "NoS3Client",
                "message": f"boto3 is not installed in {sys.executable}: {exc}"}
    try:
        client = _client(req)
        return copy_in(client, req) if req.get("direction") == "in" else copy_out(client, req)
    except ClientError as exc:
        err = exc.response.get("Error") or {}
        code = str(err.get("Code") or "ClientError")
        if code.isdigit():  # a HEAD answer has no body: only its HTTP status
            code = {"403": "AccessDenied", "404": "NoSuchBucket"}.get(code, f"HTTP{code}")
        return {"ok": False, "code": code[:64],
                "message": str(err.get("Message") or exc)[:2000]}
    except BotoCoreError as exc:
        return {"ok": False, "code": type(exc).__name__[:64], "message": str(exc)[:2000]}
    except OSError as exc:
        return {"ok": False, "code": "LocalIOError",
                "message": f"{exc.strerror or exc}: {exc.filename or ''}"[:2000]}


#: the init container's settings (``rlark.runtimes.kubernetes.copymounts``): the mounts (a JSON
#: list as the keeper takes them, no credentials), the state directory, and the prefix of each
#: mount's credentials' variables (``<prefix><index>_ACCESS_KEY_ID``/``_SECRET_ACCESS_KEY``)
INIT_MOUNTS_VAR, INIT_STATE_VAR, INIT_KEYS_PREFIX = ("RLARK_OBJECT_STORAGE", "RLARK_OBJECTS_STATE",
                                                     "RLARK_S3_")
#: seconds the whole copy in of a Pod may take (as the local runtime's keeper per mount)
INIT_SECONDS = 3600


def main_init() -> int:
    """``objcopy-in``: a Pod's init container. Copy each mount of ``RLARK_OBJECT_STORAGE`` in,
    in order, and leave each result (``files``, ``bytes``, ``skipped``, ``seconds``,
    ``manifest``) as ``<RLARK_OBJECTS_STATE>/mount-<index>.json`` for the Worker's keeper.
    Writes one JSON line per mount (``{"mount", "ok", "files", "bytes", "seconds"}``; a
    failure: ``{"mount", "source", "ok": false, "code", "message"}``, the last line, which the
    Pod's status carries). 0 when every mount was copied in, 1 at the first failure, which
    ends the copy. Bounded: the kernel ends it (SIGALRM) after :data:`INIT_SECONDS`."""
    import signal
    import time

    from rlark.bootstrap.objects import COPIER_ENV, parse_mounts, state_file, take_credentials

    signal.alarm(INIT_SECONDS)
    env = dict(os.environ)
    # what the image's own environment (its ENV lines) could steer the S3 client with goes:
    # the copy's environment is COPIER_ENV's, as the keeper gives its copies
    for name in list(os.environ):
        if name.startswith("AWS_") or name.lower() in ("http_proxy", "https_proxy", "all_proxy",
                                                       "no_proxy"):
            del os.environ[name]
    os.environ.update({k: v for k, v in COPIER_ENV.items() if k.startswith("AWS_")})
    why = make_undumpable()
    try:
        mounts = parse_mounts(env.get(INIT_MOUNTS_VAR, ""))
        state = env.get(INIT_STATE_VAR, "")
        if not os.path.isabs(state):
            raise ValueError(f"{INIT_STATE_VAR} is not an absolute path")
    except ValueError as exc:
        return _said({"ok": False, "code": "BadRequest", "message": str(exc)[:1500]})
    if why:
        return _said({"ok": False, "code": "Unprotected",
                      "message": f"the copier could not make itself non-dumpable: {why}"})
    take_credentials(env, INIT_KEYS_PREFIX, mounts)
    for place, m in enumerate(mounts):
        started = time.monotonic()
        result = run({**m, "direction": "in"})
        if not result.get("ok"):
            # the last line: FallbackToLogsOnError makes it the container's termination message
            return _said({"mount": m["name"], "source": m["source"], "ok": False,
                          "code": str(result.get("code"))[:64],
                          "message": str(result.get("message"))[:1500]})
        result["seconds"] = round(time.monotonic() - started, 3)
        with open(os.path.join(state, state_file(m.get("index", place))), "w") as f:
            json.dump(result, f)
        _said({"mount": m["name"], "ok": True, **{k: result.get(k) for k in
                                                  ("files", "bytes", "skipped", "seconds")}})
    return 0


def main_ready() -> int:
    """``objcopy-ready``: a copy started before the Worker's code runs (a Pod's keeper starts
    one per writable mount, ``objects.ObjectMounts.prestart``): non-dumpable, then
    :func:`warm`, then as :func:`main` once the request comes on standard input (after the
    Worker's code is gone). A warm-up that failed is said as the copy's result."""
    why = make_undumpable()
    if why:
        return main()  # says Unprotected
    try:
        warm()
    except Exception as exc:  # noqa: BLE001 - said as the result, once the request comes
        sys.stdin.buffer.read()
        return _said({"ok": False, "code": "NoS3Client" if isinstance(exc, ImportError)
                      else "WarmUpFailed", "message": f"{type(exc).__name__}: {exc}"[:2000]})
    sys.stderr.write(READY_LINE)  # for whoever waits for the warm-up (the tests)
    sys.stderr.flush()
    return main()


def _said(result: dict) -> int:
    """Write ``result`` as one JSON line on standard output; the exit status it means."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if result.get("ok") else 1


def main() -> int:
    """``objcopy``: read the request, copy, write the result; 0 when the copy succeeded."""
    why = make_undumpable()
    if why:
        result = {"ok": False, "code": "Unprotected",
                  "message": f"the copier could not make itself non-dumpable: {why}"}
    else:
        try:
            req = json.loads(sys.stdin.buffer.read())
        except ValueError as exc:
            req, result = None, {"ok": False, "code": "BadRequest", "message": str(exc)}
        if req is not None:
            result = run(req)
    return _said(result)
