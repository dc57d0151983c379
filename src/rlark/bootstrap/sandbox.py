"""The keeper's protection and the Worker's sandbox (thin: system calls through libc).

* :func:`make_undumpable` / :func:`set_no_new_privs`: prctl(2) on the keeper itself.
* :func:`apply_sandbox`: the Worker's mount namespace from the plan the local runtime made
  (``rlark.runtimes.local.sandbox.plan``), every path reached without following a link
  (:func:`open_nofollow`).
* :func:`exec_jailed`: the same view for a helper of the server (``exec``: the RLinf config
  composer), run as an unprivileged uid.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat as stat_module
import sys

from rlark.bootstrap.relay import read_all

_libc = None


def _c():
    global _libc
    if _libc is None:
        # the interpreter's own symbols include libc's: no ldconfig or compiler run to find it
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


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


PR_SET_CHILD_SUBREAPER = 36


def set_subreaper() -> str:
    """``prctl(PR_SET_CHILD_SUBREAPER, 1)``: a process below this one whose parent ends is
    re-parented to this one, not to init (prctl(2)). Returns "" when done, else why not."""
    try:
        if _c().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
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


def remount_read_only(path: str) -> None:
    """Make the bind mount at ``path`` read-only (root, in the Worker's own mount namespace): a
    copy-mode object-storage mount that asks for ``readOnly``, once its copy is in.

    Raises:
        SandboxError: ``path`` is reached through a link, or the remount failed.
    """
    fd = open_nofollow(path)
    try:
        _mount(None, _at(fd), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        os.close(fd)


def exec_jailed() -> int:
    """``exec`` (``python -I -S rlark-bootstrap.pyz exec``): build the view ``RLARK_KEEPER_SANDBOX`` describes (root, in a mount
    namespace of its own), become ``RLARK_KEEPER_UID``/``GID`` with no supplementary groups and
    no way to gain privileges, then run ``RLARK_KEEPER_EXEC`` (a JSON argv) with the
    environment ``RLARK_KEEPER_ENV_FD`` gives: how the server runs its own helpers that read
    what a Job names (composing its RLinf config), so they read what the Job's Workers may and
    nothing more. Standard input and output pass through. Exits 126 when the jail cannot be
    made (the reason on standard error)."""
    # the mount points made here must be enterable by the jailed uid (0755), whatever umask the
    # server has (077)
    os.umask(0o022)
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
