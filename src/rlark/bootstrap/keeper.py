"""RLark's keeper: the first process of every Worker, the runtime's agent inside it.

The Worker's workload (the rest of the bootstrap, ``worker.py``, and everything it starts: the
prepare script, ``ray start``, Ray's processes, the run script) is the user's code. The keeper is
not: it starts before any of it, imports everything it needs first (standard library only, run
as ``python -I -S`` so no site-packages, ``.pth`` file or ``PYTHON*`` variable is read), and is
the only writer of the Worker's lifecycle lines. Design (docs/security.md, "The control channel"):

* **The channel is the keeper's.** Its standard output is the Worker's log (a file the local
  runtime opened, out of the workload's reach; a container's log on Kubernetes). The workload
  writes into pipes the keeper relays line by line: a workload line that begins like a lifecycle
  line is relayed after :data:`ESCAPE`, so it cannot be read as one, and the keeper starts every
  line of its own on a fresh line, so output without a final newline cannot swallow or carry it.
  No token is needed, so none is in any line, environment or Pod spec.
* **The keeper is out of the workload's reach.** On the local runtime it runs as root and the
  workload under the Run's own uid; elsewhere (a Pod, a server that is not root) they share a
  uid and the keeper makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, prctl(2)): no
  process of that uid may ptrace it or open its ``/proc/<pid>/{mem,environ,fd}``. Its first line
  (``keeper``) says which held.
* **Results are observed, not reported.** The keeper starts the head's run script itself and
  waits for it: ``run_finished`` carries the exit status the kernel gave it. What the workload
  reports (``facts``, ``phase``, ``nodes``, ``failed``, ``warning``, and ``start_run`` when the
  join barrier passed) comes through a pipe (``RLARK_REPORT_FD``) as JSON lines, each checked
  against its kind's shape (:func:`check_report`) and rate-bounded (:class:`Bucket`) before the
  keeper writes it; the workload can never write ``keeper``, ``running``, ``run_finished``,
  ``stopped`` or ``exit``.
* **Fail closed.** A failure the workload reports while the run script runs (a lost Ray node)
  stops the run script; so does the end of the workload's node monitor. The Worker exits with
  the run script's status, else the workload's.

Local runtime only, and only as root: before starting anything the keeper builds the Worker's
mount namespace from ``RLARK_KEEPER_SANDBOX`` (:func:`apply_sandbox`; the plan is made by the
runtime, ``rlark.runtimes.local.sandbox``) and starts the workload as ``RLARK_KEEPER_UID``.

Inputs (environment; the ``RLARK_KEEPER_*`` ones are removed before the workload starts):
``RLARK_KEEPER_BOOTSTRAP`` (path of worker.py), ``RLARK_KEEPER_PYTHON`` (the interpreter for it;
default this one), ``RLARK_KEEPER_UID``/``RLARK_KEEPER_GID``, ``RLARK_KEEPER_SANDBOX`` (JSON),
``RLARK_KEEPER_HOST_MNTNS`` (the server's mount namespace: the keeper never mounts in it); and
the bootstrap's own ``RLARK_RUN_SCRIPT``, ``RLARK_HEAD_ADDRESS``, ``RLARK_WORKING_DIR``,
``RLARK_STOP_GRACE_SECONDS``, ``RLARK_FACTS_BUDGET_SECONDS``, ``RLINF_NODE_RANK``.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import selectors
import signal
import stat as stat_module
import subprocess
import sys
import time

#: the prefix of a lifecycle line (worker.py's EVENT_PREFIX, which the server's reader uses)
EVENT_PREFIX = b"RLARK_EVENT "
#: what a workload line that begins with :data:`EVENT_PREFIX` is relayed after
ESCAPE = b"(workload) "
#: how a script runs (worker.py's SCRIPT_SHELL: the first failing command ends it)
SCRIPT_SHELL = ("bash", "-e", "-o", "pipefail", "-c")

#: exit statuses of the keeper itself (worker.py's own are 80-87)
EXIT_SANDBOX_FAILED = 88
EXIT_BAD_CONFIG = 87
EXIT_MONITOR_LOST = 86
EXIT_STOPPED = 143

#: lifecycle kinds only the keeper writes
KEEPER_KINDS = frozenset({"keeper", "running", "run_finished", "stopped", "exit", "alive"})
#: what the workload may report, and the most bytes one report of the kind may take
REPORT_LIMITS = {
    "facts": 4 * 1024 * 1024,  # package lists, a capped diff, Hydra files (worker.py's caps)
    "phase": 16 * 1024,
    "nodes": 1024 * 1024,
    "failed": 64 * 1024,
    "warning": 16 * 1024,
    "start_run": 1024,
}
#: reports per second the workload may send on average, and in one burst
REPORT_RATE, REPORT_BURST = 50.0, 500
#: warnings one Worker may report in all (each becomes an Event the server keeps)
MAX_WARNINGS = 20
#: facts one Worker may report in all, in bytes (the bootstrap's own come to well under 1 MiB:
#: package lists, a capped diff, capped Hydra files); the server keeps them in its database
MAX_FACTS_BYTES = 8 * 1024 * 1024
#: seconds between the keeper's ``alive`` lines: the server's sign that the Worker is not frozen
#: (a stopped process answers nothing; its lines stop). Each says which of the workload's own
#: processes are stopped (``T`` in /proc/<pid>/stat), if any.
HEARTBEAT_SECONDS = 10.0
#: reason codes are CamelCase words (rlark.status.Reason's shape)
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]{1,63}$")
_PHASE = re.compile(r"^[A-Z][A-Za-z0-9]{1,63}$")

_libc = None


def _c():
    global _libc
    if _libc is None:
        # the interpreter's own symbols include libc's: no ldconfig or compiler run to find it
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


# --- checking what the workload reports (pure) -----------------------------------------------


def _small_int(value, lo: int = 0, hi: int = 255) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _text(value, cap: int) -> bool:
    return isinstance(value, str) and len(value) <= cap


def check_report(line: bytes) -> tuple[dict | None, str]:
    """One report line of the workload -> ``(report, "")`` when it is well formed, else
    ``(None, why)``. A report is a JSON object with ``event`` one of :data:`REPORT_LIMITS`,
    within that kind's size, and for ``failed``/``warning`` a CamelCase ``reason``, a text
    ``message`` and exit statuses that are 0..255 (pure)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None, "not JSON"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    kind = obj.get("event")
    if kind not in REPORT_LIMITS:
        return None, f"kind {str(kind)[:40]!r} may not be reported by the workload"
    if len(line) > REPORT_LIMITS[kind]:
        return None, f"a {kind} report of {len(line)} bytes (at most {REPORT_LIMITS[kind]})"
    if kind in ("failed", "warning"):
        if not isinstance(obj.get("reason"), str) or not _REASON.match(obj["reason"]):
            return None, f"{kind}: reason {str(obj.get('reason'))[:40]!r} is not a reason code"
        if not _text(obj.get("message", ""), 8192):
            return None, f"{kind}: message is not text of at most 8192 characters"
        for key in ("status", "exit_code"):
            if key in obj and obj[key] is not None and not _small_int(obj[key]):
                return None, f"{kind}: {key} {str(obj[key])[:20]!r} is not an exit status 0..255"
        for key in ("missing_ranks", "joined_ranks"):
            if key in obj and not (isinstance(obj[key], list)
                                   and all(_small_int(r, 0, 1 << 20) for r in obj[key])):
                return None, f"{kind}: {key} is not a list of node ranks"
    elif kind == "phase":
        if not isinstance(obj.get("phase"), str) or not _PHASE.match(obj["phase"]):
            return None, f"phase: {str(obj.get('phase'))[:40]!r} is not a phase name"
    elif kind == "nodes":
        if not isinstance(obj.get("joined", []), list) or not isinstance(obj.get("missing", []), list):
            return None, "nodes: joined and missing must be lists"
    obj.pop("ts", None)  # the keeper's clock stamps every line
    return obj, ""


class Bucket:
    """A token bucket: ``take()`` is True while the average rate stays within ``rate`` per
    second with bursts of ``burst`` (``now``: a monotonic clock, injectable for tests)."""

    def __init__(self, rate: float, burst: int, now=time.monotonic):
        self.rate, self.burst, self.now = rate, float(burst), now
        self.tokens, self.at = float(burst), now()

    def take(self) -> bool:
        t = self.now()
        self.tokens = min(self.burst, self.tokens + (t - self.at) * self.rate)
        self.at = t
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


# --- the channel (pure state, writes through a callable) --------------------------------------


class Channel:
    """The Worker's log as the keeper writes it: the workload's bytes relayed unchanged but for
    :data:`ESCAPE` before a line that begins like a lifecycle line, and the keeper's own lines,
    each starting on a fresh line. ``write``: takes bytes (e.g. :func:`write_all` to fd 1)."""

    def __init__(self, write):
        self.write = write
        self.at_start = True  # the last byte written ended a line (or nothing was written)
        self.head = bytearray()  # the start of a workload line that may still be a lookalike

    def relay(self, data: bytes) -> None:
        """Relay a chunk of the workload's output."""
        out = bytearray()
        pos, n = 0, len(data)
        while pos < n:
            if self.at_start:
                piece = data[pos:pos + len(EVENT_PREFIX) - len(self.head)]
                nl = piece.find(b"\n")
                if nl >= 0:
                    piece = piece[:nl + 1]
                self.head += piece
                pos += len(piece)
                head = bytes(self.head)
                if head.endswith(b"\n") or not EVENT_PREFIX.startswith(head) \
                        or len(head) >= len(EVENT_PREFIX):
                    if head.startswith(EVENT_PREFIX):
                        out += ESCAPE
                    out += head
                    self.head.clear()
                    self.at_start = head.endswith(b"\n")
                continue
            nl = data.find(b"\n", pos)
            if nl < 0:
                out += data[pos:]
                pos = n
            else:
                out += data[pos:nl + 1]
                pos = nl + 1
                self.at_start = True
        if out:
            self.write(bytes(out))

    def emit(self, event: str, **data) -> None:
        """Write one lifecycle line ``RLARK_EVENT {"ts": <unix seconds>, "event": ..., ...}``
        (worker.py's format) on a line of its own."""
        body = {"ts": round(time.time(), 3), "event": event, **data}
        line = EVENT_PREFIX + json.dumps(body, default=str).encode() + b"\n"
        pre = b""
        if self.head:  # a held start of a workload line: it was no lifecycle line
            pre += bytes(self.head)
            self.head.clear()
            self.at_start = False
        if not self.at_start:
            pre += b"\n"
        self.write(pre + line)
        self.at_start = True


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a pipe may take part of it); a reader that is gone
    (EPIPE) loses the rest: the keeper goes on managing the Worker."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BrokenPipeError:
            return
        view = view[n:]


class Lines:
    """Complete lines of a byte stream, each at most ``cap`` bytes: a longer one is dropped
    whole and counted in ``dropped`` (bounded memory whatever the workload writes)."""

    def __init__(self, cap: int):
        self.cap, self.buf, self.skipping, self.dropped = cap, bytearray(), False, 0

    def feed(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes (without their newline)."""
        out: list[bytes] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            part = data[start:] if nl < 0 else data[start:nl]
            if self.skipping:
                pass  # inside a line already too long: dropped up to its newline
            elif len(self.buf) + len(part) > self.cap:
                self.buf.clear()
                self.skipping = True
                self.dropped += 1
            else:
                self.buf += part
            if nl < 0:
                return out
            if not self.skipping:
                out.append(bytes(self.buf))
            self.buf.clear()
            self.skipping = False
            start = nl + 1


# --- protecting the keeper and building the sandbox (thin: system calls) ------------------------

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38  # prctl(2)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32  # mount(2)
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2  # umount2(2)


def make_undumpable() -> str:
    """``prctl(PR_SET_DUMPABLE, 0)``: no process of this uid may ptrace the keeper or open its
    ``/proc/<pid>`` files (prctl(2), ptrace(2) "Ptrace access mode checking"). Returns "" when
    done, else why not."""
    try:
        if _c().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        return f"prctl is not available: {exc}"
    return ""


def set_no_new_privs() -> str:
    """``prctl(PR_SET_NO_NEW_PRIVS, 1)``: nothing the keeper starts gains privileges by running a
    set-user-ID program (prctl(2)); a Pod's ``allowPrivilegeEscalation: false`` is the same.
    Returns "" when done, else why not."""
    try:
        if _c().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        return f"prctl is not available: {exc}"
    return ""


class SandboxError(Exception):
    """A mount of the Worker's sandbox failed (the message names it and the system's error)."""


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def b(s):
        return s.encode() if s is not None else None

    if _c().mount(b(source), b(target), b(fstype), ctypes.c_ulong(flags), b(data)) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"mount {fstype or ''} {source or ''} -> {target} (flags {flags:#x}): "
                           f"{os.strerror(err)}")


def _makedirs(path: str) -> None:
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise SandboxError(f"cannot create the mount point {path}: {exc.strerror}") from None


def open_nofollow(path: str, create: bool = False) -> int:
    """An ``O_PATH`` descriptor of the absolute ``path``, reached component by component
    without following a single symbolic link (a link anywhere on the way is refused: a path a
    Job names, or one in a directory a Worker may write, must not lead root elsewhere than it
    was checked to). ``create``: missing directories on the way are made (mode 0755, root's).
    Mounting on ``/proc/self/fd/<fd>`` then acts on exactly what was reached.

    Raises:
        SandboxError: a link on the way, a part missing (without ``create``), or a system error.
    """
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        for part in [p for p in path.split("/") if p]:
            if part == "..":
                raise SandboxError(f"{path}: has a '..' part")
            try:
                nfd = os.open(part, os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise SandboxError(f"{path}: {part} does not exist") from None
                os.mkdir(part, 0o755, dir_fd=fd)
                nfd = os.open(part, os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if stat_module.S_ISLNK(os.fstat(fd).st_mode):
                raise SandboxError(f"{path}: {part} is a symbolic link; RLark follows none here")
        return fd
    except OSError as exc:
        os.close(fd)
        raise SandboxError(f"{path}: {exc.strerror or exc}") from None
    except SandboxError:
        os.close(fd)
        raise


def _at(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def apply_sandbox(plan: dict, host_mntns: str | None) -> None:
    """Build the Worker's view of the file system in its own mount namespace (root only).

    ``plan`` (made by ``rlark.runtimes.local.sandbox.plan``): ``stage`` (an empty directory
    outside every hidden one), ``binds`` (``{source, target, readonly}``), ``overlays``
    (``{lower, upper, work, target}``: a copy-on-write view of ``lower``), ``hide`` (directories
    covered with an empty read-only-for-others tmpfs, so nothing below them is reachable but
    what the plan binds back), ``tmpfs`` (``{target, size, mode}``) and ``mqueue`` (a POSIX
    message queue file system of the Worker's own IPC namespace at ``/dev/mqueue``). Sources
    are mounted under ``stage`` first (they may lie below a hidden directory), then the hidden
    directories are covered, then each staged mount is moved to its target, shallowest first.
    Every path is reached without following a symbolic link (:func:`open_nofollow`).

    Raises:
        SandboxError: the keeper is in the server's own mount namespace, or a mount failed.
    """
    try:
        own = os.readlink("/proc/self/ns/mnt")
    except OSError as exc:
        raise SandboxError(f"cannot read this process's mount namespace: {exc.strerror}") from None
    if host_mntns and own == host_mntns:
        raise SandboxError("the keeper is in the server's mount namespace: refusing to mount")

    def mount_fd(path: str, create: bool, fstype: str | None, flags: int, source: str | None,
                 data: str | None = None) -> None:
        fd = open_nofollow(path, create)
        try:
            _mount(source, _at(fd), fstype, flags, data)
        finally:
            os.close(fd)

    stage = plan["stage"]
    _makedirs(stage)
    mount_fd(stage, False, "tmpfs", MS_NOSUID | MS_NODEV, "rlark-stage", "mode=0700,size=64k")
    staged: list[tuple[str, str]] = []  # (staged path, target)
    for i, b in enumerate(plan.get("binds", [])):
        where = os.path.join(stage, f"b{i}")
        _makedirs(where)
        src = open_nofollow(b["source"])
        try:
            _mount(_at(src), where, None, MS_BIND | MS_REC)
        finally:
            os.close(src)
        if b.get("readonly"):
            _mount(None, where, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        staged.append((where, b["target"]))
    for i, o in enumerate(plan.get("overlays", [])):
        lower, where = os.path.join(stage, f"l{i}"), os.path.join(stage, f"o{i}")
        _makedirs(lower)
        _makedirs(where)
        src = open_nofollow(o["lower"])
        try:  # the overlay reads the lower directory reached here, not what its path names later
            _mount(_at(src), lower, None, MS_BIND)
        finally:
            os.close(src)
        _mount("overlay", where, "overlay", MS_NOSUID | MS_NODEV,
               f"lowerdir={lower},upperdir={o['upper']},workdir={o['work']}")
        staged.append((where, o["target"]))
    for hidden in plan.get("hide", []):
        mount_fd(hidden, False, "tmpfs", MS_NOSUID | MS_NODEV, "rlark-hidden", "mode=0755,size=1m")
    for where, target in sorted(staged, key=lambda s: s[1].rstrip("/").count("/")):
        fd = open_nofollow(target, create=True)
        try:
            _mount(where, _at(fd), None, MS_MOVE)
        finally:
            os.close(fd)
    for t in plan.get("tmpfs", []):
        mount_fd(t["target"], False, "tmpfs", MS_NOSUID | MS_NODEV, "rlark-tmpfs",
                 f"mode={t.get('mode', '1777')},size={int(t['size'])}")
    if plan.get("mqueue"):
        mount_fd("/dev/mqueue", False, "mqueue", MS_NOSUID | MS_NODEV, "mqueue")
    if _c().umount2(stage.encode(), MNT_DETACH) != 0:
        raise SandboxError(f"umount {stage}: {os.strerror(ctypes.get_errno())}")


# --- the keeper -------------------------------------------------------------------------------------


def read_all(fd: int, cap: int = 64 * 1024 * 1024) -> bytes:
    """Everything the pipe ``fd`` gives until its end (at most ``cap`` bytes), then close it."""
    chunks, size = [], 0
    try:
        while size <= cap:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            chunks.append(data)
            size += len(data)
    finally:
        os.close(fd)
    if size > cap:
        raise ValueError(f"the workload's environment is over {cap} bytes")
    return b"".join(chunks)


class Config:
    """The keeper's settings: ``RLARK_KEEPER_*`` from its own environment (``own``), everything
    else from the workload's environment. Where the keeper runs as root (local runtime) its own
    environment is a fixed, minimal one and the workload's comes through the pipe
    ``RLARK_KEEPER_ENV_FD`` as JSON: no variable a Job sets (``LD_PRELOAD``, ``PATH``...) ever
    reaches a process of root. Without that descriptor (a Pod) the two are one environment."""

    def __init__(self, own: dict[str, str], workload: dict[str, str] | None = None):
        env = own if workload is None else dict(workload)

        def take(name: str) -> str:
            value = own.pop(name, "") or ""
            if workload is not None:
                env.pop(name, None)  # the workload never names the keeper's settings
            return value

        self.bootstrap = take("RLARK_KEEPER_BOOTSTRAP") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "worker.py")
        self.python = take("RLARK_KEEPER_PYTHON") or sys.executable
        uid, gid = take("RLARK_KEEPER_UID"), take("RLARK_KEEPER_GID")
        self.uid = int(uid) if uid else None
        self.gid = int(gid) if gid else self.uid
        raw = take("RLARK_KEEPER_SANDBOX")
        self.sandbox = json.loads(raw) if raw else None
        self.host_mntns = take("RLARK_KEEPER_HOST_MNTNS") or None
        self.run_script = env.get("RLARK_RUN_SCRIPT", "")
        self.is_head = env.get("RLINF_NODE_RANK", "") == "0"
        self.head_address = env.get("RLARK_HEAD_ADDRESS", "")
        # a Worker under its own uid starts in its own home when the Job names no workingDir
        self.working_dir = env.get("RLARK_WORKING_DIR") or (
            env.get("HOME") if self.uid is not None else None) or None
        self.stop_grace = float(env.get("RLARK_STOP_GRACE_SECONDS") or 8.0)
        # after the run script: the workload's last facts (Hydra outputs) and Ray's shutdown
        self.finish_grace = float(env.get("RLARK_FACTS_BUDGET_SECONDS") or 20.0) + self.stop_grace
        self.env = env


def exit_status(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Keeper:
    """One Worker's life as its keeper sees it; :meth:`run` returns the Worker's exit status."""

    def __init__(self, cfg: Config, chan: Channel):
        self.cfg, self.chan = cfg, chan
        self.bucket = Bucket(REPORT_RATE, REPORT_BURST)
        self.warnings = 0
        self.facts_bytes = 0
        self.dropped = 0
        self.dropped_said = 0.0
        self.stop_at: float | None = None  # monotonic time of the stop signal
        self.worker: subprocess.Popen | None = None
        self.worker_code: int | None = None
        self.run: subprocess.Popen | None = None
        self.run_code: int | None = None
        self.run_started = 0.0
        self.failed_reported = False
        self.ctl_w: int | None = None
        #: after the run script ended: when the workload must be done (its last facts, Ray's stop)
        self.finish_deadline: float | None = None
        #: the run script ended by itself (not stopped by the keeper): its status is the result
        self.run_ended_alone = False
        self.next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        #: when the keeper began stopping the run script because the node monitor is gone
        self.stop_run_at: float | None = None

    # identity of everything the keeper starts
    def _identity(self) -> dict:
        if self.cfg.uid is None:
            return {}
        return {"user": self.cfg.uid, "group": self.cfg.gid, "extra_groups": [], "umask": 0o077}

    def _workload_env(self) -> dict[str, str]:
        env = dict(self.cfg.env)
        bindir = os.path.dirname(self.cfg.python)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        return env

    def on_signal(self, signum, _frame) -> None:
        if self.stop_at is None:
            self.stop_at = time.monotonic()
            for p in (self.worker, self.run):
                _killpg(p, signal.SIGTERM)

    def _report(self, line: bytes) -> None:
        report, why = check_report(line)
        if report is None:
            self._drop(f"a report was refused: {why}")
            return
        if not self.bucket.take():
            self._drop("the workload reports faster than "
                       f"{REPORT_RATE:g} lines/s (bursts of {REPORT_BURST})")
            return
        kind = report.pop("event")
        if kind == "start_run":
            self._start_run()
            return
        if kind == "warning":
            self.warnings += 1
            if self.warnings > MAX_WARNINGS:
                self._drop(f"more than {MAX_WARNINGS} warnings")
                return
        if kind == "facts":
            self.facts_bytes += len(line)
            if self.facts_bytes > MAX_FACTS_BYTES:
                self._drop(f"more than {MAX_FACTS_BYTES} bytes of facts")
                return
        if kind == "failed":
            self.failed_reported = True
            if self.run is not None and self.run_code is None:
                _killpg(self.run, signal.SIGTERM)  # fail closed: e.g. a lost Ray node
        self.chan.emit(kind, **report)

    def _drop(self, why: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self.dropped_said >= 10.0:  # one line about it per 10 s, however many
            self.dropped_said = now
            self.chan.emit("warning", reason="ReportsDropped",
                           message=f"the keeper dropped {self.dropped} report(s) of this Worker "
                                   f"so far; latest: {why}")

    def _start_run(self) -> None:
        if not self.cfg.is_head or not self.cfg.run_script or self.run is not None \
                or self.stop_at is not None:
            self._drop("start_run: not the head, no run script, already started, or stopping")
            return
        env = self._workload_env()
        env["RAY_ADDRESS"] = self.cfg.head_address
        try:
            self.run = subprocess.Popen(
                [*SCRIPT_SHELL, self.cfg.run_script], env=env, cwd=self.cfg.working_dir,
                stdin=subprocess.DEVNULL, stdout=self.out_w, stderr=self.out_w,
                start_new_session=True, **self._identity())
        except OSError as exc:
            self.chan.emit("failed", reason="RunFailed", status=127,
                           message=f"the run script could not start: {exc.strerror or exc}")
            self.run_code = 127
            self.failed_reported = True
            return
        self.run_started = time.time()
        self.chan.emit("running", pid=self.run.pid)

    def _heartbeat(self, now: float) -> None:
        """An ``alive`` line every :data:`HEARTBEAT_SECONDS`, naming the workload's processes
        that are stopped (SIGSTOP, a debugger), which answer nothing while the keeper runs."""
        if now < self.next_heartbeat:
            return
        self.next_heartbeat = now + HEARTBEAT_SECONDS
        stopped = [name for name, p in (("bootstrap", self.worker), ("run script", self.run))
                   if p is not None and p.returncode is None and process_state(p.pid) in ("T", "t")]
        self.chan.emit("alive", **({"stopped": stopped} if stopped else {}))

    def _tell_worker(self, text: str) -> None:
        if self.ctl_w is None:
            return
        try:
            os.write(self.ctl_w, text.encode() + b"\n")
        except OSError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = exit_status(status)
            if self.worker is not None and pid == self.worker.pid:
                self.worker.returncode = code
                self.worker_code = code
            elif self.run is not None and pid == self.run.pid:
                self.run.returncode = code
                self.run_code = code
                self.run_ended_alone = not self.failed_reported and self.stop_at is None
                if self.run_ended_alone:
                    # ended by itself: its status is the Run's result (a run script the keeper
                    # stopped has none; the failure or the stop says why)
                    self.chan.emit("run_finished", exit_code=code)
                self._tell_worker(f"run_finished {code} {self.run_started:.3f}")
                self.finish_deadline = time.monotonic() + self.cfg.finish_grace
            # anything else: an orphan this PID 1 reaps

    def start(self) -> None:
        self.out_r, self.out_w = os.pipe()
        rep_r, rep_w = os.pipe()
        ctl_r, self.ctl_w = os.pipe()
        env = self._workload_env()
        env["RLARK_REPORT_FD"], env["RLARK_CONTROL_FD"] = str(rep_w), str(ctl_r)
        self.worker = subprocess.Popen(
            [self.cfg.python, self.cfg.bootstrap], env=env, cwd=self.cfg.working_dir,
            stdin=subprocess.DEVNULL, stdout=self.out_w, stderr=self.out_w,
            pass_fds=(rep_w, ctl_r), start_new_session=True, **self._identity())
        os.close(rep_w)
        os.close(ctl_r)
        self.rep_r = rep_r
        self.reports = Lines(max(REPORT_LIMITS.values()))

    def loop(self) -> int:
        sel = selectors.DefaultSelector()
        sel.register(self.out_r, selectors.EVENT_READ, "out")
        sel.register(self.rep_r, selectors.EVENT_READ, "rep")
        killed = False
        while True:
            for key, _ in sel.select(timeout=0.1):
                try:
                    data = os.read(key.fd, 1 << 16)
                except InterruptedError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    continue
                if key.data == "out":
                    self.chan.relay(data)
                else:
                    for line in self.reports.feed(data):
                        self._report(line)
            self._reap()
            now = time.monotonic()
            self._heartbeat(now)
            worker_done = self.worker_code is not None
            if self.stop_at is not None:
                if not killed and now - self.stop_at > self.cfg.stop_grace:
                    killed = True
                    for p in (self.worker, self.run):
                        _killpg(p, signal.SIGKILL)
                if worker_done and (self.run is None or self.run_code is not None):
                    break
                continue
            if self.run is not None and self.run_code is None and worker_done:
                # the node monitor is gone while the run script runs: nothing would notice a
                # lost Ray node any more, so the run stops (fail closed)
                if not self.failed_reported:
                    self.chan.emit("failed", reason="MonitorLost", status=EXIT_MONITOR_LOST,
                                   message="the Worker's bootstrap "
                                           f"exited with status {self.worker_code} while the "
                                           "run script ran; the run script is stopped")
                    self.failed_reported = True
                if self.stop_run_at is None:
                    self.stop_run_at = now
                    _killpg(self.run, signal.SIGTERM)
                elif now - self.stop_run_at > self.cfg.stop_grace:
                    _killpg(self.run, signal.SIGKILL)
                continue
            if self.run_code is not None:
                if worker_done:
                    break
                if self.finish_deadline is not None and now > self.finish_deadline:
                    _killpg(self.worker, signal.SIGKILL)
                continue
            if worker_done:
                break
        self._drain(sel)
        return self.outcome()

    def outcome(self) -> int:
        """The Worker's exit status: the run script's when it ended by itself; after a stop,
        143 (and a ``stopped`` line); after a reported failure, the workload's own status."""
        if self.run_ended_alone and self.run_code is not None:
            return self.run_code
        if self.stop_at is not None:
            self.chan.emit("stopped")
            return EXIT_STOPPED
        return self.worker_code if self.worker_code is not None else 1

    def _drain(self, sel) -> None:
        """What the workload wrote before it ended (bounded: Ray's daemons may hold the pipe)."""
        os.close(self.out_w)
        end = time.monotonic() + 1.0
        while sel.get_map() and time.monotonic() < end:
            for key, _ in sel.select(timeout=0.05):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    self.chan.relay(data)
                else:
                    for line in self.reports.feed(data):
                        self._report(line)


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (proc(5): field 3 of /proc/<pid>/stat, after the
    command in parentheses), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 1:].split()
    return rest[0].decode() if rest else None


def _killpg(proc: subprocess.Popen | None, sig: int) -> None:
    if proc is None or proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exec_jailed() -> int:
    """``keeper.py --exec``: build the view ``RLARK_KEEPER_SANDBOX`` describes (root, in a mount
    namespace of its own), become ``RLARK_KEEPER_UID``/``GID`` with no supplementary groups and
    no way to gain privileges, then run ``RLARK_KEEPER_EXEC`` (a JSON argv) with the
    environment ``RLARK_KEEPER_ENV_FD`` gives: how the server runs its own helpers that read
    what a Job names (composing its RLinf config), so they read what the Job's Workers may and
    nothing more. Standard input and output pass through. Exits 126 when the jail cannot be
    made (the reason on standard error)."""
    try:
        argv = json.loads(os.environ["RLARK_KEEPER_EXEC"])
        env = json.loads(read_all(int(os.environ["RLARK_KEEPER_ENV_FD"])))
        uid, gid = int(os.environ["RLARK_KEEPER_UID"]), int(os.environ["RLARK_KEEPER_GID"])
        apply_sandbox(json.loads(os.environ["RLARK_KEEPER_SANDBOX"]),
                      os.environ.get("RLARK_KEEPER_HOST_MNTNS") or None)
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        why = set_no_new_privs()
        if why:
            raise SandboxError(f"no_new_privs: {why}")
        os.chdir("/")
        os.execve(argv[0], argv, env)
    except (KeyError, ValueError, OSError, SandboxError) as exc:
        sys.stderr.write(f"rlark keeper --exec: {exc}\n")
    return 126


def main() -> int:
    """Entry point: ``python -I -S keeper.py`` with the Worker's environment (or the keeper's
    own, and the Worker's through ``RLARK_KEEPER_ENV_FD``: :class:`Config`)."""
    # the mount points the keeper makes must be enterable by the Worker's uid (0755), whatever
    # umask the server has (077)
    os.umask(0o022)
    if sys.argv[1:2] == ["--exec"]:
        return exec_jailed()
    chan = Channel(lambda data: write_all(1, data))
    own = dict(os.environ)
    try:
        fd = own.pop("RLARK_KEEPER_ENV_FD", "")
        workload = None
        if fd:
            workload = json.loads(read_all(int(fd)))
            if not isinstance(workload, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in workload.items()):
                raise ValueError("the workload's environment is not a JSON object of strings")
        cfg = Config(own, workload)
    except (ValueError, OSError) as exc:
        chan.emit("failed", reason="BadConfig", message=f"keeper settings: {exc}",
                  status=EXIT_BAD_CONFIG)
        chan.emit("exit", code=EXIT_BAD_CONFIG)
        return EXIT_BAD_CONFIG
    unprotected = make_undumpable()
    if cfg.sandbox is not None:
        try:
            apply_sandbox(cfg.sandbox, cfg.host_mntns)
        except SandboxError as exc:
            chan.emit("failed", reason="SandboxFailed", status=EXIT_SANDBOX_FAILED,
                      message=f"the Worker's file system view could not be made: {exc}")
            chan.emit("exit", code=EXIT_SANDBOX_FAILED)
            return EXIT_SANDBOX_FAILED
    set_no_new_privs()
    keeper = Keeper(cfg, chan)
    signal.signal(signal.SIGTERM, keeper.on_signal)
    signal.signal(signal.SIGINT, keeper.on_signal)
    # out of the workload's reach: it runs under another uid than the keeper's, or the keeper
    # is non-dumpable
    other_uid = cfg.uid is not None and cfg.uid != os.getuid()
    chan.emit("keeper", pid=os.getpid(),
              uid=cfg.uid if cfg.uid is not None else os.getuid(),
              protected=other_uid or not unprotected,
              **({"unprotected": unprotected} if unprotected and not other_uid else {}),
              sandbox=cfg.sandbox is not None, heartbeat=HEARTBEAT_SECONDS)
    try:
        keeper.start()
    except OSError as exc:
        chan.emit("failed", reason="BadConfig", status=EXIT_BAD_CONFIG,
                  message=f"the bootstrap {cfg.bootstrap!r} could not start with "
                          f"{cfg.python!r}: {exc.strerror or exc}")
        chan.emit("exit", code=EXIT_BAD_CONFIG)
        return EXIT_BAD_CONFIG
    code = keeper.loop()
    chan.emit("exit", code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
