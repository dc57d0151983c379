"""A keeper's object-storage mounts in FUSE mode: s3fs at each ``mountPath``, in the Worker's
own mount namespace, for the Worker's whole life.

The local runtime gives the keeper the same ``RLARK_KEEPER_OBJECT_STORAGE`` entries as for copy
mode (``objects.py``), with ``mode: "fuse"``, and the path of s3fs (s3fs-fuse, Debian's ``s3fs``
package; https://github.com/s3fs-fuse/s3fs-fuse) in ``RLARK_KEEPER_S3FS``. Before the workload
exists the keeper (root, after it built the Worker's view, ``sandbox.apply_sandbox``) runs, per
mount, ``s3fs BUCKET[:/PREFIX] MOUNTPATH -f -o ...`` (:func:`s3fs_argv`):

* **credentials** in a passwd file (``ACCESS_KEY:SECRET``, mode 0600, s3fs's ``passwd_file``
  option; s3fs refuses a file others may read) in a directory of root's, mode 0700, made for it
  in the Worker's ``/tmp``; s3fs reads it once when it starts, and both are removed once the
  mount answers, before the workload starts. Never in an argument (``/proc/<pid>/cmdline`` is
  world-readable) nor in any environment: s3fs gets :data:`S3FS_ENV`.
* **who may use it**: s3fs runs as root (root may mount FUSE without ``fusermount`` and may
  give ``allow_other`` without ``user_allow_other`` in /etc/fuse.conf, fuse(8)); ``uid``/``gid``
  make every file the Worker's, ``umask=0077``/``mp_umask=0077`` let no other uid in, ``ro``
  where the mount is ``readOnly`` (the kernel refuses writes, EROFS).
* **failure is said before the workload starts**: s3fs 1.90 mounts first and checks the bucket
  and keys in its FUSE ``init`` (``s3fs_check_service``), then exits (status 0) when that fails,
  with a ``[CRT]`` line naming why (``invalid credentials``, ``bucket or key not found``,
  ``unable to connect``). So the keeper waits (bounded: :data:`MOUNT_SECONDS`) until the mount
  is in ``/proc/self/mountinfo`` at exactly ``mountPath`` and a directory listing through it
  answers (which only s3fs after a passed ``init`` can do) while s3fs still runs; anything else
  is ``MountFailed`` with s3fs's own last lines.
* **it ends with the Worker**: after the workload, and everything left of it, is gone (the
  keeper is PID 1 of the Worker's PID namespace), the keeper unmounts (umount2) and waits
  (bounded) for s3fs to finish what it was writing and exit. s3fs sends a file to the bucket when
  it is closed, so what the workload closed is there. A keeper killed outright takes its PID
  namespace with it (the kernel kills s3fs) and its mount namespace (the mount) with the last
  process. An s3fs that exits while the Worker runs fails the Worker (``MountFailed``).

Each mount writes a ``mount`` line (``name``, ``mode: "fuse"``, ``direction``: ``mount`` then
``unmount``, ``seconds``) on the keeper's channel.
"""

from __future__ import annotations

import collections
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Callable

from rlark.bootstrap.sandbox import MNT_DETACH, _c

#: s3fs's whole environment: nothing of the server's or the Job's (no AWS_* keys, no
#: ~/.passwd-s3fs: passwd_file is always given)
S3FS_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C.UTF-8"}
#: the s3fs setting's name in the keeper's own environment
S3FS_VAR = "RLARK_KEEPER_S3FS"
#: seconds s3fs may take to mount and check its bucket (its own connect_timeout is
#: :data:`CONNECT_SECONDS`, with :data:`RETRIES` tries)
MOUNT_SECONDS = 60.0
CONNECT_SECONDS, RETRIES = 10, 3
#: s3fs's last lines kept for a failure's message
TAIL_LINES = 12
EBUSY, EINVAL, ENOENT = 16, 22, 2


def s3fs_argv(s3fs: str, m: dict, passwd_file: str | None, uid: int, gid: int) -> list[str]:
    """The s3fs command line for mount ``m`` (a keeper entry: ``bucket``, ``prefix``, ``path``,
    ``read_only``, ``endpoint``, ``region``) (pure). Options from s3fs(1) 1.90: ``url`` and
    ``use_path_request_style`` for an endpoint (SeaweedFS, MinIO and other S3-compatible
    servers answer path-style requests), ``endpoint`` (the signing region), ``passwd_file``
    (else ``public_bucket=1``: anonymous requests), ``allow_other``, ``uid``, ``gid``,
    ``umask``, ``mp_umask``, ``ro``, ``retries``, ``connect_timeout``; ``-f``: in the
    foreground, so the keeper is its parent and sees it end.

    Raises:
        ValueError: an endpoint or region with a character that would end s3fs's option (a
            comma) or is not printable: it would set other options of a process of root.
    """
    for field in ("endpoint", "region"):
        value = m.get(field) or ""
        if any(ch == "," or not ch.isprintable() or ch.isspace() for ch in value):
            raise ValueError(f"objectStorage.{field} {value[:200]!r} has a comma, a space or "
                             "a control character, which s3fs's options cannot carry")
    where = m["bucket"] + (":/" + m["prefix"] if m.get("prefix") else "")
    opts = []
    if m.get("endpoint"):
        opts += [f"url={m['endpoint'].rstrip('/')}", "use_path_request_style"]
    opts.append(f"endpoint={m.get('region') or 'us-east-1'}")
    opts.append(f"passwd_file={passwd_file}" if passwd_file else "public_bucket=1")
    opts += ["allow_other", f"uid={uid}", f"gid={gid}", "umask=0077", "mp_umask=0077",
             f"retries={RETRIES}", f"connect_timeout={CONNECT_SECONDS}"]
    if m.get("read_only"):
        opts.append("ro")
    return [s3fs, where, m["path"], "-f", "-o", ",".join(opts)]


def mountinfo_has(mountinfo: str, path: str, fstype_prefix: str = "fuse") -> bool:
    """Whether ``mountinfo`` (``/proc/self/mountinfo``'s text, proc(5)) has a mount of a type
    starting with ``fstype_prefix`` at exactly ``path`` (its octal escapes undone) (pure)."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4].replace("\\040", " ").replace("\\011", "\t") \
            .replace("\\012", "\n").replace("\\134", "\\")
        if point == path and right.split()[0].startswith(fstype_prefix):
            return True
    return False


def s3fs_message(lines: list[str]) -> str:
    """What s3fs said, for a failure's message (pure): its error and critical lines (``[CRT]``,
    ``[ERR]``) without their time stamps, else its last lines; "" when it said nothing."""
    def bare(line: str) -> str:
        return line.split(" ", 1)[1] if line[:4].isdigit() and " " in line else line

    wanted = [bare(x) for x in lines if "[CRT]" in x or "[ERR]" in x] \
        or [bare(x) for x in lines[-3:]]
    return " | ".join(x.strip() for x in wanted if x.strip())[:2000]


class _Mounted:
    def __init__(self, m: dict, proc: subprocess.Popen):
        self.m, self.proc = m, proc
        self.tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
        self.code: int | None = None  # exit status once reaped
        self.reader = threading.Thread(target=_drain, args=(proc, self.tail), daemon=True,
                                       name=f"s3fs-{m['name']}")
        self.reader.start()

    def said(self) -> str:
        """s3fs's words (:func:`s3fs_message`) once it has exited: all it wrote is read
        (bounded: a child it left may hold the pipe open)."""
        self.reader.join(timeout=2.0)
        return s3fs_message(list(self.tail))


class FuseMounts:
    """One Worker's FUSE-mode mounts, as its keeper runs them (see the module's docstring)."""

    def __init__(self, mounts: list[dict], s3fs: str, uid: int, gid: int, chan):
        self.mounts, self.s3fs, self.uid, self.gid, self.chan = mounts, s3fs, uid, gid, chan
        self.up: list[_Mounted] = []

    def writable(self) -> bool:
        """Some mount was made and is not ``readOnly`` (the Worker's outputs go through it)."""
        return any(not u.m.get("read_only") for u in self.up)

    def owns(self, pid: int) -> _Mounted | None:
        """The mount whose s3fs is ``pid``, if any."""
        return next((u for u in self.up if u.proc.pid == pid), None)

    def note_exit(self, pid: int, code: int) -> _Mounted | None:
        """Keep the exit status of a reaped s3fs (the keeper reaps every child, ``waitpid(-1)``);
        returns its mount, None when ``pid`` is no s3fs."""
        u = self.owns(pid)
        if u is not None:
            u.code = u.proc.returncode = code
        return u

    def mount_all(self, stopping: Callable[[], bool], tick: Callable[[], None]) -> str | None:
        """Mount every entry; None when all answer, else the failure's message (the mount, its
        source and s3fs's own words). ``stopping``: polled, True gives up; ``tick``: called
        while waiting (the keeper's heartbeat)."""
        if os.geteuid() != 0:
            return "FUSE mounts need the keeper to run as root in the Worker's own mount namespace"
        for m in self.mounts:
            started = time.monotonic()
            why = self._mount(m, stopping, tick)
            if why:
                return f"mount {m['name']!r} ({m['source']}): s3fs could not mount it: {why}"
            self.chan.emit("mount", name=m["name"], mode="fuse", direction="mount",
                           seconds=round(time.monotonic() - started, 3),
                           **({"requested": m["requested"]} if m.get("requested") else {}))
        return None

    def _mount(self, m: dict, stopping: Callable[[], bool], tick: Callable[[], None]) -> str:
        private = tempfile.mkdtemp(prefix=".rlark-s3fs-", dir="/tmp")  # 0700, root's
        try:
            passwd = None
            if m.get("access_key_id"):
                passwd = os.path.join(private, "passwd")
                fd = os.open(passwd, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with open(fd, "w") as f:
                    f.write(f"{m['access_key_id']}:{m.get('secret_access_key') or ''}\n")
            try:
                argv = s3fs_argv(self.s3fs, m, passwd, self.uid, self.gid)
            except ValueError as exc:
                return str(exc)
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, env=dict(S3FS_ENV), cwd="/",
                                        start_new_session=True)
            except OSError as exc:
                return f"{self.s3fs}: {exc.strerror or exc}"
            u = _Mounted(m, proc)
            self.up.append(u)
            why = self._wait_answering(u, stopping, tick)
            if why:
                self._stop(u, time.monotonic() + 5.0)
                self.up.remove(u)
            return why
        finally:
            shutil.rmtree(private, ignore_errors=True)

    def _wait_answering(self, u: _Mounted, stopping: Callable[[], bool],
                        tick: Callable[[], None]) -> str:
        """"" once the mount at ``path`` answers a listing, else why not (bounded)."""
        path = u.m["path"]
        deadline = time.monotonic() + MOUNT_SECONDS
        listed: list = []

        def listing() -> None:
            try:
                os.listdir(path)
                listed.append(None)
            except OSError as exc:
                listed.append(exc)

        prober: threading.Thread | None = None
        while True:
            if u.proc.poll() is not None or u.code is not None:
                said = u.said()
                return (f"s3fs exited (status {u.proc.returncode}) before the mount answered"
                        + (f": {said}" if said else ""))
            if prober is None and _mounted(path):
                prober = threading.Thread(target=listing, daemon=True)
                prober.start()
            if listed:
                if listed[0] is None and u.proc.poll() is None:
                    return ""
                if listed[0] is not None:
                    # s3fs exits after a failed check: its words say more than the errno
                    try:
                        u.proc.wait(timeout=2.0)
                    except subprocess.TimeoutExpired:
                        pass
                    said = u.said() if u.proc.poll() is not None else \
                        s3fs_message(list(u.tail))
                    return (f"listing {path} through it failed: {listed[0].strerror}"
                            + (f"; s3fs: {said}" if said else ""))
            if stopping():
                return "the Worker was stopped while it mounted"
            if time.monotonic() > deadline:
                said = s3fs_message(list(u.tail))
                return (f"it did not answer within {MOUNT_SECONDS:.0f} s"
                        + (f"; s3fs: {said}" if said else ""))
            tick()
            time.sleep(0.05)  # polling interval of the bounded wait above

    def unmount_all(self, deadline: float) -> list[str]:
        """Unmount every mount (the workload is gone) and wait, until ``deadline`` (monotonic
        seconds), for each s3fs to exit; returns the failures' messages (none: all done)."""
        failures = []
        for u in list(self.up):
            started = time.monotonic()
            why = self._stop(u, deadline)
            if why:
                failures.append(f"mount {u.m['name']!r} ({u.m['source']}): {why}")
            else:
                self.chan.emit("mount", name=u.m["name"], mode="fuse", direction="unmount",
                               seconds=round(time.monotonic() - started, 3))
        self.up = []
        return failures

    def _stop(self, u: _Mounted, deadline: float) -> str:
        """Unmount ``u`` and reap its s3fs; "" when s3fs ended by itself after the unmount."""
        lost = u.code is not None or u.proc.poll() is not None
        why = ""
        if _mounted(u.m["path"]):
            if _c().umount2(u.m["path"].encode(), 0) != 0:
                err = ctypes.get_errno()
                if err == EBUSY:  # something still holds it: gone from the view all the same
                    _c().umount2(u.m["path"].encode(), MNT_DETACH)
                    why = "it was still busy when the Worker ended (detached)"
                elif err not in (EINVAL, ENOENT):
                    why = f"umount {u.m['path']}: {os.strerror(err)}"
        if lost:
            said = u.said()
            return (f"s3fs had exited (status {u.proc.returncode}) before the Worker ended; "
                    "what was written after that is not in the bucket"
                    + (f": {said}" if said else ""))
        while u.code is None and u.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling interval: s3fs finishes its uploads, then exits
        if u.code is None and u.proc.poll() is None:
            try:
                os.killpg(u.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            u.proc.wait()
            return "s3fs did not finish after the unmount in time and was killed; files it " \
                   "was still sending may be missing from the bucket"
        return why


def _mounted(path: str) -> bool:
    try:
        with open("/proc/self/mountinfo") as f:
            return mountinfo_has(f.read(), path)
    except OSError:
        return False


def _drain(proc: subprocess.Popen, tail: collections.deque) -> None:
    """Keep s3fs's last lines (its output must be read, or it blocks once the pipe is full)."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        tail.append(raw.decode(errors="replace").rstrip("\n"))


def kill_all_but(spare: set[int], reaped: Callable[[int, int], object],
                 seconds: float = 10.0) -> None:
    """SIGKILL every process of this PID namespace but this one and ``spare`` (the s3fs
    processes, which must outlive the workload to finish its files), and reap them, within
    ``seconds``; ``reaped(pid, status)`` is told of every child reaped meanwhile. Only as PID 1
    of a PID namespace whose /proc is its own (the local runtime's ``unshare --mount-proc``);
    elsewhere nothing."""
    if os.getpid() != 1:
        return
    deadline = time.monotonic() + seconds
    while True:
        others = [int(n) for n in os.listdir("/proc") if n.isdigit()
                  and int(n) != 1 and int(n) not in spare]
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            reaped(pid, 128 - code if code < 0 else code)
        if not others or time.monotonic() > deadline:
            return
        time.sleep(0.02)  # polling interval: killed processes become zombies, then reapable
