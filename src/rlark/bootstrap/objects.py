"""A keeper's object-storage mounts in copy mode: copy in before the workload, copy out after it.

The local runtime gives the keeper, through the workload environment's pipe (never its own
environment or the workload's), ``RLARK_KEEPER_OBJECT_STORAGE``: a JSON list of mounts, each
``{name, source, bucket, prefix, path, read_only, endpoint, region, mode, requested, why,
access_key_id, secret_access_key}`` (``rlark.runtimes.local.objects.copy_mounts``; those whose
``mode`` is ``fuse`` are ``fuse.py``'s, the rest this module's), and
``RLARK_KEEPER_COPY_PYTHON``, the interpreter that has the S3 client (the server's). The keeper
runs the copier (``objectcopy.py``) once per mount and direction, under the Worker's uid in the
Worker's view, the credentials on its standard input:

* **in**, before the workload starts (its prepare script is its first step): the prefix's
  objects into ``path``; a failure ends the Worker before anything of the Job ran
  (``failed``, reason ``MountFailed``, naming the mount and the S3 error code); then a
  ``readOnly`` mount is remounted read-only.
* **out**, after the workload ended (the run script's end, a failure or a stop) and after the
  keeper, PID 1 of the Worker's PID namespace, killed what was left of it (nothing of the
  Job's code runs beside the copier, which holds the credentials): each file that is new or
  changed since copy in, to the prefix; nothing is deleted from the bucket. Bounded: a
  copy that outlives its time is killed and said.

Each copy writes a ``mount`` line (``name``, ``mode``, ``direction``, ``files``, ``bytes``,
``seconds``) on the keeper's channel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Callable

from rlark.bootstrap.relay import Channel
from rlark.bootstrap.sandbox import SandboxError, remount_read_only

#: the copier's whole environment: no file of the Worker's home is read by the S3 client
#: (botocore's AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS).
#: Here, not in objectcopy.py: the keeper imports this module, and must not load the copier's
#: (which imports boto3, from the server's interpreter that runs it)
COPIER_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C.UTF-8",
              "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
              "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true", "AWS_EC2_METADATA_DISABLED": "true"}

#: the copy settings' names in the workload environment the keeper is given
OBJECTS_VAR, COPY_PYTHON_VAR = "RLARK_KEEPER_OBJECT_STORAGE", "RLARK_KEEPER_COPY_PYTHON"
#: Kubernetes: the directory where the init container left what it copied in
#: (``objectcopy.main_init``), and the prefix of the writable mounts' credentials' variables
#: in the keeper's own environment (``<prefix><index>_ACCESS_KEY_ID``/``_SECRET_ACCESS_KEY``;
#: removed before the workload starts)
STATE_VAR, KEYS_PREFIX = "RLARK_KEEPER_OBJECTS_STATE", "RLARK_KEEPER_S3_"
KEY_SUFFIXES = ("ACCESS_KEY_ID", "SECRET_ACCESS_KEY")
#: seconds copy in may take, per mount (a dataset of some GB on a slow link)
COPY_IN_SECONDS = 3600.0
#: what the copier's result line may hold (a manifest of many files)
MAX_RESULT_BYTES = 64 * 1024 * 1024


def parse_mounts(raw: str) -> list[dict]:
    """The mounts of ``RLARK_KEEPER_OBJECT_STORAGE`` (pure).

    Raises:
        ValueError: not a JSON list of mounts with the fields the copier needs.
    """
    mounts = json.loads(raw) if raw else []
    if not isinstance(mounts, list):
        raise ValueError(f"{OBJECTS_VAR} is not a JSON list")
    for m in mounts:
        if not isinstance(m, dict) or not all(isinstance(m.get(k), str) for k in
                                              ("name", "source", "bucket", "prefix", "path")) \
                or not os.path.isabs(m["path"]):
            raise ValueError(f"{OBJECTS_VAR}: a mount without name, source, bucket, prefix "
                             "and an absolute path")
    return mounts


def key_variables(prefix: str, index: int) -> tuple[str, str]:
    """The names of mount ``index``'s access key id and secret key variables (pure)."""
    return f"{prefix}{index}_{KEY_SUFFIXES[0]}", f"{prefix}{index}_{KEY_SUFFIXES[1]}"


def take_credentials(env: dict[str, str], prefix: str, mounts: list[dict]) -> None:
    """Move each mount's credentials from ``env`` (removed there) into the mount as
    ``access_key_id``/``secret_access_key`` (by its ``index``, else its place in ``mounts``);
    a mount without them makes anonymous requests. Every variable with ``prefix`` leaves
    ``env``, whether a mount names it or not."""
    for place, m in enumerate(mounts):
        key_id, secret = key_variables(prefix, int(m.get("index", place)))
        if env.get(key_id):
            m["access_key_id"], m["secret_access_key"] = env[key_id], env.get(secret, "")
    for name in [k for k in env if k.startswith(prefix)]:
        del env[name]


def start_copier(argv: list[str], identity: dict) -> "subprocess.Popen[bytes] | dict":
    """Start the copier ``argv`` (its standard input, output and error pipes) in the copier's
    environment; the failure's result when it could not start."""
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(COPIER_ENV), cwd="/",
                                start_new_session=True, **identity)
    except OSError as exc:
        return {"ok": False, "code": "CopierNotStarted",
                "message": f"{argv[0]}: {exc.strerror or exc}"}


def run_copier(argv: list[str], request: dict, identity: dict, timeout: float,
               stopping: Callable[[], bool] = lambda: False,
               tick: Callable[[], None] = lambda: None,
               started: "subprocess.Popen[bytes] | None" = None) -> dict:
    """Run the copier ``argv`` (or give the one already ``started``, :func:`start_copier`)
    ``request`` on its standard input and return its result (``{"ok": False, "code",
    "message"}`` when it could not start, was gone, was stopped, ran past ``timeout`` seconds
    or said nothing readable). ``stopping``: polled; True kills it. ``tick``: called every
    half second meanwhile (the keeper's heartbeat: a long copy is not a silent Worker)."""
    proc = started if started is not None else start_copier(argv, identity)
    if isinstance(proc, dict):
        return proc
    if started is not None and started.poll() is not None:
        # the copy started before the workload ended before its request (the Worker's code,
        # of its uid, may have killed it): nothing of its result can be had
        return {"ok": False, "code": "CopierGone",
                "message": f"the copy started before the Worker's code ran was gone (exit "
                           f"status {started.returncode}) when the copy out began"}
    deadline = time.monotonic() + timeout
    data: bytes | None = json.dumps(request).encode()
    why = ""
    while True:
        try:
            out, err = proc.communicate(data, timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            data = None
            tick()
            if time.monotonic() > deadline:
                why = f"did not finish within {timeout:.0f} s"
            elif stopping():
                why = "was stopped (the Worker is stopping)"
            if why:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.communicate()
                return {"ok": False, "code": "Timeout" if "within" in why else "CopyStopped",
                        "message": f"the copy {why}"}
    try:
        result = json.loads(out[-MAX_RESULT_BYTES:].decode() or "null")
    except ValueError:
        result = None
    if not isinstance(result, dict) or "ok" not in result:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        return {"ok": False, "code": "CopierFailed",
                "message": f"the copier exited with status {proc.returncode}: "
                           + (" | ".join(tail) or "no result")}
    return result


class ObjectMounts:
    """One Worker's copy-mode mounts, as its keeper runs them (see the module's docstring)."""

    def __init__(self, mounts: list[dict], python: str, archive: str, identity: dict,
                 chan: Channel, tick: Callable[[], None] = lambda: None,
                 state_dir: str | None = None):
        """``tick``: called every half second while a copy runs (:func:`run_copier`);
        ``state_dir``: where a Pod's init container left what it copied in
        (``objectcopy.main_init``; None: :meth:`copy_in` copies)."""
        self.mounts, self.chan, self.identity, self.tick = mounts, chan, identity, tick
        self.state_dir = state_dir
        self.argv = [python, "-I", archive, "objcopy"]
        self.ready_argv = [python, "-I", archive, "objcopy-ready"]
        #: per mount name: what copy in wrote (relative path -> [size, mtime_ns])
        self.manifests: dict[str, dict] = {}
        #: per writable mount name: its copy out, started before the workload (a Pod)
        self.ready: dict[str, "subprocess.Popen[bytes] | dict"] = {}

    def _request(self, m: dict, direction: str) -> dict:
        keys = ("bucket", "prefix", "path", "endpoint", "region", "access_key_id",
                "secret_access_key")
        req = {k: m.get(k) for k in keys}
        req["direction"] = direction
        if direction == "out":
            req["manifest"] = self.manifests.get(m["name"], {})
        return req

    def _said(self, m: dict, direction: str, result: dict, started: float) -> None:
        seconds = result.get("seconds")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            seconds = time.monotonic() - started
        self.chan.emit("mount", name=m["name"], mode="copy", direction=direction,
                       files=int(result.get("files") or 0), bytes=int(result.get("bytes") or 0),
                       seconds=round(float(seconds), 3),
                       **({"skipped": int(result["skipped"])} if result.get("skipped") else {}),
                       # how the mode was chosen (auto: why not FUSE), said once
                       **({k: str(m[k])[:2000] for k in ("requested", "why") if m.get(k)}
                          if direction == "in" else {}))

    def copy_in(self, stopping: Callable[[], bool]) -> str | None:
        """Copy every mount in; None when all are there, else the failure's message (the
        first failing mount, its source and the copier's code). With a state directory (a
        Pod) the init container copied them: its results are read and said instead."""
        if self.state_dir is not None:
            return self._copied_in()
        for m in self.mounts:
            started = time.monotonic()
            result = run_copier(self.argv, self._request(m, "in"), self.identity,
                                COPY_IN_SECONDS, stopping, self.tick)
            if not result.get("ok"):
                return (f"mount {m['name']!r} ({m['source']}): copy in failed: "
                        f"{result.get('code')}: {result.get('message')}")
            manifest = result.get("manifest")
            self.manifests[m["name"]] = manifest if isinstance(manifest, dict) else {}
            self._said(m, "in", result, started)
            if m.get("read_only"):
                try:
                    remount_read_only(m["path"])
                except SandboxError as exc:
                    return f"mount {m['name']!r}: cannot make {m['path']} read-only: {exc}"
        return None

    def _copied_in(self) -> str | None:
        for m in self.mounts:
            where = os.path.join(self.state_dir or "", state_file(m.get("index", -1)))
            try:
                with open(where, "rb") as f:
                    result = json.loads(f.read(MAX_RESULT_BYTES))
            except (OSError, ValueError) as exc:
                return (f"mount {m['name']!r} ({m['source']}): the init container left no "
                        f"result of its copy in ({where}: {getattr(exc, 'strerror', None) or exc})")
            manifest = result.get("manifest") if isinstance(result, dict) else None
            if not isinstance(manifest, dict):
                return f"mount {m['name']!r} ({m['source']}): {where} holds no manifest"
            self.manifests[m["name"]] = manifest
            self._said(m, "in", result, time.monotonic())
        return None

    def prestart(self) -> None:
        """In a Pod, where the copier is the image's Python, which the Worker's code may change
        (its site-packages, when its uid may write there): start each writable mount's copy
        out now, before the workload, its code loaded (``objectcopy.main_ready``), waiting for
        its request. On the local runtime the copier is the server's Python, out of the
        Worker's reach: nothing to do."""
        if self.state_dir is None:
            return
        for m in self.mounts:
            if not m.get("read_only") and m["name"] in self.manifests:
                self.ready[m["name"]] = start_copier(self.ready_argv, self.identity)

    def ready_pids(self) -> set[int]:
        """The processes of the copies started before the workload (to spare when the rest of
        the Worker is killed)."""
        return {p.pid for p in self.ready.values() if isinstance(p, subprocess.Popen)}

    def writable(self) -> bool:
        """Some mount copies out (not ``readOnly``) and was copied in."""
        return any(not m.get("read_only") and m["name"] in self.manifests for m in self.mounts)

    def copy_out(self, deadline: float) -> list[str]:
        """Copy every writable mount that was copied in back out, before ``deadline``
        (monotonic seconds); returns the failures' messages (none: all done)."""
        failures = []
        for m in self.mounts:
            if m.get("read_only") or m["name"] not in self.manifests:
                continue
            started = time.monotonic()
            left = deadline - started
            ready = self.ready.pop(m["name"], None)
            if isinstance(ready, dict):  # it could not start
                result = ready
            elif left > 0:
                result = run_copier(self.argv, self._request(m, "out"), self.identity, left,
                                    tick=self.tick, started=ready)
            else:
                if ready is not None:
                    ready.kill()
                    ready.wait()
                result = {"ok": False, "code": "Timeout", "message": "no time was left for it"}
            if result.get("ok"):
                self._said(m, "out", result, started)
            else:
                failures.append(f"mount {m['name']!r} ({m['source']}): copy out failed: "
                                f"{result.get('code')}: {result.get('message')}")
        return failures


def state_file(index: int) -> str:
    """The file name, in the state directory, of the copy-in result of the role's mount
    ``index`` (pure)."""
    return f"mount-{int(index)}.json"


def kill_the_rest() -> None:
    """SIGKILL every other process of this PID namespace and reap them (the keeper is its PID
    1: ``kill(-1)`` reaches all of them, kill(2)); elsewhere nothing."""
    if os.getpid() != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        return
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
